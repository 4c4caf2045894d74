//! Windows service mode (`--windows-service`): the daemon runs under the Service Control Manager
//! as service `csiproxy` (upstream's name), and a Stop or Shutdown control stops every endpoint
//! and ends the process (upstream's service kept its pipes open after Stop).

use crate::flags::Flags;
use crate::service_lifecycle::{Phase, TICK, exit_codes};
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;
use windows_service::service::{
    ServiceControl, ServiceControlAccept, ServiceExitCode, ServiceState, ServiceStatus, ServiceType,
};
use windows_service::service_control_handler::{self, ServiceControlHandlerResult};
use windows_service::{define_windows_service, service_dispatcher};

/// The service name upstream's install instructions register.
pub const SERVICE_NAME: &str = "csiproxy";

/// The wait hint of every pending state: longer than a checkpoint interval.
const PENDING_HINT: Duration = Duration::from_secs(10);

/// Flags handed from `main` to the service entry point, which the SCM calls on its own thread.
static FLAGS: Mutex<Option<Flags>> = Mutex::new(None);

define_windows_service!(ffi_service_main, service_main);

/// Connects to the SCM and runs the service until it is stopped.
pub fn run(flags: Flags) -> ExitCode {
    if let Ok(mut f) = FLAGS.lock() {
        *f = Some(flags);
    }
    // StartServiceCtrlDispatcherW blocks until the service has stopped. It fails with
    // ERROR_FAILED_SERVICE_CONTROLLER_CONNECT when the process was not started by the SCM
    // (documented for StartServiceCtrlDispatcherW), which we report instead of panicking.
    match service_dispatcher::start(SERVICE_NAME, ffi_service_main) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "csi-proxy: --windows-service: cannot connect to the Service Control Manager \
                 ({e}); start it with `sc.exe start {SERVICE_NAME}`, or run without \
                 --windows-service"
            );
            ExitCode::FAILURE
        }
    }
}

fn service_main(_args: Vec<OsString>) {
    let flags = FLAGS.lock().ok().and_then(|mut f| f.take());
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let handler = move |control| match control {
        ServiceControl::Stop | ServiceControl::Shutdown => {
            tracing::info!("service stop requested");
            let _ = stop_tx.send(true);
            ServiceControlHandlerResult::NoError
        }
        // Interrogate must be answered with NO_ERROR; the SCM then reads the last status.
        ServiceControl::Interrogate => ServiceControlHandlerResult::NoError,
        _ => ServiceControlHandlerResult::NotImplemented,
    };
    let status = match service_control_handler::register(SERVICE_NAME, handler) {
        Ok(s) => s,
        Err(e) => {
            // Without a status handle nothing can be reported; the SCM sees the process end.
            tracing::error!("cannot register the service control handler: {e}");
            return;
        }
    };
    let report = move |phase: Phase, checkpoint: u32, exit: u32| {
        let (state, accept) = match phase {
            Phase::StartPending => (ServiceState::StartPending, ServiceControlAccept::empty()),
            Phase::Running => (
                ServiceState::Running,
                ServiceControlAccept::STOP | ServiceControlAccept::SHUTDOWN,
            ),
            Phase::StopPending => (ServiceState::StopPending, ServiceControlAccept::empty()),
            Phase::Stopped => (ServiceState::Stopped, ServiceControlAccept::empty()),
        };
        let r = status.set_service_status(ServiceStatus {
            service_type: ServiceType::OWN_PROCESS,
            current_state: state,
            controls_accepted: accept,
            // Our codes are service-specific, never Win32 error codes (SERVICE_STATUS).
            exit_code: match exit_codes(exit) {
                (0, _) => ServiceExitCode::NO_ERROR,
                (_, specific) => ServiceExitCode::ServiceSpecific(specific),
            },
            checkpoint,
            wait_hint: PENDING_HINT,
            process_id: None,
        });
        if let Err(e) = r {
            tracing::warn!("cannot report service state {state:?}: {e}");
        }
    };
    // Without flags this is still the service (--windows-event-log follows --windows-service).
    let events = if flags.as_ref().is_none_or(|f| f.event_log()) {
        crate::service_events::open()
    } else {
        crate::service_events::ServiceEvents::none()
    };
    crate::service_lifecycle::run_reporting(
        flags,
        report,
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
        TICK,
        &events,
    );
}
