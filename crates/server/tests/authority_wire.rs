//! Wire-level tests of the `:authority` fix: a real tonic server on a Unix socket, and a client
//! that writes the exact HTTP/2 bytes an upstream grpc-go client sends (the pipe path as
//! `:authority`, HPACK-encoded with incremental indexing and Huffman coding as grpc-go does).
#![cfg(unix)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use csi_proxy_api::filesystem::v1::filesystem_server::{Filesystem, FilesystemServer};
use csi_proxy_api::filesystem::v1::{
    CreateSymlinkRequest, CreateSymlinkResponse, IsSymlinkRequest, IsSymlinkResponse, MkdirRequest,
    MkdirResponse, PathExistsRequest, PathExistsResponse, RmdirRequest, RmdirResponse,
};
use csi_proxy_server::transport::authority::AuthorityFix;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

const RAW: &[u8] = br"\\.\pipe\csi-proxy-filesystem-v1";
const ENCODED: &[u8] = b"%5C%5C.%5Cpipe%5Ccsi-proxy-filesystem-v1";
const PATH_EXISTS: &str = "/v1.Filesystem/PathExists";
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const PROTOCOL_ERROR: u32 = 0x1;

/// Whole-test budget: generous for a loaded 2-core CI box, yet a bug cannot hang the run.
const TEST_TIMEOUT: Duration = Duration::from_secs(5);

// ---- the server ---------------------------------------------------------------------------

struct TestFs;

#[tonic::async_trait]
impl Filesystem for TestFs {
    async fn create_symlink(
        &self,
        _: Request<CreateSymlinkRequest>,
    ) -> Result<Response<CreateSymlinkResponse>, Status> {
        Err(Status::unimplemented("test"))
    }

    async fn is_symlink(
        &self,
        _: Request<IsSymlinkRequest>,
    ) -> Result<Response<IsSymlinkResponse>, Status> {
        Err(Status::unimplemented("test"))
    }

    async fn mkdir(&self, _: Request<MkdirRequest>) -> Result<Response<MkdirResponse>, Status> {
        Err(Status::unimplemented("test"))
    }

    async fn path_exists(
        &self,
        request: Request<PathExistsRequest>,
    ) -> Result<Response<PathExistsResponse>, Status> {
        Ok(Response::new(PathExistsResponse {
            exists: request.into_inner().path == "/yes",
        }))
    }

    async fn rmdir(&self, _: Request<RmdirRequest>) -> Result<Response<RmdirResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
}

/// Serves `TestFs` on a socket in a fresh temporary directory, each accepted connection wrapped
/// in `AuthorityFix` when `fix` is set. The server lives as long as the test's runtime.
fn start_server(fix: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi-proxy-filesystem-v1.sock");
    let incoming = UnixListenerStream::new(UnixListener::bind(&path).unwrap());
    let router = Server::builder().add_service(FilesystemServer::new(TestFs));
    if fix {
        tokio::spawn(router.serve_with_incoming(incoming.map(|r| r.map(AuthorityFix::new))));
    } else {
        tokio::spawn(router.serve_with_incoming(incoming));
    }
    (dir, path)
}

// ---- a grpc-go flavoured HPACK encoder -----------------------------------------------------

/// Code lengths of the HPACK Huffman code (RFC 7541 Appendix B), symbols 0..=255. The code is
/// canonical, so the lengths determine the codes.
const HUFFMAN_LENGTHS: [u8; 256] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
];

fn huffman(s: &[u8]) -> Vec<u8> {
    let mut order: Vec<usize> = (0..256).collect();
    order.sort_by_key(|&sym| (HUFFMAN_LENGTHS[sym], sym));
    let mut codes = [(0u64, 0u8); 256];
    let (mut code, mut prev) = (0u64, HUFFMAN_LENGTHS[order[0]]);
    for (i, &sym) in order.iter().enumerate() {
        let len = HUFFMAN_LENGTHS[sym];
        if i > 0 {
            code = (code + 1) << (len - prev);
        }
        prev = len;
        codes[sym] = (code, len);
    }
    let (mut acc, mut bits, mut out) = (0u64, 0u32, Vec::new());
    for &b in s {
        let (code, len) = codes[usize::from(b)];
        acc = acc << len | code;
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        out.push((acc << (8 - bits)) as u8 | (0xff >> bits));
    }
    out
}

