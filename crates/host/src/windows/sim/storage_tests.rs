//! The disk and volume services over the simulated Windows in the storage situations of a stock
//! node: drives without media, volumes locked by another process.

use super::tests::{Machine, machine};
use super::*;
use crate::windows::filesystem::WindowsFilesystemHost;
use crate::windows::os::{self as seam};
use csi_proxy_core::Kind;
use csi_proxy_core::disk::DiskHost;
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
        csi_proxy_formats::windows_buffers::ioctl::VOLUME_GET_VOLUME_DISK_EXTENTS,
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

/// The class behind the test above (ledger row 18): whichever code an empty optical drive's
/// driver answers its requests with (no page names it), the drive blocks no call, because the
/// host asks the drive's kind (`GetDriveTypeW`) rather than reading the code. Mutation: without
/// the kind asked, every code but the two no-media ones and "incorrect function" fails
/// PartitionDisk.
#[test]
fn an_empty_dvd_drive_blocks_nothing_whatever_code_it_answers() {
    for answer in [
        code::NOT_READY,
        code::NO_MEDIA_IN_DRIVE,
        code::INVALID_FUNCTION,
        31,   // ERROR_GEN_FAILURE
        1117, // ERROR_IO_DEVICE
        1167, // ERROR_DEVICE_NOT_CONNECTED
        code::ACCESS_DENIED,
    ] {
        let m = machine();
        m.sim.add_empty_drive_answering(answer);
        let (disk, vol) = services(&m);
        let (n, _) = stage(&m, &disk, &vol);
        let usage = csi_proxy_core::disk::DiskHost::disk_usage(&m.disk, n);
        assert!(usage.is_ok(), "{answer}: {usage:?}");
        disk.set_disk_state(n, false).unwrap();
    }
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
    assert_eq!(vol.list_volumes_on_disk(a, 0).unwrap(), [locked]);
}

#[test]
fn a_san_disk_brought_online_is_writable_and_stays_so() {
    let m = machine();
    let (disk, _) = services(&m);
    // Windows Server's default SAN policy leaves an iSCSI disk offline and read-only.
    let n = m.sim.add_san_disk(10 * GIB, 3);
    assert_eq!(m.sim.disk_attributes(n), Some((true, true)));
    disk.set_disk_state(n, true).unwrap();
    assert_eq!(m.sim.disk_attributes(n), Some((false, false)));
    disk.partition_disk(n).unwrap();
    // Persisted: after a reboot the disk is still online and writable.
    m.sim.reattach_disk(n);
    assert_eq!(m.sim.disk_attributes(n), Some((false, false)));
    // An online disk made read-only is made writable by SetDiskState(online) too.
    m.sim.set_disk_read_only(n, true);
    disk.set_disk_state(n, true).unwrap();
    assert_eq!(m.sim.disk_attributes(n), Some((false, false)));
}

#[test]
fn partition_disk_refuses_an_offline_or_read_only_disk_naming_the_attribute() {
    let m = machine();
    let (disk, _) = services(&m);
    let n = m.sim.add_san_disk(10 * GIB, 3);
    let before = m.sim.clock();
    let e = disk.partition_disk(n).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message().contains("DISK_ATTRIBUTE_OFFLINE"),
        "{}",
        e.message()
    );
    // Refused at once (no 30 s wait for a volume an offline disk never surfaces), nothing
    // written.
    assert!(m.sim.clock() - before < Duration::from_secs(1));
    assert!(m.sim.partitions(n).is_empty());
    // Online but read-only (an administrator's `attributes disk set readonly`).
    let n = m.sim.add_disk(10 * GIB, 4);
    m.sim.set_disk_read_only(n, true);
    let e = disk.partition_disk(n).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message().contains("DISK_ATTRIBUTE_READ_ONLY"),
        "{}",
        e.message()
    );
    assert!(m.sim.partitions(n).is_empty());
    // The simulated Windows refuses the write itself, as Windows does.
    let h = seam::open(&*m.sim, &format!(r"\\.\PhysicalDrive{n}"), true).unwrap();
    let create = csi_proxy_formats::windows_buffers::ioctl::create_gpt_disk(uuid::Uuid::nil());
    let e = seam::ioctl(
        &h,
        csi_proxy_formats::windows_buffers::ioctl::DISK_CREATE_DISK,
        &create,
        0,
    )
    .unwrap_err();
    assert_eq!(e.code, code::WRITE_PROTECT);
}

