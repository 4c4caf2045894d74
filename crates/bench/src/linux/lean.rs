//! A lean load generator: unary gRPC calls written as raw HTTP/2 frames over a Unix socket.
//!
//! The 64-client rows measure how many calls a server answers while the bench client runs on
//! the same 2 cores; a tonic client spends about as much CPU per call as the server, so it caps
//! what any server can show there. This client does the least a conforming HTTP/2 client can:
//! one write per call (HEADERS and DATA, the header block pre-encoded with literals that never
//! touch the server's HPACK table), one or two reads for the answer, no HPACK decoding (the
//! answer is checked by its message bytes instead). It follows RFC 9113 as far as the server
//! needs: the preface and SETTINGS, SETTINGS and PING acknowledged, the receive window opened
//! once to its maximum, a new odd stream per call.

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::h2wire::{
    ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PADDED, PING, PREFACE, RST_STREAM,
    SETTINGS, WINDOW_UPDATE, frame_head, grpc_frame, literal,
};

/// The largest window increment (RFC 9113 §6.9.1): 2^31 − 1 minus the initial 65,535.
const WINDOW_TOP_UP: u32 = 0x7fff_ffff - 65_535;

/// One unary call, ready to be written on any stream: what to send and what must come back.
#[derive(Debug, Clone)]
pub(super) struct UnaryCall {
    /// HPACK block of the request headers.
    block: Vec<u8>,
    /// The gRPC message frame (5-byte prefix + message).
    body: Vec<u8>,
    /// The gRPC message frame of the expected answer.
    answer: Vec<u8>,
}

impl UnaryCall {
    /// A call of `path` (`/package.Service/Method`) with the encoded `request`, expecting the
    /// encoded `answer`.
    pub(super) fn new(path: &str, request: &[u8], answer: &[u8]) -> Self {
        let mut block = vec![0x83, 0x86]; // :method POST, :scheme http (static 3 and 6)
        literal(&mut block, false, 4, None, path.as_bytes()); // :path
        literal(&mut block, false, 1, None, b"localhost"); // :authority
        literal(&mut block, false, 31, None, b"application/grpc"); // content-type
        literal(&mut block, false, 0, Some(b"te"), b"trailers");
        UnaryCall {
            block,
            body: grpc_frame(request),
            answer: grpc_frame(answer),
        }
    }
}

/// A frame read from the server; the payload only of DATA and PING frames.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// One HTTP/2 connection making one call at a time.
pub(super) struct LeanConn {
    io: UnixStream,
    call: UnaryCall,
    next_stream: u32,
    /// What is written per call, with the stream identifiers patched in.
    request: Vec<u8>,
    /// Bytes read and not yet parsed, from `start` on.
    buf: Vec<u8>,
    start: usize,
    /// Frames to write back (acknowledgements) before the next call.
    replies: Vec<u8>,
    /// Send a PING as soon as an answer's DATA arrives, as grpc-go's bandwidth-delay estimator
    /// does after each response ([`LeanConn::pinging_like_grpc_go`]).
    ping_on_data: bool,
}

impl LeanConn {
    /// Connects to the server's Unix socket and opens the HTTP/2 connection.
    pub(super) async fn connect(socket: &Path, call: UnaryCall) -> Result<Self, String> {
        let mut io = UnixStream::connect(socket)
            .await
            .map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
        let mut hello = PREFACE.to_vec();
        frame_head(&mut hello, 0, SETTINGS, 0, 0);
        frame_head(&mut hello, 4, WINDOW_UPDATE, 0, 0);
        hello.extend_from_slice(&WINDOW_TOP_UP.to_be_bytes());
        io.write_all(&hello).await.map_err(|e| e.to_string())?;
        let mut request = Vec::new();
        frame_head(&mut request, call.block.len(), HEADERS, END_HEADERS, 1);
        request.extend_from_slice(&call.block);
        frame_head(&mut request, call.body.len(), DATA, END_STREAM, 1);
        request.extend_from_slice(&call.body);
        Ok(LeanConn {
            io,
            call,
            next_stream: 1,
            request,
            buf: Vec::with_capacity(16 * 1024),
            start: 0,
            replies: Vec::new(),
            ping_on_data: false,
        })
    }

