//! Driver conformance, Linux path forms: the node call sequences of real CSI drivers' csi-proxy
//! mounters, made through the daemon's v1 endpoints on real loop disks, each operation twice
//! (kubelet retries every node call), with the error branches the drivers take on the answers. The
//! sequences follow the drivers' public code as read at their release tags (docs/drivers.md,
//! "Driver conformance"); the drivers' code is not copied.
//!
//! Not covered here, and why: SetDiskState(offline) at unstage (loop devices have no SCSI state
//! and are always online; the step is skipped with a note), AzureDisk's disk lookup by LUN (loop
//! devices have no SCSI address), csi-driver-smb (no cifs in this kernel). Needs root (loop
//! devices, mount); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, Node, can_use_loop_devices, is_mounted};
use csi_proxy_api::disk::v1 as d1;
use std::path::Path;

/// aws-ebs (and gce-pd, which calls the same RPCs in the same order) through a whole volume
/// life, every node operation twice.
#[tokio::test(flavor = "multi_thread")]
async fn ebs_and_pd_node_operations_each_twice() {
    if !can_use_loop_devices() {
        return;
    }
    // xfs: online growth of a mounted ext4 needs CAP_SYS_RESOURCE, which this machine's root
    // lacks (disk_volume_e2e covers that answer).
    let d = Daemon::start(&["-format-filesystem=xfs"]);
    let mut node = Node::new(&d.connector(), false).await;
    let l = LoopDisk::new(d.dir.path(), "vol-0ebs1conformance", 400).unwrap();
    let staging = d.k("plugins/kubernetes.io/csi/ebs.csi.aws.com/abc/globalmount");
    let target = d.k("pods/uid-1/volumes/kubernetes.io~csi/pvc-1/mount");
    std::fs::create_dir_all(Path::new(&target).parent().unwrap()).unwrap();

    // Unstage of a volume never staged (kubelet after a node restart) is done at once.
    node.unstage(&staging).await;

    let id = node.stage("vol-0ebs1conformance", &staging).await;
    assert_eq!(node.stage("vol-0ebs1conformance", &staging).await, id);
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();

    node.publish(&staging, &target).await;
    node.publish(&staging, &target).await; // the target exists now: removed and linked again
    assert_eq!(
        std::fs::read(Path::new(&target).join("data")).unwrap(),
        b"kept"
    );

    let before = node.expand_and_stats(&target).await;
    l.grow_to(700);
    node.disk.rescan(d1::RescanRequest {}).await.unwrap();
    let grown = node.expand_and_stats(&target).await;
    assert!(grown > before + (150 << 20), "{before} -> {grown}");
    assert_eq!(
        node.expand_and_stats(&target).await,
        grown,
        "a second expand is a no-op"
    );

    node.rmdir(&target).await;
    node.rmdir(&target).await; // gone already: OK
    assert!(!Path::new(&target).exists());
    assert!(
        std::fs::read(Path::new(&staging).join("data")).is_ok(),
        "unpublish removed the link, not the data"
    );

    node.unstage(&staging).await;
    node.unstage(&staging).await; // staging gone: the driver reads "not mounted" and is done
    assert!(!is_mounted(Path::new(&staging)));
    assert!(!Path::new(&staging).exists());

    // Staged again, the same volume comes back with its data.
    let again = node.stage("vol-0ebs1conformance", &staging).await;
    assert_eq!(again, id);
    assert_eq!(
        std::fs::read(Path::new(&staging).join("data")).unwrap(),
        b"kept"
    );
    node.unstage(&staging).await;
}

/// azuredisk unstages with a flush and Rmdir(force) of the staging mount point, without
/// UnmountVolume: the Rmdir must take the mount away (never its content), twice.
#[tokio::test(flavor = "multi_thread")]
async fn azuredisk_unstage_is_rmdir_of_the_staging_mount_point() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let mut node = Node::new(&d.connector(), false).await;
    let _l = LoopDisk::new(d.dir.path(), "azuredisk-lun0", 300).unwrap();
    let staging = d.k("plugins/kubernetes.io/csi/disk.csi.azure.com/xyz/globalmount");
    let id = node.stage("azuredisk-lun0", &staging).await;
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();
    node.unstage_by_rmdir(&id, &staging).await;
    assert!(!is_mounted(Path::new(&staging)));
    assert!(!Path::new(&staging).exists());
    // The filesystem is intact: staged again, the data is there.
    node.stage("azuredisk-lun0", &staging).await;
    assert_eq!(
        std::fs::read(Path::new(&staging).join("data")).unwrap(),
        b"kept"
    );
    node.unstage(&staging).await;
}
