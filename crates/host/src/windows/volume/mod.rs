//! Windows implementation of the volume group ([`VolumeHost`]) through the volume management
//! functions and device I/O controls, with WMI only for the one operation Windows has no
//! documented Win32 call for (formatting). No child process, no defrag service.
//!
//! Volume IDs are volume GUID paths, `\\?\Volume{GUID}\`, exactly as `FindFirstVolumeW` and
//! `GetVolumeNameForVolumeMountPointW` return them (upstream's `MSFT_Volume.UniqueId` is the
//! same string). Anything else is refused before any OS call
//! ([`csi_proxy_formats::windows_buffers::volume::VolumeName`]).
//!
//! Data safety (docs/security.md), on top of the core service's refusal of the host's own disks:
//! FormatVolume never formats a volume that is mounted anywhere or that carries a filesystem or any
//! other recognised signature; ResizeVolume only grows, only in place.

mod grow;
mod targets;

use super::disk::{WindowsDiskHost, open_disk, read_layout, volume_extents, volume_path_names};
use super::os::files::utf16;
use super::os::{self, Access, Handle, OsError, Win32, code, ioctl, os_error};
use crate::format_record::{FormatRecord, FormatRecords};
use csi_proxy_core::disk::{DiskHost, DiskUsage, OpenElsewhere};
use csi_proxy_core::volume::rules;
use csi_proxy_core::volume::{ResizeTarget, VolumeHost, VolumeStats};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::reparse::{self, LinkDestination, ReparsePoint};
use csi_proxy_formats::signatures;
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_formats::windows_buffers::layout::{self, Partition};
use csi_proxy_formats::windows_buffers::volume::{
    self as names, VolumeName, extend_sectors, mount_point_path,
};
use csi_proxy_formats::windows_buffers::wmi_codes::storage_return;
use std::num::NonZeroU32;
use std::sync::Arc;
use targets::Resolved;

/// Links followed from a target path before giving up (upstream's walk stops at 256; a chain of
/// links to a mount point is one or two long in practice).
const MAX_HOPS: usize = 64;

/// The Windows volume host.
#[derive(Clone)]
pub struct WindowsVolumeHost {
    os: Arc<dyn Win32>,
    records: FormatRecords,
}

impl std::fmt::Debug for WindowsVolumeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowsVolumeHost")
            .field("records", &self.records.dir())
            .finish()
    }
}

impl WindowsVolumeHost {
    /// A host acting on this machine's volumes, keeping its format records under
    /// `<state_dir>\format` (see [`crate::format_record`]).
    #[cfg(windows)]
    pub fn new(state_dir: impl AsRef<std::path::Path>) -> Self {
        Self::with_os(Arc::new(super::win32::SystemWin32::default()), state_dir)
    }

    /// A host acting through `os` (the real Windows, or the simulated one in tests).
    pub fn with_os(os: Arc<dyn Win32>, state_dir: impl AsRef<std::path::Path>) -> Self {
        Self {
            os,
            records: FormatRecords::new(
                state_dir
                    .as_ref()
                    .join(crate::windows::state_dir::FORMAT_DIR),
            ),
        }
    }

    fn os(&self) -> &dyn Win32 {
        &*self.os
    }
}

/// A volume serial number as `dir` prints it (`1A2B-3C4D` without the dash).
fn serial_text(serial: u32) -> String {
    format!("{serial:08X}")
}

fn shown(id: &str) -> String {
    format!("volume {id:?}")
}

/// The volume named by `id`, INVALID_ARGUMENT when `id` is not a volume GUID path.
fn name(op: &str, id: &str) -> Result<VolumeName> {
    VolumeName::parse(id).ok_or_else(|| {
        Error::invalid(
            op,
            shown(id),
            r"not a volume ID of this host (\\?\Volume{GUID}\)",
        )
    })
}

/// Opens the volume device `\\.\Volume{GUID}` with `access`; NOT_FOUND naming the volume
/// when it does not exist. Reading, writing and the volume I/O controls all go through this
/// handle; [`Access::Query`] is enough for the controls defined with FILE_ANY_ACCESS (extents,
/// partition information) and works on a volume another process locked.
fn open_volume<'a>(
    os: &'a dyn Win32,
    op: &str,
    id: &str,
    v: &VolumeName,
    access: Access,
) -> Result<Handle<'a>> {
    os::open_with(os, &v.device_path(), access)
        .map_err(|e| volume_error(op, id, &e, access != Access::Query))
}

