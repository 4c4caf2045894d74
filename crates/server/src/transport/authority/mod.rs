//! The `:authority` fix: a byte-level shim between an accepted connection and tonic.
//!
//! Upstream Go clients dial the pipe path as the gRPC target, so every request carries
//! `:authority` = the pipe path, raw (`\\.\pipe\csi-proxy-disk-v1`) or percent-encoded
//! (`%5C%5C.%5Cpipe%5Ccsi-proxy-disk-v1`). Neither is a valid RFC 3986 authority, and h2 (under
//! tonic) answers such a request with `RST_STREAM(PROTOCOL_ERROR)`. h2 has no switch for this and
//! we do not fork it, so [`AuthorityFix`] rewrites the client→server byte stream instead:
//!
//! * the client preface and every frame except HEADERS/CONTINUATION pass through byte-exact;
//! * each header block (HEADERS + CONTINUATION*, RFC 9113 §4.3, §6.2, §6.10) is reassembled
//!   and decoded with a per-connection HPACK decoder (RFC 7541);
//! * a block whose `:authority` is fine goes out exactly as it came, as long as no earlier
//!   block of the connection was changed: then the server's HPACK table is still the client's
//!   (a client with a valid authority, such as any Rust or Linux client, costs one decode per
//!   block and nothing more);
//! * the first block with an unparsable `:authority`, and every block after it, is re-encoded
//!   with `localhost` in its place and literals that never touch the server's dynamic table
//!   (after one change, the client's later blocks may refer to entries the server never saw).
//!
//! The transformation itself is the pure state machine [`Rewriter`] (also reachable through
//! [`rewrite_stream`], the entry point for fuzzing); [`AuthorityFix`] is a thin `AsyncRead`
//! layer over it. Server→client bytes are never touched.
//!
//! Files: `frames.rs` the HTTP/2 frame rewriter ([`Rewriter`]), `hpack.rs` the HPACK pieces it
//! needs, `connection.rs` the connection layer ([`AuthorityFix`]), `tests/` their unit tests.

use std::io;

mod connection;
mod frames;
mod hpack;
#[cfg(test)]
mod tests;

pub use connection::AuthorityFix;
pub use frames::Rewriter;

/// Largest header block (sum of HEADERS + CONTINUATION payloads, padding included) accepted.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Largest decoded header list accepted, counted as in RFC 9113 §6.5.2
/// (`name + value + 32` per field). Bounds the expansion of small dynamic-table references
/// ("HPACK bomb").
pub const MAX_HEADER_LIST: usize = 1 << 20;

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
