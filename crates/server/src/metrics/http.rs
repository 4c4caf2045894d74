//! `/metrics` over HTTP/1.1 (hyper): GET and HEAD answered, 405 for other methods, 404 elsewhere.

use super::render;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::prometheus_text;
use std::convert::Infallible;
use std::io;
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

/// Longest a scrape connection may last, request and response together: a client that stalls
/// does not keep its task and socket forever.
const CONNECTION_LIMIT: Duration = Duration::from_secs(60);

/// Scrape connections served at once; more are closed on accept (counted as
/// `csi_proxy_refused_total{limit="metrics_connections"}`). A scraper asks one at a time, so a
/// few scrapers need a few; the cap keeps a flood of them from taking the descriptors the
/// endpoints need.
pub const METRICS_CONNECTIONS: usize = 16;

/// Serves `GET /metrics` (and `HEAD`) over HTTP/1.1 on `listener` forever; other methods on
/// `/metrics` answer 405, other paths 404. One request per connection, as a scraper needs.
pub async fn serve(listener: TcpListener) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(false)
        .title_case_headers(true)
        .max_header_size(MAX_HEAD)
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let places = std::sync::Arc::new(tokio::sync::Semaphore::new(METRICS_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                let Ok(place) = places.clone().try_acquire_owned() else {
                    super::refused(super::Limit::MetricsConnections);
                    tracing::debug!(
                        "metrics listener: {METRICS_CONNECTIONS} connections open, one closed"
                    );
                    drop(conn);
                    continue;
                };
                let conn = http.serve_connection(
                    TokioIo::new(conn),
                    hyper::service::service_fn(
                        |req| async move { Ok::<_, Infallible>(respond(&req)) },
                    ),
                );
                tokio::spawn(async move {
                    let _place = place;
                    match tokio::time::timeout(CONNECTION_LIMIT, conn).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!("metrics request failed: {e}"),
                        Err(_) => tracing::debug!("metrics connection timed out"),
                    }
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
