//! The Windows system host over the simulated Service Control Manager and firmware.

use super::services::{ALL, QUERY_CONFIG, QUERY_STATUS, START};
use super::*;
use crate::windows::system::WindowsSystemHost;
use csi_proxy_core::Kind;
use csi_proxy_core::system::{ServiceStatus, StartType, SystemHost};
use std::sync::Arc;

fn host() -> (Arc<SimWindows>, WindowsSystemHost) {
    let sim = Arc::new(SimWindows::new());
    (sim.clone(), WindowsSystemHost::with_os(sim))
}

#[test]
fn start_needs_only_the_start_right() {
    let (sim, h) = host();
    // A hardened node grants the daemon's account the right to start this service, not to
    // stop it: StartService must not ask for more than it uses.
    sim.add_service(
        "svc",
        "A service",
        3,
        false,
        QUERY_STATUS | QUERY_CONFIG | START,
    );
    h.start_service("svc").unwrap();
    let info = h.get_service("svc").unwrap();
    assert_eq!(info.status, ServiceStatus::Running);
    assert_eq!(info.start_type, StartType::Manual);
    assert_eq!(info.display_name, "A service");
    // Stopping is refused precisely, naming the service.
    let e = h.stop_service("svc", false).unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied, "{}", e.message());
    assert!(e.message().contains("\"svc\""), "{}", e.message());
}

#[test]
fn stop_respects_dependents_unless_forced() {
    let (sim, h) = host();
    sim.add_service("base", "Base", 2, true, ALL);
    sim.add_service("dep", "Dependent", 2, true, ALL);
    sim.add_dependency("base", "dep");
    let e = h.stop_service("base", false).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    h.stop_service("base", true).unwrap();
    assert_eq!(h.get_service("dep").unwrap().status, ServiceStatus::Stopped);
    assert_eq!(
        h.get_service("base").unwrap().status,
        ServiceStatus::Stopped
    );
    // Again: already stopped, success.
    h.stop_service("base", true).unwrap();
}

#[test]
fn start_outcomes_are_precise() {
    let (sim, h) = host();
    sim.add_service("broken", "Broken", 3, false, ALL);
    sim.break_service("broken");
    let e = h.start_service("broken").unwrap_err();
    assert!(
        e.message().contains("stopped while starting"),
        "{}",
        e.message()
    );
    sim.add_service("off", "Disabled", 4, false, ALL);
    assert_eq!(
        h.start_service("off").unwrap_err().kind(),
        Kind::FailedPrecondition
    );
    let e = h.get_service("nope").unwrap_err();
    assert_eq!(e.kind(), Kind::NotFound);
    // Starting twice: the second is success without a second start.
    sim.add_service("ok", "Fine", 3, false, ALL);
    h.start_service("ok").unwrap();
    h.start_service("ok").unwrap();
}

#[test]
fn the_bios_serial_comes_from_smbios_else_wmi() {
    let (sim, h) = host();
    // A type-1 structure whose serial is string 4, then the end-of-table structure.
    let mut t1 = vec![1u8, 27, 0, 1, 1, 2, 3, 4];
    t1.resize(27, 0);
    t1.extend_from_slice(b"Maker\0Model\0v1\0SN-0042\0\0");
    t1.extend_from_slice(&[127, 4, 0, 2, 0, 0]);
    let mut raw = vec![0u8, 2, 8, 0];
    raw.extend_from_slice(&(t1.len() as u32).to_le_bytes());
    raw.extend_from_slice(&t1);
    sim.set_firmware(Some(raw), "FROM-WMI");
    assert_eq!(h.bios_serial_number().unwrap(), "SN-0042");
    sim.set_firmware(None, "FROM-WMI");
    assert_eq!(h.bios_serial_number().unwrap(), "FROM-WMI");
}

/// Once, StartService on a service still stopping answered ERROR_SERVICE_ALREADY_RUNNING, and the
/// wait for RUNNING then saw it stop and failed. The start waits the stop out.
#[test]
fn start_during_stop_pending_waits_for_the_stop_then_starts() {
    use crate::windows::os::Win32;
    let (sim, h) = host();
    sim.add_service("svc", "A service", 3, true, ALL);
    sim.service_stop("svc").unwrap();
    assert_eq!(
        h.get_service("svc").unwrap().status,
        ServiceStatus::StopPending
    );
    h.start_service("svc").unwrap();
    assert_eq!(h.get_service("svc").unwrap().status, ServiceStatus::Running);
}

/// SERVICE_FAILURE_ACTIONS_FLAG: the flag set on a running system is configured at once but
/// acted on from the next system start. Until then a failure the daemon reports (STOPPED with a
/// service-specific code) is not restarted, a crash is; after it both are; a stop with exit
/// code 0 (the daemon's answer when another csi-proxy serves) never is. The simulated SCM
/// acting on the flag at once would fail the first half.
#[test]
fn the_failure_flag_acts_from_the_next_system_start() {
    let (sim, h) = host();
    sim.add_service("csiproxy", "CSI Proxy", 2, true, ALL);
    sim.set_failure_actions("csiproxy", true);
    sim.set_failure_flag("csiproxy", true);
    assert_eq!(sim.failure_flag("csiproxy"), Some(true));
    // ERROR_SERVICE_SPECIFIC_ERROR: the daemon's reported failure.
    assert!(!sim.service_process_ends("csiproxy", Some(1066)));
    assert_eq!(
        h.get_service("csiproxy").unwrap().status,
        ServiceStatus::Stopped
    );
    h.start_service("csiproxy").unwrap();
    assert!(sim.service_process_ends("csiproxy", None), "a crash");
    sim.restart_system_services();
    assert!(sim.service_process_ends("csiproxy", Some(1066)));
    assert!(!sim.service_process_ends("csiproxy", Some(0)));
}

