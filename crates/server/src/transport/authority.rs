//! The `:authority` fix: a byte-level shim between an accepted connection and tonic.
//!
//! Upstream Go clients dial the pipe path as the gRPC target, so every request carries
//! `:authority` = the pipe path, raw (`\\.\pipe\csi-proxy-disk-v1`) or percent-encoded
//! (`%5C%5C.%5Cpipe%5Ccsi-proxy-disk-v1`). Neither is a valid RFC 3986 authority, and h2 (under
//! tonic) answers such a request with `RST_STREAM(PROTOCOL_ERROR)`. h2 has no switch for this and
//! we do not fork it, so [`AuthorityFix`] rewrites the client→server byte stream instead:
//!
//! * the client preface and every frame except HEADERS/CONTINUATION pass through byte-exact;
//! * each header block (HEADERS + CONTINUATION*, RFC 9113 §4.3, §6.2, §6.10) is reassembled,
//!   decoded with a per-connection HPACK decoder (RFC 7541), an unparsable `:authority` is
//!   replaced by `localhost`, and the block is re-encoded with literals that never touch the
//!   server's dynamic table.
//!
//! The transformation itself is the pure state machine [`Rewriter`] (also reachable through
//! [`rewrite_stream`], the entry point for fuzzing); [`AuthorityFix`] is a thin `AsyncRead`
//! layer over it. Server→client bytes are never touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// Largest header block (sum of HEADERS + CONTINUATION payloads, padding included) accepted.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Largest decoded header list accepted, counted as in RFC 9113 §6.5.2
/// (`name + value + 32` per field). Bounds the expansion of small dynamic-table references
/// ("HPACK bomb").
pub const MAX_HEADER_LIST: usize = 1 << 20;

/// Largest HPACK dynamic table a client may ask for with a size update (RFC 7541 §6.3).
///
/// The server never advertises more than the default 4096 (tonic does not set
/// `SETTINGS_HEADER_TABLE_SIZE`), so a conforming client stays far below this; it exists only
/// to bound memory against a hostile one.
const MAX_DYNAMIC_TABLE: usize = 64 * 1024;

/// Frame payload size used when re-emitting header blocks: the initial
/// `SETTINGS_MAX_FRAME_SIZE` (RFC 9113 §6.5.2), which every peer must accept.
const OUT_FRAME_SIZE: usize = 16_384;

/// Client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;

/// Why the client→server stream was cut. Every variant ends the connection: the HPACK state
/// (or the framing) can no longer be trusted, which is a connection error for h2 as well.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// A header block grew past [`MAX_HEADER_BLOCK`].
    #[error("header block larger than {MAX_HEADER_BLOCK} bytes")]
    HeaderBlockTooLarge,
    /// A decoded header list grew past [`MAX_HEADER_LIST`].
    #[error("decoded header list larger than {MAX_HEADER_LIST} bytes")]
    HeaderListTooLarge,
    /// The header block is not valid HPACK (RFC 7541 COMPRESSION_ERROR).
    #[error("HPACK decoding failed: {0}")]
    Hpack(String),
    /// The framing breaks an RFC 9113 rule that makes the header block unreadable.
    #[error("HTTP/2 protocol error: {0}")]
    Protocol(&'static str),
}

impl From<RewriteError> for io::Error {
    fn from(e: RewriteError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// Rewrites a complete client→server byte stream in one go (for fuzzing and tests).
///
/// Equivalent to one [`Rewriter::feed`] call on a fresh rewriter.
pub fn rewrite_stream(input: &[u8]) -> Result<Vec<u8>, RewriteError> {
    let mut out = Vec::with_capacity(input.len());
    Rewriter::new().feed(input, &mut out)?;
    Ok(out)
}

/// 9-byte frame header (RFC 9113 §4.1). The stream identifier is kept raw (reserved bit
/// included) so re-emitted frames carry exactly what the client sent.
#[derive(Debug, Clone, Copy)]
struct FrameHead {
    length: usize,
    kind: u8,
    flags: u8,
    stream: [u8; 4],
}

impl FrameHead {
    fn parse(b: [u8; FRAME_HEADER_LEN]) -> Self {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = b;
        FrameHead {
            length: usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2),
            kind,
            flags,
            stream: [s0, s1, s2, s3],
        }
    }

    /// The 31-bit stream identifier, reserved bit ignored as RFC 9113 §4.1 requires.
    fn stream_id(&self) -> u32 {
        u32::from_be_bytes(self.stream) & 0x7fff_ffff
    }
}

/// Appends a frame header. `length` never exceeds [`OUT_FRAME_SIZE`] here, so it fits 24 bits.
fn put_frame_head(out: &mut Vec<u8>, length: usize, kind: u8, flags: u8, stream: [u8; 4]) {
    let [_, l0, l1, l2] = u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&[l0, l1, l2, kind, flags]);
    out.extend_from_slice(&stream);
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Matching the client preface; `matched` bytes seen (and already passed on).
    Preface { matched: usize },
    /// Not HTTP/2 with prior knowledge: forward everything, h2 rejects it itself.
    Passthrough,
    /// Collecting a 9-byte frame header into `Rewriter::head`.
    FrameHeader { have: usize },
    /// Streaming the payload of a frame we do not touch.
    Forward { remaining: usize },
    /// Buffering the payload of a HEADERS/CONTINUATION frame into `Rewriter::payload`.
    Collect { head: FrameHead, remaining: usize },
}

/// A header block being reassembled from HEADERS + CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: [u8; 4],
    end_stream: bool,
    /// The 5 priority bytes (E + stream dependency, weight) when the PRIORITY flag was set.
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// The client→server rewriting state machine behind [`AuthorityFix`].
///
/// Feed it bytes in any fragmentation; it emits the rewritten stream as soon as each part is
/// decided (pass-through bytes at once, a header block when its END_HEADERS frame is complete).
pub struct Rewriter {
    state: State,
    head: [u8; FRAME_HEADER_LEN],
    payload: Vec<u8>,
    block: Option<Block>,
    /// The connection's HPACK decoding context (RFC 7541 §2.2): persistent, because the client's
    /// encoder refers to dynamic-table entries inserted by earlier blocks.
    decoder: loona_hpack::Decoder<'static>,
    /// Set by the first error; every later `feed` returns it again.
    failed: Option<RewriteError>,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter")
            .field("state", &self.state)
            .field("block", &self.block)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Rewriter {
    /// A rewriter for a new connection, expecting the client preface first.
    pub fn new() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(MAX_DYNAMIC_TABLE);
        Rewriter {
            state: State::Preface { matched: 0 },
            head: [0; FRAME_HEADER_LEN],
            payload: Vec::new(),
            block: None,
            decoder,
            failed: None,
        }
    }

