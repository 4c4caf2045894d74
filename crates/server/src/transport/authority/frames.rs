//! The HTTP/2 frame rewriter: the pure state machine that passes the client→server byte stream
//! through frame by frame, reassembles each header block (HEADERS + CONTINUATION*), has
//! `:authority` fixed and re-emits the block.
//!
//! Hand-written because no crate rewrites one pseudo-header of an HTTP/2 stream in place: h2
//! and the other HTTP/2 stacks are endpoints that decode, validate and answer (and h2 rejects
//! these authorities before any hook runs); a proxy built from them would terminate and
//! re-originate every stream. This one touches header blocks only and forwards every other
//! byte as it came.

use super::hpack::{MAX_DYNAMIC_TABLE, Normalized, encode_field, normalize};
use super::{MAX_HEADER_BLOCK, MAX_HEADER_LIST, RewriteError};

/// Frame payload size used when re-emitting header blocks: the initial
/// `SETTINGS_MAX_FRAME_SIZE` (RFC 9113 §6.5.2), which every peer must accept.
pub(super) const OUT_FRAME_SIZE: usize = 16_384;

/// Client connection preface (RFC 9113 §3.4).
pub(super) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const FRAME_HEADER_LEN: usize = 9;
pub(super) const TYPE_HEADERS: u8 = 0x1;
pub(super) const TYPE_CONTINUATION: u8 = 0x9;
pub(super) const FLAG_END_STREAM: u8 = 0x1;
pub(super) const FLAG_END_HEADERS: u8 = 0x4;
pub(super) const FLAG_PADDED: u8 = 0x8;
pub(super) const FLAG_PRIORITY: u8 = 0x20;

/// 9-byte frame header (RFC 9113 §4.1). The stream identifier is kept raw (reserved bit
/// included) so re-emitted frames carry exactly what the client sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameHead {
    pub(super) length: usize,
    pub(super) kind: u8,
    pub(super) flags: u8,
    pub(super) stream: [u8; 4],
}

impl FrameHead {
    pub(super) fn parse(b: [u8; FRAME_HEADER_LEN]) -> Self {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = b;
        FrameHead {
            length: usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2),
            kind,
            flags,
            stream: [s0, s1, s2, s3],
        }
    }

    /// The 31-bit stream identifier, reserved bit ignored as RFC 9113 §4.1 requires.
    pub(super) fn stream_id(&self) -> u32 {
        u32::from_be_bytes(self.stream) & 0x7fff_ffff
    }
}

