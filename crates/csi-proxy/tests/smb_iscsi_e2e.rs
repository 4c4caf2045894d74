//! End-to-end through the real daemon on Unix sockets, with the generated clients a driver uses:
//! the iSCSI group against a real target (`tgtd` on 127.0.0.1), and secrets kept out of the
//! daemon's log and every error message over a failing SMB mapping and a failing CHAP login.
#![cfg(target_os = "linux")]

mod common;
#[path = "../../host/tests/iscsi_support/tgt.rs"]
mod tgt;

use common::Daemon;
use csi_proxy_api::iscsi::{v1alpha1 as iscsi1, v1alpha2 as iscsi2};
use csi_proxy_api::smb::v1 as smb1;
use std::path::Path;
use std::time::Duration;
use tonic::Code;

const SMB_PASSWORD: &str = "E2e-Smb-Pa55,word";
const CHAP_SECRET: &str = "E2e-Chap-S3cret-1";
const MUTUAL_SECRET: &str = "E2e-Mutual-S3cret-2";
const IQN: &str = "iqn.2026-01.test:e2e";

/// Debug logging at the highest level: whatever the daemon can log about a request, the secret
/// checks read.
fn start() -> Daemon {
    Daemon::start_env(&["-v=5"], &[("CSI_PROXY_LOG", "debug")])
}

async fn iscsi2(d: &Daemon) -> iscsi2::iscsi_client::IscsiClient<tonic::transport::Channel> {
    let ch = d.connector().channel("iscsi", "v1alpha2").await.unwrap();
    iscsi2::iscsi_client::IscsiClient::new(ch)
}

fn portal2(port: u32) -> Option<iscsi2::TargetPortal> {
    Some(iscsi2::TargetPortal {
        target_address: "127.0.0.1".into(),
        target_port: port,
    })
}

fn no_secret(what: &str, text: &str) {
    for s in [SMB_PASSWORD, CHAP_SECRET, MUTUAL_SECRET] {
        assert!(!text.contains(s), "{what} contains a secret: {text}");
    }
}

