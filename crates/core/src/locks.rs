//! Per-disk serialisation: operations on one disk (and the volumes on it) run one at a time;
//! operations on different disks never wait for each other.
//!
//! Every wait is bounded: by the caller's deadline, else by [`DEFAULT_WAIT`]; and the waiters
//! are capped, [`WAITERS_PER_DISK`] on one disk and [`WAITERS_TOTAL`] on all disks together.
//! A waiter is a blocked thread of the daemon's blocking pool (512 threads), so without the caps
//! one held disk's deadline-less callers would take every thread other disks, other groups and
//! metadata calls need.

use crate::{Error, Kind, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How long a lock wait lasts when the caller gave no deadline: kubelet's own timeout for a
/// CSI call (2 min), so a driver that passes no deadline learns what holds the disk (the
/// ABORTED answer names it and for how long) at the time kubelet would have given up anyway.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(120);
/// Calls waiting for one disk at most; more get RESOURCE_EXHAUSTED at once.
pub const WAITERS_PER_DISK: usize = 8;
/// Calls waiting for any disk at most: the blocking threads held disks may take in all.
pub const WAITERS_TOTAL: usize = 64;

/// Who holds a disk.
struct Holder {
    op: String,
    object: String,
    since: Instant,
}

#[derive(Default)]
struct Table {
    held: HashMap<u32, Holder>,
    waiting: HashMap<u32, usize>,
    waiting_total: usize,
}

/// The disks with an operation in progress.
struct Busy {
    table: Mutex<Table>,
    freed: Condvar,
}

static BUSY: LazyLock<Busy> = LazyLock::new(|| Busy {
    table: Mutex::new(Table::default()),
    freed: Condvar::new(),
});

static TOO_MANY_WAITERS: AtomicU64 = AtomicU64::new(0);
static DEFAULT_WAIT_PASSED: AtomicU64 = AtomicU64::new(0);

/// What the lock-wait limits refused since start (for the daemon's metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusals {
    /// Calls refused because [`WAITERS_PER_DISK`] or [`WAITERS_TOTAL`] were waiting.
    pub too_many_waiters: u64,
    /// Deadline-less calls that gave up after [`DEFAULT_WAIT`].
    pub default_wait_passed: u64,
}

/// The lock-wait refusals since start.
pub fn refusals() -> Refusals {
    Refusals {
        too_many_waiters: TOO_MANY_WAITERS.load(Ordering::Relaxed),
        default_wait_passed: DEFAULT_WAIT_PASSED.load(Ordering::Relaxed),
    }
}

/// Holds disk `number` until dropped.
#[must_use = "the disk is released when the guard is dropped"]
pub struct DiskGuard {
    number: u32,
}

/// Waits until no other operation holds disk `number`, then holds it for `op` on `object`.
///
/// One process-wide table: every service and API version shares it, so a FormatVolume through
/// volume v1 and a PartitionDisk through disk v1beta3 on the same disk are serialised too.
///
/// The wait ends at the current call's deadline ([`crate::deadline`]): `op` on `object` then
/// fails with DEADLINE_EXCEEDED, having done nothing. Without a deadline it ends after
/// [`DEFAULT_WAIT`] with ABORTED naming the holder. Past [`WAITERS_PER_DISK`] or
/// [`WAITERS_TOTAL`] waiters the call does not wait: RESOURCE_EXHAUSTED naming the limit.
pub fn lock_disk(number: u32, op: &str, object: &str) -> Result<DiskGuard> {
    lock_disk_waiting(number, op, object, DEFAULT_WAIT)
}