    /// Consumes all of `input`, appending the rewritten bytes to `out`.
    ///
    /// On error, `out` still holds everything emitted before the offending frame (deliver it,
    /// then fail the connection); the rewriter stays failed.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.run(input, out);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
            self.payload = Vec::new();
            self.block = None;
        }
        result
    }

    fn run(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
        loop {
            match self.state {
                State::Preface { matched } => {
                    let want = PREFACE.get(matched..).unwrap_or_default();
                    let n = want.len().min(input.len());
                    if n == 0 {
                        return Ok(());
                    }
                    let (head, tail) = input.split_at(n);
                    if want.get(..n) == Some(head) {
                        out.extend_from_slice(head);
                        input = tail;
                        self.state = if matched + n == PREFACE.len() {
                            State::FrameHeader { have: 0 }
                        } else {
                            State::Preface {
                                matched: matched + n,
                            }
                        };
                    } else {
                        // Not HTTP/2 with prior knowledge (RFC 9113 §3.4). There is nothing for
                        // us to fix; h2 sees the bytes unchanged and rejects them.
                        self.state = State::Passthrough;
                    }
                }
                State::Passthrough => {
                    out.extend_from_slice(input);
                    return Ok(());
                }
                State::FrameHeader { have } => {
                    let slot = self.head.get_mut(have..).unwrap_or_default();
                    let n = slot.len().min(input.len());
                    if n == 0 {
                        return Ok(());
                    }
                    let (head, tail) = input.split_at(n);
                    if let Some(dst) = slot.get_mut(..n) {
                        dst.copy_from_slice(head);
                    }
                    input = tail;
                    if have + n == FRAME_HEADER_LEN {
                        self.start_frame(FrameHead::parse(self.head), out)?;
                    } else {
                        self.state = State::FrameHeader { have: have + n };
                    }
                }
                State::Forward { remaining } => {
                    if remaining == 0 {
                        self.state = State::FrameHeader { have: 0 };
                        continue;
                    }
                    let n = remaining.min(input.len());
                    if n == 0 {
                        return Ok(());
                    }
                    let (head, tail) = input.split_at(n);
                    out.extend_from_slice(head);
                    input = tail;
                    self.state = State::Forward {
                        remaining: remaining - n,
                    };
                }
                State::Collect { head, remaining } => {
                    if remaining == 0 {
                        self.state = State::FrameHeader { have: 0 };
                        self.finish_frame(head, out)?;
                        continue;
                    }
                    let n = remaining.min(input.len());
                    if n == 0 {
                        return Ok(());
                    }
                    let (part, tail) = input.split_at(n);
                    self.payload.extend_from_slice(part);
                    input = tail;
                    self.state = State::Collect {
                        head,
                        remaining: remaining - n,
                    };
                }
            }
        }
    }

    /// Decides what to do with a frame once its 9-byte header is known.
    fn start_frame(&mut self, head: FrameHead, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        // The 24-bit length field caps any frame below 16 MiB. Frames we do not touch are
        // streamed, never buffered; only header-block frames are, and those are bounded below.
        match (&self.block, head.kind) {
            (None, TYPE_HEADERS) => {
                if head.length > MAX_HEADER_BLOCK {
                    return Err(RewriteError::HeaderBlockTooLarge);
                }
                self.begin_collect(head);
            }
            (Some(block), TYPE_CONTINUATION) => {
                // RFC 9113 §6.10: CONTINUATION must stay on the stream of its HEADERS.
                if u32::from_be_bytes(block.stream) & 0x7fff_ffff != head.stream_id() {
                    return Err(RewriteError::Protocol(
                        "CONTINUATION on another stream than its HEADERS",
                    ));
                }
                if block.fragment.len().saturating_add(head.length) > MAX_HEADER_BLOCK {
                    return Err(RewriteError::HeaderBlockTooLarge);
                }
                self.begin_collect(head);
            }
            (Some(_), _) => {
                // RFC 9113 §4.3/§6.10: a header block is a contiguous sequence of frames.
                return Err(RewriteError::Protocol(
                    "frame interleaved in an open header block",
                ));
            }
            (None, _) => {
                // Includes a stray CONTINUATION (after PUSH_PROMISE or out of the blue): h2
                // answers it with a connection error, so it can pass unchanged.
                out.extend_from_slice(&self.head);
                self.state = State::Forward {
                    remaining: head.length,
                };
            }
        }
        Ok(())
    }

    fn begin_collect(&mut self, head: FrameHead) {
        self.payload.clear();
        self.state = State::Collect {
            head,
            remaining: head.length,
        };
    }

    /// Handles a fully buffered HEADERS or CONTINUATION payload.
    fn finish_frame(&mut self, head: FrameHead, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let payload = std::mem::take(&mut self.payload);
        if head.kind == TYPE_HEADERS {
            // RFC 9113 §6.2: [Pad Length] [E, Stream Dependency, Weight] Fragment [Padding].
            let mut rest = payload.as_slice();
            let mut pad = 0usize;
            if head.flags & FLAG_PADDED != 0 {
                let (&n, tail) = rest
                    .split_first()
                    .ok_or(RewriteError::Protocol("PADDED HEADERS without Pad Length"))?;
                pad = usize::from(n);
                rest = tail;
            }
            let priority = if head.flags & FLAG_PRIORITY != 0 {
                let (fields, tail) = rest.split_first_chunk::<5>().ok_or(
                    RewriteError::Protocol("PRIORITY HEADERS too short for its priority fields"),
                )?;
                rest = tail;
                Some(*fields)
            } else {
                None
            };
            let fragment_len = rest.len().checked_sub(pad).ok_or(RewriteError::Protocol(
                "HEADERS padding longer than its payload",
            ))?;
            let fragment = rest.get(..fragment_len).unwrap_or_default().to_vec();
            self.block = Some(Block {
                stream: head.stream,
                end_stream: head.flags & FLAG_END_STREAM != 0,
                priority,
                fragment,
            });
        } else if let Some(block) = self.block.as_mut() {
            // CONTINUATION: no padding, no priority (RFC 9113 §6.10).
            block.fragment.extend_from_slice(&payload);
        }
        // Keep the allocation for the next frame.
        self.payload = payload;
        self.payload.clear();

        if head.flags & FLAG_END_HEADERS != 0
            && let Some(block) = self.block.take()
        {
            self.finish_block(&block, out)?;
        }
        Ok(())
    }

    /// Decodes a complete header block, fixes `:authority`, re-encodes and emits it.
    fn finish_block(&mut self, block: &Block, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        // Every field counts at least 32 bytes towards the list size, so a block with too many
        // fields is refused before the decoder runs.
        let Normalized {
            block: normalized,
            never_indexed,
        } = normalize(&block.fragment)?;
        if never_indexed.len().saturating_mul(32) > MAX_HEADER_LIST {
            return Err(RewriteError::HeaderListTooLarge);
        }
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(never_indexed.len());
        let mut list_size = 0usize;
        let mut too_large = false;
        self.decoder
            .decode_with_cb(&normalized, |name, value| {
                // The callback cannot stop the decoder: stop copying, fail after it returns.
                list_size = list_size.saturating_add(name.len() + value.len() + 32);
                if list_size > MAX_HEADER_LIST {
                    too_large = true;
                } else {
                    fields.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|e| RewriteError::Hpack(e.to_string()))?;
        if too_large {
            return Err(RewriteError::HeaderListTooLarge);
        }

        let mut encoded = Vec::with_capacity(block.fragment.len() + 64);
        for (i, (name, value)) in fields.iter().enumerate() {
            let value =
                if name == b":authority" && http::uri::Authority::try_from(&value[..]).is_err() {
                    tracing::trace!(
                        authority = %String::from_utf8_lossy(value),
                        "replacing unparsable :authority with localhost"
                    );
                    &b"localhost"[..]
                } else {
                    &value[..]
                };
            // RFC 7541 §6.2.3/§7.1.3: an intermediary must keep "never indexed" as it is.
            let never = never_indexed.get(i).copied().unwrap_or(false);
            encode_field(&mut encoded, name, value, never);
        }
        emit_block(out, block, &encoded);
        Ok(())
    }
}

/// Emits a re-encoded header block as HEADERS (+ CONTINUATION when it exceeds the default frame
/// size), keeping END_STREAM and the priority fields, never padding.
fn emit_block(out: &mut Vec<u8>, block: &Block, encoded: &[u8]) {
    let priority_len = if block.priority.is_some() { 5 } else { 0 };
    let first_len = encoded.len().min(OUT_FRAME_SIZE - priority_len);
    let (first, rest) = encoded.split_at(first_len);

    let mut flags = 0;
    if block.end_stream {
        flags |= FLAG_END_STREAM;
    }
    if block.priority.is_some() {
        flags |= FLAG_PRIORITY;
    }
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    put_frame_head(
        out,
        priority_len + first.len(),
        TYPE_HEADERS,
        flags,
        block.stream,
    );
    if let Some(p) = &block.priority {
        out.extend_from_slice(p);
    }
    out.extend_from_slice(first);

    let mut chunks = rest.chunks(OUT_FRAME_SIZE).peekable();
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            FLAG_END_HEADERS
        } else {
            0
        };
        put_frame_head(out, chunk.len(), TYPE_CONTINUATION, flags, block.stream);
        out.extend_from_slice(chunk);
    }
}