#[test]
fn set_disk_state_online_returns_once_every_data_volume_exists() {
    let m = machine();
    let (disk, vol) = services(&m);
    m.sim.set_arrival_delay(Duration::from_secs(2));
    let (n, id) = stage(&m, &disk, &vol);
    let target =
        vol.get_volume_id_from_target_path(&format!(r"{KUBELET}\plugins\pd\disk{n}\globalmount"));
    assert_eq!(target.unwrap(), id);
    disk.set_disk_state(n, false).unwrap();
    assert!(vol.list_volumes_on_disk(n, 0).unwrap().is_empty());
    // Plug and Play surfaces the volume 2 s after the disk comes online; drivers list the
    // disk's volumes right after SetDiskState and take the first.
    let before = m.sim.clock();
    disk.set_disk_state(n, true).unwrap();
    assert!(m.sim.clock() - before >= Duration::from_secs(2));
    assert_eq!(vol.list_volumes_on_disk(n, 0).unwrap(), [id]);
}

/// The Storage Management provider answers MSFT_Volume from its cache, which may not hold the
/// volume PartitionDisk made a moment ago; FormatVolume once answered NOT_FOUND. It now refreshes
/// the cache (UpdateHostStorageCache) once and asks again; the whole stage passes.
#[test]
fn a_volume_the_storage_provider_has_not_seen_yet_is_formatted_after_a_refresh() {
    let m = machine();
    let (disk, vol) = services(&m);
    m.sim.set_storage_provider_cache(true);
    let before = m
        .sim
        .calls()
        .get("update_host_storage_cache")
        .copied()
        .unwrap_or(0);
    let (_, id) = stage(&m, &disk, &vol);
    assert_eq!(
        m.sim.filesystem_of(&id).map(|f| f.0),
        Some("NTFS".to_string())
    );
    let refreshes = m.sim.calls()["update_host_storage_cache"] - before;
    assert_eq!(
        refreshes, 1,
        "one refresh for the one volume the cache missed"
    );
}

/// Once, a partition Windows never gives a volume (a shadow-copy clone's data partition carries
/// GPT_BASIC_DATA_ATTRIBUTE_HIDDEN) was waited for: 30 s and UNAVAILABLE on every retry of
/// SetDiskState(online) and PartitionDisk.
#[test]
fn a_hidden_partition_is_not_waited_for() {
    let m = machine();
    let (disk, vol) = services(&m);
    m.sim.set_arrival_delay(Duration::from_secs(2));
    let (n, _) = stage(&m, &disk, &vol);
    disk.set_disk_state(n, false).unwrap();
    let data = m
        .sim
        .partitions(n)
        .iter()
        .find(|p| p.3 == BASIC_DATA)
        .unwrap()
        .0;
    m.sim
        .set_partition_attributes(n, data, HIDDEN | NO_DRIVE_LETTER);
    let before = m.sim.clock();
    disk.set_disk_state(n, true).unwrap();
    disk.partition_disk(n).unwrap();
    assert!(
        m.sim.clock() - before < Duration::from_secs(5),
        "waited for the hidden partition"
    );
    assert!(vol.list_volumes_on_disk(n, 0).unwrap().is_empty());
}

#[test]
fn partition_disk_on_an_attached_partitioned_disk_returns_once_its_volume_exists() {
    let m = machine();
    let (disk, vol) = services(&m);
    m.sim.set_arrival_delay(Duration::from_secs(2));
    let (n, id) = stage(&m, &disk, &vol);
    // The disk is detached and attached again (to this node, or after a reboot): its volume
    // arrives asynchronously.
    m.sim.reattach_disk(n);
    assert!(vol.list_volumes_on_disk(n, 0).unwrap().is_empty());
    disk.partition_disk(n).unwrap();
    assert_eq!(vol.list_volumes_on_disk(n, 0).unwrap(), [id]);
}

