//! azuredisk's Windows node code, replayed: the csi-proxy calls of its `csiProxyMounter`
//! (`pkg/mounter/safe_mounter_windows.go`, v1) or, when no v1 endpoint answers, of its
//! `csiProxyMounterV1Beta` (`safe_mounter_v1beta_windows.go`: filesystem v1beta1, disk and
//! volume v1beta2), driven by its node server (`pkg/azuredisk/nodeserver.go`,
//! `azure_common_windows.go`), in their order and with their path forms: normalised (`c:\…`)
//! everywhere except GetVolumeIDFromTargetPath at unmount and for stats, which get the path
//! raw as kubelet hands it. Read from kubernetes-sigs/azuredisk-csi-driver; its code is not
//! copied.

use super::NodeHost;
use super::fs_api::PathContext;
use super::proxy_api::ProxyApi;
use csi_proxy_client::Connector;
use std::sync::Arc;
use tonic::Status;

const GIB: i64 = 1 << 30;

/// An azuredisk node plugin with `--enable-windows-host-process=false`.
pub struct AzureDiskDriver {
    pub api: ProxyApi,
    host: Arc<dyn NodeHost>,
    /// v1.34 and later check the size GetVolumeStats reports against the requested size
    /// before and after the resize (`validateBlockDeviceSize`).
    pub size_check: bool,
}

/// volumehelper.RoundUpGiB.
fn round_up_gib(bytes: i64) -> i64 {
    (bytes + GIB - 1) / GIB
}

impl AzureDiskDriver {
    /// `NewSafeMounter`: the v1 clients, else the v1beta ones.
    pub async fn new(c: &Connector, host: Arc<dyn NodeHost>) -> AzureDiskDriver {
        let api = match ProxyApi::connect(c, "v1", "v1", "v1").await {
            Ok(api) => api,
            Err(_) => ProxyApi::connect(c, "v1beta1", "v1beta2", "v1beta2")
                .await
                .expect("csi-proxy v1beta"),
        };
        AzureDiskDriver {
            api,
            host,
            size_check: true,
        }
    }

    /// `getDevicePathWithLUN`: Rescan (its error logged), then ListDiskLocations, LUNID
    /// compared case-insensitively; no match is an error that ends the poll at once.
    async fn disk_by_lun(&mut self, lun: u32) -> Result<String, Status> {
        let _ = self.api.rescan().await;
        let lun = lun.to_string();
        if let Some(serial) = self.host.disk_serial(&lun) {
            return self.api.disk_with_serial(&serial).await;
        }
        let found = self.api.disk_luns().await.and_then(|l| {
            l.into_iter()
                .find(|(_, id)| id.eq_ignore_ascii_case(&lun))
                .map(|(d, _)| d)
                .ok_or_else(|| Status::internal(format!("could not find disk id for lun: {lun}")))
        });
        found.map_err(|e| {
            Status::internal(format!("failed to find disk on lun {lun}. {}", e.message()))
        })
    }

    /// `Unmount`: the volume at the raw path (an error only logged), WriteVolumeCache (an
    /// error only logged), Rmdir.
    async fn unmount(&mut self, target: &str) -> Result<(), Status> {
        if let Ok(id) = self.api.volume_at(target).await {
            let _ = self.api.write_cache(&id).await;
        }
        self.api
            .fs
            .rmdir(&self.host.norm(target), PathContext::Pod)
            .await
    }

    /// `ensureMountPoint`: `Ok(true)` when `target` is a link its container can read through;
    /// a link it cannot read is unmounted and the call fails (kubelet retries); a missing path
    /// or a plain directory is `Ok(false)` (on Windows nothing is made).
    async fn ensure_mount_point(&mut self, target: &str) -> Result<bool, Status> {
        if !self
            .api
            .fs
            .path_exists(&self.host.norm(target), PathContext::Plugin)
            .await?
        {
            return Ok(false);
        }
        // A local disk's dead link is no "corrupted mount" in Go's sense: the error stands.
        if !self.api.fs.is_link(&self.host.norm(target)).await? {
            return Ok(false);
        }
        if self.host.opens(target) {
            return Ok(true);
        }
        self.unmount(target).await?;
        Err(Status::internal(format!(
            "could not mount target {target:?}: ReadDir failed; unmounted"
        )))
    }

