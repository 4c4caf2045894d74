//! The selftest's scratch service process: `csi-proxy-ctl selftest-service <release>` (hidden),
//! the program of the service `csi-proxy-selftest-<pid>` the selftest creates, starts, stops,
//! starts again and deletes (its step is in `scm.rs`, ledger row 40).
//!
//! Under the service dispatcher ([`dispatch`], Windows only) it reports SERVICE_RUNNING; told to
//! stop, it reports SERVICE_STOP_PENDING, its checkpoint growing every [`Limits::tick`], until
//! the release entry (a folder the selftest makes) exists, and at most [`Limits::hold`]; then
//! SERVICE_STOPPED. Never told to stop, it stops by itself after [`Limits::run`], so a selftest
//! that died leaves no service running for long. [`serve`] is that sequence, with the SCM's
//! side ([`Report`]) and the release check passed in, so it runs in tests on any platform.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What the process reports to the SCM (`SetServiceStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// SERVICE_RUNNING, accepting SERVICE_CONTROL_STOP.
    Running,
    /// SERVICE_STOP_PENDING with this checkpoint (1, 2, …: the stop is progressing) and
    /// [`WAIT_HINT`].
    StopPending(u32),
    /// SERVICE_STOPPED, exit code 0.
    Stopped,
}

/// How long the SCM is told to wait for the next report while the stop is pending: longer than
/// a tick, so the checkpoint always grows within it (SERVICE_STATUS, `dwWaitHint`).
pub const WAIT_HINT: Duration = Duration::from_secs(5);

/// The process's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long it runs at most without being told to stop.
    pub run: Duration,
    /// How long it holds STOP_PENDING at most without the release entry.
    pub hold: Duration,
    /// How often it reports the pending stop and looks for the release entry.
    pub tick: Duration,
}

impl Default for Limits {
    /// On a node: running five minutes at most (as the second process holds), the stop held two
    /// minutes at most, reported every second.
    fn default() -> Self {
        Limits {
            run: Duration::from_secs(300),
            hold: Duration::from_secs(120),
            tick: Duration::from_secs(1),
        }
    }
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Told to stop, it stopped once the release entry existed.
    Released,
    /// Told to stop, it stopped at [`Limits::hold`] with no release entry.
    AtBound,
    /// Never told to stop: it stopped at [`Limits::run`].
    NeverStopped,
}

/// The process's life once the dispatcher started it: RUNNING; on a stop (a message on `stop`,
/// or its sender gone) STOP_PENDING until `released()`, at most `limits.hold`; then STOPPED.
pub fn serve(
    report: &mut dyn FnMut(Report),
    stop: &Receiver<()>,
    released: &dyn Fn() -> bool,
    limits: Limits,
) -> Ended {
    report(Report::Running);
    if let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(limits.run) {
        report(Report::Stopped);
        return Ended::NeverStopped;
    }
    let since = Instant::now();
    let mut checkpoint = 0;
    let ended = loop {
        checkpoint += 1;
        report(Report::StopPending(checkpoint));
        if released() {
            break Ended::Released;
        }
        let held = since.elapsed();
        if held >= limits.hold {
            break Ended::AtBound;
        }
        std::thread::sleep(limits.tick.min(limits.hold - held));
    };
    report(Report::Stopped);
    ended
}

#[cfg(windows)]
pub use glue::dispatch;

/// The service dispatcher's side: thin, everything it decides is [`serve`]'s.
#[cfg(windows)]
mod glue {
    use super::{Limits, Report, WAIT_HINT, serve};
    use std::ffi::OsString;
    use std::sync::Mutex;
    use std::sync::mpsc;
    use std::time::Duration;
    use windows_service::service::{
        ServiceControl, ServiceControlAccept, ServiceExitCode, ServiceState, ServiceStatus,
        ServiceType,
    };
    use windows_service::service_control_handler::{self, ServiceControlHandlerResult};
    use windows_service::{define_windows_service, service_dispatcher};

    /// The release entry, handed from `main` to the entry point the SCM calls on its own thread.
    static RELEASE: Mutex<Option<String>> = Mutex::new(None);

    define_windows_service!(ffi_service_main, service_main);

    /// Connects to the SCM and runs the service until it has stopped. Fails (the text says why)
    /// when the process was not started by the SCM: StartServiceCtrlDispatcherW answers
    /// ERROR_FAILED_SERVICE_CONTROLLER_CONNECT.
    pub fn dispatch(release: String) -> Result<(), String> {
        if let Ok(mut r) = RELEASE.lock() {
            *r = Some(release);
        }
        // For a SERVICE_WIN32_OWN_PROCESS service the dispatch table's name is ignored
        // (SERVICE_TABLE_ENTRYW, `lpServiceName`); the real one arrives as the first argument.
        service_dispatcher::start("csi-proxy-selftest", ffi_service_main)
            .map_err(|e| format!("StartServiceCtrlDispatcherW: {e}"))
    }

