//! The Windows iSCSI host against the real initiator API (Windows, or Wine 8 where
//! `iscsidsc.dll` may be absent: then every RPC must answer FAILED_PRECONDITION, and the checks
//! that need the initiator are skipped with that reason).
#![cfg(windows)]

use csi_proxy_core::Kind;
use csi_proxy_core::iscsi::{
    ConnectTargetRequest, IscsiHost, IscsiService, RawTargetPortal, Secret, TargetPortal,
};
use csi_proxy_host::windows::iscsi::{WindowsIscsiHost, available};
use std::sync::Arc;

fn portal(address: &str) -> TargetPortal {
    TargetPortal {
        address: address.into(),
        port: 3260,
    }
}

#[test]
fn list_target_portals_answers() {
    let host = WindowsIscsiHost::new();
    let r = host.list_target_portals();
    if !available() {
        let e = r.expect_err("no initiator, yet ListTargetPortals succeeded");
        assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
        assert!(e.message().contains("iscsidsc.dll"), "{e}");
        eprintln!("SKIPPED: the iSCSI initiator is not available here: {e}");
        return;
    }
    match r {
        Ok(portals) => {
            eprintln!("registered portals: {portals:?}");
            assert!(portals.iter().all(|p| !p.address.is_empty() && p.port != 0));
        }
        // The DLL is there but the MSiSCSI service is not running: a precise answer.
        Err(e) => {
            assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
            eprintln!("SKIPPED: the iSCSI initiator service is not usable here: {e}");
        }
    }
}

#[test]
fn every_rpc_answers_failed_precondition_without_the_initiator() {
    if available() {
        eprintln!("SKIPPED: the iSCSI initiator is available; this checks its absence");
        return;
    }
    let host = WindowsIscsiHost::new();
    let p = portal("192.0.2.1");
    let iqn = "iqn.2003-01.org.example:absent";
    let errors = [
        host.add_target_portal(&p).unwrap_err(),
        host.discover_target_portal(&p).unwrap_err(),
        host.remove_target_portal(&p).unwrap_err(),
        host.disconnect_target(&p, iqn).unwrap_err(),
        host.get_target_disks(&p, iqn).unwrap_err(),
        host.set_mutual_chap_secret(&Secret::new("mutual-secret-1"))
            .unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
        assert!(!e.message().contains("mutual-secret-1"), "{e}");
    }
}

#[test]
fn bad_input_is_rejected_before_the_initiator() {
    let svc = IscsiService::new(Arc::new(WindowsIscsiHost::new()));
    let e = svc.add_target_portal(None).unwrap_err();
    assert_eq!(e.kind(), Kind::InvalidArgument, "{e}");
    let e = svc
        .connect_target(&ConnectTargetRequest {
            target_portal: Some(RawTargetPortal {
                address: "192.0.2.1".into(),
                port: 70000,
            }),
            iqn: "iqn.2003-01.org.example:t".into(),
            auth_type: 1,
            chap_username: "user".into(),
            chap_secret: Secret::new("chap-secret-123"),
        })
        .unwrap_err();
    assert_eq!(e.kind(), Kind::InvalidArgument, "{e}");
    assert!(!e.message().contains("chap-secret-123"), "{e}");
}

#[test]
fn connect_with_a_failing_chap_login_keeps_the_secret_out_of_errors() {
    let host = WindowsIscsiHost::new();
    let chap = csi_proxy_core::iscsi::Chap {
        auth_type: csi_proxy_core::iscsi::AuthType::OneWayChap,
        username: "user".into(),
        secret: Secret::new("chap-secret-456"),
    };
    // 192.0.2.0/24 is TEST-NET-1: never a real target.
    let e = host
        .connect_target(
            &portal("192.0.2.1"),
            "iqn.2003-01.org.example:absent",
            &chap,
        )
        .unwrap_err();
    assert!(!e.message().contains("chap-secret-456"), "{e}");
    if !available() {
        assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
        eprintln!("SKIPPED (login part): the iSCSI initiator is not available here: {e}");
    }
}
