//! The pieces of HTTP/2 (RFC 9113) and HPACK (RFC 7541) the bench writes by hand: frame headers
//! and header-field representations with raw (not Huffman-coded) strings.

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;

/// Frame flags (RFC 9113 §6): END_STREAM on DATA and HEADERS, ACK on SETTINGS and PING.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;

/// Appends a frame header (RFC 9113 §4.1).
pub fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let [_, a, b, c] = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&[a, b, c, kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Appends a whole frame.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    frame_head(out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
}

/// Appends an HPACK integer with a `prefix`-bit prefix under the pattern bits `first` (§5.1).
pub fn int(out: &mut Vec<u8>, first: u8, prefix: u32, mut v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push(0x80 | (v % 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// Appends a literal header field, named by static-table `index` or, with index 0, by `name`:
/// "without indexing" (§6.2.2) or, with `indexing`, "with incremental indexing" (§6.2.1).
pub fn literal(out: &mut Vec<u8>, indexing: bool, index: usize, name: Option<&[u8]>, value: &[u8]) {
    if indexing {
        int(out, 0x40, 6, index);
    } else {
        int(out, 0x00, 4, index);
    }
    for s in name.into_iter().chain([value]) {
        int(out, 0x00, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// A gRPC length-prefixed message, uncompressed (gRPC over HTTP/2: compressed flag, 4-byte
/// big-endian length, message).
pub fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    out
}
