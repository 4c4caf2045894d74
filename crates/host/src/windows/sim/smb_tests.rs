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
