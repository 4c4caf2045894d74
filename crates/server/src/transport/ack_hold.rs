//! Lets the frames of one answer, and a PING acknowledgement before it, leave in one write.
//!
//! Two kinds of write reach the socket ahead of the rest of an answer:
//!
//! * grpc-go clients (upstream's stubs, every CSI driver) send a PING with each response they
//!   receive, to estimate the connection's bandwidth-delay product, and it reaches the daemon
//!   before the next request. h2 answers a PING as soon as it has read it and flushes that
//!   acknowledgement before the request's handler runs.
//! * h2 keeps a DATA frame of 256 bytes or more apart from its write buffer and writes it out
//!   before it buffers the next frame, so an answer whose message is that large leaves as two
//!   writes: HEADERS and DATA, then the trailers.
//!
//! This wrapper keeps such a write (whole frames, either only PING acknowledgements and
//! WINDOW_UPDATEs, or ending in a DATA frame that does not end its stream) for at most [`HOLD`]
//! and puts it in front of the next write (normally microseconds later: the answer, or the
//! trailers), or writes it alone when nothing follows in time. Frames keep their order, so HTTP/2
//! sees the same bytes; only their timing changes, by less than [`HOLD`], which a client's
//! keepalive (seconds) never notices.
//!
//! The timer is kept armed across holds: moving a pending deadline later is one atomic store,
//! whereas arming a deadline earlier than every other makes tokio wake its I/O driver (a
//! `write` to its eventfd), which would cost the system call the hold saves.
//!
//! Memory: at most [`MAX_HELD`] bytes per connection, whatever the client sends. A write that
//! does not fit goes out at once, behind what is held; a hold never grows past one answer.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::time::{Instant, Sleep};

/// The longest a write waits for the one that follows it.
pub const HOLD: Duration = Duration::from_millis(5);

/// The most bytes held: a DATA frame of HTTP/2's initial maximum frame size (16 KiB, RFC 9113
/// §6.5.2) and the HEADERS and acknowledgements in front of it. Larger writes are not held.
pub const MAX_HELD: usize = 16 * 1024 + 1024;

/// The buffer capacity kept between holds; a larger one (after a large answer) is given back.
const KEPT_CAPACITY: usize = 1024;

/// The most slices one write is passed on with (h2 writes at most 64).
const MAX_SLICES: usize = 64;

/// HTTP/2 frame types and flags (RFC 9113 §6).
const DATA: u8 = 0x0;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;
const END_STREAM: u8 = 0x1;

/// A connection whose writes that an answer follows wait for it (see module docs).
pub struct AckHold<IO> {
    io: IO,
    held: Vec<u8>,
    /// Fires [`HOLD`] after the first held byte; created on the first hold and kept.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<IO> AckHold<IO> {
    /// Wraps a connection. Must be called inside a tokio runtime (the timer).
    pub fn new(io: IO) -> Self {
        AckHold {
            io,
            held: Vec::new(),
            timer: None,
        }
    }
}

