//! The connection layer: [`AuthorityFix`], the `AsyncRead` wrapper that runs the client→server
//! bytes of an accepted connection through the [`Rewriter`] before tonic reads them; writes pass
//! through untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

use super::RewriteError;
use super::frames::Rewriter;

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
