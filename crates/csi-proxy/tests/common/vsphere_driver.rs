//! vSphere's Windows node code (v2.4–v3.4, the releases that use the pipes), replayed: the
//! csi-proxy v1 calls of its `csiProxyMounter` (`pkg/csi/service/mounter/mounter_windows.go`)
//! and system v1alpha1's GetBIOSSerialNumber, driven by its node service
//! (`pkg/csi/service/node.go`, `pkg/csi/service/osutils/windows_os_utils.go`), in their order
//! and with their path forms: normalised (`c:\…`) everywhere except GetVolumeIDFromTargetPath
//! for stats, which gets the path raw. The disk is the one whose page 83 ID equals the
//! `diskUUID` of the publish context; the staging directory must exist (kubelet makes it).
//! The releases differ only in how NodeStage decides the staging path is already mounted
//! ([`VsphereRelease`]). Read from kubernetes-sigs/vsphere-csi-driver at v2.4.0, v3.0.0 and
//! v3.4.0; its code is not copied.

use super::fs_api::PathContext;
use super::proxy_api::ProxyApi;
use super::{NodeHost, parent_dir};
use csi_proxy_api::system::v1alpha1 as sys;
use csi_proxy_client::Connector;
use std::sync::Arc;
use tonic::Status;
use tonic::transport::Channel;

const MIB: i64 = 1 << 20;

/// What a Go nil-pointer dereference does to the driver: the node plugin dies mid-call.
fn nil_dereference(what: &str) -> Status {
    Status::internal(format!(
        "panic: runtime error: invalid memory address or nil pointer dereference ({what})"
    ))
}

/// `ConvertUUID`: `VMware-42 29 92 4b 83 35 d9 77-f3 82 cf 46 56 61 ac 60` →
/// `4229924b-8335-d977-f382-cf465661ac60`; anything else is an error.
pub fn vsphere_convert_uuid(serial: &str) -> Result<String, String> {
    let s = serial.trim();
    let Some(rest) = s.strip_prefix("VMware-") else {
        return Err(format!(
            "failed to match Prefix, UUID read from the file is {s}"
        ));
    };
    let u: String = rest.chars().filter(|c| *c != ' ' && *c != '-').collect();
    // Go's len counts bytes and its slices cut bytes: only ASCII is cut safely here.
    if u.len() != 32 || !u.is_ascii() {
        return Err(format!(
            "length check failed, UUID read from the file is {u}"
        ));
    }
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &u[0..8],
        &u[8..12],
        &u[12..16],
        &u[16..20],
        &u[20..32]
    ))
}

/// Which releases' staging check is replayed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum VsphereRelease {
    /// v2.4–v2.7: PathExists and IsSymlink through csi-proxy; nothing is read.
    V2_4,
    /// v3.0–v3.2: the same check, then `os.ReadDir`: a link it cannot read is unmounted.
    V3_0,
    /// v3.3–v3.4: `os.Lstat` in the container (a mounted folder is a symlink to Go 1.22),
    /// then `os.ReadDir`.
    V3_3,
}

/// A vSphere node plugin (v2.4–v3.4) on the daemon's v1 endpoints and system v1alpha1.
pub struct VsphereDriver {
    pub api: ProxyApi,
    /// The release replayed (v3.3–v3.4 unless set).
    pub release: VsphereRelease,
    /// How many times NodeStage took the FormatAndMount branch (the branch taken, for tests).
    pub format_and_mounts: u32,
    sys: sys::system_client::SystemClient<Channel>,
    host: Arc<dyn NodeHost>,
}

impl VsphereDriver {
    /// `newCSIProxyMounter`: every client must connect, or the plugin does not start.
    pub async fn new(c: &Connector, host: Arc<dyn NodeHost>) -> Result<VsphereDriver, String> {
        let api = ProxyApi::connect(c, "v1", "v1", "v1").await?;
        let ch = c
            .channel("system", "v1alpha1")
            .await
            .map_err(|e| format!("system v1alpha1: {e}"))?;
        Ok(VsphereDriver {
            api,
            release: VsphereRelease::V3_3,
            format_and_mounts: 0,
            sys: sys::system_client::SystemClient::new(ch),
            host,
        })
    }

