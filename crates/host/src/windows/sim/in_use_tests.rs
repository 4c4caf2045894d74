//! The in-use rule over the simulated Windows: the disks the Storage Management provider and the
//! crash dump settings name as the host's, and volumes or disks another process has open, locked or
//! holds without sharing (ledger rows 55 to 60), through the disk and volume services a driver
//! calls.

use super::holders::{DiskRoles, FILE_SHARE_READ, FILE_SHARE_WRITE};
use super::storage_tests::{services, stage};
use super::tests::{Machine, machine};
use super::*;
use crate::windows::disk::volume_device;
use crate::windows::os::{self as seam};
use csi_proxy_core::Kind;
use csi_proxy_core::disk::{DiskHost, DiskService};
use csi_proxy_core::volume::{VolumeHost, VolumeService};
use csi_proxy_formats::windows_buffers::ioctl as io;

const GIB: u64 = 1 << 30;
const KUBELET: &str = r"C:\var\lib\kubelet";
const SHARE_ALL: u32 = FILE_SHARE_READ | FILE_SHARE_WRITE;

/// Asserts FAILED_PRECONDITION whose message names `named`.
#[track_caller]
fn refused(r: csi_proxy_core::Result<()>, named: &str) {
    let e = r.unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(e.message().contains(named), "{named:?} in {}", e.message());
}

/// A new disk partitioned through the services, and its volume (not formatted).
fn partitioned(m: &Machine, disk: &DiskService, vol: &VolumeService) -> (u32, String) {
    let n = m.sim.add_disk(10 * GIB, 3);
    disk.partition_disk(n).unwrap();
    (n, vol.list_volumes_on_disk(n, 0).unwrap().remove(0))
}

/// Every mutating RPC of the disk and volume groups on disk `n` and its volume `id`.
fn every_mutation_refused(
    m: &Machine,
    disk: &DiskService,
    vol: &VolumeService,
    n: u32,
    id: &str,
    named: &str,
) {
    refused(disk.partition_disk(n), named);
    refused(vol.format_volume(id), named);
    let target = format!(r"{KUBELET}\plugins\pd\disk{n}\globalmount");
    m.sim.mkdir(&target);
    refused(vol.mount_volume(id, &target), named);
    refused(vol.resize_volume(id, 0), named);
    refused(disk.set_disk_state(n, false), named);
    assert!(m.disk.is_disk_online(n).unwrap());
    assert!(!m.volume.is_volume_formatted(id).unwrap());
}

/// Row 55: what `MSFT_Disk` (IsBoot, IsSystem, IsClustered) and `MSFT_PhysicalDisk`
/// (CannotPoolReason "In a Pool") say makes a disk the host's, whatever its letters.
#[test]
fn the_boot_system_cluster_and_pool_disks_are_never_a_clients() {
    let m = machine();
    let (disk, vol) = services(&m);
    let role = |boot, system, clustered, pooled| DiskRoles {
        boot,
        system,
        clustered,
        pooled,
    };
    for (roles, named) in [
        (role(true, false, false, false), "MSFT_Disk.IsBoot"),
        (role(false, true, false, false), "MSFT_Disk.IsSystem"),
        (role(false, false, true, false), "MSFT_Disk.IsClustered"),
        (role(false, false, false, true), "Storage Spaces pool"),
    ] {
        let (n, id) = partitioned(&m, &disk, &vol);
        m.sim.set_disk_roles(n, roles);
        every_mutation_refused(&m, &disk, &vol, n, &id, named);
    }
    // The provider not answering leaves the disk alone (fail closed), naming what was asked.
    let (n, _) = partitioned(&m, &disk, &vol);
    m.sim.fail_next("storage_disks", OsError::new(0x8004_1001));
    let e = disk.partition_disk(n).unwrap_err();
    assert!(e.message().contains("MSFT_Disk"), "{}", e.message());
}

