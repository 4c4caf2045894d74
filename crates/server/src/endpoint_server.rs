//! One endpoint's HTTP/2 server: hyper serving each accepted connection with the limits of
//! [`crate::limits`].
//!
//! tonic's own server loop has no idle timeout and builds one service for every connection
//! alike, so neither a connection's share of the receiving places nor "no call for
//! [`IDLE_TIMEOUT`]" could be expressed through it. This loop does what it did (HTTP/2 only,
//! the connection's `ConnectInfo` in each request's extensions, GOAWAY at
//! [`MAX_CONNECTION_AGE`] and on stop, then waiting for every connection to close) and adds
//! both: each connection gets its own [`Connection`] state, and is told to go away (hyper's
//! graceful shutdown: GOAWAY with NO_ERROR, running calls finish) when it has been idle.

use crate::limits::{self as l, Connection, IDLE_TIMEOUT, MAX_CONNECTION_AGE, RequestLimits};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tower::ServiceExt;

/// The HTTP/2 settings of every connection: streams per connection, receive windows and
/// keepalive pings.
fn http2() -> hyper::server::conn::http2::Builder<TokioExecutor> {
    let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .max_concurrent_streams(l::STREAMS_PER_CONNECTION)
        .initial_stream_window_size(l::STREAM_WINDOW)
        .initial_connection_window_size(l::CONNECTION_WINDOW)
        .keep_alive_interval(Some(l::KEEPALIVE_INTERVAL))
        .keep_alive_timeout(l::KEEPALIVE_TIMEOUT);
    b
}

/// Serves `routes` on every connection `incoming` yields until `signal` completes, then tells
/// every connection to go away and waits for them to close (the caller bounds that wait).
pub async fn serve<IO>(
    routes: Routes,
    incoming: impl Stream<Item = io::Result<IO>>,
    signal: impl Future<Output = ()>,
) where
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
{
    let routes = routes.prepare();
    let http2 = http2();
    // Each connection holds a receiver; `closed()` tells when the last one is gone.
    let (stop_tx, stop_rx) = watch::channel(false);
    {
        let mut incoming = std::pin::pin!(incoming);
        let mut signal = std::pin::pin!(signal);
        loop {
            let io = tokio::select! {
                () = &mut signal => break,
                io = incoming.next() => match io {
                    Some(Ok(io)) => io,
                    // AcceptBackoff has logged and paused; the next accept may work.
                    Some(Err(_)) => continue,
                    None => break,
                },
            };
            tokio::spawn(connection(
                io,
                routes.clone(),
                http2.clone(),
                stop_rx.clone(),
                IDLE_TIMEOUT,
            ));
        }
    }
    let _ = stop_tx.send(true);
    drop(stop_rx);
    stop_tx.closed().await;
}

/// Serves one connection until it closes: told to go away after `idle` without calls, at
/// [`MAX_CONNECTION_AGE`], or when the endpoint stops.
async fn connection<IO>(
    io: IO,
    routes: Routes,
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    mut stop: watch::Receiver<bool>,
    idle: Duration,
) where
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
{
    let info = io.connect_info();
    let state = Connection::new();
    let svc = tower::ServiceBuilder::new()
        .layer(crate::spec_status::Layer)
        .layer(RequestLimits(state.clone()))
        .service(routes);
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let mut req = req.map(tonic::body::Body::new);
        req.extensions_mut().insert(info.clone());
        svc.clone().oneshot(req)
    });
    let conn = http2.serve_connection(TokioIo::new(io), svc);
    let mut conn = std::pin::pin!(conn);
    let why = tokio::select! {
        r = &mut conn => return ended(r),
        () = state.idle_for(idle) => "idle",
        () = tokio::time::sleep(MAX_CONNECTION_AGE) => "age",
        _ = stop.wait_for(|s| *s) => "stop",
    };
    tracing::debug!("asking a connection to go away ({why})");
    conn.as_mut().graceful_shutdown();
    ended(conn.await);
}

fn ended(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!("connection ended: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// A connection that made a call and then none is told to go away (GOAWAY, NO_ERROR) once
    /// the idle timeout passes, and closes; the client sees a clean end, not an error. Before,
    /// a connection after its preface stayed open for as long as its client kept it.
    #[tokio::test]
    async fn an_idle_connection_is_told_to_go_away_and_closes() {
        let (server, client) = tokio::io::duplex(64 * 1024);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let idle = Duration::from_millis(300);
        let served = tokio::spawn(connection(
            server,
            Routes::default(),
            http2(),
            stop_rx,
            idle,
        ));
        let (mut h2, conn) = h2::client::handshake(client).await.unwrap();
        let conn = tokio::spawn(conn);
        let req = http::Request::post("http://localhost/v1.Nothing/Call")
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let (resp, mut body) = h2.send_request(req, false).unwrap();
        body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
            .unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.headers()["grpc-status"], "12", "UNIMPLEMENTED");
        let t = std::time::Instant::now();
        let closed = tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .expect("the idle connection closes")
            .unwrap();
        assert!(closed.is_ok(), "a clean GOAWAY, not an error: {closed:?}");
        assert!(t.elapsed() >= idle / 2, "not before the idle timeout");
        served.await.unwrap();
    }
}
