//! Per-disk serialisation: operations on one disk (and the volumes on it) run one at a time;
//! operations on different disks never wait for each other.

use crate::Result;
use std::collections::HashSet;
use std::sync::{Condvar, LazyLock, Mutex};
use std::time::Instant;

/// The disks with an operation in progress.
struct Busy {
    disks: Mutex<HashSet<u32>>,
    freed: Condvar,
}

static BUSY: LazyLock<Busy> = LazyLock::new(|| Busy {
    disks: Mutex::new(HashSet::new()),
    freed: Condvar::new(),
});

/// Holds disk `number` until dropped.
#[must_use = "the disk is released when the guard is dropped"]
pub struct DiskGuard {
    number: u32,
}

/// Waits until no other operation holds disk `number`, then holds it.
///
/// One process-wide table: every service and API version shares it, so a FormatVolume through
/// volume v1 and a PartitionDisk through disk v1beta3 on the same disk are serialised too.
///
/// The wait ends at the current call's deadline ([`crate::deadline`]): `op` on `object` then
/// fails with DEADLINE_EXCEEDED, having done nothing.
pub fn lock_disk(number: u32, op: &str, object: &str) -> Result<DiskGuard> {
    let deadline = crate::deadline::current();
    // A caller that has gone starts nothing, held disk or not: its retry may already have
    // done the work, and done again later it would undo what came after (a stale unmount of
    // a volume staged again).
    crate::deadline::check(op, object)?;
    // A panic while holding the table's mutex cannot leave it inconsistent (insert/remove are
    // single steps), so a poisoned lock is taken over.
    let mut disks = BUSY.disks.lock().unwrap_or_else(|p| p.into_inner());
    while disks.contains(&number) {
        disks = match deadline {
            None => BUSY.freed.wait(disks).unwrap_or_else(|p| p.into_inner()),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(crate::deadline::passed(
                        op,
                        object,
                        "while another operation on the disk was still running",
                    ));
                }
                BUSY.freed
                    .wait_timeout(disks, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
    }
    disks.insert(number);
    Ok(DiskGuard { number })
}

impl Drop for DiskGuard {
    fn drop(&mut self) {
        let mut disks = BUSY.disks.lock().unwrap_or_else(|p| p.into_inner());
        disks.remove(&self.number);
        drop(disks);
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
}
