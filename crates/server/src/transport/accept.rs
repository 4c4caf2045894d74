//! Failed accepts pause the endpoint instead of spinning.
//!
//! tonic's server skips an accept error and asks for the next connection at once. When the
//! error is "too many open files", the pending connection stays queued and the next accept fails
//! the same way, so the endpoint would spin on a core while doing nothing. This stream swallows
//! accept errors, logs the first of a run, and waits before the next accept: 5 ms doubling up to
//! 1 s, as Go's HTTP server does, reset by the next successful accept.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;
use tokio_stream::Stream;

const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_secs(1);

pin_project_lite::pin_project! {
    /// Wraps a stream of accepted connections; see the module documentation.
    pub struct AcceptBackoff<S> {
        #[pin]
        inner: S,
        #[pin]
        pause: Option<Sleep>,
        next_pause: Duration,
        endpoint: String,
    }
}

impl<S> AcceptBackoff<S> {
    /// Wraps `inner`, the accept stream of `endpoint` (named in log lines).
    pub fn new(inner: S, endpoint: String) -> Self {
        AcceptBackoff {
            inner,
            pause: None,
            next_pause: Duration::ZERO,
            endpoint,
        }
    }
}

impl<S, C> Stream for AcceptBackoff<S>
where
    S: Stream<Item = io::Result<C>>,
{
    type Item = io::Result<C>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if let Some(pause) = this.pause.as_mut().as_pin_mut() {
                ready!(pause.poll(cx));
                this.pause.set(None);
            }
            match ready!(this.inner.as_mut().poll_next(cx)) {
                Some(Ok(conn)) => {
                    if !this.next_pause.is_zero() {
                        tracing::info!(endpoint = %this.endpoint, "accepting connections again");
                    }
                    *this.next_pause = Duration::ZERO;
                    return Poll::Ready(Some(Ok(conn)));
                }
                Some(Err(e)) => {
                    let pause = if this.next_pause.is_zero() {
                        tracing::warn!(
                            endpoint = %this.endpoint,
                            "cannot accept a connection: {e}; pausing accepts until it works again"
                        );
                        FIRST_PAUSE
                    } else {
                        tracing::debug!(endpoint = %this.endpoint, "accept failed again: {e}");
                        *this.next_pause
                    };
                    *this.next_pause = (pause * 2).min(MAX_PAUSE);
                    this.pause.set(Some(tokio::time::sleep(pause)));
                }
                None => return Poll::Ready(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio_stream::StreamExt;

    /// A listener whose accept fails `failures` times, then yields connection 7.
    fn failing(
        failures: usize,
        polls: Arc<AtomicUsize>,
    ) -> impl Stream<Item = io::Result<u32>> + Unpin {
        let mut left = failures;
        tokio_stream::iter(std::iter::from_fn(move || {
            polls.fetch_add(1, Ordering::Relaxed);
            Some(if left > 0 {
                left -= 1;
                Err(io::Error::from_raw_os_error(24)) // EMFILE
            } else {
                Ok(7)
            })
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn failed_accepts_pause_with_growing_waits_and_a_success_resets_them() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut s = std::pin::pin!(AcceptBackoff::new(
            failing(12, polls.clone()),
            "test".into()
        ));
        let t0 = tokio::time::Instant::now();
        assert_eq!(s.next().await.unwrap().unwrap(), 7);
        // 5+10+20+...+640 ms, then 1 s for the remaining failures: no spinning.
        let waited = t0.elapsed();
        let expected: Duration = (0..12)
            .map(|i| (FIRST_PAUSE * 2u32.pow(i)).min(MAX_PAUSE))
            .sum();
        assert_eq!(waited, expected);
        assert_eq!(polls.load(Ordering::Relaxed), 13);
        // After a success the next error waits only the first pause again.
        let mut s = std::pin::pin!(AcceptBackoff::new(
            failing(1, Arc::default()),
            "test".into()
        ));
        let t1 = tokio::time::Instant::now();
        assert_eq!(s.next().await.unwrap().unwrap(), 7);
        assert_eq!(t1.elapsed(), FIRST_PAUSE);
    }
}
