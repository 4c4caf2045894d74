//! `csi-proxy-ctl selftest` over the simulated Windows, the steps that need no disk of the
//! selftest: `RemoveIScsiPersistentTargetW` with a null initiator (ledger row 26), and a scratch
//! service of its own caught in STOP_PENDING (row 40). Each passes where the simulated Windows
//! answers as its row models, fails naming the row where it answers otherwise, and is listed as
//! not run where it cannot run; the scratch service is deleted whatever happened, or named.
#![cfg(unix)]

mod common;
mod selftest_sim;

use common::SimDaemon;
use csi_proxy_ctl::selftest::{self, Step};
use csi_proxy_formats::windows_buffers::iscsi::isdsc;
use csi_proxy_host::windows::os::{OsError, code};
use selftest_sim::*;

const NULL_INITIATOR: &str = "RemoveIScsiPersistentTargetW with a null initiator";
const SERVICE: &str = "scratch service: StartServiceW while STOP_PENDING";
const SERVICE_CLEAN_UP: &str = "clean-up: DeleteService (scratch service)";

fn scratch_service() -> String {
    format!("csi-proxy-selftest-{}", std::process::id())
}

/// Neither the scratch service nor its release folder is left.
fn no_service_left(d: &SimDaemon) {
    assert!(!d.sim.service_exists(&scratch_service()), "service left");
    assert!(
        !d.sim.entry_exists(&format!("{VHDX}.release")),
        "release folder left"
    );
}

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

/// The scratch service, stopped, holds STOP_PENDING while StartServiceW answers
/// ERROR_SERVICE_ALREADY_RUNNING; released, it stops, starts again and stops; then it is deleted
/// and its release folder removed.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_while_the_scratch_service_stops_is_already_running() {
    let d = SimDaemon::start().await;
    let o = run_over(&d, d.sim.as_ref()).await;
    print(&o);
    assert!(o.failed().is_none(), "{:?}", o.failed());
    let s = step(&o, SERVICE);
    assert!(s.ran && s.ok, "{s:?}");
    for want in [
        "while STOP_PENDING StartServiceW: An instance of the service is already running. (os \
         error 1056) (then STOP_PENDING)",
        "StartServiceW again: OK",
        "stopped again",
        "settles ledger row 40",
    ] {
        assert!(s.answer.contains(want), "{want} in {}", s.answer);
    }
    let c = step(&o, SERVICE_CLEAN_UP);
    assert!(
        c.ok && c.answer.starts_with("deleted csi-proxy-selftest-"),
        "{c:?}"
    );
    assert_eq!(d.sim.calls()["service_create"], 1);
    no_service_left(&d);
}

/// A Windows that answers a start while the stop is pending otherwise (the sim's knob): the step
/// fails naming row 40 and the answer; the service is still deleted.
#[tokio::test(flavor = "multi_thread")]
async fn another_answer_while_stopping_fails_naming_the_row() {
    let d = SimDaemon::start().await;
    d.sim
        .answer_start_while_stopping(code::SERVICE_CANNOT_ACCEPT_CTRL);
    let o = run_over(&d, d.sim.as_ref()).await;
    print(&o);
    assert_eq!(failed_steps(&o), [SERVICE]);
    let s = step(&o, SERVICE);
    assert!(
        s.answer.contains("(os error 1061)")
            && s.answer
                .contains("ledger row 40 models ERROR_SERVICE_ALREADY_RUNNING")
            && !s.answer.contains("settles"),
        "{}",
        s.answer
    );
    assert!(step(&o, SERVICE_CLEAN_UP).ok);
    no_service_left(&d);
}

/// A step cut short with the service running (its first stop refused) still has it stopped
/// and deleted by the clean-up; a service that cannot be deleted is named, with how to remove
/// it.
#[tokio::test(flavor = "multi_thread")]
async fn the_scratch_service_is_deleted_whatever_happened_or_named() {
    let d = SimDaemon::start().await;
    d.sim
        .fail_next("service_stop", OsError::new(code::ACCESS_DENIED));
    let o = run_over(&d, d.sim.as_ref()).await;
    print(&o);
    assert_eq!(failed_steps(&o), [SERVICE]);
    assert!(step(&o, SERVICE).answer.contains("ControlService"));
    assert!(step(&o, SERVICE_CLEAN_UP).ok);
    no_service_left(&d);

    let d = SimDaemon::start().await;
    d.sim
        .fail_next("service_delete", OsError::new(code::ACCESS_DENIED));
    let o = run_over(&d, d.sim.as_ref()).await;
    print(&o);
    assert_eq!(failed_steps(&o), [SERVICE_CLEAN_UP]);
    let c = step(&o, SERVICE_CLEAN_UP);
    let name = scratch_service();
    assert!(
        c.answer.contains(&format!("service {name} is left"))
            && c.answer.contains(&format!("sc.exe delete {name}")),
        "{}",
        c.answer
    );
    assert!(d.sim.service_exists(&name));
}

/// Without its own program's path the step is listed as not run, and no service is made.
#[tokio::test(flavor = "multi_thread")]
async fn without_its_program_the_scratch_service_step_is_not_run() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    let opts = selftest::Options {
        program: None,
        ..options()
    };
    let o = run_with(&d, d.sim.as_ref(), &opts).await;
    let s = step(&o, SERVICE);
    assert!(!s.ran && !s.ok, "{s:?}");
    assert!(!names(&o).contains(&SERVICE_CLEAN_UP));
    assert!(!d.sim.calls().contains_key("service_create"));
}
