//! The transport's `:authority` rewrite under fuzzing.
//!
//! Properties of [`Rewriter`] on any client→server byte stream, in any fragmentation:
//! - it never panics, and fragmentation never changes the output or the error;
//! - a stream that is not HTTP/2 with prior knowledge passes through unchanged;
//! - the output is valid HTTP/2 framing: after the preface, whole frames (only the last may be
//!   cut short, and only if it is not part of a header block); every header block is
//!   HEADERS + CONTINUATION* on one stream, and the blocks decode in order with one persistent
//!   HPACK decoder, as the server decodes them;
//! - header blocks go out byte for byte as they came until the first one whose `:authority`
//!   needs fixing; from that one on, every block is re-encoded: unpadded, frames within the
//!   default 16 KiB size, literals only (never touching the server's dynamic table);
//! - every `:authority` in the output is accepted by `http::uri::Authority`;
//! - differentially: each output block has exactly the fields an independent decoder reads from
//!   the corresponding input block, `:authority` aside (kept when valid, else `localhost`);
//!   END_STREAM and the priority fields are kept; all other frames pass byte for byte.

use csi_proxy_server::transport::authority::{Rewriter, rewrite_stream};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// A header block as seen on one side.
#[derive(Debug, PartialEq, Eq)]
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<Vec<u8>>,
    fields: Fields,
    /// Its frames, headers included, as they are on the wire.
    raw: Vec<u8>,
    /// Output only: unpadded, frames within 16 KiB, literals only without Huffman coding.
    reencoded: bool,
}

/// Frames of one side, split into header blocks and the bytes of everything else.
struct Parsed {
    blocks: Vec<Block>,
    other: Vec<u8>,
}

fn head(b: &[u8]) -> (usize, u8, u8, u32) {
    let len = usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]);
    let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff;
    (len, b[3], b[4], stream)
}

fn decoder() -> loona_hpack::Decoder<'static> {
    let mut d = loona_hpack::Decoder::new();
    // The same bound the server sets on client table-size updates.
    d.set_max_allowed_table_size(64 * 1024);
    d
}

/// Whether an HPACK block holds only "literal without indexing" / "never indexed"
/// representations with raw strings (RFC 7541 §6.2.2, §6.2.3, §5.2).
fn literal_only(block: &[u8]) -> bool {
    fn int(buf: &[u8], prefix: u32) -> Option<(usize, usize)> {
        let max = (1usize << prefix) - 1;
        let v = usize::from(*buf.first()?) & max;
        if v < max {
            return Some((v, 1));
        }
        let mut v = v;
        for (i, &b) in buf.iter().enumerate().skip(1).take(5) {
            v = v.checked_add(usize::from(b & 0x7f) << (7 * (i - 1)))?;
            if b & 0x80 == 0 {
                return Some((v, i + 1));
            }
        }
        None
    }
    let mut rest = block;
    while let Some(&first) = rest.first() {
        if first & 0xe0 != 0 {
            return false;
        }
        let Some((index, mut used)) = int(rest, 4) else {
            return false;
        };
        for _ in 0..if index == 0 { 2 } else { 1 } {
            let s = &rest[used.min(rest.len())..];
            if s.first().is_none_or(|b| b & 0x80 != 0) {
                return false;
            }
            let Some((len, n)) = int(s, 7) else {
                return false;
            };
            used += n + len;
        }
        if used > rest.len() {
            return false;
        }
        rest = &rest[used..];
    }
    true
}

