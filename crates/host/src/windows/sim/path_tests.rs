//! A LUN surfaced twice (two paths without MPIO; ledger row 91) is one storage: a use of
//! either disk refuses every guarded RPC through the other, naming it.

use super::storage_tests::services;
use super::tests::machine;
use csi_proxy_core::Kind;
use csi_proxy_core::disk::DiskHost;
use csi_proxy_core::volume::VolumeHost;

const GIB: u64 = 1 << 30;
const KUBELET: &str = r"C:\var\lib\kubelet";

/// Asserts FAILED_PRECONDITION whose message names each of `named`.
#[track_caller]
fn refused(r: csi_proxy_core::Result<()>, named: &[&str]) {
    let e = r.unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    for n in named {
        assert!(e.message().contains(n), "{n:?} in {}", e.message());
    }
}

#[test]
fn a_lun_surfaced_twice_is_one_storage_through_either_path() {
    let m = machine();
    let (disk, vol) = services(&m);
    let a = m.sim.add_disk(10 * GIB, 3);
    disk.partition_disk(a).unwrap();
    let id_a = vol.list_volumes_on_disk(a, 0).unwrap().remove(0);
    vol.format_volume(&id_a).unwrap();
    // The host mounts path A's volume outside the kubelet path.
    let outside = r"C:\data";
    m.sim.mkdir(outside);
    VolumeHost::mount_volume(&m.volume, &id_a, outside).unwrap();
    let b = m.sim.add_disk_path(a, 4);
    assert_eq!(
        m.disk.list_disk_ids().unwrap().get(&b),
        m.disk.list_disk_ids().unwrap().get(&a),
        "both paths report the LUN's identity"
    );
    assert_eq!(m.sim.disk_attributes(b).map(|x| x.0), Some(true));
    let via_a = format!("reached also through another path, as disk {a} (PhysicalDrive{a})");
    let host = r#"mounted at "C:\\data"#;
    refused(disk.partition_disk(b), &[&via_a, host]);
    refused(disk.set_disk_state(b, true), &[&via_a, host]);
    refused(disk.set_disk_state(b, false), &[&via_a, host]);
    // Through A: its own mount.
    refused(disk.partition_disk(a), &[host]);
    refused(vol.format_volume(&id_a), &[host]);

    // The host lets the LUN go through A; the driver stages it through B.
    VolumeHost::unmount_volume(&m.volume, &id_a, outside).unwrap();
    disk.set_disk_state(a, false).unwrap();
    disk.set_disk_state(b, true).unwrap();
    let id_b = vol.list_volumes_on_disk(b, 0).unwrap().remove(0);
    let target = format!(r"{KUBELET}\plugins\pd\disk{b}\globalmount");
    m.sim.mkdir(&target);
    vol.mount_volume(&id_b, &target).unwrap();
    vol.resize_volume(&id_b, 0).unwrap();
    // Now A is the other path, and the driver's own mount through B counts there: one
    // filesystem mounted through two disks corrupts itself.
    let via_b = format!("reached also through another path, as disk {b} (PhysicalDrive{b})");
    refused(disk.partition_disk(a), &[&via_b, "globalmount"]);
    refused(disk.set_disk_state(a, true), &[&via_b]);
    assert_eq!(m.sim.disk_attributes(a).map(|x| x.0), Some(true));
}

/// A process has path A's volume open (a backup agent reading it raw, nothing mounted): the
/// lock probe finds it through A, and the storage is as much in use through B. PartitionDisk
/// through B is refused naming A and the open volume; once the process closes it, the disk is
/// free again.
#[test]
fn a_volume_open_through_one_path_refuses_the_other() {
    use super::holders::{FILE_SHARE_READ, FILE_SHARE_WRITE};
    use crate::windows::disk::volume_device;
    use crate::windows::os::Access;
    let m = machine();
    let (disk, vol) = services(&m);
    let a = m.sim.add_disk(10 * GIB, 3);
    disk.partition_disk(a).unwrap();
    let id_a = vol.list_volumes_on_disk(a, 0).unwrap().remove(0);
    let b = m.sim.add_disk_path(a, 4);
    let h = m.sim.open_in_other_process(
        &volume_device(&id_a),
        Access::Read,
        FILE_SHARE_READ | FILE_SHARE_WRITE,
    );
    let via_a = format!("reached also through another path, as disk {a} (PhysicalDrive{a})");
    refused(disk.partition_disk(b), &[&via_a, "open in another process"]);
    refused(disk.partition_disk(a), &["open in another process"]);
    m.sim.close_in_other_process(h);
    disk.partition_disk(a).unwrap();
}
