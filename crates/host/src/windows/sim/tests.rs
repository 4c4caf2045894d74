//! The Windows disk and volume hosts over the simulated Windows: each behaviour Windows documents
//! that bit (or would bite) a real node, and each earlier defect of these hosts that the seam made
//! testable.

use super::*;
use crate::windows::disk::{VOLUME_ARRIVAL_LIMIT, WindowsDiskHost};
use crate::windows::filesystem::WindowsFilesystemHost;
use crate::windows::volume::WindowsVolumeHost;
use csi_proxy_core::Kind;
use csi_proxy_core::disk::DiskHost;
use csi_proxy_core::volume::{ResizeTarget, VolumeHost};
use csi_proxy_formats::windows_buffers::layout::{BASIC_DATA, MSR, MSR_SIZE};
use std::num::NonZeroU32;
use std::sync::Arc;

const GIB: u64 = 1 << 30;

pub(super) struct Machine {
    pub(super) sim: Arc<SimWindows>,
    pub(super) disk: WindowsDiskHost,
    pub(super) volume: WindowsVolumeHost,
    _state: tempfile::TempDir,
}

pub(super) fn machine() -> Machine {
    let sim = Arc::new(SimWindows::new());
    let state = tempfile::tempdir().unwrap();
    Machine {
        disk: WindowsDiskHost::with_os(sim.clone()),
        volume: WindowsVolumeHost::with_os(sim.clone(), state.path()),
        sim,
        _state: state,
    }
}

/// A new 10 GiB disk, partitioned and formatted, as drivers stage it; its data volume.
pub(super) fn formatted(m: &Machine) -> (u32, String) {
    let (n, id) = partitioned(m);
    m.volume.format_volume(&id).unwrap();
    (n, id)
}

/// A new 10 GiB disk, partitioned; its data volume.
pub(super) fn partitioned(m: &Machine) -> (u32, String) {
    let n = m.sim.add_disk(10 * GIB, 3);
    m.disk.partition_disk(n).unwrap();
    let v = m.volume.list_volumes_on_disk(n, None).unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    (n, v[0].clone())
}

#[test]
fn partition_disk_returns_once_the_new_volume_exists() {
    let m = machine();
    // Plug and Play creates the volume 2 s after the layout write.
    m.sim.set_arrival_delay(Duration::from_secs(2));
    let n = m.sim.add_disk(10 * GIB, 3);
    let before = m.sim.clock();
    m.disk.partition_disk(n).unwrap();
    assert!(m.sim.clock() - before >= Duration::from_secs(2));
    // What drivers do next, indexing the first ID with no length check.
    let ids = m.volume.list_volumes_on_disk(n, None).unwrap();
    assert_eq!(ids.len(), 1);
    assert!(ids[0].starts_with(r"\\?\Volume{"), "{ids:?}");
    // Idempotent: a second call changes nothing and answers at once.
    let layout = m.sim.partitions(n);
    m.disk.partition_disk(n).unwrap();
    assert_eq!(m.sim.partitions(n), layout);
}

#[test]
fn a_volume_that_never_arrives_is_unavailable_not_success() {
    let m = machine();
    m.sim
        .set_arrival_delay(VOLUME_ARRIVAL_LIMIT + Duration::from_secs(5));
    let n = m.sim.add_disk(10 * GIB, 3);
    let e = m.disk.partition_disk(n).unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable, "{}", e.message());
    assert!(
        e.message().starts_with("PartitionDisk disk 1:"),
        "{}",
        e.message()
    );
    assert!(e.message().contains("did not appear"), "{}", e.message());
    // Later the volume is there; the retry is the idempotent no-op.
    m.sim.sleep(Duration::from_secs(10));
    m.disk.partition_disk(n).unwrap();
    assert_eq!(m.volume.list_volumes_on_disk(n, None).unwrap().len(), 1);
}