/// Appends a frame header. `length` never exceeds [`OUT_FRAME_SIZE`] here, so it fits 24 bits.
pub(super) fn put_frame_head(
    out: &mut Vec<u8>,
    length: usize,
    kind: u8,
    flags: u8,
    stream: [u8; 4],
) {
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

/// The frame-level facts of a header block being reassembled from HEADERS + CONTINUATION
/// frames; its bytes are in the rewriter's reused buffers.
#[derive(Debug, Clone, Copy)]
struct Block {
    stream: [u8; 4],
    end_stream: bool,
    /// The 5 priority bytes (E + stream dependency, weight) when the PRIORITY flag was set.
    priority: Option<[u8; 5]>,
}

/// Buffers reused from one header block to the next, so that a connection in its steady state
/// allocates nothing per request.
#[derive(Debug, Default)]
struct Buffers {
    /// The block's HPACK fragment (padding and priority fields removed).
    fragment: Vec<u8>,
    /// The block's frames exactly as the client sent them, headers included, while blocks still
    /// go out unchanged.
    raw: Vec<u8>,
    normalized: Normalized,
    /// The decoded fields, names and values back to back; `spans` holds their lengths and
    /// whether the field is an `:authority` to replace.
    fields: Vec<u8>,
    spans: Vec<(usize, usize, bool)>,
    encoded: Vec<u8>,
    /// The last `:authority` value found acceptable: a client sends the same one on every
    /// request, and checking it again would copy it each time.
    good_authority: Vec<u8>,
}

/// Capacity a buffer may keep between header blocks. A block can be up to [`MAX_HEADER_BLOCK`];
/// a connection that sent one big block must not hold that memory for the rest of its life.
const KEEP_CAPACITY: usize = 64 * 1024;

impl Buffers {
    /// Frees the buffers that grew past [`KEEP_CAPACITY`].
    fn trim(&mut self) {
        let Buffers {
            fragment,
            raw,
            normalized,
            fields,
            spans,
            encoded,
            good_authority,
        } = self;
        for buf in [
            fragment,
            raw,
            &mut normalized.block,
            fields,
            encoded,
            good_authority,
        ] {
            trim(buf);
        }
        trim(&mut normalized.never_indexed);
        trim(spans);
    }
}

fn trim<T>(buf: &mut Vec<T>) {
    if buf.capacity().saturating_mul(size_of::<T>()) > KEEP_CAPACITY {
        *buf = Vec::new();
    }
}

/// The client→server rewriting state machine behind [`super::AuthorityFix`].
///
/// Feed it bytes in any fragmentation; it emits the rewritten stream as soon as each part is
/// decided (pass-through bytes at once, a header block when its END_HEADERS frame is complete).
pub struct Rewriter {
    state: State,
    head: [u8; FRAME_HEADER_LEN],
    payload: Vec<u8>,
    block: Option<Block>,
    buffers: Buffers,
    /// Whether a header block of this connection has been re-encoded. Until the first block
    /// that needs its `:authority` fixed, blocks go out as the client sent them (still decoded,
    /// to find out), so the server's HPACK table is the client's. The re-encoding never indexes,
    /// so from then on the two tables differ and every later block is re-encoded too: it may
    /// refer to entries the server never saw.
    reencoding: bool,
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
            buffers: Buffers::default(),
            reencoding: false,
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
            self.buffers = Buffers::default();
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
                if self.buffers.fragment.len().saturating_add(head.length) > MAX_HEADER_BLOCK {
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
        if head.kind == TYPE_HEADERS {
            self.buffers.raw.clear();
        }
        if !self.reencoding {
            self.buffers.raw.extend_from_slice(&self.head);
        }
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
            let fragment = &mut self.buffers.fragment;
            fragment.clear();
            fragment.extend_from_slice(rest.get(..fragment_len).unwrap_or_default());
            self.block = Some(Block {
                stream: head.stream,
                end_stream: head.flags & FLAG_END_STREAM != 0,
                priority,
            });
        } else if self.block.is_some() {
            // CONTINUATION: no padding, no priority (RFC 9113 §6.10).
            self.buffers.fragment.extend_from_slice(&payload);
        }
        if !self.reencoding {
            self.buffers.raw.extend_from_slice(&payload);
        }
        // Keep the allocation for the next frame.
        self.payload = payload;
        self.payload.clear();

        if head.flags & FLAG_END_HEADERS != 0
            && let Some(block) = self.block.take()
        {
            self.finish_block(block, out)?;
            self.buffers.trim();
            trim(&mut self.payload);
        }
        Ok(())
    }

    /// Decodes a complete header block and emits it: as the client sent it while that is still
    /// possible and its `:authority` needs no fixing, else re-encoded with `:authority` fixed.
    fn finish_block(&mut self, block: Block, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let Buffers {
            fragment,
            raw,
            normalized,
            fields,
            spans,
            encoded,
            good_authority,
        } = &mut self.buffers;
        normalize(fragment, normalized)?;
        // Every field counts at least 32 bytes towards the list size, so a block with too many
        // fields is refused before the decoder runs.
        if normalized.never_indexed.len().saturating_mul(32) > MAX_HEADER_LIST {
            return Err(RewriteError::HeaderListTooLarge);
        }
        fields.clear();
        spans.clear();
        let mut list_size = 0usize;
        let mut too_large = false;
        let mut bad_authority = false;
        self.decoder
            .decode_with_cb(&normalized.block, |name, value| {
                // The callback cannot stop the decoder: stop copying, fail after it returns.
                list_size = list_size.saturating_add(name.len() + value.len() + 32);
                if list_size > MAX_HEADER_LIST {
                    too_large = true;
                    return;
                }
                let mut fix = false;
                // Never empty when set: h2 refuses an empty `:authority`.
                let known_good = !good_authority.is_empty() && *value == good_authority[..];
                if *name == b":authority"[..] && !known_good {
                    if http::uri::Authority::try_from(&value[..]).is_ok() {
                        good_authority.clear();
                        good_authority.extend_from_slice(&value);
                    } else {
                        tracing::trace!(
                            authority = %String::from_utf8_lossy(&value),
                            "replacing unparsable :authority with localhost"
                        );
                        fix = true;
                        bad_authority = true;
                    }
                }
                fields.extend_from_slice(&name);
                fields.extend_from_slice(&value);
                spans.push((name.len(), value.len(), fix));
            })
            .map_err(|e| RewriteError::Hpack(e.to_string()))?;
        if too_large {
            return Err(RewriteError::HeaderListTooLarge);
        }
        if !self.reencoding && !bad_authority {
            out.extend_from_slice(raw);
            return Ok(());
        }
        self.reencoding = true;
        raw.clear();

        encoded.clear();
        let mut rest = fields.as_slice();
        for (i, &(name_len, value_len, fix)) in spans.iter().enumerate() {
            let (name, tail) = rest.split_at(name_len.min(rest.len()));
            let (value, tail) = tail.split_at(value_len.min(tail.len()));
            rest = tail;
            let value = if fix { &b"localhost"[..] } else { value };
            // RFC 7541 §6.2.3/§7.1.3: an intermediary must keep "never indexed" as it is.
            let never = normalized.never_indexed.get(i).copied().unwrap_or(false);
            encode_field(encoded, name, value, never);
        }
        emit_block(out, &block, encoded);
        Ok(())
    }
}

#[cfg(test)]
impl Rewriter {
    /// Bytes of buffer capacity the rewriter keeps between header blocks.
    pub(super) fn retained_capacity(&self) -> usize {
        let b = &self.buffers;
        self.payload.capacity()
            + b.fragment.capacity()
            + b.raw.capacity()
            + b.normalized.block.capacity()
            + b.normalized.never_indexed.capacity()
            + b.fields.capacity()
            + b.spans.capacity() * size_of::<(usize, usize, bool)>()
            + b.encoded.capacity()
            + b.good_authority.capacity()
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