    /// NodeGetInfo on a vanilla cluster: the node ID is the VM UUID made from the BIOS serial.
    pub async fn node_id(&mut self) -> Result<String, Status> {
        let serial = self
            .sys
            .get_bios_serial_number(sys::GetBiosSerialNumberRequest {})
            .await?
            .into_inner()
            .serial_number;
        vsphere_convert_uuid(&serial).map_err(|e| {
            Status::internal(format!(
                "failed to get system uuid for node VM with error: {e}"
            ))
        })
    }

    /// `GetDiskNumber`: the disk whose page 83 ID equals the disk UUID exactly; disks with no
    /// page 83 ID are skipped.
    pub async fn disk_number(&mut self, disk_uuid: &str) -> Result<String, Status> {
        if let Some(serial) = self.host.disk_serial(disk_uuid) {
            return self.api.disk_with_serial(&serial).await;
        }
        let ids = self.api.disk_ids().await?;
        ids.into_iter()
            .find(|(_, d)| !d.page83.is_empty() && d.page83 == disk_uuid)
            .map(|(n, _)| n)
            .ok_or_else(|| Status::internal("no matching disks found"))
    }

    /// `VerifyTargetDir`: PathExists; a missing path is an error when it should exist.
    async fn target_exists(&mut self, path: &str, must: bool) -> Result<bool, Status> {
        let exists = self
            .api
            .fs
            .path_exists(&self.host.norm(path), PathContext::Plugin)
            .await?;
        if !exists && must {
            return Err(Status::failed_precondition(format!(
                "target: {path} not pre-created"
            )));
        }
        Ok(exists)
    }

    /// `csiProxyMounter.Unmount`: nothing there → done; else the volume there unmounted, the
    /// directory removed, the disk taken offline.
    async fn unmount(&mut self, target: &str) -> Result<(), Status> {
        let t = self.host.norm(target);
        if !self.api.fs.path_exists(&t, PathContext::Plugin).await? {
            return Ok(());
        }
        let id = self.api.volume_at(&t).await?;
        self.api.unmount(&id, &t).await?;
        self.api.fs.rmdir(&t, PathContext::Plugin).await?;
        let disk = self.api.disk_of_volume(&id).await?;
        self.api.set_online(&disk, false).await
    }

    /// `IsLikelyNotMountPoint` negated: v3.3+ asks `os.Lstat`; earlier releases ask PathExists
    /// (missing: not mounted) and IsSymlink through csi-proxy, whose error fails the stage.
    async fn looks_mounted(&mut self, target: &str) -> Result<bool, Status> {
        if self.release == VsphereRelease::V3_3 {
            return Ok(self.host.is_link(target));
        }
        let t = self.host.norm(target);
        if !self.api.fs.path_exists(&t, PathContext::Plugin).await? {
            return Ok(false);
        }
        self.api.fs.is_link(&t).await.map_err(|e| {
            Status::internal(format!(
                "Could not determine if staging path is already mounted, err: {}",
                e.message()
            ))
        })
    }

    /// NodeStage's check: not a mount point → not mounted; v2.4–v2.7 stop there. From v3.0
    /// (`haveMountPoint`) a link the container cannot read through is unmounted (an error of
    /// that fails the stage) → not mounted.
    async fn have_mount_point(&mut self, target: &str) -> Result<bool, Status> {
        if !self.looks_mounted(target).await? {
            return Ok(false);
        }
        if self.release == VsphereRelease::V2_4 || self.host.opens(target) {
            return Ok(true);
        }
        self.unmount(target).await?;
        Ok(false)
    }

    /// `FormatAndMount`: PartitionDisk, SetDiskState(online), the first volume with no length
    /// check (a Go panic on an empty list), a format only when not formatted, MountVolume.
    async fn format_and_mount(&mut self, disk: &str, target: &str) -> Result<(), Status> {
        self.format_and_mounts += 1;
        self.api.partition_disk(disk).await?;
        self.api.set_online(disk, true).await?;
        let ids = self.api.volumes_on_disk(disk).await?;
        let Some(id) = ids.first().cloned() else {
            return Err(Status::internal(
                "panic: runtime error: index out of range [0] with length 0 (VolumeIds[0])",
            ));
        };
        if !self.api.is_formatted(&id).await? {
            self.api.format(&id).await?;
        }
        self.api.mount(&id, &self.host.norm(target)).await
    }

