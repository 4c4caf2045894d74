//! Driver conformance, Windows path forms: the same node call sequences as
//! `driver_conformance.rs`, through the daemon's v1 gRPC endpoints, with the Windows disk and
//! volume hosts running over the simulated Windows (`csi_proxy_host::windows::sim`): disks
//! found by serial and by LUN, volumes that appear 2 s after the layout write (virtual time),
//! drive-letter paths and the rooted `\var\lib\kubelet\…` form kubelet hands drivers.
//!
//! The filesystem group runs over the simulator's directory tree (the real Windows filesystem
//! host is tested under wine), so the whole sequence sees one machine. Needs nothing from the
//! host: no root, no loop devices. Each sequence runs twice: without profiles, and under the
//! driver's own profile served where the clients dial, kubelet's per-volume records written
//! where kubelet writes them.
#![cfg(unix)]

mod common;

use common::{EBS_NOT_MOUNTED, GIB, SimDaemon};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::volume::v1;

/// aws-ebs and gce-pd through a whole volume life in drive-letter paths, every node operation
/// twice, on a disk whose volume arrives 2 s after PartitionDisk's layout write.
#[tokio::test(flavor = "multi_thread")]
async fn ebs_and_pd_node_operations_each_twice() {
    for profile in [None, Some("ebs.csi.aws.com")] {
        ebs_and_pd_life(profile).await;
    }
}