/// Parses the output strictly (it must be well formed); decodes blocks with one persistent
/// decoder, as the server does.
fn parse_output(out: &[u8]) -> Parsed {
    let mut rest = out
        .strip_prefix(PREFACE)
        .expect("output starts with the preface");
    let mut dec = decoder();
    let mut parsed = Parsed {
        blocks: Vec::new(),
        other: Vec::new(),
    };
    let mut open: Option<(Block, Vec<u8>)> = None;
    while !rest.is_empty() {
        if rest.len() < 9 {
            assert!(
                open.is_none(),
                "a frame header is cut inside a header block"
            );
            parsed.other.extend_from_slice(rest);
            break;
        }
        let (len, kind, flags, stream) = head(rest);
        let whole = rest.len() >= 9 + len;
        let is_block = kind == HEADERS || (kind == CONTINUATION && open.is_some());
        if !whole {
            assert!(!is_block, "a header-block frame is cut short in the output");
            parsed.other.extend_from_slice(rest);
            break;
        }
        let (frame, tail) = rest.split_at(9 + len);
        rest = tail;
        if !is_block {
            assert!(
                open.is_none(),
                "frame type {kind} inside an open header block"
            );
            parsed.other.extend_from_slice(frame);
            continue;
        }
        let payload = &frame[9..];
        if kind == HEADERS {
            assert!(open.is_none(), "HEADERS inside an open header block");
            let mut p = payload;
            let mut pad = 0;
            if flags & PADDED != 0 {
                let (&n, t) = p.split_first().expect("PADDED HEADERS without Pad Length");
                pad = usize::from(n);
                p = t;
            }
            let priority = if flags & PRIORITY != 0 {
                assert!(p.len() >= 5, "PRIORITY HEADERS too short");
                let (pr, t) = p.split_at(5);
                p = t;
                Some(pr.to_vec())
            } else {
                None
            };
            assert!(pad <= p.len(), "HEADERS padding longer than its payload");
            let block = Block {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                fields: Vec::new(),
                raw: frame.to_vec(),
                reencoded: flags & PADDED == 0 && len <= 16_384,
            };
            open = Some((block, p[..p.len() - pad].to_vec()));
        } else if let Some((block, fragment)) = open.as_mut() {
            assert_eq!(block.stream, stream, "CONTINUATION on another stream");
            fragment.extend_from_slice(payload);
            block.raw.extend_from_slice(frame);
            block.reencoded &= len <= 16_384;
        }
        if flags & END_HEADERS != 0
            && let Some((mut block, fragment)) = open.take()
        {
            block.reencoded &= literal_only(&fragment);
            block.fields = dec
                .decode(&fragment)
                .unwrap_or_else(|e| panic!("output block does not decode: {e:?}"));
            for (name, value) in &block.fields {
                if name == b":authority" {
                    assert!(
                        http::uri::Authority::try_from(&value[..]).is_ok(),
                        "output :authority {:?} is not acceptable",
                        String::from_utf8_lossy(value)
                    );
                }
            }
            parsed.blocks.push(block);
        }
    }
    assert!(open.is_none(), "output ends inside a header block");
    parsed
}

/// Reads the input leniently the way the rewriter must, stopping where it is malformed; blocks
/// are decoded by one persistent decoder, up to `want` blocks (later ones the rewriter refused).
fn parse_input(input: &[u8], want: usize) -> Parsed {
    let mut rest = &input[PREFACE.len()..];
    let mut dec = decoder();
    let mut parsed = Parsed {
        blocks: Vec::new(),
        other: Vec::new(),
    };
    let mut open: Option<(Block, Vec<u8>)> = None;
    while rest.len() >= 9 {
        let (len, kind, flags, stream) = head(rest);
        let is_block = kind == HEADERS || (kind == CONTINUATION && open.is_some());
        if !is_block {
            if open.is_some() {
                break;
            }
            let n = rest.len().min(9 + len);
            parsed.other.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            continue;
        }
        if rest.len() < 9 + len || parsed.blocks.len() >= want {
            break;
        }
        let frame = &rest[..9 + len];
        let payload = &rest[9..9 + len];
        rest = &rest[9 + len..];
        if kind == HEADERS {
            let mut p = payload;
            let mut pad = 0;
            if flags & PADDED != 0 {
                let Some((&n, t)) = p.split_first() else {
                    break;
                };
                pad = usize::from(n);
                p = t;
            }
            let priority = if flags & PRIORITY != 0 {
                if p.len() < 5 {
                    break;
                }
                let (pr, t) = p.split_at(5);
                p = t;
                Some(pr.to_vec())
            } else {
                None
            };
            if pad > p.len() {
                break;
            }
            let block = Block {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                fields: Vec::new(),
                raw: frame.to_vec(),
                reencoded: false,
            };
            open = Some((block, p[..p.len() - pad].to_vec()));
        } else if let Some((block, fragment)) = open.as_mut() {
            if block.stream != stream {
                break;
            }
            fragment.extend_from_slice(payload);
            block.raw.extend_from_slice(frame);
        }
        if flags & END_HEADERS != 0
            && let Some((mut block, fragment)) = open.take()
        {
            match dec.decode(&fragment) {
                Ok(f) => block.fields = f,
                Err(_) => break,
            }
            parsed.blocks.push(block);
        }
    }
    if open.is_none() && parsed.blocks.len() < want {
        // A trailing partial frame that is not a header block is streamed through.
        if rest.len() < 9 {
            parsed.other.extend_from_slice(rest);
        }
    }
    parsed
}

