//! `csi-proxy-ctl selftest` over the simulated Windows, the steps that need no disk of the
//! selftest: `RemoveIScsiPersistentTargetW` with a null initiator (ledger row 26). Each passes
//! where the simulated Windows answers as its row models, fails naming the row where it answers
//! otherwise, and is listed as not run where it cannot run.
#![cfg(unix)]

mod common;
mod selftest_sim;

use common::SimDaemon;
use csi_proxy_ctl::selftest::{self, Step};
use csi_proxy_formats::windows_buffers::iscsi::isdsc;
use csi_proxy_host::windows::os::OsError;
use selftest_sim::*;

const NULL_INITIATOR: &str = "RemoveIScsiPersistentTargetW with a null initiator";

fn step<'a>(o: &'a selftest::Outcome, name: &str) -> &'a Step {
    o.steps
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no step {name}"))
}

/// The initiator refuses the null initiator as its row models, and nothing is removed: a
/// persistent login of another target stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_null_initiator_is_refused_and_nothing_removed() {
    let d = SimDaemon::start().await;
    let o = run_over(&d, d.sim.as_ref()).await;
    print(&o);
    assert!(o.failed().is_none(), "{:?}", o.failed());
    let s = step(&o, NULL_INITIATOR);
    assert!(s.ran && s.ok, "{s:?}");
    assert!(
        s.answer.contains(&format!(
            "iqn.2026-12.io.csi-proxy.selftest:none-{}",
            std::process::id()
        )) && s.answer.contains("(os error 1780)")
            && s.answer.contains("settles ledger row 26"),
        "{}",
        s.answer
    );
    assert_eq!(
        d.sim.calls()["iscsi_remove_persistent_target_without_initiator"],
        1
    );
}

/// A node whose initiator answers otherwise (here ISDSC_TARGET_NOT_FOUND, as if the null
/// initiator were taken for "any"): the step fails naming row 26 and the answer, and the steps
/// after it still run.
#[tokio::test(flavor = "multi_thread")]
async fn another_answer_to_a_null_initiator_fails_naming_the_row() {
    let d = SimDaemon::start().await;
    d.sim.fail_next(
        "iscsi_remove_persistent_target_without_initiator",
        OsError::new(isdsc::TARGET_NOT_FOUND),
    );
    let o = run_over(&d, d.sim.as_ref()).await;
    print(&o);
    assert_eq!(failed_steps(&o), [NULL_INITIATOR]);
    let s = step(&o, NULL_INITIATOR);
    assert!(
        s.answer
            .contains("ledger row 26 models RPC_X_NULL_REF_POINTER")
            && !s.answer.contains("settles"),
        "{}",
        s.answer
    );
    let names = names(&o);
    let at = names.iter().position(|n| *n == NULL_INITIATOR).unwrap();
    assert!(names[at + 1..].contains(&"SMB: NewSmbGlobalMapping of a missing share"));
    nothing_left(&d.sim);
}

/// Without the iSCSI initiator service the step is listed as not run, saying why, and makes no
/// call.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_initiator_the_null_initiator_step_is_not_run() {
    let d = SimDaemon::start().await;
    d.sim.remove_iscsi_initiator();
    let o = run_over(&d, d.sim.as_ref()).await;
    print(&o);
    let s = step(&o, NULL_INITIATOR);
    assert!(!s.ran && !s.ok, "{s:?}");
    assert!(
        s.answer
            .starts_with("not run: the iSCSI initiator is not available: "),
        "{}",
        s.answer
    );
    assert!(
        !d.sim
            .calls()
            .contains_key("iscsi_remove_persistent_target_without_initiator")
    );
}
