//! The daemon: every group-version endpoint in one process, started together, stopped together.

use crate::endpoint_server::serve as serve_endpoint;
use crate::limits::ConnectionCaps;
use crate::transport::accept::AcceptBackoff;
use crate::transport::ack_hold::AckHold;
use crate::transport::authority::AuthorityFix;
use crate::transport::capped::{Capped, capped};
use crate::transport::handshake_timeout::HandshakeTimeout;
use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_stream::Stream;
use tonic::service::Routes;

/// How long in-flight requests get to finish after a stop is requested.
pub const GRACE: Duration = Duration::from_secs(4);

/// The runtime the daemon runs on: one async worker per CPU, timers and I/O.
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("csi-proxy")
        .build()
}

/// One served group-version.
pub struct Endpoint {
    /// API group, e.g. `disk`.
    pub group: &'static str,
    /// API version, e.g. `v1beta3`.
    pub version: &'static str,
    /// The single gRPC service answering on this endpoint.
    pub routes: Routes,
    /// Where it is named: the daemon's default place, or a profile's own.
    pub place: Place,
}

/// Where an endpoint's name lies: at the daemon's default place (`--socket-dir`, upstream's
/// pipe names), or at one profile's own ([`csi_proxy_core::profiles`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The default: `<socket dir>/csi-proxy-<group>-<version>.sock`, `\\.\pipe\csi-proxy-<group>-<version>`.
    Default,
    /// A profile's socket directory, in place of the default one.
    #[cfg(unix)]
    Dir(std::path::PathBuf),
    /// A profile's pipe prefix: `\\.\pipe\<prefix>-<group>-<version>`.
    #[cfg(windows)]
    Prefix(String),
}

/// Where endpoints listen.
#[derive(Debug, Clone)]
pub enum Listen {
    /// Unix sockets `<dir>/csi-proxy-<group>-<version>.sock`, optionally owned by group `gid`.
    #[cfg(unix)]
    Unix {
        /// The socket directory.
        dir: std::path::PathBuf,
        /// Owning group of the sockets.
        gid: Option<u32>,
    },
    /// Named pipes `\\.\pipe\csi-proxy-<group>-<version>` with this security descriptor.
    #[cfg(windows)]
    Pipe {
        /// SDDL string of the pipes' security descriptor.
        sddl: String,
    },
}

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// An endpoint could not be created (another daemon running, bad permissions, ...).
    #[error("cannot listen for {group} {version}: {source}")]
    Listen {
        /// API group.
        group: &'static str,
        /// API version.
        version: &'static str,
        /// The OS error, with the socket or pipe name.
        source: io::Error,
    },
    /// The sockets systemd passed (socket activation) cannot be used.
    #[error("{0}")]
    Inherited(io::Error),
    /// An endpoint's server failed while running.
    #[error("the {group} {version} endpoint failed: {message}")]
    Serve {
        /// API group.
        group: &'static str,
        /// API version.
        version: &'static str,
        /// What failed.
        message: String,
    },
}

/// Where and how the endpoints listen, as one line: what a take-over must share with the
/// daemon it replaces ([`crate::handoff`]).
pub fn listen_key(listen: &Listen) -> String {
    match listen {
        #[cfg(unix)]
        Listen::Unix { dir, gid } => format!("unix sockets in {} group {gid:?}", dir.display()),
        #[cfg(windows)]
        Listen::Pipe { sddl } => format!("named pipes with SDDL {sddl}"),
    }
}

/// The name a client uses to reach an endpoint at `place`: a socket path or a pipe name.
pub fn endpoint_name(listen: &Listen, place: &Place, group: &str, version: &str) -> String {
    match listen {
        #[cfg(unix)]
        Listen::Unix { dir, .. } => {
            crate::transport::unix::socket_path(socket_dir(dir, place), group, version)
                .display()
                .to_string()
        }
        #[cfg(windows)]
        Listen::Pipe { .. } => match place {
            Place::Prefix(prefix) => format!(r"\\.\pipe\{prefix}-{group}-{version}"),
            Place::Default => format!(r"\\.\pipe\csi-proxy-{group}-{version}"),
        },
    }
}

