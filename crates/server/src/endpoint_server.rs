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
        let serve = |io| {
            tokio::spawn(connection(
                io,
                routes.clone(),
                http2.clone(),
                stop_rx.clone(),
                IDLE_TIMEOUT,
            ));
        };
        loop {
            let io = tokio::select! {
                () = &mut signal => {
                    // Connections already queued in the listener's backlog were made to this
                    // daemon (after a hand-off, before the path was renamed to the next one's):
                    // closing the listener would reset them, which a client sees as a failed
                    // connection and backs off from. Each is accepted and told to go away like
                    // every other (GOAWAY once its HTTP/2 handshake is done, hyper's
                    // close_pending), so its client reconnects at once.
                    drain(&mut incoming, &serve).await;
                    break;
                }
                io = incoming.next() => match io {
                    Some(Ok(io)) => io,
                    // AcceptBackoff has logged and paused; the next accept may work.
                    Some(Err(_)) => continue,
                    None => break,
                },
            };
            serve(io);
        }
    }
    let _ = stop_tx.send(true);
    drop(stop_rx);
    stop_tx.closed().await;
}

/// Accepts what `incoming` has ready now (non-blocking accepts until the listener would
/// block), handing each connection to `serve`.
async fn drain<IO>(
    incoming: &mut std::pin::Pin<&mut impl Stream<Item = io::Result<IO>>>,
    mut serve: impl FnMut(IO),
) {
    let mut drained = 0usize;
    loop {
        let next = std::future::poll_fn(|cx| match incoming.as_mut().poll_next(cx) {
            std::task::Poll::Pending => std::task::Poll::Ready(None),
            std::task::Poll::Ready(r) => std::task::Poll::Ready(Some(r)),
        })
        .await;
        match next {
            Some(Some(Ok(io))) => {
                drained += 1;
                serve(io);
            }
            // An accept error pauses the stream (AcceptBackoff): nothing more is ready.
            Some(Some(Err(_))) | Some(None) | None => break,
        }
    }
    if drained > 0 {
        tracing::debug!(drained, "accepted the connections queued at stop");
    }
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

    /// Connections queued in the listener's backlog when the stop comes (after a hand-off:
    /// made to this daemon just before its path was renamed to the next one's) are accepted
    /// and told to go away after their handshake, a clean end their client reconnects from at
    /// once; before, the listener was closed with them in its queue and each was reset, which
    /// a client sees as a failed connection and backs off from.
    #[cfg(unix)]
    #[tokio::test]
    async fn connections_queued_at_stop_get_a_goaway_not_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // Eight connections in the backlog, then the stop, before the loop ever runs: each
        // turn of the loop may take the stop or a connection first.
        let mut queued = Vec::new();
        for _ in 0..8 {
            queued.push(tokio::net::UnixStream::connect(&path).await.unwrap());
        }
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let served = tokio::spawn(serve(Routes::default(), incoming, async {}));
        for (i, io) in queued.into_iter().enumerate() {
            let (_h2, conn) =
                tokio::time::timeout(Duration::from_secs(10), h2::client::handshake(io))
                    .await
                    .expect("answered")
                    .unwrap_or_else(|e| panic!("connection {i}: the handshake failed: {e}"));
            let closed = tokio::time::timeout(Duration::from_secs(10), conn)
                .await
                .expect("closed");
            assert!(
                closed.is_ok(),
                "connection {i}: a clean GOAWAY, not a reset: {closed:?}"
            );
        }
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the endpoint stops")
            .unwrap();
    }

    /// The builder of every connection, with keepalive pings every `every` and `timeout` to
    /// answer one (the daemon's are 60 s and 20 s).
    fn pinging(
        every: Duration,
        timeout: Duration,
    ) -> hyper::server::conn::http2::Builder<TokioExecutor> {
        let mut b = http2();
        b.keep_alive_interval(Some(every))
            .keep_alive_timeout(timeout);
        b
    }

    /// A client that completes the preface and its SETTINGS and then reads nothing (so answers
    /// no ping) is closed once a keepalive ping goes unanswered, long before the idle timeout.
    /// Before, hyper's pings were the only bound after the preface and nothing here checked
    /// that they close such a connection.
    #[tokio::test]
    async fn a_connection_that_answers_no_ping_is_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (server, mut client) = tokio::io::duplex(64 * 1024);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let (every, timeout) = (Duration::from_millis(200), Duration::from_millis(200));
        let t = std::time::Instant::now();
        let served = tokio::spawn(connection(
            server,
            Routes::default(),
            pinging(every, timeout),
            stop_rx,
            Duration::from_secs(3600),
        ));
        client
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the connection is closed")
            .unwrap();
        let took = t.elapsed();
        println!("closed after {took:?} (ping every {every:?}, {timeout:?} to answer)");
        assert!(took >= every, "not before a ping was due");
        // What the server sent: its SETTINGS, the ack of ours, a PING, then the end.
        let mut sent = Vec::new();
        client.read_to_end(&mut sent).await.unwrap();
        let mut types = Vec::new();
        let mut at = 0;
        while at + 9 <= sent.len() {
            let len = usize::from(sent[at]) << 16
                | usize::from(sent[at + 1]) << 8
                | usize::from(sent[at + 2]);
            types.push(sent[at + 3]);
            at += 9 + len;
        }
        assert!(types.contains(&6), "a PING was sent: frame types {types:?}");
    }

    /// A client that answers pings and sends its own as often as it likes is never closed for
    /// it (grpc-go would answer a client pinging more often than every 5 min GOAWAY
    /// ENHANCE_YOUR_CALM; the daemon is more lenient), and stays open across many of the
    /// daemon's pings while under the idle timeout.
    #[tokio::test]
    async fn a_client_that_answers_and_sends_pings_stays_connected() {
        let (server, client) = tokio::io::duplex(64 * 1024);
        let (stop_tx, stop_rx) = watch::channel(false);
        let every = Duration::from_millis(50);
        let served = tokio::spawn(connection(
            server,
            Routes::default(),
            pinging(every, every),
            stop_rx,
            Duration::from_secs(3600),
        ));
        let (_h2, mut conn) = h2::client::handshake(client).await.unwrap();
        let mut pings = conn.ping_pong().expect("the client's ping handle");
        let conn = tokio::spawn(conn);
        // 1 s: twenty of the daemon's pings, and a hundred of the client's.
        for _ in 0..100 {
            pings
                .ping(h2::Ping::opaque())
                .await
                .expect("the daemon answers");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            !served.is_finished() && !conn.is_finished(),
            "still connected"
        );
        stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("closes on stop")
            .unwrap();
        let closed = conn.await.unwrap();
        assert!(closed.is_ok(), "a clean GOAWAY, not an error: {closed:?}");
    }

    /// One write system call per answer, counted on a real Unix socket.
    #[cfg(target_os = "linux")]
    mod one_write {
        use super::*;

        /// A unary gRPC service answering every call with one message of [`BIG`] bytes: past the
        /// size (256 bytes) from which h2 writes a DATA frame apart from the frames after it.
        #[derive(Clone)]
        struct Big;

        const BIG: usize = 1000;

        impl tonic::server::NamedService for Big {
            const NAME: &'static str = "test.Big";
        }

        impl tower::Service<http::Request<tonic::body::Body>> for Big {
            type Response = http::Response<tonic::body::Body>;
            type Error = std::convert::Infallible;
            type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

            fn poll_ready(
                &mut self,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                std::task::Poll::Ready(Ok(()))
            }

            fn call(&mut self, _: http::Request<tonic::body::Body>) -> Self::Future {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                let frames = [
                    hyper::body::Frame::data(Bytes::from(grpc_message(&[b'x'; BIG]))),
                    hyper::body::Frame::trailers(trailers),
                ]
                .map(Ok::<_, std::convert::Infallible>);
                let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
                let answer = http::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(tonic::body::Body::new(body))
                    .expect("a valid answer");
                std::future::ready(Ok(answer))
            }
        }

        /// A gRPC message frame: uncompressed, length, message.
        fn grpc_message(m: &[u8]) -> Vec<u8> {
            let mut out = vec![0];
            out.extend_from_slice(&u32::try_from(m.len()).unwrap().to_be_bytes());
            out.extend_from_slice(m);
            out
        }

        /// An HTTP/2 frame.
        fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
            let mut out = u32::try_from(payload.len()).unwrap().to_be_bytes()[1..].to_vec();
            out.extend_from_slice(&[kind, flags]);
            out.extend_from_slice(&stream.to_be_bytes());
            out.extend_from_slice(payload);
            out
        }

        /// A blocking HTTP/2 client making one unary call at a time and, as grpc-go's
        /// bandwidth-delay estimator does, sending a PING as each answer's DATA arrives.
        struct PingingClient {
            io: std::os::unix::net::UnixStream,
            buf: Vec<u8>,
            next_stream: u32,
        }

        impl PingingClient {
            fn start(mut io: std::os::unix::net::UnixStream) -> Self {
                use std::io::Write;
                let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
                hello.extend(frame(0x4, 0, 0, &[]));
                // The connection's receive window opened to its maximum, as grpc-go does.
                hello.extend(frame(0x8, 0, 0, &(0x7fff_ffff_u32 - 65_535).to_be_bytes()));
                io.write_all(&hello).unwrap();
                PingingClient {
                    io,
                    buf: Vec::new(),
                    next_stream: 1,
                }
            }

            /// Calls `path` with an empty message; answers the message received.
            fn call(&mut self, path: &str) -> Vec<u8> {
                use std::io::{Read, Write};
                let stream = self.next_stream;
                self.next_stream += 2;
                // :method POST, :scheme http, then literals without indexing: :path, :authority,
                // content-type, te.
                let mut block = vec![0x83, 0x86, 0x04, u8::try_from(path.len()).unwrap()];
                block.extend_from_slice(path.as_bytes());
                block.extend_from_slice(b"\x01\x09localhost\x0f\x10\x10application/grpc");
                block.extend_from_slice(b"\x00\x02te\x08trailers");
                let mut request = frame(0x1, 0x4, stream, &block);
                request.extend(frame(0x0, 0x1, stream, &grpc_message(&[])));
                self.io.write_all(&request).unwrap();
                let mut message = Vec::new();
                loop {
                    while self.buf.len() >= 9 {
                        let len = usize::from(self.buf[0]) << 16
                            | usize::from(self.buf[1]) << 8
                            | usize::from(self.buf[2]);
                        if self.buf.len() < 9 + len {
                            break;
                        }
                        let (kind, flags) = (self.buf[3], self.buf[4]);
                        let id = u32::from_be_bytes(self.buf[5..9].try_into().unwrap());
                        let payload: Vec<u8> = self.buf.drain(..9 + len).skip(9).collect();
                        match (kind, flags & 1) {
                            (0x4, 0) => self.io.write_all(&frame(0x4, 0x1, 0, &[])).unwrap(),
                            (0x6, 0) => self.io.write_all(&frame(0x6, 0x1, 0, &payload)).unwrap(),
                            (0x0, _) if id == stream => {
                                message.extend_from_slice(&payload);
                                self.io.write_all(&frame(0x6, 0, 0, &[7; 8])).unwrap();
                            }
                            (0x1, 1) if id == stream => return message,
                            (0x3 | 0x7, _) => panic!("the server reset the call or went away"),
                            _ => {}
                        }
                    }
                    let mut more = [0u8; 4096];
                    let n = self.io.read(&mut more).unwrap();
                    assert!(n > 0, "the server closed the connection");
                    self.buf.extend_from_slice(&more[..n]);
                }
            }
        }

        /// The write system calls (write, writev, …: `syscw` of proc(5)'s `io`) made so far by this
        /// process's threads named `name`.
        fn writes_of_threads(name: &str) -> u64 {
            let mut writes = 0;
            for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                if comm.trim_end() != name {
                    continue;
                }
                let io = std::fs::read_to_string(task.path().join("io")).unwrap_or_default();
                writes += io
                    .lines()
                    .find_map(|l| l.strip_prefix("syscw:"))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
            writes
        }

        /// On a real Unix socket, to a client that pings on each answer as grpc-go does, every
        /// answer (headers, message and trailers, with the acknowledgement of that PING in front)
        /// costs the connection's threads one write system call, also when the message is large
        /// enough for h2 to write it apart from the trailers. Before, the PING's acknowledgement was
        /// held by arming a new timer each time, which woke tokio's driver (a `write` to its eventfd)
        /// on every call, and a large message left in two `writev`s: 2 to 3 writes per answer.
        #[test]
        fn each_answer_costs_one_write_system_call() {
            const THREADS: &str = "answer-writes";
            const CALLS: u64 = 100;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name(THREADS)
                .enable_all()
                .build()
                .unwrap();
            let (server, client) = std::os::unix::net::UnixStream::pair().unwrap();
            server.set_nonblocking(true).unwrap();
            let (stop_tx, stop_rx) = watch::channel(false);
            let (_health, health) = tonic_health::server::health_reporter();
            let routes = Routes::new(health).add_service(Big).prepare();
            let served = rt.spawn(async move {
                let io = tokio::net::UnixStream::from_std(server).unwrap();
                let io = crate::transport::ack_hold::AckHold::new(io);
                // A connection that stalls fails the test in 30 s, not 5 min.
                connection(io, routes, http2(), stop_rx, Duration::from_secs(30)).await;
            });
            let mut client = PingingClient::start(client);
            let check = "/grpc.health.v1.Health/Check";
            let big = "/test.Big/Call";
            // SERVING (1) for the whole server.
            let serving = grpc_message(&[0x08, 0x01]);
            for _ in 0..5 {
                assert_eq!(client.call(check), serving);
                assert_eq!(client.call(big), grpc_message(&[b'x'; BIG]));
            }
            let before = writes_of_threads(THREADS);
            for _ in 0..CALLS {
                assert_eq!(client.call(check), serving);
                assert_eq!(client.call(big), grpc_message(&[b'x'; BIG]));
            }
            let writes = writes_of_threads(THREADS) - before;
            let per_answer = writes as f64 / (2 * CALLS) as f64;
            println!("{writes} write system calls for {} answers", 2 * CALLS);
            // A little over 1: on a busy machine a pause past the hold lets an acknowledgement
            // leave alone now and then.
            assert!(
                per_answer <= 1.2,
                "{per_answer:.2} write system calls per answer"
            );
            // The client leaving ends the connection.
            drop(client);
            rt.block_on(served).unwrap();
            drop(stop_tx);
        }
    }
}
