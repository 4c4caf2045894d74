//! A disk client over the disk API versions that share the current shape (`v1`, `v1beta3`).

use crate::{ClientError, Connector};
use csi_proxy_api::disk::{v1, v1beta3};
use std::collections::BTreeMap;
use tonic::Status;
use tonic::transport::Channel;

/// Versions this client speaks, in fallback order.
pub const VERSIONS: &[&str] = &["v1", "v1beta3"];

/// A connected disk client of one API version.
#[derive(Debug, Clone)]
pub enum DiskClient {
    /// `v1`.
    V1(v1::disk_client::DiskClient<Channel>),
    /// `v1beta3` (same messages as `v1`).
    V1beta3(v1beta3::disk_client::DiskClient<Channel>),
}

/// Identifiers of one disk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiskIds {
    /// SCSI VPD page 0x83 identifier.
    pub page83: String,
    /// Serial number.
    pub serial_number: String,
}

/// SCSI location of one disk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiskLocation {
    /// Adapter (host).
    pub adapter: String,
    /// Bus (channel).
    pub bus: String,
    /// Target.
    pub target: String,
    /// LUN.
    pub lun: String,
}

/// Runs `$body` with `$c` the inner client and `$m` the version module.
macro_rules! dispatch {
    ($self:ident, |$c:ident, $m:ident| $body:expr) => {
        match $self {
            DiskClient::V1($c) => {
                use v1 as $m;
                $body
            }
            DiskClient::V1beta3($c) => {
                use v1beta3 as $m;
                $body
            }
        }
    };
}

impl DiskClient {
    /// Connects to `v1`, else `v1beta3`.
    pub async fn connect(connector: &Connector) -> Result<Self, ClientError> {
        let (version, ch) = connector.first_of("disk", VERSIONS).await?;
        Self::from_channel(version, ch)
            .ok_or_else(|| ClientError::UnknownGroup(format!("disk/{version}")))
    }

    /// Wraps a channel to `v1` or `v1beta3`.
    pub fn from_channel(version: &str, ch: Channel) -> Option<Self> {
        Some(match version {
            "v1" => Self::V1(v1::disk_client::DiskClient::new(ch)),
            "v1beta3" => Self::V1beta3(v1beta3::disk_client::DiskClient::new(ch)),
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

    /// ListDiskIDs: identifiers by disk number.
    pub async fn list_disk_ids(&mut self) -> Result<BTreeMap<u32, DiskIds>, Status> {
        dispatch!(self, |c, m| {
            let r = c
                .list_disk_i_ds(m::ListDiskIDsRequest {})
                .await?
                .into_inner();
            Ok(r.disk_i_ds
                .into_iter()
                .map(|(n, id)| {
                    (
                        n,
                        DiskIds {
                            page83: id.page83,
                            serial_number: id.serial_number,
                        },
                    )
                })
                .collect())
        })
    }

    /// ListDiskLocations: SCSI locations by disk number.
    pub async fn list_disk_locations(&mut self) -> Result<BTreeMap<u32, DiskLocation>, Status> {
        dispatch!(self, |c, m| {
            let r = c
                .list_disk_locations(m::ListDiskLocationsRequest {})
                .await?
                .into_inner();
            Ok(r.disk_locations
                .into_iter()
                .map(|(n, l)| {
                    (
                        n,
                        DiskLocation {
                            adapter: l.adapter,
                            bus: l.bus,
                            target: l.target,
                            lun: l.lunid,
                        },
                    )
                })
                .collect())
        })
    }

    /// GetDiskStats: the disk's size in bytes.
    pub async fn disk_size(&mut self, disk_number: u32) -> Result<i64, Status> {
        dispatch!(self, |c, m| Ok(c
            .get_disk_stats(m::GetDiskStatsRequest { disk_number })
            .await?
            .into_inner()
            .total_bytes))
    }

    /// GetDiskState: whether the disk is online.
    pub async fn is_online(&mut self, disk_number: u32) -> Result<bool, Status> {
        dispatch!(self, |c, m| Ok(c
            .get_disk_state(m::GetDiskStateRequest { disk_number })
            .await?
            .into_inner()
            .is_online))
    }

    /// SetDiskState.
    pub async fn set_online(&mut self, disk_number: u32, is_online: bool) -> Result<(), Status> {
        dispatch!(self, |c, m| c
            .set_disk_state(m::SetDiskStateRequest {
                disk_number,
                is_online
            })
            .await
            .map(drop))
    }

    /// PartitionDisk: GPT with one partition filling the disk (idempotent).
    pub async fn partition_disk(&mut self, disk_number: u32) -> Result<(), Status> {
        dispatch!(self, |c, m| c
            .partition_disk(m::PartitionDiskRequest { disk_number })
            .await
            .map(drop))
    }

    /// Rescan.
    pub async fn rescan(&mut self) -> Result<(), Status> {
        dispatch!(self, |c, m| c.rescan(m::RescanRequest {}).await.map(drop))
    }
}
