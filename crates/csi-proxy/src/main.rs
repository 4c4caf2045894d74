//! The csi-proxy daemon.

mod flags;
mod hosts;
mod klog;
mod log_file;
mod profiles;
mod service_events;
#[cfg_attr(not(windows), allow(dead_code))] // the Windows service drives it; Linux tests it
mod service_lifecycle;
#[cfg(windows)]
mod windows_service;

use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_server::daemon::{self, Listen};
use csi_proxy_server::handoff;
use csi_proxy_server::registry;
use service_events::ServiceEvents;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn main() -> ExitCode {
    let flags = match parse_flags(std::env::args_os(), service_events::open) {
        Ok(f) => f,
        Err(e) => e.exit(),
    };
    let outputs = match init_logging(&flags) {
        Ok(outputs) => outputs,
        Err(e) => {
            eprintln!("csi-proxy: {e}");
            if flags.event_log() {
                service_events::open().did_not_start(&e);
            }
            return ExitCode::from(2);
        }
    };
    csi_proxy_server::call::set_verbosity(flags.request_verbosity());
    #[cfg(windows)]
    if flags.windows_service {
        return windows_service::run(flags);
    }
    // Outside service mode the console control events stop the daemon gracefully: installed
    // before anything is served, so no event finds only the default handler (ExitProcess).
    #[cfg(windows)]
    let _ = console::asked();
    let events = if flags.event_log() {
        service_events::open()
    } else {
        ServiceEvents::none()
    };
    let wait_after_hand_off = flags.wait_after_hand_off;
    let result = run_until(flags, || events.started(), shutdown_signal(), None);
    // The runtime has ended: every host call has returned.
    if result.is_ok() && wait_after_hand_off && HANDED_OFF.load(Ordering::Relaxed) {
        wait_to_be_stopped();
    }
    events.stopped(&result);
    #[cfg(windows)]
    console::stopped();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Logged as an error already (run_until); printed again only where that line
            // did not reach stderr.
            if !outputs.stderr_gets(klog::Severity::Error) {
                eprintln!("csi-proxy: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Parses the process arguments (Go spelling); flags that do not parse are also written to the
/// Event Log (opened by `events`) when they ask for it, since a service's stderr goes nowhere.
fn parse_flags(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    events: impl FnOnce() -> ServiceEvents,
) -> Result<flags::Flags, clap::Error> {
    use clap::Parser;
    let args = flags::go_style(args);
    flags::Flags::try_parse_from(&args).inspect_err(|e| {
        // --help and --version are errors to clap too, but not failures.
        if e.use_stderr() && flags::asks_for_event_log(&args) {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            let cause = first.strip_prefix("error: ").unwrap_or(first);
            events().did_not_start(&format!("bad flags: {cause}"));
        }
    })
}

/// Runs the daemon on a new runtime until `shutdown` completes or an endpoint fails; `ready` is
/// called once every endpoint is served. With `stop_limit`, host calls still running after the
/// endpoints closed are waited for that long at most (a Windows service must finish stopping
/// within what it told the SCM); without, they are waited for (a format is never cut short).
fn run_until(
    flags: flags::Flags,
    ready: impl FnOnce(),
    shutdown: impl std::future::Future<Output = ()>,
    stop_limit: Option<std::time::Duration>,
) -> Result<(), String> {
    let runtime = daemon::runtime().map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let r = runtime.block_on(run(flags, ready, shutdown));
    if let Err(e) = &r {
        tracing::error!("{e}");
    }
    if let Some(limit) = stop_limit {
        runtime.shutdown_timeout(limit);
    }
    r
}

async fn run(
    flags: flags::Flags,
    ready: impl FnOnce(),
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    tracing::info!(version = flags::VERSION, "starting csi-proxy");
    if flags.windows_service && !cfg!(windows) {
        return Err("--windows-service is only meaningful on Windows".into());
    }
    if flags.event_log() && !cfg!(windows) {
        return Err("--windows-event-log is only meaningful on Windows".into());
    }
    #[cfg(target_os = "linux")]
    csi_proxy_host::linux::namespace::check_host_mount_namespace()?;
    // Each client connection is a descriptor; see csi_proxy_host::linux::limits.
    #[cfg(target_os = "linux")]
    match csi_proxy_host::linux::limits::raise_open_file_limit() {
        Ok((before, after)) if before != after => {
            tracing::info!(before, after, "raised the open-file limit")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
    #[cfg(target_os = "linux")]
    tokio::spawn(release_memory_when_quiet());
    let policy = PathPolicy::new(
        PathStyle::native(),
        &flags.kubelet_path,
        &flags.working_dirs,
    )
    .map_err(|e| format!("invalid --kubelet-path/--working-dir: {e}"))?;
    // The hand-off locks come first: a start refused because another daemon serves binds and
    // touches nothing.
    let state = hosts::state_dir(&flags, &policy)?;
    let listen = listen(&flags)?;
    let start =
        handoff::start(&state, flags.take_over, &daemon::listen_key(&listen)).map_err(|r| {
            ANOTHER_SERVES.store(r.another_serves, Ordering::Relaxed);
            String::from(r)
        })?;
    let taking_over = matches!(start, handoff::Start::TakeOver(_));
    if taking_over {
        // No call of ours takes a disk, path or share until the previous daemon has exited.
        csi_proxy_core::locks::predecessor_running();
    }
    // Empty = off: nothing listens. Bound before the endpoints, as upstream does, so a bad
    // address fails start-up instead of leaving a daemon without the metrics it was asked for.
    // Taking over, the previous daemon still holds the address: bound once it has exited.
    let mut metrics_later = None;
    if !flags.metrics_bind_address.is_empty() {
        match csi_proxy_server::metrics::bind(&flags.metrics_bind_address).await {
            Ok(listener) => serve_metrics(listener),
            Err(e) if taking_over && e.kind() == std::io::ErrorKind::AddrInUse => {
                metrics_later = Some(flags.metrics_bind_address.clone());
            }
            Err(e) => return Err(format!("--metrics-bind-address: {e}")),
        }
    }
    tracing::info!(roots = ?policy.roots(), require_privacy = flags.require_privacy, "path roots");
    let services = hosts::services(Arc::new(policy), &flags)?;
    let (endpoints, owners) = match &flags.profiles {
        None => (registry::endpoints(&services), None),
        Some(file) => {
            let (endpoints, owners) = profiles::endpoints(&services, &flags, file, &state)?;
            (endpoints, Some(owners))
        }
    };
    // Serving (now, or once taken over), this daemon stops when the next one asks.
    let (serving_tx, serving_rx) = tokio::sync::oneshot::channel::<()>();
    let asked = {
        let state = state.clone();
        async move {
            if serving_rx.await.is_err() {
                return std::future::pending().await;
            }
            let pid = handoff::requested(state).await;
            HANDED_OFF.store(true, Ordering::Relaxed);
            tracing::info!(
                next = pid,
                "the next csi-proxy took over the endpoints; stopping"
            );
        }
    };
    let shutdown = async move {
        tokio::select! {
            () = shutdown => {}
            () = asked => {}
        }
    };
    let names = match start {
        handoff::Start::Fresh(lock) => {
            lock.hold_until_exit();
            let _ = serving_tx.send(());
            daemon::Names::Fresh
        }
        handoff::Start::TakeOver(t) => daemon::Names::TakeOver(Box::new(move |renamed| {
            tokio::spawn(take_over(t, renamed, serving_tx, metrics_later, owners));
        })),
    };
    daemon::serve_with(endpoints, listen, names, ready, shutdown)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!("stopped");
    Ok(())
}

/// Set when the stop was a hand-off to a --take-over daemon.
static HANDED_OFF: AtomicBool = AtomicBool::new(false);

/// Set when the start was refused only because another daemon serves with this state
/// directory (and this one was not asked to take over).
static ANOTHER_SERVES: AtomicBool = AtomicBool::new(false);

/// Whether the start was refused because another daemon serves ([`ANOTHER_SERVES`]).
fn another_serves() -> bool {
    ANOTHER_SERVES.load(Ordering::Relaxed)
}

/// --wait-after-hand-off: holds nothing (no endpoint, no metrics address, no lock) and waits
/// for the stop signal, so a supervisor that restarts an exited daemon has nothing to restart
/// until it stops this one.
fn wait_to_be_stopped() {
    handoff::release();
    tracing::info!("handed off; waiting to be stopped (--wait-after-hand-off)");
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(shutdown_signal()),
        Err(e) => tracing::error!("cannot wait for the stop signal: {e}; exiting"),
    }
}

fn serve_metrics(listener: tokio::net::TcpListener) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(address = %addr, "serving metrics on /metrics");
    }
    tokio::spawn(csi_proxy_server::metrics::serve(listener));
}

/// The rest of a hand-off once every endpoint is served beside the previous daemon's and
/// renamed over them (`renamed`): ask the previous daemon to stop, wait for it to exit, then
/// let calls that take objects through, bind the metrics address it held, and from then on
/// watch for a request of the next daemon (`serving`).
async fn take_over(
    t: handoff::TakeOver,
    renamed: Result<(), String>,
    serving: tokio::sync::oneshot::Sender<()>,
    metrics: Option<String>,
    owners: Option<Arc<csi_proxy_core::profiles::owners::Owners>>,
) {
    match renamed {
        Ok(()) => {
            if let Err(e) = t.request() {
                tracing::error!("{e}; the previous csi-proxy keeps running beside this one");
            }
        }
        // Every path is served (the ones renamed by this daemon, the others by the previous
        // one), so nobody is asked to stop: the operator decides.
        Err(e) => tracing::error!(
            "taking over failed: {e}; not asking the previous csi-proxy to stop; stop it (SIGTERM) and start csi-proxy again to serve every endpoint from one daemon"
        ),
    }
    let lock = match t.wait().await {
        Ok(lock) => lock,
        Err(e) => {
            tracing::error!("{e}");
            return;
        }
    };
    lock.hold_until_exit();
    // What the previous daemon claimed and held after this one read the book is kept.
    if let Some(owners) = owners
        && let Err(e) = owners.merge_stored()
    {
        tracing::error!("profiles: {e}");
    }
    csi_proxy_core::locks::predecessor_exited();
    tracing::info!("the previous csi-proxy has exited; this one serves alone");
    let _ = serving.send(());
    if let Some(addr) = metrics {
        match csi_proxy_server::metrics::bind(&addr).await {
            Ok(listener) => serve_metrics(listener),
            Err(e) => tracing::error!("--metrics-bind-address: {e}; serving without metrics"),
        }
    }
}

#[cfg(unix)]
fn listen(flags: &flags::Flags) -> Result<Listen, String> {
    let gid = flags
        .socket_group
        .as_deref()
        .map(csi_proxy_server::transport::unix::resolve_group)
        .transpose()
        .map_err(|e| format!("--socket-group: {e}"))?;
    Ok(Listen::Unix {
        dir: flags.socket_dir.clone().into(),
        gid,
    })
}

#[cfg(windows)]
fn listen(flags: &flags::Flags) -> Result<Listen, String> {
    Ok(Listen::Pipe {
        sddl: flags
            .pipe_sddl
            .clone()
            .unwrap_or_else(|| csi_proxy_server::transport::pipe::DEFAULT_PIPE_SDDL.to_string()),
    })
}

/// Completes on SIGINT or SIGTERM (Unix) or a console control event (Windows: [`console`]).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
    #[cfg(windows)]
    {
        let Some(asked) = console::asked() else {
            return std::future::pending().await;
        };
        let mut rx = asked.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(event) => {
                if let Some(e) = *event {
                    tracing::info!("{} received", e.name());
                }
            }
            Err(_) => std::future::pending().await,
        }
    }
}