/// The error of a failed call on volume `id`; `data_access` when the call reached the volume's
/// data or filesystem (not a query open).
fn volume_error(op: &str, id: &str, e: &OsError, data_access: bool) -> Error {
    match e.code {
        // CreateFileW: an open whose access another handle's share mode does not allow fails
        // ERROR_SHARING_VIOLATION (the daemon shares read and write).
        code::SHARING_VIOLATION => Error::new(
            Kind::FailedPrecondition,
            op,
            shown(id),
            format!(
                "another process holds the volume open without sharing it for this access ({e})"
            ),
        ),
        // FSCTL_LOCK_VOLUME: "A locked volume can be accessed only through handles to the file
        // object (*hDevice) that locks the volume"; the daemon runs as an administrator, so a
        // data access refused is a lock.
        code::ACCESS_DENIED if data_access => Error::new(
            Kind::FailedPrecondition,
            op,
            shown(id),
            format!("the volume is locked by another process (FSCTL_LOCK_VOLUME) ({e})"),
        ),
        _ if e.kind() == Kind::NotFound => {
            Error::new(Kind::NotFound, op, shown(id), "no such volume")
        }
        _ => os_error(op, shown(id), e, &[]),
    }
}

/// The disk number of the volume's first extent.
fn first_disk(os: &dyn Win32, op: &str, id: &str) -> Result<u32> {
    let v = name(op, id)?;
    let h = open_volume(os, op, id, &v, Access::Query)?;
    volume_extents(op, &shown(id), &h)?
        .first()
        .map(|e| e.disk_number)
        .ok_or_else(|| {
            Error::new(
                Kind::FailedPrecondition,
                op,
                shown(id),
                "the volume has no extent on any disk",
            )
        })
}

/// The partition holding a basic volume (`IOCTL_DISK_GET_PARTITION_INFO_EX` sent to the volume
/// device answers for the partition underneath it).
fn partition_of(op: &str, id: &str, h: &Handle<'_>) -> Result<Partition> {
    let out = ioctl(h, io::DISK_GET_PARTITION_INFO_EX, &[], layout::ENTRY_SIZE)
        .map_err(|e| os_error(op, shown(id), &e, &[]))?;
    layout::parse_partition_info(&out).map_err(|e| Error::new(Kind::Internal, op, shown(id), e))
}

/// The filesystem name and volume serial number `GetVolumeInformationW` reports for the volume;
/// `None` when Windows recognises no filesystem on it (RAW).
fn volume_filesystem(
    os: &dyn Win32,
    op: &str,
    id: &str,
    v: &VolumeName,
) -> Result<Option<(String, u32)>> {
    match os.volume_information(&v.guid_path()) {
        Ok((n, serial)) => Ok(names::filesystem_present(&n).then_some((n, serial))),
        Err(e) if e.code == code::UNRECOGNIZED_VOLUME => Ok(None),
        // The root directory is on the filesystem: a locked volume refuses it.
        Err(e) if e.code == code::ACCESS_DENIED => Err(volume_error(op, id, &e, true)),
        Err(e) => Err(os_error(op, shown(id), &e, &[])),
    }
}

/// The canonical GUID path of the volume named `v`: a volume can have more than one GUID path,
/// and `GetVolumeNameForVolumeMountPointW` on any of them answers "the first one in the mount
/// manager's cache", which is also what it answers for the volume's mount points.
fn canonical(os: &dyn Win32, op: &str, id: &str, v: &VolumeName) -> Result<String> {
    os.volume_name_for_mount_point(&v.guid_path())
        .map_err(|e| os_error(op, shown(id), &e, &[]))
}

/// The volume GUID path of the volume mounted at the directory `dir` (a drive root or a mounted
/// folder); `None` when `dir` is not a mount point.
fn volume_at(os: &dyn Win32, op: &str, dir: &str) -> Result<Option<String>> {
    match os.volume_name_for_mount_point(&mount_point_path(dir)) {
        Ok(v) => Ok(Some(v)),
        // A directory that is not a mount point fails with ERROR_NOT_A_REPARSE_POINT (or, for a
        // plain directory on some versions, ERROR_INVALID_PARAMETER); a missing one with
        // FILE/PATH_NOT_FOUND, which the callers look at first.
        Err(e) if matches!(e.code, code::NOT_A_REPARSE_POINT | code::INVALID_PARAMETER) => Ok(None),
        Err(e) => Err(os_error(op, format!("{dir:?}"), &e, &[])),
    }
}

