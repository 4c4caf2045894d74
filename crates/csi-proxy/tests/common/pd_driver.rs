//! gce-pd's Windows node code, replayed: the csi-proxy v1 calls of its `CSIProxyMounterV1`
//! (`pkg/mount-manager/safe-mounter-v1_windows.go`), its node server
//! (`pkg/gce-pd-csi-driver/{node.go,utils_windows.go}`) and its resizer
//! (`pkg/resizefs/resizefs_windows.go`), in their order and with their path forms: the staging
//! path raw as kubelet hands it (`\var\lib\kubelet\…`, no drive) to IsSymlink, MountVolume and
//! GetVolumeIDFromTargetPath, normalised (`c:\…`) only at unstage; no Mkdir of the staging path
//! (kubelet makes it). Read from kubernetes-sigs/gcp-compute-persistent-disk-csi-driver; its
//! code is not copied.

use super::NodeHost;
use super::fs_api::PathContext;
use super::proxy_api::ProxyApi;
use csi_proxy_client::Connector;
use std::sync::Arc;
use tonic::Status;

/// A gce-pd node plugin on the daemon's v1 endpoints or, when none answers, its v1beta set
/// (`safe-mounter-v1beta_windows.go`: filesystem v1beta1, disk v1beta2, volume v1beta1).
pub struct PdDriver {
    pub api: ProxyApi,
    host: Arc<dyn NodeHost>,
    /// What Google Cloud's metadata server lists (`instance/disks/?recursive=true`): device
    /// name, interface and NVMe namespace identifier; empty off Google Cloud, where the call
    /// fails and the legacy lookup runs.
    metadata: Vec<(String, String, u64)>,
}

/// gce-pd's `convertSerialToEUI`: the serial without one trailing `.` and without `_` must be
/// 32 characters whose first 16 parse as hex; `eui.` and those 32 otherwise nothing.
fn serial_to_eui(serial: &str) -> Option<String> {
    let cleaned = serial.strip_suffix('.').unwrap_or(serial).replace('_', "");
    (cleaned.len() == 32 && u64::from_str_radix(cleaned.get(..16)?, 16).is_ok())
        .then(|| format!("eui.{cleaned}"))
}

/// gce-pd's `convertEUIToDecimal`: the first 16 hex digits after `eui.`.
fn eui_to_namespace_id(eui: &str) -> Option<u64> {
    u64::from_str_radix(eui.strip_prefix("eui.")?.get(..16)?, 16).ok()
}

impl PdDriver {
    pub async fn new(c: &Connector, host: Arc<dyn NodeHost>) -> PdDriver {
        let api = match ProxyApi::connect(c, "v1", "v1", "v1").await {
            Ok(api) => api,
            Err(_) => ProxyApi::connect(c, "v1beta1", "v1beta2", "v1beta1")
                .await
                .expect("csi-proxy v1beta"),
        };
        PdDriver {
            api,
            host,
            metadata: Vec::new(),
        }
    }

    /// The node runs on Google Cloud: the metadata server lists `device_name` attached over
    /// `interface` (`NVME` for Hyperdisk) with the NVMe namespace identifier `namespace_id`.
    pub fn on_google_cloud(&mut self, device_name: &str, interface: &str, namespace_id: u64) {
        self.metadata
            .push((device_name.into(), interface.into(), namespace_id));
    }

