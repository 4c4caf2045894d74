//! `/metrics` over HTTP/1.1 (hyper): GET and HEAD answered, 405 for other methods, 404 elsewhere.

use super::render;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::prometheus_text;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

/// Binds the metrics listener. `addr` is `host:port` as upstream takes it; a bare `:port`
/// (Go's spelling for every interface) listens on all IPv4 interfaces, so exposure beyond the
/// node is opt-in by the flag's value (the flag's default is off; docs/operating.md).
pub async fn bind(addr: &str) -> io::Result<TcpListener> {
    let addr = if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    };
    TcpListener::bind(&addr)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}

/// Longest request head accepted (hyper answers 431 past it); a scrape request is a few hundred
/// bytes.
pub(super) const MAX_HEAD: usize = 16 * 1024;

/// How long a new connection has to send its whole request head; a connection that has not
/// by then is closed. A scraper sends its request as soon as it has connected.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a scrape connection may last, request and response together: a client that stops
/// reading its answer does not keep its task and socket. One request is served per connection
/// (no keep-alive), so no connection idles between requests.
const CONNECTION_LIMIT: Duration = Duration::from_secs(10);

/// Scrapes answered at once: a scraper asks one at a time, so a few scrapers need a few. A
/// request past it is answered 503 and counted as
/// `csi_proxy_refused_total{limit="metrics_connections"}`. An answer is written within
/// [`CONNECTION_LIMIT`] or its connection closed.
pub const METRICS_CONNECTIONS: usize = 16;

/// Connections kept while their request has not arrived. Past it, a new connection takes the
/// place of the oldest of them (closed, counted as a refusal of `metrics_connections`); each is
/// closed anyway after [`REQUEST_TIMEOUT`]. A scraper's connection sends its request as soon
/// as it is open, so it is the newest of them and leaves them within a millisecond: silent
/// connections, however many and however often renewed, never keep it from its answer, and
/// hold at most this many descriptors.
pub const WAITING_CONNECTIONS: usize = 64;

/// One connection whose request has not arrived yet.
struct Waiting {
    /// Told when a newer connection takes its place.
    evict: tokio::sync::Notify,
}

/// The connections whose request has not arrived, oldest first.
type WaitingList = Arc<Mutex<VecDeque<Arc<Waiting>>>>;

/// Takes `conn` off the waiting list (its request arrived, or it ended).
fn stop_waiting(list: &WaitingList, conn: &Arc<Waiting>) {
    list.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|c| !Arc::ptr_eq(c, conn));
}

/// Serves `GET /metrics` (and `HEAD`) over HTTP/1.1 on `listener` forever; other methods on
/// `/metrics` answer 405, other paths 404. One request per connection, as a scraper needs.
pub async fn serve(listener: TcpListener) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(false)
        .title_case_headers(true)
        .max_header_size(MAX_HEAD)
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT);
    let answering = Arc::new(tokio::sync::Semaphore::new(METRICS_CONNECTIONS));
    let waiting = WaitingList::default();
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                let this = Arc::new(Waiting {
                    evict: tokio::sync::Notify::new(),
                });
                {
                    let mut list = waiting.lock().unwrap_or_else(|p| p.into_inner());
                    if list.len() >= WAITING_CONNECTIONS
                        && let Some(oldest) = list.pop_front()
                    {
                        oldest.evict.notify_one();
                        super::refused(super::Limit::MetricsConnections);
                        tracing::debug!(
                            "metrics listener: {WAITING_CONNECTIONS} connections wait for \
                             their request, the oldest closed"
                        );
                    }
                    list.push_back(this.clone());
                }
                let (list, me, answering) = (waiting.clone(), this.clone(), answering.clone());
                let conn = http.serve_connection(
                    TokioIo::new(conn),
                    hyper::service::service_fn(move |req| {
                        stop_waiting(&list, &me);
                        let place = answering.clone().try_acquire_owned();
                        async move {
                            let Ok(_place) = place else {
                                super::refused(super::Limit::MetricsConnections);
                                return Ok::<_, Infallible>(busy());
                            };
                            Ok(respond(&req))
                        }
                    }),
                );
                let list = waiting.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        served = tokio::time::timeout(CONNECTION_LIMIT, conn) => match served {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::debug!("metrics request failed: {e}"),
                            Err(_) => tracing::debug!("metrics connection timed out"),
                        },
                        () = this.evict.notified() => {}
                    }
                    stop_waiting(&list, &this);
                });
            }
            Err(e) => {
                // Out of fds and the like: back off instead of spinning.
                tracing::warn!("metrics listener: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The answer past [`METRICS_CONNECTIONS`] scrapes at once.
fn busy() -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(
        b"too many scrapes at once; retry\n",
    )));
    *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    resp
}

/// The answer to one request. For `HEAD`, hyper sends the head (with the length the body would
/// have) and leaves the body out.
fn respond(req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = route(req.method(), req.uri().path());
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}

/// Status, content type and body for one method and path.
fn route(method: &Method, path: &str) -> (StatusCode, &'static str, String) {
    const PLAIN: &str = "text/plain; charset=utf-8";
    match (method, path) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            (StatusCode::OK, prometheus_text::CONTENT_TYPE, render())
        }
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "only GET and HEAD are served on /metrics\n".into(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            PLAIN,
            "only /metrics is served here\n".into(),
        ),
    }
}
