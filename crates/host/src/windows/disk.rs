//! Windows implementation of the disk group ([`DiskHost`]) through storage I/O controls on
//! `\\.\PhysicalDriveN`: no WMI but for the page-file list, no PowerShell, no child process.
//!
//! Disk numbers are the `N` of `\\.\PhysicalDriveN`, which is `STORAGE_DEVICE_NUMBER.DeviceNumber`
//! and `MSFT_Disk.Number`. All OS access goes through the [`Win32`] seam, so this logic runs
//! on Linux against the simulated Windows; the buffers are parsed by [`csi_proxy_formats::windows_buffers`].
//!
//! Data safety (docs/security.md), enforced here as well as in the core service: PartitionDisk
//! never writes to a disk that has a non-reserved partition, never converts an MBR disk, and
//! refuses the disk holding the Windows system directory; SetDiskState refuses to take that disk
//! offline. Whatever cannot be read while deciding whether a disk is in use counts as "in use".

use super::os::{self, Handle, OsError, Win32, code, ioctl, os_error};
use csi_proxy_core::disk::{DiskHost, DiskIds, DiskLocation, DiskUsage, OpenElsewhere};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::signatures;
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_formats::windows_buffers::layout::{self, NewEntry, PartitionPlan, STYLE_RAW};
use csi_proxy_formats::windows_buffers::storage;
use std::collections::{BTreeMap, BTreeSet};

mod arrival;
mod collision;
mod identity;
mod users;

pub use arrival::VOLUME_ARRIVAL_LIMIT;
use arrival::{wait_for_departure, wait_for_partition, wait_for_volumes};

super::os::seam_host! {
    /// The Windows disk host.
    WindowsDiskHost {
        // SetDiskState(online)'s collision check and the attribute write it guards, one at a
        // time across every disk: two disks that share unique IDs (a disk and its copy)
        // brought online at once would each see the other offline and both come online. The
        // daemon builds one disk host, so this is node-wide; the wait for volumes after the
        // write is outside it.
        onlining: std::sync::Arc<std::sync::Mutex<()>>,
    }
}

/// `\\.\PhysicalDriveN`.
fn disk_path(n: u32) -> String {
    format!(r"\\.\PhysicalDrive{n}")
}

/// Opens disk `n`, NOT_FOUND naming the disk when there is none.
pub(super) fn open_disk<'a>(
    os: &'a dyn Win32,
    op: &str,
    n: u32,
    write: bool,
) -> Result<Handle<'a>> {
    os::open(os, &disk_path(n), write).map_err(|e| disk_open_error(op, n, &e))
}

/// The error of a failed open of disk `n`.
fn disk_open_error(op: &str, n: u32, e: &OsError) -> Error {
    match e.code {
        // CreateFileW: an open whose access another handle's share mode does not allow fails
        // ERROR_SHARING_VIOLATION. The daemon shares read and write, so the holder opened the
        // disk for itself.
        code::SHARING_VIOLATION => Error::new(
            Kind::FailedPrecondition,
            op,
            format!("disk {n}"),
            format!("another process holds the disk open without sharing it for this access ({e})"),
        ),
        _ if e.kind() == Kind::NotFound => {
            Error::new(Kind::NotFound, op, format!("disk {n}"), "no such disk")
        }
        _ => os_error(op, format!("disk {n}"), e, &[]),
    }
}

