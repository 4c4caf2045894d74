//! iSCSI adapters: one thin struct per API version over [`IscsiService`].
//!
//! v1alpha1 is v1alpha2 without SetMutualChapSecret, with the same field numbers, so both share
//! `iscsi_rpcs!`. A missing `target_portal` is passed on as `None` and refused by the service
//! (upstream crashed on it).

use crate::{adapter, unary};
use csi_proxy_api::iscsi::{v1alpha1, v1alpha2};
use csi_proxy_core::iscsi::{ConnectTargetRequest, IscsiService, RawTargetPortal};

/// The request's optional wire `TargetPortal` as the core's unvalidated portal.
macro_rules! raw_portal {
    ($portal:expr) => {
        $portal.map(|p| RawTargetPortal {
            address: p.target_address,
            port: p.target_port,
        })
    };
}

/// The object an iSCSI call is capped on ([`crate::admission`]): its portal, the port defaulted.
macro_rules! portal_object {
    ($r:expr) => {
        $r.target_portal.as_ref().map(|p| {
            let port = if p.target_port == 0 {
                u32::from(csi_proxy_core::iscsi::DEFAULT_PORT)
            } else {
                p.target_port
            };
            format!("portal {}:{port}", p.target_address.to_lowercase())
        })
    };
}

/// The RPCs of every iSCSI version.
macro_rules! iscsi_rpcs {
    ($v:ident) => {
        unary!(iscsi, $v, add_target_portal, "AddTargetPortal", AddTargetPortalRequest => AddTargetPortalResponse,
            on |r| portal_object!(r),
            |svc, r| svc.add_target_portal(raw_portal!(r.target_portal).as_ref())
                .map(|()| $v::AddTargetPortalResponse {}));
        unary!(iscsi, $v, discover_target_portal, "DiscoverTargetPortal", DiscoverTargetPortalRequest => DiscoverTargetPortalResponse,
            on |r| portal_object!(r),
            |svc, r| Ok($v::DiscoverTargetPortalResponse {
                iqns: svc.discover_target_portal(raw_portal!(r.target_portal).as_ref())?,
            }));
        unary!(iscsi, $v, remove_target_portal, "RemoveTargetPortal", RemoveTargetPortalRequest => RemoveTargetPortalResponse,
            on |r| portal_object!(r),
            |svc, r| svc.remove_target_portal(raw_portal!(r.target_portal).as_ref())
                .map(|()| $v::RemoveTargetPortalResponse {}));
        unary!(iscsi, $v, list_target_portals, "ListTargetPortals", ListTargetPortalsRequest => ListTargetPortalsResponse,
            |svc, r| Ok($v::ListTargetPortalsResponse {
                target_portals: svc.list_target_portals()?.into_iter()
                    .map(|p| $v::TargetPortal { target_address: p.address, target_port: p.port.into() })
                    .collect(),
            }));
        unary!(iscsi, $v, connect_target, "ConnectTarget", ConnectTargetRequest => ConnectTargetResponse,
            on |r| portal_object!(r),
            |svc, r| svc.connect_target(&ConnectTargetRequest {
                target_portal: raw_portal!(r.target_portal),
                iqn: r.iqn,
                auth_type: r.auth_type,
                chap_username: r.chap_username,
                chap_secret: r.chap_secret.into(),
            }).map(|()| $v::ConnectTargetResponse {}));
        unary!(iscsi, $v, disconnect_target, "DisconnectTarget", DisconnectTargetRequest => DisconnectTargetResponse,
            on |r| portal_object!(r),
            |svc, r| svc.disconnect_target(raw_portal!(r.target_portal).as_ref(), &r.iqn)
                .map(|()| $v::DisconnectTargetResponse {}));
        unary!(iscsi, $v, get_target_disks, "GetTargetDisks", GetTargetDisksRequest => GetTargetDisksResponse,
            |svc, r| Ok($v::GetTargetDisksResponse {
                // Upstream sends disk numbers as decimal strings.
                disk_i_ds: svc.get_target_disks(raw_portal!(r.target_portal).as_ref(), &r.iqn)?
                    .iter().map(u32::to_string).collect(),
            }));
    };
}

adapter!(
    /// `v1alpha1.Iscsi`.
    IscsiV1alpha1, IscsiService, iscsi::v1alpha1::iscsi_server::IscsiServer
);
impl v1alpha1::iscsi_server::Iscsi for IscsiV1alpha1 {
    iscsi_rpcs!(v1alpha1);
}

adapter!(
    /// `v1alpha2.Iscsi`: v1alpha1 plus SetMutualChapSecret.
    IscsiV1alpha2, IscsiService, iscsi::v1alpha2::iscsi_server::IscsiServer
);
impl v1alpha2::iscsi_server::Iscsi for IscsiV1alpha2 {
    iscsi_rpcs!(v1alpha2);
    unary!(iscsi, v1alpha2, set_mutual_chap_secret, "SetMutualChapSecret", SetMutualChapSecretRequest => SetMutualChapSecretResponse,
        |svc, r| svc.set_mutual_chap_secret(&r.mutual_chap_secret.into())
            .map(|()| v1alpha2::SetMutualChapSecretResponse {}));
}
