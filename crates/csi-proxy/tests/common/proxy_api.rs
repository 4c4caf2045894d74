//! The csi-proxy client calls a driver's mounter makes, one RPC per method, over the API version
//! the driver connected to: `v1` or the older sets drivers fall back to when no `v1` endpoint
//! answers (filesystem v1beta1, disk v1beta2, volume v1beta1 or v1beta2). A replay states each
//! call the driver sends; this layer only carries it in the version's own messages (v1beta1's
//! `LinkPath` and `IsMountPoint`, v1beta2's string disk IDs, `GetVolumeIDFromMount`, ...), so a
//! driver's node code is written once for every version it speaks.

use super::fs_api::FsApi;
use csi_proxy_api::disk::{v1 as d1, v1beta2 as db2};
use csi_proxy_api::volume::{v1 as vv1, v1beta1 as vb1, v1beta2 as vb2};
use csi_proxy_client::Connector;
use tonic::Status;
use tonic::transport::Channel;

#[derive(Clone)]
enum Disk {
    V1(d1::disk_client::DiskClient<Channel>),
    V1beta2(db2::disk_client::DiskClient<Channel>),
}

#[derive(Clone)]
enum Vol {
    V1(vv1::volume_client::VolumeClient<Channel>),
    V1beta1(vb1::volume_client::VolumeClient<Channel>),
    V1beta2(vb2::volume_client::VolumeClient<Channel>),
}

/// One disk's identifiers as ListDiskIDs answers them.
#[derive(Debug, Clone, Default)]
pub struct DiskIds {
    pub page83: String,
    pub serial: String,
}

/// Runs `$body` with `$c` the inner client and `$m` the message module, for the two volume
/// betas (same messages; v1beta1 has no WriteVolumeCache).
macro_rules! vol_beta {
    ($self:expr, |$c:ident, $m:ident| $body:expr, v1: |$c1:ident| $v1:expr) => {
        match &mut $self.vol {
            Vol::V1($c1) => $v1,
            Vol::V1beta1($c) => {
                use vb1 as $m;
                $body
            }
            Vol::V1beta2($c) => {
                use vb2 as $m;
                $body
            }
        }
    };
}

/// A driver's three csi-proxy clients, each on the version it connected to.
#[derive(Clone)]
pub struct ProxyApi {
    pub fs: FsApi,
    disk: Disk,
    vol: Vol,
}

/// Disk numbers travel as strings in the drivers (`strconv.Atoi` before a v1 call).
fn disk_number(op: &str, disk: &str) -> Result<u32, Status> {
    disk.parse()
        .map_err(|_| Status::internal(format!("{op}: strconv.Atoi: parsing {disk:?}")))
}