/// Numbers of the disks present: every device of the disk interface class, by the number its
/// driver reports. A disk that vanishes while being listed is skipped; any other failure fails
/// the listing rather than leaving a disk out or inventing one.
pub(super) fn disk_numbers(os: &dyn Win32, op: &str) -> Result<Vec<u32>> {
    let interfaces = os
        .disk_interfaces()
        .map_err(|e| os_error(op, "disk interfaces", &e, &[]))?;
    let mut out = BTreeSet::new();
    for path in interfaces {
        // STORAGE_GET_DEVICE_NUMBER is FILE_ANY_ACCESS: a query open is enough, and works on
        // a removable disk without media.
        let h = match os::open_query(os, &path) {
            Ok(h) => h,
            Err(e) if e.kind() == Kind::NotFound => continue,
            Err(e) => return Err(os_error(op, format!("disk device {path}"), &e, &[])),
        };
        let raw = match ioctl(&h, io::STORAGE_GET_DEVICE_NUMBER, &[], 12) {
            Ok(raw) => raw,
            // Being removed (ERROR_DEVICE_REMOVED, ERROR_NO_SUCH_DEVICE): no longer a disk.
            Err(e) if e.kind() == Kind::NotFound => continue,
            Err(e) => return Err(os_error(op, format!("disk device {path}"), &e, &[])),
        };
        let (number, _) = storage::parse_device_number(&raw)
            .map_err(|e| Error::new(Kind::Internal, op, format!("disk device {path}"), e))?;
        out.insert(number);
    }
    Ok(out.into_iter().collect())
}

/// The disks holding the Windows system volume (the volume of the system directory).
pub fn system_disks(os: &dyn Win32, op: &str) -> Result<BTreeSet<u32>> {
    let dir = os
        .system_directory()
        .map_err(|e| os_error(op, "system directory", &e, &[]))?;
    disks_of_path(os, op, &dir)
}