    /// NodeStageVolume: the disk by LUN; already a readable link → done; else PartitionDisk,
    /// the first volume with no length check (a Go panic on an empty list), a format only when
    /// not formatted, MountVolume; then the resize Windows always asks for, with the disk
    /// number as the volume ID (it fails upstream too: the retry finds the link and is done).
    pub async fn stage(&mut self, lun: u32, staging: &str) -> Result<(), Status> {
        let source = self.disk_by_lun(lun).await?;
        if self.ensure_mount_point(staging).await? {
            return Ok(());
        }
        self.api.partition_disk(&source).await?;
        let ids = self.api.volumes_on_disk(&source).await?;
        let Some(id) = ids.first().cloned() else {
            return Err(Status::internal(
                "panic: index out of range [0] with length 0 (VolumeIds[0])",
            ));
        };
        if !self.api.is_formatted(&id).await? {
            self.api.format(&id).await?;
        }
        self.api.mount(&id, &self.host.norm(staging)).await?;
        self.api.resize(&source, 0).await.map_err(|e| {
            Status::internal(format!(
                "NodeStageVolume: could not resize volume {source} ({staging}): {}",
                e.message()
            ))
        })
    }

    /// NodePublishVolume: `preparePublishPath` (PathExists, Rmdir), `ensureMountPoint`, then
    /// the link from the staging path.
    pub async fn publish(&mut self, staging: &str, target: &str) -> Result<(), Status> {
        if self
            .api
            .fs
            .path_exists(&self.host.norm(target), PathContext::Plugin)
            .await?
        {
            self.api
                .fs
                .rmdir(&self.host.norm(target), PathContext::Pod)
                .await?;
        }
        if self.ensure_mount_point(target).await? {
            return Ok(());
        }
        self.api
            .fs
            .link(&self.host.norm(staging), &self.host.norm(target))
            .await
    }

    /// NodeUnpublishVolume: Rmdir of the publish link.
    pub async fn unpublish(&mut self, target: &str) -> Result<(), Status> {
        self.api
            .fs
            .rmdir(&self.host.norm(target), PathContext::Pod)
            .await
    }

    /// NodeUnstageVolume: `Unmount` of the staging path as kubelet hands it (no
    /// UnmountVolume, no SetDiskState: the Rmdir of the mount point takes it away).
    pub async fn unstage(&mut self, staging: &str) -> Result<(), Status> {
        self.unmount(staging).await
    }

    /// NodeExpandVolume: the volume behind the publish path, (v1.34+) its size checked against
    /// the request, ResizeVolume, the size checked again. Returns the new capacity.
    pub async fn expand(&mut self, volume_path: &str, required: i64) -> Result<i64, Status> {
        let id = self
            .api
            .volume_at(&self.host.norm(volume_path))
            .await
            .map_err(|e| Status::not_found(e.message().to_string()))?;
        let request_gib = round_up_gib(required);
        if self.size_check {
            let size = self.api.volume_stats(&id).await?.0;
            if round_up_gib(size) < request_gib {
                return Err(Status::unavailable(format!(
                    "NodeExpandVolume: block device size did not match requested size: \
                     current {} GiB < requested {request_gib} GiB",
                    round_up_gib(size)
                )));
            }
        }
        let resized = self.api.resize(&id, 0).await;
        if !self.size_check {
            // Older releases stop at a failed resize.
            resized.clone()?;
        }
        let size = self.api.volume_stats(&id).await?.0;
        if round_up_gib(size) < request_gib {
            // v1.34+ reports the resize's error first, if it had one.
            resized?;
            return Err(Status::internal(format!(
                "resize requested for {request_gib} GiB, but after resizing the volume has {size} bytes"
            )));
        }
        Ok(size)
    }

    /// NodeGetVolumeStats: the volume at the raw path, then its stats: (total, used).
    pub async fn stats(&mut self, volume_path: &str) -> Result<(i64, i64), Status> {
        let id = self.api.volume_at(volume_path).await?;
        self.api.volume_stats(&id).await
    }
}
