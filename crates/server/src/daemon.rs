//! The daemon: every group-version endpoint in one process, started together, stopped together.

use crate::transport::authority::AuthorityFix;
use crate::transport::deadline::HandshakeDeadline;
use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::service::Routes;

/// How long in-flight requests get to finish after a stop is requested.
pub const GRACE: Duration = Duration::from_secs(4);

/// One served group-version.
pub struct Endpoint {
    /// API group, e.g. `disk`.
    pub group: &'static str,
    /// API version, e.g. `v1beta3`.
    pub version: &'static str,
    /// The single gRPC service answering on this endpoint.
    pub routes: Routes,
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

/// The name a client uses to reach an endpoint: a socket path or a pipe name.
pub fn endpoint_name(listen: &Listen, group: &str, version: &str) -> String {
    match listen {
        #[cfg(unix)]
        Listen::Unix { dir, .. } => crate::transport::unix::socket_path(dir, group, version)
            .display()
            .to_string(),
        #[cfg(windows)]
        Listen::Pipe { .. } => format!(r"\\.\pipe\csi-proxy-{group}-{version}"),
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = JoinSet::new();
    let bound = bind_all(&endpoints, &listen)?;
    let names: Vec<String> = endpoints
        .iter()
        .map(|e| endpoint_name(&listen, e.group, e.version))
        .collect();

    let mut health = Vec::with_capacity(endpoints.len());
    for (ep, incoming) in endpoints.into_iter().zip(bound) {
        let mut stop = stop_rx.clone();
        let (group, version) = (ep.group, ep.version);
        let (reporter, routes) = with_health(ep).await;
        health.push(reporter);
        let router = tonic::transport::Server::builder()
            .layer(call_deadline::Layer)
            .add_routes(routes);
        servers.spawn(async move {
            let signal = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let r = match incoming {
                #[cfg(unix)]
                Incoming::Unix(l) => {
                    let stream = tokio_stream::wrappers::UnixListenerStream::new(l);
                    let stream = tokio_stream::StreamExt::map(stream, |c| {
                        c.map(|c| AuthorityFix::new(HandshakeDeadline::new(c)))
                    });
                    router.serve_with_incoming_shutdown(stream, signal).await
                }
                #[cfg(windows)]
                Incoming::Pipe(l) => {
                    let stream = tokio_stream::StreamExt::map(l.into_incoming(), |c| {
                        c.map(|c| AuthorityFix::new(HandshakeDeadline::new(c)))
                    });
                    router.serve_with_incoming_shutdown(stream, signal).await
                }
            };
            (group, version, r)
        });
    }
    tracing::info!(endpoints = names.len(), "serving");

    let mut failure = None;
    tokio::select! {
        () = shutdown => tracing::info!("stop requested"),
        Some(done) = servers.join_next() => failure = Some(done),
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
                Some(done) => { failure.get_or_insert(done); }
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
    cleanup(&listen, &names);
    match failure {
        Some(Ok((group, version, Err(e)))) => Err(DaemonError::Serve {
            group,
            version,
            message: e.to_string(),
        }),
        Some(Err(join)) => Err(DaemonError::Serve {
            group: "?",
            version: "?",
            message: join.to_string(),
        }),
        _ => Ok(()),
    }
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

fn bind_all(endpoints: &[Endpoint], listen: &Listen) -> Result<Vec<Incoming>, DaemonError> {
    let mut bound = Vec::with_capacity(endpoints.len());
    let mut created = Vec::new();
    for ep in endpoints {
        let err = |source| DaemonError::Listen {
            group: ep.group,
            version: ep.version,
            source,
        };
        let r = match listen {
            #[cfg(unix)]
            Listen::Unix { dir, gid } => crate::transport::unix::ensure_dir(dir)
                .and_then(|()| {
                    let path = crate::transport::unix::socket_path(dir, ep.group, ep.version);
                    crate::transport::unix::bind(&path, *gid)
                })
                .map(Incoming::Unix),
            #[cfg(windows)]
            Listen::Pipe { sddl } => crate::transport::pipe::PipeListener::bind(
                &endpoint_name(listen, ep.group, ep.version),
                sddl,
            )
            .map(Incoming::Pipe),
        };
        match r {
            Ok(i) => {
                created.push(endpoint_name(listen, ep.group, ep.version));
                bound.push(i);
            }
            Err(e) => {
                drop(bound);
                cleanup(listen, &created);
                return Err(err(e));
            }
        }
    }
    Ok(bound)
}

fn cleanup(listen: &Listen, names: &[String]) {
    match listen {
        #[cfg(unix)]
        Listen::Unix { .. } => {
            for n in names {
                if let Err(e) = std::fs::remove_file(n)
                    && e.kind() != io::ErrorKind::NotFound
                {
                    tracing::warn!(socket = %n, "cannot remove socket: {e}");
                }
            }
        }
        #[cfg(windows)]
        Listen::Pipe { .. } => {
            // Pipes vanish with their last handle.
            let _ = names;
        }
    }
}

/// A client deadline (`grpc-timeout`) that passes answers `DEADLINE_EXCEEDED`.
///
/// tonic enforces `grpc-timeout` itself, but answers `CANCELLED` ("Timeout expired"), and its
/// layer sits outside every layer we can add. This one fires a little earlier
/// ([`call_deadline::margin`]: a tenth of the deadline, 5 to 100 ms),
/// so the client gets the code the gRPC spec prescribes (grpc-go servers answer it too). The
/// handler's future is dropped; host work already handed to a blocking thread runs to its end,
/// so the host is left in a state a retry of the same (idempotent) request completes.
mod call_deadline {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    /// How much earlier than tonic's own timeout this layer answers a deadline of `t`: early
    /// enough that the answer reaches the client before the client's own timer fires, even on a
    /// loaded node, yet a small part of the deadline.
    pub fn margin(t: Duration) -> Duration {
        (t / 10).clamp(Duration::from_millis(5), Duration::from_millis(100))
    }

    #[derive(Debug, Clone, Copy)]
    pub struct Layer;

    impl<S> tower::Layer<S> for Layer {
        type Service = Deadline<S>;
        fn layer(&self, inner: S) -> Deadline<S> {
            Deadline(inner)
        }
    }

    #[derive(Debug, Clone)]
    pub struct Deadline<S>(S);

    type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

    impl<S, B> tower::Service<http::Request<B>> for Deadline<S>
    where
        S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
        S::Future: Send + 'static,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = BoxFuture<Result<S::Response, S::Error>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.0.poll_ready(cx)
        }

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            let timeout = req
                .headers()
                .get("grpc-timeout")
                .and_then(|v| parse_grpc_timeout(v.as_bytes()));
            let path = req.uri().path().to_owned();
            let fut = self.0.call(req);
            Box::pin(async move {
                let Some(t) = timeout else {
                    return fut.await;
                };
                match tokio::time::timeout(t.saturating_sub(margin(t)), fut).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::debug!(%path, ?t, "client deadline passed");
                        Ok(tonic::Status::deadline_exceeded(format!(
                            "{path}: the client's deadline of {t:?} passed before the \
                             operation finished; work already started completes in the \
                             background, so a retry can finish it"
                        ))
                        .into_http())
                    }
                }
            })
        }
    }

    /// `grpc-timeout` (gRPC over HTTP/2 spec): at most 8 ASCII digits and a unit.
    pub fn parse_grpc_timeout(v: &[u8]) -> Option<Duration> {
        let (unit, digits) = v.split_last()?;
        if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
        Some(match unit {
            b'H' => Duration::from_secs(n.checked_mul(3600)?),
            b'M' => Duration::from_secs(n.checked_mul(60)?),
            b'S' => Duration::from_secs(n),
            b'm' => Duration::from_millis(n),
            b'u' => Duration::from_micros(n),
            b'n' => Duration::from_nanos(n),
            _ => return None,
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn grpc_timeout_values_parse_per_the_spec() {
            assert_eq!(parse_grpc_timeout(b"1S"), Some(Duration::from_secs(1)));
            assert_eq!(
                parse_grpc_timeout(b"250m"),
                Some(Duration::from_millis(250))
            );
            assert_eq!(
                parse_grpc_timeout(b"99999999H"),
                Some(Duration::from_secs(99_999_999 * 3600))
            );
            assert_eq!(parse_grpc_timeout(b"5n"), Some(Duration::from_nanos(5)));
            for bad in [&b""[..], b"S", b"123456789S", b"1x", b"-1S", b"1.5S"] {
                assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
            }
            assert_eq!(margin(Duration::from_millis(20)), Duration::from_millis(5));
            assert_eq!(
                margin(Duration::from_millis(500)),
                Duration::from_millis(50)
            );
            assert_eq!(margin(Duration::from_secs(30)), Duration::from_millis(100));
        }
    }
}