    /// This connection, pinging the server on each answer as grpc-go clients (upstream's stubs,
    /// the CSI drivers) do: their BDP estimator sends a PING when DATA arrives and no PING of
    /// theirs is outstanding, which with one call at a time is every call.
    pub(super) fn pinging_like_grpc_go(mut self) -> Self {
        self.ping_on_data = true;
        self
    }

    /// Makes one call and checks that its answer is the expected message.
    pub(super) async fn call(&mut self) -> Result<(), String> {
        let stream = self.next_stream;
        self.next_stream = stream
            .checked_add(2)
            .filter(|s| *s <= 0x7fff_ffff)
            .ok_or("stream identifiers used up")?;
        let data_at = 9 + self.call.block.len();
        let id = stream.to_be_bytes();
        self.request[5..9].copy_from_slice(&id);
        self.request[data_at + 5..data_at + 9].copy_from_slice(&id);
        if self.replies.is_empty() {
            self.io.write_all(&self.request).await
        } else {
            self.replies.extend_from_slice(&self.request);
            let out = std::mem::take(&mut self.replies);
            self.io.write_all(&out).await
        }
        .map_err(|e| format!("writing the request: {e}"))?;

        let mut answer: Option<Vec<u8>> = None;
        loop {
            while let Some(Frame {
                kind,
                flags,
                stream: sid,
                payload,
            }) = self.next_frame()
            {
                match kind {
                    SETTINGS if flags & ACK == 0 => {
                        frame_head(&mut self.replies, 0, SETTINGS, ACK, 0)
                    }
                    PING if flags & ACK == 0 => {
                        frame_head(&mut self.replies, 8, PING, ACK, 0);
                        self.replies.extend_from_slice(&payload);
                    }
                    GOAWAY => return Err("the server sent GOAWAY".into()),
                    RST_STREAM if sid == stream => return Err("the server reset the call".into()),
                    DATA if sid == stream => {
                        let data = if flags & PADDED != 0 {
                            let pad = usize::from(*payload.first().unwrap_or(&0));
                            payload
                                .get(1..payload.len().saturating_sub(pad))
                                .unwrap_or_default()
                                .to_vec()
                        } else {
                            payload
                        };
                        answer.get_or_insert_with(Vec::new).extend_from_slice(&data);
                        if self.ping_on_data {
                            let mut ping = Vec::with_capacity(17);
                            frame_head(&mut ping, 8, PING, 0, 0);
                            ping.extend_from_slice(&u64::from(stream).to_be_bytes());
                            self.io
                                .write_all(&ping)
                                .await
                                .map_err(|e| format!("writing a PING: {e}"))?;
                        }
                    }
                    HEADERS if sid == stream && flags & END_STREAM != 0 => {
                        // The trailers: the call is over.
                        return match answer {
                            Some(a) if a == self.call.answer => Ok(()),
                            Some(a) => Err(format!("unexpected answer {a:02x?}")),
                            None => Err("the call failed (trailers only, no answer)".into()),
                        };
                    }
                    _ => {}
                }
            }
            self.fill().await?;
        }
    }

    /// The next whole frame in the buffer.
    fn next_frame(&mut self) -> Option<Frame> {
        let rest = self.buf.get(self.start..)?;
        let head = rest.get(..9)?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let payload = rest.get(9..9 + len)?;
        let frame = Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
            // Only small frames carry what is needed (the answer, acknowledgements).
            payload: if matches!(head[3], DATA | PING) {
                payload.to_vec()
            } else {
                Vec::new()
            },
        };
        self.start += 9 + len;
        Some(frame)
    }

    /// Reads more bytes from the server.
    async fn fill(&mut self) -> Result<(), String> {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let n = self
            .io
            .read_buf(&mut self.buf)
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        Ok(())
    }
}
