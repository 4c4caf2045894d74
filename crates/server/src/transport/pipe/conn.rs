//! One connected client of a pipe: the server end of its instance, with the client's process id
//! and writes gathered into one pipe write.
#![allow(
    unsafe_code,
    reason = "the client process id is a Win32 call with no safe wrapper"
)]

use super::write::Writer;
use super::*;

/// The most bytes gathered into one pipe write (larger answers go out buffer by buffer).
pub(super) const GATHER_LIMIT: usize = 64 * 1024;
const _: () = assert!(
    GATHER_LIMIT <= super::write::WRITE_LIMIT,
    "a gathered write is one write"
);

/// One connected client of a pipe: the server end of a pipe instance.
#[derive(Debug)]
pub struct PipeConn {
    /// Our own write path (see `write.rs`); `None` (mio's writes) only if its event could not
    /// be made. Declared before `inner`: a pending write is ended before the handle closes.
    writer: Option<Writer>,
    inner: NamedPipeServer,
    info: PipeConnectInfo,
}

/// What tonic records about a pipe connection (`Request::extensions().get::<PipeConnectInfo>()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipeConnectInfo {
    /// Process id of the client, from `GetNamedPipeClientProcessId`, if Windows reported one.
    pub client_process_id: Option<u32>,
}

impl PipeConn {
    pub(super) fn new(inner: NamedPipeServer) -> PipeConn {
        let mut pid = 0u32;
        // SAFETY: the handle belongs to `inner`, a connected pipe instance that lives across the
        // call; `pid` is a valid out-pointer.
        let ok =
            unsafe { GetNamedPipeClientProcessId(HANDLE(inner.as_raw_handle()), &mut pid).is_ok() };
        let writer = Writer::new(HANDLE(inner.as_raw_handle()))
            .inspect_err(
                |e| tracing::warn!(error = %e, "pipe connection writes through mio: no event"),
            )
            .ok();
        PipeConn {
            writer,
            inner,
            info: PipeConnectInfo {
                client_process_id: (ok && pid != 0).then_some(pid),
            },
        }
    }

    /// Process id of the client, if Windows reported one.
    pub fn client_process_id(&self) -> Option<u32> {
        self.info.client_process_id
    }

    /// The underlying pipe instance.
    pub fn get_ref(&self) -> &NamedPipeServer {
        &self.inner
    }

    /// The underlying pipe instance, consuming the connection.
    pub fn into_inner(self) -> NamedPipeServer {
        let PipeConn { writer, inner, .. } = self;
        drop(writer);
        inner
    }
}

impl tonic::transport::server::Connected for PipeConn {
    type ConnectInfo = PipeConnectInfo;

    fn connect_info(&self) -> PipeConnectInfo {
        self.info
    }
}

impl AsyncRead for PipeConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PipeConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match &mut this.writer {
            Some(w) => w.poll_write(cx, buf),
            None => Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    /// Several buffers (an answer's HTTP/2 frames) become one pipe write: each write on a pipe
    /// is its own overlapped `WriteFile` and completion, and the pipe itself does not gather.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() < 2 || total > GATHER_LIMIT {
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            return self.poll_write(cx, first);
        }
        let join = || {
            let mut joined = Vec::with_capacity(total);
            for b in bufs {
                joined.extend_from_slice(b);
            }
            joined
        };
        let this = self.get_mut();
        match &mut this.writer {
            // The joined buffer becomes the write's own: joined once a write starts, not copied
            // again.
            Some(w) => w.poll_write_gathered(cx, join),
            None => Pin::new(&mut this.inner).poll_write(cx, &join()),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Ready once every byte written has left (a pending write finished).
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(w) = &mut self.writer {
            std::task::ready!(w.poll_idle(cx))?;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(w) = &mut self.writer {
            std::task::ready!(w.poll_idle(cx))?;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
