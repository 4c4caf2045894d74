//! FormatVolume on Linux: the core's rule ([`rules::format`]) over this host's primitives.
//!
//! What the volume holds is read by our own probe ([`signatures`], start and end of the volume)
//! and, when that finds nothing, by libblkid's full probe (`blkid -p`, which knows every format
//! util-linux knows, wherever it keeps its superblock); mkfs checks once more (mkfs.xfs refuses
//! an existing signature unless forced; mke2fs checks only when its input and output are a
//! terminal, so for ext4 libblkid is the last word). Force is given only when finishing a
//! format of ours whose record is pending.

use super::*;
use crate::linux::blkid;
use csi_proxy_core::volume::rules::{self, Content, FormatTarget};

/// One resolved volume, as the core's format rule asks about it.
pub(super) struct Formatting<'a> {
    pub(super) host: &'a LinuxVolumeHost,
    pub(super) vol: Volume,
}

const OP: &str = "FormatVolume";

/// A signature our probe found, as the rules see it.
pub(super) fn content_of(sig: &Signature) -> Content {
    let id = sig.uuid.map(|u| signatures::uuid_string(&u));
    Content {
        kind: sig.kind.to_string(),
        shown: match &id {
            Some(u) => format!("{} (UUID {u})", sig.kind),
            None => sig.kind.to_string(),
        },
        id,
    }
}

impl FormatTarget for Formatting<'_> {
    fn object(&self) -> String {
        shown(&self.vol.id)
    }

    fn mounted_at(&self) -> Result<Option<String>> {
        let table = read_mountinfo(&self.host.os, OP)?;
        Ok(self
            .vol
            .mounts(&table)
            .first()
            .map(|m| m.mount_point.display().to_string()))
    }

    fn content(&self) -> Result<Option<Content>> {
        if let (Some(sig), _) = self.host.probe(OP, &self.vol)? {
            return Ok(Some(content_of(&sig)));
        }
        libblkid_content(
            &*self.host.os,
            &self.object(),
            &self.vol.node().to_string_lossy(),
        )
    }

    fn record(&self) -> Option<FormatRecord> {
        self.host.read_intent(&self.vol)
    }

    fn write_record(&self, record: &FormatRecord) -> Result<()> {
        self.host.write_intent(OP, &self.vol, record)
    }

    fn new_filesystem(&self) -> Result<(String, Option<String>)> {
        let uuid = (self.host.os)
            .random16()
            .map_err(|e| Error::io(OP, self.object(), &e))?;
        Ok((
            self.host.fs_type.name().to_string(),
            Some(signatures::uuid_string(&uuid)),
        ))
    }

    fn make_filesystem(&self, id: Option<&str>, finishing: bool) -> Result<()> {
        let object = self.object();
        let vol = &self.vol;
        let uuid = id.unwrap_or_default();
        let node = vol.node().to_string_lossy().into_owned();
        vol.unchanged(OP)?;
        let xfs_uuid = format!("uuid={uuid}");
        let (program, mut args, force) = match self.host.fs_type {
            // `-m 0`: no blocks reserved for root (k8s mount-utils does the same): a volume's
            // users are pods, which would hit ENOSPC at 95 % otherwise.
            FsType::Ext4 => ("mkfs.ext4", vec!["-q", "-m", "0", "-U", uuid], "-F"),
            FsType::Xfs => ("mkfs.xfs", vec!["-q", "-m", xfs_uuid.as_str()], "-f"),
        };
        if finishing {
            // Our probe may have stopped at the unfinished filesystem of ours; before forcing
            // mkfs over it, libblkid must find nothing else (no other UUID, not several
            // signatures). A blank volume was already probed by libblkid in `content`.
            match libblkid_content(&*self.host.os, &object, &node)? {
                None => {}
                Some(c) if c.id.is_some() && c.id.as_deref() == id => {}
                Some(c) => {
                    return Err(Error::new(
                        Kind::FailedPrecondition,
                        OP,
                        &object,
                        format!(
                            "the volume already holds {}; refusing to format over it",
                            c.shown
                        ),
                    ));
                }
            }
            // Finishing our own interrupted format: what it left may look like a filesystem.
            args.push(force);
        }
        args.push(&node);
        tool::run_on(&*self.host.os, OP, &object, program, &args).map_err(|r| match r {
            Ok(f) => f.error(OP, &object, program, &MKFS_VOLUME_REASONS),
            Err(e) => e,
        })?;
        vol.file.fsync().map_err(|e| Error::io(OP, &object, &e))?;
        vol.unchanged(OP)
            .map_err(|e| e.context("after mkfs (the format may have reached another device)"))
    }
}

impl LinuxVolumeHost {
    pub(super) fn format(&self, id: &str) -> Result<()> {
        let vol = self.resolve_partition(OP, id, "is never formatted; partition the disk")?;
        rules::format(OP, &Formatting { host: self, vol })
    }
}

/// What libblkid's low-level probe of `node` finds ([`blkid::probe`]), as the rules see it.
fn libblkid_content(os: &dyn os::LinuxOs, object: &str, node: &str) -> Result<Option<Content>> {
    Ok(blkid::probe(os, OP, object, node)?.map(|found| {
        let shown = found.shown();
        match found {
            blkid::Found::One { kind, uuid, table } => Content {
                kind: kind
                    .or_else(|| table.map(|t| format!("a {t} partition table")))
                    .unwrap_or_default(),
                id: uuid,
                shown,
            },
            blkid::Found::Ambivalent(_) => Content {
                kind: "several signatures".into(),
                id: None,
                shown,
            },
        }
    }))
}

/// What mkfs says when the volume is the reason it refuses (an existing signature, a volume too
/// small for the filesystem): FAILED_PRECONDITION, not INTERNAL.
const MKFS_VOLUME_REASONS: [&str; 5] = [
    "must be larger than",
    "too small",
    "appears to contain",
    "contains a",
    "is mounted",
];
