//! Driver conformance, Linux path forms: the node call sequences of real CSI drivers' csi-proxy
//! mounters, made through the daemon's v1 endpoints on real loop disks, each operation twice
//! (kubelet retries every node call), with the error branches the drivers take on the answers.
//! The sequences are described in ../shared/spec/drivers.md; the drivers' code is not copied.
//!
//! Not covered here, and why: SetDiskState(offline) at unstage (loop devices have no SCSI state
//! and are always online; the step is skipped with a note), AzureDisk's disk lookup by LUN (loop
//! devices have no SCSI address), csi-driver-smb (no cifs in this kernel). Needs root (loop
//! devices, mount); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, is_mounted};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use tonic::transport::Channel;

/// What aws-ebs reads as "not mounted" in a GetVolumeIDFromTargetPath error (its only test
/// besides the old PowerShell text, which no longer exists).
const EBS_NOT_MOUNTED: &str = "because it does not exist";

struct Node {
    disk: d1::disk_client::DiskClient<Channel>,
    vol: v1::volume_client::VolumeClient<Channel>,
    fs: f1::filesystem_client::FilesystemClient<Channel>,
}

impl Node {
    async fn new(d: &Daemon) -> Node {
        let c = d.connector();
        Node {
            disk: d1::disk_client::DiskClient::new(c.channel("disk", "v1").await.unwrap()),
            vol: v1::volume_client::VolumeClient::new(c.channel("volume", "v1").await.unwrap()),
            fs: f1::filesystem_client::FilesystemClient::new(
                c.channel("filesystem", "v1").await.unwrap(),
            ),
        }
    }

    /// GetVolumeIDFromTargetPath as aws-ebs reads it: `Ok(None)` when the error says the path
    /// is not mounted, any other error fails the driver's call.
    async fn mounted_volume(&mut self, path: &str) -> Result<Option<String>, tonic::Status> {
        match self
            .vol
            .get_volume_id_from_target_path(v1::GetVolumeIdFromTargetPathRequest {
                target_path: path.into(),
            })
            .await
        {
            Ok(r) => Ok(Some(r.into_inner().volume_id)),
            Err(s) if s.message().contains(EBS_NOT_MOUNTED) => Ok(None),
            Err(s) => Err(s),
        }
    }

    /// The disk whose serial number contains `volume` (aws-ebs: the EBS volume ID is in the
    /// NVMe serial; here the loop disk's backing file name).
    async fn disk_of(&mut self, volume: &str) -> u32 {
        let found = common::disks_by_serial(&mut self.disk, |s| s.contains(volume)).await;
        assert_eq!(found.len(), 1, "{volume}: {found:?}");
        found[0]
    }

    async fn rmdir(&mut self, path: &str) {
        self.fs
            .rmdir(f1::RmdirRequest {
                path: path.into(),
                force: true,
            })
            .await
            .unwrap();
    }

    async fn path_exists(&mut self, path: &str) -> bool {
        self.fs
            .path_exists(f1::PathExistsRequest { path: path.into() })
            .await
            .unwrap()
            .into_inner()
            .exists
    }

    /// NodeStage of the block drivers: already staged → done; else find the disk, bring it
    /// online, partition (a no-op when partitioned), take the first volume, format only when
    /// IsVolumeFormatted says no, make the staging dir and mount.
    async fn stage(&mut self, volume: &str, staging: &str) -> String {
        if let Some(id) = self.mounted_volume(staging).await.unwrap() {
            return id; // already staged: the driver returns early
        }
        let n = self.disk_of(volume).await;
        self.disk
            .set_disk_state(d1::SetDiskStateRequest {
                disk_number: n,
                is_online: true,
            })
            .await
            .unwrap();
        self.disk
            .partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await
            .unwrap();
        let ids = self
            .vol
            .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
                disk_number: n,
                partition_number: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .volume_ids;
        // The drivers index [0] right after PartitionDisk (gce-pd without a length check).
        let id = ids[0].clone();
        let formatted = self
            .vol
            .is_volume_formatted(v1::IsVolumeFormattedRequest {
                volume_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .formatted;
        if !formatted {
            self.vol
                .format_volume(v1::FormatVolumeRequest {
                    volume_id: id.clone(),
                })
                .await
                .unwrap();
        }
        self.fs
            .mkdir(f1::MkdirRequest {
                path: staging.into(),
            })
            .await
            .unwrap();
        self.vol
            .mount_volume(v1::MountVolumeRequest {
                volume_id: id.clone(),
                target_path: staging.into(),
            })
            .await
            .unwrap();
        id
    }

    /// NodePublish: the target is removed first if it exists, then linked to the staging path.
    async fn publish(&mut self, staging: &str, target: &str) {
        if self.path_exists(target).await {
            self.rmdir(target).await;
        }
        self.fs
            .create_symlink(f1::CreateSymlinkRequest {
                source_path: staging.into(),
                target_path: target.into(),
            })
            .await
            .unwrap();
    }

    /// NodeExpand and NodeGetVolumeStats: the volume behind the publish path, grown to the
    /// maximum, then its stats.
    async fn expand_and_stats(&mut self, target: &str) -> i64 {
        let id = self
            .mounted_volume(target)
            .await
            .unwrap()
            .expect("published");
        self.vol
            .resize_volume(v1::ResizeVolumeRequest {
                volume_id: id.clone(),
                size_bytes: 0,
            })
            .await
            .unwrap();
        self.vol
            .get_volume_stats(v1::GetVolumeStatsRequest { volume_id: id })
            .await
            .unwrap()
            .into_inner()
            .total_bytes
    }

    /// NodeUnstage of aws-ebs and gce-pd: nothing mounted → done; else flush, unmount, remove
    /// the staging dir, find the disk (SetDiskState offline would follow: see the module doc).
    async fn unstage(&mut self, staging: &str) {
        let Some(id) = self.mounted_volume(staging).await.unwrap() else {
            return;
        };
        self.vol
            .write_volume_cache(v1::WriteVolumeCacheRequest {
                volume_id: id.clone(),
            })
            .await
            .unwrap();
        self.vol
            .unmount_volume(v1::UnmountVolumeRequest {
                volume_id: id.clone(),
                target_path: staging.into(),
            })
            .await
            .unwrap();
        self.rmdir(staging).await;
        self.vol
            .get_disk_number_from_volume_id(v1::GetDiskNumberFromVolumeIdRequest { volume_id: id })
            .await
            .unwrap();
        eprintln!("note: SetDiskState(offline) skipped: loop devices are always online");
    }
}

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
    let mut node = Node::new(&d).await;
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
    let mut node = Node::new(&d).await;
    let _l = LoopDisk::new(d.dir.path(), "azuredisk-lun0", 300).unwrap();
    let staging = d.k("plugins/kubernetes.io/csi/disk.csi.azure.com/xyz/globalmount");
    let id = node.stage("azuredisk-lun0", &staging).await;
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();
    for _ in 0..2 {
        let _ = node
            .vol
            .write_volume_cache(v1::WriteVolumeCacheRequest {
                volume_id: id.clone(),
            })
            .await;
        node.rmdir(&staging).await;
    }
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