#[test]
fn a_new_gpt_disk_gets_the_reserved_partition_first_and_data_as_number_two() {
    let m = machine();
    let (n, id) = partitioned(&m);
    let parts = m.sim.partitions(n);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!((parts[0].0, parts[0].2, parts[0].3), (1, MSR_SIZE, MSR));
    assert_eq!((parts[1].0, parts[1].3), (2, BASIC_DATA));
    assert_eq!(parts[1].1 % (1 << 20), 0, "data partition 1 MiB aligned");
    // Upstream's numbering: the data volume is partition 2.
    let two = NonZeroU32::new(2).unwrap();
    assert_eq!(m.volume.list_volumes_on_disk(n, Some(two)).unwrap(), [id]);
    assert!(
        m.volume
            .list_volumes_on_disk(n, NonZeroU32::new(1))
            .unwrap()
            .is_empty()
    );
}

/// Partition numbers are what partmgr assigns (the GPT entry's position), not what the code
/// expects: a disk partitioned elsewhere with no MSR and its entries out of offset order.
/// Volumes are listed, filtered and grown by the number the layout answers.
#[test]
fn partitions_are_found_by_the_number_windows_answers() {
    const MIB: u64 = 1 << 20;
    let m = machine();
    // Entry 1: data at 5 GiB, 2 GiB long; entry 2: data at 1 MiB, 1 GiB long.
    let (n, ids) = m.sim.add_gpt_disk(
        10 * GIB,
        3,
        &[(BASIC_DATA, 5 * GIB, 2 * GIB), (BASIC_DATA, MIB, GIB)],
    );
    assert_eq!(m.volume.list_volumes_on_disk(n, None).unwrap(), ids);
    for (i, id) in ids.iter().enumerate() {
        let number = NonZeroU32::new(i as u32 + 1);
        assert_eq!(
            m.volume.list_volumes_on_disk(n, number).unwrap(),
            std::slice::from_ref(id)
        );
    }
    let three = NonZeroU32::new(3);
    assert!(m.volume.list_volumes_on_disk(n, three).unwrap().is_empty());
    // Partition 2 grows up to partition 1; partition 1 to the disk's end.
    m.volume
        .resize_volume(&ids[1], ResizeTarget::Maximum)
        .unwrap();
    m.volume
        .resize_volume(&ids[0], ResizeTarget::Maximum)
        .unwrap();
    let parts = m.sim.partitions(n);
    assert_eq!(
        (parts[1].0, parts[1].1, parts[1].2),
        (2, MIB, 5 * GIB - MIB)
    );
    assert_eq!((parts[0].0, parts[0].1), (1, 5 * GIB));
    assert!(parts[0].2 > 4 * GIB + GIB / 2, "{parts:?}");
    // PartitionDisk leaves a disk with data partitions alone, whatever their numbers.
    m.disk.partition_disk(n).unwrap();
    assert_eq!(m.sim.partitions(n).len(), 2);
}

#[test]
fn the_new_partition_gets_no_drive_letter_though_automount_is_on() {
    let m = machine();
    let (_, id) = partitioned(&m);
    // GPT_BASIC_DATA_ATTRIBUTE_NO_DRIVE_LETTER keeps automount from lettering it.
    assert!(
        m.sim.mount_points().iter().all(|(_, v)| *v != id),
        "{:?}",
        m.sim.mount_points()
    );
}

#[test]
fn the_disk_in_use_guard_fails_closed() {
    let m = machine();
    let (n, _) = partitioned(&m);
    assert!(m.disk.disk_usage(n).unwrap().mount_points.is_empty());
    // A volume whose mount points cannot be read makes the answer unknown: an error.
    m.sim
        .fail_next("volume_path_names", OsError::new(code::ACCESS_DENIED));
    let e = m.disk.disk_usage(n).unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied, "{}", e.message());
    // So does a volume whose disks cannot be read (the system volume is listed first).
    m.sim
        .fail_next("device_io_control", OsError::new(code::ACCESS_DENIED));
    let e = m.disk.disk_usage(n).unwrap_err();
    assert!(
        e.message().contains("telling whether disk 1 is in use"),
        "{}",
        e.message()
    );
    // A drive without media is on no disk, not an error.
    m.sim
        .fail_next("device_io_control", OsError::new(code::NOT_READY));
    assert!(m.disk.disk_usage(n).is_ok());
}

