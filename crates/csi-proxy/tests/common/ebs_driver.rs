//! aws-ebs's Windows node code, replayed: the csi-proxy v1 calls of its `CSIProxyMounter`
//! (`pkg/mounter/mount_windows_proxyV1.go`), the Windows glue around it
//! (`pkg/mounter/mount_windows.go`) and its node server (`pkg/driver/node.go`), in their order,
//! every path through `NormalizeWindowsPath` (lower-case `c:\…`). Read from
//! kubernetes-sigs/aws-ebs-csi-driver; its code is not copied.

use super::NodeHost;
use super::fs_api::PathContext;
use super::proxy_api::ProxyApi;
use csi_proxy_client::Connector;
use std::sync::Arc;
use tonic::Status;

/// `handleGetDeviceNameFromMountError`'s pattern, `(Get-Item -Path \S+).Target, output: ,
/// error: <nil>|because it does not exist`, matched as Go's regexp does (unanchored).
pub fn ebs_reads_not_mounted(message: &str) -> bool {
    if message.contains("because it does not exist") {
        return true;
    }
    const HEAD: &str = "Get-Item -Path ";
    const TAIL: &str = "Target, output: , error: <nil>";
    message.match_indices(HEAD).any(|(i, _)| {
        let rest = &message[i + HEAD.len()..];
        // `\S+` (one or more non-space characters), then any one character, then the tail.
        let ends = rest
            .char_indices()
            .take_while(|(_, c)| !c.is_whitespace())
            .map(|(i, c)| i + c.len_utf8());
        ends.into_iter().any(|end| {
            let mut after = rest[end..].chars();
            after.next().is_some() && after.as_str().starts_with(TAIL)
        })
    })
}

/// An aws-ebs node plugin (`--windows-host-process` off, its default) on the daemon's v1
/// endpoints; `host` is the node as its container sees it.
pub struct EbsDriver {
    pub api: ProxyApi,
    host: Arc<dyn NodeHost>,
}

impl EbsDriver {
    pub async fn new(c: &Connector, host: Arc<dyn NodeHost>) -> EbsDriver {
        EbsDriver {
            api: ProxyApi::connect(c, "v1", "v1", "v1").await.unwrap(),
            host,
        }
    }

    /// `FindDevicePath`: the first disk (map order) whose serial contains the volume ID without
    /// its dashes.
    async fn find_device(&mut self, volume_id: &str) -> Result<String, Status> {
        let ids = self.api.disk_ids().await.map_err(|e| {
            Status::not_found(format!(
                "Failed to find device path: error listing disk ids: {e}"
            ))
        })?;
        let clean = volume_id.replace('-', "");
        ids.into_iter()
            .find(|(_, d)| d.serial.contains(&clean))
            .map(|(n, _)| n)
            .ok_or_else(|| {
                Status::not_found(format!("disk number for volume id {volume_id:?} not found"))
            })
    }

    /// `GetDeviceNameFromMount`: the disk number behind `path`; `None` when the error text says
    /// nothing is mounted (refCount 0); any other error fails the CSI call.
    async fn device_at(&mut self, path: &str) -> Result<Option<String>, Status> {
        let found = match self.api.volume_at(&self.host.norm(path)).await {
            Ok(id) => self.api.disk_of_volume(&id).await,
            Err(e) => Err(e),
        };
        match found {
            Ok(disk) => Ok(Some(disk)),
            Err(e) if ebs_reads_not_mounted(e.message()) => Ok(None),
            Err(e) => Err(Status::internal(format!(
                "error getting device name from mount: {}",
                e.message()
            ))),
        }
    }

    /// `FormatAndMountSensitiveWithFormatOptions`: PartitionDisk, SetDiskState(online), the
    /// first volume with no length check (a Go panic on an empty list), a format only when not
    /// formatted, MountVolume.
    async fn format_and_mount(&mut self, disk: &str, target: &str) -> Result<(), Status> {
        self.api.partition_disk(disk).await?;
        self.api.set_online(disk, true).await?;
        let ids = self.api.volumes_on_disk(disk).await?;
        let Some(id) = ids.first().cloned() else {
            return Err(Status::internal(
                "panic: index out of range [0] with length 0 (VolumeIds[0])",
            ));
        };
        if !self.api.is_formatted(&id).await? {
            self.api.format(&id).await?;
        }
        self.api.mount(&id, &self.host.norm(target)).await
    }

