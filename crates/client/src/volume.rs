//! A volume client over the volume API versions that share the current shape (`v1`, `v1beta3`).

use crate::{ClientError, Connector};
use csi_proxy_api::volume::{v1, v1beta3};
use tonic::Status;
use tonic::transport::Channel;

/// Versions this client speaks, in fallback order.
pub const VERSIONS: &[&str] = &["v1", "v1beta3"];

/// A connected volume client of one API version.
#[derive(Debug, Clone)]
pub enum VolumeClient {
    /// `v1`.
    V1(v1::volume_client::VolumeClient<Channel>),
    /// `v1beta3` (same messages as `v1`).
    V1beta3(v1beta3::volume_client::VolumeClient<Channel>),
}

/// Runs `$body` with `$c` the inner client and `$m` the version module.
macro_rules! dispatch {
    ($self:ident, |$c:ident, $m:ident| $body:expr) => {
        match $self {
            VolumeClient::V1($c) => {
                use v1 as $m;
                $body
            }
            VolumeClient::V1beta3($c) => {
                use v1beta3 as $m;
                $body
            }
        }
    };
}

impl VolumeClient {
    /// Connects to `v1`, else `v1beta3`.
    pub async fn connect(connector: &Connector) -> Result<Self, ClientError> {
        let (version, ch) = connector.first_of("volume", VERSIONS).await?;
        Self::from_channel(version, ch)
            .ok_or_else(|| ClientError::UnknownGroup(format!("volume/{version}")))
    }

    /// Wraps a channel to `v1` or `v1beta3`.
    pub fn from_channel(version: &str, ch: Channel) -> Option<Self> {
        Some(match version {
            "v1" => Self::V1(v1::volume_client::VolumeClient::new(ch)),
            "v1beta3" => Self::V1beta3(v1beta3::volume_client::VolumeClient::new(ch)),
            _ => return None,
        })
    }

    /// The API version in use.
    pub fn version(&self) -> &'static str {
        match self {
            Self::V1(_) => "v1",
            Self::V1beta3(_) => "v1beta3",
        }
    }

    /// ListVolumesOnDisk; `partition_number` 0 means every partition.
    pub async fn list_volumes_on_disk(
        &mut self,
        disk_number: u32,
        partition_number: u32,
    ) -> Result<Vec<String>, Status> {
        dispatch!(self, |c, m| Ok(c
            .list_volumes_on_disk(m::ListVolumesOnDiskRequest {
                disk_number,
                partition_number
            })
            .await?
            .into_inner()
            .volume_ids))
    }

    /// GetVolumeStats: (total bytes, used bytes).
    pub async fn stats(&mut self, volume_id: &str) -> Result<(i64, i64), Status> {
        let volume_id = volume_id.to_string();
        dispatch!(self, |c, m| {
            let r = c
                .get_volume_stats(m::GetVolumeStatsRequest { volume_id })
                .await?
                .into_inner();
            Ok((r.total_bytes, r.used_bytes))
        })
    }

    /// IsVolumeFormatted.
    pub async fn is_formatted(&mut self, volume_id: &str) -> Result<bool, Status> {
        let volume_id = volume_id.to_string();
        dispatch!(self, |c, m| Ok(c
            .is_volume_formatted(m::IsVolumeFormattedRequest { volume_id })
            .await?
            .into_inner()
            .formatted))
    }

    /// FormatVolume.
    pub async fn format(&mut self, volume_id: &str) -> Result<(), Status> {
        let volume_id = volume_id.to_string();
        dispatch!(self, |c, m| c
            .format_volume(m::FormatVolumeRequest { volume_id })
            .await
            .map(drop))
    }

    /// MountVolume at `target_path`.
    pub async fn mount(&mut self, volume_id: &str, target_path: &str) -> Result<(), Status> {
        let (volume_id, target_path) = (volume_id.to_string(), target_path.to_string());
        dispatch!(self, |c, m| c
            .mount_volume(m::MountVolumeRequest {
                volume_id,
                target_path
            })
            .await
            .map(drop))
    }

    /// UnmountVolume from `target_path`.
    pub async fn unmount(&mut self, volume_id: &str, target_path: &str) -> Result<(), Status> {
        let (volume_id, target_path) = (volume_id.to_string(), target_path.to_string());
        dispatch!(self, |c, m| c
            .unmount_volume(m::UnmountVolumeRequest {
                volume_id,
                target_path
            })
            .await
            .map(drop))
    }

    /// ResizeVolume to `size_bytes`; 0 grows it to fill its partition's free space.
    pub async fn resize(&mut self, volume_id: &str, size_bytes: i64) -> Result<(), Status> {
        let volume_id = volume_id.to_string();
        dispatch!(self, |c, m| c
            .resize_volume(m::ResizeVolumeRequest {
                volume_id,
                size_bytes
            })
            .await
            .map(drop))
    }

    /// GetDiskNumberFromVolumeID.
    pub async fn disk_number(&mut self, volume_id: &str) -> Result<u32, Status> {
        let volume_id = volume_id.to_string();
        dispatch!(self, |c, m| Ok(c
            .get_disk_number_from_volume_id(m::GetDiskNumberFromVolumeIdRequest { volume_id })
            .await?
            .into_inner()
            .disk_number))
    }

    /// GetVolumeIDFromTargetPath.
    pub async fn volume_id_from_target_path(
        &mut self,
        target_path: &str,
    ) -> Result<String, Status> {
        let target_path = target_path.to_string();
        dispatch!(self, |c, m| Ok(c
            .get_volume_id_from_target_path(m::GetVolumeIdFromTargetPathRequest { target_path })
            .await?
            .into_inner()
            .volume_id))
    }

    /// WriteVolumeCache: flush the volume's write cache.
    pub async fn write_cache(&mut self, volume_id: &str) -> Result<(), Status> {
        let volume_id = volume_id.to_string();
        dispatch!(self, |c, m| c
            .write_volume_cache(m::WriteVolumeCacheRequest { volume_id })
            .await
            .map(drop))
    }
}