impl ProxyApi {
    /// Connects the named versions; an endpoint that does not answer is an error (the driver
    /// then tries its next set).
    pub async fn connect(c: &Connector, fs: &str, disk: &str, vol: &str) -> Result<Self, String> {
        let ch = |g: &'static str, v: String| async move {
            c.channel(g, &v).await.map_err(|e| format!("{g} {v}: {e}"))
        };
        let fs = FsApi::connect(c, fs).await?;
        let disk = match disk {
            "v1" => Disk::V1(d1::disk_client::DiskClient::new(
                ch("disk", disk.into()).await?,
            )),
            "v1beta2" => Disk::V1beta2(db2::disk_client::DiskClient::new(
                ch("disk", disk.into()).await?,
            )),
            _ => return Err(format!("disk {disk}: not replayed")),
        };
        let vol = match vol {
            "v1" => Vol::V1(vv1::volume_client::VolumeClient::new(
                ch("volume", vol.into()).await?,
            )),
            "v1beta1" => Vol::V1beta1(vb1::volume_client::VolumeClient::new(
                ch("volume", vol.into()).await?,
            )),
            "v1beta2" => Vol::V1beta2(vb2::volume_client::VolumeClient::new(
                ch("volume", vol.into()).await?,
            )),
            _ => return Err(format!("volume {vol}: not replayed")),
        };
        Ok(ProxyApi { fs, disk, vol })
    }

    /// The versions in use (filesystem, disk, volume), as the drivers log them.
    pub fn versions(&self) -> (&'static str, &'static str, &'static str) {
        (
            self.fs.version(),
            match self.disk {
                Disk::V1(_) => "v1",
                Disk::V1beta2(_) => "v1beta2",
            },
            match self.vol {
                Vol::V1(_) => "v1",
                Vol::V1beta1(_) => "v1beta1",
                Vol::V1beta2(_) => "v1beta2",
            },
        )
    }

    pub async fn rescan(&mut self) -> Result<(), Status> {
        match &mut self.disk {
            Disk::V1(c) => c.rescan(d1::RescanRequest {}).await.map(drop),
            Disk::V1beta2(c) => c.rescan(db2::RescanRequest {}).await.map(drop),
        }
    }

    /// ListDiskLocations: (disk, LUNID) in the map's order.
    pub async fn disk_luns(&mut self) -> Result<Vec<(String, String)>, Status> {
        Ok(match &mut self.disk {
            Disk::V1(c) => c
                .list_disk_locations(d1::ListDiskLocationsRequest {})
                .await?
                .into_inner()
                .disk_locations
                .into_iter()
                .map(|(n, l)| (n.to_string(), l.lunid))
                .collect(),
            Disk::V1beta2(c) => c
                .list_disk_locations(db2::ListDiskLocationsRequest {})
                .await?
                .into_inner()
                .disk_locations
                .into_iter()
                .map(|(n, l)| (n, l.lunid))
                .collect(),
        })
    }

    /// ListDiskIDs in the map's order (v1beta2: the `page83` and `serialNumber` identifiers).
    pub async fn disk_ids(&mut self) -> Result<Vec<(String, DiskIds)>, Status> {
        Ok(match &mut self.disk {
            Disk::V1(c) => c
                .list_disk_i_ds(d1::ListDiskIDsRequest {})
                .await?
                .into_inner()
                .disk_i_ds
                .into_iter()
                .map(|(n, d)| {
                    let ids = DiskIds {
                        page83: d.page83,
                        serial: d.serial_number,
                    };
                    (n.to_string(), ids)
                })
                .collect(),
            Disk::V1beta2(c) => c
                .list_disk_i_ds(db2::ListDiskIDsRequest {})
                .await?
                .into_inner()
                .disk_i_ds
                .into_iter()
                .map(|(n, mut d)| {
                    let mut take = |k: &str| d.identifiers.remove(k).unwrap_or_default();
                    let ids = DiskIds {
                        page83: take("page83"),
                        serial: take("serialNumber"),
                    };
                    (n, ids)
                })
                .collect(),
        })
    }

    /// The disk whose serial number is `serial` (the lookup a node without the driver's own
    /// keys uses, see `NodeHost::disk_serial`).
    pub async fn disk_with_serial(&mut self, serial: &str) -> Result<String, Status> {
        let ids = self.disk_ids().await?;
        ids.into_iter()
            .find(|(_, d)| d.serial == serial)
            .map(|(n, _)| n)
            .ok_or_else(|| Status::internal(format!("no disk with serial {serial}")))
    }

    pub async fn partition_disk(&mut self, disk: &str) -> Result<(), Status> {
        match &mut self.disk {
            Disk::V1(c) => {
                let disk_number = disk_number("PartitionDisk", disk)?;
                let r = d1::PartitionDiskRequest { disk_number };
                c.partition_disk(r).await.map(drop)
            }
            Disk::V1beta2(c) => {
                let r = db2::PartitionDiskRequest {
                    disk_id: disk.into(),
                };
                c.partition_disk(r).await.map(drop)
            }
        }
    }

    /// v1 SetDiskState; v1beta2 SetAttachState.
    pub async fn set_online(&mut self, disk: &str, is_online: bool) -> Result<(), Status> {
        match &mut self.disk {
            Disk::V1(c) => {
                let disk_number = disk_number("SetDiskState", disk)?;
                let r = d1::SetDiskStateRequest {
                    disk_number,
                    is_online,
                };
                c.set_disk_state(r).await.map(drop)
            }
            Disk::V1beta2(c) => {
                let r = db2::SetAttachStateRequest {
                    disk_id: disk.into(),
                    is_online,
                };
                c.set_attach_state(r).await.map(drop)
            }
        }
    }

    /// v1 GetDiskStats; v1beta2 DiskStats: the disk's size.
    pub async fn disk_size(&mut self, disk: &str) -> Result<i64, Status> {
        Ok(match &mut self.disk {
            Disk::V1(c) => {
                let disk_number = disk_number("GetDiskStats", disk)?;
                let r = d1::GetDiskStatsRequest { disk_number };
                c.get_disk_stats(r).await?.into_inner().total_bytes
            }
            Disk::V1beta2(c) => {
                let r = db2::DiskStatsRequest {
                    disk_id: disk.into(),
                };
                c.disk_stats(r).await?.into_inner().disk_size
            }
        })
    }

    /// ListVolumesOnDisk (v1: every partition, the drivers leave `partition_number` 0).
    pub async fn volumes_on_disk(&mut self, disk: &str) -> Result<Vec<String>, Status> {
        vol_beta!(self, |c, m| Ok(c
            .list_volumes_on_disk(m::ListVolumesOnDiskRequest {
                disk_id: disk.into()
            })
            .await?
            .into_inner()
            .volume_ids), v1: |c| {
            let disk_number = disk_number("ListVolumesOnDisk", disk)?;
            let r = vv1::ListVolumesOnDiskRequest { disk_number, partition_number: 0 };
            Ok(c.list_volumes_on_disk(r).await?.into_inner().volume_ids)
        })
    }

    pub async fn is_formatted(&mut self, id: &str) -> Result<bool, Status> {
        let volume_id = id.to_string();
        vol_beta!(self, |c, m| Ok(c
            .is_volume_formatted(m::IsVolumeFormattedRequest { volume_id })
            .await?
            .into_inner()
            .formatted), v1: |c| {
            let r = vv1::IsVolumeFormattedRequest { volume_id };
            Ok(c.is_volume_formatted(r).await?.into_inner().formatted)
        })
    }

    pub async fn format(&mut self, id: &str) -> Result<(), Status> {
        let volume_id = id.to_string();
        vol_beta!(self, |c, m| c
            .format_volume(m::FormatVolumeRequest { volume_id })
            .await
            .map(drop), v1: |c| c
            .format_volume(vv1::FormatVolumeRequest { volume_id })
            .await
            .map(drop))
    }

    pub async fn mount(&mut self, id: &str, path: &str) -> Result<(), Status> {
        let (volume_id, path) = (id.to_string(), path.to_string());
        vol_beta!(self, |c, m| c
            .mount_volume(m::MountVolumeRequest { volume_id, path })
            .await
            .map(drop), v1: |c| c
            .mount_volume(vv1::MountVolumeRequest { volume_id, target_path: path })
            .await
            .map(drop))
    }

    /// v1 UnmountVolume; the betas' DismountVolume.
    pub async fn unmount(&mut self, id: &str, path: &str) -> Result<(), Status> {
        let (volume_id, path) = (id.to_string(), path.to_string());
        vol_beta!(self, |c, m| c
            .dismount_volume(m::DismountVolumeRequest { volume_id, path })
            .await
            .map(drop), v1: |c| c
            .unmount_volume(vv1::UnmountVolumeRequest { volume_id, target_path: path })
            .await
            .map(drop))
    }

    /// v1 GetVolumeIDFromTargetPath; the betas' GetVolumeIDFromMount.
    pub async fn volume_at(&mut self, path: &str) -> Result<String, Status> {
        let path = path.to_string();
        vol_beta!(self, |c, m| Ok(c
            .get_volume_id_from_mount(m::VolumeIdFromMountRequest { mount: path })
            .await?
            .into_inner()
            .volume_id), v1: |c| {
            let r = vv1::GetVolumeIdFromTargetPathRequest { target_path: path };
            Ok(c.get_volume_id_from_target_path(r).await?.into_inner().volume_id)
        })
    }

    /// v1 GetDiskNumberFromVolumeID; the betas' GetVolumeDiskNumber.
    pub async fn disk_of_volume(&mut self, id: &str) -> Result<String, Status> {
        let volume_id = id.to_string();
        vol_beta!(self, |c, m| Ok(c
            .get_volume_disk_number(m::VolumeDiskNumberRequest { volume_id })
            .await?
            .into_inner()
            .disk_number
            .to_string()), v1: |c| {
            let r = vv1::GetDiskNumberFromVolumeIdRequest { volume_id };
            Ok(c.get_disk_number_from_volume_id(r).await?.into_inner().disk_number.to_string())
        })
    }

    /// ResizeVolume to `size` (0: the maximum).
    pub async fn resize(&mut self, id: &str, size: i64) -> Result<(), Status> {
        let volume_id = id.to_string();
        vol_beta!(self, |c, m| c
            .resize_volume(m::ResizeVolumeRequest { volume_id, size })
            .await
            .map(drop), v1: |c| c
            .resize_volume(vv1::ResizeVolumeRequest { volume_id, size_bytes: size })
            .await
            .map(drop))
    }

    /// v1 GetVolumeStats; the betas' VolumeStats: (total, used).
    pub async fn volume_stats(&mut self, id: &str) -> Result<(i64, i64), Status> {
        let volume_id = id.to_string();
        vol_beta!(self, |c, m| {
            let r = c
                .volume_stats(m::VolumeStatsRequest { volume_id })
                .await?
                .into_inner();
            Ok((r.volume_size, r.volume_used_size))
        }, v1: |c| {
            let r = c
                .get_volume_stats(vv1::GetVolumeStatsRequest { volume_id })
                .await?
                .into_inner();
            Ok((r.total_bytes, r.used_bytes))
        })
    }

    /// WriteVolumeCache (v1beta1 has none: the client library answers Unimplemented).
    pub async fn write_cache(&mut self, id: &str) -> Result<(), Status> {
        let volume_id = id.to_string();
        match &mut self.vol {
            Vol::V1(c) => {
                let r = vv1::WriteVolumeCacheRequest { volume_id };
                c.write_volume_cache(r).await.map(drop)
            }
            Vol::V1beta1(_) => Err(Status::unimplemented(
                "volume v1beta1 has no WriteVolumeCache",
            )),
            Vol::V1beta2(c) => {
                let r = vb2::WriteVolumeCacheRequest { volume_id };
                c.write_volume_cache(r).await.map(drop)
            }
        }
    }
}