/// The volume device `\\.\Volume{GUID}` of a volume GUID path (without the trailing backslash:
/// with it, `CreateFileW` would open the root directory of the filesystem instead).
pub fn volume_device(volume: &str) -> String {
    volume.trim_end_matches('\\').replacen(r"\\?\", r"\\.\", 1)
}

/// The disk extents of a volume as the OS answered (`IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS`:
/// "retrieves the physical location of a specified volume on one or more disks"): the OS's
/// error as it came, for callers that tell errors apart; `Ok(Err)` for a malformed answer.
fn query_extents(
    h: &Handle<'_>,
) -> os::Win32Result<std::result::Result<Vec<storage::DiskExtent>, storage::ParseError>> {
    // Room for four extents first; a volume on more gets ERROR_MORE_DATA and a larger buffer.
    ioctl(h, io::VOLUME_GET_VOLUME_DISK_EXTENTS, &[], 8 + 24 * 4)
        .map(|out| storage::parse_volume_disk_extents(&out))
}

/// The disk extents of a volume; any failure is an error naming `object`.
pub(super) fn volume_extents(
    op: &str,
    object: &str,
    h: &Handle<'_>,
) -> Result<Vec<storage::DiskExtent>> {
    query_extents(h)
        .map_err(|e| os_error(op, object, &e, &[]))?
        .map_err(|e| Error::new(Kind::Internal, op, object, e))
}

/// The disks holding the volume that `path` (a file or a directory) lies on.
fn disks_of_path(os: &dyn Win32, op: &str, path: &str) -> Result<BTreeSet<u32>> {
    let mount = os
        .volume_path_name(path)
        .map_err(|e| os_error(op, path, &e, &[]))?;
    let volume = os
        .volume_name_for_mount_point(&mount)
        .map_err(|e| os_error(op, &mount, &e, &[]))?;
    let device = volume_device(&volume);
    let h = os::open_query(os, &device).map_err(|e| os_error(op, &device, &e, &[]))?;
    Ok(volume_extents(op, &device, &h)?
        .into_iter()
        .map(|e| e.disk_number)
        .collect())
}

/// Refuses `disk` when it holds the system volume.
fn refuse_system_disk(os: &dyn Win32, op: &str, disk: u32) -> Result<()> {
    if system_disks(os, op)?.contains(&disk) {
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
pub(super) fn read_layout(op: &str, n: u32, h: &Handle<'_>) -> Result<(layout::Layout, u64)> {
    let object = format!("disk {n}");
    let raw = ioctl(
        h,
        io::DISK_GET_DRIVE_LAYOUT_EX,
        &[],
        layout::HEADER_SIZE + 8 * layout::ENTRY_SIZE,
    )
    .map_err(|e| os_error(op, &object, &e, &[]))?;
    let l =
        layout::parse_drive_layout(&raw).map_err(|e| Error::new(Kind::Internal, op, &object, e))?;
    // DISK_GEOMETRY_EX: DISK_GEOMETRY (Cylinders i64 @0, MediaType u32 @8, TracksPerCylinder
    // @12, SectorsPerTrack @16, BytesPerSector u32 @20), then DiskSize i64 @24.
    let geo = ioctl(h, io::DISK_GET_DRIVE_GEOMETRY_EX, &[], 256)
        .map_err(|e| os_error(op, &object, &e, &[]))?;
    let sector = io::le_u32(&geo, 20)
        .filter(|s| *s >= 512 && s.is_power_of_two())
        .ok_or_else(|| Error::new(Kind::Internal, op, &object, "bad DISK_GEOMETRY_EX"))?;
    Ok((l, u64::from(sector)))
}

/// A storage property's whole descriptor. A buffer too small for it gets its first bytes,
/// successfully, with the length the whole needs in the header's `Size`
/// (STORAGE_DESCRIPTOR_HEADER: Version u32 @0, Size u32 @4): the query is repeated with that.
fn query_property(h: &Handle<'_>, property: u32) -> os::Win32Result<Vec<u8>> {
    let query = io::property_query(property);
    let out = ioctl(h, io::STORAGE_QUERY_PROPERTY, &query, 4096)?;
    match io::le_u32(&out, 4).map(|n| n as usize) {
        Some(size) if size > out.len() && size <= 1 << 20 => {
            ioctl(h, io::STORAGE_QUERY_PROPERTY, &query, size)
        }
        _ => Ok(out),
    }
}

/// The disk's length in bytes (`IOCTL_DISK_GET_LENGTH_INFO`, which needs read access).
pub(super) fn disk_length(op: &str, n: u32, h: &Handle<'_>) -> Result<u64> {
    let object = format!("disk {n}");
    // GET_LENGTH_INFORMATION: Length i64 @0.
    let out =
        ioctl(h, io::DISK_GET_LENGTH_INFO, &[], 8).map_err(|e| os_error(op, &object, &e, &[]))?;
    io::le_u64(&out, 0)
        .filter(|v| i64::try_from(*v).is_ok())
        .ok_or_else(|| Error::new(Kind::Internal, op, &object, "bad length"))
}

/// Refuses a disk Windows reports as RAW when its first or last bytes hold anything the
/// shared probe knows: RAW only means "no MBR or GPT", and a whole-disk ext4, LUKS, LVM, ZFS
/// or md member is RAW to Windows. Head and tail are read through the disk handle, in whole
/// sectors (noncached disk I/O); `sector` is the logical sector size.
fn refuse_raw_content(os: &dyn Win32, op: &str, n: u32, h: &Handle<'_>, sector: u64) -> Result<()> {
    let object = format!("disk {n}");
    let length = disk_length(op, n, h)? / sector * sector;
    let read = |offset: u64, len: u64| {
        os.read_at(h.raw(), offset, len as usize).map_err(|e| {
            os_error(op, &object, &e, &[]).context("reading the RAW disk before initialising it")
        })
    };
    let head = read(0, (signatures::PROBE_LEN as u64).min(length))?;
    let tail_len = (signatures::TAIL_PROBE_LEN as u64)
        .next_multiple_of(sector)
        .min(length);
    let found = match signatures::probe(&head) {
        Some(sig) => Some(sig),
        None => signatures::probe_tail(&read(length - tail_len, tail_len)?, length),
    };
    match found {
        None => Ok(()),
        Some(sig) => Err(Error::new(
            Kind::FailedPrecondition,
            op,
            &object,
            format!(
                "Windows sees no partition table (RAW), but the disk holds {}; refusing to initialise it",
                sig.kind
            ),
        )),
    }
}

/// The disk's attributes (`GET_DISK_ATTRIBUTES.Attributes`).
pub(super) fn disk_attributes(os: &dyn Win32, op: &str, n: u32) -> Result<u64> {
    let h = os::open_query(os, &disk_path(n)).map_err(|e| disk_open_error(op, n, &e))?;
    let out = ioctl(&h, io::DISK_GET_DISK_ATTRIBUTES, &[], 16)
        .map_err(|e| os_error(op, format!("disk {n}"), &e, &[]))?;
    // GET_DISK_ATTRIBUTES: Version u32 @0, Reserved1 u32 @4, Attributes u64 @8.
    io::le_u64(&out, 8).ok_or_else(|| {
        Error::new(
            Kind::Internal,
            op,
            format!("disk {n}"),
            "short GET_DISK_ATTRIBUTES",
        )
    })
}

/// FAILED_PRECONDITION naming `attribute` when the disk has it: an offline disk surfaces no
/// volume ("no volume devices are surfaced through Plug and Play"), and on a read-only one
/// "writes to the disk will fail".
pub(super) fn refuse_attribute(op: &str, disk: u32, attrs: u64, attribute: u64) -> Result<()> {
    if attrs & attribute == 0 {
        return Ok(());
    }
    let (name, state) = if attribute == io::DISK_ATTRIBUTE_OFFLINE {
        ("DISK_ATTRIBUTE_OFFLINE", "offline")
    } else {
        ("DISK_ATTRIBUTE_READ_ONLY", "read-only")
    };
    Err(Error::new(
        Kind::FailedPrecondition,
        op,
        format!("disk {disk}"),
        format!("the disk is {state} ({name}); bring it online with SetDiskState first"),
    ))
}

/// Whether a failure to read `volume`'s extents says it is on no disk at all: a drive without
/// media (ERROR_NOT_READY or ERROR_NO_MEDIA_IN_DRIVE), a device that is not a disk volume
/// ("incorrect function"), or, whatever the code, an optical drive: `GetDriveTypeW` reads the
/// device's kind without its media, so the daemon does not depend on which code an empty
/// drive's driver picks (ledger row 18). Any other failure is unknown, and fails closed.
fn on_no_disk(os: &dyn Win32, volume: &str, e: &OsError) -> bool {
    e.no_media()
        || e.code == code::INVALID_FUNCTION
        || os.drive_type(&format!("{}\\", volume.trim_end_matches('\\'))) == Ok(os::drive::CDROM)
}

/// The volumes (GUID paths) with an extent on `disk`. Fails closed: a volume whose disks cannot
/// be read is an error, never "not on this disk", because the answer guards a disk against
/// being written to. Volumes are opened for queries only (access 0): that mounts no
/// filesystem, so an optical drive without media and a volume another process locked or holds
/// answer like any other, and the extents control (FILE_ANY_ACCESS) needs nothing more.
pub(super) fn volumes_on(os: &dyn Win32, op: &str, disk: u32) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let volumes = os.volumes().map_err(|e| os_error(op, "volumes", &e, &[]))?;
    for volume in volumes {
        let device = volume_device(&volume);
        let context = || format!("telling whether disk {disk} is in use");
        let h = match os::open_query(os, &device) {
            Ok(h) => h,
            // Gone since it was listed.
            Err(e) if e.kind() == Kind::NotFound => continue,
            Err(e) => return Err(os_error(op, &volume, &e, &[]).context(context())),
        };
        let extents = match query_extents(&h) {
            Ok(parsed) => {
                parsed.map_err(|e| Error::new(Kind::Internal, op, &volume, e).context(context()))?
            }
            // On no disk (no media), or gone with its disk since it was listed.
            Err(e) if e.kind() == Kind::NotFound || on_no_disk(os, &volume, &e) => continue,
            Err(e) => return Err(os_error(op, &volume, &e, &[]).context(context())),
        };
        if extents.iter().any(|e| e.disk_number == disk) {
            out.push(volume);
        }
    }
    Ok(out)
}

/// Every mount path (drive letters and mounted folders) of the volumes with an extent on
/// `disk`; fails closed as [`volumes_on`] does.
pub(super) fn mount_points_on(os: &dyn Win32, op: &str, disk: u32) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for volume in volumes_on(os, op, disk)? {
        out.extend(volume_path_names(os, op, &volume)?);
    }
    Ok(out)
}

/// The drive letters and mounted folders of a volume (`GetVolumePathNamesForVolumeNameW`),
/// asking again with the length it reports while the buffer is too small.
pub(super) fn volume_path_names(os: &dyn Win32, op: &str, volume: &str) -> Result<Vec<String>> {
    let mut capacity = 256usize;
    loop {
        match os.volume_path_names(volume, capacity) {
            Ok(names) => return Ok(names),
            Err(e) if e.code == code::MORE_DATA && capacity < (1 << 20) => {
                capacity = e.needed.max(capacity * 2).min(1 << 20);
            }
            Err(e) => return Err(os_error(op, volume, &e, &[])),
        }
    }
}

impl DiskHost for WindowsDiskHost {
    fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage> {
        const OP: &str = "DiskUsage";
        let os = &*self.os;
        // A data-access open: a process holding the disk for itself (no FILE_SHARE_READ)
        // refuses it, and the refusal names that (ERROR_SHARING_VIOLATION).
        open_disk(os, OP, disk_number, false)?;
        let mount_points = mount_points_on(os, OP, disk_number)?;
        let system_use = users::host_use(os, OP, disk_number, &mount_points)?;
        let mut usage = DiskUsage {
            mount_points,
            system_use,
            ..Default::default()
        };
        (usage.storage, usage.other_paths) = identity::other_paths(os, OP, disk_number)?;
        Ok(usage)
    }

    fn volumes_open_elsewhere(&self, disk_number: u32) -> Result<Vec<OpenElsewhere>> {
        users::volumes_open_elsewhere(&*self.os, "DiskUsage", disk_number)
    }

    fn rescan(&self) -> Result<()> {
        const OP: &str = "Rescan";
        let os = &*self.os;
        os.reenumerate_devices()
            .map_err(|e| os_error(OP, "device tree", &e, &[]))?;
        // Then every disk re-reads its size and partition table: IOCTL_DISK_UPDATE_DRIVE_SIZE
        // "updates device extension with drive size information for current media" (a disk
        // grown underneath Windows) and IOCTL_DISK_UPDATE_PROPERTIES "invalidates the cached
        // partition table and re-enumerates the device". A disk that cannot be opened (being
        // removed, not ours to open) is skipped: the re-enumeration above still covered it.
        for n in disk_numbers(os, OP)? {
            let Ok(h) = open_disk(os, OP, n, true) else {
                continue;
            };
            if let Err(e) = ioctl(&h, io::DISK_UPDATE_DRIVE_SIZE, &[], 64) {
                tracing::debug!(disk = n, "IOCTL_DISK_UPDATE_DRIVE_SIZE: {e}");
            }
            if let Err(e) = ioctl(&h, io::DISK_UPDATE_PROPERTIES, &[], 0) {
                tracing::debug!(disk = n, "IOCTL_DISK_UPDATE_PROPERTIES: {e}");
            }
        }
        Ok(())
    }

    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        const OP: &str = "ListDiskLocations";
        let os = &*self.os;
        let mut out = BTreeMap::new();
        for n in disk_numbers(os, OP)? {
            // Disks that are not SCSI-addressed (NVMe without SCSI translation, virtual disks,
            // Storage Spaces) fail IOCTL_SCSI_GET_ADDRESS; upstream leaves disks without a
            // parsable location out, and so does this.
            let Ok(h) = open_disk(os, OP, n, false) else {
                continue;
            };
            let Ok(raw) = ioctl(&h, io::SCSI_GET_ADDRESS, &[], 8) else {
                continue;
            };
            let Ok(a) = storage::parse_scsi_address(&raw) else {
                continue;
            };
            out.insert(
                n,
                DiskLocation {
                    adapter: a.port.to_string(),
                    // Upstream reads the location from MSFT_Disk.Location
                    // ("PCIROOT(0)#...#LUN(n)" parsed for Adapter, Target and LUN only) and
                    // leaves Bus empty; drivers match on LUN and Target.
                    bus: String::new(),
                    target: a.target.to_string(),
                    lun_id: a.lun.to_string(),
                },
            );
        }
        Ok(out)
    }

    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        const OP: &str = "ListDiskIDs";
        let os = &*self.os;
        let mut out = BTreeMap::new();
        for n in disk_numbers(os, OP)? {
            // Upstream fails the whole call when any disk fails (e.g. "Incorrect function"
            // from a disk without VPD page 0x83 support); so does this. A disk removed since
            // it was listed is no longer listed.
            if let Some((ids, serial_number)) = identity::read(os, OP, n)? {
                out.insert(
                    n,
                    DiskIds {
                        page83: storage::page83(&ids),
                        serial_number,
                    },
                );
            }
        }
        Ok(out)
    }

    fn get_disk_size(&self, disk_number: u32) -> Result<u64> {
        const OP: &str = "GetDiskStats";
        let h = open_disk(&*self.os, OP, disk_number, false)?;
        disk_length(OP, disk_number, &h)
    }

    fn is_disk_online(&self, disk_number: u32) -> Result<bool> {
        Ok(
            disk_attributes(&*self.os, "GetDiskState", disk_number)? & io::DISK_ATTRIBUTE_OFFLINE
                == 0,
        )
    }

    fn set_disk_online(&self, disk_number: u32, online: bool) -> Result<()> {
        const OP: &str = "SetDiskState";
        let os = &*self.os;
        let attrs = disk_attributes(os, OP, disk_number)?;
        // Online means online and writable: under the SAN policy Windows Server ships with
        // (OfflineShared), a disk on a shared bus arrives offline and read-only.
        let done = if online {
            attrs & (io::DISK_ATTRIBUTE_OFFLINE | io::DISK_ATTRIBUTE_READ_ONLY) == 0
        } else {
            attrs & io::DISK_ATTRIBUTE_OFFLINE != 0
        };
        if done && !online {
            // Offline already, perhaps by a call whose volumes are still being removed.
            return wait_for_departure(os, OP, disk_number);
        }
        if !online {
            refuse_system_disk(os, OP, disk_number)?;
        }
        let h = open_disk(os, OP, disk_number, true)?;
        let onlining = online.then(|| {
            self.onlining
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
        if online && attrs & io::DISK_ATTRIBUTE_OFFLINE != 0 {
            let (l, _) = read_layout(OP, disk_number, &h)?;
            collision::refuse_collision(os, OP, disk_number, &l)?;
        }
        if !done {
            ioctl(
                &h,
                io::DISK_SET_DISK_ATTRIBUTES,
                &io::set_offline(!online),
                0,
            )
            .map_err(|e| os_error(OP, format!("disk {disk_number}"), &e, &[]))?;
        }
        drop(onlining);
        if online {
            // Online also means "its volumes exist": Plug and Play surfaces them only after
            // the disk comes online (or was just attached).
            let (l, _) = read_layout(OP, disk_number, &h)?;
            drop(h);
            wait_for_volumes(os, OP, disk_number, &l)?;
        } else {
            // Offline also means "its volumes are gone": Plug and Play removes them
            // asynchronously, and drivers detach the disk right after.
            drop(h);
            wait_for_departure(os, OP, disk_number)?;
        }
        Ok(())
    }

    fn partition_disk(&self, disk_number: u32) -> Result<()> {
        const OP: &str = "PartitionDisk";
        let os = &*self.os;
        let object = format!("disk {disk_number}");
        let h = open_disk(os, OP, disk_number, true)?;
        let attrs = disk_attributes(os, OP, disk_number)?;
        // An offline disk's layout can still be read ("When a disk is offline, the disk layout
        // can be read, but no volume devices are surfaced").
        let (mut l, sector) = read_layout(OP, disk_number, &h)?;
        // Idempotent and safe: a disk with any data partition is left alone before anything
        // else is looked at.
        if layout::plan_data_partition(&l, sector) == Ok(PartitionPlan::Nothing) {
            // Partitioned already (by an earlier call, or before the disk was attached): done
            // once its volumes exist, which after an attach or a reboot takes a moment. An
            // offline one surfaces them only once SetDiskState(online), which waits for them,
            // has run: aws-ebs, gce-pd and vSphere take the disk offline at unstage and call
            // PartitionDisk before SetDiskState when they stage it again.
            drop(h);
            if attrs & io::DISK_ATTRIBUTE_OFFLINE == 0 {
                wait_for_volumes(os, OP, disk_number, &l)?;
            }
            return Ok(());
        }
        refuse_attribute(OP, disk_number, attrs, io::DISK_ATTRIBUTE_OFFLINE)?;
        refuse_attribute(OP, disk_number, attrs, io::DISK_ATTRIBUTE_READ_ONLY)?;
        refuse_system_disk(os, OP, disk_number)?;
        let guid = || os.new_guid().map_err(|e| os_error(OP, "GUID", &e, &[]));
        if l.style == STYLE_RAW {
            refuse_raw_content(os, OP, disk_number, &h, sector)?;
            // IOCTL_DISK_CREATE_DISK "initializes a disk and disk partition table"; it only
            // runs on a RAW disk here because the layout was just read as RAW and found empty.
            ioctl(&h, io::DISK_CREATE_DISK, &io::create_gpt_disk(guid()?), 0)
                .map_err(|e| os_error(OP, &object, &e, &[]))?;
            (l, _) = read_layout(OP, disk_number, &h)?;
            // Windows may make the MSR itself; the layout is written once it has arrived.
            if let Some(msr) = l
                .partitions
                .iter()
                .find(|p| p.gpt_type == Some(layout::MSR))
            {
                wait_for_partition(os, OP, disk_number, msr.number)?;
            }
        }
        // A GPT disk with no partition at all gets the Microsoft Reserved partition first, as
        // Windows' own initialisation makes it; the data partition is then number 2.
        let msr = layout::msr_entry(&l, sector, guid()?);
        let planned = msr.as_ref().map_or_else(|| l.clone(), |m| l.with(m));
        let plan = layout::plan_data_partition(&planned, sector).map_err(|e| {
            let kind = match e {
                layout::PlanError::NotGpt | layout::PlanError::NoSpace => Kind::FailedPrecondition,
                layout::PlanError::Invalid(_) => Kind::Internal,
            };
            Error::new(kind, OP, &object, e)
        })?;
        let PartitionPlan::Create(new) = plan else {
            return Ok(());
        };
        let entries: Vec<NewEntry> = msr
            .into_iter()
            .chain([NewEntry::data(new, guid()?)])
            .collect();
        ioctl(
            &h,
            io::DISK_SET_DRIVE_LAYOUT_EX,
            &layout::gpt_layout_with(&l, &entries),
            0,
        )
        .map_err(|e| os_error(OP, &object, &e, &[]))?;
        // "IOCTL_DISK_UPDATE_PROPERTIES: invalidates the cached partition table and re-enumerates
        // the device", so the new partition (and its volume) appear without a rescan. The new
        // entry carries GPT_BASIC_DATA_ATTRIBUTE_NO_DRIVE_LETTER, so no drive letter is
        // assigned (as upstream's AssignDriveLetter=false); nothing is formatted.
        ioctl(&h, io::DISK_UPDATE_PROPERTIES, &[], 0)
            .map_err(|e| os_error(OP, &object, &e, &[]))?;
        let (written, _) = read_layout(OP, disk_number, &h)?;
        drop(h);
        let volumes = wait_for_volumes(os, OP, disk_number, &written)?;
        tracing::info!(disk = disk_number, volume = ?volumes.get(&new.start), "partitioned");
        Ok(())
    }
}