/// What the rewrite must turn an input field list into.
fn fixed(fields: &Fields) -> Fields {
    fields
        .iter()
        .map(|(n, v)| {
            if n == b":authority" && http::uri::Authority::try_from(&v[..]).is_err() {
                (n.clone(), b"localhost".to_vec())
            } else {
                (n.clone(), v.clone())
            }
        })
        .collect()
}

/// Runs one case: the first byte steers fragmentation, the rest is the client stream.
pub fn run(data: &[u8]) {
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    // Most interesting inputs start with the preface; let the fuzzer skip typing it.
    let mut owned;
    let input = if seed & 0x80 != 0 {
        owned = PREFACE.to_vec();
        owned.extend_from_slice(input);
        &owned[..]
    } else {
        input
    };

    let whole = rewrite_stream(input);
    let mut r = Rewriter::new();
    let mut out = Vec::new();
    let mut result = Ok(());
    let step = usize::from(seed & 0x0f) + 1;
    for chunk in input.chunks(step) {
        result = r.feed(chunk, &mut out);
        if result.is_err() {
            break;
        }
    }
    match (&whole, &result) {
        (Ok(w), Ok(())) => assert_eq!(w, &out, "fragmentation changed the output"),
        (Err(a), Err(b)) => assert_eq!(a, b, "fragmentation changed the error"),
        _ => panic!("fragmentation changed the outcome: {whole:?} vs {result:?}"),
    }

    let n = PREFACE.len().min(input.len());
    if input[..n] != PREFACE[..n] {
        assert_eq!(out, input, "non-HTTP/2 input must pass through unchanged");
        return;
    }
    if input.len() < PREFACE.len() {
        assert_eq!(out, input);
        return;
    }
    let got = parse_output(&out);
    let want = parse_input(input, got.blocks.len());
    assert!(
        want.blocks.len() >= got.blocks.len(),
        "output has {} header blocks, the input only {} that decode",
        got.blocks.len(),
        want.blocks.len()
    );
    let mut fixing = false;
    for (g, w) in got.blocks.iter().zip(&want.blocks) {
        let fixed_fields = fixed(&w.fields);
        fixing |= fixed_fields != w.fields;
        if fixing {
            assert!(
                g.reencoded,
                "a block at or after the first fix is not re-encoded"
            );
        } else {
            assert_eq!(g.raw, w.raw, "a block before any fix was changed");
        }
        assert_eq!(g.stream, w.stream);
        assert_eq!(g.end_stream, w.end_stream);
        assert_eq!(g.priority, w.priority);
        assert_eq!(g.fields, fixed_fields, "fields changed beyond :authority");
    }
    assert!(
        want.other.starts_with(&got.other),
        "frames other than header blocks were altered"
    );
    if result.is_ok() {
        assert_eq!(got.blocks.len(), want.blocks.len());
    }
}
