//! An iSCSI client for the read-only calls an operator needs, and the login and logout the
//! selftest makes to a target the operator names (`v1alpha2`, else `v1alpha1`).

use crate::{ClientError, Connector};
use csi_proxy_api::iscsi::{v1alpha1, v1alpha2};
use tonic::Status;
use tonic::transport::Channel;

/// Versions this client speaks, in fallback order.
pub const VERSIONS: &[&str] = &["v1alpha2", "v1alpha1"];

/// A connected iSCSI client of one API version.
#[derive(Debug, Clone)]
pub enum IscsiClient {
    /// `v1alpha2`.
    V1alpha2(v1alpha2::iscsi_client::IscsiClient<Channel>),
    /// `v1alpha1`.
    V1alpha1(v1alpha1::iscsi_client::IscsiClient<Channel>),
}

/// One iSCSI target portal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Portal {
    /// Address (IP or host name).
    pub address: String,
    /// TCP port.
    pub port: u32,
}

/// Runs `$body` with `$c` the inner client and `$m` the version module.
macro_rules! dispatch {
    ($self:ident, |$c:ident, $m:ident| $body:expr) => {
        match $self {
            IscsiClient::V1alpha2($c) => {
                use v1alpha2 as $m;
                $body
            }
            IscsiClient::V1alpha1($c) => {
                use v1alpha1 as $m;
                $body
            }
        }
    };
}

impl IscsiClient {
    /// Connects to `v1alpha2`, else `v1alpha1`.
    pub async fn connect(connector: &Connector) -> Result<Self, ClientError> {
        let (version, ch) = connector.first_of("iscsi", VERSIONS).await?;
        Ok(match version {
            "v1alpha2" => Self::V1alpha2(v1alpha2::iscsi_client::IscsiClient::new(ch)),
            _ => Self::V1alpha1(v1alpha1::iscsi_client::IscsiClient::new(ch)),
        })
    }

    /// The API version in use.
    pub fn version(&self) -> &'static str {
        match self {
            Self::V1alpha2(_) => "v1alpha2",
            Self::V1alpha1(_) => "v1alpha1",
        }
    }

    /// ListTargetPortals.
    pub async fn list_target_portals(&mut self) -> Result<Vec<Portal>, Status> {
        dispatch!(self, |c, m| Ok(c
            .list_target_portals(m::ListTargetPortalsRequest {})
            .await?
            .into_inner()
            .target_portals
            .into_iter()
            .map(|p| Portal {
                address: p.target_address,
                port: p.target_port
            })
            .collect()))
    }

    /// DiscoverTargetPortal: the target IQNs a portal offers.
    pub async fn discover_targets(&mut self, portal: &Portal) -> Result<Vec<String>, Status> {
        let p = portal.clone();
        dispatch!(self, |c, m| Ok(c
            .discover_target_portal(m::DiscoverTargetPortalRequest {
                target_portal: Some(m::TargetPortal {
                    target_address: p.address,
                    target_port: p.port
                })
            })
            .await?
            .into_inner()
            .iqns))
    }

    /// GetTargetDisks: disk IDs of a connected target (empty when no session is logged in).
    pub async fn target_disks(
        &mut self,
        portal: &Portal,
        iqn: &str,
    ) -> Result<Vec<String>, Status> {
        let (p, iqn) = (portal.clone(), iqn.to_string());
        dispatch!(self, |c, m| Ok(c
            .get_target_disks(m::GetTargetDisksRequest {
                target_portal: Some(m::TargetPortal {
                    target_address: p.address,
                    target_port: p.port
                }),
                iqn
            })
            .await?
            .into_inner()
            .disk_i_ds))
    }

    /// AddTargetPortal.
    pub async fn add_target_portal(&mut self, portal: &Portal) -> Result<(), Status> {
        let p = portal.clone();
        dispatch!(self, |c, m| c
            .add_target_portal(m::AddTargetPortalRequest {
                target_portal: Some(m::TargetPortal {
                    target_address: p.address,
                    target_port: p.port
                })
            })
            .await
            .map(drop))
    }

    /// RemoveTargetPortal.
    pub async fn remove_target_portal(&mut self, portal: &Portal) -> Result<(), Status> {
        let p = portal.clone();
        dispatch!(self, |c, m| c
            .remove_target_portal(m::RemoveTargetPortalRequest {
                target_portal: Some(m::TargetPortal {
                    target_address: p.address,
                    target_port: p.port
                })
            })
            .await
            .map(drop))
    }

    /// ConnectTarget without CHAP (a target that admits the node as it is).
    pub async fn connect_target(&mut self, portal: &Portal, iqn: &str) -> Result<(), Status> {
        let (p, iqn) = (portal.clone(), iqn.to_string());
        dispatch!(self, |c, m| c
            .connect_target(m::ConnectTargetRequest {
                target_portal: Some(m::TargetPortal {
                    target_address: p.address,
                    target_port: p.port
                }),
                iqn,
                auth_type: m::AuthenticationType::None as i32,
                chap_username: String::new(),
                chap_secret: String::new(),
            })
            .await
            .map(drop))
    }

    /// DisconnectTarget.
    pub async fn disconnect_target(&mut self, portal: &Portal, iqn: &str) -> Result<(), Status> {
        let (p, iqn) = (portal.clone(), iqn.to_string());
        dispatch!(self, |c, m| c
            .disconnect_target(m::DisconnectTargetRequest {
                target_portal: Some(m::TargetPortal {
                    target_address: p.address,
                    target_port: p.port
                }),
                iqn
            })
            .await
            .map(drop))
    }
}
