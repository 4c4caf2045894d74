//! Who uses a disk besides its mounts, for the in-use rule (`csi_proxy_core::disk::refuse_in_use`):
//! the host itself (its system, boot and page-file disks, the crash dump file, a failover
//! cluster's disk, a storage pool's member), and other processes holding one of its volumes open
//! (found by a volume lock that fails). Facts only: the rule is core's.

use super::{
    disks_of_path, on_no_disk, system_disks, volume_device, volume_path_names, volumes_on,
};
use crate::windows::os::{self, OsError, Win32, code, ioctl, os_error};
use csi_proxy_core::disk::OpenElsewhere;
use csi_proxy_core::paths::is_drive_root;
use csi_proxy_core::{Kind, Result};
use csi_proxy_formats::windows_buffers::ioctl as io;

/// `MSFT_PhysicalDisk.CannotPoolReason` "In a Pool".
const IN_A_POOL: u16 = 2;

/// Why the host counts disk `disk` as its own, if it does. A drive letter alone does not make
/// a disk the host's (core's rule), so the disks whose letters matter are named here. What the
/// Storage Management provider cannot answer fails the question (the disk is left alone).
pub(super) fn host_use(
    os: &dyn Win32,
    op: &str,
    disk: u32,
    mount_points: &[String],
) -> Result<Option<String>> {
    if system_disks(os, op)?.contains(&disk) {
        return Ok(Some("holds the Windows system volume".to_string()));
    }
    let provider = |e: &OsError, class: &str| {
        os_error(op, class, e, &[]).context(format!("telling whether disk {disk} is the host's"))
    };
    let disks =
        os::wmi_retrying(os, || os.storage_disks()).map_err(|e| provider(&e, "MSFT_Disk"))?;
    // A disk the provider does not list yet (attached a moment ago) is none of these.
    if let Some(d) = disks.iter().find(|d| d.number == disk) {
        let role = if d.is_boot {
            Some("holds the boot volume of the running Windows (MSFT_Disk.IsBoot)")
        } else if d.is_system {
            Some("holds the system partition the firmware boots from (MSFT_Disk.IsSystem)")
        } else if d.is_clustered {
            Some("is a failover cluster disk (MSFT_Disk.IsClustered): the cluster owns it")
        } else {
            None
        };
        if let Some(role) = role {
            return Ok(Some(role.to_string()));
        }
    }
    let physical = os::wmi_retrying(os, || os.physical_disks())
        .map_err(|e| provider(&e, "MSFT_PhysicalDisk"))?;
    if physical
        .iter()
        .any(|(id, reasons)| id.parse::<u32>() == Ok(disk) && reasons.contains(&IN_A_POOL))
    {
        return Ok(Some(
            "is a member of a Storage Spaces pool (MSFT_PhysicalDisk.CannotPoolReason: In a Pool)"
                .to_string(),
        ));
    }
    if let Some(why) = crash_dump_use(os, op, disk, mount_points)? {
        return Ok(Some(why));
    }
    Ok(page_file_use(os, op, disk, mount_points))
}

/// Whether `mount_points` has a drive letter: a file named by a path on no volume known now may
/// be on such a disk.
fn lettered(mount_points: &[String]) -> bool {
    mount_points.iter().any(|m| is_drive_root(m))
}

