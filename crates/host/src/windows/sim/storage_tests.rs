//! The disk and volume services over the simulated Windows in the storage situations of a
//! stock node (issue 27): drives without media, volumes locked by another process.

use super::tests::{Machine, machine};
use super::*;
use crate::windows::filesystem::WindowsFilesystemHost;
use crate::windows::os::{self as seam};
use csi_proxy_core::disk::DiskService;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::volume::VolumeService;
use std::sync::Arc;

const GIB: u64 = 1 << 30;
const KUBELET: &str = r"C:\var\lib\kubelet";

/// The disk and volume services (with their host-disk guard) over the machine.
pub(super) fn services(m: &Machine) -> (DiskService, VolumeService) {
    let policy = Arc::new(PathPolicy::new(PathStyle::Windows, KUBELET, &[]).unwrap());
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(m.sim.clone())),
        policy.clone(),
    );
    (
        DiskService::new(Arc::new(m.disk.clone()), policy),
        VolumeService::new(Arc::new(m.volume.clone()), fs),
    )
}

/// A driver's whole node sequence on a new disk through the services: SetDiskState online,
/// PartitionDisk, FormatVolume, MountVolume, ResizeVolume after the disk grew. Returns the disk
/// and its volume.
pub(super) fn stage(m: &Machine, disk: &DiskService, vol: &VolumeService) -> (u32, String) {
    let n = m.sim.add_disk(10 * GIB, 3);
    disk.set_disk_state(n, true).unwrap();
    disk.partition_disk(n).unwrap();
    let id = vol.list_volumes_on_disk(n, 0).unwrap().remove(0);
    vol.format_volume(&id).unwrap();
    let target = format!(r"{KUBELET}\plugins\pd\disk{n}\globalmount");
    m.sim.mkdir(&target);
    vol.mount_volume(&id, &target).unwrap();
    m.sim.grow_disk(n, 20 * GIB);
    vol.resize_volume(&id, 0).unwrap();
    (n, id)
}

#[test]
fn an_empty_dvd_drive_opens_only_for_queries() {
    let m = machine();
    let dvd = m.sim.add_empty_drive();
    let device = crate::windows::disk::volume_device(&dvd);
    let e = seam::open(&*m.sim, &device, false).unwrap_err();
    assert_eq!(e.code, code::NOT_READY);
    let h = seam::open_query(&*m.sim, &device).unwrap();
    let e = seam::ioctl(
        &h,
        crate::windows_data::ioctl::VOLUME_GET_VOLUME_DISK_EXTENTS,
        &[],
        64,
    )
    .unwrap_err();
    assert_eq!(e.code, code::NOT_READY);
    // It has its drive letter, as Windows gives one to every optical drive.
    assert!(
        m.sim
            .mount_points()
            .iter()
            .any(|(p, v)| *v == dvd && p == r"D:\")
    );
}

#[test]
fn an_empty_dvd_drive_blocks_no_disk_or_volume_call() {
    let m = machine();
    m.sim.add_empty_drive();
    let (disk, vol) = services(&m);
    let (n, _) = stage(&m, &disk, &vol);
    assert!(csi_proxy_core::disk::DiskHost::disk_usage(&m.disk, n).is_ok());
    disk.set_disk_state(n, false).unwrap();
}

#[test]
fn a_volume_locked_by_another_process_blocks_nothing_else() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (a, locked) = stage(&m, &disk, &vol);
    // A backup agent (or chkdsk, or a format) holds FSCTL_LOCK_VOLUME on disk a's volume.
    m.sim.set_volume_locked(&locked, true);
    let device = crate::windows::disk::volume_device(&locked);
    assert_eq!(
        seam::open(&*m.sim, &device, false).unwrap_err().code,
        code::ACCESS_DENIED
    );
    // Every other disk is staged as usual...
    stage(&m, &disk, &vol);
    // ...and disk a's own use is still read: its mount point is seen through a query open.
    let usage = crate::windows::disk::WindowsDiskHost::with_os(m.sim.clone());
    let seen = csi_proxy_core::disk::DiskHost::disk_usage(&usage, a)
        .unwrap()
        .mount_points;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains(r"\disk"), "{seen:?}");
    // The locked volume is still listed on its disk (its extents need no data access).
    assert_eq!(vol.list_volumes_on_disk(a, 0).unwrap(), [locked.clone()]);
}
