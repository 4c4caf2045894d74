//! Named-pipe transport end to end: a tonic server on a `PipeListener`, tonic clients over
//! `ClientOptions`. Windows only; on Linux CI this runs under wine (see scripts/wine-run.sh).
#![cfg(windows)]

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use csi_proxy_api::filesystem::v1 as fs;
use csi_proxy_server::transport::authority::AuthorityFix;
use csi_proxy_server::transport::pipe::{DEFAULT_PIPE_SDDL, PipeConnectInfo, PipeListener};
use fs::filesystem_client::FilesystemClient;
use fs::filesystem_server::{Filesystem, FilesystemServer};
use hyper_util::rt::TokioIo;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::windows::named_pipe::{ClientOptions, NamedPipeClient};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt as _;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status};

const ERROR_PIPE_BUSY: i32 = 231;

/// `PathExists` answers `exists = true` for any path but this one, for which it answers whether
/// tonic attached our `PipeConnectInfo` with this very process as the client.
const CHECK_CONNECT_INFO: &str = "check-connect-info";

#[derive(Default)]
struct TestFilesystem;

#[tonic::async_trait]
impl Filesystem for TestFilesystem {
    async fn path_exists(
        &self,
        request: Request<fs::PathExistsRequest>,
    ) -> Result<Response<fs::PathExistsResponse>, Status> {
        let exists = if request.get_ref().path == CHECK_CONNECT_INFO {
            let info = request.extensions().get::<PipeConnectInfo>().copied();
            info.is_some_and(|i| i.client_process_id == Some(std::process::id()))
        } else {
            true
        };
        Ok(Response::new(fs::PathExistsResponse { exists }))
    }

    async fn mkdir(
        &self,
        request: Request<fs::MkdirRequest>,
    ) -> Result<Response<fs::MkdirResponse>, Status> {
        Err(Status::invalid_argument(format!(
            "test refuses mkdir {}",
            request.get_ref().path
        )))
    }

    async fn rmdir(
        &self,
        _: Request<fs::RmdirRequest>,
    ) -> Result<Response<fs::RmdirResponse>, Status> {
        Err(Status::unimplemented("rmdir"))
    }

    async fn create_symlink(
        &self,
        _: Request<fs::CreateSymlinkRequest>,
    ) -> Result<Response<fs::CreateSymlinkResponse>, Status> {
        Err(Status::unimplemented("create_symlink"))
    }

    async fn is_symlink(
        &self,
        _: Request<fs::IsSymlinkRequest>,
    ) -> Result<Response<fs::IsSymlinkResponse>, Status> {
        Err(Status::unimplemented("is_symlink"))
    }
}

/// A pipe name no other test (or test process) uses.
fn unique_pipe(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        r"\\.\pipe\csi-proxy-test-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A tonic server serving `TestFilesystem` on one pipe; stopped when dropped.
struct TestServer {
    path: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl TestServer {
    fn start(tag: &str, sddl: &str) -> TestServer {
        let path = unique_pipe(tag);
        let listener = PipeListener::bind(&path, sddl).expect("bind pipe");
        assert_eq!(listener.path(), path);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(
            Server::builder()
                .add_service(FilesystemServer::new(TestFilesystem))
                .serve_with_incoming_shutdown(listener.into_incoming(), async {
                    let _ = stopped.await;
                }),
        );
        TestServer {
            path,
            stop: Some(stop),
            task,
        }
    }

    /// Like `start`, with every connection wrapped in the `:authority` fix, as the daemon does.
    fn start_with_authority_fix(tag: &str) -> TestServer {
        let path = unique_pipe(tag);
        let listener = PipeListener::bind(&path, DEFAULT_PIPE_SDDL).expect("bind pipe");
        let incoming = listener
            .into_incoming()
            .map(|conn| conn.map(AuthorityFix::new));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(
            Server::builder()
                .add_service(FilesystemServer::new(TestFilesystem))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                }),
        );
        TestServer {
            path,
            stop: Some(stop),
            task,
        }
    }

    async fn shutdown(mut self) {
        let _ = self.stop.take().expect("not stopped yet").send(());
        let task = &mut self.task;
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("server stops within 10 s")
            .expect("server task did not panic")
            .expect("server ended without error");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens the pipe the way go-winio's `DialPipe` does: retry while every instance is busy, for at
/// most 2 s.
async fn open_pipe(path: &str) -> io::Result<NamedPipeClient> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match ClientOptions::new().open(path) {
            Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return other,
        }
    }
}

