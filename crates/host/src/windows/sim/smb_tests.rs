//! SMB mapping failures in each of the three encodings `IWbemServices::ExecMethod` may use
//! (issue 27 item 6): the host answers the same precise status whichever arrives.

use super::{SimWindows, SmbFailureEncoding};
use crate::windows::smb::WindowsSmbHost;
use csi_proxy_core::Kind;
use csi_proxy_core::smb::{SmbCredentials, SmbHost, SmbMapping};
use std::sync::Arc;

const ENCODINGS: [SmbFailureEncoding; 3] = [
    SmbFailureEncoding::ReturnValue,
    SmbFailureEncoding::HResult,
    SmbFailureEncoding::ExtendedError,
];

fn mapping(root: &str, user: &str, password: &str) -> SmbMapping {
    SmbMapping {
        root: root.to_string(),
        credentials: Some(SmbCredentials {
            username: user.to_string(),
            password: password.into(),
        }),
        require_privacy: false,
    }
}

#[test]
fn each_smb_failure_is_precise_in_every_encoding() {
    for encoding in ENCODINGS {
        let sim = Arc::new(SimWindows::new());
        sim.set_smb_failure_encoding(encoding);
        sim.add_share(r"\\fs01\vols", Some(("svc", "pw")));
        sim.add_share(r"\\fs01\other", Some(("svc", "pw")));
        let h = WindowsSmbHost::with_os(sim.clone());
        h.new_smb_global_mapping(&mapping(r"\\fs01\vols", "svc", "pw"))
            .unwrap();
        // (mapping, kind, the words naming the cause)
        let cases = [
            (
                mapping(r"\\fs01\vols", "svc", "pw"),
                Kind::AlreadyExists,
                "already exists",
            ),
            (
                mapping(r"\\fs01\other", "admin", "pw"),
                Kind::AlreadyExists,
                "error 1219",
            ),
            (
                mapping(r"\\nosuch\vols", "svc", "pw"),
                Kind::NotFound,
                "error 53",
            ),
            (
                mapping(r"\\fs01\nosuch", "svc", "pw"),
                Kind::NotFound,
                "error 67",
            ),
        ];
        for (m, kind, words) in cases {
            let e = h.new_smb_global_mapping(&m).unwrap_err();
            assert_eq!(e.kind(), kind, "{encoding:?}: {}", e.message());
            assert!(
                e.message().contains(words) && e.message().contains(&format!("{:?}", m.root)),
                "{encoding:?}: {}",
                e.message()
            );
            assert!(!e.message().contains("pw"), "{}", e.message());
        }
        // Wrong credentials for a server with no mapping yet.
        let sim = Arc::new(SimWindows::new());
        sim.set_smb_failure_encoding(encoding);
        sim.add_share(r"\\fs02\vols", Some(("svc", "pw")));
        let e = WindowsSmbHost::with_os(sim)
            .new_smb_global_mapping(&mapping(r"\\fs02\vols", "svc", "wrong"))
            .unwrap_err();
        assert_eq!(e.kind(), Kind::PermissionDenied, "{encoding:?}: {e}");
        assert!(e.message().contains("error 1326"), "{}", e.message());
    }
}

/// Issue 27: the health probe of a mapping on a dead server left a thread per call behind.
/// Polled many times while the server hangs, it runs one probe, each call ends at its
/// caller's deadline, and once the server answers again the next call probes afresh.
#[test]
fn a_dead_servers_health_probe_holds_one_thread_whatever_the_calls() {
    use csi_proxy_core::smb::MappingState;
    use std::time::{Duration, Instant};
    let sim = Arc::new(SimWindows::new());
    sim.add_share(r"\\dead01\vols", None);
    let h = WindowsSmbHost::with_os(sim.clone());
    let mut m = mapping(r"\\dead01\vols", "", "");
    m.credentials = None;
    h.new_smb_global_mapping(&m).unwrap();
    sim.set_share_hangs(r"\\dead01\vols", true);
    for _ in 0..20 {
        let started = Instant::now();
        let deadline = Some(started + Duration::from_millis(20));
        let state =
            csi_proxy_core::deadline::within(deadline, || h.smb_global_mapping(r"\\dead01\vols"))
                .unwrap();
        assert!(
            matches!(&state, MappingState::Present(i) if !i.healthy),
            "{state:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    assert_eq!(sim.calls()["dir_opens"], 1, "one probe for every call");
    sim.set_share_hangs(r"\\dead01\vols", false);
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let state = h.smb_global_mapping(r"\\dead01\vols").unwrap();
        if matches!(&state, MappingState::Present(i) if i.healthy) {
            break;
        }
        assert!(Instant::now() < end, "{state:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Issue 37: a mapping that requires privacy reaches the server as such. A server that cannot
/// encrypt refuses it (nothing is mapped, the cause is named, whatever the encoding), and maps
/// the same share when privacy is not required; a server that encrypts maps either.
#[test]
fn a_mapping_requiring_privacy_is_refused_by_a_server_that_cannot_encrypt() {
    for encoding in ENCODINGS {
        let sim = Arc::new(SimWindows::new());
        sim.set_smb_failure_encoding(encoding);
        sim.add_share(r"\\old01\vols", Some(("svc", "pw")));
        sim.set_share_encryption(r"\\old01\vols", false);
        sim.add_share(r"\\new01\vols", Some(("svc", "pw")));
        let h = WindowsSmbHost::with_os(sim.clone());
        let mut private = mapping(r"\\old01\vols", "svc", "pw");
        private.require_privacy = true;
        let e = h.new_smb_global_mapping(&private).unwrap_err();
        assert_eq!(e.kind(), Kind::PermissionDenied, "{encoding:?}: {e}");
        assert!(
            e.message().contains("error 5") && e.message().contains(r#""\\\\old01\\vols""#),
            "{encoding:?}: {}",
            e.message()
        );
        assert!(sim.smb_roots().is_empty(), "{:?}", sim.smb_roots());
        h.new_smb_global_mapping(&mapping(r"\\old01\vols", "svc", "pw"))
            .unwrap();
        let mut private = mapping(r"\\new01\vols", "svc", "pw");
        private.require_privacy = true;
        h.new_smb_global_mapping(&private).unwrap();
        assert_eq!(sim.smb_roots().len(), 2);
    }
}