/// Why disk `disk` holds a crash dump file, if it does: the dedicated dump file Windows writes
/// a crash dump into, or the file it copies the dump to at the next boot (CrashControl
/// `DedicatedDumpFile`, `DumpFile`). A file that cannot be placed on a disk counts as on every
/// lettered disk, as page files do.
fn crash_dump_use(
    os: &dyn Win32,
    op: &str,
    disk: u32,
    mount_points: &[String],
) -> Result<Option<String>> {
    for name in ["DedicatedDumpFile", "DumpFile"] {
        let file = os
            .crash_control(name)
            .map_err(|e| os_error(op, format!(r"CrashControl\{name}"), &e, &[]))?;
        let Some(file) = file else {
            continue;
        };
        match disks_of_path(os, op, &file) {
            Ok(d) if d.contains(&disk) => {
                return Ok(Some(format!(
                    "holds the crash dump file {file} (CrashControl {name})"
                )));
            }
            Ok(_) => {}
            Err(e) if lettered(mount_points) => {
                return Ok(Some(format!(
                    "has a drive letter, and the crash dump file {file} (CrashControl {name}) cannot be placed ({e})"
                )));
            }
            Err(_) => {}
        }
    }
    Ok(None)
}

/// Why disk `disk` holds a page file, if it does. When the page files cannot be listed, a disk
/// with a drive letter counts as holding one (refused), and a disk without one does not (a page
/// file needs a lettered volume).
fn page_file_use(os: &dyn Win32, op: &str, disk: u32, mount_points: &[String]) -> Option<String> {
    match os::wmi_retrying(os, || os.page_files()) {
        Ok(files) => files
            .into_iter()
            .find_map(|f| match disks_of_path(os, op, &f) {
                Ok(d) if d.contains(&disk) => Some(format!("holds the page file {f}")),
                Ok(_) => None,
                // A page file whose disks cannot be told may be on this one.
                Err(e) if lettered(mount_points) => Some(format!(
                    "has a drive letter, and the page file {f} cannot be placed ({e})"
                )),
                Err(_) => None,
            }),
        Err(e) if lettered(mount_points) => Some(format!(
            "has a drive letter, and the page files cannot be listed to tell whether it holds one ({e})"
        )),
        Err(_) => None,
    }
}

/// The volumes of disk `disk` that something else has open. Each volume is opened for reading
/// (sharing read and write, as `FSCTL_LOCK_VOLUME` asks) and locked, and the lock released at
/// once: the lock "fails if there are any open files on the volume"; the open fails when
/// another process holds the lock (ERROR_ACCESS_DENIED) or opened the volume without sharing
/// it (ERROR_SHARING_VIOLATION). Any failure of the lock counts as a user, whatever its code
/// (fail closed); a volume that went away meanwhile does not.
pub(super) fn volumes_open_elsewhere(
    os: &dyn Win32,
    op: &str,
    disk: u32,
) -> Result<Vec<OpenElsewhere>> {
    let mut out = Vec::new();
    for volume in volumes_on(os, op, disk)? {
        let why = match os::open(os, &volume_device(&volume), false) {
            Err(e) if e.kind() == Kind::NotFound || on_no_disk(os, &volume, &e) => continue,
            Err(e) if e.code == code::ACCESS_DENIED => {
                format!("it is locked by another process ({e})")
            }
            Err(e) if e.code == code::SHARING_VIOLATION => {
                format!("another process holds it open without sharing it for reading ({e})")
            }
            Err(e) => {
                return Err(os_error(op, &volume, &e, &[])
                    .context(format!("telling whether disk {disk} is in use")));
            }
            Ok(h) => match ioctl(&h, io::FSCTL_LOCK_VOLUME, &[], 0) {
                Ok(_) => {
                    // Closing the handle releases the lock too ("The handle is closed"), so a
                    // failed unlock leaves nothing behind once `h` is dropped.
                    if let Err(e) = ioctl(&h, io::FSCTL_UNLOCK_VOLUME, &[], 0) {
                        tracing::debug!(%volume, "FSCTL_UNLOCK_VOLUME: {e}");
                    }
                    continue;
                }
                Err(e) if e.kind() == Kind::NotFound => continue,
                Err(e) => {
                    format!("files or handles on it are open: FSCTL_LOCK_VOLUME failed ({e})")
                }
            },
        };
        out.push(OpenElsewhere {
            mount_points: volume_path_names(os, op, &volume)?,
            volume,
            why,
        });
    }
    Ok(out)
}