const PROGRAM: &str = r"C:\tools\csi-proxy-ctl.exe";
const RELEASE: &str = r"C:\tools\release";

/// A scratch service whose process holds STOP_PENDING until its release entry exists (the
/// selftest's, ledger row 40): StartService meanwhile answers ERROR_SERVICE_ALREADY_RUNNING and
/// changes nothing; once released it stops, a start works, and a stop with the release still
/// there completes at once. Deleted while stopped, it is gone at once.
#[test]
fn a_start_while_stop_pending_is_already_running_until_the_stop_completes() {
    use crate::windows::os::{Win32, code};
    let (sim, _) = host();
    sim.mkdir(r"C:\tools");
    sim.hold_stop_for_program(PROGRAM);
    let name = "csi-proxy-selftest-1";
    let cmd = format!(r#""{PROGRAM}" selftest-service "{RELEASE}""#);
    sim.service_create(name, &cmd).unwrap();
    assert_eq!(
        sim.service_create(name, &cmd).unwrap_err().code,
        code::SERVICE_EXISTS
    );
    assert_eq!(sim.service_state(name).unwrap(), 1, "created stopped");
    sim.service_start(name).unwrap();
    sim.sleep(Duration::from_secs(1));
    assert_eq!(sim.service_state(name).unwrap(), 4);
    sim.service_stop(name).unwrap();
    assert_eq!(sim.service_state(name).unwrap(), 3);
    let e = sim.service_start(name).unwrap_err();
    assert_eq!(e.code, code::SERVICE_ALREADY_RUNNING);
    sim.sleep(Duration::from_secs(60));
    assert_eq!(sim.service_state(name).unwrap(), 3, "held until released");
    sim.mkdir(RELEASE);
    assert_eq!(sim.service_state(name).unwrap(), 1);
    sim.service_start(name).unwrap();
    sim.sleep(Duration::from_secs(1));
    assert_eq!(sim.service_state(name).unwrap(), 4);
    sim.service_stop(name).unwrap();
    assert_eq!(sim.service_state(name).unwrap(), 1, "released already");
    sim.service_delete(name).unwrap();
    assert_eq!(
        sim.service_state(name).unwrap_err().code,
        code::SERVICE_DOES_NOT_EXIST
    );
    sim.service_create(name, &cmd).unwrap();
}

/// Never released, the held stop ends at the process's bound.
#[test]
fn a_held_stop_ends_at_its_bound() {
    use crate::windows::os::Win32;
    use crate::windows::sim::services::HOLD_LIMIT;
    let (sim, _) = host();
    sim.hold_stop_for_program(PROGRAM);
    let cmd = format!(r#""{PROGRAM}" selftest-service "{RELEASE}""#);
    sim.service_create("held", &cmd).unwrap();
    sim.service_start("held").unwrap();
    sim.sleep(Duration::from_secs(1));
    sim.service_stop("held").unwrap();
    sim.sleep(HOLD_LIMIT - Duration::from_secs(1));
    assert_eq!(sim.service_state("held").unwrap(), 3);
    sim.sleep(Duration::from_secs(1));
    assert_eq!(sim.service_state("held").unwrap(), 1);
}

/// DeleteService of a running service marks it: it refuses a start and a second delete, its
/// name cannot be created again, and it is gone once stopped. A service of another program
/// stops as any other.
#[test]
fn a_running_service_marked_for_deletion_goes_when_it_stops() {
    use crate::windows::os::{Win32, code};
    let (sim, _) = host();
    sim.hold_stop_for_program(PROGRAM);
    sim.service_create("other", r"C:\other.exe run").unwrap();
    sim.service_start("other").unwrap();
    sim.sleep(Duration::from_secs(1));
    sim.service_delete("other").unwrap();
    for e in [
        sim.service_delete("other").unwrap_err(),
        sim.service_create("other", "x").unwrap_err(),
    ] {
        assert_eq!(e.code, code::SERVICE_MARKED_FOR_DELETE);
    }
    assert!(sim.service_exists("other"));
    sim.service_stop("other").unwrap();
    sim.sleep(Duration::from_secs(1));
    assert!(!sim.service_exists("other"));
    assert_eq!(
        sim.service_create(r"a\b", "x").unwrap_err().code,
        123,
        "ERROR_INVALID_NAME"
    );
}

/// A Windows that does not count a stopping instance as running (the test's knob): the start
/// answers the code given.
#[test]
fn the_answer_to_a_start_while_stopping_can_be_changed() {
    use crate::windows::os::{Win32, code};
    let (sim, _) = host();
    sim.add_service("svc", "A service", 3, true, ALL);
    sim.answer_start_while_stopping(code::SERVICE_CANNOT_ACCEPT_CTRL);
    sim.service_stop("svc").unwrap();
    assert_eq!(
        sim.service_start("svc").unwrap_err().code,
        code::SERVICE_CANNOT_ACCEPT_CTRL
    );
}
