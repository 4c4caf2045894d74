//! `csi-proxy-ctl selftest` over the simulated Windows, its steps that reach the same storage
//! or server by a second way: the iSCSI second path to a LUN (ledger row 91) and the SMB
//! server reached by its name and by its address (ledger row 12), each against a Windows that
//! answers as the model does, one that answers otherwise (the step fails naming the row), and
//! without what it needs (listed as not run).
#![cfg(unix)]

mod common;
mod selftest_sim;

use common::SimDaemon;
use selftest_sim::*;

const SECOND_PATH: &str = "iSCSI: a second path to each LUN (multipath-enabled login)";

/// A Windows that surfaces the second path online while the first is online (the model keeps
/// it offline, VDSDiskOfflineReasonRedundantPath): the step fails naming row 91, the second
/// session is logged out at once, every later iSCSI step still runs, and nothing is left.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_path_that_arrives_online_fails_naming_row_91_and_is_logged_out() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    let lun = d.sim.add_disk(1024 * MIB, 0);
    d.sim.add_iscsi_target(PORTAL, 3260, IQN, &[lun], None);
    d.sim.set_redundant_paths_online(true);
    let o = run_with(&d, d.sim.as_ref(), &iscsi_options()).await;
    print(&o);
    assert_eq!(failed_steps(&o), [SECOND_PATH]);
    let step = o.failed().unwrap();
    assert!(
        step.answer.contains("arrived online while disk")
            && step.answer.contains("ledger row 91 models")
            && step.answer.ends_with("the second session logged out"),
        "{}",
        step.answer
    );
    let names = names(&o);
    assert!(names.contains(&"iSCSI: DisconnectTarget while its disk is held"));
    assert!(!names.contains(&"clean-up: iSCSI LogoutIScsiTarget (second path)"));
    assert_eq!(d.sim.iscsi_sessions(), 0);
    nothing_left(&d.sim);
}

/// A second session that cannot be logged out at once (the initiator busy) is logged out by
/// the clean-up, by its own ID, whatever the step answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_session_the_step_could_not_log_out_is_logged_out_by_the_clean_up() {
    use csi_proxy_host::windows::os::OsError;
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    let lun = d.sim.add_disk(1024 * MIB, 0);
    d.sim.add_iscsi_target(PORTAL, 3260, IQN, &[lun], None);
    // ISDSC_DEVICE_BUSY_ON_SESSION for the step's own logout of the second session.
    d.sim.fail_next(
        "iscsi_logout",
        OsError::new(csi_proxy_formats::windows_buffers::iscsi::isdsc::DEVICE_BUSY_ON_SESSION),
    );
    let o = run_with(&d, d.sim.as_ref(), &iscsi_options()).await;
    print(&o);
    let step = o.steps.iter().find(|s| s.name == SECOND_PATH).unwrap();
    assert!(
        !step.ok
            && step
                .answer
                .contains("LogoutIScsiTarget of the second session"),
        "{step:?}"
    );
    let clean = o
        .steps
        .iter()
        .find(|s| s.name == "clean-up: iSCSI LogoutIScsiTarget (second path)")
        .expect("the clean-up logs the second session out");
    assert!(clean.ok, "{clean:?}");
    assert_eq!(d.sim.iscsi_sessions(), 0);
    nothing_left(&d.sim);
}

const BY_NAME: &str = "SMB: a second user on a mapped server, by name and by address";
const MISSING_SHARE: &str = "SMB: NewSmbGlobalMapping of a missing share";
const ADDRESS: &str = "10.0.0.5";

/// The node maps `\\srv\data` (a driver's mapping, with credentials); the selftest is given
/// `srv`, which resolves to [`ADDRESS`]. Answers the outcome and the daemon, whose mapping
/// must be untouched.
async fn mapped_server_run(same_server: bool) -> (SimDaemon, csi_proxy_ctl::selftest::Outcome) {
    use csi_proxy_ctl::selftest::{self, Options};
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    d.sim.add_share(r"\\srv\data", Some(("user", "pw")));
    let mut c = csi_proxy_client::smb::SmbClient::connect(&d.connector)
        .await
        .unwrap();
    c.new_mapping(r"\\srv\data", "user", "pw").await.unwrap();
    if same_server {
        d.sim.set_smb_same_server("srv", ADDRESS);
    }
    let resolve = |name: &str| {
        assert_eq!(name, "SRV", "the name as the operator wrote it");
        Ok(ADDRESS.parse().unwrap())
    };
    let opts = Options {
        smb_server: Some(selftest::smb_server_with(
            d.sim.as_ref(),
            r"\\SRV",
            &resolve,
        )),
        ..options()
    };
    let o = run_with(&d, d.sim.as_ref(), &opts).await;
    print(&o);
    assert_eq!(d.sim.smb_roots(), vec![r"\\srv\data".to_string()]);
    (d, o)
}