/// Whether anything exists at `path` (the entry itself: a link's own attributes).
/// Whether anything is at `path`; `op` fails when the OS cannot tell (a device not ready, a
/// sharing violation): only "not found" means absent, else a transient failure would read as
/// "nothing mounted there" and UnmountVolume would answer OK with the volume still mounted.
fn exists(os: &dyn Win32, op: &str, path: &str) -> Result<bool> {
    match os.file_attributes(&utf16(path)) {
        Ok(_) => Ok(true),
        Err(e) if e.names_nothing() => Ok(false),
        Err(e) => Err(os_error(op, format!("target_path {path:?}"), &e, &[])),
    }
}

/// The reparse point at `path`, `None` when `path` is not one. The link itself is read, not its
/// target.
fn reparse_point(os: &dyn Win32, op: &str, path: &str) -> Result<Option<ReparsePoint>> {
    let object = || format!("target_path {path:?}");
    match os.reparse_data(&utf16(path)) {
        Ok(data) => reparse::parse(&data)
            .map(Some)
            .map_err(|e| Error::new(Kind::Internal, op, object(), e)),
        Err(e) if e.code == code::NOT_A_REPARSE_POINT => Ok(None),
        Err(e) => Err(os_error(op, object(), &e, &[])),
    }
}

/// The directory a link at `path` leads to, as a path: absolute destinations as they are,
/// relative ones against the link's parent directory.
fn follow(path: &str, dest: &str) -> String {
    let b = dest.as_bytes();
    let absolute = dest.starts_with(r"\\") || (b.len() >= 2 && b[1] == b':');
    if absolute {
        return dest.to_string();
    }
    let parent = path.trim_end_matches('\\');
    let parent = parent.rfind('\\').map_or(parent, |i| &parent[..i]);
    format!(r"{parent}\{dest}")
}

/// The volume mounted at `path`, following symbolic links and junctions that lead to the mount
/// point; an error when the path (after links) is not a volume mount point.
fn volume_id_at(os: &dyn Win32, op: &str, path: &str) -> Result<String> {
    let object = format!("target_path {path:?}");
    let mut p = path.to_string();
    for _ in 0..MAX_HOPS {
        if !exists(os, op, &p)? {
            return Err(Error::new(
                Kind::NotFound,
                op,
                &object,
                format!("{p:?} does not exist"),
            ));
        }
        // A drive root (`C:\`) is a mount point without a reparse point.
        if let Some(v) = volume_at(os, op, &p)? {
            return Ok(v);
        }
        let Some(rp) = reparse_point(os, op, &p)? else {
            return Err(Error::new(
                Kind::NotFound,
                op,
                &object,
                "is not a mount point",
            ));
        };
        match rp.destination() {
            Some(LinkDestination::Volume(v)) => return Ok(v),
            Some(LinkDestination::Path(next)) => p = follow(&p, &next),
            _ => {
                return Err(Error::new(
                    Kind::NotFound,
                    op,
                    &object,
                    "is a reparse point that is neither a mount point nor a link to one",
                ));
            }
        }
    }
    Err(Error::new(
        Kind::FailedPrecondition,
        op,
        &object,
        format!("more than {MAX_HOPS} links"),
    ))
}

/// Writes the volume's cached data to the disk: `FlushFileBuffers` on a volume handle "flushes
/// all open files on the volume" and needs a handle with write access (an administrator's).
fn flush(os: &dyn Win32, op: &str, id: &str, v: &VolumeName) -> Result<()> {
    let h = open_volume(os, op, id, v, Access::ReadWrite)?;
    os.flush(h.raw())
        .map_err(|e| os_error(op, shown(id), &e, &[]))
}

/// The first bytes of the volume, for the signature check before formatting. A fresh handle's
/// file pointer is at byte 0, and PROBE_LEN is a whole number of sectors, as reads from a volume
/// handle must be.
fn read_head(os: &dyn Win32, op: &str, id: &str, v: &VolumeName) -> Result<Vec<u8>> {
    let h = open_volume(os, op, id, v, Access::Read)?;
    os.read_at(h.raw(), 0, signatures::PROBE_LEN)
        .map_err(|e| os_error(op, shown(id), &e, &[]))
}