/// The socket directory of an endpoint at `place`, `default` being the daemon's.
#[cfg(unix)]
fn socket_dir<'a>(default: &'a std::path::Path, place: &'a Place) -> &'a std::path::Path {
    match place {
        Place::Dir(dir) => dir,
        Place::Default => default,
    }
}

/// Serves every endpoint until `shutdown` completes (or an endpoint fails), then stops them all
/// within [`GRACE`] and removes the socket files. All listeners are created before anything is
/// served: if one cannot be created, none is left behind and the error names it.
pub async fn serve(
    endpoints: Vec<Endpoint>,
    listen: Listen,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    serve_and_tell(endpoints, listen, || {}, shutdown).await
}

/// As [`serve`], calling `ready` once every endpoint is bound and served (a service manager is
/// told "running" only then).
pub async fn serve_and_tell(
    endpoints: Vec<Endpoint>,
    listen: Listen,
    ready: impl FnOnce(),
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    serve_with(endpoints, listen, Names::Fresh, ready, shutdown).await
}

/// A daemon in this process, on Unix sockets in `dir` (no socket group), as tests and
/// benchmarks start one: the serving future (spawned on whichever runtime the caller picks), a
/// receiver told once every endpoint is served, and the sender that stops it (dropping it stops
/// it too).
#[cfg(unix)]
pub fn serve_in_dir(
    endpoints: Vec<Endpoint>,
    dir: std::path::PathBuf,
) -> (
    impl Future<Output = Result<(), DaemonError>> + Send + 'static,
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready) = tokio::sync::oneshot::channel::<()>();
    let serving = serve_and_tell(
        endpoints,
        Listen::Unix { dir, gid: None },
        move || {
            let _ = ready_tx.send(());
        },
        async move {
            let _ = stopped.await;
        },
    );
    (serving, ready, stop)
}

/// How the endpoints get their names.
pub enum Names {
    /// Each is bound at its name (a stale socket replaced, a live one refused).
    Fresh,
    /// A hand-off (see [`crate::handoff`]): each is bound beside its name, all are served, and
    /// only then is each renamed over its name; the function is told how that went (an error
    /// names the rename that failed: the names before it are this daemon's, the others still
    /// the serving daemon's).
    TakeOver(Box<dyn FnOnce(Result<(), String>) + Send>),
}

