//! Bounded probes of things that may block for long (opening a share root on a dead SMB
//! server): each runs on a thread of its own so its caller can stop waiting, but one key never
//! has more than one probe running, and the probes running at once are capped. A caller whose
//! key already has a probe in flight waits for that one instead of starting another, so a dead
//! server polled every few seconds holds one thread, not one per call.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// `now + limit`, or the current call's deadline when that comes first.
pub fn until(limit: std::time::Duration) -> Instant {
    let by_limit = Instant::now() + limit;
    csi_proxy_core::deadline::current().map_or(by_limit, |d| d.min(by_limit))
}

/// One probe in flight: its answer once it has one.
struct Slot<T> {
    answer: Mutex<Option<T>>,
    done: Condvar,
}

/// The probes in flight, by key, and the cap on them; a probe answers a `T`.
pub struct Probes<T> {
    max: usize,
    inflight: Mutex<HashMap<String, Arc<Slot<T>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a probe panicked while holding it; the data is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Clone + Send + 'static> Probes<T> {
    /// At most `max` probes running at once.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            inflight: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `probe` for `key` on a thread of its own, or joins the one already running for it,
    /// and waits for its answer until `until`. No answer by then, or no room for another probe
    /// (`max` are stuck), is `None`: the thing does not answer.
    pub fn answers(
        self: &Arc<Self>,
        key: &str,
        until: Instant,
        probe: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let slot = {
            let mut inflight = lock(&self.inflight);
            if let Some(slot) = inflight.get(key) {
                slot.clone()
            } else {
                if inflight.len() >= self.max {
                    tracing::warn!(key, "{} probes are stuck; not starting another", self.max);
                    return None;
                }
                let slot = Arc::new(Slot {
                    answer: Mutex::new(None),
                    done: Condvar::new(),
                });
                let (probes, owned, theirs) = (self.clone(), key.to_string(), slot.clone());
                let started = std::thread::Builder::new()
                    .name("csi-proxy-probe".into())
                    .spawn(move || {
                        let answer = probe();
                        // Gone from the map first, so a later caller starts a fresh probe.
                        lock(&probes.inflight).remove(&owned);
                        *lock(&theirs.answer) = Some(answer);
                        theirs.done.notify_all();
                    });
                if started.is_err() {
                    return None;
                }
                inflight.insert(key.to_string(), slot.clone());
                slot
            }
        };
        let mut answer = lock(&slot.answer);
        loop {
            if let Some(a) = answer.as_ref() {
                return Some(a.clone());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            answer = slot
                .done
                .wait_timeout(answer, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// How many probes are running.
    pub fn running(&self) -> usize {
        lock(&self.inflight).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::{Receiver, channel};
    use std::time::Duration;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    /// `count` once it reaches `n` (or after 5 s): a probe's thread may start after its caller
    /// gave up, so its count is read once it had the time to.
    fn reached(count: &AtomicUsize, n: usize) -> usize {
        let end = soon(5_000);
        while count.load(Ordering::SeqCst) < n && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        count.load(Ordering::SeqCst)
    }

    #[test]
    fn a_stuck_probe_is_shared_and_the_number_running_is_capped() {
        let probes = Arc::new(Probes::new(2));
        let started = Arc::new(AtomicUsize::new(0));
        let (release, wait) = channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        let stuck = |started: &Arc<AtomicUsize>, wait: &Arc<Mutex<Receiver<()>>>| {
            let (started, wait) = (started.clone(), wait.clone());
            move || {
                started.fetch_add(1, Ordering::SeqCst);
                let _ = lock(&wait).recv();
                true
            }
        };
        // A dead server polled 50 times: every call gives up at its limit, one thread runs.
        for _ in 0..50 {
            assert_eq!(
                probes.answers("dead", soon(5), stuck(&started, &wait)),
                None
            );
        }
        assert_eq!(reached(&started, 1), 1);
        assert_eq!(probes.running(), 1);
        // A second dead server takes the last place; a third is not probed at all.
        assert_eq!(
            probes.answers("dead2", soon(5), stuck(&started, &wait)),
            None
        );
        assert_eq!(probes.answers("alive", soon(1_000), || true), None);
        assert_eq!(reached(&started, 2), 2);
        // The servers answer again: the stuck probes end and free their places.
        release.send(()).unwrap();
        release.send(()).unwrap();
        let end = soon(5_000);
        while probes.running() > 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(probes.running(), 0);
        assert_eq!(probes.answers("alive", soon(5_000), || true), Some(true));
        assert_eq!(probes.answers("gone", soon(5_000), || false), Some(false));
    }

    #[test]
    fn a_caller_joining_a_running_probe_gets_its_answer() {
        let probes = Arc::new(Probes::new(4));
        let (release, wait) = channel::<()>();
        let p = probes.clone();
        let first = std::thread::spawn(move || {
            p.answers("slow", soon(5_000), move || {
                let _ = wait.recv();
                true
            })
        });
        while probes.running() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let p = probes.clone();
        let second =
            std::thread::spawn(move || p.answers("slow", soon(5_000), || unreachable!("joined")));
        std::thread::sleep(Duration::from_millis(20));
        release.send(()).unwrap();
        assert_eq!(first.join().unwrap(), Some(true));
        assert_eq!(second.join().unwrap(), Some(true));
    }
}
