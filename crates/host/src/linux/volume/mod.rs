//! What the volume group does on Linux: partitions as volumes, mkfs, mount(2), growing the GPT
//! entry and the filesystem, stats from statvfs or the superblock. A mounted volume is reached
//! through its mount's root opened as a handle (`mounted`), never through its mount point's path.
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

mod clones;
mod format;
mod mount;
mod mount_policy;
mod mounted;
mod resize;
mod resolve;

use super::block::{self, Disk};
use super::disk::{io_err, refused};
use super::mountinfo::{self, MountInfo};
use super::os::{self, At, Blkpg, Fd, MountFlags, Open, Os};
use super::tool;
use crate::format_record::{FormatRecord, FormatRecords};
use csi_proxy_core::disk::{DiskUsage, OpenElsewhere};
use csi_proxy_core::volume::{ResizeTarget, VolumeHost, VolumeStats};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::gpt::{self, Gpt};
use csi_proxy_formats::partition_plan;
use csi_proxy_formats::signatures::{self, Signature};
use resolve::{Sync, Volume, id_of_mount, make_volume, parse_id, parse_or_refuse, shown};
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
    /// Kernel filesystem types MountVolume mounts besides [`mount_policy::BUILT_IN`]
    /// (`--mount-filesystem`).
    mount_filesystems: Arc<[String]>,
    /// Held while `<state_dir>/mnt` is checked and made a mount
    /// ([`Self::make_mount_dir_private`]), so that two grows at once bind it once.
    private_dir: Arc<std::sync::Mutex<()>>,
}

impl std::fmt::Debug for LinuxVolumeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxVolumeHost")
            .field("state_dir", &self.state_dir)
            .field("fs_type", &self.fs_type)
            .field("mount_filesystems", &self.mount_filesystems)
            .finish_non_exhaustive()
    }
}

fn read_mountinfo(os: &Os, op: &str) -> Result<Vec<MountInfo>> {
    mountinfo::read_from(&**os).map_err(|e| Error::io(op, mountinfo::PATH, &e))
}

/// The path the kernel shows in mountinfo for `path` (links in its parents resolved, the final
/// component kept as is).
/// A path the service gave through a held directory (`/proc/self/fd/N[/name]`, see
/// `FilesystemService::hold`), split into the descriptor's path and the rest.
fn held_parts(path: &Path) -> Option<(PathBuf, &str)> {
    let rest = path.to_str()?.strip_prefix("/proc/self/fd/")?;
    let (fd, tail) = rest.split_once('/').unwrap_or((rest, ""));
    Some((Path::new("/proc/self/fd").join(fd), tail))
}

/// The kernel's path of a target, as the mount table names mount points. A path through a held
/// directory takes the kernel's own name for that directory: one readlink of the descriptor,
/// never resolved again (realpath would walk that name again, through a link swapped in
/// meanwhile). Any other path has its parents resolved; with `follow`, the final name too.
fn kernel_path(os: &Os, path: &Path, follow: bool) -> io::Result<PathBuf> {
    if let Some((dir, tail)) = held_parts(path) {
        let dir = os.read_link(&dir)?;
        return Ok(if tail.is_empty() { dir } else { dir.join(tail) });
    }
    if follow {
        return os.canonicalize(path);
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok(os.canonicalize(parent)?.join(name)),
        _ => os.canonicalize(path),
    }
}

