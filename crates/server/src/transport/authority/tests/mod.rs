//! Unit tests of the `:authority` rewrite. This file holds what the test files share: builders
//! of client bytes (frames, HPACK representations, and the Huffman encoder `hpack.rs` does not
//! need) and readers of the rewritten stream that check the shim's output invariants.

use super::frames::*;
use super::hpack::*;
use super::*;

mod connection;
mod hpack;
mod rewriter;

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

/// A stream exercising most paths, for the fragmentation and AsyncRead tests.
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
    /// Whether the block has the shape of a re-encoded one: unpadded, frames within the
    /// default size, only literals that leave the server's dynamic table alone.
    reencoded: bool,
}

/// Decodes every header block of the rewritten stream with one persistent decoder (as h2
/// does), noting which have the shape of a re-encoded block, and checks that the framing is
/// whole.
fn decode_out(out: &[u8]) -> (Vec<Decoded>, Vec<Frame>) {
    let mut decoder = loona_hpack::Decoder::new();
    let mut blocks = Vec::new();
    let mut others = Vec::new();
    let mut open: Option<(Decoded, Vec<u8>)> = None;
    for f in parse_frames(out) {
        match f.kind {
            TYPE_HEADERS => {
                assert!(open.is_none());
                let reencoded = f.payload.len() <= OUT_FRAME_SIZE && f.flags & FLAG_PADDED == 0;
                let mut p = &f.payload[..];
                if f.flags & FLAG_PADDED != 0 {
                    let pad = usize::from(p[0]);
                    p = &p[1..p.len() - pad];
                }
                let (priority, frag) = if f.flags & FLAG_PRIORITY != 0 {
                    (Some(p[..5].to_vec()), p[5..].to_vec())
                } else {
                    (None, p.to_vec())
                };
                let d = Decoded {
                    stream: f.stream,
                    flags: f.flags,
                    priority,
                    fields: Vec::new(),
                    frames: 1,
                    reencoded,
                };
                open = Some((d, frag));
            }
            TYPE_CONTINUATION => {
                let (d, frag) = open.as_mut().expect("CONTINUATION after HEADERS");
                assert_eq!(d.stream, f.stream);
                d.reencoded &= f.payload.len() <= OUT_FRAME_SIZE;
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
            d.reencoded &= literal_only(&frag);
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

/// Whether a block holds only §6.2.2/§6.2.3 literals without Huffman coding, the form a
/// re-encoded block takes: it never touches the server's dynamic table.
fn literal_only(block: &[u8]) -> bool {
    let mut rest = block;
    while let Some(&first) = rest.first() {
        if first & 0xe0 != 0 {
            return false;
        }
        let (index, mut used) = decode_int(rest, 4).unwrap();
        for _ in 0..if index == 0 { 2 } else { 1 } {
            if rest[used] & 0x80 != 0 {
                return false;
            }
            let (len, n) = decode_int(&rest[used..], 7).unwrap();
            used += n + len;
        }
        rest = &rest[used..];
    }
    true
}

/// Rewrites a stream whose first header block needs its `:authority` fixed, so that every block
/// must come out re-encoded, and decodes the result.
fn rewrite_ok(input: &[u8]) -> (Vec<Decoded>, Vec<Frame>) {
    let (blocks, others) = decode_out(&rewrite_stream(input).unwrap());
    for (i, b) in blocks.iter().enumerate() {
        assert!(b.reencoded, "block {i} was not re-encoded: {b:?}");
    }
    (blocks, others)
}

fn feed_in_chunks(input: &[u8], sizes: &mut dyn FnMut() -> usize) -> Result<Vec<u8>, RewriteError> {
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
