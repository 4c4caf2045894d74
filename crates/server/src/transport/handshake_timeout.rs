//! Closes connections that never start HTTP/2.
//!
//! Upstream Go clients open a throw-away pipe connection before dialling and never close it, and
//! hyper has no handshake timeout of its own, so without this each such connection would hold a
//! pipe instance (or socket) and a task until the client process exits. Like grpc-go's server
//! (120 s connection timeout), a connection that has not sent the 24-byte client preface within
//! [`HANDSHAKE_TIMEOUT`] is ended with a read error; after that, no timer is involved.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

/// How long a new connection may stay silent before it is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

/// Length of the HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;

/// A connection that fails its reads if the client preface does not arrive in time.
pub struct HandshakeTimeout<IO> {
    io: IO,
    /// Running until the preface has been read; `None` afterwards.
    timer: Option<Pin<Box<Sleep>>>,
    received: usize,
}

impl<IO> HandshakeTimeout<IO> {
    /// Wraps a freshly accepted connection with the default [`HANDSHAKE_TIMEOUT`].
    /// Must be called inside a tokio runtime.
    pub fn new(io: IO) -> Self {
        Self::with_timeout(io, HANDSHAKE_TIMEOUT)
    }

    /// Wraps a connection with a custom timeout.
    pub fn with_timeout(io: IO, timeout: Duration) -> Self {
        HandshakeTimeout {
            io,
            timer: Some(Box::pin(tokio::time::sleep(timeout))),
            received: 0,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for HandshakeTimeout<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if this.timer.is_some() {
                    this.received += buf.filled().len() - before;
                    if this.received >= PREFACE_LEN {
                        this.timer = None;
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending => match this.timer.as_mut().map(|t| t.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "client sent no HTTP/2 preface in time; closing the connection",
                ))),
                _ => Poll::Pending,
            },
        }
    }
}

write_through_wrapper!(HandshakeTimeout);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_after_the_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let mut conn = HandshakeTimeout::with_timeout(server, Duration::from_secs(5));
        let mut buf = [0u8; 8];
        let err = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_preface_no_timer_applies() {
        let (server, mut client) = tokio::io::duplex(64);
        let mut conn = HandshakeTimeout::with_timeout(server, Duration::from_secs(5));
        client
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 24];
        conn.read_exact(&mut buf).await.unwrap();
        // Idle far beyond the timeout, then more data still arrives.
        tokio::time::advance(Duration::from_secs(600)).await;
        client.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        conn.read_exact(&mut one).await.unwrap();
        assert_eq!(&one, b"x");
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_preface_does_not_stop_the_timer() {
        let (server, mut client) = tokio::io::duplex(64);
        let mut conn = HandshakeTimeout::with_timeout(server, Duration::from_secs(5));
        client.write_all(b"PRI * HTTP").await.unwrap();
        let mut buf = [0u8; 64];
        let n = conn.read(&mut buf).await.unwrap();
        assert_eq!(n, 10);
        let err = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