#[test]
fn many_mount_points_are_all_seen_through_more_data() {
    let m = machine();
    let (n, id) = formatted(&m);
    // Enough mounted folders that the first 256-unit buffer is too small.
    let mut dirs = Vec::new();
    for i in 0..20 {
        let d = format!(r"C:\var\lib\kubelet\pods\pod-{i:02}\volumes\kubernetes.io~csi\pv\mount");
        m.sim.mkdir(&d);
        m.volume.mount_volume(&id, &d).unwrap();
        dirs.push(d);
    }
    let seen = m.disk.disk_usage(n).unwrap().mount_points;
    assert_eq!(seen.len(), 20, "{seen:?}");
    assert!(m.sim.calls()["volume_path_names"] >= 2);
}

#[test]
fn a_volume_named_by_its_second_guid_path_is_the_same_volume() {
    let m = machine();
    let (_, id) = partitioned(&m);
    let target = r"C:\var\lib\kubelet\plugins\pd\globalmount";
    m.sim.mkdir(target);
    m.volume.format_volume(&id).unwrap();
    m.volume.mount_volume(&id, target).unwrap();
    // The mount manager now lists another GUID path first; the driver still holds the old one.
    let first = m.sim.add_volume_name(&id).unwrap();
    assert_ne!(first, id);
    assert_eq!(
        m.volume.get_volume_id_from_target_path(target).unwrap(),
        first
    );
    // Staging again is idempotent, and the unstage unmounts, by the old name.
    m.volume.mount_volume(&id, target).unwrap();
    m.volume.unmount_volume(&id, target).unwrap();
    assert!(m.sim.mount_points().iter().all(|(p, _)| p.len() == 3));
}

/// GetFileAttributesW failing for a cause other than "not found" (a sharing violation, a
/// device not ready) says nothing about whether the target is there: UnmountVolume and
/// GetVolumeIDFromTargetPath fail (kubelet retries) instead of answering "nothing mounted".
/// Found by the deterministic simulation (seeds 6 and 46): UnmountVolume answered OK with the
/// volume still mounted, and aws-ebs, reading "does not exist", would skip its unmount.
#[test]
fn a_target_the_os_cannot_look_at_is_not_taken_for_absent() {
    let m = machine();
    let (_, id) = formatted(&m);
    let target = r"C:ar\lib\kubelet\plugins\ebs\globalmount";
    m.sim.mkdir(target);
    m.volume.mount_volume(&id, target).unwrap();
    let sharing = || OsError::new(32);
    m.sim.fail_next("file_attributes", sharing());
    let e = m.volume.unmount_volume(&id, target).unwrap_err();
    assert_ne!(e.kind(), Kind::NotFound, "{e}");
    assert!(e.to_string().contains("UnmountVolume"), "{e}");
    assert_eq!(m.sim.mount_points().len(), 2, "still mounted");
    m.sim.fail_next("file_attributes", sharing());
    let e = m.volume.get_volume_id_from_target_path(target).unwrap_err();
    assert_ne!(e.kind(), Kind::NotFound, "{e}");
    // The retry, with the OS answering again, unmounts.
    m.volume.unmount_volume(&id, target).unwrap();
    assert_eq!(m.sim.mount_points().len(), 1);
}

