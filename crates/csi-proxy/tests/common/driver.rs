//! The node call sequences of real CSI drivers' csi-proxy mounters (aws-ebs, gce-pd, azuredisk), as
//! a node plugin makes them through the daemon's v1 endpoints, with the error branches the drivers
//! take on the answers. Shared by the Linux conformance run on loop disks and the Windows-path-form
//! run over the simulated Windows. The sequences follow the drivers' public code as read at their
//! release tags (docs/drivers.md, "Driver conformance"); the drivers' code is not copied.

use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::volume::v1;
use csi_proxy_client::Connector;
use tonic::transport::Channel;

/// What aws-ebs reads as "not mounted" in a GetVolumeIDFromTargetPath error (its only test
/// besides the old PowerShell text, which no longer exists).
pub const EBS_NOT_MOUNTED: &str = "because it does not exist";

pub struct Node {
    offline_at_unstage: bool,
    pub disk: d1::disk_client::DiskClient<Channel>,
    pub vol: v1::volume_client::VolumeClient<Channel>,
    pub fs: f1::filesystem_client::FilesystemClient<Channel>,
}

impl Node {
    /// A node plugin connected through `c`; `offline_at_unstage`: whether unstage takes the
    /// disk offline as the drivers do (loop devices have no such state).
    pub async fn new(c: &Connector, offline_at_unstage: bool) -> Node {
        Node {
            offline_at_unstage,
            disk: d1::disk_client::DiskClient::new(c.channel("disk", "v1").await.unwrap()),
            vol: v1::volume_client::VolumeClient::new(c.channel("volume", "v1").await.unwrap()),
            fs: f1::filesystem_client::FilesystemClient::new(
                c.channel("filesystem", "v1").await.unwrap(),
            ),
        }
    }

    /// GetVolumeIDFromTargetPath as aws-ebs reads it: `Ok(None)` when the error says the path
    /// is not mounted, any other error fails the driver's call.
    pub async fn mounted_volume(&mut self, path: &str) -> Result<Option<String>, tonic::Status> {
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
    pub async fn disk_of(&mut self, volume: &str) -> u32 {
        let found = super::disks_by_serial(&mut self.disk, |s| s.contains(volume)).await;
        assert_eq!(found.len(), 1, "{volume}: {found:?}");
        found[0]
    }

    pub async fn rmdir(&mut self, path: &str) {
        self.fs
            .rmdir(f1::RmdirRequest {
                path: path.into(),
                force: true,
            })
            .await
            .unwrap();
    }

    pub async fn path_exists(&mut self, path: &str) -> bool {
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
    pub async fn stage(&mut self, volume: &str, staging: &str) -> String {
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
    pub async fn publish(&mut self, staging: &str, target: &str) {
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
    pub async fn expand_and_stats(&mut self, target: &str) -> i64 {
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
    pub async fn unstage(&mut self, staging: &str) {
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
        let n = self
            .vol
            .get_disk_number_from_volume_id(v1::GetDiskNumberFromVolumeIdRequest { volume_id: id })
            .await
            .unwrap()
            .into_inner()
            .disk_number;
        if self.offline_at_unstage {
            self.disk
                .set_disk_state(d1::SetDiskStateRequest {
                    disk_number: n,
                    is_online: false,
                })
                .await
                .unwrap();
        } else {
            eprintln!("note: SetDiskState(offline) skipped: loop devices are always online");
        }
    }

    /// azuredisk's NodeUnstage: a flush (its error only logged) and Rmdir(force) of the staging
    /// mount point, without UnmountVolume; made twice, as kubelet retries.
    pub async fn unstage_by_rmdir(&mut self, id: &str, staging: &str) {
        for _ in 0..2 {
            let _ = self
                .vol
                .write_volume_cache(v1::WriteVolumeCacheRequest {
                    volume_id: id.into(),
                })
                .await;
            self.rmdir(staging).await;
        }
    }
}
