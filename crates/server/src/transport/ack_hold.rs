//! Lets a PING acknowledgement leave with the answer that follows it, in one write.
//!
//! grpc-go clients (upstream's stubs, every CSI driver) send a PING with each response they
//! receive, to estimate the connection's bandwidth-delay product, and it reaches the daemon with
//! the next request. h2 answers a PING as soon as it has read it, and flushes that acknowledgement
//! before the request's handler runs: every call then costs two writes (the acknowledgement, then
//! the answer) where one would do. This wrapper keeps a write made only of PING
//! acknowledgements and WINDOW_UPDATE frames for at most [`HOLD`] and puts it in front of the
//! next write (the answer, normally microseconds later), or writes it alone when nothing follows
//! in time. Frames keep their order, so HTTP/2 sees the same bytes; only the acknowledgement's
//! timing changes, by less than [`HOLD`], which a client's keepalive (seconds) never notices.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::time::{Instant, Sleep};

/// The longest an acknowledgement waits for an answer to leave with.
pub const HOLD: Duration = Duration::from_millis(5);

/// The most bytes held (a few acknowledgements and window updates); more are written at once.
const MAX_HELD: usize = 128;

/// HTTP/2 frame types held (RFC 9113 §6): WINDOW_UPDATE, and PING with the ACK flag.
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;

/// A connection whose lone PING acknowledgements wait for the next write (see module docs).
pub struct AckHold<IO> {
    io: IO,
    held: Vec<u8>,
    /// When the held bytes must leave; armed while `held` is not empty.
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

/// Whether `bytes` is one or more whole frames, each a PING acknowledgement or a WINDOW_UPDATE.
fn only_acks(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(head) = rest.get(..9) else {
            return false;
        };
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let held = match head[3] {
            PING => head[4] & ACK != 0,
            WINDOW_UPDATE => true,
            _ => false,
        };
        if !held || rest.len() < 9 + len {
            return false;
        }
        rest = &rest[9 + len..];
    }
    true
}

impl<IO: AsyncWrite + Unpin> AckHold<IO> {
    /// Writes what is held, alone.
    fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        self.timer = None;
        Poll::Ready(Ok(()))
    }

    /// Writes `bufs` behind what is held, in one call when the OS takes it all; answers how many
    /// bytes of `bufs` were written.
    fn poll_write_behind(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if self.held.is_empty() {
            if total > 0 && total + self.held.len() <= MAX_HELD {
                let mut bytes = Vec::with_capacity(total);
                for b in bufs {
                    bytes.extend_from_slice(b);
                }
                if only_acks(&bytes) {
                    self.held = bytes;
                    let deadline = Instant::now() + HOLD;
                    match &mut self.timer {
                        Some(t) => t.as_mut().reset(deadline),
                        None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                    return Poll::Ready(Ok(total));
                }
            }
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
        loop {
            let held = self.held.len();
            let mut all = Vec::with_capacity(bufs.len() + 1);
            all.push(IoSlice::new(&self.held));
            all.extend(bufs.iter().map(|b| IoSlice::new(b)));
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &all))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n < held {
                self.held.drain(..n);
                continue;
            }
            self.held.clear();
            self.timer = None;
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
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(timer) = &mut this.timer
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
        assert!(!only_acks(&ping_ack()[..12]), "a partial frame is not held");
    }
}
