//! What the volume group does on Linux: partitions as volumes, mkfs, mount(2), growing the GPT
//! entry and the filesystem, stats from statvfs or the superblock.
//!
//! A volume ID is `diskseq<N>-part<P>-<uuid>`: the disk's diskseq (never reused in a boot), the
//! partition number, and the partition's unique GUID (GPT) or `<disk signature>-<P>` (MBR); `P`
//! is 0 for a filesystem on a whole disk, with the filesystem UUID. An ID is resolved by the
//! proxy itself (no udev) and checked against all three parts, so after a detach it can never
//! resolve to a different volume, not even after a reboot resets diskseq.
//!
//! FormatVolume is retry-safe through an intent record per volume in the state directory: a
//! filesystem whose UUID matches a completed record of ours is "already done"; one matching a
//! pending record (the daemon died mid-mkfs) is formatted again; anything else is refused.

mod format;
mod mount;
mod resize;

use super::block::{self, Disk};
use super::disk::{io_err, refused};
use super::mountinfo::{self, MountInfo};
use super::os::{self, At, Blkpg, Fd, MountFlags, Open, Os};
use super::tool;
use crate::format_record::{FormatRecord, FormatRecords};
use crate::gpt::{self, Gpt};
use crate::partition_plan;
use crate::signatures::{self, Signature};
use csi_proxy_core::disk::DiskUsage;
use csi_proxy_core::volume::{ResizeTarget, VolumeHost, VolumeStats};
use csi_proxy_core::{Error, Kind, Result};
use std::io;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// A filesystem smaller than its partition by more than this is grown to fill it.
const FS_SLACK: u64 = 1 << 20;
/// The filesystems ResizeVolume grows (see `grow_filesystem`); their sizes are read from the
/// superblock ([`signatures::superblock_usage`]).
const GROWABLE: [&str; 5] = ["ext2", "ext3", "ext4", "xfs", "btrfs"];

/// The filesystem FormatVolume creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsType {
    /// ext4 (the default).
    #[default]
    Ext4,
    /// xfs.
    Xfs,
}

impl FsType {
    fn name(self) -> &'static str {
        match self {
            FsType::Ext4 => "ext4",
            FsType::Xfs => "xfs",
        }
    }
}

impl FromStr for FsType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "ext4" => Ok(FsType::Ext4),
            "xfs" => Ok(FsType::Xfs),
            _ => Err(format!("unsupported filesystem {s:?} (ext4 or xfs)")),
        }
    }
}

/// The Linux volume host.
#[derive(Clone)]
pub struct LinuxVolumeHost {
    os: Os,
    state_dir: PathBuf,
    fs_type: FsType,
}

impl std::fmt::Debug for LinuxVolumeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxVolumeHost")
            .field("state_dir", &self.state_dir)
            .field("fs_type", &self.fs_type)
            .finish_non_exhaustive()
    }
}

/// A resolved volume.
#[derive(Clone)]
struct Volume {
    os: Os,
    id: String,
    disk: Disk,
    /// Partition number; 0 for a whole-disk filesystem.
    part: u32,
    /// Kernel name of the block device holding the filesystem.
    name: String,
    dev: (u32, u32),
    /// The ID's third part: PARTUUID, or the filesystem UUID for a whole disk.
    uuid: String,
    /// The volume's block device, opened when the ID was resolved and held for the whole
    /// request: reads go through it, and its diskseq tells whether the disk is still the one
    /// resolved (see [`Volume::unchanged`]).
    file: Arc<Fd>,
}

impl Volume {
    fn node(&self) -> PathBuf {
        block::node(&self.name)
    }

    /// Checks, right before and after anything that changes the volume, that it is still the
    /// volume the request resolved: the held device's disk has the same diskseq (a detach and
    /// attach in between gives a new one, also when the kernel name and device number are
    /// reused) and the partition still carries the ID's unique GUID. Tools and mount(2) take a
    /// device path, so this narrows the window in which a swapped disk could be acted on to the
    /// moment between the check and the call; a change seen after the call is reported.
    fn unchanged(&self, op: &str) -> Result<()> {
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
        let uuid = volume_uuid(&self.os, op, &self.disk, self.part)?;
        if uuid != self.uuid {
            return Err(gone(format!(
                "partition {} of disk {} became a different volume ({uuid}) while the request ran",
                self.part, self.disk.number
            )));
        }
        Ok(())
    }