/// Row 56: the disks holding the crash dump files (CrashControl `DedicatedDumpFile`,
/// `DumpFile`) are the host's; a file that cannot be placed counts on every lettered disk.
#[test]
fn a_disk_holding_a_crash_dump_file_is_never_a_clients() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (n, id) = partitioned(&m, &disk, &vol);
    m.sim.assign_letter(&id);
    let letter = m
        .sim
        .mount_points()
        .into_iter()
        .find(|(p, v)| v.eq_ignore_ascii_case(&id) && p.len() == 3)
        .unwrap()
        .0;
    m.sim.set_crash_control(
        "DedicatedDumpFile",
        Some(&format!(r"{letter}dedicated.sys")),
    );
    every_mutation_refused(&m, &disk, &vol, n, &id, "crash dump file");
    m.sim.set_crash_control("DedicatedDumpFile", None);
    m.sim.set_crash_control("DumpFile", Some(r"Q:\MEMORY.DMP"));
    refused(vol.format_volume(&id), "cannot be placed");
    // An unlettered disk cannot hold it.
    let (_, other) = partitioned(&m, &disk, &vol);
    vol.format_volume(&other).unwrap();
    // The default dump file is on the system volume: data disks are left to the driver.
    m.sim
        .set_crash_control("DumpFile", Some(r"C:\Windows\MEMORY.DMP"));
    disk.set_disk_state(n, false).unwrap();
}

/// Row 57: a volume another process has open is never formatted, partitioned over or taken
/// offline; MountVolume and ResizeVolume do not look (they leave its data as it is).
#[test]
fn a_volume_another_process_has_open_is_never_rewritten_or_taken_away() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (n, id) = partitioned(&m, &disk, &vol);
    // A process reads the volume raw, sharing it (a backup agent, an application's raw data).
    let h = m
        .sim
        .open_in_other_process(&volume_device(&id), Access::Read, SHARE_ALL);
    refused(vol.format_volume(&id), "open in another process");
    refused(disk.partition_disk(n), "FSCTL_LOCK_VOLUME failed");
    refused(disk.set_disk_state(n, false), "mounted nowhere");
    assert!(m.disk.is_disk_online(n).unwrap());
    assert!(!m.volume.is_volume_formatted(&id).unwrap());
    // The probe released its lock at once: the process's volume works as before.
    seam::open(&*m.sim, &volume_device(&id), true).unwrap();
    m.sim.close_in_other_process(h);
    vol.format_volume(&id).unwrap();
    disk.set_disk_state(n, false).unwrap();
}

/// The driver's own flow is never refused for its pods' use of a staged volume: re-stage
/// after a restart (PartitionDisk, MountVolume again) and online growth go ahead.
#[test]
fn the_pods_of_a_staged_volume_block_none_of_the_drivers_own_flow() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (n, id) = stage(&m, &disk, &vol);
    let pod = m
        .sim
        .open_in_other_process(&volume_device(&id), Access::ReadWrite, SHARE_ALL);
    disk.partition_disk(n).unwrap();
    let target = format!(r"{KUBELET}\plugins\pd\disk{n}\globalmount");
    vol.mount_volume(&id, &target).unwrap();
    m.sim.grow_disk(n, 30 * GIB);
    vol.resize_volume(&id, 0).unwrap();
    // Formatting it stays refused: it is mounted.
    refused(vol.format_volume(&id), "mounted at");
    m.sim.close_in_other_process(pod);
}

/// Rows 19 and 58: a volume another process locked is refused naming the lock, by the guard
/// and by the host alone; a lock taken just before the format fails the format
/// (MSFT_Volume.Format: Access denied), said as a lock, and nothing is recorded as done.
#[test]
fn a_volume_locked_by_another_process_is_refused_naming_the_lock() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (_, id) = partitioned(&m, &disk, &vol);
    m.sim.set_volume_locked(&id, true);
    refused(vol.format_volume(&id), "locked by another process");
    refused(
        m.volume.format_volume(&id),
        "locked by another process (FSCTL_LOCK_VOLUME)",
    );
    m.sim.set_volume_locked(&id, false);
    // Between the guard and the format, another process takes the lock.
    m.sim.lock_volume_before("format_ntfs", &id);
    let e = vol.format_volume(&id).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message().contains("locked by another process") && e.message().contains("Access denied"),
        "{}",
        e.message()
    );
    m.sim.set_volume_locked(&id, false);
    assert!(!m.volume.is_volume_formatted(&id).unwrap());
    vol.format_volume(&id).unwrap();
    assert!(m.volume.is_volume_formatted(&id).unwrap());
}