/// The class behind the test above (ledger row 50): whichever code GetFileAttributesW fails
/// with, only ERROR_FILE_NOT_FOUND and ERROR_PATH_NOT_FOUND say nothing is there. Every other
/// Win32 code (1 to 1999), transient or not, leaves UnmountVolume failed and the volume mounted,
/// so no node's choice of code can make the daemon call a mounted target absent.
#[test]
fn no_failure_but_not_found_makes_a_target_absent() {
    let m = machine();
    let (_, id) = formatted(&m);
    let target = r"C:\var\lib\kubelet\plugins\ebs\globalmount";
    m.sim.mkdir(target);
    m.volume.mount_volume(&id, target).unwrap();
    let mounted = m.sim.mount_points().len();
    for c in (1..2000).filter(|&c| c != code::FILE_NOT_FOUND && c != code::PATH_NOT_FOUND) {
        m.sim.fail_next("file_attributes", OsError::new(c));
        let r = m.volume.unmount_volume(&id, target);
        assert!(r.is_err(), "code {c}: UnmountVolume answered OK");
        assert_eq!(m.sim.mount_points().len(), mounted, "code {c}: unmounted");
    }
    m.volume.unmount_volume(&id, target).unwrap();
}

#[test]
fn a_different_volume_at_the_target_is_refused_both_ways() {
    let m = machine();
    let (_, a) = formatted(&m);
    let (_, b) = formatted(&m);
    let target = r"C:\staging";
    m.sim.mkdir(target);
    m.volume.mount_volume(&a, target).unwrap();
    let e = m.volume.mount_volume(&b, target).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    let e = m.volume.unmount_volume(&b, target).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
}

#[test]
fn format_reconnects_to_wmi_after_a_service_restart() {
    let m = machine();
    let (_, id) = partitioned(&m);
    m.sim.restart_wmi();
    m.volume.format_volume(&id).unwrap();
    assert_eq!(m.sim.calls()["reset_wmi"], 1);
    assert!(m.volume.is_volume_formatted(&id).unwrap());
    assert_eq!(m.sim.filesystem_of(&id).unwrap().0, "NTFS");
}

#[test]
fn format_is_idempotent_and_never_formats_over_data() {
    let m = machine();
    let (_, id) = partitioned(&m);
    m.volume.format_volume(&id).unwrap();
    let calls = m.sim.calls()["format_ntfs"];
    m.volume.format_volume(&id).unwrap();
    assert_eq!(m.sim.calls()["format_ntfs"], calls, "formatted once");
    // A RAW volume holding another OS's filesystem is refused.
    let (_, other) = partitioned(&m);
    let mut ext4 = vec![0u8; 2048];
    ext4[1080..1082].copy_from_slice(&0xEF53u16.to_le_bytes());
    m.sim.write_head(&other, &ext4);
    let e = m.volume.format_volume(&other).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    assert!(e.message().contains("ext"), "{}", e.message());
    // A mounted volume is refused.
    let (_, third) = formatted(&m);
    m.sim.mkdir(r"C:\t");
    m.volume.mount_volume(&third, r"C:\t").unwrap();
    let e = m.volume.format_volume(&third).unwrap_err();
    assert!(e.message().contains("mounted at"), "{}", e.message());
}

#[test]
fn a_raw_volume_or_an_interrupted_format_is_not_mounted() {
    let m = machine();
    let (_, id) = partitioned(&m);
    m.sim.mkdir(r"C:\t");
    let e = m.volume.mount_volume(&id, r"C:\t").unwrap_err();
    assert!(
        e.message().ends_with("FormatVolume first"),
        "{}",
        e.message()
    );
    // The format's answer never comes back (WMI gave up waiting), and Windows finishes the
    // NTFS afterwards: the record is still pending, so the volume is neither mounted nor taken
    // for someone else's filesystem.
    m.sim.fail_next("format_ntfs", OsError::new(0x8004_1001));
    m.volume.format_volume(&id).unwrap_err();
    m.sim.format_ntfs(&id).unwrap();
    let e = m.volume.mount_volume(&id, r"C:\t").unwrap_err();
    assert!(e.message().contains("was interrupted"), "{}", e.message());
    // Drivers format only after IsVolumeFormatted says false: it must, or they mount forever
    // (found by the deterministic simulation, seed 46).
    assert!(!m.volume.is_volume_formatted(&id).unwrap());
    // The retry finishes the format, and the mount works.
    m.volume.format_volume(&id).unwrap();
    assert!(m.volume.is_volume_formatted(&id).unwrap());
    m.volume.mount_volume(&id, r"C:\t").unwrap();
}

