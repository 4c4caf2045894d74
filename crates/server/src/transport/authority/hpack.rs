//! The HPACK pieces the rewriter needs (RFC 7541): a literal-only encoder, a walk of a header
//! block's representations that Huffman-decodes its strings, and the Huffman decoder. Decoding
//! against the dynamic table is loona-hpack's.
//!
//! Hand-written because the crates stop short of what an in-place rewrite needs: the HPACK
//! decoders' callbacks do not say which fields were "never indexed" (which an intermediary must
//! keep, §7.1.3), loona-hpack's Huffman decoding builds its table per string, and the encoders
//! index into a dynamic table of their own, which would desynchronise the server's.

use super::RewriteError;

/// Largest HPACK dynamic table a client may ask for with a size update (RFC 7541 §6.3).
///
/// The server never advertises more than the default 4096 (tonic does not set
/// `SETTINGS_HEADER_TABLE_SIZE`), so a conforming client stays far below this; it exists only
/// to bound memory against a hostile one.
pub(super) const MAX_DYNAMIC_TABLE: usize = 64 * 1024;

// ---- HPACK encoding (RFC 7541) -------------------------------------------------------------

/// Names of the static table (RFC 7541 Appendix A), index = position + 1.
pub(super) const STATIC_NAMES: [&[u8]; 61] = [
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
pub(super) fn encode_int(out: &mut Vec<u8>, first: u8, prefix_bits: u32, value: usize) {
    let (bytes, n) = int_bytes(first, prefix_bits, value);
    out.extend_from_slice(bytes.get(..n).unwrap_or_default());
}

/// The bytes of an HPACK integer (RFC 7541 §5.1) and how many there are: at most 1 + ⌈64/7⌉.
fn int_bytes(first: u8, prefix_bits: u32, mut value: usize) -> ([u8; 11], usize) {
    let mut bytes = [0u8; 11];
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        bytes[0] = first | value as u8;
        return (bytes, 1);
    }
    bytes[0] = first | max as u8;
    value -= max;
    let mut n = 1;
    while value >= 128 {
        bytes[n] = 0x80 | (value % 128) as u8;
        value /= 128;
        n += 1;
    }
    bytes[n] = value as u8;
    (bytes, n + 1)
}

/// Appends a string literal without Huffman coding (RFC 7541 §5.2).
fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    encode_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

/// Appends a "literal header field without indexing" (RFC 7541 §6.2.2), or "never indexed"
/// (§6.2.3), naming the field by static-table index when possible. Neither form touches the
/// server's dynamic table, so its HPACK state depends only on what this shim sends.
pub(super) fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8], never_indexed: bool) {
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
pub(super) fn decode_int(buf: &[u8], prefix_bits: u32) -> Option<(usize, usize)> {
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
/// representations were "literal never indexed". Reused from block to block by [`normalize`],
/// so a connection allocates these buffers once.
#[derive(Debug, Default)]
pub(super) struct Normalized {
    pub(super) block: Vec<u8>,
    pub(super) never_indexed: Vec<bool>,
}

fn malformed() -> RewriteError {
    RewriteError::Hpack("malformed field representation".to_owned())
}

/// Walks the structure of a header block (RFC 7541 §6) without touching any table, writing the
/// result into `into` (cleared first).
///
/// Two reasons: the decoder's callback API does not say which fields were "never indexed", and
/// §7.1.3 requires an intermediary to keep that; and loona-hpack builds a fresh Huffman table for
/// every Huffman-coded string (tens of microseconds each), so a block of tiny strings would cost
/// CPU out of all proportion to its size. Strings are decoded here with a table built at compile
/// time and handed to the decoder as raw literals, which decode to the same field list.
pub(super) fn normalize(block: &[u8], into: &mut Normalized) -> Result<(), RewriteError> {
    let Normalized {
        block: out,
        never_indexed,
    } = into;
    out.clear();
    never_indexed.clear();
    // Huffman coding shrinks by at most 5/8 (shortest code: 5 bits), so this rarely regrows.
    out.reserve(block.len().saturating_add(block.len() / 2));
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
                rest = copy_string(rest, out)?;
            }
            rest = copy_string(rest, out)?;
        }
    }
    Ok(())
}

/// Copies the string literal (RFC 7541 §5.2) at the start of `buf` to `out`, Huffman-decoded;
/// returns what follows it.
fn copy_string<'a>(buf: &'a [u8], out: &mut Vec<u8>) -> Result<&'a [u8], RewriteError> {
    let (len, used) = decode_int(buf, 7).ok_or_else(malformed)?;
    let end = used.checked_add(len).ok_or_else(malformed)?;
    let raw = buf.get(..end).ok_or_else(malformed)?;
    let huffman = raw.first().is_some_and(|b| b & 0x80 != 0);
    if huffman {
        // Decoded in place after the output so far, then given its length prefix: no
        // allocation per string.
        let start = out.len();
        huffman_decode(raw.get(used..).unwrap_or_default(), out)
            .ok_or_else(|| RewriteError::Hpack("invalid Huffman-coded string".to_owned()))?;
        let (prefix, n) = int_bytes(0x00, 7, out.len() - start);
        out.splice(start..start, prefix.iter().take(n).copied());
    } else {
        out.extend_from_slice(raw);
    }
    Ok(buf.get(end..).unwrap_or_default())
}

/// Code lengths of the HPACK Huffman code (RFC 7541 Appendix B), symbols 0..=255 then EOS. The
/// code is canonical (codes are assigned in order of length, then symbol), so the lengths alone
/// determine it.
pub(super) const HUFFMAN_LENGTHS: [u8; 257] = [
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

/// Decodes a Huffman-coded string (RFC 7541 §5.2), appending it to `out`; `None` if it contains
/// EOS or its padding is longer than 7 bits or not the most significant bits of EOS (all ones),
/// and then `out` holds part of the string.
pub(super) fn huffman_decode(input: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.reserve(input.len().saturating_mul(8) / 5);
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
    (len <= 7 && code == (1 << len) - 1).then_some(())
}