/// Row 57 at the seam: the lock fails while any data-access handle is open on the volume (the
/// daemon's own or another process's) and on the system volume; it keeps every other handle
/// out until unlocked or closed.
#[test]
fn fsctl_lock_volume_fails_while_anything_has_the_volume_open() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (_, id) = partitioned(&m, &disk, &vol);
    let device = volume_device(&id);
    let lock = |h: &seam::Handle<'_>| seam::ioctl(h, io::FSCTL_LOCK_VOLUME, &[], 0).map(drop);
    let unlock = |h: &seam::Handle<'_>| seam::ioctl(h, io::FSCTL_UNLOCK_VOLUME, &[], 0).map(drop);
    let a = seam::open(&*m.sim, &device, false).unwrap();
    lock(&a).unwrap();
    assert_eq!(
        seam::open(&*m.sim, &device, false).unwrap_err().code,
        code::ACCESS_DENIED
    );
    seam::open_query(&*m.sim, &device).unwrap();
    unlock(&a).unwrap();
    let b = seam::open(&*m.sim, &device, false).unwrap();
    assert_eq!(lock(&a).unwrap_err().code, code::ACCESS_DENIED);
    drop(b);
    let other = m
        .sim
        .open_in_other_process(&device, Access::Read, SHARE_ALL);
    assert_eq!(lock(&a).unwrap_err().code, code::ACCESS_DENIED);
    m.sim.close_in_other_process(other);
    lock(&a).unwrap();
    drop(a);
    // Closed: released.
    seam::open(&*m.sim, &device, false).unwrap();
    let c = m.sim.volume_name_for_mount_point(r"C:\").unwrap();
    let sys = seam::open(&*m.sim, &volume_device(&c), false).unwrap();
    assert_eq!(lock(&sys).unwrap_err().code, code::ACCESS_DENIED);
}

/// Row 59: device opens answer ERROR_SHARING_VIOLATION as the share modes of the handles
/// already open say; a disk another process holds for itself is refused naming that, and
/// nothing is written to it.
#[test]
fn a_disk_another_process_holds_without_sharing_is_refused_and_left_untouched() {
    let m = machine();
    let (disk, vol) = services(&m);
    let n = m.sim.add_disk(10 * GIB, 3);
    let path = format!(r"\\.\PhysicalDrive{n}");
    m.sim.write_disk(n, 0, b"an application's raw data");
    // Shares reading only: the daemon may read, not write.
    let reader = m
        .sim
        .open_in_other_process(&path, Access::ReadWrite, FILE_SHARE_READ);
    seam::open(&*m.sim, &path, false).unwrap();
    seam::open_query(&*m.sim, &path).unwrap();
    assert_eq!(
        seam::open(&*m.sim, &path, true).unwrap_err().code,
        code::SHARING_VIOLATION
    );
    refused(
        disk.partition_disk(n),
        "another process holds the disk open",
    );
    m.sim.close_in_other_process(reader);
    // Shares nothing (a raw block volume's consumer): even the guard's read is refused.
    let owner = m.sim.open_in_other_process(&path, Access::ReadWrite, 0);
    refused(
        disk.partition_disk(n),
        "another process holds the disk open",
    );
    assert_eq!(
        &m.sim.disk_bytes(n, 0, 25)[..],
        b"an application's raw data"
    );
    m.sim.close_in_other_process(owner);
    // A volume held without sharing is refused by the volume group the same way.
    let (_, id) = partitioned(&m, &disk, &vol);
    let owner = m
        .sim
        .open_in_other_process(&volume_device(&id), Access::ReadWrite, 0);
    refused(
        m.volume.format_volume(&id),
        "another process holds the volume open",
    );
    refused(vol.format_volume(&id), "without sharing it for reading");
    m.sim.close_in_other_process(owner);
}

/// The lock probe is asked only by FormatVolume, PartitionDisk and SetDiskState(offline).
#[test]
fn only_the_rpcs_that_rewrite_or_remove_a_disk_lock_its_volumes() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (n, id) = stage(&m, &disk, &vol);
    let usage = DiskHost::disk_usage(&m.disk, n).unwrap();
    assert!(usage.open_elsewhere.is_empty());
    assert!(
        VolumeHost::volumes_open_elsewhere(&m.volume, n)
            .unwrap()
            .is_empty()
    );
    // A pod's handle is seen by the probe, and is the driver's own (mounted below the roots).
    let pod = m
        .sim
        .open_in_other_process(&volume_device(&id), Access::Read, SHARE_ALL);
    let open = DiskHost::volumes_open_elsewhere(&m.disk, n).unwrap();
    assert_eq!(open.len(), 1, "{open:?}");
    assert!(
        open[0].mount_points[0].ends_with(r"\globalmount\"),
        "{open:?}"
    );
    m.sim.close_in_other_process(pod);
}

