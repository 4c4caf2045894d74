//! Windows implementation of the volume group ([`VolumeHost`]) through the volume management
//! functions and device I/O controls, with WMI only for the one operation Windows has no
//! documented Win32 call for (formatting). No child process, no defrag service.
//!
//! Volume IDs are volume GUID paths, `\\?\Volume{GUID}\`, exactly as `FindFirstVolumeW` and
//! `GetVolumeNameForVolumeMountPointW` return them (upstream's `MSFT_Volume.UniqueId` is the
//! same string). Anything else is refused before any OS call
//! ([`crate::windows_data::volume::VolumeName`]).
//!
//! Data safety (design.md §5), on top of the core service's refusal of the host's own disks:
//! FormatVolume never formats a volume that is mounted anywhere or that carries a filesystem or
//! any other recognised signature; ResizeVolume only grows, only in place.

use super::disk::{
    IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS, WindowsDiskHost, ioctl, open_device, open_disk,
    read_layout,
};
use super::win::{OwnedHandle, from_wide, os_error, wide};
use super::wmi::{property, with_namespace, wmi_error};
use crate::format_record::{FormatRecord, FormatRecords};
use crate::reparse::{self, LinkDestination, ReparsePoint};
use crate::signatures;
use crate::windows_data::layout::{self, Partition};
use crate::windows_data::storage::{self, DiskExtent};
use crate::windows_data::volume::{
    self as names, VolumeName, extend_sectors, mount_point_path, resize_steps,
};
use crate::windows_data::wmi_codes::storage_return;
use csi_proxy_core::disk::{DiskHost, DiskUsage};
use csi_proxy_core::volume::{ResizeTarget, VolumeHost, VolumeStats};
use csi_proxy_core::{Error, Kind, Result};
use std::num::NonZeroU32;
use windows::Win32::Foundation::{
    ERROR_DIR_NOT_EMPTY, ERROR_INVALID_PARAMETER, ERROR_NOT_A_REPARSE_POINT,
    ERROR_UNRECOGNIZED_VOLUME,
};
use windows::Win32::Storage::FileSystem::{
    DeleteVolumeMountPointW, FindFirstVolumeW, FindNextVolumeW, FindVolumeClose, FlushFileBuffers,
    GetDiskFreeSpaceExW, GetFileAttributesW, GetVolumeInformationW,
    GetVolumeNameForVolumeMountPointW, GetVolumePathNameW, GetVolumePathNamesForVolumeNameW,
    INVALID_FILE_ATTRIBUTES, ReadFile, SetVolumeMountPointW,
};
use windows::Win32::System::Ioctl::{
    FSCTL_EXTEND_VOLUME, IOCTL_DISK_GET_LENGTH_INFO, IOCTL_DISK_GET_PARTITION_INFO_EX,
    IOCTL_DISK_GROW_PARTITION, IOCTL_DISK_UPDATE_DRIVE_SIZE, IOCTL_DISK_UPDATE_PROPERTIES,
};
use windows::core::PCWSTR;

/// The WMI namespace of the Storage Management API (`MSFT_Volume`).
const STORAGE_NAMESPACE: &str = r"ROOT\Microsoft\Windows\Storage";
/// Links followed from a target path before giving up (upstream's walk stops at 256; a chain of
/// links to a mount point is one or two long in practice).
const MAX_HOPS: usize = 64;

/// The Windows volume host.
#[derive(Debug, Clone)]
pub struct WindowsVolumeHost {
    records: FormatRecords,
}

