//! Naming and resolving volumes: a volume ID from a disk and partition, and back.

use super::*;

/// A resolved volume.
#[derive(Clone)]
pub(super) struct Volume {
    pub(super) id: String,
    pub(super) disk: Disk,
    /// Partition number; 0 for a whole-disk filesystem.
    pub(super) part: u32,
    /// Kernel name of the block device holding the filesystem.
    pub(super) name: String,
    pub(super) dev: (u32, u32),
    /// The ID's third part: PARTUUID, or the filesystem UUID for a whole disk.
    pub(super) uuid: String,
    /// The volume's block device, opened when the ID was resolved and held for the whole
    /// request: reads go through it, and its diskseq tells whether the disk is still the one
    /// resolved (see [`Volume::unchanged`]).
    pub(super) file: Arc<Fd>,
    /// The whole disk, opened with the volume (the same handle for a whole-disk volume): the
    /// re-checks of [`Volume::unchanged`] read its table through it instead of opening the node
    /// by name again.
    pub(super) disk_file: Arc<Fd>,
    /// The disk's logical sector size, read from sysfs once.
    pub(super) sector: u64,
    /// See [`Volume::record_key`]; read from sysfs when first asked.
    record_key: std::sync::OnceLock<String>,
}

impl Volume {
    pub(super) fn node(&self) -> PathBuf {
        block::node(&self.name)
    }

    /// Checks, right before and after anything that changes the volume, that it is still the
    /// volume the request resolved: the held device's disk has the same diskseq (a detach and
    /// attach in between gives a new one, also when the kernel name and device number are
    /// reused) and the partition still carries the ID's unique GUID. Tools and mount(2) take a
    /// device path, so this narrows the window in which a swapped disk could be acted on to the
    /// moment between the check and the call; a change seen after the call is reported.
    pub(super) fn unchanged(&self, op: &str) -> Result<()> {
        let gone = |why: String| Error::new(Kind::NotFound, op, shown(&self.id), why);
        let seq = self
            .file
            .diskseq()
            .map_err(|e| Error::io(op, shown(&self.id), &e))?;
        if seq != u64::from(self.disk.number) {
            return Err(gone(format!(
                "disk {} was detached or replaced while the request ran (its device now belongs to diskseq {seq})",
                self.disk.number
            )));
        }
        let uuid = volume_uuid(op, &self.disk, self.sector, &self.disk_file, self.part)?;
        if uuid != self.uuid {
            return Err(gone(format!(
                "partition {} of disk {} became a different volume ({uuid}) while the request ran",
                self.part, self.disk.number
            )));
        }
        Ok(())
    }

    /// What the volume's format record is kept under: the ID's third part (PARTUUID, or
    /// `<disk signature>-<P>` on MBR) and the disk's own identity, since clones and snapshots
    /// share a PARTUUID and every MBR disk without a signature has `00000000-0P`. The disk's
    /// identity is its page 0x83 ID and serial number (a loop device's: its backing file),
    /// which outlive a reboot; a disk with neither has only its diskseq, so its records last
    /// until the next boot.
    pub(super) fn record_key(&self, os: &Os) -> &str {
        self.record_key.get_or_init(|| {
            use md5::{Digest, Md5};
            let identity = super::clones::identity(os, &self.disk)
                .unwrap_or_else(|| format!("diskseq\0{}", self.disk.number));
            let digest = Md5::digest(identity.as_bytes());
            let disk: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("{}-{disk}", self.uuid)
        })
    }

    pub(super) fn mounts<'t>(&self, table: &'t [MountInfo]) -> Vec<&'t MountInfo> {
        let node = self.node().to_string_lossy().into_owned();
        table
            .iter()
            .filter(|m| (m.major, m.minor) == self.dev || m.source == node)
            .collect()
    }
}

pub(super) fn shown(id: &str) -> String {
    format!("volume {id:?}")
}

pub(super) fn parse_id(id: &str) -> Option<(u32, u32, &str)> {
    let rest = id.strip_prefix("diskseq")?;
    let (n, rest) = rest.split_once("-part")?;
    let (p, uuid) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(n) || !digits(p) || uuid.is_empty() || uuid.len() > 36 {
        return None;
    }
    if !(uuid == "none"
        || uuid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase() || b == b'-'))
    {
        return None;
    }
    Some((n.parse().ok()?, p.parse().ok()?, uuid))
}

/// The parts of a volume ID, INVALID_ARGUMENT when it is not one of this host's.
pub(super) fn parse_or_refuse<'i>(op: &str, id: &'i str) -> Result<(u32, u32, &'i str)> {
    parse_id(id).ok_or_else(|| {
        Error::invalid(
            op,
            shown(id),
            "not a volume ID of this host (expected diskseq<N>-part<P>-<uuid>, as ListVolumesOnDisk returns)",
        )
    })
}

