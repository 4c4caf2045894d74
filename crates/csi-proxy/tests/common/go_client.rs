//! A client that reconnects and retries as grpc-go, the drivers' client, does, over tonic.
//!
//! tonic's `Channel` neither retries nor backs off; grpc-go does both, and what a driver sees
//! during an upgrade depends on exactly that. This model of one grpc-go `ClientConn` (one
//! address, pick_first) keeps grpc-go's rules and nothing more:
//! - transparent retry (gRPC proposal A6): a call the server never processed is sent again on a
//!   new connection, at once: refused by a GOAWAY whose last-stream-id is below it, reset with
//!   REFUSED_STREAM, or never sent because its connection closed first. A call that reached the
//!   server is never retried: its error is the caller's.
//! - a connection that ends after it was ready (a GOAWAY, the server closing it) leaves the
//!   channel idle: the next call dials again without waiting.
//! - a dial that fails puts the channel in TRANSIENT_FAILURE: calls fail at once with
//!   UNAVAILABLE until the backoff has passed (1 s, then x1.6 each time, jitter +-20 %, at most
//!   120 s: grpc-go's defaults), then the next call dials again.
//!
//! Shared by the hand-off tests and `csi-proxy-bench upgrade` (included by path).

use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

const BASE_DELAY: Duration = Duration::from_secs(1);
const MAX_DELAY: Duration = Duration::from_secs(120);
/// Transparent retries of one call at most (grpc-go retries "never left the client" without
/// bound; a bound keeps a test from spinning).
const MAX_TRANSPARENT: usize = 8;

enum State {
    Idle,
    Ready(Channel),
    Failing { until: Instant },
}

/// One grpc-go-like channel to a Unix socket.
pub struct GoChannel {
    socket: std::path::PathBuf,
    state: State,
    /// The next backoff after a failed dial.
    backoff: Duration,
    /// Transparent retries made so far (for reports).
    pub transparent_retries: u64,
    seed: u64,
}

/// What a failed call tells about its connection.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    /// The server never processed it: send it again on a new connection.
    Unprocessed,
    /// The connection is gone; the call may have reached the server.
    ConnectionLost,
    /// An answer of the server.
    Answered,
}

fn fate(s: &Status) -> Fate {
    if csi_proxy_client::retry::never_processed(s) {
        return Fate::Unprocessed;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(s);
    let mut lost = false;
    while let Some(e) = src {
        if e.is::<h2::Error>() || e.is::<hyper::Error>() || e.is::<std::io::Error>() {
            lost = true;
        }
        src = e.source();
    }
    // tonic's own transport errors carry no source for a connection that closed before the
    // request went out ("connection closed" before a stream was opened).
    if s.code() == Code::Unavailable || s.code() == Code::Unknown && lost {
        let m = s.message();
        if m.contains("connection closed") || m.contains("canceled") {
            return Fate::Unprocessed;
        }
        return Fate::ConnectionLost;
    }
    if lost {
        Fate::ConnectionLost
    } else {
        Fate::Answered
    }
}

impl GoChannel {
    /// A channel to `socket`, idle until the first call.
    pub fn new(socket: std::path::PathBuf, seed: u64) -> GoChannel {
        GoChannel {
            socket,
            state: State::Idle,
            backoff: BASE_DELAY,
            transparent_retries: 0,
            seed,
        }
    }

    fn jitter(&mut self, d: Duration) -> Duration {
        // xorshift: +-20 %, as grpc-go's backoff.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let f = 0.8 + 0.4 * (self.seed % 1000) as f64 / 1000.0;
        d.mul_f64(f)
    }

    async fn ready(&mut self) -> Result<Channel, Status> {
        match &self.state {
            State::Ready(ch) => return Ok(ch.clone()),
            State::Failing { until } if Instant::now() < *until => {
                return Err(Status::unavailable(
                    "connection failed; waiting for the reconnect backoff",
                ));
            }
            _ => {}
        }
        let socket = self.socket.clone();
        let endpoint = Endpoint::from_static("http://localhost");
        let dial = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }));
        match dial.await {
            Ok(ch) => {
                self.backoff = BASE_DELAY;
                self.state = State::Ready(ch.clone());
                Ok(ch)
            }
            Err(e) => {
                let wait = self.jitter(self.backoff);
                self.backoff = self.backoff.mul_f64(1.6).min(MAX_DELAY);
                self.state = State::Failing {
                    until: Instant::now() + wait,
                };
                Err(Status::unavailable(format!("dialling: {e}")))
            }
        }
    }

    /// Makes the call `f` on this channel with grpc-go's rules (see the module documentation).
    pub async fn call<T, F, Fut>(&mut self, mut f: F) -> Result<T, Status>
    where
        F: FnMut(Channel) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let mut retries = 0;
        loop {
            let ch = self.ready().await?;
            match f(ch).await {
                Ok(v) => return Ok(v),
                Err(s) => match fate(&s) {
                    Fate::Unprocessed if retries < MAX_TRANSPARENT => {
                        retries += 1;
                        self.transparent_retries += 1;
                        self.state = State::Idle;
                    }
                    Fate::Unprocessed | Fate::ConnectionLost => {
                        self.state = State::Idle;
                        return Err(s);
                    }
                    Fate::Answered => return Err(s),
                },
            }
        }
    }
}
