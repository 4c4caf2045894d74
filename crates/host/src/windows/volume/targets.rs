//! The Windows volume host's answers to the core's volume rules
//! ([`csi_proxy_core::volume::rules`]): what a volume holds, what is mounted at a target, the
//! format record, and the acts (MSFT_Volume.Format, SetVolumeMountPointW).

use super::*;
use csi_proxy_core::volume::rules::{Content, FormatTarget, MountTarget, Occupant};

/// What the volume holds: the filesystem Windows recognises (named by its serial number), else
/// any signature our probe knows in its first bytes (a filesystem of another OS, LUKS, LVM...).
fn content(os: &dyn Win32, op: &str, id: &str, v: &VolumeName) -> Result<Option<Content>> {
    if let Some(found) = filesystem(os, op, id, v)? {
        return Ok(Some(found));
    }
    Ok(
        signatures::probe(&read_head(os, op, id, v)?).map(|sig| Content {
            kind: sig.kind.to_string(),
            id: sig.uuid.map(|u| signatures::uuid_string(&u)),
            shown: sig.kind.to_string(),
        }),
    )
}

/// The filesystem Windows recognises on the volume, named by its serial number.
fn filesystem(os: &dyn Win32, op: &str, id: &str, v: &VolumeName) -> Result<Option<Content>> {
    Ok(
        volume_filesystem(os, op, id, v)?.map(|(fs, serial)| Content {
            shown: fs.clone(),
            kind: fs,
            id: Some(serial_text(serial)),
        }),
    )
}

/// One resolved volume (and, for MountVolume, its target), as the core's rules ask about it.
pub(super) struct Resolved<'a> {
    pub(super) host: &'a WindowsVolumeHost,
    pub(super) id: &'a str,
    pub(super) v: VolumeName,
    pub(super) target: &'a str,
}

impl Resolved<'_> {
    fn os(&self) -> &dyn Win32 {
        self.host.os()
    }

    /// IsVolumeFormatted's answer: a filesystem Windows recognises, but for this daemon's own
    /// interrupted format ([`rules::is_formatted`]).
    pub(super) fn formatted(&self, op: &str) -> Result<bool> {
        let found = filesystem(self.os(), op, self.id, &self.v)?;
        Ok(rules::is_formatted(
            found.as_ref(),
            self.format_record().as_ref(),
        ))
    }

    fn format_record(&self) -> Option<FormatRecord> {
        self.host.records.read(self.v.guid())
    }

    /// What is mounted at the target, compared by identity: the volume may have been named by
    /// another of its GUID paths than the one its mount points report.
    pub(super) fn occupant_at(&self, op: &str) -> Result<Occupant> {
        Ok(match volume_at(self.os(), op, self.target)? {
            None => Occupant::Nothing,
            Some(cur)
                if names::same_volume(&cur, self.id)
                    || names::same_volume(&cur, &canonical(self.os(), op, self.id, &self.v)?) =>
            {
                Occupant::ThisVolume
            }
            Some(cur) => Occupant::Other(format!("volume {cur}")),
        })
    }
}

impl FormatTarget for Resolved<'_> {
    fn object(&self) -> String {
        shown(self.id)
    }

    fn mounted_at(&self) -> Result<Option<String>> {
        Ok(
            volume_path_names(self.os(), "FormatVolume", &self.v.guid_path())?
                .into_iter()
                .next(),
        )
    }

    fn content(&self) -> Result<Option<Content>> {
        content(self.os(), "FormatVolume", self.id, &self.v)
    }

    fn record(&self) -> Option<FormatRecord> {
        self.format_record()
    }

    fn write_record(&self, record: &FormatRecord) -> Result<()> {
        let records = &self.host.records;
        records.write(self.v.guid(), record, self.id).map_err(|e| {
            Error::io("FormatVolume", shown(self.id), &e)
                .context(format!("state dir {}", records.dir().display()))
        })
    }

    fn new_filesystem(&self) -> Result<(String, Option<String>)> {
        // The serial number is Windows' choice, known once the format is done.
        Ok(("NTFS".into(), None))
    }

    fn make_filesystem(&self, _id: Option<&str>, _finishing: bool) -> Result<()> {
        wmi_format(self.os(), "FormatVolume", self.id, &self.v)
    }
}

impl MountTarget for Resolved<'_> {
    fn object(&self) -> String {
        format!("{} at {:?}", shown(self.id), self.target)
    }

    fn target_exists(&self) -> Result<bool> {
        exists(self.os(), "MountVolume", self.target)
    }

    fn occupant(&self) -> Result<Occupant> {
        self.occupant_at("MountVolume")
    }

    fn target_empty(&self) -> Result<Option<bool>> {
        // SetVolumeMountPointW refuses a directory that is not empty (ERROR_DIR_NOT_EMPTY).
        Ok(None)
    }

    fn content(&self) -> Result<Option<Content>> {
        content(self.os(), "MountVolume", self.id, &self.v)
    }

    fn record(&self) -> Option<FormatRecord> {
        self.format_record()
    }

    fn mount(&self) -> Result<()> {
        const OP: &str = "MountVolume";
        let object = MountTarget::object(self);
        self.os()
            .set_volume_mount_point(&mount_point_path(self.target), &self.v.guid_path())
            .map_err(|e| match e.code {
                code::DIR_NOT_EMPTY => Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    &object,
                    "target_path is not empty",
                ),
                _ => os_error(OP, &object, &e, &[]),
            })?;
        tracing::info!(volume = self.id, target = self.target, "mounted");
        Ok(())
    }
}
