//! The `:authority` rewriter alone, in-process: CPU time per request it passes, for a Go client
//! on a Windows pipe (its `:authority` is the pipe path, which must be replaced) and for a
//! client whose `:authority` is valid.
//!
//! The client stream is built the way HTTP/2 clients encode headers: the first request inserts
//! its fields into the HPACK dynamic table (RFC 7541 §6.2.1), later requests on the connection
//! refer to them by index (§6.1), and each request's body follows as a DATA frame.

use crate::h2wire::{
    DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS, frame, grpc_frame, int, literal,
};
use csi_proxy_server::transport::authority::Rewriter;
use std::time::{Duration, Instant};

/// Requests per measured stream.
const REQUESTS: u32 = 20_000;

/// Mean time the rewriter takes per request (header block + DATA frame) on a connection whose
/// `:authority` is `authority`, over [`REQUESTS`] requests fed as the transport reads them.
pub fn per_request(authority: &[u8]) -> Duration {
    let (first, next) = (request(authority, true), request(authority, false));
    // PathExistsRequest { path: "/path" }.
    let body = grpc_frame(&[0x0a, 5, b'/', b'p', b'a', b't', b'h']);
    let mut stream = PREFACE.to_vec();
    frame(&mut stream, SETTINGS, 0, 0, &[]);
    let mut chunks = vec![stream];
    for i in 0..REQUESTS {
        let id = 2 * i + 1;
        let mut c = Vec::new();
        let block = if i == 0 { &first } else { &next };
        frame(&mut c, HEADERS, END_HEADERS, id, block);
        frame(&mut c, DATA, END_STREAM, id, &body);
        chunks.push(c);
    }
    let mut rewriter = Rewriter::new();
    let mut out = Vec::with_capacity(64 * 1024);
    let start = Instant::now();
    for c in &chunks {
        out.clear();
        if rewriter.feed(std::hint::black_box(c), &mut out).is_err() {
            return Duration::MAX;
        }
        std::hint::black_box(&out);
    }
    start.elapsed() / REQUESTS
}

/// A unary gRPC request's header block: the first on the connection inserts every field but
/// `:method` and `:scheme`; later ones refer to the entries (newest first from 62).
fn request(authority: &[u8], first: bool) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    if first {
        literal(&mut b, true, 4, None, b"/v1.Filesystem/PathExists");
        literal(&mut b, true, 1, None, authority);
        literal(&mut b, true, 31, None, b"application/grpc");
        literal(&mut b, true, 58, None, b"grpc-go/1.65.0");
        literal(&mut b, true, 0, Some(b"te"), b"trailers");
    } else {
        // te=62, user-agent=63, content-type=64, :authority=65, :path=66.
        for i in [66, 65, 64, 63, 62] {
            int(&mut b, 0x80, 7, i);
        }
    }
    b
}