#[test]
fn resize_grows_partition_and_filesystem_after_the_disk_grew() {
    let m = machine();
    let (n, id) = partitioned(&m);
    m.volume.format_volume(&id).unwrap();
    let before = m.volume.get_volume_stats(&id).unwrap().total_bytes;
    m.sim.grow_disk(n, 20 * GIB);
    m.volume.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    let after = m.volume.get_volume_stats(&id).unwrap().total_bytes;
    assert!(after > before + 9 * GIB, "{before} -> {after}");
    // Again: nothing to do.
    m.volume.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    assert_eq!(m.volume.get_volume_stats(&id).unwrap().total_bytes, after);
}

/// GetDiskFreeSpaceExW failing for a cause other than "no filesystem" (RAW answers
/// ERROR_UNRECOGNIZED_VOLUME) is not taken for a RAW volume: ResizeVolume fails having changed
/// nothing, instead of growing the partition only and answering OK with the filesystem at its
/// old size (drivers then report the expansion done). Found by the deterministic simulation
/// (seeds 16, 26, 28, 30, 35 and 46).
#[test]
fn resize_does_not_take_a_failed_filesystem_query_for_a_raw_volume() {
    let m = machine();
    let (n, id) = partitioned(&m);
    m.volume.format_volume(&id).unwrap();
    let parts = m.sim.partitions(n);
    let before = m.volume.get_volume_stats(&id).unwrap().total_bytes;
    m.sim.grow_disk(n, 20 * GIB);
    m.sim.fail_next("disk_free_space", OsError::new(21)); // ERROR_NOT_READY
    let e = m
        .volume
        .resize_volume(&id, ResizeTarget::Maximum)
        .unwrap_err();
    assert!(
        e.message().contains("ResizeVolume") || e.to_string().contains("ResizeVolume"),
        "{e}"
    );
    assert_eq!(m.sim.partitions(n), parts, "nothing grown");
    m.volume.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    let after = m.volume.get_volume_stats(&id).unwrap().total_bytes;
    assert!(after > before + 9 * GIB, "{before} -> {after}");
}

#[test]
fn disks_are_enumerated_by_interface_and_their_reported_numbers() {
    let m = machine();
    let a = m.sim.add_disk(GIB, 1);
    let b = m.sim.add_disk(GIB, 2);
    let ids = m.disk.list_disk_ids().unwrap();
    assert_eq!(ids.keys().copied().collect::<Vec<_>>(), [0, a, b]);
    assert_eq!(ids[&a].page83, format!("sim-disk-{a}"));
    assert_eq!(ids[&a].serial_number, format!("SIM{a:04}"));
    // A disk that cannot be opened fails the listing, naming it, rather than vanishing.
    m.sim.fail_next("open", OsError::new(code::ACCESS_DENIED));
    let e = m.disk.list_disk_ids().unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied);
    assert!(e.message().contains("disk device"), "{}", e.message());
}

#[test]
fn disk_locations_match_upstream() {
    let m = machine();
    let a = m.sim.add_disk(GIB, 4);
    let virt = m.sim.add_disk(GIB, 5);
    m.sim.unplace_disk(virt);
    let l = m.disk.list_disk_locations().unwrap();
    assert_eq!(l[&a].lun_id, "4");
    assert_eq!(l[&a].bus, "", "upstream leaves Bus empty");
    assert!(
        !l.contains_key(&virt),
        "a disk upstream cannot place is not listed"
    );
}