// ---- HPACK encoding (RFC 7541) -------------------------------------------------------------

/// Names of the static table (RFC 7541 Appendix A), index = position + 1.
const STATIC_NAMES: [&[u8]; 61] = [
    b":authority",
    b":method",
    b":method",
    b":path",
    b":path",
    b":scheme",
    b":scheme",
    b":status",
    b":status",
    b":status",
    b":status",
    b":status",
    b":status",
    b":status",
    b"accept-charset",
    b"accept-encoding",
    b"accept-language",
    b"accept-ranges",
    b"accept",
    b"access-control-allow-origin",
    b"age",
    b"allow",
    b"authorization",
    b"cache-control",
    b"content-disposition",
    b"content-encoding",
    b"content-language",
    b"content-length",
    b"content-location",
    b"content-range",
    b"content-type",
    b"cookie",
    b"date",
    b"etag",
    b"expect",
    b"expires",
    b"from",
    b"host",
    b"if-match",
    b"if-modified-since",
    b"if-none-match",
    b"if-range",
    b"if-unmodified-since",
    b"last-modified",
    b"link",
    b"location",
    b"max-forwards",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"range",
    b"referer",
    b"refresh",
    b"retry-after",
    b"server",
    b"set-cookie",
    b"strict-transport-security",
    b"transfer-encoding",
    b"user-agent",
    b"vary",
    b"via",
    b"www-authenticate",
];

/// Appends an HPACK integer with an N-bit prefix (RFC 7541 §5.1); `first` holds the
/// representation's pattern bits above the prefix.
fn encode_int(out: &mut Vec<u8>, first: u8, prefix_bits: u32, mut value: usize) {
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

/// Appends a string literal without Huffman coding (RFC 7541 §5.2).
fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    encode_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

/// Appends a "literal header field without indexing" (RFC 7541 §6.2.2), or "never indexed"
/// (§6.2.3), naming the field by static-table index when possible. Neither form touches the
/// server's dynamic table, so its HPACK state depends only on what this shim sends.
fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8], never_indexed: bool) {
    let pattern = if never_indexed { 0x10 } else { 0x00 };
    match STATIC_NAMES.iter().position(|n| *n == name) {
        Some(i) => encode_int(out, pattern, 4, i + 1),
        None => {
            out.push(pattern);
            encode_str(out, name);
        }
    }
    encode_str(out, value);
}

// ---- HPACK structure walk and Huffman decoding ----------------------------------------------

/// Decodes an HPACK integer (RFC 7541 §5.1): `(value, bytes used)`, or `None` if truncated or
/// absurdly long.
fn decode_int(buf: &[u8], prefix_bits: u32) -> Option<(usize, usize)> {
    let max = (1usize << prefix_bits) - 1;
    let value = usize::from(*buf.first()?) & max;
    if value < max {
        return Some((value, 1));
    }
    let mut value = value;
    for (i, &b) in buf.iter().enumerate().skip(1).take(5) {
        let shift = 7 * (i - 1);
        value = value.checked_add(usize::from(b & 0x7f) << shift)?;
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// A header block with every Huffman-coded string replaced by its raw form, plus which field
/// representations were "literal never indexed".
struct Normalized {
    block: Vec<u8>,
    never_indexed: Vec<bool>,
}

fn malformed() -> RewriteError {
    RewriteError::Hpack("malformed field representation".to_owned())
}

/// Walks the structure of a header block (RFC 7541 §6) without touching any table.
///
/// Two reasons: the decoder's callback API does not say which fields were "never indexed", and
/// §7.1.3 requires an intermediary to keep that; and loona-hpack builds a fresh Huffman table for
/// every Huffman-coded string (tens of microseconds each), so a block of tiny strings would cost
/// CPU out of all proportion to its size. Strings are decoded here with a table built at compile
/// time and handed to the decoder as raw literals, which decode to the same field list.
fn normalize(block: &[u8]) -> Result<Normalized, RewriteError> {
    // Huffman coding shrinks by at most 5/8 (shortest code: 5 bits), so this rarely regrows.
    let mut out = Vec::with_capacity(block.len().saturating_add(block.len() / 2));
    let mut never_indexed = Vec::new();
    let mut rest = block;
    while let Some(&first) = rest.first() {
        let (prefix, literal) = if first & 0x80 != 0 {
            // §6.1 indexed field.
            never_indexed.push(false);
            (7, false)
        } else if first & 0xe0 == 0x20 {
            // §6.3 dynamic table size update: not a field.
            (5, false)
        } else if first & 0x40 != 0 {
            // §6.2.1 literal with incremental indexing.
            never_indexed.push(false);
            (6, true)
        } else {
            // §6.2.2 without indexing (0000xxxx), §6.2.3 never indexed (0001xxxx).
            never_indexed.push(first & 0x10 != 0);
            (4, true)
        };
        let (index, used) = decode_int(rest, prefix).ok_or_else(malformed)?;
        out.extend_from_slice(rest.get(..used).ok_or_else(malformed)?);
        rest = rest.get(used..).ok_or_else(malformed)?;
        if literal {
            if index == 0 {
                rest = copy_string(rest, &mut out)?;
            }
            rest = copy_string(rest, &mut out)?;
        }
    }
    Ok(Normalized {
        block: out,
        never_indexed,
    })
}

/// Copies the string literal (RFC 7541 §5.2) at the start of `buf` to `out`, Huffman-decoded;
/// returns what follows it.
fn copy_string<'a>(buf: &'a [u8], out: &mut Vec<u8>) -> Result<&'a [u8], RewriteError> {
    let (len, used) = decode_int(buf, 7).ok_or_else(malformed)?;
    let end = used.checked_add(len).ok_or_else(malformed)?;
    let raw = buf.get(..end).ok_or_else(malformed)?;
    let huffman = raw.first().is_some_and(|b| b & 0x80 != 0);
    if huffman {
        let decoded = huffman_decode(raw.get(used..).unwrap_or_default())
            .ok_or_else(|| RewriteError::Hpack("invalid Huffman-coded string".to_owned()))?;
        encode_str(out, &decoded);
    } else {
        out.extend_from_slice(raw);
    }
    Ok(buf.get(end..).unwrap_or_default())
}

