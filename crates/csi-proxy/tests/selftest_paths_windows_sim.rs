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
