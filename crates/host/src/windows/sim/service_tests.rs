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