/// Row 60: DisconnectTarget asks each disk of the session what PartitionDisk asks, and every
/// mount counts but automount's drive letter (the disk goes away under it). A volume mounted
/// outside the roots would be dismounted under its users by the logout, which refuses only
/// devices with something open; one another process has open is named by the lock probe.
#[test]
fn disconnect_target_refuses_a_session_whose_disk_is_in_use() {
    use crate::windows::iscsi::WindowsIscsiHost;
    use csi_proxy_core::iscsi::{
        AuthType, Chap, IscsiHost, IscsiService, RawTargetPortal, TargetPortal,
    };
    const IQN: &str = "iqn.2026-01.com.example:array.t1";
    let m = machine();
    let (disk, vol) = services(&m);
    let (n, id) = partitioned(&m, &disk, &vol);
    vol.format_volume(&id).unwrap();
    m.sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[n], None);
    let host = WindowsIscsiHost::with_os(m.sim.clone());
    let portal = TargetPortal {
        address: "10.0.0.5".into(),
        port: 3260,
    };
    host.add_target_portal(&portal).unwrap();
    let chap = Chap {
        auth_type: AuthType::None,
        username: String::new(),
        secret: "".into(),
    };
    host.connect_target(&portal, IQN, &chap).unwrap();
    // The driver's order: the session's disks, which arrive after the login, then their use.
    assert_eq!(host.get_target_disks(&portal, IQN).unwrap(), [n]);
    let iscsi = IscsiService::new(Arc::new(host.clone()));
    let raw = RawTargetPortal {
        address: "10.0.0.5".into(),
        port: 3260,
    };
    let disconnect = || iscsi.disconnect_target(Some(&raw), IQN);
    let session_disk = format!("disk {n} of the session");
    // Mounted outside the roots: nothing has a file open, so the logout alone would go ahead.
    let outside = r"C:\data\reports";
    m.sim.mkdir(outside);
    VolumeHost::mount_volume(&m.volume, &id, outside).unwrap();
    refused(disconnect(), &session_disk);
    refused(disconnect(), r#"mounted at "C:\\data\\reports"#);
    assert_eq!(m.sim.iscsi_sessions(), 1);
    VolumeHost::unmount_volume(&m.volume, &id, outside).unwrap();
    // Opened by another process (a backup agent reading it raw).
    let h = m
        .sim
        .open_in_other_process(&volume_device(&id), Access::Read, SHARE_ALL);
    refused(disconnect(), &session_disk);
    refused(disconnect(), "open in another process");
    // The initiator's own refusal, which the host alone meets.
    refused(
        host.disconnect_target(&portal, IQN),
        "a device of the session is in use",
    );
    assert_eq!(m.sim.iscsi_sessions(), 1);
    m.sim.close_in_other_process(h);
    // Held without sharing by a raw block consumer.
    let h = m
        .sim
        .open_in_other_process(&format!(r"\\.\PhysicalDrive{n}"), Access::ReadWrite, 0);
    refused(disconnect(), "another process holds the disk open");
    m.sim.close_in_other_process(h);
    // The host's own: a cluster disk.
    m.sim.set_disk_roles(
        n,
        DiskRoles {
            clustered: true,
            ..Default::default()
        },
    );
    refused(disconnect(), "MSFT_Disk.IsClustered");
    m.sim.set_disk_roles(n, DiskRoles::default());
    assert_eq!(m.sim.iscsi_sessions(), 1);
    // Automount's drive letter alone is no user: the unused session disconnects.
    m.sim.assign_letter(&id);
    disconnect().unwrap();
    assert_eq!(m.sim.iscsi_sessions(), 0);
}

/// A forced format dismounts the volume under the processes that have it open (row 89): the
/// simulated Windows no longer lets their handles go on working as if nothing happened, which
/// is why the host refuses a volume another process has open before it formats (row 57).
#[test]
fn a_forced_format_dismounts_the_volume_under_other_processes() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (_, id) = partitioned(&m, &disk, &vol);
    let device = volume_device(&id);
    let reader = m
        .sim
        .open_in_other_process(&device, Access::Read, SHARE_ALL);
    let query = m
        .sim
        .open_in_other_process(&device, Access::Query, SHARE_ALL);
    // The provider's call itself, past the host's checks (as when another process opens the
    // volume between the host's check and the format).
    let guid = id.trim_end_matches('\\').to_string() + "\\";
    assert_eq!(m.sim.format_ntfs(&guid).unwrap(), ReturnValue::Code(0));
    assert!(!m.sim.other_handle_works(reader), "its handle still works");
    assert!(m.sim.other_handle_works(query));
}