/// How a target is shown in messages and the log: a path through a held directory as the
/// kernel names it.
fn shown_target(os: &Os, target: &str) -> String {
    match held_parts(Path::new(target)) {
        Some(_) => kernel_path(os, Path::new(target), false)
            .map_or_else(|_| target.to_string(), |p| p.display().to_string()),
        None => target.to_string(),
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
            mount_filesystems: Arc::from([]),
            private_dir: Arc::default(),
        };
        host.recover_private_mounts();
        host
    }

    /// Lets MountVolume mount these kernel filesystem types too (`--mount-filesystem`), besides
    /// the ones this host makes and grows: each is a kernel driver that will parse a tenant's
    /// volume as root.
    pub fn with_mount_filesystems(mut self, types: Vec<String>) -> Self {
        self.mount_filesystems = types.into();
        self
    }

    /// Makes `<state_dir>/mnt`, where filesystems are mounted for the tools that grow them, a
    /// mount of its own (a bind onto itself) with private propagation, mode 0700, before the
    /// first temporary mount (and again before each: it is idempotent). Mounts under
    /// it then never propagate to other mount namespaces (a kubelet or container runtime with a
    /// shared view of the host), where a copy could keep the filesystem busy and, left behind,
    /// make the volume look mounted outside the allowed roots.
    ///
    /// The look and the bind happen under one lock: two grows that both found no mount there
    /// would each bind it, and the second bind would cover the first grow's temporary mount,
    /// leaving it mounted underneath and its unmount failing with EINVAL.
    pub(super) fn make_mount_dir_private(&self) -> io::Result<()> {
        let _held = (self.private_dir.lock()).unwrap_or_else(|poisoned| poisoned.into_inner());
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

    fn records(&self) -> FormatRecords {
        FormatRecords::new(self.state_dir.join("format"))
    }

    fn read_intent(&self, vol: &Volume) -> Option<FormatRecord> {
        self.records().read(vol.record_key(&self.os))
    }

    fn write_intent(&self, op: &str, vol: &Volume, record: &FormatRecord) -> Result<()> {
        let records = self.records();
        records
            .write(vol.record_key(&self.os), record, &vol.id)
            .map_err(|e| {
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
        let (tail, len) = read_tail(op, vol)?;
        Ok((signatures::probe_tail(&tail, len), buf))
    }

    /// Refuses a volume whose filesystem at its start (`head`, read from `buf`) belongs to
    /// something that keeps its metadata at the volume's end, past the filesystem's last
    /// byte: an md 0.90/1.0 member or a DRBD backing device. Its filesystem is the array's or
    /// the replicated device's: mounted read-write directly, the mirror's legs diverge;
    /// grown, it overwrites the metadata. Metadata the filesystem spans is its own content (a
    /// file's bytes), not a member's.
    fn refuse_member_at_end(
        &self,
        op: &str,
        vol: &Volume,
        head: &Signature,
        buf: &[u8],
    ) -> Result<()> {
        let (tail, len) = read_tail(op, vol)?;
        let Some((meta, at)) = signatures::metadata_at_end(&tail, len) else {
            return Ok(());
        };
        if signatures::filesystem_bytes(buf).is_some_and(|fs| fs > at) {
            return Ok(());
        }
        Err(Error::new(
            Kind::FailedPrecondition,
            op,
            shown(&vol.id),
            format!(
                "the volume holds {} at its start and {} metadata at its end (byte {at}, past                  the filesystem): it is a member of a RAID array or a DRBD device, whose                  filesystem is used through that device, never directly (mounting it would let                  the copies diverge, growing it would overwrite the metadata); nothing was changed",
                head.kind, meta.kind
            ),
        ))
    }
}

/// The volume's last [`signatures::TAIL_PROBE_LEN`] bytes, and its length.
fn read_tail(op: &str, vol: &Volume) -> Result<(Vec<u8>, u64)> {
    let err = |e: io::Error| Error::io(op, shown(&vol.id), &e);
    let len = vol.file.device_len().map_err(err)?;
    let from = len.saturating_sub(signatures::TAIL_PROBE_LEN as u64);
    let tail = vol
        .file
        .read_at(from, signatures::TAIL_PROBE_LEN)
        .map_err(err)?;
    Ok((tail, len))
}

impl VolumeHost for LinuxVolumeHost {
    fn list_volumes_on_disk(
        &self,
        number: u32,
        partition: Option<NonZeroU32>,
    ) -> Result<Vec<String>> {
        const OP: &str = "ListVolumesOnDisk";
        // An unknown disk is NOT_FOUND, as GetDiskStats answers; one without volumes is an
        // empty list.
        let disk = block::find_disk(&self.os, OP, number)?;
        // Only what the disk's own table lists is a volume of it: a partition device the
        // kernel kept from an image the device held before is not.
        let listed = match block::ensure_partitions(&self.os, OP, &disk) {
            Ok(listed) => listed,
            // A table that cannot be trusted is said so.
            Err(e) if e.kind() == Kind::FailedPrecondition => return Err(e),
            // A disk this daemon cannot read (the host's own, behind a device policy) has no
            // partition it could act on: none is a volume.
            Err(e) => {
                tracing::debug!(disk = number, error = %e, "disk not readable; no volumes listed");
                return Ok(Vec::new());
            }
        };
        block::volume_partitions(&self.os, &listed, &disk)
            .into_iter()
            .filter(|p| partition.is_none_or(|want| want.get() == p.number))
            .map(|p| make_volume(&self.os, OP, &disk, p.number, Sync::No).map(|v| v.id))
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
        if let Some(sig) = self.probe(OP, &vol)?.0 {
            let found = format::content_of(&sig);
            return Ok(csi_proxy_core::volume::rules::is_formatted(
                Some(&found),
                self.read_intent(&vol).as_ref(),
            ));
        }
        // What only libblkid knows (nilfs2, romfs, VDO, ...) is not an empty volume either.
        let node = vol.node().to_string_lossy().into_owned();
        Ok(super::blkid::probe(&*self.os, OP, &shown(id), &node)?.is_some())
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
        if let Some(root) = mounted::mounted_root(&self.os, OP, &vol, &table)? {
            let s = root.statvfs().map_err(|e| Error::io(OP, &object, &e))?;
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
        let object = format!("target_path {:?}", shown_target(&self.os, target));
        let path = kernel_path(&self.os, Path::new(target), true)
            .map_err(|e| Error::io(OP, &object, &e))?;
        let table = read_mountinfo(&self.os, OP)?;
        let m = mountinfo::topmost_at(&table, &path)
            .ok_or_else(|| Error::new(Kind::NotFound, OP, &object, "is not a mount point"))?;
        id_of_mount(&self.os, OP, m)
    }

    fn get_closest_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        const OP: &str = "GetClosestVolumeIDFromTargetPath";
        let object = format!("target_path {:?}", shown_target(&self.os, target));
        let path = kernel_path(&self.os, Path::new(target), true)
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
        if let Some(root) = mounted::mounted_root(&self.os, OP, &vol, &table)? {
            root.syncfs().map_err(|e| Error::io(OP, &object, &e))?;
        }
        // fsync of the block device writes its dirty pages and flushes the device's cache.
        vol.file.fsync().map_err(|e| Error::io(OP, &object, &e))
    }

    fn volume_disk_number(&self, id: &str) -> Result<u32> {
        // The disk's diskseq is in the ID: no device is looked at to find what to lock; the
        // operation itself resolves (and refuses) the volume.
        Ok(parse_or_refuse("locating", id)?.0)
    }

    fn disk_usage(&self, disk: u32) -> Result<DiskUsage> {
        block::in_use_facts(&self.os, &block::find_disk(&self.os, "disk usage", disk)?)
    }

    /// None beyond [`Self::disk_usage`], as for the disk host.
    fn volumes_open_elsewhere(&self, _: u32) -> Result<Vec<OpenElsewhere>> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filesystem_flag_values() {
        assert_eq!("ext4".parse(), Ok(FsType::Ext4));
        assert_eq!("xfs".parse(), Ok(FsType::Xfs));
        assert!("ntfs".parse::<FsType>().is_err());
    }
}