impl WindowsVolumeHost {
    /// A host acting on the local volumes, keeping its format records under
    /// `<state_dir>\format` (see [`crate::format_record`]).
    pub fn new(state_dir: impl AsRef<std::path::Path>) -> Self {
        Self {
            records: FormatRecords::new(state_dir.as_ref().join("format")),
        }
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

/// Opens the volume device `\\.\Volume{GUID}`; NOT_FOUND naming the volume when it does not
/// exist. Reading, writing and the volume I/O controls all go through this handle.
fn open_volume(op: &str, id: &str, v: &VolumeName, write: bool) -> Result<OwnedHandle> {
    open_device(op, &v.device_path(), write).map_err(|e| {
        if e.kind() == Kind::NotFound {
            Error::new(Kind::NotFound, op, shown(id), "no such volume")
        } else {
            e
        }
    })
}

/// The disk extents of the volume (`IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS`: "retrieves the
/// physical location of a specified volume on one or more disks").
fn extents(op: &str, id: &str, h: &OwnedHandle) -> Result<Vec<DiskExtent>> {
    let out = ioctl(h, IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS, &[], 8 + 24 * 4)
        .map_err(|e| os_error(op, shown(id), &e, &[]))?;
    storage::parse_volume_disk_extents(&out)
        .map_err(|e| Error::new(Kind::Internal, op, shown(id), e))
}

/// The disk number of the volume's first extent.
fn first_disk(op: &str, id: &str, h: &OwnedHandle) -> Result<u32> {
    extents(op, id, h)?
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
fn partition_of(op: &str, id: &str, h: &OwnedHandle) -> Result<Partition> {
    let out = ioctl(h, IOCTL_DISK_GET_PARTITION_INFO_EX, &[], layout::ENTRY_SIZE)
        .map_err(|e| os_error(op, shown(id), &e, &[]))?;
    layout::parse_partition_info(&out).map_err(|e| Error::new(Kind::Internal, op, shown(id), e))
}

/// Every volume GUID path on the system (`FindFirstVolumeW`/`FindNextVolumeW`, which return
/// them with the trailing backslash).
fn all_volumes(op: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut buf = [0u16; 64];
    // SAFETY: `buf` is writable for its length (a volume GUID path is 49 units with the NUL).
    let find =
        unsafe { FindFirstVolumeW(&mut buf) }.map_err(|e| os_error(op, "volumes", &e, &[]))?;
    loop {
        out.push(from_wide(&buf));
        // SAFETY: `find` is the live handle from FindFirstVolumeW; `buf` is writable. The call
        // fails with ERROR_NO_MORE_FILES after the last volume.
        if unsafe { FindNextVolumeW(find, &mut buf) }.is_err() {
            break;
        }
    }
    // SAFETY: closes the handle FindFirstVolumeW returned, exactly once.
    let _ = unsafe { FindVolumeClose(find) };
    Ok(out)
}

/// The filesystem name and volume serial number `GetVolumeInformationW` reports for the volume;
/// `None` when Windows recognises no filesystem on it (RAW).
fn volume_filesystem(op: &str, id: &str, v: &VolumeName) -> Result<Option<(String, u32)>> {
    let root = wide(&v.guid_path());
    let mut fs = [0u16; 64];
    let mut serial = 0u32;
    // SAFETY: `root` is the NUL-terminated volume GUID path with its trailing backslash, as the
    // function requires of a root; `fs` is writable for its length (MAX_PATH + 1 is documented
    // as enough; filesystem names are short, and a longer one fails rather than overflows);
    // `serial` receives the volume serial number (a DWORD).
    match unsafe {
        GetVolumeInformationW(
            PCWSTR(root.as_ptr()),
            None,
            Some(&mut serial),
            None,
            None,
            Some(&mut fs),
        )
    } {
        Ok(()) => {
            let n = from_wide(&fs);
            Ok(names::filesystem_present(&n).then_some((n, serial)))
        }
        Err(e) if super::win::win32_code(&e) == Some(ERROR_UNRECOGNIZED_VOLUME) => Ok(None),
        Err(e) => Err(os_error(op, shown(id), &e, &[])),
    }
}

/// Where the volume is mounted: drive letters and mounted folders
/// (`GetVolumePathNamesForVolumeNameW`, a MULTI_SZ list).
fn mount_paths(op: &str, id: &str, v: &VolumeName) -> Result<Vec<String>> {
    let w = wide(&v.guid_path());
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0u16; size];
        let mut needed = 0u32;
        // SAFETY: `w` is NUL-terminated with the trailing backslash the function requires; `buf`
        // is writable for its length and `needed` receives the required length on
        // ERROR_MORE_DATA.
        match unsafe {
            GetVolumePathNamesForVolumeNameW(PCWSTR(w.as_ptr()), Some(&mut buf), &mut needed)
        } {
            Ok(()) => {
                return Ok(buf
                    .split(|&c| c == 0)
                    .take_while(|p| !p.is_empty())
                    .map(String::from_utf16_lossy)
                    .collect());
            }
            Err(_) if (needed as usize) > size && size < (1 << 20) => size = needed as usize,
            Err(e) => return Err(os_error(op, shown(id), &e, &[])),
        }
    }
}

/// The volume GUID path of the volume mounted at the directory `dir` (a drive root or a mounted
/// folder); `None` when `dir` is not a mount point.
fn volume_at(op: &str, dir: &str) -> Result<Option<String>> {
    let mp = wide(&mount_point_path(dir));
    let mut buf = [0u16; 64];
    // SAFETY: `mp` is NUL-terminated and ends in a backslash as the function requires; `buf`
    // is writable and 50 units are documented as enough for a volume GUID path.
    match unsafe { GetVolumeNameForVolumeMountPointW(PCWSTR(mp.as_ptr()), &mut buf) } {
        Ok(()) => Ok(Some(from_wide(&buf))),
        Err(e) => {
            let code = super::win::win32_code(&e);
            // A directory that is not a mount point fails with ERROR_NOT_A_REPARSE_POINT (or,
            // for a plain directory on some versions, ERROR_INVALID_PARAMETER); a missing one
            // with FILE/PATH_NOT_FOUND, which the caller treats separately.
            if matches!(
                code,
                Some(ERROR_NOT_A_REPARSE_POINT | ERROR_INVALID_PARAMETER)
            ) {
                Ok(None)
            } else {
                Err(os_error(op, format!("{dir:?}"), &e, &[]))
            }
        }
    }
}

/// Whether anything exists at `path` (the entry itself: a link's own attributes).
fn exists(path: &str) -> bool {
    let w = wide(path);
    // SAFETY: `w` is NUL-terminated and outlives the call.
    let attrs = unsafe { GetFileAttributesW(PCWSTR(w.as_ptr())) };
    attrs != INVALID_FILE_ATTRIBUTES
}

/// The reparse point at `path`, `None` when `path` is not one. Read with
/// `FSCTL_GET_REPARSE_POINT` on a handle opened with `FILE_FLAG_OPEN_REPARSE_POINT` ("normal
/// reparse point processing will not occur"), so the link itself is read, not its target.
fn reparse_point(op: &str, path: &str) -> Result<Option<ReparsePoint>> {
    let object = || format!("target_path {path:?}");
    let wide_path: Vec<u16> = path.encode_utf16().collect();
    match super::filesystem::reparse_data(&wide_path) {
        Ok(data) => reparse::parse(&data)
            .map(Some)
            .map_err(|e| Error::new(Kind::Internal, op, object(), e)),
        Err(e) if e.raw_os_error() == Some(ERROR_NOT_A_REPARSE_POINT.0 as i32) => Ok(None),
        Err(e) => Err(Error::io(op, object(), &e)),
    }
}

/// The directory `link` (at `path`) leads to, as a path: absolute destinations as they are,
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
fn volume_id_at(op: &str, path: &str) -> Result<String> {
    let object = format!("target_path {path:?}");
    let mut p = path.to_string();
    for _ in 0..MAX_HOPS {
        if !exists(&p) {
            return Err(Error::new(
                Kind::NotFound,
                op,
                &object,
                format!("{p:?} does not exist"),
            ));
        }
        // A drive root (`C:\`) is a mount point without a reparse point.
        if let Some(v) = volume_at(op, &p)? {
            return Ok(v);
        }
        let Some(rp) = reparse_point(op, &p)? else {
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
fn flush(op: &str, id: &str, v: &VolumeName) -> Result<()> {
    let h = open_volume(op, id, v, true)?;
    // SAFETY: `h` is a live handle opened with GENERIC_WRITE.
    unsafe { FlushFileBuffers(h.0) }.map_err(|e| os_error(op, shown(id), &e, &[]))
}

/// The first bytes of the volume, for the signature check before formatting.
fn read_head(op: &str, id: &str, v: &VolumeName) -> Result<Vec<u8>> {
    // A fresh handle's file pointer is at byte 0, and PROBE_LEN is a whole number of sectors,
    // as reads from a volume handle must be.
    let h = open_volume(op, id, v, false)?;
    let mut buf = vec![0u8; signatures::PROBE_LEN];
    let mut got = 0u32;
    // SAFETY: `buf` is writable for its length; synchronous handle, no OVERLAPPED.
    unsafe { ReadFile(h.0, Some(&mut buf), Some(&raw mut got), None) }
        .map_err(|e| os_error(op, shown(id), &e, &[]))?;
    buf.truncate(got as usize);
    Ok(buf)
}

/// Quick-formats the volume NTFS through `MSFT_Volume.Format` on the WMI thread (the Storage
/// Management API; Windows documents no Win32 format call). Parameters as upstream: NTFS, no
/// label, quick (Full = false), Force (formats even if the volume is in use; the caller has
/// checked it is mounted nowhere).
fn wmi_format(op: &'static str, id: &str, v: &VolumeName) -> Result<()> {
    const CLASS: &str = "MSFT_Volume";
    let query = format!(
        "SELECT * FROM {CLASS} WHERE UniqueId = {}",
        names::wql_string(&v.guid_path())
    );
    let object = shown(id);
    let code = with_namespace(op, STORAGE_NAMESPACE, move |c| {
        let rows = c
            .exec_query(query)
            .map_err(|e| wmi_error(op, &object, &e))?;
        let row = rows
            .into_iter()
            .next()
            .ok_or_else(|| {
                Error::new(
                    Kind::NotFound,
                    op,
                    &object,
                    "no MSFT_Volume with this UniqueId",
                )
            })?
            .map_err(|e| wmi_error(op, &object, &e))?;
        let path = row.path().map_err(|e| wmi_error(op, &object, &e))?;
        let class = c.get_object(CLASS).map_err(|e| wmi_error(op, CLASS, &e))?;
        let params = class
            .get_method("Format")
            .map_err(|e| wmi_error(op, CLASS, &e))?
            .ok_or_else(|| Error::new(Kind::Unimplemented, op, CLASS, "no Format method"))?
            .spawn_instance()
            .map_err(|e| wmi_error(op, CLASS, &e))?;
        let put = |name: &str, value: wmi::Variant| {
            params
                .put_property(name, value)
                .map_err(|e| wmi_error(op, format!("{CLASS}.Format parameter {name}"), &e))
        };
        put("FileSystem", wmi::Variant::String("NTFS".into()))?;
        put("FileSystemLabel", wmi::Variant::String(String::new()))?;
        put("Full", wmi::Variant::Bool(false))?;
        put("Force", wmi::Variant::Bool(true))?;
        let out = c
            .exec_method(&path, "Format", Some(&params))
            .map_err(|e| wmi_error(op, &object, &e))?;
        match out {
            None => Ok(0),
            Some(o) => Ok(match property(op, &object, &o, "ReturnValue")? {
                wmi::Variant::UI4(n) => n,
                wmi::Variant::I4(n) => n as u32,
                _ => 0,
            }),
        }
    })?;
    storage_return(code).map_err(|(kind, why)| {
        Error::new(kind, op, shown(id), format!("MSFT_Volume.Format: {why}"))
    })
}

/// Sends a fixed-size input with no output.
fn ioctl_in(h: &OwnedHandle, code: u32, input: &[u8]) -> windows::core::Result<()> {
    ioctl(h, code, input, 0).map(drop)
}

impl VolumeHost for WindowsVolumeHost {
    fn list_volumes_on_disk(
        &self,
        disk: u32,
        partition: Option<NonZeroU32>,
    ) -> Result<Vec<String>> {
        const OP: &str = "ListVolumesOnDisk";
        let mut found: Vec<(u32, String)> = Vec::new();
        for id in all_volumes(OP)? {
            let Some(v) = VolumeName::parse(&id) else {
                continue;
            };
            // Volumes that cannot be opened or have no disk extents (an empty CD drive, a
            // volume being removed) are on no disk.
            let Ok(h) = open_volume(OP, &id, &v, false) else {
                continue;
            };
            let Ok(ext) = extents(OP, &id, &h) else {
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
        found.sort();
        Ok(found.into_iter().map(|(_, id)| id).collect())
    }

    fn mount_volume(&self, id: &str, target: &str) -> Result<()> {
        const OP: &str = "MountVolume";
        let v = name(OP, id)?;
        let object = format!("{} at {target:?}", shown(id));
        drop(open_volume(OP, id, &v, false)?);
        if !exists(target) {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                "target_path does not exist; create the directory first",
            ));
        }
        if let Some(current) = volume_at(OP, target)? {
            if names::same_volume(&current, id) {
                return Ok(()); // the same volume already mounted here: idempotent
            }
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!("another volume ({current}) is mounted there"),
            ));
        }
        let mp = wide(&mount_point_path(target));
        let vol = wide(&v.guid_path());
        // SAFETY: both strings are NUL-terminated and end in a backslash, as the function
        // requires ("the string must end with a trailing backslash"). It fails on a directory
        // that is not empty (ERROR_DIR_NOT_EMPTY), which is how a non-empty target is refused.
        unsafe { SetVolumeMountPointW(PCWSTR(mp.as_ptr()), PCWSTR(vol.as_ptr())) }.map_err(
            |e| match super::win::win32_code(&e) {
                Some(ERROR_DIR_NOT_EMPTY) => Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    &object,
                    "target_path is not an empty directory",
                ),
                _ => os_error(OP, &object, &e, &[]),
            },
        )?;
        tracing::info!(volume = id, target, "mounted");
        Ok(())
    }

    fn unmount_volume(&self, id: &str, target: &str) -> Result<()> {
        const OP: &str = "UnmountVolume";
        let v = name(OP, id)?;
        let object = format!("{} at {target:?}", shown(id));
        if !exists(target) {
            return Ok(()); // nothing there: nothing mounted
        }
        let Some(current) = volume_at(OP, target)? else {
            return Ok(()); // not (or no longer) a mount point: success
        };
        if !names::same_volume(&current, id) {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!("a different volume ({current}) is mounted there; not unmounting it"),
            ));
        }
        flush(OP, id, &v)?;
        let mp = wide(&mount_point_path(target));
        // SAFETY: NUL-terminated with the trailing backslash the function requires. It removes
        // the mount point only; the directory stays (drivers remove it with Rmdir).
        unsafe { DeleteVolumeMountPointW(PCWSTR(mp.as_ptr())) }
            .map_err(|e| os_error(OP, &object, &e, &[]))?;
        tracing::info!(volume = id, target, "unmounted");
        Ok(())
    }

    fn is_volume_formatted(&self, id: &str) -> Result<bool> {
        const OP: &str = "IsVolumeFormatted";
        let v = name(OP, id)?;
        drop(open_volume(OP, id, &v, false)?);
        Ok(volume_filesystem(OP, id, &v)?.is_some())
    }

    fn format_volume(&self, id: &str) -> Result<()> {
        const OP: &str = "FormatVolume";
        let v = name(OP, id)?;
        let object = shown(id);
        drop(open_volume(OP, id, &v, false)?);
        let mounted = mount_paths(OP, id, &v)?;
        if let Some(first) = mounted.first() {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!("the volume is mounted at {first:?}; refusing to format it"),
            ));
        }
        // The record of an earlier FormatVolume of this volume tells its own work from a
        // filesystem that must not be touched, also after a daemon restart.
        let key = v.guid();
        let record = self.records.read(key);
        let interrupted = record.as_ref().is_some_and(|r| !r.done);
        if let Some((fs, serial)) = volume_filesystem(OP, id, &v)? {
            match &record {
                Some(r)
                    if r.done && fs.eq_ignore_ascii_case(&r.fs) && r.id == serial_text(serial) =>
                {
                    return Ok(()); // formatted by an earlier call: idempotent
                }
                Some(r) if !r.done => tracing::warn!(
                    volume = id,
                    "an earlier FormatVolume was interrupted; formatting again"
                ),
                _ => {
                    return Err(Error::new(
                        Kind::FailedPrecondition,
                        OP,
                        &object,
                        format!("the volume already holds {fs}; refusing to format over it"),
                    ));
                }
            }
        } else if !interrupted {
            // Windows calls the volume RAW; make sure it holds nothing another OS would
            // recognise (ext4, LUKS, LVM, ...) before writing over it. An interrupted format of
            // ours may have left a partial NTFS: that one is formatted again.
            if let Some(sig) = signatures::probe(&read_head(OP, id, &v)?) {
                return Err(Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    &object,
                    format!("the volume holds {}; refusing to format over it", sig.kind),
                ));
            }
        }
        let write = |r: &FormatRecord| {
            self.records.write(key, r, id).map_err(|e| {
                Error::io(OP, &object, &e)
                    .context(format!("state dir {}", self.records.dir().display()))
            })
        };
        write(&FormatRecord {
            fs: "NTFS".into(),
            id: String::new(),
            done: false,
        })?;
        wmi_format(OP, id, &v)?;
        let serial = match volume_filesystem(OP, id, &v)? {
            Some((_, serial)) => serial,
            None => {
                return Err(Error::new(
                    Kind::Internal,
                    OP,
                    &object,
                    "the format reported success but Windows recognises no filesystem on the volume",
                ));
            }
        };
        write(&FormatRecord {
            fs: "NTFS".into(),
            id: serial_text(serial),
            done: true,
        })?;
        tracing::info!(volume = id, "formatted NTFS");
        Ok(())
    }

    fn resize_volume(&self, id: &str, target: ResizeTarget) -> Result<()> {
        const OP: &str = "ResizeVolume";
        let v = name(OP, id)?;
        let object = shown(id);
        let vh = open_volume(OP, id, &v, true)?;
        let ext = extents(OP, id, &vh)?;
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
        let dh = open_disk(OP, disk, true)?;
        let disk_object = format!("disk {disk}");
        // IOCTL_DISK_UPDATE_DRIVE_SIZE "updates the device extension with drive size information
        // for current media" and IOCTL_DISK_UPDATE_PROPERTIES re-reads the partition table: a
        // disk grown underneath Windows (a cloud disk expanded) shows its new size and usable
        // area before the maximum is computed.
        ioctl(&dh, IOCTL_DISK_UPDATE_DRIVE_SIZE, &[], 64)
            .map_err(|e| os_error(OP, &disk_object, &e, &[]))?;
        ioctl_in(&dh, IOCTL_DISK_UPDATE_PROPERTIES, &[])
            .map_err(|e| os_error(OP, &disk_object, &e, &[]))?;
        let (l, sector) = read_layout(OP, disk, &dh)?;
        if l.style != layout::STYLE_GPT {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!("{disk_object} is not GPT; only partitions of GPT disks are grown"),
            ));
        }
        // GET_LENGTH_INFORMATION: Length i64 @0.
        let disk_length = ioctl(&dh, IOCTL_DISK_GET_LENGTH_INFO, &[], 8)
            .ok()
            .and_then(|b| {
                b.get(0..8)
                    .and_then(|b| b.try_into().ok())
                    .map(i64::from_le_bytes)
            })
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| Error::new(Kind::Internal, OP, &disk_object, "no disk length"))?;
        let maximum = layout::max_partition_size(&l, part.number, disk_length, sector)
            .map_err(|e| Error::new(Kind::Internal, OP, &object, e))?;
        let wanted = match target {
            ResizeTarget::Maximum => None,
            ResizeTarget::Bytes(n) => Some(n),
        };
        let mut fs_total = 0u64;
        let root = wide(&v.guid_path());
        // SAFETY: the root is the NUL-terminated volume GUID path with its trailing backslash;
        // only the total is asked for, into a valid u64.
        let fs_known = unsafe {
            GetDiskFreeSpaceExW(PCWSTR(root.as_ptr()), None, Some(&raw mut fs_total), None)
        }
        .is_ok();
        if !fs_known {
            // No filesystem: only the partition is grown (FSCTL_EXTEND_VOLUME on a RAW volume
            // is accepted but means nothing).
            fs_total = part.length;
        }
        let steps = resize_steps(part.length, maximum, fs_total, wanted, sector)
            .map_err(|e| Error::new(Kind::FailedPrecondition, OP, &object, e))?;
        if steps.grow_partition > 0 {
            // DISK_GROW_PARTITION: PartitionNumber u32 @0, BytesToGrow i64 @8. The documented
            // way to enlarge a live partition ("you can grow an active partition, and the
            // partition can be open for sharing during the operation"); unlike rewriting the
            // whole layout it touches no other partition.
            let mut input = [0u8; 16];
            input[0..4].copy_from_slice(&part.number.to_le_bytes());
            input[8..16].copy_from_slice(&(steps.grow_partition as i64).to_le_bytes());
            ioctl_in(&dh, IOCTL_DISK_GROW_PARTITION, &input).map_err(|e| {
                os_error(
                    OP,
                    format!("{disk_object} partition {}", part.number),
                    &e,
                    &[],
                )
            })?;
            let _ = ioctl_in(&dh, IOCTL_DISK_UPDATE_PROPERTIES, &[]);
        }
        if steps.extend_filesystem && fs_known {
            let new_length = part.length + steps.grow_partition;
            // FSCTL_EXTEND_VOLUME takes "the total number of sectors that should be in the
            // extended volume" and works on a live, mounted NTFS or ReFS volume.
            let sectors = extend_sectors(new_length, sector as u32) as i64;
            ioctl_in(&vh, FSCTL_EXTEND_VOLUME, &sectors.to_le_bytes())
                .map_err(|e| os_error(OP, &object, &e, &[]).context("FSCTL_EXTEND_VOLUME"))?;
        }
        tracing::info!(volume = id, grown_by = steps.grow_partition, "resized");
        Ok(())
    }

    fn get_volume_stats(&self, id: &str) -> Result<VolumeStats> {
        const OP: &str = "GetVolumeStats";
        let v = name(OP, id)?;
        drop(open_volume(OP, id, &v, false)?);
        let root = wide(&v.guid_path());
        let (mut total, mut free) = (0u64, 0u64);
        // SAFETY: `root` is NUL-terminated and names the volume's root directory (the GUID path
        // with its trailing backslash works unmounted too); the outputs are valid u64s. The
        // total free bytes are asked for, not the caller's quota.
        unsafe {
            GetDiskFreeSpaceExW(
                PCWSTR(root.as_ptr()),
                None,
                Some(&raw mut total),
                Some(&raw mut free),
            )
        }
        .map_err(|e| {
            if super::win::win32_code(&e) == Some(ERROR_UNRECOGNIZED_VOLUME) {
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
        const OP: &str = "GetDiskNumberFromVolumeID";
        let v = name(OP, id)?;
        let h = open_volume(OP, id, &v, false)?;
        first_disk(OP, id, &h)
    }

    fn get_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        volume_id_at("GetVolumeIDFromTargetPath", target)
    }

    fn get_closest_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        const OP: &str = "GetClosestVolumeIDFromTargetPath";
        let object = format!("target_path {target:?}");
        if !exists(target) {
            return Err(Error::new(Kind::NotFound, OP, &object, "does not exist"));
        }
        // A link (to a mount point or anywhere) at the path itself is followed first, as
        // upstream's walk does.
        if let Ok(id) = volume_id_at(OP, target) {
            return Ok(id);
        }
        let w = wide(target);
        let mut root = vec![0u16; target.len() + 64];
        // SAFETY: `w` is NUL-terminated; `root` is writable and at least as long as the path
        // plus a separator, which bounds the answer ("the mount point where the path is
        // mounted": the deepest mounted folder or drive root above it).
        unsafe { GetVolumePathNameW(PCWSTR(w.as_ptr()), &mut root) }
            .map_err(|e| os_error(OP, &object, &e, &[]))?;
        let root = from_wide(&root);
        volume_at(OP, &root)?.ok_or_else(|| {
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
        flush(OP, id, &v)
    }

    fn volume_disk(&self, id: &str) -> Result<(u32, DiskUsage)> {
        const OP: &str = "locating";
        let v = name(OP, id)?;
        let h = open_volume(OP, id, &v, false)?;
        let disk = first_disk(OP, id, &h)?;
        Ok((disk, WindowsDiskHost::new().disk_usage(disk)?))
    }
}