    /// `GetDiskNumber` (v1, since v1.21): a device the metadata server lists as NVMe is found
    /// by its namespace identifier: ListDiskIDs, and for each disk its page 83 ID when it
    /// starts with `eui.`, else its serial number reformatted (`serial_to_eui`), whose first
    /// 16 hex digits must equal the identifier; no match, or no metadata, falls back to the
    /// legacy lookup. Its v1beta mounter reads the identifiers keyed `UniqueId` and
    /// `SerialNumber`, which disk v1beta2 never has (its keys are `page83`, `serialNumber`):
    /// there the legacy lookup always runs.
    pub async fn disk_number(&mut self, device_name: &str) -> Result<String, Status> {
        if let Some(serial) = self.host.disk_serial(device_name) {
            return self.api.disk_with_serial(&serial).await;
        }
        let nvme = self
            .metadata
            .iter()
            .find(|(name, ..)| name == device_name)
            .filter(|(_, interface, _)| interface == "NVME")
            .map(|(.., id)| *id);
        if let Some(namespace_id) = nvme
            && self.api.versions().1 == "v1"
        {
            for (n, ids) in self.api.disk_ids().await? {
                let eui = if ids.page83.starts_with("eui.") {
                    Some(ids.page83.clone())
                } else {
                    serial_to_eui(&ids.serial)
                };
                if eui.as_deref().and_then(eui_to_namespace_id) == Some(namespace_id) {
                    return Ok(n);
                }
            }
        }
        self.legacy_disk_number(device_name).await
    }

    /// `getDiskNumberLegacy`: the disk whose page 83 ID's last white-space separated field is
    /// the device name (off Google Cloud the metadata lookup fails and this is what runs).
    async fn legacy_disk_number(&mut self, device_name: &str) -> Result<String, Status> {
        let ids = self.api.disk_ids().await?;
        ids.into_iter()
            .find(|(_, d)| d.page83.split_whitespace().last() == Some(device_name))
            .map(|(n, _)| n)
            .ok_or_else(|| Status::internal(format!("could not find disk for {device_name}")))
    }

    /// `isVolumePathMounted`: IsSymlink (v1beta1: IsMountPoint) on the raw path; an error
    /// counts as "not mounted".
    async fn is_mounted(&mut self, path: &str) -> bool {
        self.api.fs.is_link(path).await.unwrap_or(false)
    }

    /// NodeStageVolume without disk-size validation (its default).
    pub async fn stage(&mut self, device_name: &str, staging: &str) -> Result<String, Status> {
        self.stage_validating(device_name, staging, None).await
    }

    /// NodeStageVolume: the disk looked up (every attempt); already a link → done; with
    /// `--enable-disk-size-validation` and a size in the publish context (`expected_gib`),
    /// GetDiskStats on the disk as it is (offline at a re-stage), whose `TotalBytes` the driver
    /// reads even when the call failed (a nil response there: Go panics), rounded up to GiB
    /// and refused when smaller than expected; then FormatAndMount (PartitionDisk before
    /// SetDiskState(online), the first volume after a length check, a format only when not
    /// formatted, MountVolume on the raw path) and the resize every stage makes
    /// (GetVolumeIDFromTargetPath, ResizeVolume with size 0). Returns the volume.
    pub async fn stage_validating(
        &mut self,
        device_name: &str,
        staging: &str,
        expected_gib: Option<i64>,
    ) -> Result<String, Status> {
        let n = self.disk_number(device_name).await?;
        if self.is_mounted(staging).await {
            return self.api.volume_at(staging).await;
        }
        if let Some(expected) = expected_gib {
            let bytes = self.api.disk_size(&n).await.map_err(|e| {
                Status::internal(format!(
                    "the driver panics: GetDiskStats failed ({e:?}) and its nil response is read"
                ))
            })?;
            let actual = (bytes + (1 << 30) - 1) >> 30;
            if expected > actual {
                return Err(Status::internal(format!(
                    "expected block size \"{expected}\", got \"{actual}\""
                )));
            }
        }
        self.api.partition_disk(&n).await?;
        self.api.set_online(&n, true).await?;
        let ids = self.api.volumes_on_disk(&n).await?;
        let Some(id) = ids.first().cloned() else {
            return Err(Status::internal(
                "ListVolumesOnDisk does not return any volumes",
            ));
        };
        if !self.api.is_formatted(&id).await? {
            self.api.format(&id).await?;
        }
        self.api.mount(&id, staging).await?;
        self.expand(staging).await?;
        Ok(id)
    }

    /// The resizer (NodeStage's part 4 and NodeExpandVolume): the volume at `path`, grown to
    /// the maximum.
    pub async fn expand(&mut self, path: &str) -> Result<(), Status> {
        let id = self.api.volume_at(path).await?;
        self.api.resize(&id, 0).await
    }