#[test]
fn the_wait_for_volumes_ends_at_the_callers_deadline() {
    let m = machine();
    let (disk, vol) = services(&m);
    m.sim.set_arrival_delay(Duration::from_secs(2));
    let (n, _) = stage(&m, &disk, &vol);
    m.sim.reattach_disk(n);
    let gone = std::time::Instant::now() - Duration::from_millis(1);
    // The caller stopped waiting before the volume arrived; the lock wait is not reached (the
    // deadline is checked inside the wait, after the disk was claimed).
    let e = csi_proxy_core::deadline::within(Some(gone), || {
        crate::windows::disk::WindowsDiskHost::with_os(m.sim.clone()).partition_disk(n)
    })
    .unwrap_err();
    assert_eq!(e.kind(), Kind::DeadlineExceeded, "{}", e.message());
    assert!(m.sim.clock() < Duration::from_secs(60));
}

/// Whichever code a removed disk's driver answers (no page names one, ledger row 27), the
/// listings and the in-use scan take it as gone. Mutation: ERROR_DEV_NOT_EXIST (what a storage
/// class driver answers for a removed device) left out of the gone codes fails ListDiskIDs.
#[test]
fn a_disk_being_removed_does_not_fail_the_listings() {
    for gone in [
        code::DEVICE_REMOVED,
        code::NO_SUCH_DEVICE,
        code::DEV_NOT_EXIST,
        code::DEVICE_NOT_CONNECTED,
    ] {
        let m = machine();
        let (disk, vol) = services(&m);
        let (a, _) = stage(&m, &disk, &vol);
        let (b, _) = stage(&m, &disk, &vol);
        m.sim.start_removing_disk_answering(b, gone);
        let ids = disk.list_disk_ids().unwrap();
        assert!(
            ids.contains_key(&a) && !ids.contains_key(&b),
            "{gone}: {ids:?}"
        );
        assert!(!disk.list_disk_locations().unwrap().contains_key(&b));
        // The in-use scan meets disk b's volume: gone, so on no disk that matters.
        assert_eq!(m.disk.disk_usage(a).unwrap().mount_points.len(), 1);
        disk.rescan().unwrap();
    }
}

#[test]
fn a_long_storage_descriptor_is_read_whole() {
    let m = machine();
    let n = m.sim.add_disk(GIB, 3);
    // Longer than the first buffer the query offers.
    let long = format!("naa.{}", "6".repeat(6000));
    m.sim.set_disk_page83(n, &long);
    let ids = m.disk.list_disk_ids().unwrap();
    assert_eq!(ids[&n].page83, long);
}

/// A VMware disk's binary NAA identifier is reported as lower-case hex (what vSphere matches
/// against its disk UUID); a disk with no identifier reports an empty page 83 ID.
#[test]
fn a_binary_naa_identifier_is_hex_and_none_is_empty() {
    let m = machine();
    let (a, b) = (m.sim.add_disk(GIB, 3), m.sim.add_disk(GIB, 4));
    let naa = [
        0x60, 0x00, 0xc2, 0x9a, 0x98, 0xd0, 0x5e, 0x38, 0x4a, 0x43, 0xf0, 0xef, 0x18, 0x9a, 0xaf,
        0x5a,
    ];
    m.sim.set_disk_naa(a, &naa);
    m.sim.clear_disk_page83(b);
    let ids = m.disk.list_disk_ids().unwrap();
    assert_eq!(ids[&a].page83, "6000c29a98d05e384a43f0ef189aaf5a");
    assert_eq!(ids[&b].page83, "");
}

#[test]
fn list_volumes_on_an_unknown_disk_is_not_found_as_get_disk_stats_is() {
    let m = machine();
    let (disk, vol) = services(&m);
    let n = m.sim.add_disk(GIB, 3);
    // A disk without volumes: an empty list.
    assert!(vol.list_volumes_on_disk(n, 0).unwrap().is_empty());
    let unknown = n + 100;
    let stats = disk.get_disk_stats(unknown).unwrap_err();
    let list = vol.list_volumes_on_disk(unknown, 0).unwrap_err();
    assert_eq!(
        (stats.kind(), list.kind()),
        (Kind::NotFound, Kind::NotFound)
    );
    assert!(
        list.message().contains(&format!("disk {unknown}")),
        "{}",
        list.message()
    );
}
