//! Ordering of operations that act on the same object: operations on one disk (and the
//! volumes on it) run one at a time, and so do operations that change the same request path
//! (or a path above or below it); operations on different objects never wait for each other.
//!
//! Waiting ends at the current call's deadline ([`crate::deadline`]). A call kubelet gave up on
//! may still be running (a device or share that stopped answering): while it runs it holds its
//! object, so the retry, and every later call on the object, waits for it to end instead of
//! doing the work beside it and then having it undone by the stale call acting late.

use crate::Result;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Objects with an operation in progress, of one kind.
struct Table<K> {
    held: Mutex<Vec<K>>,
    freed: Condvar,
}

impl<K: PartialEq> Table<K> {
    const fn new() -> Self {
        Table {
            held: Mutex::new(Vec::new()),
            freed: Condvar::new(),
        }
    }

    /// A panic while holding the table's mutex cannot leave it inconsistent (push/remove are
    /// single steps), so a poisoned lock is taken over.
    fn lock(&self) -> MutexGuard<'_, Vec<K>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until no held object `overlaps` `key`, then holds `key`; the wait ends at the
    /// current call's deadline (`op` on `object` then fails, `busy` saying what it waited for).
    fn hold(
        &self,
        key: K,
        overlaps: impl Fn(&K, &K) -> bool,
        op: &str,
        object: &str,
        busy: &str,
    ) -> Result<()> {
        let deadline = crate::deadline::current();
        // A caller that has gone starts nothing, held object or not: its retry may already
        // have done the work, and done again later it would undo what came after (a stale
        // unmount of a volume staged again).
        crate::deadline::check(op, object)?;
        let mut held = self.lock();
        while held.iter().any(|h| overlaps(h, &key)) {
            held = match deadline {
                None => self.freed.wait(held).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(crate::deadline::passed(op, object, busy));
                    }
                    self.freed
                        .wait_timeout(held, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        held.push(key);
        Ok(())
    }

    fn release(&self, key: &K) {
        let mut held = self.lock();
        if let Some(i) = held.iter().position(|h| h == key) {
            held.swap_remove(i);
        }
        drop(held);
        self.freed.notify_all();
    }
}

static DISKS: Table<u32> = Table::new();
static PATHS: Table<String> = Table::new();

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
    DISKS.hold(
        number,
        |a, b| a == b,
        op,
        object,
        "while another operation on the disk was still running",
    )?;
    Ok(DiskGuard { number })
}

impl Drop for DiskGuard {
    fn drop(&mut self) {
        DISKS.release(&self.number);
    }
}

/// Holds a request path (and what is above and below it) until dropped.
#[must_use = "the path is released when the guard is dropped"]
pub struct PathGuard {
    key: String,
}

/// Waits until no other operation holds `key`, a path above it or a path below it, then holds
/// it; as [`lock_disk`], process-wide and ending at the call's deadline.
///
/// `key` is the normalised request path in the form that compares equal for the same path
/// (case-folded where the filesystem ignores case), `separator` its component separator: a
/// path held is "above" `key` when `key` continues it after a separator.
pub fn lock_path(key: String, separator: char, op: &str, object: &str) -> Result<PathGuard> {
    let key = key.trim_end_matches(separator).to_string();
    let overlaps = |a: &String, b: &String| within(a, b, separator) || within(b, a, separator);
    PATHS.hold(
        key.clone(),
        overlaps,
        op,
        object,
        "while another operation on the path was still running",
    )?;
    Ok(PathGuard { key })
}

/// Whether `inner` is `outer` or a path below it.
fn within(inner: &str, outer: &str, separator: char) -> bool {
    inner
        .strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(separator) || outer.is_empty())
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        PATHS.release(&self.key);
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

    /// A path is ordered with itself and with the paths above and below it, and with nothing
    /// else (a sibling whose name starts the same is another path).
    #[test]
    fn a_path_waits_for_itself_and_its_ancestors_and_descendants_only() {
        let _held = lock_path("/t/locks/a/b".into(), '/', "Rmdir", "b").unwrap();
        let soon = || Some(Instant::now() + Duration::from_millis(20));
        for busy in [
            "/t/locks/a/b",
            "/t/locks/a/b/",
            "/t/locks/a",
            "/t/locks/a/b/c",
        ] {
            let e = crate::deadline::within(soon(), || {
                lock_path(busy.into(), '/', "Mkdir", busy).err()
            })
            .unwrap_or_else(|| panic!("{busy} was not ordered after /t/locks/a/b"));
            assert_eq!(e.kind(), crate::Kind::DeadlineExceeded);
            assert!(
                e.to_string().contains("Mkdir") && e.to_string().contains("path"),
                "{e}"
            );
        }
        for free in ["/t/locks/a/bc", "/t/locks/a/c", "/t/locks/ab"] {
            crate::deadline::within(soon(), || {
                drop(lock_path(free.into(), '/', "Mkdir", free).unwrap());
            });
        }
    }
}
