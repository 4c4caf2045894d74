//! One client against the real daemon binary, as an attacker with access to the sockets would:
//! many connections that send the HTTP/2 preface and SETTINGS and go silent, and many streams
//! that send most of a request message and stall. The daemon's RSS (`/proc/<pid>/status`) must
//! stay under a ceiling derived from its limits (`csi_proxy_server::limits`), and another client's
//! PathExists and Mkdir must still answer.
//!
//! The sizes here are CI's (600 idle connections, 128 stalled 2 MB bodies: about 270 MB an
//! unbounded daemon pins); `CSI_PROXY_ATTACK=full` runs the full-size attack (3,000 idle
//! connections, 2 x 120 stalled 4 MB bodies): `scripts/bench-attacks.sh` does, and BENCHMARKS.md
//! has its figures.
#![cfg(target_os = "linux")]

mod common;

use bytes::Bytes;
use common::{Daemon, call_raw, put_bytes};
use csi_proxy_server::limits;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

struct Attack {
    idle: usize,
    connections: usize,
    streams: usize,
    /// Declared length of each stalled message, and how much of it is sent.
    declared: usize,
    sent: usize,
}

fn attack() -> Attack {
    if std::env::var("CSI_PROXY_ATTACK").as_deref() == Ok("full") {
        Attack {
            idle: 3000,
            connections: 2,
            streams: 120,
            declared: 4_000_000,
            sent: 4_000_000 - 100,
        }
    } else {
        Attack {
            idle: 600,
            connections: 2,
            streams: 64,
            declared: 2_000_000,
            sent: 2_000_000 - 100,
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// An idle attacker connection: the preface and an empty SETTINGS frame, then nothing.
async fn idle_connection(sock: &std::path::Path) -> Option<UnixStream> {
    let mut s = UnixStream::connect(sock).await.ok()?;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    s.write_all(&hello).await.ok()?;
    Some(s)
}

/// An HTTP/2 connection of the attacker's (h2 answers pings and flow control by itself).
async fn h2_connection(sock: &std::path::Path) -> h2::client::SendRequest<Bytes> {
    let io = UnixStream::connect(sock).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .handshake(io)
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

type Stalled = (h2::client::ResponseFuture, h2::SendStream<Bytes>);

/// Opens a Mkdir stream whose message declares `declared` bytes and sends `sent` of them (as
/// flow control allows), then stalls. `None` if the daemon refused the stream or its window.
async fn stall(
    client: h2::client::SendRequest<Bytes>,
    path: &str,
    declared: usize,
    sent: usize,
) -> Option<Stalled> {
    let mut client = tokio::time::timeout(Duration::from_secs(2), client.ready())
        .await
        .ok()?
        .ok()?;
    let req = http::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut stream) = client.send_request(req, false).ok()?;
    let mut head = vec![0u8];
    head.extend_from_slice(&u32::try_from(declared).unwrap().to_be_bytes());
    stream.send_data(Bytes::from(head), false).ok()?;
    let mut left = sent - 5;
    let chunk = Bytes::from(vec![b'a'; 64 * 1024]);
    let t = Instant::now();
    while left > 0 && t.elapsed() < Duration::from_secs(60) {
        stream.reserve_capacity(left.min(chunk.len()));
        // Long enough for every stream's share of a busy connection window.
        let cap = tokio::time::timeout(
            Duration::from_secs(10),
            std::future::poll_fn(|cx| stream.poll_capacity(cx)),
        )
        .await;
        match cap {
            Ok(Some(Ok(n))) if n > 0 => {
                let n = n.min(left);
                stream.send_data(chunk.slice(..n), false).ok()?;
                left -= n;
            }
            Ok(Some(Ok(_))) => {}
            _ => break,
        }
    }
    Some((resp, stream))
}

/// The other client: PathExists and Mkdir on a fresh connection answer, and how long they took.
async fn other_client_answers(d: &Daemon, what: &str) -> Duration {
    let t = Instant::now();
    let ch = d
        .connector()
        .channel("filesystem", "v1")
        .await
        .unwrap_or_else(|e| panic!("{what}: cannot connect: {e}"));
    let mut body = Vec::new();
    put_bytes(&mut body, 1, d.kubelet.display().to_string().as_bytes());
    let r = call_raw(
        &ch,
        "/v1.Filesystem/PathExists",
        body,
        Some(Duration::from_secs(10)),
    )
    .await;
    assert_eq!(
        r.as_deref().ok(),
        Some(&[0x08, 0x01][..]),
        "{what}: PathExists: {r:?}"
    );
    let dir = d.k(&format!("pods/other-{}", t.elapsed().as_nanos()));
    let mut body = Vec::new();
    put_bytes(&mut body, 1, dir.as_bytes());
    let r = call_raw(
        &ch,
        "/v1.Filesystem/Mkdir",
        body,
        Some(Duration::from_secs(10)),
    )
    .await;
    assert!(r.is_ok(), "{what}: Mkdir: {r:?}");
    assert!(std::path::Path::new(&dir).is_dir());
    t.elapsed()
}

/// Stalled bodies and idle connections from one client: RSS stays under the ceiling the limits
/// give, another client is served. Before the limits, each stalled stream pinned its whole
/// message (the daemon accepted 4 MiB and waited for the rest for ever) and every idle
/// connection stayed: this test failed its ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_and_idle_connections_do_not_raise_memory_past_the_ceiling() {
    let a = attack();
    let d = Daemon::start(&[]);
    let pid = d.child.id();
    let sock = d.sockets.join("csi-proxy-filesystem-v1.sock");
    other_client_answers(&d, "before the attack").await;
    let before = rss_kib(pid);

    let mut idle = Vec::with_capacity(a.idle);
    for _ in 0..a.idle {
        if let Some(s) = idle_connection(&sock).await {
            idle.push(s);
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.connections {
        let client = h2_connection(&sock).await;
        for _ in 0..a.streams {
            let client = client.clone();
            let (declared, sent) = (a.declared, a.sent);
            tasks.spawn(async move { stall(client, "/v1.Filesystem/Mkdir", declared, sent).await });
        }
    }
    let mut stalled = Vec::new();
    while let Some(s) = tasks.join_next().await {
        stalled.extend(s.unwrap());
    }
    // Let the daemon take in whatever it accepted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = rss_kib(pid);
    let answered_in = other_client_answers(&d, "during the attack").await;

    // What the limits let one client pin: each idle connection's state (under 64 KiB), and at
    // most RECEIVING_REQUESTS messages of the largest size with their stream windows.
    let receiving = (a.connections * a.streams).min(limits::RECEIVING_REQUESTS);
    let ceiling_kib = (a.idle * 64
        + receiving * (limits::MAX_REQUEST_BYTES + limits::STREAM_WINDOW as usize) / 1024
        + 16 * 1024) as u64;
    eprintln!(
        "RSS before {before} KiB, under {} idle connections and {} stalled {}-byte bodies \
         {during} KiB (+{} KiB; ceiling +{ceiling_kib} KiB); another client answered \
         PathExists and Mkdir in {answered_in:?}; {} connections held, {} streams opened",
        a.idle,
        a.connections * a.streams,
        a.declared,
        during.saturating_sub(before),
        idle.len(),
        stalled.len(),
    );
    assert!(
        during.saturating_sub(before) <= ceiling_kib,
        "RSS grew by {} KiB under the attack, past the ceiling of {ceiling_kib} KiB",
        during - before
    );
    drop(stalled);
    drop(idle);
}

/// A message under the size limit whose sender stalls is answered RESOURCE_EXHAUSTED once
/// BODY_TIMEOUT passes, naming the limit; before, the daemon waited for the rest for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stops_arriving_is_answered_resource_exhausted() {
    let d = Daemon::start(&[]);
    let sock = d.sockets.join("csi-proxy-filesystem-v1.sock");
    let client = h2_connection(&sock).await;
    let (resp, _stream) = stall(client, "/v1.Filesystem/Mkdir", 2000, 1000)
        .await
        .expect("the stream opens");
    let t = Instant::now();
    let resp = tokio::time::timeout(limits::BODY_TIMEOUT * 2, resp)
        .await
        .expect("an answer within twice the body timeout")
        .expect("a response");
    let (head, mut body) = resp.into_parts();
    // A trailers-only answer carries the status in the headers; otherwise in the trailers.
    let status = match head.headers.get("grpc-status") {
        Some(s) => (s.clone(), head.headers.get("grpc-message").cloned()),
        None => {
            let trailers = body.trailers().await.unwrap().expect("trailers");
            (
                trailers["grpc-status"].clone(),
                trailers.get("grpc-message").cloned(),
            )
        }
    };
    eprintln!("answered after {:?}: {status:?}", t.elapsed());
    assert_eq!(status.0, "8", "RESOURCE_EXHAUSTED");
    let message = status
        .1
        .map(|m| m.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    assert!(
        message.contains("did%20not%20arrive") || message.contains("did not arrive"),
        "{message}"
    );
    other_client_answers(&d, "after a stalled body").await;
}