    fn mounts<'t>(&self, table: &'t [MountInfo]) -> Vec<&'t MountInfo> {
        let node = self.node().to_string_lossy().into_owned();
        table
            .iter()
            .filter(|m| (m.major, m.minor) == self.dev || m.source == node)
            .collect()
    }
}

fn shown(id: &str) -> String {
    format!("volume {id:?}")
}

fn parse_id(id: &str) -> Option<(u32, u32, &str)> {
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
fn parse_or_refuse<'i>(op: &str, id: &'i str) -> Result<(u32, u32, &'i str)> {
    parse_id(id).ok_or_else(|| {
        Error::invalid(
            op,
            shown(id),
            "not a volume ID of this host (expected diskseq<N>-part<P>-<uuid>, as ListVolumesOnDisk returns)",
        )
    })
}

fn read_mountinfo(os: &Os, op: &str) -> Result<Vec<MountInfo>> {
    mountinfo::read_from(&**os).map_err(|e| Error::io(op, mountinfo::PATH, &e))
}

/// The third part of a volume ID for partition `part` of `disk` (0: the whole disk).
fn volume_uuid(os: &Os, op: &str, disk: &Disk, part: u32) -> Result<String> {
    let f = Fd::open(os, &block::node(&disk.name), Open::Read)
        .map_err(|e| io_err(op, disk, "open", &e))?;
    if part == 0 {
        let head = f
            .read_at(0, signatures::PROBE_LEN)
            .map_err(|e| io_err(op, disk, "read", &e))?;
        return Ok(signatures::probe(&head)
            .and_then(|s| s.uuid)
            .map_or_else(|| "none".to_string(), |u| signatures::uuid_string(&u)));
    }
    let sector = block::sector_size(os, disk);
    let total = disk.size / sector;
    let head = f
        .read_at(0, gpt::head_len(sector))
        .map_err(|e| io_err(op, disk, "read", &e))?;
    // Naming reads the backup too when the primary is damaged (a cut-off table write): the
    // partitions are still the backup's, and an ID must not turn into an MBR-style one meanwhile.
    let table = match Gpt::parse(&head, sector, total) {
        Ok(Some(t)) => Some(t),
        _ if gpt::mbr_partitions(&head).iter().any(|p| p.kind == 0xEE) => {
            let tail = super::disk::read_tail(op, disk, sector, &f)?;
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
        None => format!("{:08x}-{part:02x}", gpt::mbr_disk_signature(&head)),
    })
}

fn make_volume(os: &Os, op: &str, disk: &Disk, part: u32) -> Result<Volume> {
    if part != 0 && !block::partitions(os, disk).iter().any(|p| p.number == part) {
        // Best effort; a partition still unknown is reported below.
        let _ = block::ensure_partitions(os, op, disk);
    }
    let name = if part == 0 {
        disk.name.clone()
    } else {
        block::partitions(os, disk)
            .into_iter()
            .find(|p| p.number == part)
            .map(|p| p.name)
            .ok_or_else(|| {
                Error::new(
                    Kind::NotFound,
                    op,
                    format!("disk {} ({})", disk.number, disk.name),
                    format!("no partition {part}"),
                )
            })?
    };
    let sys = if part == 0 {
        block::sys_disk(&disk.name)
    } else {
        block::sys_disk(&disk.name).join(&name)
    };
    let dev = block::dev_numbers(os, &sys).map_err(|e| io_err(op, disk, "read dev", &e))?;
    let file = open_volume_device(os, op, disk, &name, dev)?;
    let uuid = volume_uuid(os, op, disk, part)?;
    Ok(Volume {
        os: os.clone(),
        id: format!("diskseq{}-part{part}-{uuid}", disk.number),
        disk: disk.clone(),
        part,
        name,
        dev,
        uuid,
        file: Arc::new(file),
    })
}

