//! A small pool of threads, each with its own state, for calls that may block for long: the
//! WMI calls of one namespace (each thread holds its own `!Send` connection). A call stuck on a
//! dead SMB server holds one thread, not every call of its namespace, and a call whose caller
//! stopped waiting before a thread took it is never started (a Create that would re-create a
//! mapping after its NodeUnstage).
//!
//! The real daemon keeps its pools for its whole life (a static); a pool that is dropped (each
//! simulated Windows machine has its own) closes: its idle threads end at once, a busy one
//! when its call ends, so a test making thousands of machines does not pile up threads.

use super::{OsError, Win32Result};
use csi_proxy_core::{Error, Kind, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A unit of work, given the running thread's state.
type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// `max_queue` calls are already waiting.
    Full,
    /// The wait ended (the caller's deadline or the pool's limit); the call, if it started,
    /// may still complete.
    TimedOut,
    /// A thread could not be started, or ended without answering.
    Failed(String),
}

struct Queue<S> {
    jobs: VecDeque<Job<S>>,
    threads: usize,
    idle: usize,
    /// The pool's last handle is gone: no call will come, threads end once the queue is empty.
    closed: bool,
}

struct Inner<S> {
    name: &'static str,
    max_threads: usize,
    max_queue: usize,
    init: fn() -> S,
    queue: Mutex<Queue<S>>,
    ready: Condvar,
    /// Bumped by [`Pool::reset`]: each thread makes its state anew before its next job.
    generation: AtomicU64,
}

/// A pool of up to `max_threads` threads, started as calls need them, each holding a state
/// made by `init` on that thread. Dropping it ends its threads (see the module's comment);
/// share it behind an `Arc` so a caller's call holds it open until answered.
pub struct Pool<S: 'static> {
    inner: Arc<Inner<S>>,
}