    fn service_main(args: Vec<OsString>) {
        let release = RELEASE.lock().ok().and_then(|mut r| r.take());
        let name = args.first().cloned().unwrap_or_default();
        let (tx, rx) = mpsc::channel();
        let handler = move |control| match control {
            ServiceControl::Stop => {
                let _ = tx.send(());
                ServiceControlHandlerResult::NoError
            }
            // Interrogate is answered NO_ERROR; the SCM then reads the last status.
            ServiceControl::Interrogate => ServiceControlHandlerResult::NoError,
            _ => ServiceControlHandlerResult::NotImplemented,
        };
        // Without a status handle nothing can be reported; the SCM sees the process end.
        let Ok(status) = service_control_handler::register(&name, handler) else {
            return;
        };
        let mut report = |r: Report| {
            let (state, accept, checkpoint, hint) = match r {
                Report::Running => (
                    ServiceState::Running,
                    ServiceControlAccept::STOP,
                    0,
                    Duration::ZERO,
                ),
                Report::StopPending(c) => (
                    ServiceState::StopPending,
                    ServiceControlAccept::empty(),
                    c,
                    WAIT_HINT,
                ),
                Report::Stopped => (
                    ServiceState::Stopped,
                    ServiceControlAccept::empty(),
                    0,
                    Duration::ZERO,
                ),
            };
            let _ = status.set_service_status(ServiceStatus {
                service_type: ServiceType::OWN_PROCESS,
                current_state: state,
                controls_accepted: accept,
                exit_code: ServiceExitCode::NO_ERROR,
                checkpoint,
                wait_hint: hint,
                process_id: None,
            });
        };
        let released = || {
            release
                .as_deref()
                .is_some_and(|p| std::path::Path::new(p).exists())
        };
        serve(&mut report, &rx, &released, Limits::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    fn short() -> Limits {
        Limits {
            run: Duration::from_secs(5),
            hold: Duration::from_millis(300),
            tick: Duration::from_millis(20),
        }
    }

    /// Told to stop, it holds STOP_PENDING, its checkpoint growing, until released; then
    /// STOPPED.
    #[test]
    fn a_stop_is_held_until_the_release_then_completes() {
        let (tx, rx) = mpsc::channel();
        let free = AtomicBool::new(false);
        let mut seen = Vec::new();
        tx.send(()).unwrap();
        let limits = Limits {
            hold: Duration::from_secs(5),
            ..short()
        };
        let ended = serve(
            &mut |r| {
                seen.push(r);
                if seen.len() == 5 {
                    free.store(true, Ordering::SeqCst);
                }
            },
            &rx,
            &|| free.load(Ordering::SeqCst),
            limits,
        );
        assert_eq!(ended, Ended::Released);
        assert_eq!(
            seen,
            [
                Report::Running,
                Report::StopPending(1),
                Report::StopPending(2),
                Report::StopPending(3),
                Report::StopPending(4),
                Report::Stopped
            ]
        );
    }

    /// The release already there, the stop completes at once.
    #[test]
    fn released_already_it_stops_at_once() {
        let (tx, rx) = mpsc::channel();
        tx.send(()).unwrap();
        let mut seen = Vec::new();
        let ended = serve(&mut |r| seen.push(r), &rx, &|| true, short());
        assert_eq!(ended, Ended::Released);
        assert_eq!(
            seen,
            [Report::Running, Report::StopPending(1), Report::Stopped]
        );
    }

    /// Never released, it stops at its bound; a lost control handler counts as a stop.
    #[test]
    fn never_released_it_stops_at_its_bound() {
        let (tx, rx) = mpsc::channel::<()>();
        drop(tx);
        let t = Instant::now();
        let mut last = None;
        let ended = serve(&mut |r| last = Some(r), &rx, &|| false, short());
        assert_eq!(ended, Ended::AtBound);
        assert_eq!(last, Some(Report::Stopped));
        assert!(t.elapsed() >= short().hold, "{:?}", t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }

    /// Never told to stop, it stops by itself at its run bound.
    #[test]
    fn never_stopped_it_stops_by_itself() {
        let (_tx, rx) = mpsc::channel();
        let limits = Limits {
            run: Duration::from_millis(50),
            ..short()
        };
        let mut seen = Vec::new();
        let ended = serve(&mut |r| seen.push(r), &rx, &|| false, limits);
        assert_eq!(ended, Ended::NeverStopped);
        assert_eq!(seen, [Report::Running, Report::Stopped]);
    }
}
