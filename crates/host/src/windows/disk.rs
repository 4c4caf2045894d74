//! Windows implementation of the disk group ([`DiskHost`]) through storage IOCTLs on
//! `\\.\PhysicalDriveN`: no WMI, no PowerShell, no child process.
//!
//! Disk numbers are the `N` of `\\.\PhysicalDriveN`, which is `STORAGE_DEVICE_NUMBER.DeviceNumber`
//! and `MSFT_Disk.Number`. The buffers the IOCTLs return are parsed by the pure functions in
//! [`crate::windows_data`].
//!
//! Data safety (design.md §5), enforced here as well as in the core service: PartitionDisk never
//! writes to a disk that has a non-reserved partition, never converts an MBR disk, and refuses the
//! disk holding the Windows system directory; SetDiskState refuses to take that disk offline.

use super::win::{OwnedHandle, from_wide, os_error, wide};
use crate::windows_data::layout::{self, PartitionPlan, STYLE_RAW};
use crate::windows_data::{Guid, storage};
use csi_proxy_core::disk::{DiskHost, DiskIds, DiskLocation, DiskUsage};
use csi_proxy_core::{Error, Kind, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_void;
use windows::Win32::Devices::DeviceAndDriverInstallation::{
    CM_LOCATE_DEVNODE_NORMAL, CM_Locate_DevNodeW, CM_REENUMERATE_SYNCHRONOUS,
    CM_Reenumerate_DevNode, CR_SUCCESS,
};
use windows::Win32::Foundation::{
    ERROR_INSUFFICIENT_BUFFER, ERROR_MORE_DATA, GENERIC_READ, GENERIC_WRITE, WIN32_ERROR,
};
use windows::Win32::Storage::FileSystem::{
    CreateFileW, FILE_ATTRIBUTE_NORMAL, FILE_SHARE_READ, FILE_SHARE_WRITE, FindFirstVolumeW,
    FindNextVolumeW, FindVolumeClose, GetVolumeNameForVolumeMountPointW, GetVolumePathNameW,
    GetVolumePathNamesForVolumeNameW, OPEN_EXISTING,
};
use windows::Win32::System::IO::DeviceIoControl;
use windows::Win32::System::Ioctl::{
    CREATE_DISK, CREATE_DISK_0, CREATE_DISK_GPT, DISK_ATTRIBUTE_OFFLINE, GET_DISK_ATTRIBUTES,
    IOCTL_DISK_CREATE_DISK, IOCTL_DISK_GET_DISK_ATTRIBUTES, IOCTL_DISK_GET_DRIVE_GEOMETRY_EX,
    IOCTL_DISK_GET_DRIVE_LAYOUT_EX, IOCTL_DISK_GET_LENGTH_INFO, IOCTL_DISK_SET_DISK_ATTRIBUTES,
    IOCTL_DISK_SET_DRIVE_LAYOUT_EX, IOCTL_DISK_UPDATE_DRIVE_SIZE, IOCTL_DISK_UPDATE_PROPERTIES,
    IOCTL_STORAGE_QUERY_PROPERTY, PARTITION_STYLE_GPT, SET_DISK_ATTRIBUTES,
};
use windows::Win32::System::SystemInformation::GetSystemDirectoryW;
use windows::core::{GUID, PCWSTR};

/// `IOCTL_SCSI_GET_ADDRESS` (ntddscsi.h): `CTL_CODE(IOCTL_SCSI_BASE, 0x0406, METHOD_BUFFERED,
/// FILE_ANY_ACCESS)`.
const IOCTL_SCSI_GET_ADDRESS: u32 = 0x0004_1018;
/// `IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS` (ntddvol.h): `CTL_CODE(IOCTL_VOLUME_BASE, 0,
/// METHOD_BUFFERED, FILE_ANY_ACCESS)`.
pub(super) const IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS: u32 = 0x0056_0000;
/// `STORAGE_PROPERTY_ID`: `StorageDeviceProperty` and `StorageDeviceIdProperty`.
const STORAGE_DEVICE_PROPERTY: u32 = 0;
const STORAGE_DEVICE_ID_PROPERTY: u32 = 2;
/// Disk numbers probed when enumerating. `\\.\PhysicalDriveN` numbers are small and dense in
/// practice but may have gaps (a detached disk's number is not reused at once), so the scan
/// does not stop at the first gap.
const MAX_DISKS: u32 = 256;

/// The Windows disk host.
#[derive(Debug, Default, Clone, Copy)]
pub struct WindowsDiskHost {
    _private: (),
}

impl WindowsDiskHost {
    /// A host acting on the local disks.
    pub fn new() -> Self {
        Self::default()
    }
}

/// `\\.\PhysicalDriveN`.
fn disk_path(n: u32) -> String {
    format!(r"\\.\PhysicalDrive{n}")
}

/// Opens a device. `write` asks for GENERIC_WRITE too (layout and attribute changes need it);
/// queries need only GENERIC_READ ("you can use a handle to a device without any access rights
/// for IOCTLs that need none", but the storage queries here need read).
pub(super) fn open_device(op: &str, path: &str, write: bool) -> Result<OwnedHandle> {
    let w = wide(path);
    let access = if write {
        GENERIC_READ.0 | GENERIC_WRITE.0
    } else {
        GENERIC_READ.0
    };
    // SAFETY: `w` is NUL-terminated and outlives the call; sharing read and write lets other
    // openers (the volume manager, WMI) keep working, as CreateFile documents for physical
    // disks ("the dwShareMode parameter must have the FILE_SHARE_WRITE flag").
    unsafe {
        CreateFileW(
            PCWSTR(w.as_ptr()),
            access,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            None,
            OPEN_EXISTING,
            FILE_ATTRIBUTE_NORMAL,
            None,
        )
    }
    .map(OwnedHandle)
    .map_err(|e| os_error(op, path, &e, &[]))
}

/// Opens disk `n`, NOT_FOUND naming the disk when there is none.
pub(super) fn open_disk(op: &str, n: u32, write: bool) -> Result<OwnedHandle> {
    open_device(op, &disk_path(n), write).map_err(|e| {
        if e.kind() == Kind::NotFound {
            Error::new(Kind::NotFound, op, format!("disk {n}"), "no such disk")
        } else {
            e
        }
    })
}

/// Sends `code` with `input`, returning the output, growing the output buffer (from `initial`
/// bytes) while the driver answers ERROR_INSUFFICIENT_BUFFER or ERROR_MORE_DATA, as the
/// variable-length outputs (layouts, descriptors, extents) require.
pub(super) fn ioctl(
    h: &OwnedHandle,
    code: u32,
    input: &[u8],
    initial: usize,
) -> windows::core::Result<Vec<u8>> {
    let mut size = initial.max(8);
    loop {
        // u64 storage keeps the output 8-byte aligned like the structures it receives.
        let mut buf = vec![0u64; size.div_ceil(8)];
        let mut returned = 0u32;
        // SAFETY: input and output point to live buffers of the sizes passed; the call is
        // synchronous (no OVERLAPPED), so nothing outlives it.
        let r = unsafe {
            DeviceIoControl(
                h.0,
                code,
                (!input.is_empty()).then_some(input.as_ptr().cast::<c_void>()),
                u32::try_from(input.len()).unwrap_or(u32::MAX),
                Some(buf.as_mut_ptr().cast::<c_void>()),
                u32::try_from(buf.len() * 8).unwrap_or(u32::MAX),
                Some(&mut returned),
                None,
            )
        };
        match r {
            Ok(()) => {
                // SAFETY: `buf` holds `buf.len() * 8` initialised bytes.
                let bytes =
                    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * 8) };
                return Ok(bytes[..(returned as usize).min(bytes.len())].to_vec());
            }
            Err(e)
                if matches!(
                    WIN32_ERROR::from_error(&e),
                    Some(ERROR_INSUFFICIENT_BUFFER | ERROR_MORE_DATA)
                ) && size < (1 << 20) =>
            {
                size *= 4;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `STORAGE_PROPERTY_QUERY` for a standard query of `property` (PropertyId u32, QueryType u32
/// = PropertyStandardQuery 0, AdditionalParameters 1 byte, padded).
fn property_query(property: u32) -> [u8; 12] {
    let mut q = [0u8; 12];
    q[0..4].copy_from_slice(&property.to_le_bytes());
    q
}

/// Numbers of the disks present.
pub(super) fn disk_numbers(op: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for n in 0..MAX_DISKS {
        match open_device(op, &disk_path(n), false) {
            Ok(_) => out.push(n),
            Err(e) if e.kind() == Kind::NotFound => {}
            // Present but not openable (access denied, busy): still a disk.
            Err(_) => out.push(n),
        }
    }
    Ok(out)
}

/// The disks holding the Windows system volume (the volume of the system directory).
pub fn system_disks(op: &str) -> Result<BTreeSet<u32>> {
    let mut dir = [0u16; 260];
    // SAFETY: the buffer is writable for its length; the return is the length copied (0 on
    // failure).
    let n = unsafe { GetSystemDirectoryW(Some(&mut dir)) } as usize;
    if n == 0 || n >= dir.len() {
        return Err(Error::new(
            Kind::Internal,
            op,
            "system directory",
            "GetSystemDirectoryW failed",
        ));
    }
    disks_of_path(op, &dir[..=n])
}

/// The disks holding the volume that `path` (NUL-terminated UTF-16, a file or a directory)
/// lies on.
fn disks_of_path(op: &str, path: &[u16]) -> Result<BTreeSet<u32>> {
    let mut mount = [0u16; 260];
    // SAFETY: `path` is NUL-terminated; `mount` is writable. GetVolumePathNameW gives the
    // mount point of the volume holding the path (documented for files and directories).
    unsafe { GetVolumePathNameW(PCWSTR(path.as_ptr()), &mut mount) }
        .map_err(|e| os_error(op, from_wide(path), &e, &[]))?;
    let mut name = [0u16; 64];
    // SAFETY: `mount` is NUL-terminated and ends in '\' as the function requires; `name` has
    // room for "\\?\Volume{GUID}\" (49 units).
    unsafe { GetVolumeNameForVolumeMountPointW(PCWSTR(mount.as_ptr()), &mut name) }
        .map_err(|e| os_error(op, from_wide(&mount), &e, &[]))?;
    let volume = from_wide(&name);
    // The volume device is opened without the trailing backslash (with it, the root directory
    // of the filesystem would be opened instead).
    let device = volume.trim_end_matches('\\');
    let h = open_device(op, device, false)?;
    let out = ioctl(&h, IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS, &[], 8 + 24 * 4)
        .map_err(|e| os_error(op, device, &e, &[]))?;
    let extents = storage::parse_volume_disk_extents(&out)
        .map_err(|e| Error::new(Kind::Internal, op, device, e))?;
    Ok(extents.into_iter().map(|e| e.disk_number).collect())
}

/// The page files Windows uses now (`Win32_PageFileUsage.Name`, e.g. `C:\pagefile.sys`), through
/// the WMI thread: Win32 has no documented call that lists them.
fn page_files(op: &'static str) -> Result<Vec<String>> {
    use std::collections::HashMap;
    super::wmi::with_namespace(op, r"ROOT\CIMV2", move |c| {
        let rows: Vec<HashMap<String, wmi::Variant>> = c
            .raw_query("SELECT Name FROM Win32_PageFileUsage")
            .map_err(|e| super::wmi::wmi_error(op, "Win32_PageFileUsage", &e))?;
        Ok(rows
            .iter()
            .filter_map(|r| match r.get("Name") {
                Some(wmi::Variant::String(s)) => Some(s.clone()),
                _ => None,
            })
            .collect())
    })
}

/// Why disk `disk` holds a page file, if it does. When the page files cannot be listed, a disk
/// with a drive letter counts as holding one (refused, as before the drive-letter rule), and a
/// disk without one does not (a page file needs a lettered volume).
fn page_file_use(op: &'static str, disk: u32, mount_points: &[String]) -> Option<String> {
    match page_files(op) {
        Ok(files) => files.into_iter().find_map(|f| {
            let path = wide(&f);
            disks_of_path(op, &path)
                .ok()
                .filter(|d| d.contains(&disk))
                .map(|_| format!("holds the page file {f}"))
        }),
        Err(e)
            if mount_points
                .iter()
                .any(|m| csi_proxy_core::paths::is_drive_root(m)) =>
        {
            Some(format!(
                "has a drive letter, and the page files cannot be listed to tell whether it holds one ({e})"
            ))
        }
        Err(_) => None,
    }
}

/// Refuses `disk` when it holds the system volume.
fn refuse_system_disk(op: &str, disk: u32) -> Result<()> {
    if system_disks(op)?.contains(&disk) {
        return Err(Error::new(
            Kind::PermissionDenied,
            op,
            format!("disk {disk}"),
            "this disk holds the Windows system volume and is never modified",
        ));
    }
    Ok(())
}

/// The disk's layout and logical sector size.
pub(super) fn read_layout(op: &str, n: u32, h: &OwnedHandle) -> Result<(layout::Layout, u64)> {
    let object = format!("disk {n}");
    let raw = ioctl(
        h,
        IOCTL_DISK_GET_DRIVE_LAYOUT_EX,
        &[],
        layout::HEADER_SIZE + 8 * layout::ENTRY_SIZE,
    )
    .map_err(|e| os_error(op, &object, &e, &[]))?;
    let l =
        layout::parse_drive_layout(&raw).map_err(|e| Error::new(Kind::Internal, op, &object, e))?;
    // DISK_GEOMETRY_EX: DISK_GEOMETRY (Cylinders i64 @0, MediaType u32 @8, TracksPerCylinder
    // @12, SectorsPerTrack @16, BytesPerSector u32 @20), then DiskSize i64 @24.
    let geo = ioctl(h, IOCTL_DISK_GET_DRIVE_GEOMETRY_EX, &[], 256)
        .map_err(|e| os_error(op, &object, &e, &[]))?;
    let sector = geo
        .get(20..24)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .filter(|s| *s >= 512 && s.is_power_of_two())
        .ok_or_else(|| Error::new(Kind::Internal, op, &object, "bad DISK_GEOMETRY_EX"))?;
    Ok((l, u64::from(sector)))
}

/// A fresh GUID in in-memory byte order.
fn new_guid(op: &str) -> Result<Guid> {
    let g = GUID::new().map_err(|e| os_error(op, "GUID", &e, &[]))?;
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&g.data1.to_le_bytes());
    b[4..6].copy_from_slice(&g.data2.to_le_bytes());
    b[6..8].copy_from_slice(&g.data3.to_le_bytes());
    b[8..16].copy_from_slice(&g.data4);
    Ok(Guid(b))
}

/// The disk's attributes (`GET_DISK_ATTRIBUTES.Attributes`).
fn disk_attributes(op: &str, n: u32) -> Result<u64> {
    let h = open_disk(op, n, false)?;
    let out = ioctl(
        &h,
        IOCTL_DISK_GET_DISK_ATTRIBUTES,
        &[],
        size_of::<GET_DISK_ATTRIBUTES>(),
    )
    .map_err(|e| os_error(op, format!("disk {n}"), &e, &[]))?;
    // GET_DISK_ATTRIBUTES: Version u32 @0, Reserved1 u32 @4, Attributes u64 @8.
    out.get(8..16)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| {
            Error::new(
                Kind::Internal,
                op,
                format!("disk {n}"),
                "short GET_DISK_ATTRIBUTES",
            )
        })
}

/// Every mount path (drive letters and mounted folders) of the volumes with an extent on `disk`.
pub(super) fn mount_points_on(op: &str, disk: u32) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut name = [0u16; 64];
    // SAFETY: `name` is writable; the find handle is closed below.
    let find =
        unsafe { FindFirstVolumeW(&mut name) }.map_err(|e| os_error(op, "volumes", &e, &[]))?;
    loop {
        let volume = from_wide(&name);
        let device = volume.trim_end_matches('\\');
        let on_disk = open_device(op, device, false)
            .ok()
            .and_then(|h| ioctl(&h, IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS, &[], 8 + 24 * 4).ok())
            .and_then(|b| storage::parse_volume_disk_extents(&b).ok())
            .is_some_and(|x| x.iter().any(|e| e.disk_number == disk));
        if on_disk {
            let mut paths = vec![0u16; 1024];
            let mut len = 0u32;
            let w = wide(&volume);
            // SAFETY: `w` is the NUL-terminated volume GUID path with its trailing backslash, as
            // the function requires; the output is a MULTI_SZ list of mount paths.
            if unsafe {
                GetVolumePathNamesForVolumeNameW(PCWSTR(w.as_ptr()), Some(&mut paths), &mut len)
            }
            .is_ok()
            {
                out.extend(
                    paths
                        .split(|&c| c == 0)
                        .take_while(|p| !p.is_empty())
                        .map(String::from_utf16_lossy),
                );
            }
        }
        // SAFETY: `find` is a live find handle; `name` is writable.
        if unsafe { FindNextVolumeW(find, &mut name) }.is_err() {
            break;
        }
    }
    // SAFETY: closes the handle FindFirstVolumeW returned, once.
    let _ = unsafe { FindVolumeClose(find) };
    Ok(out)
}

/// Asks the Plug and Play manager to re-enumerate the whole device tree: `CM_Locate_DevNodeW`
/// with no device ID "supplies a device instance handle to the device at the root of the device
/// tree", and `CM_Reenumerate_DevNode` on it makes every bus driver report its children again,
/// "attempts to configure and start any child devices that were not configured previously" and
/// surprise-removes the ones that are gone. `CM_REENUMERATE_SYNCHRONOUS` returns once the
/// subtree has been re-enumerated (it does not wait for new disks to finish starting, so a new
/// disk may still appear a moment later, as after upstream's storage cache update).
fn reenumerate_devices(op: &str) -> Result<()> {
    let mut root = 0u32;
    // SAFETY: `root` is a valid out pointer; a null device ID selects the root devnode.
    let cr = unsafe { CM_Locate_DevNodeW(&raw mut root, PCWSTR::null(), CM_LOCATE_DEVNODE_NORMAL) };
    if cr != CR_SUCCESS {
        return Err(Error::new(
            Kind::Internal,
            op,
            "device tree root",
            format!("CM_Locate_DevNodeW failed with CONFIGRET {}", cr.0),
        ));
    }
    // SAFETY: `root` is the devnode handle just located; the caller needs SeLoadDriverPrivilege,
    // which the Administrators the daemon runs as hold.
    let cr = unsafe { CM_Reenumerate_DevNode(root, CM_REENUMERATE_SYNCHRONOUS) };
    if cr != CR_SUCCESS {
        // CR_ACCESS_DENIED (0x33) is the documented answer without the privilege.
        let kind = if cr.0 == 0x33 {
            Kind::PermissionDenied
        } else {
            Kind::Internal
        };
        return Err(Error::new(
            kind,
            op,
            "device tree",
            format!("CM_Reenumerate_DevNode failed with CONFIGRET {}", cr.0),
        ));
    }
    Ok(())
}

impl DiskHost for WindowsDiskHost {
    fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage> {
        const OP: &str = "DiskUsage";
        open_disk(OP, disk_number, false)?;
        let mount_points = mount_points_on(OP, disk_number)?;
        // A drive letter alone does not make a disk the host's (core's rule), so the disks whose
        // letters matter are named here: the system volume's and the page files'.
        let system_use = if system_disks(OP)?.contains(&disk_number) {
            Some("holds the Windows system volume".to_string())
        } else {
            page_file_use(OP, disk_number, &mount_points)
        };
        Ok(DiskUsage {
            mount_points,
            system_use,
        })
    }

    fn rescan(&self) -> Result<()> {
        const OP: &str = "Rescan";
        reenumerate_devices(OP)?;
        // Then every disk re-reads its size and partition table: IOCTL_DISK_UPDATE_DRIVE_SIZE
        // "updates device extension with drive size information for current media" (a disk
        // grown underneath Windows) and IOCTL_DISK_UPDATE_PROPERTIES "invalidates the cached
        // partition table and re-enumerates the device". A disk that cannot be opened (being
        // removed, not ours to open) is skipped: the re-enumeration above still covered it.
        for n in disk_numbers(OP)? {
            let Ok(h) = open_disk(OP, n, true) else {
                continue;
            };
            if let Err(e) = ioctl(&h, IOCTL_DISK_UPDATE_DRIVE_SIZE, &[], 64) {
                tracing::debug!(disk = n, "IOCTL_DISK_UPDATE_DRIVE_SIZE: {e}");
            }
            if let Err(e) = ioctl(&h, IOCTL_DISK_UPDATE_PROPERTIES, &[], 0) {
                tracing::debug!(disk = n, "IOCTL_DISK_UPDATE_PROPERTIES: {e}");
            }
        }
        Ok(())
    }

    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        const OP: &str = "ListDiskLocations";
        let mut out = BTreeMap::new();
        for n in disk_numbers(OP)? {
            // Disks that are not SCSI-addressed (NVMe without SCSI translation, virtual disks)
            // fail IOCTL_SCSI_GET_ADDRESS; upstream leaves disks without a parsable location
            // out, and so does this.
            let Ok(h) = open_disk(OP, n, false) else {
                continue;
            };
            let Ok(raw) = ioctl(&h, IOCTL_SCSI_GET_ADDRESS, &[], 8) else {
                continue;
            };
            let Ok(a) = storage::parse_scsi_address(&raw) else {
                continue;
            };
            out.insert(
                n,
                DiskLocation {
                    adapter: a.port.to_string(),
                    bus: a.path.to_string(),
                    target: a.target.to_string(),
                    lun_id: a.lun.to_string(),
                },
            );
        }
        Ok(out)
    }

    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        const OP: &str = "ListDiskIDs";
        let mut out = BTreeMap::new();
        for n in disk_numbers(OP)? {
            let object = format!("disk {n}");
            let h = open_disk(OP, n, false)?;
            // Upstream fails the whole call when any disk fails (e.g. "Incorrect function"
            // from a disk without VPD page 0x83 support); so does this.
            let ids = ioctl(
                &h,
                IOCTL_STORAGE_QUERY_PROPERTY,
                &property_query(STORAGE_DEVICE_ID_PROPERTY),
                4096,
            )
            .map_err(|e| os_error(OP, &object, &e, &[]).context("IOCTL_STORAGE_QUERY_PROPERTY"))?;
            let ids = storage::parse_device_id_descriptor(&ids)
                .map_err(|e| Error::new(Kind::Internal, OP, &object, e))?;
            let desc = ioctl(
                &h,
                IOCTL_STORAGE_QUERY_PROPERTY,
                &property_query(STORAGE_DEVICE_PROPERTY),
                1024,
            )
            .map_err(|e| os_error(OP, &object, &e, &[]).context("IOCTL_STORAGE_QUERY_PROPERTY"))?;
            let serial_number = storage::device_descriptor_serial(&desc)
                .map_err(|e| Error::new(Kind::Internal, OP, &object, e))?;
            out.insert(
                n,
                DiskIds {
                    page83: storage::page83(&ids),
                    serial_number,
                },
            );
        }
        Ok(out)
    }

    fn get_disk_size(&self, disk_number: u32) -> Result<u64> {
        const OP: &str = "GetDiskStats";
        let h = open_disk(OP, disk_number, false)?;
        // GET_LENGTH_INFORMATION: Length i64 @0.
        let out = ioctl(&h, IOCTL_DISK_GET_LENGTH_INFO, &[], 8)
            .map_err(|e| os_error(OP, format!("disk {disk_number}"), &e, &[]))?;
        out.get(0..8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| {
                Error::new(
                    Kind::Internal,
                    OP,
                    format!("disk {disk_number}"),
                    "bad length",
                )
            })
    }

    fn is_disk_online(&self, disk_number: u32) -> Result<bool> {
        Ok(disk_attributes("GetDiskState", disk_number)? & DISK_ATTRIBUTE_OFFLINE == 0)
    }

    fn set_disk_online(&self, disk_number: u32, online: bool) -> Result<()> {
        const OP: &str = "SetDiskState";
        if (disk_attributes(OP, disk_number)? & DISK_ATTRIBUTE_OFFLINE == 0) == online {
            return Ok(());
        }
        if !online {
            refuse_system_disk(OP, disk_number)?;
        }
        let h = open_disk(OP, disk_number, true)?;
        let attrs = SET_DISK_ATTRIBUTES {
            Version: size_of::<SET_DISK_ATTRIBUTES>() as u32,
            // Persist: the state survives a reboot, as MSFT_Disk.Online/Offline make it.
            Persist: true,
            Attributes: if online { 0 } else { DISK_ATTRIBUTE_OFFLINE },
            AttributesMask: DISK_ATTRIBUTE_OFFLINE,
            ..Default::default()
        };
        // SAFETY: SET_DISK_ATTRIBUTES is plain data; the byte view lives only for the call.
        let input = unsafe {
            std::slice::from_raw_parts(
                (&raw const attrs).cast::<u8>(),
                size_of::<SET_DISK_ATTRIBUTES>(),
            )
        };
        ioctl(&h, IOCTL_DISK_SET_DISK_ATTRIBUTES, input, 0)
            .map_err(|e| os_error(OP, format!("disk {disk_number}"), &e, &[]))?;
        Ok(())
    }

    fn partition_disk(&self, disk_number: u32) -> Result<()> {
        const OP: &str = "PartitionDisk";
        let object = format!("disk {disk_number}");
        let h = open_disk(OP, disk_number, true)?;
        let (mut l, sector) = read_layout(OP, disk_number, &h)?;
        // Idempotent and safe: a disk with any data partition is left alone before anything
        // else is looked at.
        if layout::plan_data_partition(&l, sector) == Ok(PartitionPlan::Nothing) {
            return Ok(());
        }
        refuse_system_disk(OP, disk_number)?;
        if l.style == STYLE_RAW {
            let create = CREATE_DISK {
                PartitionStyle: PARTITION_STYLE_GPT,
                Anonymous: CREATE_DISK_0 {
                    Gpt: CREATE_DISK_GPT {
                        DiskId: GUID::new().map_err(|e| os_error(OP, "GUID", &e, &[]))?,
                        // 128 entries: the GPT minimum (UEFI) and Windows' default.
                        MaxPartitionCount: 128,
                    },
                },
            };
            // SAFETY: CREATE_DISK is plain data; the byte view lives only for the call.
            let input = unsafe {
                std::slice::from_raw_parts(
                    (&raw const create).cast::<u8>(),
                    size_of::<CREATE_DISK>(),
                )
            };
            // IOCTL_DISK_CREATE_DISK "initializes a disk and disk partition table"; it only
            // succeeds on a RAW disk here because the layout was just read as RAW.
            ioctl(&h, IOCTL_DISK_CREATE_DISK, input, 0)
                .map_err(|e| os_error(OP, &object, &e, &[]))?;
            (l, _) = read_layout(OP, disk_number, &h)?;
        }
        let plan = layout::plan_data_partition(&l, sector).map_err(|e| {
            let kind = match e {
                layout::PlanError::NotGpt | layout::PlanError::NoSpace => Kind::FailedPrecondition,
                layout::PlanError::Invalid(_) => Kind::Internal,
            };
            Error::new(kind, OP, &object, e)
        })?;
        let PartitionPlan::Create(new) = plan else {
            return Ok(());
        };
        let input = layout::gpt_layout_with(&l, new, new_guid(OP)?);
        ioctl(&h, IOCTL_DISK_SET_DRIVE_LAYOUT_EX, &input, 0)
            .map_err(|e| os_error(OP, &object, &e, &[]))?;
        // "IOCTL_DISK_UPDATE_PROPERTIES: invalidates the cached partition table and re-enumerates
        // the device", so the new partition (and its volume) appear without a rescan. The new
        // entry carries GPT_BASIC_DATA_ATTRIBUTE_NO_DRIVE_LETTER, so no drive letter is
        // assigned (as upstream's AssignDriveLetter=false); nothing is formatted.
        ioctl(&h, IOCTL_DISK_UPDATE_PROPERTIES, &[], 0)
            .map_err(|e| os_error(OP, &object, &e, &[]))?;
        Ok(())
    }
}