    /// NodeExpandVolume (v1.26.4): the device looked up first (`getDevicePath`: the disk
    /// number, as at stage), the resizer, then GetDiskStats on that disk (`getBlockSizeBytes`),
    /// whose `TotalBytes` the driver reads even when the call failed (a nil response there: Go
    /// panics) and compares with the requested size: smaller is INTERNAL. Returns the capacity
    /// it reports (the requested bytes).
    pub async fn node_expand(
        &mut self,
        device_name: &str,
        volume_path: &str,
        requested: i64,
    ) -> Result<i64, Status> {
        let n = self.disk_number(device_name).await.map_err(|e| {
            Status::internal(format!("error when getting device path: {}", e.message()))
        })?;
        self.expand(volume_path).await?;
        let total = self.api.disk_size(&n).await.map_err(|e| {
            Status::internal(format!(
                "the driver panics: GetDiskStats failed ({e:?}) and its nil response is read"
            ))
        })?;
        if total < requested {
            return Err(Status::internal(format!(
                "resize requested for {requested} but after resize volume was size {total}"
            )));
        }
        Ok(requested)
    }

    /// NodeUnstageVolume (v1.26.4) with `--enable-device-in-use-check-on-node-unstage`, its
    /// default: the unstage ([`Self::unstage`]), then `confirmDeviceUnused` looks the device up
    /// again (`getDevicePath`: ListDiskIDs as at stage, the disk now offline) and, on Windows,
    /// finds it unused whatever it is (`IsDeviceFilesystemInUse` answers false). A failed
    /// look-up is logged and ignored. Returns the disk number the look-up found, `None` when it
    /// failed.
    pub async fn node_unstage(
        &mut self,
        device_name: &str,
        staging: &str,
    ) -> Result<Option<String>, Status> {
        self.unstage(staging).await?;
        Ok(self.disk_number(device_name).await.ok())
    }

    /// NodeGetVolumeStats on the path kubelet hands (the publish path, raw): the driver's own
    /// `os.Lstat`, then GetVolumeIDFromTargetPath on that path and GetVolumeStats (v1beta1:
    /// GetVolumeIDFromMount, VolumeStats). Returns (available, capacity, used) as it reports
    /// them (available = total - used).
    pub async fn stats(&mut self, volume_path: &str) -> Result<(i64, i64, i64), Status> {
        if !self.host.is_link(volume_path) && !self.host.opens(volume_path) {
            return Err(Status::not_found(format!(
                "path {volume_path} does not exist"
            )));
        }
        let id = self.api.volume_at(volume_path).await?;
        let (total, used) = self.api.volume_stats(&id).await?;
        Ok((total - used, total, used))
    }

    /// NodePublishVolume: the target kubelet made is removed (PathExists, Rmdir), then linked
    /// to the staging path, both normalised.
    pub async fn publish(&mut self, staging: &str, target: &str) -> Result<(), Status> {
        let t = self.host.norm(target);
        if self.api.fs.path_exists(&t, PathContext::Pod).await? {
            self.api.fs.rmdir(&t, PathContext::Pod).await?;
        }
        self.api.fs.link(&self.host.norm(staging), &t).await
    }

    /// NodeUnpublishVolume: Rmdir of the normalised publish path.
    pub async fn unpublish(&mut self, target: &str) -> Result<(), Status> {
        let t = self.host.norm(target);
        self.api.fs.rmdir(&t, PathContext::Pod).await
    }

    /// NodeUnstageVolume (`UnmountDevice`), on the normalised path: nothing there → done;
    /// else the volume there is unmounted, the folder removed and the disk taken offline.
    pub async fn unstage(&mut self, staging: &str) -> Result<(), Status> {
        let t = self.host.norm(staging);
        if !self.api.fs.path_exists(&t, PathContext::Plugin).await? {
            return Ok(());
        }
        let id = self.api.volume_at(&t).await?;
        self.api.unmount(&id, &t).await?;
        self.api.fs.rmdir(&t, PathContext::Plugin).await?;
        let n = self.api.disk_of_volume(&id).await?;
        self.api.set_online(&n, false).await
    }
}