/// Opens the device node `name` of `disk` and checks that it is the device sysfs described
/// (`dev`) on the disk asked for: a node can be replaced, and a disk detached, between the sysfs
/// read and the open.
fn open_volume_device(os: &Os, op: &str, disk: &Disk, name: &str, dev: (u32, u32)) -> Result<Fd> {
    let node = block::node(name);
    let f = Fd::open(os, &node, Open::Read)
        .map_err(|e| io_err(op, disk, &format!("open {}", node.display()), &e))?;
    let rdev = f
        .device_number()
        .map_err(|e| io_err(op, disk, "fstat", &e))?;
    let seq = f
        .diskseq()
        .map_err(|e| io_err(op, disk, "read the diskseq", &e))?;
    if rdev != dev || seq != u64::from(disk.number) {
        return Err(Error::new(
            Kind::NotFound,
            op,
            format!("disk {} ({})", disk.number, disk.name),
            format!(
                "{} is now device {}:{} of diskseq {seq}, not the device {}:{} the disk had; it was detached or replaced",
                node.display(),
                rdev.0,
                rdev.1,
                dev.0,
                dev.1
            ),
        ));
    }
    Ok(f)
}

/// The ID of the volume a mount's device is, if it is a disk or partition.
fn id_of_mount(os: &Os, op: &str, m: &MountInfo) -> Result<String> {
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
    Ok(make_volume(os, op, &disk, part)?.id)
}

/// The path the kernel shows in mountinfo for `path` (links in its parents resolved, the final
/// component kept as is).
fn kernel_path(os: &Os, path: &Path) -> io::Result<PathBuf> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok(os.canonicalize(parent)?.join(name)),
        _ => os.canonicalize(path),
    }
}

impl LinuxVolumeHost {
    /// A volume host keeping its format records under `state_dir` and formatting with `fs_type`.
    ///
    /// Private temporary mounts a killed daemon left under `<state_dir>/mnt` are unmounted
    /// first: they would make the volume look mounted outside the allowed roots and refuse the
    /// very retry that finishes the interrupted operation.
    pub fn new(state_dir: impl Into<PathBuf>, fs_type: FsType) -> Self {
        Self::with_os(os::system(), state_dir, fs_type)
    }

    /// As [`Self::new`], acting through `os` (the real kernel, or the fake Linux in tests).
    pub fn with_os(os: Os, state_dir: impl Into<PathBuf>, fs_type: FsType) -> Self {
        let host = Self {
            os,
            state_dir: state_dir.into(),
            fs_type,
        };
        host.recover_private_mounts();
        host
    }

    /// Makes `<state_dir>/mnt`, where filesystems are mounted for the tools that grow them, a
    /// mount of its own (a bind onto itself) with private propagation, mode 0700, before the
    /// first temporary mount (and again before each: it is idempotent). Mounts under
    /// it then never propagate to other mount namespaces (a kubelet or container runtime with a
    /// shared view of the host), where a copy could keep the filesystem busy and, left behind,
    /// make the volume look mounted outside the allowed roots.
    pub(super) fn make_mount_dir_private(&self) -> io::Result<()> {
        let dir = self.state_dir.join("mnt");
        self.os.create_dir_all(&dir, 0o700)?;
        let dir = self.os.canonicalize(&dir)?;
        if mountinfo::topmost_at(&mountinfo::read_from(&*self.os)?, &dir).is_none() {
            self.os.bind_onto_itself(&dir)?;
        }
        self.os.make_private(&dir)
    }