/// Quick-formats the volume NTFS through `MSFT_Volume.Format` (the Storage Management API;
/// Windows documents no Win32 format call), reconnecting to WMI once when the connection was
/// dropped. Parameters as upstream: NTFS, no label, quick, Force (the caller has checked the
/// volume is mounted nowhere).
/// The Storage Management API's "Access denied" return value.
const ACCESS_DENIED_RETURN: u32 = 40001;

fn wmi_format(os: &dyn Win32, op: &str, id: &str, v: &VolumeName) -> Result<()> {
    let volume = v.guid_path();
    let format = || os::wmi_retrying(os, || os.format_ntfs(&volume));
    let code = match format() {
        // The provider answers from a cache that may not hold a volume made moments ago (by
        // PartitionDisk's layout write): refresh it once and ask again. A refresh that fails
        // leaves the first answer standing.
        Err(e) if e.code == code::WBEM_E_NOT_FOUND => {
            match os::wmi_retrying(os, || os.update_host_storage_cache()) {
                Ok(_) => format(),
                Err(_) => Err(e),
            }
        }
        other => other,
    }
    .map_err(|e| os_error(op, shown(id), &e, &[]).context("MSFT_Volume.Format"))?
    .code(op, shown(id), "MSFT_Volume.Format")?;
    storage_return(code).map_err(|(kind, why)| {
        // "Access denied" from the provider, which formats in its own process: a volume locked
        // by another process refuses every handle but the locking one. Said so when a
        // data-access open of ours is refused the same way now.
        if code == ACCESS_DENIED_RETURN
            && let Err(locked) = open_volume(os, op, id, v, Access::Read)
            && locked.kind() == Kind::FailedPrecondition
        {
            return locked.context(format!("MSFT_Volume.Format: {why}"));
        }
        Error::new(kind, op, shown(id), format!("MSFT_Volume.Format: {why}"))
    })
}

impl VolumeHost for WindowsVolumeHost {
    fn list_volumes_on_disk(
        &self,
        disk: u32,
        partition: Option<NonZeroU32>,
    ) -> Result<Vec<String>> {
        const OP: &str = "ListVolumesOnDisk";
        let os = self.os();
        let mut found: Vec<(u32, String)> = Vec::new();
        let volumes = os.volumes().map_err(|e| os_error(OP, "volumes", &e, &[]))?;
        for id in volumes {
            let Some(v) = VolumeName::parse(&id) else {
                continue;
            };
            // Volumes that cannot be opened or have no disk extents (an empty CD drive, a
            // volume being removed) are on no disk.
            let Ok(h) = open_volume(os, OP, &id, &v, Access::Query) else {
                continue;
            };
            let Ok(ext) = volume_extents(OP, &shown(&id), &h) else {
                continue;
            };
            if !ext.iter().any(|e| e.disk_number == disk) {
                continue;
            }
            // Partition numbers order the answer (upstream lists in partition order); a volume
            // without one (spanned over several disks) sorts last.
            let number = partition_of(OP, &id, &h).map_or(u32::MAX, |p| p.number);
            if partition.is_some_and(|want| want.get() != number) {
                continue;
            }
            found.push((number, id));
        }
        // No volume on it: an unknown disk is NOT_FOUND, as GetDiskStats answers.
        if found.is_empty() {
            drop(super::disk::open_disk(os, OP, disk, false)?);
        }
        found.sort();
        Ok(found.into_iter().map(|(_, id)| id).collect())
    }

    fn mount_volume(&self, id: &str, target: &str) -> Result<()> {
        const OP: &str = "MountVolume";
        let v = name(OP, id)?;
        drop(open_volume(self.os(), OP, id, &v, Access::Query)?);
        rules::mount(
            OP,
            &Resolved {
                host: self,
                id,
                v,
                target,
            },
        )
    }

    fn unmount_volume(&self, id: &str, target: &str) -> Result<()> {
        const OP: &str = "UnmountVolume";
        let os = self.os();
        let v = name(OP, id)?;
        let object = format!("{} at {target:?}", shown(id));
        if !exists(os, OP, target)? {
            return Ok(()); // nothing there: nothing mounted
        }
        let r = Resolved {
            host: self,
            id,
            v,
            target,
        };
        if !rules::unmount_decision(OP, &object, &r.occupant_at(OP)?)? {
            return Ok(()); // not (or no longer) a mount point: success
        }
        flush(os, OP, id, &r.v)?;
        // Removes the mount point only; the directory stays (drivers remove it with Rmdir).
        os.delete_volume_mount_point(&mount_point_path(target))
            .map_err(|e| os_error(OP, &object, &e, &[]))?;
        tracing::info!(volume = id, target, "unmounted");
        Ok(())
    }