fn put_int(out: &mut Vec<u8>, first: u8, prefix_bits: u32, mut value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push(0x80 | (value % 128) as u8);
        value /= 128;
    }
    out.push(value as u8);
}

/// String literal, Huffman-coded when that is shorter (as Go's `hpack.appendHpackString`).
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    let h = huffman(s);
    if h.len() < s.len() {
        put_int(out, 0x80, 7, h.len());
        out.extend_from_slice(&h);
    } else {
        put_int(out, 0x00, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// The static-table entries (RFC 7541 Appendix A) a gRPC request can match.
const STATIC: &[(usize, &str, &str)] = &[
    (1, ":authority", ""),
    (2, ":method", "GET"),
    (3, ":method", "POST"),
    (4, ":path", "/"),
    (6, ":scheme", "http"),
    (31, "content-type", ""),
    (58, "user-agent", ""),
];

/// What golang.org/x/net/http2/hpack's `Encoder.WriteField` does: indexed when name and value
/// are in a table, otherwise a literal with incremental indexing (name by index if known).
#[derive(Default)]
struct GoEncoder {
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
}

impl GoEncoder {
    fn encode(&mut self, fields: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(name, value) in fields {
            let stat = STATIC
                .iter()
                .find(|e| e.1 == name && e.2.as_bytes() == value);
            let dynamic = self
                .table
                .iter()
                .position(|(n, v)| n == name.as_bytes() && v == value);
            if let Some(&(i, ..)) = stat {
                put_int(&mut out, 0x80, 7, i);
                continue;
            }
            if let Some(i) = dynamic {
                put_int(&mut out, 0x80, 7, 62 + i);
                continue;
            }
            let name_index = STATIC
                .iter()
                .find(|e| e.1 == name)
                .map(|e| e.0)
                .or_else(|| {
                    self.table
                        .iter()
                        .position(|(n, _)| n == name.as_bytes())
                        .map(|i| 62 + i)
                });
            match name_index {
                Some(i) => put_int(&mut out, 0x40, 6, i),
                None => {
                    out.push(0x40);
                    put_string(&mut out, name.as_bytes());
                }
            }
            put_string(&mut out, value);
            self.table
                .push_front((name.as_bytes().to_vec(), value.to_vec()));
            // Evict beyond the default 4096-byte table (RFC 7541 §4.1 sizes).
            while self
                .table
                .iter()
                .map(|(n, v)| n.len() + v.len() + 32)
                .sum::<usize>()
                > 4096
            {
                self.table.pop_back();
            }
        }
        out
    }
}

// ---- a raw HTTP/2 client ------------------------------------------------------------------

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// What came back for one request stream.
#[derive(Debug, Default)]
struct Reply {
    /// Response headers and trailers, in order.
    fields: Vec<(String, String)>,
    data: Vec<u8>,
    reset: Option<u32>,
    goaway: Option<u32>,
}

impl Reply {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Asserts a successful unary PathExists call and returns its answer.
    fn exists(&self) -> bool {
        assert_eq!(self.reset, None, "stream reset: {self:?}");
        assert_eq!(self.goaway, None, "connection closed: {self:?}");
        assert_eq!(self.field(":status"), Some("200"), "{self:?}");
        assert_eq!(self.field("grpc-status"), Some("0"), "{self:?}");
        let (&flag, rest) = self.data.split_first().expect("a gRPC message");
        assert_eq!(flag, 0, "uncompressed");
        let (len, body) = rest.split_at(4);
        let len = u32::from_be_bytes(len.try_into().unwrap()) as usize;
        assert_eq!(body.len(), len);
        PathExistsResponse::decode(body).unwrap().exists
    }
}

struct Client {
    io: UnixStream,
    encoder: GoEncoder,
    /// The server's HPACK context: response blocks must be decoded in order, on one decoder.
    decoder: loona_hpack::Decoder<'static>,
    buf: Vec<u8>,
}

impl Client {
    /// Connects and sends the preface and an empty SETTINGS frame, as any h2c client does.
    async fn connect(path: &Path) -> Self {
        let mut client = Client {
            io: UnixStream::connect(path).await.unwrap(),
            encoder: GoEncoder::default(),
            decoder: loona_hpack::Decoder::new(),
            buf: Vec::new(),
        };
        client.io.write_all(PREFACE).await.unwrap();
        client.send(0x4, 0, 0, &[]).await;
        client
    }

    async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut frame = vec![len[1], len[2], len[3], kind, flags];
        frame.extend_from_slice(&stream.to_be_bytes());
        frame.extend_from_slice(payload);
        self.io.write_all(&frame).await.unwrap();
    }

    /// The next frame, or `None` at EOF.
    async fn read_frame(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = usize::from(self.buf[0]) << 16
                    | usize::from(self.buf[1]) << 8
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let frame = Frame {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream: u32::from_be_bytes(self.buf[5..9].try_into().unwrap())
                            & 0x7fff_ffff,
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    return Some(frame);
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.io.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one unary PathExists request on `stream` and collects the reply. `authority` of
    /// `None` leaves the pseudo-header out. Returns the reply and the HEADERS block sent.
    async fn path_exists(
        &mut self,
        stream: u32,
        authority: Option<&[u8]>,
        path: &str,
    ) -> (Reply, Vec<u8>) {
        // grpc-go's field order (http2_client.go createHeaderFields).
        let mut fields: Vec<(&str, &[u8])> = vec![
            (":method", b"POST"),
            (":scheme", b"http"),
            (":path", PATH_EXISTS.as_bytes()),
        ];
        if let Some(a) = authority {
            fields.push((":authority", a));
        }
        fields.extend([
            ("content-type", &b"application/grpc"[..]),
            ("user-agent", b"grpc-go/1.38.0"),
            ("te", b"trailers"),
        ]);
        let block = self.encoder.encode(&fields);
        self.send(0x1, 0x4, stream, &block).await; // END_HEADERS

        let message = PathExistsRequest { path: path.into() }.encode_to_vec();
        let mut data = vec![0u8];
        data.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        data.extend_from_slice(&message);
        self.send(0x0, 0x1, stream, &data).await; // END_STREAM

        (self.collect(stream).await, block)
    }

    /// Reads frames, answering SETTINGS and PING, until `stream` ends.
    async fn collect(&mut self, stream: u32) -> Reply {
        let mut reply = Reply::default();
        let mut block: Option<(Frame, Vec<u8>)> = None;
        while let Some(frame) = self.read_frame().await {
            match frame.kind {
                0x4 if frame.flags & 0x1 == 0 => self.send(0x4, 0x1, 0, &[]).await,
                0x6 if frame.flags & 0x1 == 0 => self.send(0x6, 0x1, 0, &frame.payload).await,
                0x1 | 0x9 => {
                    let fragment = frame.payload.clone();
                    let end_headers = frame.flags & 0x4 != 0;
                    match block.as_mut() {
                        Some((_, b)) => b.extend_from_slice(&fragment),
                        None => block = Some((frame, fragment)),
                    }
                    if end_headers {
                        let (first, fragment) = block.take().unwrap();
                        assert_eq!(first.flags & 0x28, 0, "server sent no padding/priority");
                        let fields = self.decoder.decode(&fragment).unwrap();
                        if first.stream == stream {
                            reply.fields.extend(fields.into_iter().map(|(n, v)| {
                                (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap())
                            }));
                            if first.flags & 0x1 != 0 {
                                return reply;
                            }
                        }
                    }
                }
                0x0 if frame.stream == stream => {
                    reply.data.extend_from_slice(&frame.payload);
                    if frame.flags & 0x1 != 0 {
                        return reply;
                    }
                }
                0x3 if frame.stream == stream => {
                    reply.reset = Some(u32::from_be_bytes(frame.payload[..4].try_into().unwrap()));
                    return reply;
                }
                0x7 => {
                    reply.goaway =
                        Some(u32::from_be_bytes(frame.payload[4..8].try_into().unwrap()));
                    return reply;
                }
                _ => {}
            }
        }
        panic!("connection closed before stream {stream} ended: {reply:?}");
    }
}

async fn with_timeout(test: impl Future<Output = ()>) {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .expect("test timed out");
}

/// One request with the given `:authority` on a fresh connection to a fixed server.
async fn single_request(authority: Option<&[u8]>) {
    let (_dir, path) = start_server(true);
    let mut client = Client::connect(&path).await;
    let (reply, _) = client.path_exists(1, authority, "/yes").await;
    assert!(reply.exists());
    let (reply, _) = client.path_exists(3, authority, "/no").await;
    assert!(!reply.exists());
}

// ---- tests ----------------------------------------------------------------------------------

#[tokio::test]
async fn raw_pipe_path_authority_is_served() {
    with_timeout(single_request(Some(RAW))).await;
}

#[tokio::test]
async fn percent_encoded_pipe_path_authority_is_served() {
    with_timeout(single_request(Some(ENCODED))).await;
}

#[tokio::test]
async fn localhost_authority_is_served() {
    with_timeout(single_request(Some(b"localhost"))).await;
}

#[tokio::test]
async fn missing_authority_is_served() {
    with_timeout(single_request(None)).await;
}

#[tokio::test]
async fn second_request_refers_to_the_dynamic_table_entry() {
    with_timeout(async {
        let (_dir, path) = start_server(true);
        let mut client = Client::connect(&path).await;
        let (reply, first) = client.path_exists(1, Some(RAW), "/yes").await;
        assert!(reply.exists());
        // First block: :authority (static name 1) as a literal with incremental indexing.
        assert!(first.contains(&(0x40 | 1)), "{first:02x?}");

        let (reply, second) = client.path_exists(3, Some(RAW), "/no").await;
        assert!(!reply.exists());
        // Second block: everything indexed; :authority is the 4th-newest dynamic entry (after
        // te, user-agent, content-type), i.e. index 65, and no literal is left.
        assert_eq!(
            second,
            [
                0x83,
                0x86,
                0x80 | 66,
                0x80 | 65,
                0x80 | 64,
                0x80 | 63,
                0x80 | 62
            ]
        );

        // A third request mixing a new value with old references still lines up.
        let (reply, third) = client.path_exists(5, Some(ENCODED), "/yes").await;
        assert!(reply.exists());
        assert!(third.contains(&(0x80 | 63)), "{third:02x?}");
    })
    .await;
}

#[tokio::test]
async fn probe_connections_do_not_disturb_later_ones() {
    with_timeout(async {
        let (_dir, path) = start_server(true);
        // Upstream clients connect and drop a throw-away connection before dialling...
        drop(UnixStream::connect(&path).await.unwrap());
        // ...or keep one open without ever speaking.
        let idle = UnixStream::connect(&path).await.unwrap();
        let mut client = Client::connect(&path).await;
        let (reply, _) = client.path_exists(1, Some(RAW), "/yes").await;
        assert!(reply.exists());
        drop(idle);
        let mut client = Client::connect(&path).await;
        let (reply, _) = client.path_exists(1, Some(ENCODED), "/yes").await;
        assert!(reply.exists());
    })
    .await;
}

#[tokio::test]
async fn unimplemented_rpcs_answer_through_the_fix() {
    with_timeout(async {
        let (_dir, path) = start_server(true);
        let mut client = Client::connect(&path).await;
        let block = client.encoder.encode(&[
            (":method", b"POST"),
            (":scheme", b"http"),
            (":path", b"/v1.Filesystem/Mkdir"),
            (":authority", RAW),
            ("content-type", b"application/grpc"),
            ("te", b"trailers"),
        ]);
        client.send(0x1, 0x4, 1, &block).await;
        client.send(0x0, 0x1, 1, &[0, 0, 0, 0, 0]).await;
        let reply = client.collect(1).await;
        assert_eq!(reply.reset, None, "{reply:?}");
        assert_eq!(reply.field(":status"), Some("200"), "{reply:?}");
        assert_eq!(reply.field("grpc-status"), Some("12"), "{reply:?}");
    })
    .await;
}

/// Negative control: the same bytes against a stock tonic server (no fix) are refused, so the
/// tests above really exercise the problem. `localhost` proves the client itself is sound.
#[tokio::test]
async fn without_the_fix_pipe_authorities_are_reset() {
    with_timeout(async {
        let (_dir, path) = start_server(false);
        let mut client = Client::connect(&path).await;
        let (reply, _) = client.path_exists(1, Some(b"localhost"), "/yes").await;
        assert!(reply.exists());
        let (reply, _) = client.path_exists(3, Some(RAW), "/yes").await;
        assert_eq!(reply.reset, Some(PROTOCOL_ERROR), "{reply:?}");
        let (reply, _) = client.path_exists(5, Some(ENCODED), "/yes").await;
        assert_eq!(reply.reset, Some(PROTOCOL_ERROR), "{reply:?}");
    })
    .await;
}