    /// Unmounts what a killed daemon left mounted under `<state_dir>/mnt` (see [`Self::new`]).
    /// Nothing else uses that directory, so every mount there is ours. A busy one is left and
    /// logged: never detached lazily, as a filesystem still in use must not vanish under it.
    fn recover_private_mounts(&self) {
        let Ok(private) = self.os.canonicalize(&self.state_dir.join("mnt")) else {
            return; // never created: nothing to recover
        };
        let table = match mountinfo::read_from(&*self.os) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("cannot read the mount table to recover private mounts: {e}");
                return;
            }
        };
        // Deepest first, in case of stacked mounts.
        let mut stale: Vec<&Path> = table
            .iter()
            .map(|m| m.mount_point.as_path())
            .filter(|p| p.starts_with(&private) && *p != private)
            .collect();
        stale.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for dir in stale {
            match self.os.unmount(At::Path(dir), true) {
                Ok(()) => {
                    let _ = self.os.remove_dir(dir);
                    tracing::info!(mount = %dir.display(), "unmounted a private mount left by a killed daemon");
                }
                Err(e) => tracing::warn!(
                    mount = %dir.display(),
                    "cannot unmount a private mount left by a killed daemon: {e}"
                ),
            }
        }
    }

    fn resolve(&self, op: &str, id: &str) -> Result<Volume> {
        let (number, part, uuid) = parse_or_refuse(op, id)?;
        let disk = block::find_disk(&self.os, op, number).map_err(|e| {
            Error::new(
                e.kind(),
                op,
                shown(id),
                format!("disk {number} is not attached (detached, or the host rebooted)"),
            )
        })?;
        let vol = make_volume(&self.os, op, &disk, part).map_err(|e| {
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
    fn resolve_partition(&self, op: &str, id: &str, why: &str) -> Result<Volume> {
        let vol = self.resolve(op, id)?;
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

    fn records(&self) -> FormatRecords {
        FormatRecords::new(self.state_dir.join("format"))
    }

    fn read_intent(&self, vol: &Volume) -> Option<FormatRecord> {
        self.records().read(&vol.uuid)
    }

    fn write_intent(&self, op: &str, vol: &Volume, record: &FormatRecord) -> Result<()> {
        let records = self.records();
        records.write(&vol.uuid, record, &vol.id).map_err(|e| {
            Error::io(op, shown(&vol.id), &e)
                .context(format!("state dir {}", records.dir().display()))
        })
    }

    /// What the volume holds: its first [`signatures::PROBE_LEN`] bytes, then (when they hold
    /// nothing known) its last [`signatures::TAIL_PROBE_LEN`], where md keeps 0.90 and 1.0
    /// superblocks. Returns the first bytes too, for the superblock readers.
    fn probe(&self, op: &str, vol: &Volume) -> Result<(Option<Signature>, Vec<u8>)> {
        let err = |e: io::Error| Error::io(op, shown(&vol.id), &e);
        let buf = vol.file.read_at(0, signatures::PROBE_LEN).map_err(err)?;
        if let Some(sig) = signatures::probe(&buf) {
            return Ok((Some(sig), buf));
        }
        let len = vol.file.device_len().map_err(err)?;
        let from = len.saturating_sub(signatures::TAIL_PROBE_LEN as u64);
        let tail = vol
            .file
            .read_at(from, signatures::TAIL_PROBE_LEN)
            .map_err(err)?;
        Ok((signatures::probe_tail(&tail, len), buf))
    }
}

impl VolumeHost for LinuxVolumeHost {
    fn list_volumes_on_disk(
        &self,
        number: u32,
        partition: Option<NonZeroU32>,
    ) -> Result<Vec<String>> {
        const OP: &str = "ListVolumesOnDisk";
        // Upstream: an unknown disk, or one without volumes, is an empty list.
        let Ok(disk) = block::find_disk(&self.os, OP, number) else {
            return Ok(Vec::new());
        };
        // Best effort: listing what the kernel knows beats failing on a disk we cannot open.
        if let Err(e) = block::ensure_partitions(&self.os, OP, &disk) {
            tracing::debug!(disk = number, error = %e, "partition table not synced");
        }
        block::partitions(&self.os, &disk)
            .into_iter()
            .filter(|p| partition.is_none_or(|want| want.get() == p.number))
            .map(|p| make_volume(&self.os, OP, &disk, p.number).map(|v| v.id))
            .collect()
    }

    fn mount_volume(&self, id: &str, target: &str) -> Result<()> {
        self.mount(id, target)
    }

    fn unmount_volume(&self, id: &str, target: &str) -> Result<()> {
        self.unmount(id, target)
    }

    fn is_volume_formatted(&self, id: &str) -> Result<bool> {
        const OP: &str = "IsVolumeFormatted";
        let vol = self.resolve(OP, id)?;
        Ok(self.probe(OP, &vol)?.0.is_some())
    }

    fn format_volume(&self, id: &str) -> Result<()> {
        self.format(id)
    }

    fn resize_volume(&self, id: &str, target: ResizeTarget) -> Result<()> {
        self.resize(id, target)
    }

    fn get_volume_stats(&self, id: &str) -> Result<VolumeStats> {
        const OP: &str = "GetVolumeStats";
        let vol = self.resolve(OP, id)?;
        let object = shown(id);
        let table = read_mountinfo(&self.os, OP)?;
        if let Some(m) = vol.mounts(&table).first() {
            let s = self
                .os
                .statvfs(&m.mount_point)
                .map_err(|e| Error::io(OP, &object, &e))?;
            return Ok(VolumeStats {
                total_bytes: s.total,
                used_bytes: s.total.saturating_sub(s.free),
            });
        }
        let (sig, buf) = self.probe(OP, &vol)?;
        let usage = signatures::superblock_usage(&buf).ok_or_else(|| {
            let what = sig.map_or("no filesystem".to_string(), |s| {
                format!("{}, whose size cannot be read unmounted", s.kind)
            });
            Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!("the volume holds {what}"),
            )
        })?;
        Ok(VolumeStats {
            total_bytes: usage.total_bytes,
            used_bytes: usage.total_bytes.saturating_sub(usage.free_bytes),
        })
    }

    fn get_disk_number_from_volume_id(&self, id: &str) -> Result<u32> {
        Ok(self.resolve("GetDiskNumberFromVolumeID", id)?.disk.number)
    }

    fn get_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        const OP: &str = "GetVolumeIDFromTargetPath";
        let object = format!("target_path {target:?}");
        let path = self
            .os
            .canonicalize(Path::new(target))
            .map_err(|e| Error::io(OP, &object, &e))?;
        let table = read_mountinfo(&self.os, OP)?;
        let m = mountinfo::topmost_at(&table, &path)
            .ok_or_else(|| Error::new(Kind::NotFound, OP, &object, "is not a mount point"))?;
        id_of_mount(&self.os, OP, m)
    }

    fn get_closest_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        const OP: &str = "GetClosestVolumeIDFromTargetPath";
        let object = format!("target_path {target:?}");
        let path = self
            .os
            .canonicalize(Path::new(target))
            .map_err(|e| Error::io(OP, &object, &e))?;
        let table = read_mountinfo(&self.os, OP)?;
        // The deepest mount point containing the path; among equals the last (topmost) one.
        let m = table
            .iter()
            .filter(|m| path.starts_with(&m.mount_point))
            .max_by_key(|m| m.mount_point.components().count())
            .and_then(|best| mountinfo::topmost_at(&table, &best.mount_point))
            .ok_or_else(|| {
                Error::new(Kind::NotFound, OP, &object, "no mount contains this path")
            })?;
        id_of_mount(&self.os, OP, m)
    }

    fn write_volume_cache(&self, id: &str) -> Result<()> {
        const OP: &str = "WriteVolumeCache";
        let vol = self.resolve(OP, id)?;
        let object = shown(id);
        let table = read_mountinfo(&self.os, OP)?;
        if let Some(m) = vol.mounts(&table).first() {
            Fd::open(&self.os, &m.mount_point, Open::Read)
                .and_then(|d| d.syncfs())
                .map_err(|e| Error::io(OP, &object, &e))?;
        }
        // fsync of the block device writes its dirty pages and flushes the device's cache.
        vol.file.fsync().map_err(|e| Error::io(OP, &object, &e))
    }

    fn volume_disk_number(&self, id: &str) -> Result<u32> {
        // The disk's diskseq is in the ID: no device is looked at to find what to lock; the
        // operation itself resolves (and refuses) the volume.
        Ok(parse_or_refuse("locating", id)?.0)
    }

    fn volume_disk(&self, id: &str) -> Result<(u32, DiskUsage)> {
        let vol = self.resolve("locating", id)?;
        Ok((vol.disk.number, block::usage(&self.os, &vol.disk)?))
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

    #[test]
    fn filesystem_flag_values() {
        assert_eq!("ext4".parse(), Ok(FsType::Ext4));
        assert_eq!("xfs".parse(), Ok(FsType::Xfs));
        assert!("ntfs".parse::<FsType>().is_err());
    }
}
