//! What a service manager is told over the daemon's life, on every platform the same
//! (`windows_service.rs` turns it into SCM statuses; on Linux the tests watch it):
//! START_PENDING until every endpoint is bound, RUNNING then, STOP_PENDING as soon as a stop is
//! asked for with a new checkpoint every [`TICK`] while endpoints close and running host calls
//! finish (at most [`STOP_LIMIT`]), and STOPPED with a service-specific exit code when the
//! daemon failed ([`EXIT_FAILED`], [`EXIT_NO_FLAGS`], [`EXIT_PANICKED`]): every way out reports
//! STOPPED. "SetServiceStatus": a pending state's checkpoint must grow before its wait hint
//! passes, or the SCM takes the service for hung; SERVICE_STOPPED with a nonzero
//! `dwWin32ExitCode` is logged as the service terminating with that error (event 7023), so the
//! code must mean what it says: ours are service-specific (SERVICE_STATUS), not Win32 codes. A
//! service process that ends without reporting SERVICE_STOPPED is one the SCM finds gone.
//! Start, stop and a failure are also written as events (`service_events`).

use crate::flags::Flags;
use crate::service_events::ServiceEvents;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a new STOP_PENDING checkpoint is reported while stopping.
pub const TICK: Duration = Duration::from_secs(3);
/// How long host calls still running at stop are waited for before the process ends.
pub const STOP_LIMIT: Duration = Duration::from_secs(60);

/// Service-specific exit code: the daemon failed (it could not start, or stopped on an error).
pub const EXIT_FAILED: u32 = 1;
/// Service-specific exit code: the service entry point found no flags to run with.
pub const EXIT_NO_FLAGS: u32 = 2;
/// Service-specific exit code: the daemon panicked.
pub const EXIT_PANICKED: u32 = 3;

/// ERROR_SERVICE_SPECIFIC_ERROR: "The service has returned a service-specific error code."
pub const ERROR_SERVICE_SPECIFIC_ERROR: u32 = 1066;

/// `SERVICE_STATUS`'s `(dwWin32ExitCode, dwServiceSpecificExitCode)` for our exit code:
/// NO_ERROR for 0; otherwise ERROR_SERVICE_SPECIFIC_ERROR with the code in the second, as
/// SERVICE_STATUS documents ("The service sets this value to ERROR_SERVICE_SPECIFIC_ERROR to
/// indicate that an error occurred and the dwServiceSpecificExitCode member should be
/// checked"). Our codes are not Win32 error codes; 1 as one would read ERROR_INVALID_FUNCTION.
pub fn exit_codes(exit: u32) -> (u32, u32) {
    if exit == 0 {
        (0, 0)
    } else {
        (ERROR_SERVICE_SPECIFIC_ERROR, exit)
    }
}

/// A state the service manager is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Starting: the endpoints are not all bound yet.
    StartPending,
    /// Serving.
    Running,
    /// Stopping.
    StopPending,
    /// Stopped.
    Stopped,
}

/// The one way phases reach the service manager: reports are made one at a time, and none after
/// STOPPED. The STOP_PENDING ticker runs on its own thread; without this a tick that had checked
/// "still stopping" and was then preempted could report STOP_PENDING after STOPPED, and the SCM
/// would run its recovery on a service that stopped cleanly.
struct Reports {
    report: Box<dyn Fn(Phase, u32, u32) + Send + Sync>,
    stopped: Mutex<bool>,
}

impl Reports {
    fn new(report: impl Fn(Phase, u32, u32) + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            report: Box::new(report),
            stopped: Mutex::new(false),
        })
    }

    /// Reports `phase` unless STOPPED was reported already; `false` once it has been.
    fn report(&self, phase: Phase, checkpoint: u32, exit: u32) -> bool {
        let mut stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        if *stopped {
            return false;
        }
        (self.report)(phase, checkpoint, exit);
        *stopped = phase == Phase::Stopped;
        true
    }
}