/// [`lock_disk`] with `default_wait` for a caller without a deadline.
fn lock_disk_waiting(
    number: u32,
    op: &str,
    object: &str,
    default_wait: Duration,
) -> Result<DiskGuard> {
    let deadline = crate::deadline::current();
    // A caller that has gone starts nothing, held disk or not: its retry may already have
    // done the work, and done again later it would undo what came after (a stale unmount of
    // a volume staged again).
    crate::deadline::check(op, object)?;
    // A panic while holding the table's mutex cannot leave it inconsistent (each change is a
    // single step), so a poisoned lock is taken over.
    let mut table = BUSY.table.lock().unwrap_or_else(|p| p.into_inner());
    if table.held.contains_key(&number) {
        let on_disk = table.waiting.get(&number).copied().unwrap_or(0);
        let limit = if on_disk >= WAITERS_PER_DISK {
            Some(format!(
                "{WAITERS_PER_DISK} calls already wait for disk {number}, the daemon's limit per disk"
            ))
        } else if table.waiting_total >= WAITERS_TOTAL {
            Some(format!(
                "{WAITERS_TOTAL} calls already wait for held disks, the daemon's limit"
            ))
        } else {
            None
        };
        if let Some(limit) = limit {
            TOO_MANY_WAITERS.fetch_add(1, Ordering::Relaxed);
            let holder = describe(&table.held[&number]);
            return Err(Error::new(
                Kind::ResourceExhausted,
                op,
                object,
                format!("{limit} ({holder}); nothing was done, retry later"),
            ));
        }
        *table.waiting.entry(number).or_default() += 1;
        table.waiting_total += 1;
        let until = deadline.unwrap_or_else(|| Instant::now() + default_wait);
        while table.held.contains_key(&number) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            table = BUSY
                .freed
                .wait_timeout(table, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        table.waiting_total -= 1;
        if let Some(n) = table.waiting.get_mut(&number) {
            *n -= 1;
            if *n == 0 {
                table.waiting.remove(&number);
            }
        }
        if let Some(holder) = table.held.get(&number) {
            if deadline.is_some() {
                return Err(crate::deadline::passed(
                    op,
                    object,
                    "while another operation on the disk was still running",
                ));
            }
            DEFAULT_WAIT_PASSED.fetch_add(1, Ordering::Relaxed);
            return Err(Error::new(
                Kind::Aborted,
                op,
                object,
                format!(
                    "waited the daemon's {} s for disk {number} without a caller deadline, and it is \
                 still held ({}); nothing was done, a retry starts it",
                    DEFAULT_WAIT.as_secs(),
                    describe(holder)
                ),
            ));
        }
    }
    table.held.insert(
        number,
        Holder {
            op: op.to_owned(),
            object: object.to_owned(),
            since: Instant::now(),
        },
    );
    Ok(DiskGuard { number })
}

fn describe(h: &Holder) -> String {
    format!(
        "held by {} on {} for {} s",
        h.op,
        h.object,
        h.since.elapsed().as_secs()
    )
}

impl Drop for DiskGuard {
    fn drop(&mut self) {
        let mut table = BUSY.table.lock().unwrap_or_else(|p| p.into_inner());
        table.held.remove(&self.number);
        drop(table);
        BUSY.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[test]
    fn one_disk_is_serialised_and_others_are_not() {
        let inside = Arc::new(AtomicU32::new(0));
        let max = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (inside, max) = (inside.clone(), max.clone());
                std::thread::spawn(move || {
                    let _g = lock_disk(4_000_001, "test", "d").unwrap();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(max.load(Ordering::SeqCst), 1);

        // Holding one disk does not block another.
        let _a = lock_disk(4_000_002, "test", "d").unwrap();
        let other = std::thread::spawn(|| {
            let _b = lock_disk(4_000_003, "test", "d").unwrap();
        });
        other.join().unwrap();
    }

    #[test]
    fn waiting_for_a_held_disk_ends_at_the_call_deadline() {
        let _held = lock_disk(4_000_004, "test", "d").unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        let e = std::thread::spawn(move || {
            crate::deadline::within(Some(deadline), || {
                lock_disk(4_000_004, "FormatVolume", "volume v").err()
            })
        })
        .join()
        .unwrap()
        .expect("the disk stays held past the deadline");
        assert!(Instant::now() >= deadline);
        assert_eq!(e.kind(), crate::Kind::DeadlineExceeded);
        assert!(
            e.to_string().contains("FormatVolume") && e.to_string().contains("another operation"),
            "{e}"
        );
        // A free disk is held at once while the caller still waits.
        crate::deadline::within(Some(Instant::now() + Duration::from_secs(5)), || {
            drop(lock_disk(4_000_005, "test", "d").unwrap());
        });
    }

    /// A call whose caller has gone (it hung past its deadline before reaching the disk) starts
    /// nothing even on a free disk: its retry may have done the work already, and a stale
    /// UnmountVolume run now would take away a volume staged again since.
    #[test]
    fn a_caller_that_has_gone_holds_no_disk() {
        let past = Instant::now() - Duration::from_millis(1);
        let Err(e) =
            crate::deadline::within(Some(past), || lock_disk(4_000_006, "UnmountVolume", "v"))
        else {
            panic!("held for a caller that has gone");
        };
        assert_eq!(e.kind(), crate::Kind::DeadlineExceeded);
        assert!(e.to_string().contains("UnmountVolume"), "{e}");
        drop(lock_disk(4_000_006, "test", "d").expect("the disk was never held"));
    }

    /// Hundreds of deadline-less callers on a held disk: a few wait, the rest are refused at
    /// once (before, all of them waited forever, each on a thread of the blocking pool), and
    /// another disk is held at once meanwhile.
    #[test]
    fn waiters_on_a_held_disk_are_capped_and_others_disks_are_not_held_up() {
        let held = lock_disk(4_000_010, "FormatVolume", "volume big").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let callers: Vec<_> = (0..200)
            .map(|_| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let r = lock_disk(4_000_010, "ListVolumesOnDisk", "disk 4000010");
                    tx.send(r.map(drop)).unwrap();
                })
            })
            .collect();
        // Every caller past the cap is answered while the disk is still held.
        for _ in 0..200 - WAITERS_PER_DISK {
            let e = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a refusal while the disk is held")
                .expect_err("the disk is held");
            assert_eq!(e.kind(), Kind::ResourceExhausted, "{e}");
            assert!(
                e.to_string().contains("limit per disk")
                    && e.to_string().contains("held by FormatVolume on volume big"),
                "{e}"
            );
        }
        let t = Instant::now();
        drop(lock_disk(4_000_011, "ListVolumesOnDisk", "disk 4000011").unwrap());
        assert!(t.elapsed() < Duration::from_secs(1));
        drop(held);
        for c in callers {
            c.join().unwrap();
        }
        drop(tx);
        let granted: Vec<_> = rx.iter().collect();
        assert_eq!(granted.len(), WAITERS_PER_DISK);
        assert!(
            granted.iter().all(Result::is_ok),
            "the capped waiters get the disk in turn"
        );
    }

    #[test]
    fn a_wait_without_a_deadline_ends_after_the_default_and_names_the_holder() {
        let _held = lock_disk(4_000_012, "FormatVolume", "volume slow").unwrap();
        let before = refusals().default_wait_passed;
        let e = std::thread::spawn(|| {
            lock_disk_waiting(
                4_000_012,
                "MountVolume",
                "volume slow",
                Duration::from_millis(50),
            )
            .err()
        })
        .join()
        .unwrap()
        .expect("the disk stays held");
        assert_eq!(e.kind(), Kind::Aborted);
        assert!(
            e.to_string()
                .contains("held by FormatVolume on volume slow"),
            "{e}"
        );
        assert!(refusals().default_wait_passed > before);
    }
}