/// The third part of a volume ID for partition `part` of `disk` (0: the whole disk).
fn volume_uuid(op: &str, disk: &Disk, sector: u64, f: &Fd, part: u32) -> Result<String> {
    if part == 0 {
        let head = f
            .read_at(0, signatures::PROBE_LEN)
            .map_err(|e| io_err(op, disk, "read", &e))?;
        return Ok(signatures::probe(&head)
            .and_then(|s| s.uuid)
            .map_or_else(|| "none".to_string(), |u| signatures::uuid_string(&u)));
    }
    let total = disk.size / sector;
    let head = f
        .read_at(0, gpt::head_len(sector))
        .map_err(|e| io_err(op, disk, "read", &e))?;
    // Naming reads the backup too when the primary is damaged (a cut-off table write): the
    // partitions are still the backup's, and an ID must not turn into an MBR-style one meanwhile.
    let table = match Gpt::parse(&head, sector, total) {
        Ok(Some(t)) => Some(t),
        _ if gpt::mbr_partitions(&head).iter().any(|p| p.kind == 0xEE) => {
            let tail = crate::linux::disk::read_tail(op, disk, sector, f)?;
            match gpt::find(&head, &tail, sector, total) {
                Ok(gpt::Found::Primary(t) | gpt::Found::Backup(t)) => Some(t),
                Ok(gpt::Found::None) => None,
                // A GPT disk whose table lies or is damaged at both ends: its partitions have
                // no trustworthy names (an MBR-style one would be a different volume's).
                Err(e) => {
                    return Err(refused(
                        op,
                        disk,
                        format!("{e}; the volumes of a disk whose GPT is unreadable are not named"),
                    ));
                }
            }
        }
        _ => None,
    };
    Ok(match table {
        Some(t) => t
            .partitions()
            .into_iter()
            .find(|p| p.number == part)
            .map_or_else(|| "none".into(), |p| p.unique_guid.to_string()),
        // An MBR-style name only for an entry the MBR has: a disk without a table has none.
        None if gpt::mbr_data_extents(&head, sector)
            .iter()
            .any(|e| e.0 == part) =>
        {
            format!("{:08x}-{part:02x}", gpt::mbr_disk_signature(&head))
        }
        None => "none".into(),
    })
}

/// The volume `part` of `disk` (0: the whole disk). With `sync` (the caller holds the disk
/// and is about to change the volume), a partition the table lists but the kernel lacks is
/// added first; a read never changes the kernel's partitions.
pub(super) fn make_volume(os: &Os, op: &str, disk: &Disk, part: u32, sync: Sync) -> Result<Volume> {
    let disk_node = || {
        Fd::open(os, &block::node(&disk.name), Open::Read).map_err(|e| io_err(op, disk, "open", &e))
    };
    let (name, disk_file) = if part == 0 {
        (disk.name.clone(), None)
    } else {
        let disk_file = disk_node()?;
        (
            partition_name(os, op, disk, &disk_file, part, sync)?,
            Some(disk_file),
        )
    };
    let sys = if part == 0 {
        block::sys_disk(&disk.name)
    } else {
        block::sys_disk(&disk.name).join(&name)
    };
    let dev = block::dev_numbers(os, &sys).map_err(|e| io_err(op, disk, "read dev", &e))?;
    let file = Arc::new(open_volume_device(os, op, disk, &name, dev)?);
    let disk_file = disk_file.map_or_else(|| file.clone(), Arc::new);
    let sector = block::sector_size(os, disk);
    let uuid = volume_uuid(op, disk, sector, &disk_file, part)?;
    Ok(Volume {
        id: format!("diskseq{}-part{part}-{uuid}", disk.number),
        disk: disk.clone(),
        part,
        name,
        dev,
        uuid,
        file,
        disk_file,
        sector,
        record_key: std::sync::OnceLock::new(),
    })
}

/// The kernel name of partition `part` of `disk`, which must be one the disk's own table lists,
/// where the table puts it: a partition device the kernel kept from an image the device held
/// before is no volume of this one.
fn partition_name(
    os: &Os,
    op: &str,
    disk: &Disk,
    disk_file: &Fd,
    part: u32,
    sync: Sync,
) -> Result<String> {
    let listed = block::table_partitions(os, op, disk, disk_file)?;
    let find = || {
        block::volume_partitions(os, &listed, disk)
            .into_iter()
            .find(|p| p.number == part)
    };
    let found = find().or_else(|| {
        if sync == Sync::No {
            return None;
        }
        // Best effort; a partition still unknown is reported below.
        let _ = block::sync_partitions(os, op, disk, disk_file, &listed);
        find()
    });
    found.map(|p| p.name).ok_or_else(|| {
        let stale = block::partitions(os, disk).iter().any(|p| p.number == part);
        Error::new(
            Kind::NotFound,
            op,
            format!("disk {} ({})", disk.number, disk.name),
            if stale {
                format!(
                    "no partition {part} in the disk's table (the kernel's partition {part} is a \
                     stale device, not a volume of this disk)"
                )
            } else {
                format!("no partition {part}")
            },
        )
    })
}