/// A tonic channel whose one connection is a pipe client. `busy_retry = false` fails on
/// `ERROR_PIPE_BUSY` instead of waiting.
async fn channel(path: &str, busy_retry: bool) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    // The URI is required by tonic but unused: the connector ignores it.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let client = if busy_retry {
                    open_pipe(&path).await?
                } else {
                    ClientOptions::new().open(&path)?
                };
                Ok::<_, io::Error>(TokioIo::new(client))
            }
        }))
        .await
}

async fn path_exists(channel: Channel, path: &str) -> Result<bool, Status> {
    let response = FilesystemClient::new(channel)
        .path_exists(fs::PathExistsRequest {
            path: path.to_owned(),
        })
        .await?;
    Ok(response.into_inner().exists)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_over_pipe() {
    let server = TestServer::start("rpc", DEFAULT_PIPE_SDDL);
    let ch = channel(&server.path, false).await.expect("connect");
    assert!(
        path_exists(ch.clone(), r"C:\var\lib\kubelet")
            .await
            .unwrap()
    );
    // An error status travels back intact.
    let status = FilesystemClient::new(ch.clone())
        .mkdir(fs::MkdirRequest { path: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(status.message(), "test refuses mkdir x");
    drop(ch);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_info_names_the_client_process() {
    let server = TestServer::start("info", DEFAULT_PIPE_SDDL);
    let ch = channel(&server.path, false).await.expect("connect");
    assert!(
        path_exists(ch, CHECK_CONNECT_INFO).await.unwrap(),
        "PipeConnectInfo with this process id is attached to requests"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throwaway_connections_do_not_stop_the_server() {
    let server = TestServer::start("probe", DEFAULT_PIPE_SDDL);
    // Like upstream's Go client: a probe connection that is dropped without a byte ...
    for _ in 0..3 {
        drop(open_pipe(&server.path).await.expect("probe connects"));
    }
    // ... and one that is kept open and silent (go-winio never closes its probe).
    let silent = open_pipe(&server.path)
        .await
        .expect("silent probe connects");
    let ch = channel(&server.path, true)
        .await
        .expect("connect after probes");
    assert!(path_exists(ch.clone(), "a").await.unwrap());
    drop(silent);
    // Still serving after the silent one went away.
    let ch2 = channel(&server.path, true)
        .await
        .expect("connect after silent probe closed");
    assert!(path_exists(ch2, "b").await.unwrap());
    assert!(path_exists(ch, "c").await.unwrap());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_clients_never_see_pipe_busy() {
    let server = TestServer::start("seq", DEFAULT_PIPE_SDDL);
    // The next instance is created before a connection is handed to tonic, so once an RPC has
    // been answered an instance is waiting: an immediate open must not fail with PIPE_BUSY.
    for i in 0..10 {
        let ch = channel(&server.path, false)
            .await
            .unwrap_or_else(|e| panic!("client {i} could not connect without retrying: {e:?}"));
        assert!(path_exists(ch, "x").await.unwrap());
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_clients() {
    let server = TestServer::start("concurrent", DEFAULT_PIPE_SDDL);
    let mut clients = Vec::new();
    for i in 0..20 {
        let path = server.path.clone();
        clients.push(tokio::spawn(async move {
            let ch = channel(&path, true)
                .await
                .map_err(|e| format!("client {i}: {e:?}"))?;
            for round in 0..5 {
                let exists = path_exists(ch.clone(), &format!("{i}/{round}"))
                    .await
                    .map_err(|e| format!("client {i} round {round}: {e}"))?;
                assert!(exists);
            }
            Ok::<_, String>(())
        }));
    }
    for client in clients {
        client.await.expect("client task").expect("client RPCs");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_bind_of_the_same_name_fails_clearly() {
    let server = TestServer::start("twice", DEFAULT_PIPE_SDDL);
    let err = PipeListener::bind(&server.path, DEFAULT_PIPE_SDDL).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("pipe {} is already in use", server.path))
            && message.contains("another csi-proxy is running?"),
        "{message}"
    );
    // The first server is unaffected. (bind dialled it once to find it, so its listening
    // instance may be busy for a moment: wait for it like any client does.)
    let ch = channel(&server.path, true).await.expect("connect");
    assert!(path_exists(ch, "x").await.unwrap());
    server.shutdown().await;
}

/// A hand-off: a second server creates instances beside the running one; clients holding a
/// channel each and calling in a loop never fail while the first stops (GOAWAY, in-flight
/// calls finish) and after it is gone, when every connection reaches the second. A call the
/// old server never processed (beyond its GOAWAY's last stream, or taken back by the closing
/// connection) is sent again, as grpc-go's transparent retry does; every other error fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_beside_the_running_one_takes_over_without_a_failed_call() {
    let old = TestServer::start("beside", DEFAULT_PIPE_SDDL);
    let beside = PipeListener::bind_beside(&old.path, DEFAULT_PIPE_SDDL).expect("bind beside");
    let (stop_new, stopped) = oneshot::channel::<()>();
    let new = tokio::spawn(
        Server::builder()
            .add_service(FilesystemServer::new(TestFilesystem))
            .serve_with_incoming_shutdown(beside.into_incoming(), async {
                let _ = stopped.await;
            }),
    );
    let done = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let ch = channel(&old.path, true).await.expect("connect");
        let done = done.clone();
        clients.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !done.load(Ordering::Relaxed) {
                match path_exists(ch.clone(), "x").await {
                    Ok(true) => ok += 1,
                    Err(s) if csi_proxy_client::retry::never_processed(&s) => {}
                    other => failed.push(format!("{other:?}")),
                }
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let path = old.path.clone();
    old.shutdown().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The name is the new server's alone now: a fresh client reaches it.
    let ch = channel(&path, true)
        .await
        .expect("connect after the old server is gone");
    assert!(path_exists(ch, "x").await.unwrap());
    done.store(true, Ordering::Relaxed);
    for c in clients {
        let (ok, failed) = c.await.unwrap();
        assert!(
            failed.is_empty(),
            "failed calls during the hand-off: {failed:?}"
        );
        assert!(ok > 0);
    }
    let _ = stop_new.send(());
    new.await.unwrap().unwrap();
}

/// With nobody serving the name, binding beside is binding: the first instance, after which a
/// plain second bind is refused as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_beside_nobody_makes_the_first_instance() {
    let path = unique_pipe("beside-nobody");
    let listener = PipeListener::bind_beside(&path, DEFAULT_PIPE_SDDL).expect("bind beside");
    let err = PipeListener::bind(&path, DEFAULT_PIPE_SDDL).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_is_free_again_after_the_listener_is_dropped() {
    let path = unique_pipe("rebind");
    let listener = PipeListener::bind(&path, DEFAULT_PIPE_SDDL).expect("first bind");
    drop(listener);
    PipeListener::bind(&path, DEFAULT_PIPE_SDDL).expect("bind after drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_names_get_the_pipe_prefix() {
    let bare = unique_pipe("bare")
        .trim_start_matches(r"\\.\pipe\")
        .to_owned();
    let listener = PipeListener::bind(&bare, DEFAULT_PIPE_SDDL).expect("bind bare name");
    assert_eq!(listener.path(), format!(r"\\.\pipe\{bare}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_sddl_is_rejected() {
    for sddl in [
        "definitely not SDDL",
        "D:(A;;GA;;;NOT_A_SID)",
        "",
        "D:",
        "D:NO_ACCESS_CONTROL",
        "O:SY",
    ] {
        let path = unique_pipe("badsddl");
        let err = PipeListener::bind(&path, sddl).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{sddl:?}: {err}");
        let message = err.to_string();
        assert!(
            message.contains("invalid pipe security descriptor (SDDL)")
                && message.contains(&format!("{sddl:?}")),
            "{message}"
        );
        // Nothing was created: the name is still free.
        PipeListener::bind(&path, DEFAULT_PIPE_SDDL).expect("name still free");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_sddl_is_used() {
    // SYSTEM, Administrators and the pipe's owner; Everyone may read and write.
    let sddl = "D:P(A;;GA;;;SY)(A;;GA;;;BA)(A;;GA;;;OW)(A;;GRGW;;;WD)";
    let server = TestServer::start("custom", sddl);
    let ch = channel(&server.path, false).await.expect("connect");
    assert!(path_exists(ch, "x").await.unwrap());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_frees_the_name() {
    let server = TestServer::start("stop", DEFAULT_PIPE_SDDL);
    let path = server.path.clone();
    // One connection, so that the listener's last instance has a connect pending when dropped.
    let ch = channel(&path, false).await.expect("connect");
    assert!(path_exists(ch, "x").await.unwrap());
    server.shutdown().await;
    // Dropping an instance with a pending overlapped ConnectNamedPipe cancels it; mio closes
    // the handle once the cancellation completes, so the name is freed shortly after, not at
    // once.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match PipeListener::bind(&path, DEFAULT_PIPE_SDDL) {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("name still in use 5 s after shutdown: {e}"),
        }
    }
}

// ---- an upstream Go client, byte for byte ----
//
// grpc-go dials the pipe path as its target and sends it as `:authority`, raw or
// percent-encoded (design §2). tonic's client cannot send such an authority, so this client
// writes the HTTP/2 frames itself: preface, SETTINGS, one HEADERS + DATA request, and reads
// frames until the stream ends.

const FRAME_DATA: u8 = 0x0;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_RST_STREAM: u8 = 0x3;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_GOAWAY: u8 = 0x7;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_ACK: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// HPACK integer with an `n`-bit prefix (RFC 7541 §5.1).
fn hpack_int(out: &mut Vec<u8>, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(value as u8);
        return;
    }
    out.push(max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// Literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2).
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    hpack_int(out, 7, name.len());
    out.extend_from_slice(name.as_bytes());
    hpack_int(out, 7, value.len());
    out.extend_from_slice(value.as_bytes());
}

#[derive(Debug, PartialEq)]
enum GoClientOutcome {
    /// grpc-status and the decoded response, if one came.
    Answered(String, Option<fs::PathExistsResponse>),
    /// The server reset the stream (h2's answer to a malformed `:authority`), with its code.
    Reset(u32),
    /// The server sent GOAWAY, with its code.
    GoAway(u32),
}

fn answered_exists() -> GoClientOutcome {
    GoClientOutcome::Answered("0".into(), Some(fs::PathExistsResponse { exists: true }))
}

async fn go_client_path_exists(pipe: &str, authority: &str, path: &str) -> GoClientOutcome {
    let mut conn = open_pipe(pipe).await.expect("open pipe");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(FRAME_SETTINGS, 0, 0, &[]));
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/v1.Filesystem/PathExists"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("user-agent", "grpc-go/1.38.0"),
        ("te", "trailers"),
    ] {
        hpack_literal(&mut block, name, value);
    }
    out.extend(frame(FRAME_HEADERS, FLAG_END_HEADERS, 1, &block));
    let message = fs::PathExistsRequest {
        path: path.to_owned(),
    }
    .encode_to_vec();
    let mut grpc = vec![0u8];
    grpc.extend_from_slice(&(message.len() as u32).to_be_bytes());
    grpc.extend_from_slice(&message);
    out.extend(frame(FRAME_DATA, FLAG_END_STREAM, 1, &grpc));
    conn.write_all(&out).await.expect("send request");

    let read_all = async {
        let mut decoder = loona_hpack::Decoder::new();
        let mut status = None;
        let mut body = Vec::new();
        loop {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.expect("frame header");
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.expect("frame payload");
            let word = |at: usize| u32::from_be_bytes(payload[at..at + 4].try_into().unwrap());
            match kind {
                FRAME_SETTINGS if flags & FLAG_ACK == 0 => {
                    let ack = frame(FRAME_SETTINGS, FLAG_ACK, 0, &[]);
                    conn.write_all(&ack).await.expect("settings ack");
                }
                FRAME_RST_STREAM if stream == 1 => return GoClientOutcome::Reset(word(0)),
                FRAME_GOAWAY => return GoClientOutcome::GoAway(word(4)),
                FRAME_HEADERS if stream == 1 => {
                    assert_ne!(flags & FLAG_END_HEADERS, 0, "no CONTINUATION expected");
                    for (name, value) in decoder.decode(&payload).expect("hpack") {
                        if name == b"grpc-status" {
                            status = Some(String::from_utf8(value).unwrap());
                        }
                    }
                    if flags & FLAG_END_STREAM != 0 {
                        break;
                    }
                }
                FRAME_DATA if stream == 1 => {
                    body.extend_from_slice(&payload);
                    if flags & FLAG_END_STREAM != 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        let response = (body.len() >= 5)
            .then(|| fs::PathExistsResponse::decode(&body[5..]).expect("response message"));
        GoClientOutcome::Answered(status.unwrap_or_default(), response)
    };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("server answers within 10 s")
}

/// The two `:authority` forms grpc-go sends for a pipe target.
fn go_authorities(pipe: &str) -> [String; 2] {
    [pipe.to_owned(), pipe.replace('\\', "%5C")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_go_client_authorities_work_through_the_authority_fix() {
    let server = TestServer::start_with_authority_fix("goauth");
    for authority in go_authorities(&server.path) {
        let outcome = go_client_path_exists(&server.path, &authority, "x").await;
        assert_eq!(outcome, answered_exists(), "authority {authority}");
    }
    // The connect info survives the wrapper.
    let outcome = go_client_path_exists(&server.path, &server.path, CHECK_CONNECT_INFO).await;
    assert_eq!(outcome, answered_exists());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fix_h2_rejects_upstream_authorities() {
    // Control for the test above: the hand-made client is right, and the fix is what matters.
    let server = TestServer::start("nofix", DEFAULT_PIPE_SDDL);
    for authority in go_authorities(&server.path) {
        let outcome = go_client_path_exists(&server.path, &authority, "x").await;
        // RST_STREAM(PROTOCOL_ERROR = 1).
        assert_eq!(outcome, GoClientOutcome::Reset(1), "authority {authority}");
    }
    let outcome = go_client_path_exists(&server.path, "localhost", "x").await;
    assert_eq!(outcome, answered_exists());
    server.shutdown().await;
}

/// Bytes that depend on their position, so a lost, doubled or reordered chunk shows.
fn patterned(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// Ends the whole test process if the test is still running after `secs`: a write that held the
/// runtime's only thread would otherwise hang the test forever instead of failing it.
fn watchdog(test: &'static str, secs: u64) -> std::sync::mpsc::Sender<()> {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            finished.recv_timeout(Duration::from_secs(secs))
        {
            eprintln!("{test}: still running after {secs} s: the runtime's thread is held");
            std::process::exit(101);
        }
    });
    done
}

/// A client of `listener` and the server end of its connection.
async fn connected_pair(
    listener: &mut PipeListener,
) -> (NamedPipeClient, csi_proxy_server::transport::pipe::PipeConn) {
    let client = ClientOptions::new()
        .open(listener.path())
        .expect("open pipe");
    let conn = listener.accept().await.expect("accept");
    (client, conn)
}

/// A client that stops reading fills the pipe: the daemon's write then stays pending, and must
/// neither hold the runtime's only thread (a ticker on it keeps ticking) nor lose, double or
/// reorder a byte once the client reads again, in writes of every size from 1 byte to more than
/// the pipe's buffer.
#[tokio::test(flavor = "current_thread")]
async fn a_client_that_stops_reading_holds_no_thread_and_loses_no_byte() {
    let _watchdog = watchdog("a_client_that_stops_reading", 30);
    let mut listener = PipeListener::bind(&unique_pipe("full"), DEFAULT_PIPE_SDDL).unwrap();
    let (mut client, mut conn) = connected_pair(&mut listener).await;
    let data = patterned(3 * 1024 * 1024 + 17);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        let mut at = 0;
        let mut size = 1;
        while at < sent.len() {
            let end = (at + size).min(sent.len());
            conn.write_all(&sent[at..end]).await?;
            at = end;
            size = size * 3 % 700_001 + 1;
        }
        conn.flush().await?;
        Ok::<_, io::Error>(conn)
    });
    let ticks = Arc::new(AtomicU32::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    // Nobody reads for 400 ms: far more was written than the pipe holds.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!writer.is_finished(), "3 MiB fit into the pipe?");
    let seen = ticks.load(Ordering::Relaxed);
    assert!(
        seen >= 10,
        "the runtime's thread ran {seen} ticks in 400 ms"
    );
    let mut got = vec![0u8; data.len()];
    client.read_exact(&mut got).await.unwrap();
    assert!(got == data, "the bytes read differ from the bytes written");
    let mut conn = writer.await.unwrap().expect("every write succeeded");
    ticker.abort();
    // The connection still works both ways after the stall.
    conn.write_all(b"after").await.unwrap();
    let mut tail = [0u8; 5];
    client.read_exact(&mut tail).await.unwrap();
    assert_eq!(&tail, b"after");
}

/// A connection dropped while its write is pending (the client never reads) goes away at once,
/// the client sees the bytes that were in the pipe and then the end, and the listener goes on
/// serving.
#[tokio::test(flavor = "current_thread")]
async fn dropping_a_connection_with_a_pending_write_ends_it() {
    let _watchdog = watchdog("dropping_a_connection_with_a_pending_write", 30);
    let mut listener = PipeListener::bind(&unique_pipe("drop"), DEFAULT_PIPE_SDDL).unwrap();
    let (mut client, mut conn) = connected_pair(&mut listener).await;
    let data = patterned(2 * 1024 * 1024);
    // Written behind: returns with the rest of the bytes still pending.
    let mut at = 0;
    while at < data.len() {
        let more = tokio::time::timeout(Duration::from_millis(200), conn.write(&data[at..])).await;
        match more {
            Ok(n) => at += n.unwrap(),
            Err(_) => break,
        }
    }
    let started = Instant::now();
    drop(conn);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "drop took {:?}",
        started.elapsed()
    );
    let mut got = Vec::new();
    let _ = client.read_to_end(&mut got).await;
    assert!(got.len() < data.len(), "the whole 2 MiB fit into the pipe?");
    assert!(
        got == data[..got.len()],
        "what arrived is not a prefix of what was written"
    );
    let (mut client, mut conn) = connected_pair(&mut listener).await;
    conn.write_all(b"next").await.unwrap();
    let mut next = [0u8; 4];
    client.read_exact(&mut next).await.unwrap();
    assert_eq!(&next, b"next");
}
