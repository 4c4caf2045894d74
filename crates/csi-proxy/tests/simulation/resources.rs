//! The invariant "the daemon's memory and thread count stay bounded": this test binary counts
//! its live heap (a counting allocator over the system's) and its threads (`/proc/self/task`).
//! Around each seed: once its worlds are dropped, the heap and the daemon's threads are back
//! where they were before it, and while it ran the heap stayed under a fixed ceiling.
//!
//! The counts are the whole process's, so the simulation tests run one at a time, and the
//! test harness's own threads (which come and go as tests start and end) are left out: each
//! test names its thread with [`harness_thread`].
#![allow(unsafe_code, reason = "a global allocator is an unsafe trait")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How far the live heap may stay above its level before a seed once the seed is over: room
/// for what the process makes once and keeps (lazily made statics, the harness's bookkeeping
/// when another test starts), far below what a seed's run holds (see [`PEAK_LIMIT`]). Measured:
/// a seed leaves it within 100 bytes, 10 KiB when the harness starts a test meanwhile.
const HEAP_SLACK: usize = 64 << 10;
/// The most a seed's run may hold live above the level before it. A run of 3 drivers and 40
/// steps over both worlds peaks at 2.3 to 3.2 MiB (500 seeds measured, median 2.7 MiB); 8 MiB
/// leaves room for any seed's draw, while a run that keeps what it should drop (every daemon
/// it restarts, a buffer per call) goes past it.
const PEAK_LIMIT: usize = 8 << 20;
/// How long threads that were told to end (a dropped machine's WMI pools) get to be gone.
const REAP_WAIT: Duration = Duration::from_secs(10);

/// Counts the bytes live and the most live since [`Watch::start`].
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    LIVE.fetch_sub(by, Ordering::Relaxed);
}

// SAFETY: every call goes to `System` unchanged; the counting only reads the layouts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract, which `System.alloc` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and the caller keeps `realloc`'s contract on `new_size`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static HEAP: Counting = Counting;

/// The harness's threads: the tests' own, left out of the daemon's thread count.
static HARNESS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The calling thread's id, from `/proc/thread-self` (`<pid>/task/<tid>`).
fn tid() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// Marks the calling thread as the test harness's, not the daemon's.
pub fn harness_thread() {
    if let Some(t) = tid() {
        HARNESS.lock().unwrap_or_else(|p| p.into_inner()).push(t);
    }
}

/// The process's threads other than the harness's (its main thread and the tests'), or
/// `None` where there is no `/proc`.
fn threads() -> Option<usize> {
    let harness = HARNESS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let main = std::process::id();
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|t| *t != main && !harness.contains(t))
            .count(),
    )
}

/// A seed's resources: before, at the peak, and after.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    /// Live heap bytes before the seed.
    pub heap_before: usize,
    /// The most live above `heap_before` while the seed ran.
    pub peak_above: usize,
    /// Live bytes above `heap_before` once the seed was over (negative: fewer).
    pub heap_after: isize,
    /// The daemon's threads before and after the seed (`None`: no `/proc` to count them).
    pub threads_before: Option<usize>,
    pub threads_after: Option<usize>,
}

/// The levels before a seed, to check the seed against.
pub struct Watch {
    heap: usize,
    threads: Option<usize>,
}

impl Watch {
    /// Before a seed: the live heap and the daemon's threads now; the peak restarts here.
    pub fn start() -> Watch {
        let threads = threads();
        let heap = LIVE.load(Ordering::Relaxed);
        PEAK.store(heap, Ordering::Relaxed);
        Watch { heap, threads }
    }

    /// After the seed, its worlds dropped: the peak stayed under [`PEAK_LIMIT`], and within
    /// [`REAP_WAIT`] the threads are back to their number before it and the heap to its level
    /// (within [`HEAP_SLACK`]); polled, as threads told to end take a moment to be gone.
    pub fn check(self) -> Result<Figures, String> {
        let peak_above = PEAK.load(Ordering::Relaxed).saturating_sub(self.heap);
        let give_up = Instant::now() + REAP_WAIT;
        let figures = loop {
            let threads_after = threads();
            let after = LIVE.load(Ordering::Relaxed);
            let figures = Figures {
                heap_before: self.heap,
                peak_above,
                heap_after: after as isize - self.heap as isize,
                threads_before: self.threads,
                threads_after,
            };
            let settled = threads_after <= self.threads && after <= self.heap + HEAP_SLACK;
            if settled || Instant::now() >= give_up {
                break figures;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if peak_above > PEAK_LIMIT {
            return Err(format!(
                "the live heap peaked {peak_above} bytes above its {} before the run, past the {PEAK_LIMIT} allowed",
                self.heap
            ));
        }
        if let (Some(after), Some(before)) = (figures.threads_after, self.threads)
            && after > before
        {
            return Err(format!(
                "{after} threads of the daemon still run {} s after the run, {before} before it",
                REAP_WAIT.as_secs()
            ));
        }
        if figures.heap_after > HEAP_SLACK as isize {
            return Err(format!(
                "{} bytes more live heap after the run than before it ({}), past the {HEAP_SLACK} allowed",
                figures.heap_after, self.heap
            ));
        }
        Ok(figures)
    }
}

/// The figures of many seeds: the extremes, for the run's summary.
#[derive(Debug, Default)]
pub struct Tally {
    seeds: usize,
    first: Figures,
    peak_above: (usize, u64),
    heap_after: isize,
    threads_after: Option<usize>,
}

impl Tally {
    /// Adds a seed's figures; the heap before it must still be within [`HEAP_SLACK`] of the
    /// level before the first seed, so a leak too small to see in one seed is seen as it adds
    /// up over many.
    pub fn add(&mut self, seed: u64, f: Figures) -> Result<(), String> {
        if self.seeds == 0 {
            self.first = f;
        }
        let grown = f.heap_before.saturating_sub(self.first.heap_before);
        if grown > HEAP_SLACK {
            return Err(format!(
                "seed {seed} failed: the live heap before it is {grown} bytes above its level before \
                 the first seed of the run, past the {HEAP_SLACK} allowed: earlier seeds leak"
            ));
        }
        self.seeds += 1;
        if f.peak_above >= self.peak_above.0 {
            self.peak_above = (f.peak_above, seed);
        }
        self.heap_after = self.heap_after.max(f.heap_after);
        self.threads_after = self.threads_after.max(f.threads_after);
        Ok(())
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.seeds == 0 {
            return f.write_str("no seed passed to be measured");
        }
        match self.first.threads_before {
            Some(n) => write!(
                f,
                "daemon threads {n} before the first seed, at most {} after any; ",
                self.threads_after.unwrap_or(0)
            )?,
            None => f.write_str("threads not counted (no /proc); ")?,
        }
        write!(
            f,
            "live heap {} KiB before the first seed, peak at most {} KiB above a seed's start \
             (seed {}), at most {} bytes more after one",
            self.first.heap_before >> 10,
            self.peak_above.0 >> 10,
            self.peak_above.1,
            self.heap_after
        )
    }
}