#[test]
fn the_system_disk_is_never_partitioned_or_taken_offline() {
    let m = machine();
    let e = m.disk.set_disk_online(0, false).unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied);
    let usage = m.disk.disk_usage(0).unwrap();
    assert!(usage.system_use.is_some());
    assert!(usage.mount_points.iter().any(|p| p == r"C:\"));
}

#[test]
fn an_offline_disk_hides_its_volumes_until_online() {
    let m = machine();
    let (n, id) = partitioned(&m);
    m.disk.set_disk_online(n, false).unwrap();
    assert!(!m.disk.is_disk_online(n).unwrap());
    assert!(m.volume.list_volumes_on_disk(n, None).unwrap().is_empty());
    m.disk.set_disk_online(n, true).unwrap();
    assert_eq!(m.volume.list_volumes_on_disk(n, None).unwrap(), [id]);
}

/// Taken offline, a disk's volumes go as asynchronously as they arrive (ledger row 81).
/// SetDiskState(offline) returns once they are gone, also when another tool took the disk offline a
/// moment before, so a driver that lists the volumes or detaches the disk right after finds none.
#[test]
fn set_disk_state_offline_returns_once_the_volumes_are_gone() {
    let m = machine();
    let (n, id) = partitioned(&m);
    m.sim.take_offline(n);
    assert_eq!(
        m.volume.list_volumes_on_disk(n, None).unwrap(),
        std::slice::from_ref(&id)
    );
    m.disk.set_disk_online(n, false).unwrap();
    assert!(m.volume.list_volumes_on_disk(n, None).unwrap().is_empty());
    m.disk.set_disk_online(n, true).unwrap();
    assert_eq!(m.volume.list_volumes_on_disk(n, None).unwrap(), [id]);
}

/// What a MountVolume and a FormatVolume cost in OS calls through the whole service (the
/// deterministic counterpart of a latency benchmark): the disk is found once for the lock, and
/// the host-disk guard reads the disk's use once, under the lock.
#[test]
fn os_calls_per_mount_and_format() {
    use csi_proxy_core::filesystem::FilesystemService;
    use csi_proxy_core::paths::{PathPolicy, PathStyle};
    use csi_proxy_core::volume::VolumeService;
    let m = machine();
    let (_, id) = partitioned(&m);
    let policy = PathPolicy::new(PathStyle::Windows, r"C:\var\lib\kubelet", &[]).unwrap();
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(m.sim.clone())),
        Arc::new(policy),
    );
    let svc = VolumeService::new(Arc::new(m.volume.clone()), fs);
    let target = r"C:\var\lib\kubelet\plugins\x\globalmount";
    m.sim.mkdir(target);
    let count = || m.sim.calls().values().sum::<u64>();
    let before = count();
    svc.format_volume(&id).unwrap();
    let format = count() - before;
    let before = count();
    svc.mount_volume(&id, target).unwrap();
    let mount = count() - before;
    eprintln!("seam calls: FormatVolume {format}, MountVolume {mount}");
    // MountVolume includes the target's walk: an open and an attribute read of the root and of
    // each of the three components below it, held while the mount point is set (8 calls). The
    // guard reads the provider's disk roles (MSFT_Disk, MSFT_PhysicalDisk) and the two crash
    // dump settings (4 calls); FormatVolume also locks the disk's volume for a moment (open,
    // lock, unlock). The guard also reads each disk's identity, to find other paths to the
    // same storage (the disk list, then per disk, here two: open, the device identification
    // and device descriptor properties, close: 11 calls).
    assert!(
        format <= 49 && mount <= 47,
        "format {format}, mount {mount}"
    );
}

#[test]
fn a_return_value_that_is_not_an_integer_is_never_success() {
    let m = machine();
    let (_, id) = partitioned(&m);
    m.sim
        .answer_next_method_with(ReturnValue::Unexpected("String(\"OK\")".into()));
    let e = m.volume.format_volume(&id).unwrap_err();
    assert_eq!(e.kind(), Kind::Internal, "{}", e.message());
    assert!(e.message().contains("not an integer"), "{}", e.message());
    assert!(!m.volume.is_volume_formatted(&id).unwrap());
    // The retry formats for real.
    m.volume.format_volume(&id).unwrap();
    assert!(m.volume.is_volume_formatted(&id).unwrap());
}