/// The `N` bytes at offset `at` of the concatenation of `bufs`, if it has them.
fn bytes_at<const N: usize>(bufs: &[IoSlice<'_>], mut at: usize) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    let mut filled = 0;
    for b in bufs {
        if at >= b.len() {
            at -= b.len();
            continue;
        }
        let take = (b.len() - at).min(N - filled);
        out[filled..filled + take].copy_from_slice(&b[at..at + take]);
        filled += take;
        at = 0;
        if filled == N {
            return Some(out);
        }
    }
    None
}

/// Whether a write of `bufs` (`total` bytes) may wait for the next one: whole frames, either each
/// a PING acknowledgement or a WINDOW_UPDATE, or the last a DATA frame that does not end its
/// stream (the rest of that answer follows).
fn holdable(bufs: &[IoSlice<'_>], total: usize) -> bool {
    let mut at = 0;
    let mut only_acks = true;
    let mut open_data = false;
    while at < total {
        let Some(head) = bytes_at::<9>(bufs, at) else {
            return false;
        };
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        only_acks &= (kind == PING && flags & ACK != 0) || kind == WINDOW_UPDATE;
        open_data = kind == DATA && flags & END_STREAM == 0;
        at += 9 + len;
    }
    at == total && total > 0 && (only_acks || open_data)
}

impl<IO: AsyncWrite + Unpin> AckHold<IO> {
    /// Keeps `bufs` behind what is held, arming the timer if nothing was.
    fn hold(&mut self, bufs: &[IoSlice<'_>]) {
        if self.held.is_empty() {
            let deadline = Instant::now() + HOLD;
            match &mut self.timer {
                // Later than its pending deadline: moved without waking the driver.
                Some(t) => t.as_mut().reset(deadline),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        for b in bufs {
            self.held.extend_from_slice(b);
        }
    }

    /// Forgets the held bytes once written; the timer stays armed (see module docs).
    fn written(&mut self) {
        self.held.clear();
        if self.held.capacity() > KEPT_CAPACITY {
            self.held = Vec::new();
        }
    }

    /// Writes what is held, alone.
    fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n == self.held.len() {
                self.written();
            } else {
                self.held.drain(..n);
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Holds `bufs` or writes them behind what is held, in one call when the OS takes it all;
    /// answers how many bytes of `bufs` were taken.
    fn poll_write_behind(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total > 0 && self.held.len() + total <= MAX_HELD && holdable(bufs, total) {
            self.hold(bufs);
            return Poll::Ready(Ok(total));
        }
        if self.held.is_empty() {
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
        loop {
            let held = self.held.len();
            let mut all = [IoSlice::new(&[]); MAX_SLICES + 1];
            all[0] = IoSlice::new(&self.held);
            let n_slices = bufs.len().min(MAX_SLICES);
            all[1..=n_slices].copy_from_slice(&bufs[..n_slices]);
            let n = std::task::ready!(
                Pin::new(&mut self.io).poll_write_vectored(cx, &all[..=n_slices])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n < held {
                self.held.drain(..n);
                continue;
            }
            self.written();
            if n > held || total == 0 {
                return Poll::Ready(Ok(n - held));
            }
            // Only the held bytes went: write `bufs` as any write.
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for AckHold<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_behind(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_behind(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    /// h2 flushes after every write and whenever its connection task is woken with nothing to
    /// read, so the timer (registered here with that task's waker) gets held bytes out in time.
    /// A timer left armed after its bytes went wakes that task once, for nothing.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.held.is_empty()
            && let Some(timer) = &mut this.timer
            && timer.as_mut().poll(cx).is_ready()
        {
            std::task::ready!(this.poll_release(cx))?;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_release(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

read_through_wrapper!(AckHold);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    /// Records every write call it is given.
    #[derive(Clone, Default)]
    struct Calls(Arc<Mutex<Vec<Vec<u8>>>>);

    impl AsyncWrite for Calls {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.lock().unwrap().push(b.to_vec());
            Poll::Ready(Ok(b.len()))
        }
        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let n = all.len();
            self.0.lock().unwrap().push(all);
            Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn ping_ack() -> Vec<u8> {
        let mut f = vec![0, 0, 8, PING, ACK, 0, 0, 0, 0];
        f.extend_from_slice(b"12345678");
        f
    }

    /// HEADERS, DATA and trailers of an answer, as far as this wrapper cares.
    fn answer() -> Vec<u8> {
        vec![0, 0, 1, 0x1, 0x4, 0, 0, 0, 1, 0x88]
    }

    #[tokio::test(start_paused = true)]
    async fn an_acknowledgement_leaves_with_the_answer_in_one_write() {
        let calls = Calls::default();
        let mut io = AckHold::new(calls.clone());
        io.write_all(&ping_ack()).await.unwrap();
        io.flush().await.unwrap();
        assert!(calls.0.lock().unwrap().is_empty(), "held until the answer");
        io.write_all(&answer()).await.unwrap();
        io.flush().await.unwrap();
        let mut both = ping_ack();
        both.extend_from_slice(&answer());
        assert_eq!(*calls.0.lock().unwrap(), vec![both]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_acknowledgement_leaves_after_the_hold() {
        let calls = Calls::default();
        let mut io = AckHold::new(calls.clone());
        io.write_all(&ping_ack()).await.unwrap();
        io.flush().await.unwrap();
        assert!(calls.0.lock().unwrap().is_empty());
        // The connection task is woken by the timer and flushes.
        tokio::time::advance(HOLD).await;
        std::future::poll_fn(|cx| Pin::new(&mut io).poll_flush(cx))
            .await
            .unwrap();
        assert_eq!(*calls.0.lock().unwrap(), vec![ping_ack()]);
    }

    /// HEADERS and a DATA frame that does not end its stream (a large message, which h2 writes
    /// apart), then the trailers: one write. A DATA frame past [`MAX_HELD`] goes out at once.
    #[tokio::test(start_paused = true)]
    async fn a_large_message_waits_for_its_trailers_within_the_bound() {
        let calls = Calls::default();
        let mut io = AckHold::new(calls.clone());
        let data = |len: usize| {
            let mut f = vec![0, 0, 0, DATA, 0, 0, 0, 0, 1];
            f[..3].copy_from_slice(&u32::try_from(len).unwrap().to_be_bytes()[1..]);
            f.resize(9 + len, b'x');
            f
        };
        let headers = vec![0, 0, 1, 0x1, 0x4, 0, 0, 0, 1, 0x88];
        let trailers = vec![0, 0, 1, 0x1, 0x5, 0, 0, 0, 1, 0xbf];
        let mut first = headers.clone();
        first.extend(data(1000));
        io.write_all(&first).await.unwrap();
        io.flush().await.unwrap();
        assert!(
            calls.0.lock().unwrap().is_empty(),
            "held until the trailers"
        );
        io.write_all(&trailers).await.unwrap();
        let mut both = first.clone();
        both.extend_from_slice(&trailers);
        assert_eq!(*calls.0.lock().unwrap(), vec![both]);
        let large = data(MAX_HELD);
        io.write_all(&large).await.unwrap();
        assert_eq!(
            calls.0.lock().unwrap().last(),
            Some(&large),
            "too large to hold"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_frames_are_never_held() {
        let calls = Calls::default();
        let mut io = AckHold::new(calls.clone());
        // A PING that is not an acknowledgement, SETTINGS, and an answer.
        let mut ping = ping_ack();
        ping[4] = 0;
        for frame in [ping, vec![0, 0, 0, 0x4, 0, 0, 0, 0, 0], answer()] {
            io.write_all(&frame).await.unwrap();
            assert_eq!(calls.0.lock().unwrap().last(), Some(&frame));
        }
        let partial = &ping_ack()[..12];
        assert!(
            !holdable(&[IoSlice::new(partial)], partial.len()),
            "a partial frame is not held"
        );
    }
}
