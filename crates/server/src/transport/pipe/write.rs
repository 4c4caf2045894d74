//! The pipe's own write path: each write is an overlapped `WriteFile` whose completion skips the
//! completion port (see [`Event::tagged`]).
//!
//! Why: tokio's pipe writes go through mio, whose write completes through the completion port
//! even when `WriteFile` finished at once (as it does whenever the pipe's buffer has room, which
//! is nearly always for an answer); the runtime then has to drain that packet and act on it, a few
//! kernel transitions per answer (under wine: `remove_completion`, `select` and friends). Here a
//! write that finishes at once is simply done. One that does not (the client is not reading and
//! the pipe's buffer is full) keeps its buffer and OVERLAPPED in a box until the system signals the
//! connection's event; a thread-pool wait (not a runtime worker) wakes the task then, and the next
//! write, flush or shutdown waits for it first, so bytes leave in order and none is lost. Reads
//! stay with mio.

use std::ffi::c_void;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use windows::Win32::Foundation::HANDLE;
use windows::Win32::System::IO::OVERLAPPED;

use super::win32::{self, Event, ThreadPoolWait};

/// The most bytes one write takes (and copies); hyper hands over the rest in the next write.
pub(super) const WRITE_LIMIT: usize = 256 * 1024;

/// One write's OVERLAPPED and bytes, which must not move or be freed while it is pending.
struct Op {
    ov: OVERLAPPED,
    buf: Vec<u8>,
}

/// A write the system has not finished yet, and the wait that wakes the task when it does.
struct Pending {
    op: Box<Op>,
    wait: ThreadPoolWait,
}

/// The waker of the task that waits for a pending write.
#[derive(Default)]
struct WakeSlot(Mutex<Option<Waker>>);

/// Called on a thread-pool thread once the connection's event is signalled.
unsafe extern "system" fn wake_waiter(context: *mut c_void, _timed_out: bool) {
    // SAFETY: `context` is the `WakeSlot` of a `Writer`, which outlives every registered wait
    // (the wait is unregistered, waiting for this callback, before the slot can go).
    let slot = unsafe { &*(context as *const WakeSlot) };
    let waker = slot.0.lock().ok().and_then(|mut w| w.take());
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// The write side of one connection.
pub(super) struct Writer {
    /// The pipe instance's handle; the `NamedPipeServer` owning it outlives this writer.
    pipe: HANDLE,
    event: Event,
    pending: Option<Pending>,
    wake: Arc<WakeSlot>,
}

// SAFETY: the raw pipe handle and OVERLAPPED pointers are used from whichever thread polls the
// connection; Windows handles and overlapped operations are not tied to a thread.
unsafe impl Send for Writer {}
// SAFETY: `&Writer` offers nothing.
unsafe impl Sync for Writer {}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("pending", &self.pending.as_ref().map(|p| p.op.buf.len()))
            .finish()
    }
}

impl Writer {
    /// A writer for `pipe`, a handle opened for overlapped I/O that stays open while the writer
    /// lives.
    pub(super) fn new(pipe: HANDLE) -> io::Result<Writer> {
        Ok(Writer {
            pipe,
            event: Event::new()?,
            pending: None,
            wake: Arc::default(),
        })
    }

    /// Writes up to [`WRITE_LIMIT`] bytes of `buf`, after any write still pending. Bytes of a
    /// write that goes pending count as written (they are in our buffer and leave in order).
    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_gathered(cx, || buf[..buf.len().min(WRITE_LIMIT)].to_vec())
    }

    /// As [`Writer::poll_write`] for the bytes `gather` returns (at most [`WRITE_LIMIT`]),
    /// called only once no write is pending: its buffer becomes the write's own, uncopied.
    pub(super) fn poll_write_gathered(
        &mut self,
        cx: &mut Context<'_>,
        gather: impl FnOnce() -> Vec<u8>,
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = std::task::ready!(self.poll_idle(cx)) {
            return Poll::Ready(Err(e));
        }
        let buf = gather();
        debug_assert!(buf.len() <= WRITE_LIMIT);
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let len = buf.len();
        let op = self.op(buf);
        Poll::Ready(self.start(op).map(|()| len))
    }

    /// Ready once no write is pending (with the error of the last one, if it failed).
    pub(super) fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Some(pending) = &self.pending else {
                return Poll::Ready(Ok(()));
            };
            // The waker first, then the check: a completion after the check finds the waker.
            if let Ok(mut w) = self.wake.0.lock() {
                *w = Some(cx.waker().clone());
            }
            // SAFETY: `ov` belongs to an operation started on `self.pipe`.
            let done = unsafe { win32::overlapped_result(self.pipe, &pending.op.ov) };
            let Some(Pending { op, wait }) = (match done {
                Ok(None) => return Poll::Pending,
                _ => self.pending.take(),
            }) else {
                unreachable!("pending was just seen");
            };
            drop(wait);
            let n = done?.unwrap_or(0) as usize;
            self.rest(op, n)?;
        }
    }

    fn op(&self, buf: Vec<u8>) -> Box<Op> {
        let ov = OVERLAPPED {
            hEvent: self.event.tagged(),
            ..OVERLAPPED::default()
        };
        Box::new(Op { ov, buf })
    }

    /// Starts the write of `op`; on return it either finished or is in `self.pending`.
    fn start(&mut self, mut op: Box<Op>) -> io::Result<()> {
        let ov: *mut OVERLAPPED = &mut op.ov;
        // SAFETY: `op` is boxed: its OVERLAPPED and buffer stay put until the operation is seen
        // complete (here, in `poll_idle`, or in `Drop`).
        let finished = unsafe { win32::write(self.pipe, &op.buf, ov) }?;
        let result = if finished {
            // SAFETY: as above.
            unsafe { win32::overlapped_result(self.pipe, &op.ov) }?
        } else {
            None
        };
        match result {
            Some(n) => self.rest(op, n as usize),
            None => {
                let context = Arc::as_ptr(&self.wake).cast::<c_void>();
                // SAFETY: the slot lives in `self.wake` for as long as `self`, and the wait is
                // unregistered (waiting for a running callback) before `self` goes.
                match unsafe { ThreadPoolWait::register(&self.event, wake_waiter, context) } {
                    Ok(wait) => {
                        self.pending = Some(Pending { op, wait });
                        Ok(())
                    }
                    Err(e) => {
                        self.abandon(op);
                        Err(e)
                    }
                }
            }
        }
    }

    /// After `n` bytes of `op` went out: done, or the rest written on.
    fn rest(&mut self, mut op: Box<Op>, n: usize) -> io::Result<()> {
        if n >= op.buf.len() {
            return Ok(());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the pipe took none of the bytes written",
            ));
        }
        // A byte-mode pipe finishes a write only when all of it is in; this is for safety.
        let rest = op.buf.split_off(n);
        drop(op);
        let op = self.op(rest);
        self.start(op)
    }

    /// Ends a started operation and waits for it, so its memory can be freed.
    fn abandon(&mut self, op: Box<Op>) {
        // SAFETY: `ov` belongs to an operation started on `self.pipe`.
        unsafe { win32::cancel(self.pipe, &op.ov) };
        match self.event.wait() {
            Ok(()) => drop(op),
            // Never free memory the system may still write to.
            Err(_) => std::mem::forget(op),
        }
    }
}

impl Drop for Writer {
    /// A write still pending (a client that stopped reading) is cancelled and waited for: the
    /// connection is going away, and its memory must outlive the operation.
    fn drop(&mut self) {
        if let Some(Pending { op, wait }) = self.pending.take() {
            drop(wait);
            self.abandon(op);
        }
    }
}
