//! Which disks reach the same storage on Windows. Without MPIO, every path to a LUN (each
//! iSCSI portal logged in to, each Fibre Channel or SAS path) is a disk of its own, and each
//! reports the LUN's identifiers: the device identification page (`StorageDeviceIdProperty`,
//! SCSI VPD page 0x83) and the serial number (`StorageDeviceProperty`). MPIO, when it claims
//! the LUN, surfaces one disk for all paths, so two disks with one identity are two paths.
//! `csi_proxy_core::disk::storage_group` decides from these.

use super::{disk_numbers, mount_points_on, open_disk, query_property, users};
use crate::windows::os::{Win32, os_error};
use csi_proxy_core::disk::{DiskUsage, OtherPath, Reach, StorageId, storage_group};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_formats::windows_buffers::storage::{self, Identifier};

/// Disk `n`'s device identifiers and serial number; `None` when it was removed since it was
/// listed. Any other failure is the error.
pub(super) fn read(os: &dyn Win32, op: &str, n: u32) -> Result<Option<(Vec<Identifier>, String)>> {
    let object = format!("disk {n}");
    let h = match open_disk(os, op, n, false) {
        Ok(h) => h,
        Err(e) if e.kind() == Kind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let query = |property| {
        query_property(&h, property)
            .map_err(|e| os_error(op, &object, &e, &[]).context("IOCTL_STORAGE_QUERY_PROPERTY"))
    };
    let read = || -> Result<(Vec<Identifier>, String)> {
        let ids = storage::parse_device_id_descriptor(&query(io::STORAGE_DEVICE_ID_PROPERTY)?)
            .map_err(|e| Error::new(Kind::Internal, op, &object, e))?;
        let serial = storage::device_descriptor_serial(&query(io::STORAGE_DEVICE_PROPERTY)?)
            .map_err(|e| Error::new(Kind::Internal, op, &object, e))?;
        Ok((ids, serial))
    };
    match read() {
        Ok(r) => Ok(Some(r)),
        // Removed while being read (ERROR_DEVICE_REMOVED).
        Err(e) if e.kind() == Kind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a disk's identifiers say about its storage: each identifier associated with the
/// device (`StorageIdAssocDevice`, 0; the port and target ones name a path), and the serial
/// number.
fn storage_ids(ids: &[Identifier], serial: &str) -> Vec<StorageId> {
    let mut out: Vec<StorageId> = ids
        .iter()
        .filter(|id| id.association == 0)
        .filter_map(|id| StorageId::designator(u8::try_from(id.id_type).ok()?, &id.value))
        .collect();
    let serial = serial.trim().trim_end_matches('.');
    if !serial.is_empty() {
        out.push(StorageId::Serial {
            vendor: String::new(),
            model: String::new(),
            serial: serial.to_string(),
        });
    }
    out
}

/// The other disks reaching the same storage as disk `n` (a LUN surfaced through two paths
/// without MPIO), each with its own uses, read as disk `n`'s are: a process holding it
/// without sharing, its mounts, the host's use of it.
pub(super) fn other_paths(
    os: &dyn Win32,
    op: &str,
    n: u32,
) -> Result<(Vec<StorageId>, Vec<OtherPath>)> {
    let mut out = Vec::new();
    let (own, others) = same_storage(os, op, n)?;
    for other in others {
        let seen = open_disk(os, op, other, false)
            .map(drop)
            .and_then(|()| mount_points_on(os, op, other));
        let mount_points = match seen {
            Ok(m) => m,
            Err(e) if e.kind() == Kind::NotFound => continue,
            Err(e) => {
                return Err(Error::new(
                    e.kind(),
                    op,
                    format!("disk {n}"),
                    format!(
                        "reached also through another path, as disk {other}: {}",
                        e.message()
                    ),
                ));
            }
        };
        let system_use = users::host_use(os, op, other, &mount_points)?;
        out.push(OtherPath {
            disk: other,
            name: format!("PhysicalDrive{other}"),
            usage: DiskUsage {
                mount_points,
                system_use,
                ..Default::default()
            },
        });
    }
    Ok((own, out))
}

/// Disk `n`'s own identifiers, and the other disks reaching the same storage, by number. A disk whose
/// identifiers cannot be read (one without page 0x83 support answers "Incorrect function")
/// says nothing about itself and stands alone.
fn same_storage(os: &dyn Win32, op: &str, n: u32) -> Result<(Vec<StorageId>, Vec<u32>)> {
    let mut all = Vec::new();
    for m in disk_numbers(os, op)? {
        let ids = match read(os, op, m) {
            Ok(Some((ids, serial))) => storage_ids(&ids, &serial),
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(disk = m, "no identity: {e}");
                Vec::new()
            }
        };
        all.push(Reach {
            number: m,
            name: format!("PhysicalDrive{m}"),
            ids,
            over: Vec::new(),
        });
    }
    let own = all
        .iter()
        .find(|r| r.number == n)
        .map(|r| r.ids.clone())
        .unwrap_or_default();
    Ok((own, storage_group(n, &all).into_iter().skip(1).collect()))
}