/// Console control events outside service mode (a HostProcess pod, a console, a supervisor):
/// CTRL_C, CTRL_BREAK, CTRL_CLOSE, CTRL_LOGOFF and CTRL_SHUTDOWN each stop the daemon as
/// SIGTERM does on Linux. The handler of the last three holds its thread until the daemon has
/// stopped ([`console::stopped`]), because the system ends the process as soon as it returns;
/// the system's own limits on that wait are documented beside `time_limit` in the host crate
/// (CTRL_CLOSE 5 s; CTRL_LOGOFF and CTRL_SHUTDOWN 5 s for a process that is not a service;
/// Ctrl+C and Ctrl+Break none), and a drain longer than the event's limit is cut off there.
#[cfg(windows)]
mod console {
    use csi_proxy_host::windows::console::{ConsoleStop, CtrlEvent};
    use std::sync::OnceLock;
    use tokio::sync::watch;

    static ASKED: OnceLock<Option<watch::Sender<Option<CtrlEvent>>>> = OnceLock::new();

    /// The first event received (`None` until then); installs the handler on first use.
    /// `None` when the handler cannot be installed (said in the log): then only the default
    /// handler runs, and a stop ends the process at once.
    pub fn asked() -> Option<&'static watch::Sender<Option<CtrlEvent>>> {
        ASKED
            .get_or_init(|| {
                let (tx, _) = watch::channel(None);
                let stop = ConsoleStop::new(|e| {
                    if let Some(Some(tx)) = ASKED.get() {
                        tx.send_replace(Some(e));
                    }
                });
                match csi_proxy_host::windows::win32::console::install(stop) {
                    Ok(_) => Some(tx),
                    Err(e) => {
                        tracing::error!("{e}: a console stop will not be graceful");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The daemon has stopped: a handler thread held for an event that ends the process may
    /// return (the process then ends).
    pub fn stopped() {
        if let Some(stop) = csi_proxy_host::windows::win32::console::installed() {
            stop.stopped();
        }
    }
}

/// Sets up logging as klog would for these flags (see [`klog`]); the outputs, to tell whether
/// an error logged also reached stderr.
fn init_logging(flags: &flags::Flags) -> Result<Arc<klog::Outputs>, String> {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("CSI_PROXY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let config = flags.klog();
    let format = klog::KlogFormat::new(&config);
    let outputs = klog::Outputs::open(config)?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .event_format(format)
        .with_writer(klog::Sink(outputs.clone()))
        .init();
    Ok(outputs)
}

/// After a burst of requests, once none has started for a whole period, gives the freed heap
/// back to the system (see `csi_proxy_host::linux::memory`), so the daemon returns near its
/// idle size instead of staying at its peak.
#[cfg(target_os = "linux")]
async fn release_memory_when_quiet() {
    const PERIOD: std::time::Duration = std::time::Duration::from_secs(5);
    let mut tick = tokio::time::interval(PERIOD);
    let (mut seen, mut trimmed_at) = (0, 0);
    loop {
        tick.tick().await;
        let now = csi_proxy_server::call::requests_started();
        if now == seen && now != trimmed_at {
            let released =
                tokio::task::spawn_blocking(csi_proxy_host::linux::memory::release_free_memory)
                    .await
                    .unwrap_or(false);
            tracing::debug!(released, "quiet after requests: freed heap returned");
            trimmed_at = now;
        }
        seen = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_events::{Kind, Recorder, id};

    fn args(a: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("csi-proxy")
            .chain(a.iter().copied())
            .map(Into::into)
            .collect()
    }

    /// A bad flag under --windows-service is written to the Event Log naming the flag; without
    /// it, or for --help, nothing is written.
    #[test]
    fn a_bad_flag_of_the_service_is_an_event() {
        let rec = Recorder::default();
        let open = || ServiceEvents::to(rec.clone());
        assert!(parse_flags(args(&["-windows-service", "-log_fil=x"]), open).is_err());
        let got = rec.events();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1), (Kind::Error, id::FAILED));
        assert!(
            got[0].2.starts_with("csi-proxy did not start: bad flags: ")
                && got[0].2.contains("'--log_fil'"),
            "{got:?}"
        );
        let open = || ServiceEvents::to(rec.clone());
        assert!(parse_flags(args(&["-log_fil=x"]), open).is_err());
        let open = || ServiceEvents::to(rec.clone());
        assert!(parse_flags(args(&["-windows-service", "--help"]), open).is_err());
        let open = || ServiceEvents::to(rec.clone());
        assert!(parse_flags(args(&["-windows-service"]), open).is_ok());
        assert_eq!(rec.events().len(), 1);
    }
}