async fn ebs_and_pd_life(profile: Option<&str>) {
    let d = SimDaemon::start_as(profile).await;
    let mut node = d.node().await;
    let disk = d.sim.add_disk(10 * GIB, 0);
    let serial = format!("SIM{disk:04}");
    let staging = SimDaemon::k(r"plugins\kubernetes.io\csi\ebs.csi.aws.com\abc\globalmount");
    let target = SimDaemon::k(r"pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount");
    // kubelet's per-volume directories, each with its record of the volume's driver.
    d.kubelet_volume(&staging, "ebs.csi.aws.com");
    d.kubelet_volume(&target, "ebs.csi.aws.com");

    // Unstage of a volume never staged is done at once (the driver reads "not mounted").
    node.unstage(&staging).await;

    let id = node.stage(&serial, &staging).await;
    assert_eq!(node.stage(&serial, &staging).await, id);
    assert_eq!(d.sim.filesystem_of(&id).unwrap().0, "NTFS");

    node.publish(&staging, &target).await;
    node.publish(&staging, &target).await;
    let linked = node
        .fs
        .is_symlink(f1::IsSymlinkRequest {
            path: target.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .is_symlink;
    assert!(linked);

    let before = node.expand_and_stats(&target).await;
    d.sim.grow_disk(disk, 20 * GIB);
    node.disk.rescan(d1::RescanRequest {}).await.unwrap();
    let grown = node.expand_and_stats(&target).await;
    assert!(grown > before + 9 * GIB as i64, "{before} -> {grown}");
    assert_eq!(node.expand_and_stats(&target).await, grown);

    node.rmdir(&target).await;
    node.rmdir(&target).await;
    assert!(!node.path_exists(&target).await);

    node.unstage(&staging).await;
    node.unstage(&staging).await;
    assert!(!node.path_exists(&staging).await);
    let online = node
        .disk
        .get_disk_state(d1::GetDiskStateRequest { disk_number: disk })
        .await
        .unwrap()
        .into_inner()
        .is_online;
    assert!(!online, "unstage took the disk offline, as the drivers do");

    // Staged again: online, the same volume, already formatted (not formatted again).
    let formats = d.sim.calls()["format_ntfs"];
    assert_eq!(node.stage(&serial, &staging).await, id);
    assert_eq!(d.sim.calls()["format_ntfs"], formats);
    node.unstage(&staging).await;
}

/// gce-pd passes kubelet's rooted staging path (`\var\lib\kubelet\…`) unchanged to Mkdir,
/// MountVolume, IsSymlink and GetVolumeIDFromTargetPath; each resolves against the kubelet
/// path's drive.
#[tokio::test(flavor = "multi_thread")]
async fn pd_rooted_staging_paths_resolve_on_the_kubelet_drive() {
    for profile in [None, Some("pd.csi.storage.gke.io")] {
        pd_rooted_life(profile).await;
    }
}

async fn pd_rooted_life(profile: Option<&str>) {
    let d = SimDaemon::start_as(profile).await;
    let mut node = d.node().await;
    let disk = d.sim.add_disk(10 * GIB, 1);
    let rooted = r"\var\lib\kubelet\plugins\kubernetes.io\csi\pd.csi.storage.gke.io\x\globalmount";
    d.kubelet_volume(rooted, "pd.csi.storage.gke.io");
    let id = node.stage(&format!("SIM{disk:04}"), rooted).await;
    assert_eq!(node.mounted_volume(rooted).await.unwrap(), Some(id.clone()));
    assert!(
        d.sim
            .mount_points()
            .iter()
            .any(|(p, v)| p.starts_with(r"C:\var\lib\kubelet\plugins") && *v == id),
        "{:?}",
        d.sim.mount_points()
    );
    let is_link = node
        .fs
        .is_symlink(f1::IsSymlinkRequest {
            path: rooted.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .is_symlink;
    assert!(
        is_link,
        "a mounted folder answers IsSymlink true, as upstream"
    );
    node.unstage(rooted).await;
    node.unstage(rooted).await;
    assert_eq!(node.mounted_volume(rooted).await.unwrap(), None);
}

/// azuredisk finds its disk by LUN (ListDiskLocations), stages, and unstages with a flush and
/// Rmdir of the staging mount point, twice; a volume named by a GUID path the mount manager no
/// longer lists first still unmounts.
#[tokio::test(flavor = "multi_thread")]
async fn azuredisk_by_lun_and_unstage_by_rmdir() {
    for profile in [None, Some("disk.csi.azure.com")] {
        azuredisk_by_lun_life(profile).await;
    }
}

async fn azuredisk_by_lun_life(profile: Option<&str>) {
    let d = SimDaemon::start_as(profile).await;
    let mut node = d.node().await;
    let disk = d.sim.add_disk(10 * GIB, 7);
    d.sim.add_disk(10 * GIB, 8);
    let locations = node
        .disk
        .list_disk_locations(d1::ListDiskLocationsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_locations;
    let by_lun: Vec<u32> = locations
        .iter()
        .filter(|(_, l)| l.lunid == "7")
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(by_lun, [disk]);
    assert_eq!(locations[&disk].bus, "");

    let staging = SimDaemon::k(r"plugins\kubernetes.io\csi\disk.csi.azure.com\xyz\globalmount");
    d.kubelet_volume(&staging, "disk.csi.azure.com");
    let id = node.stage(&format!("SIM{disk:04}"), &staging).await;
    node.unstage_by_rmdir(&id, &staging).await;
    assert!(!node.path_exists(&staging).await);
    assert!(d.sim.mount_points().iter().all(|(_, v)| *v != id));

    // Staged again; the mount manager now lists another GUID path first.
    assert_eq!(node.stage(&format!("SIM{disk:04}"), &staging).await, id);
    let first = d.sim.add_volume_name(&id).unwrap();
    assert_eq!(node.mounted_volume(&staging).await.unwrap(), Some(first));
    node.vol
        .unmount_volume(v1::UnmountVolumeRequest {
            volume_id: id.clone(),
            target_path: staging.clone(),
        })
        .await
        .expect("the volume's older GUID path names the same volume");
    let e = node
        .vol
        .get_volume_id_from_target_path(v1::GetVolumeIdFromTargetPathRequest {
            target_path: staging.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains(EBS_NOT_MOUNTED), "{}", e.message());
}