impl<S: 'static> Pool<S> {
    /// A pool whose threads are named `name`.
    pub fn new(name: &'static str, max_threads: usize, max_queue: usize, init: fn() -> S) -> Self {
        Self {
            inner: Arc::new(Inner {
                name,
                max_threads: max_threads.max(1),
                max_queue,
                init,
                queue: Mutex::new(Queue {
                    jobs: VecDeque::new(),
                    threads: 0,
                    idle: 0,
                    closed: false,
                }),
                ready: Condvar::new(),
                generation: AtomicU64::new(0),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<S>> {
        self.inner.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on a pool thread and waits for its answer until `until`. When the wait ends
    /// first, a call no thread has taken yet is dropped, never started.
    pub fn call<R: Send + 'static>(
        &self,
        until: Instant,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, CallError> {
        let (tx, rx) = sync_channel::<R>(1);
        let gone = Arc::new(AtomicBool::new(false));
        let gone_job = gone.clone();
        let job: Job<S> = Box::new(move |state| {
            // The caller stopped waiting before this call was taken: not started at all.
            if gone_job.load(Ordering::SeqCst) || Instant::now() >= until {
                return;
            }
            let _ = tx.send(f(state));
        });
        self.submit(job)?;
        let wait = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(r) => Ok(r),
            Err(RecvTimeoutError::Timeout) => {
                gone.store(true, Ordering::SeqCst);
                Err(CallError::TimedOut)
            }
            Err(RecvTimeoutError::Disconnected) if Instant::now() >= until => {
                Err(CallError::TimedOut)
            }
            Err(RecvTimeoutError::Disconnected) => Err(CallError::Failed(
                "the call's thread ended without answering".into(),
            )),
        }
    }

    /// Makes every thread make its state anew (`init`) before its next call.
    pub fn reset(&self) {
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn submit(&self, job: Job<S>) -> Result<(), CallError> {
        let mut q = self.lock();
        if q.jobs.len() >= self.inner.max_queue {
            return Err(CallError::Full);
        }
        q.jobs.push_back(job);
        // Every thread busy (one may be stuck on a dead server): start another, up to the
        // limit; past it the call waits for the first thread that frees up.
        if q.idle < q.jobs.len() && q.threads < self.inner.max_threads {
            let inner = self.inner.clone();
            std::thread::Builder::new()
                .name(self.inner.name.into())
                .spawn(move || serve(&inner))
                .map_err(|e| CallError::Failed(format!("starting a thread: {e}")))?;
            q.threads += 1;
        }
        drop(q);
        self.inner.ready.notify_one();
        Ok(())
    }

    /// How many threads the pool has started.
    pub fn threads(&self) -> usize {
        self.lock().threads
    }
}

impl<S: 'static> Drop for Pool<S> {
    /// Closes the pool: idle threads wake and end now, busy ones after their call. No caller
    /// waits on a queued call any more (each borrows the pool while it waits), so those left
    /// are abandoned ones, which a thread drops without starting.
    fn drop(&mut self) {
        self.lock().closed = true;
        self.inner.ready.notify_all();
    }
}

/// How long a pool thread waits for a call before it ends.
const IDLE_LIMIT: Duration = Duration::from_secs(60);

/// A pool thread: takes calls until it has been idle for [`IDLE_LIMIT`] or the pool is closed
/// and has no call left, its state made on this thread.
fn serve<S>(inner: &Inner<S>) {
    let mut state = (inner.init)();
    let mut seen = inner.generation.load(Ordering::SeqCst);
    loop {
        let job = {
            let mut q = inner.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.idle += 1;
            let mut idle_long = false;
            loop {
                if let Some(job) = q.jobs.pop_front() {
                    q.idle -= 1;
                    break job;
                }
                // Idle for long, or no call can come any more: the thread (and its
                // connection) goes; a later call of an open pool starts another.
                if idle_long || q.closed {
                    q.idle -= 1;
                    q.threads -= 1;
                    return;
                }
                let (guard, waited) = inner
                    .ready
                    .wait_timeout(q, IDLE_LIMIT)
                    .unwrap_or_else(|p| p.into_inner());
                q = guard;
                idle_long = waited.timed_out();
            }
        };
        let now = inner.generation.load(Ordering::SeqCst);
        if now != seen {
            state = (inner.init)();
            seen = now;
        }
        // A panicking call does not end the thread; its state may be mid-call, so it is made
        // anew.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut state))).is_err() {
            state = (inner.init)();
        }
    }
}

/// How many calls may wait for a namespace's threads; more are refused as UNAVAILABLE.
const QUEUE_DEPTH: usize = 64;

/// How many threads (and connections) a namespace may have: a call stuck on a dead SMB server
/// (or a provider that hangs) holds one of them, and the others keep serving.
const THREADS_PER_NAMESPACE: usize = 4;

/// How long a caller waits for a WMI call (less when its own deadline comes first): a quick
/// format of a large volume takes seconds, an SMB mapping to a server that does not answer can
/// take minutes. A call already running is not cancelled (WMI has no way to), but its caller is
/// answered; a call not yet started when its caller stops waiting is dropped.
pub const CALL_LIMIT: Duration = Duration::from_secs(120);

/// One [`Pool`] per WMI namespace, each thread holding its own state `S` (its connection): a
/// namespace that hangs holds its own threads only. Used by the real WMI layer (a static, kept
/// for the daemon's life) and, with the same limits and answers, by the simulated Windows
/// (one per machine: dropping it closes its pools once their last calls are answered).
pub struct Namespaces<S: 'static> {
    init: fn() -> S,
    pools: Mutex<HashMap<&'static str, Arc<Pool<S>>>>,
}

impl<S: 'static> Namespaces<S> {
    /// No pool yet; each namespace's is made on first use, its threads' states by `init`.
    pub fn new(init: fn() -> S) -> Self {
        Self {
            init,
            pools: Mutex::new(HashMap::new()),
        }
    }

    fn pool(&self, namespace: &'static str) -> Arc<Pool<S>> {
        // A poisoned lock only means another caller panicked while holding it; the map is
        // still consistent.
        self.pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(namespace)
            .or_insert_with(|| {
                Arc::new(Pool::new(
                    "csi-proxy-wmi",
                    THREADS_PER_NAMESPACE,
                    QUEUE_DEPTH,
                    self.init,
                ))
            })
            .clone()
    }

    /// Runs `f` on a thread of `namespace`'s pool and waits until [`CALL_LIMIT`] or the
    /// caller's deadline; `op` names the operation in errors.
    pub fn call<R: Send + 'static>(
        &self,
        op: &'static str,
        namespace: &'static str,
        f: impl FnOnce(&mut S) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let object = || format!("WMI namespace {namespace}");
        match self.pool(namespace).call(until(CALL_LIMIT), f) {
            Ok(r) => r,
            Err(CallError::Full) => Err(Error::new(
                Kind::Unavailable,
                op,
                object(),
                format!("{QUEUE_DEPTH} WMI calls are already waiting; try again later"),
            )),
            Err(CallError::TimedOut) => Err(Error::new(
                Kind::Unavailable,
                op,
                object(),
                format!(
                    "WMI did not answer before the caller's deadline or within {} s; a call already started may still complete, one not started was dropped",
                    CALL_LIMIT.as_secs()
                ),
            )),
            Err(CallError::Failed(why)) => Err(Error::new(Kind::Internal, op, object(), why)),
        }
    }

    /// [`Self::call`] for the Win32 seam: `f`'s errors stay [`OsError`]s, and a failure to
    /// reach a thread becomes one whose code keeps its kind readable.
    pub fn run_in<R: Send + 'static>(
        &self,
        namespace: &'static str,
        f: impl FnOnce(&mut S) -> Win32Result<R> + Send + 'static,
    ) -> Win32Result<R> {
        self.call("WMI", namespace, move |s| Ok(f(s)))
            .unwrap_or_else(|e| Err(as_os_error(&e)))
    }

    /// Makes every thread of every namespace make its state anew before its next call.
    pub fn reset(&self) {
        for pool in self
            .pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            pool.reset();
        }
    }
}