/// A server the node maps: the step through the daemon (ledger row 38) is not run, since a
/// 1219 there would make the daemon remove the server's unused mappings; the row-12 step maps
/// the selftest's missing share as a user that exists nowhere, by name (1219: a session to
/// `SRV` exists under the node's user) and by address (a server unknown to the client, error
/// 53 here): grouped by the name as written, which settles row 12. The node's mapping is
/// untouched and the daemon was asked nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_mapped_server_shows_the_client_groups_credentials_by_the_name_as_written() {
    let (_d, o) = mapped_server_run(false).await;
    assert!(o.failed().is_none(), "{:?}", o.failed());
    let step = |n: &str| o.steps.iter().find(|s| s.name == n).unwrap();
    let missing = step(MISSING_SHARE);
    assert!(
        !missing.ran
            && missing
                .answer
                .contains(r#"maps ["\\\\srv\\data"] of server "SRV""#),
        "{missing:?}"
    );
    let by_name = step(BY_NAME);
    assert!(by_name.ran && by_name.ok, "{by_name:?}");
    let pid = std::process::id();
    assert!(
        by_name.answer.starts_with(&format!(
            r"\\SRV\csi-proxy-selftest-{pid}: error 1219; \\{ADDRESS}\csi-proxy-selftest-{pid}: error 53, not 1219"
        )) && by_name.answer.contains("settles ledger row 12"),
        "{}",
        by_name.answer
    );
    assert!(!names(&o).iter().any(|n| n.starts_with("clean-up: SMB")));
}

/// A client that groups sessions by the resolved address (a knob): the mapping by address
/// answers 1219 too, and the step fails naming row 12, whose grouping the daemon relies on.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_grouping_by_address_fails_the_step_naming_row_12() {
    let (_d, o) = mapped_server_run(true).await;
    assert_eq!(failed_steps(&o), [BY_NAME]);
    let answer = &o.failed().unwrap().answer;
    assert!(
        answer.contains(&format!(r"\\{ADDRESS}\"))
            && answer.contains("error 1219: the client groups sessions by the resolved address")
            && answer.contains("ledger row 12 models the name"),
        "{answer}"
    );
}

/// What the row-12 step needs, said when it is missing: a server the node maps (connected),
/// and a name rather than an address.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_mapped_named_server_the_row_12_step_says_what_it_needs() {
    use csi_proxy_ctl::selftest::{self, Options};
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    d.sim.add_share(r"\\srv\data", None);
    d.sim.add_share(&format!(r"\\{ADDRESS}\data"), None);
    let srv = r"\\srv\data".to_string();
    for (server, map, down, why) in [
        ("srv", None, false, "needs a connected mapping of \"srv\""),
        (
            "srv",
            Some(srv.clone()),
            true,
            "needs a connected mapping of \"srv\"",
        ),
        (
            ADDRESS,
            Some(format!(r"\\{ADDRESS}\data")),
            false,
            "10.0.0.5 is an address, not a name",
        ),
    ] {
        let mut c = csi_proxy_client::smb::SmbClient::connect(&d.connector)
            .await
            .unwrap();
        if let Some(root) = &map {
            c.new_mapping(root, "", "").await.unwrap();
            // Listed `Disconnected`: no session to the server, so no 1219 to look for.
            d.sim.set_share_up(root, !down);
        }
        let opts = Options {
            smb_server: Some(selftest::smb_server_with(d.sim.as_ref(), server, &|_| {
                panic!("a server the node has no session to, or an address, is not resolved")
            })),
            ..options()
        };
        let calls = d.sim.calls().get("smb_create_global_mapping").copied();
        let o = run_with(&d, d.sim.as_ref(), &opts).await;
        let step = o.steps.iter().find(|s| s.name == BY_NAME).unwrap();
        assert!(!step.ran && step.answer.contains(why), "{server}: {step:?}");
        if let Some(root) = &map {
            assert_eq!(
                d.sim.calls().get("smb_create_global_mapping").copied(),
                calls
            );
            d.sim.set_share_up(root, true);
            c.remove_mapping(root).await.unwrap();
        }
    }
}