/// Runs the daemon with `flags` until `stop` completes, reporting each phase through `reports`
/// (`phase`, `checkpoint`, `exit code`). `tick` is how often STOP_PENDING advances.
fn run_gated(
    flags: Flags,
    reports: Arc<Reports>,
    stop: impl Future<Output = ()>,
    tick: Duration,
    events: &ServiceEvents,
) {
    reports.report(Phase::StartPending, 1, 0);
    let (ticker, ready) = (reports.clone(), reports.clone());
    let result = crate::run_until(
        flags,
        move || {
            ready.report(Phase::Running, 0, 0);
            events.started();
        },
        async move {
            stop.await;
            ticker.report(Phase::StopPending, 1, 0);
            std::thread::spawn(move || {
                let mut checkpoint = 2;
                loop {
                    std::thread::sleep(tick);
                    if !ticker.report(Phase::StopPending, checkpoint, 0) {
                        break;
                    }
                    checkpoint += 1;
                }
            });
        },
        Some(STOP_LIMIT),
    );
    events.stopped(&result);
    reports.report(
        Phase::Stopped,
        0,
        stopped_exit(&result, crate::another_serves()),
    );
}

/// The exit code STOPPED carries. A failure code tells the service manager the service
/// failed, so its recovery actions apply (on Windows with `sc.exe failureflag csiproxy 1`):
/// SERVICE_FAILURE_ACTIONS_FLAG, "the failure actions are queued if ... it enters the
/// SERVICE_STOPPED state but the dwWin32ExitCode member of the SERVICE_STATUS structure is not
/// ERROR_SUCCESS". A start refused because another daemon serves (a take-over daemon, the
/// DaemonSet) is not such a failure: restarting it every few seconds would be refused the same
/// way forever, an Event Log error each time. It stops with 0 (NO_ERROR); the Event Log's
/// "stopped" error says why.
pub fn stopped_exit(result: &Result<(), String>, another_serves: bool) -> u32 {
    if result.is_ok() || another_serves {
        0
    } else {
        EXIT_FAILED
    }
}