/// Code lengths of the HPACK Huffman code (RFC 7541 Appendix B), symbols 0..=255 then EOS. The
/// code is canonical (codes are assigned in order of length, then symbol), so the lengths alone
/// determine it.
const HUFFMAN_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

const HUFFMAN_MAX_LEN: usize = 30;
const HUFFMAN_EOS: u16 = 256;

/// Canonical decoding tables: for each code length, the first code, how many codes have that
/// length, and where their symbols start in `symbols` (sorted by length, then value).
struct HuffmanTable {
    symbols: [u16; 257],
    first_code: [u32; HUFFMAN_MAX_LEN + 1],
    count: [u32; HUFFMAN_MAX_LEN + 1],
    first_index: [u32; HUFFMAN_MAX_LEN + 1],
}

// A static, not a const: a const would be copied out at every use.
static HUFFMAN: HuffmanTable = {
    let mut t = HuffmanTable {
        symbols: [0; 257],
        first_code: [0; HUFFMAN_MAX_LEN + 1],
        count: [0; HUFFMAN_MAX_LEN + 1],
        first_index: [0; HUFFMAN_MAX_LEN + 1],
    };
    let mut next = 0;
    let mut len = 1;
    while len <= HUFFMAN_MAX_LEN {
        t.first_index[len] = next as u32;
        let mut sym = 0;
        while sym < 257 {
            if HUFFMAN_LENGTHS[sym] as usize == len {
                t.symbols[next] = sym as u16;
                next += 1;
                t.count[len] += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    // Canonical code assignment (as in RFC 1951 §3.2.2).
    let mut code = 0u32;
    let mut len = 1;
    while len <= HUFFMAN_MAX_LEN {
        code = (code + t.count[len - 1]) << 1;
        t.first_code[len] = code;
        len += 1;
    }
    t
};

/// Decodes a Huffman-coded string (RFC 7541 §5.2), or `None` if it contains EOS or its padding
/// is longer than 7 bits or not the most significant bits of EOS (all ones).
fn huffman_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len().saturating_mul(8) / 5);
    let (mut code, mut len) = (0u32, 0usize);
    for byte in input {
        for shift in (0..8).rev() {
            code = code << 1 | u32::from(byte >> shift & 1);
            len += 1;
            let offset = code.wrapping_sub(*HUFFMAN.first_code.get(len)?);
            if offset < *HUFFMAN.count.get(len)? {
                let index = HUFFMAN.first_index.get(len)?.checked_add(offset)?;
                let symbol = *HUFFMAN.symbols.get(usize::try_from(index).ok()?)?;
                if symbol == HUFFMAN_EOS {
                    return None;
                }
                out.push(u8::try_from(symbol).ok()?);
                code = 0;
                len = 0;
            }
        }
    }
    (len <= 7 && code == (1 << len) - 1).then_some(out)
}

// ---- AsyncRead / AsyncWrite wrapper ----------------------------------------------------------

/// Size of the buffer each read from the inner connection goes through.
const READ_CHUNK: usize = 16 * 1024;

/// The server side of a connection, with the client→server direction passed through
/// [`Rewriter`] so that h2 never sees an unparsable `:authority`. Writes pass through untouched.
///
/// A [`RewriteError`] surfaces as an `io::Error` of kind `InvalidData` (after the bytes that
/// preceded it), which ends the connection; EOF passes through.
pub struct AuthorityFix<IO> {
    io: IO,
    rewriter: Rewriter,
    /// Rewritten bytes not yet handed to the reader, from `pos` on.
    pending: Vec<u8>,
    pos: usize,
    scratch: Box<[u8]>,
    error: Option<RewriteError>,
    eof: bool,
}

impl<IO> AuthorityFix<IO> {
    /// Wraps the server side of a freshly accepted connection.
    pub fn new(io: IO) -> Self {
        AuthorityFix {
            io,
            rewriter: Rewriter::new(),
            pending: Vec::new(),
            pos: 0,
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            error: None,
            eof: false,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// Unwraps the connection; rewritten bytes not yet read are lost.
    pub fn into_inner(self) -> IO {
        self.io
    }
}

impl<IO> std::fmt::Debug for AuthorityFix<IO> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorityFix")
            .field("rewriter", &self.rewriter)
            .field(
                "pending",
                &(self.pending.len() - self.pos.min(self.pending.len())),
            )
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for AuthorityFix<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            let available = this.pending.get(this.pos..).unwrap_or_default();
            if !available.is_empty() {
                let n = available.len().min(buf.remaining());
                buf.put_slice(available.get(..n).unwrap_or_default());
                this.pos += n;
                if this.pos >= this.pending.len() {
                    this.pending.clear();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = &this.error {
                return Poll::Ready(Err(e.clone().into()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut inner = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut inner))?;
            let got = inner.filled();
            if got.is_empty() {
                // EOF, possibly mid-frame: h2 notices a truncated stream by itself.
                this.eof = true;
                continue;
            }
            // Output produced before an error is delivered first, the error on the next pass.
            if let Err(e) = this.rewriter.feed(got, &mut this.pending) {
                this.error = Some(e);
            }
        }
    }
}

write_through_wrapper!(AuthorityFix);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // ---- building client bytes ----

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_frame_head(&mut out, payload.len(), kind, flags, stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn huffman_codes() -> Vec<(u64, u8)> {
        let mut order: Vec<usize> = (0..256).collect();
        order.sort_by_key(|&s| (HUFFMAN_LENGTHS[s], s));
        let mut codes = vec![(0u64, 0u8); 256];
        let mut code = 0u64;
        let mut prev = HUFFMAN_LENGTHS[order[0]];
        for (i, &s) in order.iter().enumerate() {
            let len = HUFFMAN_LENGTHS[s];
            if i > 0 {
                code = (code + 1) << (len - prev);
            }
            prev = len;
            codes[s] = (code, len);
        }
        codes
    }

    fn huffman(s: &[u8]) -> Vec<u8> {
        let codes = huffman_codes();
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
            // Pad with the most significant bits of EOS (all ones), RFC 7541 §5.2.
            out.push((acc << (8 - bits)) as u8 | (0xff >> bits));
        }
        out
    }

    fn string(s: &[u8], huff: bool) -> Vec<u8> {
        let mut out = Vec::new();
        if huff {
            let h = huffman(s);
            encode_int(&mut out, 0x80, 7, h.len());
            out.extend_from_slice(&h);
        } else {
            encode_int(&mut out, 0x00, 7, s.len());
            out.extend_from_slice(s);
        }
        out
    }

    fn indexed(i: usize) -> Vec<u8> {
        let mut out = Vec::new();
        encode_int(&mut out, 0x80, 7, i);
        out
    }

    /// Literal with incremental indexing (§6.2.1), name by index (`Ok`) or literal (`Err`).
    fn incremental(name: Result<usize, &[u8]>, value: &[u8], huff: bool) -> Vec<u8> {
        literal(0x40, 6, name, value, huff)
    }

    fn literal(
        pattern: u8,
        prefix: u32,
        name: Result<usize, &[u8]>,
        value: &[u8],
        huff: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        match name {
            Ok(i) => encode_int(&mut out, pattern, prefix, i),
            Err(n) => {
                out.push(pattern);
                out.extend(string(n, huff));
            }
        }
        out.extend(string(value, huff));
        out
    }

    fn size_update(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        encode_int(&mut out, 0x20, 5, n);
        out
    }

    const RAW: &[u8] = br"\\.\pipe\csi-proxy-filesystem-v1";
    const ENCODED: &[u8] = b"%5C%5C.%5Cpipe%5Ccsi-proxy-filesystem-v1";

    /// A grpc-go style request block with the given `:authority` representation.
    fn request_block(authority: Vec<u8>) -> Vec<u8> {
        [
            indexed(3), // :method POST
            indexed(6), // :scheme http
            incremental(Ok(4), b"/v1.Filesystem/PathExists", true),
            authority,
            incremental(Ok(31), b"application/grpc", true),
            incremental(Err(b"te"), b"trailers", true),
        ]
        .concat()
    }

    fn expected_request(authority: &str) -> Vec<(String, String)> {
        fields(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/v1.Filesystem/PathExists"),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ])
    }

    fn fields(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn with_preface(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = PREFACE.to_vec();
        for f in frames {
            out.extend_from_slice(f);
        }
        out
    }

    // ---- reading the rewritten bytes ----

    #[derive(Debug, PartialEq)]
    struct Frame {
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
    }

    fn parse_frames(out: &[u8]) -> Vec<Frame> {
        assert_eq!(&out[..24], PREFACE);
        let mut rest = &out[24..];
        let mut frames = Vec::new();
        while !rest.is_empty() {
            let head = FrameHead::parse(rest[..9].try_into().unwrap());
            frames.push(Frame {
                kind: head.kind,
                flags: head.flags,
                stream: head.stream_id(),
                payload: rest[9..9 + head.length].to_vec(),
            });
            rest = &rest[9 + head.length..];
        }
        frames
    }

    /// A header block as the server sees it.
    #[derive(Debug)]
    struct Decoded {
        stream: u32,
        /// Flags of the HEADERS frame.
        flags: u8,
        priority: Option<Vec<u8>>,
        fields: Vec<(String, String)>,
        /// Number of frames (HEADERS + CONTINUATION) the block used.
        frames: usize,
    }

    /// Decodes every header block of the rewritten stream with one persistent decoder (as h2
    /// does) and checks the shim's output invariants on the way.
    fn decode_out(out: &[u8]) -> (Vec<Decoded>, Vec<Frame>) {
        let mut decoder = loona_hpack::Decoder::new();
        let mut blocks = Vec::new();
        let mut others = Vec::new();
        let mut open: Option<(Decoded, Vec<u8>)> = None;
        for f in parse_frames(out) {
            match f.kind {
                TYPE_HEADERS => {
                    assert!(open.is_none());
                    assert!(f.payload.len() <= OUT_FRAME_SIZE);
                    assert_eq!(f.flags & FLAG_PADDED, 0, "never padded");
                    let (priority, frag) = if f.flags & FLAG_PRIORITY != 0 {
                        (Some(f.payload[..5].to_vec()), f.payload[5..].to_vec())
                    } else {
                        (None, f.payload.clone())
                    };
                    let d = Decoded {
                        stream: f.stream,
                        flags: f.flags,
                        priority,
                        fields: Vec::new(),
                        frames: 1,
                    };
                    open = Some((d, frag));
                }
                TYPE_CONTINUATION => {
                    assert!(f.payload.len() <= OUT_FRAME_SIZE);
                    let (d, frag) = open.as_mut().expect("CONTINUATION after HEADERS");
                    assert_eq!(d.stream, f.stream);
                    frag.extend_from_slice(&f.payload);
                    d.frames += 1;
                }
                _ => {
                    assert!(open.is_none());
                    others.push(f);
                    continue;
                }
            }
            if f.flags & FLAG_END_HEADERS != 0 {
                let (mut d, frag) = open.take().unwrap();
                assert_literal_only(&frag);
                d.fields = decoder
                    .decode(&frag)
                    .unwrap()
                    .into_iter()
                    .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
                    .collect();
                blocks.push(d);
            }
        }
        assert!(open.is_none(), "unterminated header block in output");
        (blocks, others)
    }

    /// The server's dynamic table must never be touched: only §6.2.2/§6.2.3 literals.
    fn assert_literal_only(block: &[u8]) {
        let mut rest = block;
        while let Some(&first) = rest.first() {
            assert_eq!(first & 0xe0, 0, "non-literal representation {first:#x}");
            let (index, mut used) = decode_int(rest, 4).unwrap();
            for _ in 0..if index == 0 { 2 } else { 1 } {
                assert_eq!(rest[used] & 0x80, 0, "Huffman is never needed");
                let (len, n) = decode_int(&rest[used..], 7).unwrap();
                used += n + len;
            }
            rest = &rest[used..];
        }
    }

    fn rewrite_ok(input: &[u8]) -> (Vec<Decoded>, Vec<Frame>) {
        decode_out(&rewrite_stream(input).unwrap())
    }

    fn feed_in_chunks(
        input: &[u8],
        sizes: &mut dyn FnMut() -> usize,
    ) -> Result<Vec<u8>, RewriteError> {
        let mut r = Rewriter::new();
        let mut out = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let n = sizes().clamp(1, rest.len());
            r.feed(&rest[..n], &mut out)?;
            rest = &rest[n..];
        }
        Ok(out)
    }

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    // ---- tests ----

    #[test]
    fn huffman_helper_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        for s in [&all[..], RAW, ENCODED, b"localhost"] {
            let mut d = loona_hpack::huffman::HuffmanDecoder::new();
            assert_eq!(d.decode(&huffman(s)).unwrap(), s);
        }
    }

    #[test]
    fn huffman_decoder_agrees_with_loona() {
        let mut rng = XorShift(0xdead_beef_cafe_f00d);
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(huffman_decode(&huffman(&all)).unwrap(), all);
        assert_eq!(huffman_decode(&[]).unwrap(), b"");
        for round in 0..3000 {
            let len = (rng.next() % 12) as usize;
            let mut s: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if round % 2 == 0 {
                // Valid encodings, sometimes with a flipped bit or a byte cut off.
                s = huffman(&s);
                match round % 6 {
                    2 if !s.is_empty() => {
                        let i = rng.next() as usize % s.len();
                        s[i] ^= 1 << (rng.next() % 8);
                    }
                    4 => {
                        s.pop();
                    }
                    _ => {}
                }
            }
            let ours = huffman_decode(&s);
            let theirs = loona_hpack::huffman::HuffmanDecoder::new().decode(&s).ok();
            assert_eq!(ours, theirs, "{s:02x?}");
        }
        // EOS (30 ones) inside a string, and 8 bits of padding.
        assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xfc]), None);
        assert_eq!(huffman_decode(&[0x1f, 0xff]), None);
    }

    #[test]
    fn normalized_blocks_decode_to_the_same_fields() {
        let blocks = [
            request_block(incremental(Ok(1), RAW, true)),
            [
                indexed(65),
                indexed(64),
                literal(0x10, 4, Err(b"k"), ENCODED, true),
            ]
            .concat(),
            [
                size_update(100),
                incremental(Err(b"a-b"), b"\x00\xff", true),
                indexed(62),
            ]
            .concat(),
        ];
        let (mut plain, mut normal) = (loona_hpack::Decoder::new(), loona_hpack::Decoder::new());
        for block in blocks {
            let n = normalize(&block).unwrap();
            assert_eq!(
                plain.decode(&block).unwrap(),
                normal.decode(&n.block).unwrap()
            );
        }
    }

    #[test]
    fn static_names_match_the_decoder() {
        for (i, name) in STATIC_NAMES.iter().enumerate() {
            let mut block = Vec::new();
            encode_int(&mut block, 0, 4, i + 1);
            block.push(0);
            let got = loona_hpack::Decoder::new().decode(&block).unwrap();
            assert_eq!(got, vec![(name.to_vec(), Vec::new())], "index {}", i + 1);
        }
    }

    #[test]
    fn integers_round_trip() {
        for v in [
            0,
            1,
            14,
            15,
            16,
            126,
            127,
            128,
            255,
            4096,
            1 << 20,
            (1 << 28) - 1,
        ] {
            for prefix in [4, 5, 6, 7] {
                let mut out = Vec::new();
                encode_int(&mut out, 0, prefix, v);
                assert_eq!(
                    decode_int(&out, prefix),
                    Some((v, out.len())),
                    "{v} {prefix}"
                );
            }
        }
        assert_eq!(decode_int(&[0x7f, 0x80, 0x80], 7), None, "truncated");
        assert_eq!(
            decode_int(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], 7),
            None,
            "too long"
        );
    }

    #[test]
    fn preface_and_non_header_frames_pass_through() {
        let input = with_preface(&[
            frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]),       // SETTINGS
            frame(0x4, 0x1, 0, &[]),                       // SETTINGS ack
            frame(0x8, 0, 0, &[0, 0, 1, 0]),               // WINDOW_UPDATE
            frame(0x6, 0, 0, b"12345678"),                 // PING
            frame(0x0, 0x9, 1, &[3, b'a', b'b', 0, 0, 0]), // DATA, padded, END_STREAM
            frame(0x3, 0, 1, &[0, 0, 0, 8]),               // RST_STREAM
            frame(0xfe, 0xff, 0x8000_0007, b"unknown type"),
            frame(0x7, 0, 0, &[0; 8]), // GOAWAY
        ]);
        assert_eq!(rewrite_stream(&input).unwrap(), input);
    }

    #[test]
    fn non_http2_bytes_pass_through() {
        let input = b"GET / HTTP/1.1\r\nHost: \\\\.\\pipe\\x\r\n\r\n\x00\x00\x05\x01\x04\x00\x00\x00\x01xxxxx";
        assert_eq!(rewrite_stream(input).unwrap(), input);
        // A near miss of the preface too.
        let input = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r!\x00\x00\x00\x01\x04\x00\x00\x00\x01";
        assert_eq!(rewrite_stream(input).unwrap(), input);
        assert_eq!(feed_in_chunks(input, &mut || 1).unwrap(), input);
        assert_eq!(rewrite_stream(b"").unwrap(), b"");
        assert_eq!(rewrite_stream(b"PRI").unwrap(), b"PRI");
    }

    #[test]
    fn raw_authority_is_replaced() {
        let block = request_block(incremental(Ok(1), RAW, false));
        let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, 0x5, 1, &block)]));
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].fields, expected_request("localhost"));
        assert_eq!(blocks[0].flags, FLAG_END_STREAM | FLAG_END_HEADERS);
        assert_eq!(blocks[0].stream, 1);
    }

    #[test]
    fn huffman_raw_and_percent_encoded_authorities_are_replaced() {
        for value in [RAW, ENCODED, b"", b"a b", b"\xff\xfe"] {
            let block = request_block(incremental(Ok(1), value, true));
            let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, 0x4, 1, &block)]));
            assert_eq!(blocks[0].fields, expected_request("localhost"), "{value:?}");
            assert_eq!(blocks[0].flags, FLAG_END_HEADERS);
        }
    }

    #[test]
    fn valid_authorities_are_kept() {
        for value in [
            "localhost",
            "localhost:8080",
            "[::1]:50051",
            "csi-proxy.sock",
            "user@host",
        ] {
            let block = request_block(incremental(Ok(1), value.as_bytes(), true));
            let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, 0x4, 1, &block)]));
            assert_eq!(blocks[0].fields, expected_request(value));
        }
        // No :authority at all stays that way.
        let block = [indexed(3), indexed(6), incremental(Ok(4), b"/x", false)].concat();
        let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, 0x4, 1, &block)]));
        assert_eq!(
            blocks[0].fields,
            fields(&[(":method", "POST"), (":scheme", "http"), (":path", "/x")])
        );
    }

    #[test]
    fn every_representation_is_decoded_and_never_indexed_is_kept() {
        let block = [
            indexed(2),
            literal(0x00, 4, Ok(4), b"/a", false), // without indexing
            literal(0x10, 4, Ok(1), RAW, true),    // never indexed
            literal(0x10, 4, Err(b"secret"), b"s3", false), // never indexed, new name
            incremental(Err(b"x-custom"), b"v", true),
        ]
        .concat();
        let out = rewrite_stream(&with_preface(&[frame(1, 0x4, 1, &block)])).unwrap();
        let (blocks, _) = decode_out(&out);
        assert_eq!(
            blocks[0].fields,
            fields(&[
                (":method", "GET"),
                (":path", "/a"),
                (":authority", "localhost"),
                ("secret", "s3"),
                ("x-custom", "v"),
            ])
        );
        let frag = &parse_frames(&out)[0].payload;
        let flags = normalize(frag).unwrap().never_indexed;
        assert_eq!(flags, [false, false, true, true, false]);
    }

    #[test]
    fn padding_is_stripped_and_priority_kept() {
        let block = request_block(incremental(Ok(1), RAW, true));
        let mut payload = vec![7u8]; // Pad Length
        payload.extend_from_slice(&[0x80, 0, 0, 3, 200]); // E=1, depends on 3, weight 200
        payload.extend_from_slice(&block);
        payload.extend_from_slice(&[0; 7]);
        let flags = FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS | FLAG_END_STREAM | 0x40;
        let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, flags, 5, &payload)]));
        let b = &blocks[0];
        assert_eq!(b.fields, expected_request("localhost"));
        assert_eq!(b.stream, 5);
        assert_eq!(b.flags, FLAG_PRIORITY | FLAG_END_HEADERS | FLAG_END_STREAM);
        assert_eq!(b.priority.as_deref(), Some(&[0x80, 0, 0, 3, 200][..]));

        // Padding only (no priority), and a block whose fragment is all in CONTINUATION.
        let mut payload = vec![2u8];
        payload.extend_from_slice(&[0, 0]);
        let input = with_preface(&[
            frame(1, FLAG_PADDED, 1, &payload),
            frame(9, FLAG_END_HEADERS, 1, &block),
        ]);
        let (blocks, _) = rewrite_ok(&input);
        assert_eq!(blocks[0].fields, expected_request("localhost"));
        assert_eq!(blocks[0].frames, 1);
    }

    #[test]
    fn continuation_frames_are_joined() {
        let block = request_block(incremental(Ok(1), ENCODED, false));
        let (a, rest) = block.split_at(3);
        let (b, c) = rest.split_at(20);
        let input = with_preface(&[
            frame(1, FLAG_END_STREAM, 3, a),
            frame(9, 0, 3, b),
            frame(9, 0, 3, &[]),
            frame(9, FLAG_END_HEADERS, 3, c),
            frame(0, 1, 3, b"data"),
        ]);
        let (blocks, others) = rewrite_ok(&input);
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].frames, 1);
        assert_eq!(blocks[0].fields, expected_request("localhost"));
        assert_eq!(blocks[0].flags, FLAG_END_STREAM | FLAG_END_HEADERS);
        assert_eq!(others.len(), 1);
        assert_eq!(others[0].payload, b"data");
    }

    #[test]
    fn large_blocks_are_split_into_continuation_frames() {
        // A 40 000-byte value arrives in one oversized HEADERS frame (the shim is lenient) and
        // must leave as HEADERS + CONTINUATION frames of at most 16 384 bytes.
        let big = "v".repeat(40_000);
        let block = [
            request_block(incremental(Ok(1), RAW, false)),
            literal(0, 4, Err(b"x-big"), big.as_bytes(), false),
        ]
        .concat();
        let mut payload = vec![0x00, 0, 0, 1, 15]; // priority: depends on 1, weight 15
        payload.extend_from_slice(&block);
        let input = with_preface(&[frame(1, FLAG_PRIORITY | FLAG_END_HEADERS, 1, &payload)]);
        let out = rewrite_stream(&input).unwrap();
        let frames = parse_frames(&out);
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].kind, TYPE_HEADERS);
        assert_eq!(frames[0].flags, FLAG_PRIORITY);
        assert_eq!(frames[0].payload.len(), OUT_FRAME_SIZE);
        assert_eq!((frames[1].kind, frames[1].flags), (TYPE_CONTINUATION, 0));
        assert_eq!(frames[1].payload.len(), OUT_FRAME_SIZE);
        assert_eq!(
            (frames[2].kind, frames[2].flags),
            (TYPE_CONTINUATION, FLAG_END_HEADERS)
        );
        let (blocks, _) = decode_out(&out);
        let mut want = expected_request("localhost");
        want.push(("x-big".into(), big));
        assert_eq!(blocks[0].fields, want);
        assert_eq!(blocks[0].priority.as_deref(), Some(&[0, 0, 0, 1, 15][..]));
        assert_eq!(blocks[0].frames, 3);
    }

    #[test]
    fn dynamic_table_references_span_header_blocks() {
        // grpc-go inserts :path, :authority, content-type and te with incremental indexing;
        // the second request refers to them by dynamic index (newest first: te=62,
        // content-type=63, :authority=64, :path=65).
        let first = request_block(incremental(Ok(1), RAW, true));
        let second = [
            indexed(3),
            indexed(6),
            indexed(65),
            indexed(64),
            indexed(63),
            indexed(62),
        ]
        .concat();
        let input = with_preface(&[
            frame(1, FLAG_END_HEADERS, 1, &first),
            frame(0, FLAG_END_STREAM, 1, b"req1"),
            frame(1, FLAG_END_HEADERS, 3, &second),
            frame(0, FLAG_END_STREAM, 3, b"req2"),
        ]);
        let (blocks, others) = rewrite_ok(&input);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].fields, expected_request("localhost"));
        assert_eq!(blocks[1].fields, expected_request("localhost"));
        assert_eq!(blocks[1].stream, 3);
        assert_eq!(others.len(), 2);

        // A valid authority inserted by the first block is still valid when referenced.
        let first = request_block(incremental(Ok(1), b"localhost:1", true));
        let input = with_preface(&[
            frame(1, FLAG_END_HEADERS, 1, &first),
            frame(1, FLAG_END_HEADERS, 3, &indexed(64)),
        ]);
        let (blocks, _) = rewrite_ok(&input);
        assert_eq!(blocks[1].fields, fields(&[(":authority", "localhost:1")]));
    }

    #[test]
    fn dynamic_table_size_updates_are_honoured() {
        let first = request_block(incremental(Ok(1), RAW, false));
        // Shrinking to 0 evicts everything; then 4096 again and a fresh insertion at 62.
        let second = [
            size_update(0),
            size_update(4096),
            indexed(3),
            incremental(Ok(1), ENCODED, true),
            indexed(62),
        ]
        .concat();
        let input = with_preface(&[
            frame(1, FLAG_END_HEADERS, 1, &first),
            frame(1, FLAG_END_HEADERS, 3, &second),
        ]);
        let (blocks, _) = rewrite_ok(&input);
        assert_eq!(
            blocks[1].fields,
            fields(&[
                (":method", "POST"),
                (":authority", "localhost"),
                (":authority", "localhost"),
            ])
        );

        // After the eviction, the old entries are gone: referring to one is an HPACK error.
        let third = [size_update(0), size_update(4096), indexed(63)].concat();
        let input = with_preface(&[
            frame(1, FLAG_END_HEADERS, 1, &first),
            frame(1, FLAG_END_HEADERS, 3, &third),
        ]);
        assert!(matches!(
            rewrite_stream(&input),
            Err(RewriteError::Hpack(_))
        ));

        // A size above what any server allows is rejected.
        let block = [size_update(MAX_DYNAMIC_TABLE + 1), indexed(2)].concat();
        let input = with_preface(&[frame(1, FLAG_END_HEADERS, 1, &block)]);
        assert!(matches!(
            rewrite_stream(&input),
            Err(RewriteError::Hpack(_))
        ));
    }

    /// A stream exercising most paths, for the fragmentation tests.
    fn busy_stream() -> Vec<u8> {
        let first = request_block(incremental(Ok(1), RAW, true));
        let (a, b) = first.split_at(10);
        let mut padded = vec![4u8, 0, 0, 0, 1, 16];
        padded.extend_from_slice(&[indexed(3), indexed(6), indexed(65), indexed(64)].concat());
        padded.extend_from_slice(&[0; 4]);
        with_preface(&[
            frame(4, 0, 0, &[0, 4, 0, 1, 0, 0]),
            frame(1, 0, 1, a),
            frame(9, FLAG_END_HEADERS, 1, b),
            frame(0, 0, 1, &[0; 300]),
            frame(6, 0, 0, b"pingpong"),
            frame(0, FLAG_END_STREAM, 1, b""),
            frame(
                1,
                FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS,
                3,
                &padded,
            ),
            frame(8, 0, 3, &[0, 1, 0, 0]),
            frame(
                1,
                FLAG_END_HEADERS | FLAG_END_STREAM,
                3,
                &incremental(Err(b"grpc-x"), b"1", true),
            ),
        ])
    }

    #[test]
    fn any_fragmentation_gives_the_same_output() {
        let input = busy_stream();
        let whole = rewrite_stream(&input).unwrap();
        let (blocks, others) = decode_out(&whole);
        assert_eq!(blocks.len(), 3);
        assert_eq!(others.len(), 5);
        assert_eq!(
            blocks[1].fields[3],
            (":authority".into(), "localhost".into())
        );
        assert_eq!(feed_in_chunks(&input, &mut || 1).unwrap(), whole);
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..200 {
            let max = (rng.next() % 64 + 1) as usize;
            let got = feed_in_chunks(&input, &mut || (rng.next() as usize) % max + 1).unwrap();
            assert_eq!(got, whole);
        }
    }

    #[test]
    fn oversized_header_blocks_are_refused_early() {
        // One HEADERS frame announcing more than the limit: refused from its 9-byte header.
        let mut input = PREFACE.to_vec();
        put_frame_head(&mut input, MAX_HEADER_BLOCK + 1, 1, 0, 1u32.to_be_bytes());
        assert_eq!(
            rewrite_stream(&input),
            Err(RewriteError::HeaderBlockTooLarge)
        );

        // CONTINUATION frames adding up past the limit.
        let chunk = vec![0u8; OUT_FRAME_SIZE];
        let mut frames = vec![frame(1, 0, 1, &chunk)];
        for _ in 0..(MAX_HEADER_BLOCK / OUT_FRAME_SIZE) {
            frames.push(frame(9, 0, 1, &chunk));
        }
        assert_eq!(
            rewrite_stream(&with_preface(&frames)),
            Err(RewriteError::HeaderBlockTooLarge)
        );

        // Frames that are not header blocks are streamed, whatever their size.
        let mut input = PREFACE.to_vec();
        put_frame_head(&mut input, 0xff_ffff, 0, 0, 1u32.to_be_bytes());
        input.extend_from_slice(&[7; 1000]);
        assert_eq!(rewrite_stream(&input).unwrap(), input);
    }

    #[test]
    fn hpack_bombs_are_refused() {
        // One 4000-byte entry referenced 300 times decodes to 1.2 MB from a tiny block.
        let insert = incremental(Err(b"x"), &[b'a'; 4000], false);
        let bomb = indexed(62).repeat(300);
        let input = with_preface(&[
            frame(1, FLAG_END_HEADERS, 1, &insert),
            frame(1, FLAG_END_HEADERS, 3, &bomb),
        ]);
        assert_eq!(
            rewrite_stream(&input),
            Err(RewriteError::HeaderListTooLarge)
        );
    }

    #[test]
    fn protocol_and_hpack_errors_are_errors() {
        let ok = request_block(incremental(Ok(1), RAW, true));
        let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
            ("index out of range", vec![frame(1, 4, 1, &indexed(70))]),
            ("index zero", vec![frame(1, 4, 1, &indexed(0))]),
            (
                "truncated literal",
                vec![frame(1, 4, 1, &[0x41, 0x05, b'a'])],
            ),
            ("truncated integer", vec![frame(1, 4, 1, &[0xff, 0x80])]),
            (
                "EOS in Huffman",
                vec![frame(1, 4, 1, &[0x41, 0x84, 0xff, 0xff, 0xff, 0xff])],
            ),
            (
                "size update at end",
                vec![frame(1, 4, 1, &size_update(100))],
            ),
            ("padding too long", vec![frame(1, 4 | 8, 1, &[200, 0x82])]),
            ("no pad length", vec![frame(1, 4 | 8, 1, &[])]),
            ("short priority", vec![frame(1, 4 | 0x20, 1, &[0, 0, 1])]),
            (
                "interleaved frame",
                vec![
                    frame(1, 0, 1, &ok[..4]),
                    frame(0, 0, 1, b"x"),
                    frame(9, 4, 1, &ok[4..]),
                ],
            ),
            (
                "interleaved HEADERS",
                vec![frame(1, 0, 1, &ok[..4]), frame(1, 4, 3, &ok)],
            ),
            (
                "CONTINUATION on another stream",
                vec![frame(1, 0, 1, &ok[..4]), frame(9, 4, 3, &ok[4..])],
            ),
        ];
        for (what, frames) in cases {
            let input = with_preface(&frames);
            assert!(rewrite_stream(&input).is_err(), "{what}");
            assert!(
                feed_in_chunks(&input, &mut || 1).is_err(),
                "{what} (bytewise)"
            );
        }
    }

    #[test]
    fn errors_are_sticky_and_keep_earlier_output() {
        let mut r = Rewriter::new();
        let mut out = Vec::new();
        let good = frame(4, 0, 0, &[]);
        let input = with_preface(&[good.clone(), frame(1, 4, 1, &indexed(99))]);
        let err = r.feed(&input, &mut out).unwrap_err();
        assert!(matches!(err, RewriteError::Hpack(_)));
        assert_eq!(out, with_preface(&[good]));
        out.clear();
        assert_eq!(r.feed(&good_request(), &mut out), Err(err));
        assert!(out.is_empty());
    }

    fn good_request() -> Vec<u8> {
        frame(1, 5, 1, &request_block(incremental(Ok(1), RAW, true)))
    }

    #[test]
    fn stray_continuation_passes_through() {
        // h2 itself answers this with a connection error; the shim must not choke on it.
        let input = with_preface(&[frame(9, 4, 1, b"\x82"), frame(4, 0, 0, &[])]);
        assert_eq!(rewrite_stream(&input).unwrap(), input);
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = XorShift(0x1234_5678_9abc_def1);
        let busy = busy_stream();
        for round in 0..3000 {
            let len = (rng.next() % 300) as usize;
            let mut input = if round % 2 == 0 {
                PREFACE.to_vec()
            } else {
                busy[..24 + (rng.next() as usize % (busy.len() - 24))].to_vec()
            };
            for _ in 0..len {
                // Bias towards small lengths and header-block types so frames get parsed.
                let b = match rng.next() % 4 {
                    0 => 0,
                    1 => [1u8, 9, 4, 5, 8, 0x20, 0x24, 0x2d][rng.next() as usize % 8],
                    _ => rng.next() as u8,
                };
                input.push(b);
            }
            let _ = rewrite_stream(&input);
            let _ = feed_in_chunks(&input, &mut || (rng.next() % 7) as usize + 1);
        }
        // Mutations of a valid stream.
        for _ in 0..3000 {
            let mut input = busy.clone();
            for _ in 0..(rng.next() % 4 + 1) {
                let i = 24 + rng.next() as usize % (input.len() - 24);
                input[i] = rng.next() as u8;
            }
            let _ = rewrite_stream(&input);
        }
    }

    // ---- the AsyncRead layer ----

    #[tokio::test]
    async fn async_read_matches_the_state_machine() {
        let input = busy_stream();
        let want = rewrite_stream(&input).unwrap();
        let (mut client, server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for chunk in input.chunks(5) {
                client.write_all(chunk).await.unwrap();
            }
            client
        });
        let mut fix = AuthorityFix::new(server);
        let mut got = Vec::new();
        let mut small = [0u8; 3];
        // Read through a tiny buffer so pending output is handed out in pieces.
        while got.len() < want.len() {
            let n = fix.read(&mut small).await.unwrap();
            assert_ne!(n, 0, "early EOF");
            got.extend_from_slice(&small[..n]);
        }
        drop(writer.await.unwrap());
        assert_eq!(fix.read(&mut small).await.unwrap(), 0, "EOF passes through");
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn async_read_delivers_output_then_invalid_data() {
        let good = with_preface(&[frame(4, 0, 0, &[])]);
        let mut input = good.clone();
        input.extend_from_slice(&frame(1, 4, 1, &indexed(99)));
        let (mut client, server) = tokio::io::duplex(1024);
        client.write_all(&input).await.unwrap();
        let mut fix = AuthorityFix::new(server);
        let mut got = vec![0u8; good.len()];
        fix.read_exact(&mut got).await.unwrap();
        assert_eq!(got, good);
        let err = fix.read(&mut [0u8; 16]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let err = fix.read(&mut [0u8; 16]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "stays failed");
    }

    #[tokio::test]
    async fn async_eof_without_data_and_writes_pass_through() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut fix = AuthorityFix::new(server);
        fix.write_all(b"server bytes").await.unwrap();
        let mut buf = [0u8; 12];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"server bytes");
        drop(client);
        let mut rest = Vec::new();
        assert_eq!(fix.read_to_end(&mut rest).await.unwrap(), 0);
        let _inner: &tokio::io::DuplexStream = fix.get_ref();
        let _inner: tokio::io::DuplexStream = fix.into_inner();
    }
}