/// A failure to reach a WMI thread (or to connect) as an [`OsError`] whose code keeps its
/// kind readable.
pub fn as_os_error(e: &Error) -> OsError {
    // Not RPC_E_DISCONNECTED for a call that outlived its wait: that would make the caller
    // reconnect every thread and call again, waiting twice.
    let code = match e.kind() {
        Kind::Unavailable => 0x8001_011F, // RPC_E_TIMEOUT
        Kind::PermissionDenied => 0x8007_0005,
        Kind::NotFound => 0x8004_1002,
        _ => 0x8000_FFFF,
    };
    OsError::with_message(code, e.message())
}

pub use crate::probe::until;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn a_stuck_call_holds_one_thread_not_the_others() {
        let pool: Arc<Pool<()>> = Arc::new(Pool::new("test-pool", 4, 16, || ()));
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let stuck = Arc::new(Mutex::new(stuck));
        // A call to a dead server: blocks until released.
        let held = stuck.clone();
        let t = std::thread::spawn({
            let pool = pool.clone();
            move || {
                pool.call(soon(5_000), move |_| {
                    let _ = held.lock().unwrap().recv();
                })
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        // Another call of the same pool answers at once.
        assert_eq!(pool.call(soon(1_000), |_| 7), Ok(7));
        assert_eq!(pool.threads(), 2);
        release.send(()).unwrap();
        t.join().unwrap().unwrap();
    }

    #[test]
    fn a_call_whose_caller_gave_up_is_never_started() {
        let pool: Arc<Pool<()>> = Arc::new(Pool::new("test-pool", 1, 16, || ()));
        let ran = Arc::new(AtomicUsize::new(0));
        // The one thread is busy for 200 ms.
        let busy = std::thread::spawn({
            let pool = pool.clone();
            move || {
                pool.call(soon(5_000), |_| {
                    std::thread::sleep(Duration::from_millis(200))
                })
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        let r = ran.clone();
        let answer = pool.call(soon(50), move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(answer, Err(CallError::TimedOut));
        busy.join().unwrap().unwrap();
        // The thread is free again; the abandoned call was dropped, not run.
        assert_eq!(pool.call(soon(1_000), |_| 1), Ok(1));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn reset_makes_each_state_anew_and_a_panic_does_not_end_the_thread() {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        fn init() -> usize {
            MADE.fetch_add(1, Ordering::SeqCst)
        }
        let pool: Pool<usize> = Pool::new("test-pool", 1, 16, init);
        let first = pool.call(soon(1_000), |s| *s).unwrap();
        assert_eq!(pool.call(soon(1_000), |s| *s).unwrap(), first);
        pool.reset();
        assert_ne!(pool.call(soon(1_000), |s| *s).unwrap(), first);
        let e = pool.call(soon(1_000), |_| -> usize { panic!("boom") });
        assert!(matches!(e, Err(CallError::Failed(_))), "{e:?}");
        assert!(pool.call(soon(1_000), |s| *s).is_ok());
    }

    /// Waits (up to 10 s) until no thread of the pool is left: each holds its `Inner`.
    fn threads_end<S>(inner: std::sync::Weak<Inner<S>>) -> bool {
        let give_up = soon(10_000);
        while inner.strong_count() > 0 {
            if Instant::now() > give_up {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn a_dropped_pool_ends_its_idle_threads_at_once() {
        let pool: Arc<Pool<()>> = Arc::new(Pool::new("test-pool", 4, 16, || ()));
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        // One call held while another runs: two threads, both idle once the first returns.
        let held = std::thread::spawn({
            let pool = pool.clone();
            move || {
                pool.call(soon(5_000), move |_| {
                    started.send(()).unwrap();
                    stuck.recv().is_ok()
                })
            }
        });
        running.recv().unwrap();
        assert_eq!(pool.call(soon(1_000), |_| 7), Ok(7));
        release.send(()).unwrap();
        assert_eq!(held.join().unwrap(), Ok(true));
        assert_eq!(pool.threads(), 2);
        let inner = Arc::downgrade(&pool.inner);
        drop(pool);
        // Long before IDLE_LIMIT: the threads woke up to the pool's closing.
        assert!(
            threads_end(inner),
            "the dropped pool's idle threads did not end"
        );
    }

    #[test]
    fn a_call_in_flight_when_the_pool_is_dropped_gets_its_answer_then_its_thread_ends() {
        let pool: Arc<Pool<()>> = Arc::new(Pool::new("test-pool", 1, 16, || ()));
        let inner = Arc::downgrade(&pool.inner);
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        // The caller holds its own handle while it waits, as `Namespaces::call` does.
        let caller = std::thread::spawn({
            let pool = pool.clone();
            move || {
                pool.call(soon(5_000), move |_| {
                    started.send(()).unwrap();
                    stuck.recv().map(|()| "answered")
                })
            }
        });
        running.recv().unwrap();
        drop(pool);
        release.send(()).unwrap();
        assert_eq!(caller.join().unwrap(), Ok(Ok("answered")));
        assert!(threads_end(inner), "the dropped pool's thread did not end");
    }

    #[test]
    fn a_busy_thread_of_a_dropped_pool_ends_when_its_call_ends() {
        let pool: Pool<()> = Pool::new("test-pool", 1, 16, || ());
        let inner = Arc::downgrade(&pool.inner);
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        // A call its caller stopped waiting for, still running (WMI cannot cancel it).
        let answer = pool.call(soon(1_000), move |_| {
            started.send(()).unwrap();
            let _ = stuck.recv();
        });
        assert_eq!(answer, Err(CallError::TimedOut));
        running.recv().unwrap();
        drop(pool);
        // The thread is still in its call, which holds it...
        assert_eq!(inner.strong_count(), 1);
        release.send(()).unwrap();
        // ...and ends with it.
        assert!(
            threads_end(inner),
            "the dropped pool's busy thread did not end"
        );
    }

    #[test]
    fn dropped_namespaces_end_their_pools_threads() {
        let ns: Namespaces<()> = Namespaces::new(|| ());
        assert_eq!(ns.run_in("a", |_| Ok(1)), Ok(1));
        assert_eq!(ns.run_in("b", |_| Ok(2)), Ok(2));
        let (a, b) = (
            Arc::downgrade(&ns.pool("a").inner),
            Arc::downgrade(&ns.pool("b").inner),
        );
        drop(ns);
        assert!(
            threads_end(a) && threads_end(b),
            "a namespace's thread did not end"
        );
    }
}