#[tokio::test]
async fn iscsi_portals_discovery_and_sessions_through_the_daemon() {
    if let Some(why) = tgt::unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let t = tgt::Tgt::start();
    t.add_target(1, IQN);
    let d = start();
    let mut c = iscsi2(&d).await;
    let port = u32::from(t.port);

    // A request without a portal is INVALID_ARGUMENT (upstream crashes).
    let s = c
        .add_target_portal(iscsi2::AddTargetPortalRequest {
            target_portal: None,
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    let s = c
        .discover_target_portal(iscsi2::DiscoverTargetPortalRequest {
            target_portal: portal2(port),
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound, "not added yet: {s:?}");

    for _ in 0..2 {
        c.add_target_portal(iscsi2::AddTargetPortalRequest {
            target_portal: portal2(port),
        })
        .await
        .unwrap();
    }
    let iqns = c
        .discover_target_portal(iscsi2::DiscoverTargetPortalRequest {
            target_portal: portal2(port),
        })
        .await
        .unwrap()
        .into_inner()
        .iqns;
    assert_eq!(iqns, [IQN]);

    // Port 0 means 3260: a portal added that way lists as 3260.
    c.add_target_portal(iscsi2::AddTargetPortalRequest {
        target_portal: portal2(0),
    })
    .await
    .unwrap();
    let ch = d.connector().channel("iscsi", "v1alpha1").await.unwrap();
    let mut old = iscsi1::iscsi_client::IscsiClient::new(ch);
    let listed = old
        .list_target_portals(iscsi1::ListTargetPortalsRequest {})
        .await
        .unwrap()
        .into_inner()
        .target_portals;
    let mut ports: Vec<u32> = listed.iter().map(|p| p.target_port).collect();
    ports.sort();
    let mut want = vec![port, 3260];
    want.sort();
    assert_eq!(ports, want);
    c.remove_target_portal(iscsi2::RemoveTargetPortalRequest {
        target_portal: portal2(0),
    })
    .await
    .unwrap();
    let s = c
        .remove_target_portal(iscsi2::RemoveTargetPortalRequest {
            target_portal: portal2(0),
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound, "{s:?}");

    // Sessions: log in where the kernel initiator exists; say what is missing where not.
    let connect = iscsi2::ConnectTargetRequest {
        target_portal: portal2(port),
        iqn: IQN.into(),
        auth_type: iscsi2::AuthenticationType::None as i32,
        chap_username: String::new(),
        chap_secret: String::new(),
    };
    match csi_proxy_host_missing() {
        Some(why) => {
            let s = c.connect_target(connect).await.unwrap_err();
            assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
            assert!(s.message().contains("iscsi"), "{s:?}");
            let disks = c
                .get_target_disks(iscsi2::GetTargetDisksRequest {
                    target_portal: portal2(port),
                    iqn: IQN.into(),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(disks.disk_i_ds.is_empty(), "{disks:?}");
            c.disconnect_target(iscsi2::DisconnectTargetRequest {
                target_portal: portal2(port),
                iqn: IQN.into(),
            })
            .await
            .unwrap();
            eprintln!("SKIPPED: iSCSI login through the daemon: {why}");
        }
        None => {
            c.connect_target(connect.clone()).await.unwrap();
            c.connect_target(connect).await.unwrap();
            let disks = c
                .get_target_disks(iscsi2::GetTargetDisksRequest {
                    target_portal: portal2(port),
                    iqn: IQN.into(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(disks.disk_i_ds.len(), 1, "{disks:?}");
            for _ in 0..2 {
                c.disconnect_target(iscsi2::DisconnectTargetRequest {
                    target_portal: portal2(port),
                    iqn: IQN.into(),
                })
                .await
                .unwrap();
            }
        }
    }
}

/// Why sessions cannot be made here (same checks as the host).
fn csi_proxy_host_missing() -> Option<String> {
    let iscsiadm = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join("iscsiadm").exists());
    if !iscsiadm {
        return Some("iscsiadm is not installed".into());
    }
    if !Path::new("/sys/module/iscsi_tcp").exists() {
        return Some("the kernel iSCSI initiator (iscsi_tcp) is not loaded".into());
    }
    None
}

#[tokio::test]
async fn secrets_stay_out_of_the_log_and_every_error() {
    let tgt = match tgt::unavailable() {
        None => {
            let t = tgt::Tgt::start();
            t.add_target(1, IQN);
            t.require_chap(1, "chapuser", "the-right-Secret-9");
            Some(t)
        }
        Some(why) => {
            eprintln!("SKIPPED (part): CHAP login against tgt: {why}");
            None
        }
    };
    let d = start();
    let mut messages = Vec::new();

    // A failing SMB mapping (no cifs here, or no server on 127.0.0.1 where there is).
    let ch = d.connector().channel("smb", "v1").await.unwrap();
    let mut smb = smb1::smb_client::SmbClient::new(ch);
    let local = d.kubelet.join("pods/p/volumes/v").display().to_string();
    std::fs::create_dir_all(d.kubelet.join("pods/p/volumes")).unwrap();
    for remote in [
        "\\\\127.0.0.1\\share\\dir",
        "//127.0.0.1/share",
        "\\\\srv\\share\\..\\x",
    ] {
        let s = smb
            .new_smb_global_mapping(smb1::NewSmbGlobalMappingRequest {
                remote_path: remote.into(),
                local_path: local.clone(),
                username: "DOMAIN\\user".into(),
                password: SMB_PASSWORD.into(),
            })
            .await
            .unwrap_err();
        messages.push(s.message().to_string());
    }
    assert_eq!(messages.len(), 3);

    // CHAP: a failing login (wrong secret, or no initiator) and a mutual secret.
    let mut c = iscsi2(&d).await;
    c.set_mutual_chap_secret(iscsi2::SetMutualChapSecretRequest {
        mutual_chap_secret: MUTUAL_SECRET.into(),
    })
    .await
    .unwrap();
    let port = tgt.as_ref().map(|t| u32::from(t.port)).unwrap_or(9);
    c.add_target_portal(iscsi2::AddTargetPortalRequest {
        target_portal: portal2(port),
    })
    .await
    .unwrap();
    for auth in [
        iscsi2::AuthenticationType::OneWayChap,
        iscsi2::AuthenticationType::MutualChap,
    ] {
        let s = c
            .connect_target(iscsi2::ConnectTargetRequest {
                target_portal: portal2(port),
                iqn: IQN.into(),
                auth_type: auth as i32,
                chap_username: "chapuser".into(),
                chap_secret: CHAP_SECRET.into(),
            })
            .await
            .unwrap_err();
        messages.push(s.message().to_string());
    }
    let s = c
        .connect_target(iscsi2::ConnectTargetRequest {
            target_portal: portal2(port),
            iqn: IQN.into(),
            auth_type: 9,
            chap_username: "chapuser".into(),
            chap_secret: CHAP_SECRET.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);
    messages.push(s.message().to_string());

    eprintln!("error messages checked: {messages:#?}");
    for m in &messages {
        no_secret("an error message", m);
    }
    // Give the daemon a moment to flush its log lines for the last requests.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = d.log();
    assert!(
        log.contains("ConnectTarget"),
        "the log covers the requests: {log}"
    );
    no_secret("the daemon log", &log);
    drop(tgt);
}