    fn is_volume_formatted(&self, id: &str) -> Result<bool> {
        const OP: &str = "IsVolumeFormatted";
        let os = self.os();
        let v = name(OP, id)?;
        drop(open_volume(os, OP, id, &v, Access::Query)?);
        Resolved {
            host: self,
            id,
            v,
            target: "",
        }
        .formatted(OP)
    }

    fn format_volume(&self, id: &str) -> Result<()> {
        const OP: &str = "FormatVolume";
        let v = name(OP, id)?;
        drop(open_volume(self.os(), OP, id, &v, Access::Query)?);
        rules::format(
            OP,
            &Resolved {
                host: self,
                id,
                v,
                target: "",
            },
        )
    }

    fn resize_volume(&self, id: &str, target: ResizeTarget) -> Result<()> {
        const OP: &str = "ResizeVolume";
        let os = self.os();
        let v = name(OP, id)?;
        let object = shown(id);
        let vh = open_volume(os, OP, id, &v, Access::ReadWrite)?;
        let ext = volume_extents(OP, &object, &vh)?;
        let [extent] = ext.as_slice() else {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!(
                    "the volume has {} disk extents; only a volume on one partition is resized",
                    ext.len()
                ),
            ));
        };
        let disk = extent.disk_number;
        let part = partition_of(OP, id, &vh)?;
        let dh = open_disk(os, OP, disk, true)?;
        let disk_object = format!("disk {disk}");
        // IOCTL_DISK_UPDATE_DRIVE_SIZE "updates the device extension with drive size information
        // for current media" and IOCTL_DISK_UPDATE_PROPERTIES re-reads the partition table: a
        // disk grown underneath Windows (a cloud disk expanded) shows its new size and usable
        // area before the maximum is computed.
        ioctl(&dh, io::DISK_UPDATE_DRIVE_SIZE, &[], 64)
            .map_err(|e| os_error(OP, &disk_object, &e, &[]))?;
        ioctl(&dh, io::DISK_UPDATE_PROPERTIES, &[], 0)
            .map_err(|e| os_error(OP, &disk_object, &e, &[]))?;
        let (l, sector) = read_layout(OP, disk, &dh)?;
        // GET_LENGTH_INFORMATION: Length i64 @0.
        let disk_length = ioctl(&dh, io::DISK_GET_LENGTH_INFO, &[], 8)
            .ok()
            .and_then(|b| io::le_u64(&b, 0))
            .filter(|n| i64::try_from(*n).is_ok())
            .ok_or_else(|| Error::new(Kind::Internal, OP, &disk_object, "no disk length"))?;
        let limit = grow::grow_limit(&l, part.number, disk_length, sector)
            .map_err(|e| Error::new(Kind::Internal, OP, &object, e))?;
        let maximum = limit.maximum;
        // No filesystem (GetDiskFreeSpaceExW answers ERROR_UNRECOGNIZED_VOLUME on RAW): only
        // the partition is grown (FSCTL_EXTEND_VOLUME on a RAW volume is accepted but means
        // nothing). Any other failure says nothing about the filesystem: the call fails before
        // anything changes, else the partition alone would grow and the answer be OK.
        let fs_total = match os.disk_free_space(&v.guid_path()) {
            Ok((total, _)) => Some(total),
            Err(e) if e.code == code::UNRECOGNIZED_VOLUME => None,
            Err(e) => return Err(os_error(OP, &object, &e, &[])),
        };
        let steps = rules::resize_steps(
            OP,
            &object,
            rules::ResizeFacts {
                current: part.length,
                maximum,
                fs_bytes: fs_total,
                sector,
                slack: names::FS_SLACK,
                refusal: limit
                    .refusal
                    .map(|why| format!("{why} ({disk_object} partition {})", part.number)),
            },
            target,
        )?;
        if steps.grow_partition > 0 || steps.extend_filesystem {
            // Both steps write to the disk, which on a read-only one "will fail": refused
            // before either, naming the attribute, so no partition grows under a filesystem
            // that cannot follow.
            let attrs = super::disk::disk_attributes(os, OP, disk)?;
            super::disk::refuse_attribute(OP, disk, attrs, io::DISK_ATTRIBUTE_READ_ONLY)?;
        }
        if steps.grow_partition > 0 {
            // The documented way to enlarge a live partition ("you can grow an active
            // partition, and the partition can be open for sharing during the operation");
            // unlike rewriting the whole layout it touches no other partition.
            ioctl(
                &dh,
                io::DISK_GROW_PARTITION,
                &io::grow_partition(part.number, steps.grow_partition),
                0,
            )
            .map_err(|e| {
                os_error(
                    OP,
                    format!("{disk_object} partition {}", part.number),
                    &e,
                    &[],
                )
            })?;
            let _ = ioctl(&dh, io::DISK_UPDATE_PROPERTIES, &[], 0);
        }
        if steps.extend_filesystem {
            let new_length = part.length + steps.grow_partition;
            // FSCTL_EXTEND_VOLUME takes "the total number of sectors that should be in the
            // extended volume" and works on a live, mounted NTFS or ReFS volume.
            let sectors = extend_sectors(new_length, sector as u32) as i64;
            // Right after the grow the volume re-reads its partition and may answer "not
            // ready" for a moment: asked again for up to 10 s.
            let until = os.now() + std::time::Duration::from_secs(10);
            loop {
                match ioctl(&vh, io::FSCTL_EXTEND_VOLUME, &sectors.to_le_bytes(), 0) {
                    Err(e) if e.code == code::NOT_READY && os.now() < until => {
                        os.sleep(std::time::Duration::from_millis(100));
                    }
                    r => {
                        r.map_err(|e| {
                            os_error(OP, &object, &e, &[]).context("FSCTL_EXTEND_VOLUME")
                        })?;
                        break;
                    }
                }
            }
        }
        tracing::info!(volume = id, grown_by = steps.grow_partition, "resized");
        Ok(())
    }

    fn get_volume_stats(&self, id: &str) -> Result<VolumeStats> {
        const OP: &str = "GetVolumeStats";
        let os = self.os();
        let v = name(OP, id)?;
        drop(open_volume(os, OP, id, &v, Access::Query)?);
        // The GUID path names the volume's root directory, mounted or not; the total free bytes
        // are asked for, not the caller's quota.
        let (total, free) = os.disk_free_space(&v.guid_path()).map_err(|e| {
            if e.code == code::UNRECOGNIZED_VOLUME {
                Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    shown(id),
                    "the volume has no filesystem",
                )
            } else {
                os_error(OP, shown(id), &e, &[])
            }
        })?;
        Ok(VolumeStats {
            total_bytes: total,
            used_bytes: total.saturating_sub(free),
        })
    }

    fn get_disk_number_from_volume_id(&self, id: &str) -> Result<u32> {
        first_disk(self.os(), "GetDiskNumberFromVolumeID", id)
    }

    fn get_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        volume_id_at(self.os(), "GetVolumeIDFromTargetPath", target)
    }

    fn get_closest_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        const OP: &str = "GetClosestVolumeIDFromTargetPath";
        let os = self.os();
        let object = format!("target_path {target:?}");
        if !exists(os, OP, target)? {
            return Err(Error::new(Kind::NotFound, OP, &object, "does not exist"));
        }
        // A link (to a mount point or anywhere) at the path itself is followed first, as
        // upstream's walk does.
        if let Ok(id) = volume_id_at(os, OP, target) {
            return Ok(id);
        }
        // "The mount point where the path is mounted": the deepest mounted folder or drive
        // root above it.
        let root = os
            .volume_path_name(target)
            .map_err(|e| os_error(OP, &object, &e, &[]))?;
        volume_at(os, OP, &root)?.ok_or_else(|| {
            Error::new(
                Kind::NotFound,
                OP,
                &object,
                format!("its volume root {root:?} is not a mount point"),
            )
        })
    }

    fn write_volume_cache(&self, id: &str) -> Result<()> {
        const OP: &str = "WriteVolumeCache";
        let v = name(OP, id)?;
        flush(self.os(), OP, id, &v)
    }

    fn volume_disk_number(&self, id: &str) -> Result<u32> {
        first_disk(self.os(), "locating", id)
    }

    fn disk_usage(&self, disk: u32) -> Result<DiskUsage> {
        WindowsDiskHost::with_os(self.os.clone()).disk_usage(disk)
    }

    fn volumes_open_elsewhere(&self, disk: u32) -> Result<Vec<OpenElsewhere>> {
        WindowsDiskHost::with_os(self.os.clone()).volumes_open_elsewhere(disk)
    }
}
