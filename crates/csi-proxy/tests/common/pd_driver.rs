//! gce-pd's Windows node code, replayed: the csi-proxy v1 calls of its `CSIProxyMounterV1`
//! (`pkg/mount-manager/safe-mounter-v1_windows.go`), its node server
//! (`pkg/gce-pd-csi-driver/{node.go,utils_windows.go}`) and its resizer
//! (`pkg/resizefs/resizefs_windows.go`), in their order and with their path forms: the staging
//! path raw as kubelet hands it (`\var\lib\kubelet\…`, no drive) to IsSymlink, MountVolume and
//! GetVolumeIDFromTargetPath, normalised (`c:\…`) only at unstage; no Mkdir of the staging path
//! (kubelet makes it). Read from kubernetes-sigs/gcp-compute-persistent-disk-csi-driver; its
//! code is not copied.

use super::smb_driver::normalize_windows_path;
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::volume::v1;
use csi_proxy_client::Connector;
use tonic::Status;
use tonic::transport::Channel;

/// A gce-pd node plugin talking to the daemon's v1 endpoints.
pub struct PdDriver {
    pub disk: d1::disk_client::DiskClient<Channel>,
    pub vol: v1::volume_client::VolumeClient<Channel>,
    pub fs: f1::filesystem_client::FilesystemClient<Channel>,
}

impl PdDriver {
    pub async fn new(c: &Connector) -> PdDriver {
        PdDriver {
            disk: d1::disk_client::DiskClient::new(c.channel("disk", "v1").await.unwrap()),
            vol: v1::volume_client::VolumeClient::new(c.channel("volume", "v1").await.unwrap()),
            fs: f1::filesystem_client::FilesystemClient::new(
                c.channel("filesystem", "v1").await.unwrap(),
            ),
        }
    }

    /// `getDiskNumberLegacy`: the disk whose page 83 ID's last white-space separated field is
    /// the device name (off Google Cloud the metadata lookup fails and this is what runs).
    pub async fn disk_number(&mut self, device_name: &str) -> Result<u32, Status> {
        let ids = self
            .disk
            .list_disk_i_ds(d1::ListDiskIDsRequest {})
            .await?
            .into_inner()
            .disk_i_ds;
        ids.iter()
            .find(|(_, d)| d.page83.split_whitespace().last() == Some(device_name))
            .map(|(n, _)| *n)
            .ok_or_else(|| Status::internal(format!("could not find disk for {device_name}")))
    }

    /// `isVolumePathMounted`: IsSymlink on the raw path; an error counts as "not mounted".
    async fn is_mounted(&mut self, path: &str) -> bool {
        self.fs
            .is_symlink(f1::IsSymlinkRequest { path: path.into() })
            .await
            .is_ok_and(|r| r.into_inner().is_symlink)
    }

    /// The volume `GetVolumeIDFromTargetPath` finds at `path`.
    async fn volume_at(&mut self, path: &str) -> Result<String, Status> {
        Ok(self
            .vol
            .get_volume_id_from_target_path(v1::GetVolumeIdFromTargetPathRequest {
                target_path: path.into(),
            })
            .await?
            .into_inner()
            .volume_id)
    }

    /// NodeStageVolume: already a link → done; else FormatAndMount (PartitionDisk before
    /// SetDiskState(online), the first volume after a length check, a format only when not
    /// formatted, MountVolume on the raw path), then the resize every stage makes
    /// (GetVolumeIDFromTargetPath, ResizeVolume with size 0). Returns the volume.
    pub async fn stage(&mut self, device_name: &str, staging: &str) -> Result<String, Status> {
        if self.is_mounted(staging).await {
            return self.volume_at(staging).await;
        }
        let n = self.disk_number(device_name).await?;
        self.disk
            .partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await?;
        self.disk
            .set_disk_state(d1::SetDiskStateRequest {
                disk_number: n,
                is_online: true,
            })
            .await?;
        let ids = self
            .vol
            .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
                disk_number: n,
                partition_number: 0,
            })
            .await?
            .into_inner()
            .volume_ids;
        let Some(id) = ids.first().cloned() else {
            return Err(Status::internal(
                "ListVolumesOnDisk does not return any volumes",
            ));
        };
        let formatted = self
            .vol
            .is_volume_formatted(v1::IsVolumeFormattedRequest {
                volume_id: id.clone(),
            })
            .await?
            .into_inner()
            .formatted;
        if !formatted {
            self.vol
                .format_volume(v1::FormatVolumeRequest {
                    volume_id: id.clone(),
                })
                .await?;
        }
        self.vol
            .mount_volume(v1::MountVolumeRequest {
                volume_id: id.clone(),
                target_path: staging.into(),
            })
            .await?;
        self.expand(staging).await?;
        Ok(id)
    }

    /// The resizer (NodeStage's part 4 and NodeExpandVolume): the volume at `path`, grown to
    /// the maximum.
    pub async fn expand(&mut self, path: &str) -> Result<(), Status> {
        let id = self.volume_at(path).await?;
        self.vol
            .resize_volume(v1::ResizeVolumeRequest {
                volume_id: id,
                size_bytes: 0,
            })
            .await?;
        Ok(())
    }

    /// NodePublishVolume: the target kubelet made is removed (PathExists, Rmdir), then linked
    /// to the staging path, both normalised.
    pub async fn publish(&mut self, staging: &str, target: &str) -> Result<(), Status> {
        let t = normalize_windows_path(target);
        if self
            .fs
            .path_exists(f1::PathExistsRequest { path: t.clone() })
            .await?
            .into_inner()
            .exists
        {
            self.fs
                .rmdir(f1::RmdirRequest {
                    path: t.clone(),
                    force: true,
                })
                .await?;
        }
        self.fs
            .create_symlink(f1::CreateSymlinkRequest {
                source_path: normalize_windows_path(staging),
                target_path: t,
            })
            .await?;
        Ok(())
    }

    /// NodeUnpublishVolume: Rmdir of the normalised publish path.
    pub async fn unpublish(&mut self, target: &str) -> Result<(), Status> {
        self.fs
            .rmdir(f1::RmdirRequest {
                path: normalize_windows_path(target),
                force: true,
            })
            .await?;
        Ok(())
    }

    /// NodeUnstageVolume (`UnmountDevice`), on the normalised path: nothing there → done;
    /// else the volume there is unmounted, the folder removed and the disk taken offline.
    pub async fn unstage(&mut self, staging: &str) -> Result<(), Status> {
        let t = normalize_windows_path(staging);
        let exists = self
            .fs
            .path_exists(f1::PathExistsRequest { path: t.clone() })
            .await?
            .into_inner()
            .exists;
        if !exists {
            return Ok(());
        }
        let id = self.volume_at(&t).await?;
        self.vol
            .unmount_volume(v1::UnmountVolumeRequest {
                volume_id: id.clone(),
                target_path: t.clone(),
            })
            .await?;
        self.fs
            .rmdir(f1::RmdirRequest {
                path: t,
                force: true,
            })
            .await?;
        let n = self
            .vol
            .get_disk_number_from_volume_id(v1::GetDiskNumberFromVolumeIdRequest { volume_id: id })
            .await?
            .into_inner()
            .disk_number;
        self.disk
            .set_disk_state(d1::SetDiskStateRequest {
                disk_number: n,
                is_online: false,
            })
            .await?;
        Ok(())
    }
}