/// Opens the volume's device node read-only and checks it is the one sysfs described
/// ([`block::open_checked`]).
fn open_volume_device(os: &Os, op: &str, disk: &Disk, name: &str, dev: (u32, u32)) -> Result<Fd> {
    block::open_checked(os, op, disk, name, dev, Open::Read)
}

/// The ID of the volume a mount's device is, if it is a disk or partition.
pub(super) fn id_of_mount(os: &Os, op: &str, m: &MountInfo) -> Result<String> {
    let (disk, part) = block::whose(os, m.major, m.minor).ok_or_else(|| {
        Error::new(
            Kind::FailedPrecondition,
            op,
            format!("{:?}", m.mount_point),
            format!(
                "is a {} mount of {:?}, not a volume on a disk",
                m.fs_type, m.source
            ),
        )
    })?;
    Ok(make_volume(os, op, &disk, part, Sync::No)?.id)
}

/// Whether naming a volume may bring the kernel's partitions in line with the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sync {
    /// A read: the kernel's partitions are left as they are.
    No,
    /// The caller holds the disk (the core's lock) and changes the volume.
    Yes,
}

impl LinuxVolumeHost {
    /// The volume `id` names, for a read: a partition the kernel does not know yet is NOT_FOUND
    /// (ListVolumesOnDisk, which holds the disk, makes it known).
    pub(super) fn resolve(&self, op: &str, id: &str) -> Result<Volume> {
        self.resolve_with(op, id, Sync::No)
    }

    /// As [`Self::resolve`], for an operation that holds the disk and changes the volume.
    pub(super) fn resolve_to_change(&self, op: &str, id: &str) -> Result<Volume> {
        self.resolve_with(op, id, Sync::Yes)
    }

    fn resolve_with(&self, op: &str, id: &str, sync: Sync) -> Result<Volume> {
        let (number, part, uuid) = parse_or_refuse(op, id)?;
        let disk = block::find_disk(&self.os, op, number).map_err(|e| {
            Error::new(
                e.kind(),
                op,
                shown(id),
                format!("disk {number} is not attached (detached, or the host rebooted)"),
            )
        })?;
        let vol = make_volume(&self.os, op, &disk, part, sync).map_err(|e| {
            if e.kind() == Kind::NotFound {
                Error::new(
                    Kind::NotFound,
                    op,
                    shown(id),
                    format!("disk {number} has no partition {part}"),
                )
            } else {
                e
            }
        })?;
        if vol.uuid != uuid {
            return Err(Error::new(
                Kind::NotFound,
                op,
                shown(id),
                format!(
                    "partition {part} of disk {number} is now a different volume ({})",
                    vol.id
                ),
            ));
        }
        Ok(vol)
    }

    /// As [`Self::resolve`], for operations that need a partition: a whole-disk volume is
    /// FAILED_PRECONDITION, "a whole-disk volume `why`".
    pub(super) fn resolve_partition(&self, op: &str, id: &str, why: &str) -> Result<Volume> {
        let vol = self.resolve_to_change(op, id)?;
        if vol.part == 0 {
            return Err(Error::new(
                Kind::FailedPrecondition,
                op,
                shown(id),
                format!("a whole-disk volume {why}"),
            ));
        }
        Ok(vol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_ids_parse_strictly() {
        assert_eq!(
            parse_id("diskseq12-part1-3f2a0c5e-1b2c-4d5e-8f90-a1b2c3d4e5f6"),
            Some((12, 1, "3f2a0c5e-1b2c-4d5e-8f90-a1b2c3d4e5f6"))
        );
        assert_eq!(parse_id("diskseq9-part0-none"), Some((9, 0, "none")));
        assert_eq!(
            parse_id("diskseq9-part2-deadbeef-02"),
            Some((9, 2, "deadbeef-02"))
        );
        for bad in [
            "",
            "-1",
            "\\\\?\\Volume{6f1e0b2c-0000-0000-0000-100000000000}\\",
            "diskseq-part1-ab",
            "diskseq1-part-ab",
            "diskseq1-part1-",
            "diskseq1-part1-ABCD",
            "diskseq1-part1-../x",
            "diskseq99999999999-part1-ab",
            "diskseq1-part1-0123456789abcdef0123456789abcdef01234",
        ] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
    }
}