/// [`run`] as a service entry point: without flags, or when the daemon panics, STOPPED is
/// still reported (with [`EXIT_NO_FLAGS`] or [`EXIT_PANICKED`]), never left unsaid.
pub fn run_reporting(
    flags: Option<Flags>,
    report: impl Fn(Phase, u32, u32) + Send + Sync + 'static,
    stop: impl Future<Output = ()>,
    tick: Duration,
    events: &ServiceEvents,
) {
    let reports = Reports::new(report);
    let Some(flags) = flags else {
        tracing::error!("the service entry point found no flags");
        events.did_not_start("the service entry point found no flags");
        reports.report(Phase::Stopped, 0, EXIT_NO_FLAGS);
        return;
    };
    let inner = reports.clone();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_gated(flags, inner, stop, tick, events)
    }));
    if ran.is_err() {
        tracing::error!("the daemon panicked; reporting the service stopped");
        events.stopped(&Err("the daemon panicked".into()));
        // Through the same gate: a STOP_PENDING tick still running cannot follow it.
        reports.report(Phase::Stopped, 0, EXIT_PANICKED);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::service_events::{Kind, Recorder, id};
    use clap::Parser;

    fn run(
        flags: Flags,
        report: impl Fn(Phase, u32, u32) + Send + Sync + 'static,
        stop: impl Future<Output = ()>,
        tick: Duration,
        events: &ServiceEvents,
    ) {
        run_gated(flags, Reports::new(report), stop, tick, events)
    }

    /// What was reported: phase, checkpoint, exit code, and whether the sockets were there.
    type Seen = Arc<Mutex<Vec<(Phase, u32, u32, bool)>>>;

    fn flags(dir: &std::path::Path) -> Flags {
        Flags::try_parse_from([
            "csi-proxy".to_string(),
            format!("--socket-dir={}", dir.join("run").display()),
            format!("--state-dir={}", dir.join("state").display()),
            format!("--kubelet-path={}", dir.join("kubelet").display()),
        ])
        .unwrap()
    }

    /// RUNNING only once the sockets are bound; STOP_PENDING at once on stop, STOPPED with exit
    /// code 0 after a clean stop; a daemon that cannot start reports STOPPED with exit code 1.
    /// The events say the same: started, stopped, or the failure with its cause.
    #[test]
    fn the_service_manager_is_told_the_truth() {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
            eprintln!("SKIPPED: the daemon's Linux start-up checks need root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kubelet")).unwrap();
        let sockets = dir.path().join("run");
        let seen: Seen = Arc::default();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (log, probe) = (seen.clone(), sockets.join("csi-proxy-volume-v1.sock"));
        let f = flags(dir.path());
        let recorder = Recorder::default();
        let events = ServiceEvents::to(recorder.clone());
        let daemon = std::thread::spawn(move || {
            run(
                f,
                move |p, c, e| log.lock().unwrap().push((p, c, e, probe.exists())),
                async move {
                    let _ = stop_rx.await;
                },
                Duration::from_millis(50),
                &events,
            )
        });
        for _ in 0..500 {
            // The start event follows RUNNING.
            if !recorder.events().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = recorder.events();
        assert_eq!(started.len(), 1, "{started:?}");
        assert_eq!(
            (started[0].0, started[0].1),
            (Kind::Information, id::STARTED)
        );

        // A second daemon on the same endpoints fails, and its failure event names the endpoint
        // already owned, as the log does.
        let second = Recorder::default();
        run(
            flags(dir.path()),
            |_, _, _| {},
            std::future::pending(),
            Duration::from_millis(50),
            &ServiceEvents::to(second.clone()),
        );
        let failed = second.events();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!((failed[0].0, failed[0].1), (Kind::Error, id::FAILED));
        assert!(
            failed[0]
                .2
                .starts_with("csi-proxy stopped: cannot listen for ")
                && failed[0].2.contains("is served by a running process"),
            "{failed:?}"
        );

        stop_tx.send(()).unwrap();
        daemon.join().unwrap();
        let events = recorder.events();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(
            events[1],
            (Kind::Information, id::STOPPED, "csi-proxy stopped".into())
        );
        let seen = seen.lock().unwrap().clone();
        let phases: Vec<Phase> = seen.iter().map(|s| s.0).collect();
        assert_eq!(phases.first(), Some(&Phase::StartPending), "{seen:?}");
        let running = seen.iter().find(|s| s.0 == Phase::Running).unwrap();
        assert!(
            running.3,
            "RUNNING was reported before the sockets were bound"
        );
        let stop_at = phases
            .iter()
            .position(|p| *p == Phase::StopPending)
            .unwrap();
        assert!(stop_at > phases.iter().position(|p| *p == Phase::Running).unwrap());
        assert_eq!(seen.last().map(|s| (s.0, s.2)), Some((Phase::Stopped, 0)));

        // A daemon that cannot start (its socket directory is a file) ends with exit code 1.
        let bad = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(bad.path().join("kubelet")).unwrap();
        std::fs::write(bad.path().join("run"), b"not a directory").unwrap();
        let seen: Arc<Mutex<Vec<(Phase, u32)>>> = Arc::default();
        let log = seen.clone();
        let recorder = Recorder::default();
        run(
            flags(bad.path()),
            move |p, _, e| log.lock().unwrap().push((p, e)),
            std::future::pending(),
            Duration::from_millis(50),
            &ServiceEvents::to(recorder.clone()),
        );
        assert_eq!(
            seen.lock().unwrap().last(),
            Some(&(Phase::Stopped, EXIT_FAILED))
        );
        let events = recorder.events();
        assert_eq!(
            events.len(),
            1,
            "no start event for a daemon that never served: {events:?}"
        );
        assert_eq!((events[0].0, events[0].1), (Kind::Error, id::FAILED));
        assert!(
            events[0]
                .2
                .contains(&bad.path().join("run").display().to_string())
        );
    }

    /// Once, the STOP_PENDING ticker checked "still stopping" and then reported without a lock, so
    /// a tick held up between the two reported STOP_PENDING after STOPPED. Here every tick's report
    /// is slow (as a preempted thread is), ticks come every millisecond, and nothing may be
    /// reported after STOPPED.
    #[test]
    fn no_stop_pending_is_reported_after_stopped() {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
            eprintln!("SKIPPED: the daemon's Linux start-up checks need root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kubelet")).unwrap();
        let seen: Arc<Mutex<Vec<(Phase, u32)>>> = Arc::default();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let recorder = Recorder::default();
        let events = ServiceEvents::to(recorder.clone());
        let (log, f) = (seen.clone(), flags(dir.path()));
        let daemon = std::thread::spawn(move || {
            run(
                f,
                move |p, c, _| {
                    if p == Phase::StopPending && c >= 2 {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    log.lock().unwrap().push((p, c));
                },
                async move {
                    let _ = stop_rx.await;
                },
                Duration::from_millis(1),
                &events,
            )
        });
        for _ in 0..500 {
            if !recorder.events().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        stop_tx.send(()).unwrap();
        daemon.join().unwrap();
        // Long enough for any tick still in its report to land.
        std::thread::sleep(Duration::from_millis(400));
        let seen = seen.lock().unwrap().clone();
        let stopped = seen.iter().position(|s| s.0 == Phase::Stopped);
        assert_eq!(
            stopped,
            Some(seen.len() - 1),
            "reported after STOPPED: {seen:?}"
        );
    }

    /// A start refused because another daemon serves stops with NO_ERROR (the SCM's failure
    /// actions, queued for a nonzero exit code with the failure-actions flag set, would
    /// restart it forever); any other failure stops with EXIT_FAILED.
    #[test]
    fn another_daemon_serving_is_not_a_failure_the_service_manager_retries() {
        let refused: Result<(), String> = Err("another csi-proxy (pid 7) is serving".into());
        assert_eq!(exit_codes(stopped_exit(&refused, true)), (0, 0));
        assert_eq!(stopped_exit(&refused, false), EXIT_FAILED);
        assert_eq!(stopped_exit(&Ok(()), false), 0);
    }

    /// Once, exit code 1 was reported as the Win32 code 1 (ERROR_INVALID_FUNCTION), and an entry
    /// point without flags returned without reporting SERVICE_STOPPED.
    #[test]
    fn every_way_out_reports_stopped_with_a_service_specific_code() {
        assert_eq!(exit_codes(0), (0, 0));
        assert_eq!(
            exit_codes(EXIT_FAILED),
            (ERROR_SERVICE_SPECIFIC_ERROR, EXIT_FAILED)
        );
        let seen: Arc<Mutex<Vec<(Phase, u32)>>> = Arc::default();
        let log = seen.clone();
        run_reporting(
            None,
            move |p, _, e| log.lock().unwrap().push((p, e)),
            std::future::pending(),
            Duration::from_millis(50),
            &ServiceEvents::none(),
        );
        assert_eq!(*seen.lock().unwrap(), [(Phase::Stopped, EXIT_NO_FLAGS)]);
        // A report that panics (as any part of the daemon may) still ends in STOPPED.
        let seen: Arc<Mutex<Vec<(Phase, u32)>>> = Arc::default();
        let log = seen.clone();
        let dir = tempfile::tempdir().unwrap();
        run_reporting(
            Some(flags(dir.path())),
            move |p, _, e| {
                log.lock().unwrap().push((p, e));
                assert_ne!(p, Phase::StartPending, "a panic while starting");
            },
            std::future::pending(),
            Duration::from_millis(50),
            &ServiceEvents::none(),
        );
        assert_eq!(
            seen.lock().unwrap().last(),
            Some(&(Phase::Stopped, EXIT_PANICKED))
        );
    }
}