    /// NodeStageVolume: the staging directory must exist, the disk by page 83, then
    /// FormatAndMount unless `haveMountPoint` finds it mounted.
    pub async fn stage(&mut self, disk_uuid: &str, staging: &str) -> Result<(), Status> {
        self.target_exists(staging, true).await?;
        let disk = self.disk_number(disk_uuid).await.map_err(|e| {
            Status::internal(format!("failed to get Disk Number, err: {}", e.message()))
        })?;
        if self.have_mount_point(staging).await? {
            return Ok(());
        }
        self.format_and_mount(&disk, staging)
            .await
            .map_err(|e| Status::internal(format!("error mounting volume. err: {}", e.message())))
    }

    /// NodePublishVolume: `PreparePublishPath` (PathExists, Rmdir, Mkdir of the parent),
    /// then the link from the staging path.
    pub async fn publish(&mut self, staging: &str, target: &str) -> Result<(), Status> {
        let t = self.host.norm(target);
        if self.api.fs.path_exists(&t, PathContext::Pod).await? {
            self.api.fs.rmdir(&t, PathContext::Pod).await?;
        }
        let parent = self.host.norm(parent_dir(target));
        self.api.fs.mkdir(&parent, PathContext::Pod).await?;
        self.api.fs.link(&self.host.norm(staging), &t).await
    }

    /// NodeUnpublishVolume: Rmdir of the publish path.
    pub async fn unpublish(&mut self, target: &str) -> Result<(), Status> {
        let t = self.host.norm(target);
        self.api.fs.rmdir(&t, PathContext::Pod).await
    }

    /// NodeUnstageVolume: nothing at the staging path → done; else `Unmount`.
    pub async fn unstage(&mut self, staging: &str) -> Result<(), Status> {
        if !self.target_exists(staging, false).await? {
            return Ok(());
        }
        self.unmount(staging).await.map_err(|e| {
            Status::internal(format!(
                "NodeUnstageVolume failed: error unmounting stagingTarget: {}",
                e.message()
            ))
        })
    }

    /// NodeGetVolumeStats: GetVolumeIDFromTargetPath on the raw path, GetVolumeStats:
    /// (capacity, used, available = capacity - used).
    pub async fn stats(&mut self, volume_path: &str) -> Result<(i64, i64, i64), Status> {
        let id = self.api.volume_at(volume_path).await?;
        let (total, used) = self.api.volume_stats(&id).await?;
        Ok((total, used, total - used))
    }

    /// NodeExpandVolume (OnlineVolumeExtend on): the volume at the normalised path, a Rescan
    /// when the volume is smaller than asked, the disk's size (GetDiskNumberFromVolumeID,
    /// GetDiskStats, whose response is read even when the call failed: a nil dereference),
    /// and only when the request exceeds the disk by 1 MiB or more: SetDiskState(online) and
    /// ResizeVolume(id, 0). Answers the request rounded up to MiB.
    pub async fn expand(&mut self, volume_path: &str, required: i64) -> Result<i64, Status> {
        let id = self
            .api
            .volume_at(&self.host.norm(volume_path))
            .await
            .map_err(|e| {
                Status::internal(format!(
                    "error getting block device for volume, err: {}",
                    e.message()
                ))
            })?;
        let volume_size = self.api.volume_stats(&id).await?.0;
        if volume_size < required {
            self.api.rescan().await?;
        }
        let disk = self.api.disk_of_volume(&id).await?;
        let disk_size = self
            .api
            .disk_size(&disk)
            .await
            .map_err(|_| nil_dereference("DiskStatsResponse.TotalBytes"))?;
        if required - disk_size >= MIB {
            let disk = self.api.disk_of_volume(&id).await?;
            self.api.set_online(&disk, true).await?;
            self.api.resize(&id, 0).await.map_err(|e| {
                Status::internal(format!(
                    "error when resizing filesystem on volume {id}: {}",
                    e.message()
                ))
            })?;
        }
        Ok((required + MIB - 1) / MIB * MIB)
    }
}