    /// `Resize`: Rescan (its error only logged), the volume at the path, ResizeVolume with no
    /// size (0: the maximum).
    async fn resize(&mut self, path: &str) -> Result<(), Status> {
        let _ = self.api.rescan().await;
        let id = self.api.volume_at(&self.host.norm(path)).await?;
        self.api.resize(&id, 0).await
    }

    /// NodeStageVolume: the disk by serial, the staging dir made when missing, then
    /// GetDeviceNameFromMount on it (empty on a first stage: must read "not mounted"); the
    /// same disk already there → done; else format and mount, then `NeedResize` (disk size
    /// against volume size, one 4096-byte block of tolerance) and the resize it asks for.
    pub async fn stage(&mut self, volume_id: &str, staging: &str) -> Result<(), Status> {
        let source = self.find_device(volume_id).await?;
        let exists = self
            .api
            .fs
            .path_exists(&self.host.norm(staging), PathContext::Plugin)
            .await?;
        if !exists {
            self.api
                .fs
                .mkdir(&self.host.norm(staging), PathContext::Plugin)
                .await?;
        }
        if self.device_at(staging).await?.as_deref() == Some(&source) {
            return Ok(());
        }
        self.format_and_mount(&source, staging).await?;
        let _ = self.api.rescan().await;
        let device_size = self.api.disk_size(&source).await?;
        let id = self.api.volume_at(&self.host.norm(staging)).await?;
        let fs_size = self.api.volume_stats(&id).await?.0;
        if device_size <= 4096 + fs_size {
            self.resize(staging).await?;
        }
        Ok(())
    }

    /// NodePublishVolume: `PreparePublishTarget` (PathExists, Rmdir), `isMounted` (PathExists,
    /// IsSymlink when there), then CreateSymlink(staging, target).
    pub async fn publish(&mut self, staging: &str, target: &str) -> Result<(), Status> {
        if self
            .api
            .fs
            .path_exists(&self.host.norm(target), PathContext::Pod)
            .await?
        {
            self.api
                .fs
                .rmdir(&self.host.norm(target), PathContext::Pod)
                .await?;
        }
        let mounted = self
            .api
            .fs
            .path_exists(&self.host.norm(target), PathContext::Pod)
            .await?
            && self.api.fs.is_link(&self.host.norm(target)).await?;
        if !mounted {
            self.api
                .fs
                .link(&self.host.norm(staging), &self.host.norm(target))
                .await?;
        }
        Ok(())
    }

    /// NodeUnpublishVolume: Rmdir of the publish link.
    pub async fn unpublish(&mut self, target: &str) -> Result<(), Status> {
        self.api
            .fs
            .rmdir(&self.host.norm(target), PathContext::Pod)
            .await
    }

    /// NodeUnstageVolume: nothing mounted (by the error text) → done; else the volume there
    /// unmounted, the staging dir removed, its disk taken offline.
    pub async fn unstage(&mut self, staging: &str) -> Result<(), Status> {
        if self.device_at(staging).await?.is_none() {
            return Ok(());
        }
        let id = self.api.volume_at(&self.host.norm(staging)).await?;
        self.api.unmount(&id, &self.host.norm(staging)).await?;
        self.api
            .fs
            .rmdir(&self.host.norm(staging), PathContext::Plugin)
            .await?;
        let disk = self.api.disk_of_volume(&id).await?;
        self.api.set_online(&disk, false).await
    }

    /// NodeExpandVolume on the publish path: the disk by serial, the resize, then the disk's
    /// size as the new capacity.
    pub async fn expand(&mut self, volume_id: &str, volume_path: &str) -> Result<i64, Status> {
        self.device_at(volume_path).await?;
        let disk = self.find_device(volume_id).await?;
        self.resize(volume_path).await?;
        self.api.disk_size(&disk).await
    }

    /// NodeGetVolumeStats: PathExists through the proxy, then `GetDiskFreeSpaceEx` in the
    /// driver's own container (no csi-proxy call): the filesystem's size there.
    pub async fn stats(&mut self, volume_path: &str) -> Result<u64, Status> {
        if !self
            .api
            .fs
            .path_exists(&self.host.norm(volume_path), PathContext::Pod)
            .await?
        {
            return Err(Status::not_found(format!(
                "path {volume_path} does not exist"
            )));
        }
        self.host
            .fs_size(volume_path)
            .ok_or_else(|| Status::internal(format!("failed to get fs info on path {volume_path}")))
    }
}
