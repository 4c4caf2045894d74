//! SMB mapping failures in each of the three encodings `IWbemServices::ExecMethod` may use: the
//! host answers the same precise status whichever arrives.

use super::{SimWindows, SmbFailureEncoding};
use crate::windows::smb::WindowsSmbHost;
use csi_proxy_core::Kind;
use csi_proxy_core::smb::{SmbCredentials, SmbHost, SmbMapping};
use csi_proxy_core::testing::on_thread;
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

/// Once, the health probe of a mapping on a dead server left a thread per call behind. Polled many
/// times while the server hangs, it runs one probe, each call ends at its caller's deadline, and
/// once the server answers again the next call probes afresh.
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

/// A mapping that requires privacy reaches the server as such. A server that cannot encrypt refuses
/// it (nothing is mapped, the cause is named, whatever the encoding), and maps the same share when
/// privacy is not required; a server that encrypts maps either.
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

/// Once, one node-wide mutex was held across the mapping's WMI Create, so a server that does not
/// answer held up every SMB stage and unstage on the node, also for healthy servers. Now each share
/// root is ordered apart: while a Create waits on the dead server (a retry without a deadline
/// waiting behind it), another server's NewSmbGlobalMapping and RemoveSmbGlobalMapping complete at
/// once, and the dead share's calls end at their deadline.
#[test]
fn a_hanging_server_delays_only_calls_for_its_own_share() {
    use crate::windows::filesystem::WindowsFilesystemHost;
    use csi_proxy_core::filesystem::FilesystemService;
    use csi_proxy_core::paths::{PathPolicy, PathStyle};
    use csi_proxy_core::smb::{NewSmbGlobalMappingRequest, SmbService};
    use std::time::Duration;
    const DEAD: &str = r"\\dead35\vols";
    const ALIVE: &str = r"\\alive35\vols";
    let sim = Arc::new(SimWindows::new());
    sim.add_share(DEAD, None);
    sim.add_share(ALIVE, None);
    sim.set_share_hangs(DEAD, true);
    let policy = PathPolicy::new(PathStyle::Windows, r"C:\var\lib\kubelet", &[]).unwrap();
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
        Arc::new(policy),
    );
    let smb = SmbService::new(Arc::new(WindowsSmbHost::with_os(sim.clone())), fs, false);
    let new = |remote: &'static str, ms: Option<u64>| {
        let smb = smb.clone();
        on_thread(ms, move || {
            smb.new_smb_global_mapping(&NewSmbGlobalMappingRequest {
                remote_path: remote.into(),
                ..Default::default()
            })
        })
    };
    let remove = |remote: &'static str, ms: Option<u64>| {
        let smb = smb.clone();
        on_thread(ms, move || smb.remove_smb_global_mapping(remote))
    };
    let e = new(DEAD, Some(300))
        .recv_timeout(Duration::from_secs(5))
        .expect("the dead server's stage ends at its caller's deadline")
        .unwrap_err();
    assert!(
        matches!(e.kind(), Kind::Unavailable | Kind::DeadlineExceeded),
        "{e}"
    );
    // A retry without a deadline waits on the dead server, holding its share root.
    let waiting = new(DEAD, None);
    std::thread::sleep(Duration::from_millis(50));
    new(ALIVE, None)
        .recv_timeout(Duration::from_secs(1))
        .expect("another server's stage completes within a second")
        .unwrap();
    remove(ALIVE, None)
        .recv_timeout(Duration::from_secs(1))
        .expect("another server's unstage completes within a second")
        .unwrap();
    assert_eq!(
        sim.smb_roots(),
        Vec::<String>::new(),
        "the alive share was removed"
    );
    let e = remove(DEAD, Some(300))
        .recv_timeout(Duration::from_secs(5))
        .expect("an unstage of the dead share ends at its caller's deadline")
        .unwrap_err();
    assert_eq!(e.kind(), Kind::DeadlineExceeded, "{e}");
    sim.set_share_hangs(DEAD, false);
    waiting
        .recv_timeout(Duration::from_secs(30))
        .expect("the retry ends once the server answers")
        .unwrap();
    assert_eq!(sim.smb_roots(), [DEAD]);
}

/// On Windows too, a link scan that may have missed links (a directory it could not list) keeps the
/// mapping RemoveSmbGlobalMapping was asked to remove, and says why in the log; once the scan is
/// whole again, the mapping goes.
#[test]
fn an_incomplete_link_scan_keeps_the_mapping() {
    use crate::windows::filesystem::WindowsFilesystemHost;
    use csi_proxy_core::filesystem::FilesystemService;
    use csi_proxy_core::paths::{PathPolicy, PathStyle};
    use csi_proxy_core::smb::{NewSmbGlobalMappingRequest, SmbService};
    const SHARE: &str = r"\\scan41\vols";
    let sim = Arc::new(SimWindows::new());
    sim.add_share(SHARE, None);
    let policy = PathPolicy::new(PathStyle::Windows, r"C:\var\lib\kubelet", &[]).unwrap();
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
        Arc::new(policy),
    );
    let smb = SmbService::new(Arc::new(WindowsSmbHost::with_os(sim.clone())), fs, false);
    smb.new_smb_global_mapping(&NewSmbGlobalMappingRequest {
        remote_path: SHARE.into(),
        ..Default::default()
    })
    .unwrap();
    sim.set_link_scan_incomplete(Some("C:\\var\\lib\\kubelet\\pods could not be listed"));
    smb.remove_smb_global_mapping(SHARE).unwrap();
    assert_eq!(sim.smb_roots(), [SHARE], "kept: its users are not known");
    sim.set_link_scan_incomplete(None);
    smb.remove_smb_global_mapping(SHARE).unwrap();
    assert!(sim.smb_roots().is_empty());
}

/// Which refusal a server gives a mapping whose key was rotated no page says (ledger row 49):
/// whichever of the documented credential refusals comes, the health check says a new mapping
/// heals it; a failure that is not the server refusing the credential (a dropped connection, a
/// time-out, an unreachable network, the 1219 conflict) never does. Mutation: the class cut back
/// to ERROR_LOGON_FAILURE fails it at ERROR_INVALID_PASSWORD.
#[test]
fn every_refusal_of_a_rotated_key_is_healed_by_a_new_mapping_and_nothing_else() {
    use csi_proxy_core::smb::MappingState;
    let refusals = [5, 65, 86, 1326, 1327, 1328, 1330, 1331, 1793, 1907, 1909];
    let others = [59, 64, 121, 1219, 1231, 1236];
    for (code, heals) in refusals
        .iter()
        .map(|c| (*c, true))
        .chain(others.iter().map(|c| (*c, false)))
    {
        let root = r"\\files\vols";
        let sim = Arc::new(SimWindows::new());
        sim.add_share(root, Some(("svc", "key1")));
        let h = WindowsSmbHost::with_os(sim.clone());
        h.new_smb_global_mapping(&mapping(root, "svc", "key1"))
            .unwrap();
        sim.set_share_credential(root, Some(("svc", "key2")));
        sim.set_share_refusal(root, code);
        sim.drop_smb_sessions(root);
        let MappingState::Present(m) = h.smb_global_mapping(root).unwrap() else {
            panic!("{code}: the mapping is listed");
        };
        assert!(!m.healthy, "{code}: {m:?}");
        assert_eq!(m.remap_heals, heals, "{code}: {m:?}");
        assert!(m.status.contains(&format!("error {code}")), "{code}: {m:?}");
    }
}