/// As [`serve_and_tell`], the names given as `names` says.
pub async fn serve_with(
    endpoints: Vec<Endpoint>,
    listen: Listen,
    names: Names,
    ready: impl FnOnce(),
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = JoinSet::new();
    let (bound, mut owned) = bind_all(&endpoints, &listen, matches!(names, Names::TakeOver(_)))?;

    let in_all = crate::limits::connection_budget(crate::limits::descriptor_limit());
    let total = ConnectionCaps::daemon(in_all);
    let per_endpoint = crate::limits::CONNECTIONS_PER_ENDPOINT.min(in_all);
    tracing::info!(
        connections = in_all,
        per_endpoint,
        "connection caps (descriptors kept in reserve: {})",
        crate::limits::DESCRIPTOR_RESERVE
    );
    let mut health = Vec::with_capacity(endpoints.len());
    for (ep, incoming) in endpoints.into_iter().zip(bound) {
        let caps = ConnectionCaps::new(per_endpoint, total.clone(), in_all);
        let mut stop = stop_rx.clone();
        let (group, version) = (ep.group, ep.version);
        let name = endpoint_name(&listen, &ep.place, group, version);
        let (reporter, routes) = with_health(ep).await;
        health.push(reporter);
        servers.spawn(async move {
            let signal = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            match incoming {
                #[cfg(unix)]
                Incoming::Unix(l) => {
                    let accepted = tokio_stream::wrappers::UnixListenerStream::new(l);
                    serve_endpoint(routes, connections(accepted, caps, name), signal).await;
                }
                #[cfg(windows)]
                Incoming::Pipe(l) => {
                    serve_endpoint(routes, connections(l.into_incoming(), caps, name), signal)
                        .await;
                }
            }
            (group, version)
        });
    }
    if let Names::TakeOver(renamed) = names {
        renamed(crate::transport::names::rename_all(&mut owned));
    }
    // The endpoints served, whoever bound their sockets (under socket activation systemd
    // did, and this daemon owns no name).
    tracing::info!(endpoints = servers.len(), "serving");
    ready();

    // An endpoint that ends before a stop request is a failure, also when it ends "cleanly"
    // (its listener gave up): the daemon must not stop with success and leave a service
    // manager thinking it was asked to.
    let mut failure = None;
    tokio::select! {
        () = shutdown => tracing::info!("stop requested"),
        Some(done) = servers.join_next() => failure = ended(done, true),
    }
    // Health checkers see NOT_SERVING while in-flight requests finish.
    for (reporter, service) in &health {
        for name in ["", service.as_str()] {
            reporter
                .set_service_status(name, tonic_health::ServingStatus::NotServing)
                .await;
        }
    }
    let _ = stop_tx.send(true);
    let deadline = tokio::time::sleep(GRACE);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            next = servers.join_next() => match next {
                Some(done) => {
                    if failure.is_none() {
                        failure = ended(done, false);
                    }
                }
                None => break,
            },
            () = &mut deadline => {
                tracing::warn!(remaining = servers.len(), "requests still running after the grace period; stopping them");
                servers.abort_all();
                while servers.join_next().await.is_some() {}
                break;
            }
        }
    }
    cleanup(&owned);
    failure.map_or(Ok(()), Err)
}

/// What one endpoint's server task ending means for the daemon: a panic, or, before any stop
/// request (`early`), ending at all (an endpoint's loop ends only when its listener gives up or
/// it is asked to stop). `None`: it stopped because it was asked to.
fn ended(
    done: Result<(&'static str, &'static str), tokio::task::JoinError>,
    early: bool,
) -> Option<DaemonError> {
    match done {
        Ok((group, version)) if early => Some(DaemonError::Serve {
            group,
            version,
            message: "it stopped accepting connections without a stop request".into(),
        }),
        Ok(_) => None,
        Err(join) => Some(DaemonError::Serve {
            group: "?",
            version: "?",
            message: join.to_string(),
        }),
    }
}

/// An endpoint's accepted connections as served: accept errors pause instead of spinning,
/// connections past the caps are closed, a connection that never starts HTTP/2 is closed,
/// `:authority` is fixed for Go clients, and a PING acknowledgement leaves with the answer
/// that follows it.
fn connections<C>(
    accepted: impl Stream<Item = io::Result<C>>,
    caps: ConnectionCaps,
    endpoint: String,
) -> impl Stream<Item = io::Result<AuthorityFix<HandshakeTimeout<AckHold<Capped<C>>>>>> {
    let accepted = AcceptBackoff::new(accepted, endpoint.clone());
    tokio_stream::StreamExt::map(capped(accepted, caps, endpoint), |c| {
        c.map(|c| AuthorityFix::new(HandshakeTimeout::new(AckHold::new(c))))
    })
}

/// The endpoint's routes plus the standard gRPC health service (`grpc.health.v1.Health`),
/// answering SERVING for the endpoint's own service (e.g. `v1.Disk`) and for `""` (the whole
/// server). Each endpoint has its own reporter: asking one endpoint about another endpoint's
/// service answers NOT_FOUND, as a gRPC server that does not serve it would.
async fn with_health(ep: Endpoint) -> ((tonic_health::server::HealthReporter, String), Routes) {
    let (reporter, server) = tonic_health::server::health_reporter();
    let service = crate::metrics::service_name(ep.group, ep.version);
    reporter
        .set_service_status(&service, tonic_health::ServingStatus::Serving)
        .await;
    ((reporter, service), ep.routes.add_service(server))
}

enum Incoming {
    #[cfg(unix)]
    Unix(tokio::net::UnixListener),
    #[cfg(windows)]
    Pipe(crate::transport::pipe::PipeListener),
}

/// Creates every endpoint's listener at its name or (`beside`, a take-over) beside it, or takes
/// the one systemd passed for its socket path (socket activation). Returns the listeners and
/// the names this process made, the only ones it removes when it stops (a passed socket stays
/// with systemd across restarts). On a failure removes what it made and names the endpoint.
fn bind_all(
    endpoints: &[Endpoint],
    listen: &Listen,
    beside: bool,
) -> Result<(Vec<Incoming>, Vec<crate::transport::names::Owned>), DaemonError> {
    let mut bound = Vec::with_capacity(endpoints.len());
    let mut created = Vec::new();
    #[cfg(unix)]
    let mut inherited =
        crate::transport::activation::Inherited::take().map_err(DaemonError::Inherited)?;
    for ep in endpoints {
        let err = |source| DaemonError::Listen {
            group: ep.group,
            version: ep.version,
            source,
        };
        let name = endpoint_name(listen, &ep.place, ep.group, ep.version);
        let r = match listen {
            #[cfg(unix)]
            Listen::Unix { dir, gid } => {
                let dir = socket_dir(dir, &ep.place);
                let path = crate::transport::unix::socket_path(dir, ep.group, ep.version);
                match inherited.listener_for(&path) {
                    // systemd holds the socket across restarts: nothing to bind, rename or
                    // remove, also in a take-over.
                    Ok(Some(_)) if beside => Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "systemd passed the socket {}, which another daemon serves now: \
                             a daemon with passed sockets does not take over (restart it with \
                             systemctl restart once the other one has stopped)",
                            path.display()
                        ),
                    )),
                    Ok(Some(passed)) => {
                        bound.push(Incoming::Unix(passed));
                        continue;
                    }
                    Ok(None) => crate::transport::unix::ensure_dir(dir)
                        .and_then(|()| crate::transport::names::bind_unix(&name, *gid, beside))
                        .map(|(l, owned)| (Incoming::Unix(l), owned)),
                    Err(e) => Err(e),
                }
            }
            #[cfg(windows)]
            Listen::Pipe { sddl } => {
                crate::transport::names::bind_pipe(&name, sddl, beside).map(|l| {
                    (
                        Incoming::Pipe(l),
                        crate::transport::names::Owned::pipe(&name),
                    )
                })
            }
        };
        match r {
            Ok((i, owned)) => {
                created.push(owned);
                bound.push(i);
            }
            Err(e) => {
                drop(bound);
                cleanup(&created);
                return Err(err(e));
            }
        }
    }
    #[cfg(unix)]
    inherited.close_unused();
    Ok((bound, created))
}

/// Removes the socket files this daemon made and still owns (see
/// [`crate::transport::names::Owned::remove_if_ours`]); pipes vanish with their last handle.
fn cleanup(owned: &[crate::transport::names::Owned]) {
    for o in owned {
        o.remove_if_ours();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before, an endpoint whose listener gave up ended "cleanly", `serve` returned Ok, and the
    /// Windows service reported STOPPED with exit code 0: service recovery never restarted it.
    #[test]
    fn an_endpoint_ending_before_a_stop_request_is_a_failure() {
        let e = ended(Ok(("disk", "v1")), true).expect("a failure");
        assert!(
            e.to_string().contains("disk v1") && e.to_string().contains("without a stop request"),
            "{e}"
        );
        assert!(
            ended(Ok(("disk", "v1")), false).is_none(),
            "after a stop request it is what was asked"
        );
    }
}
