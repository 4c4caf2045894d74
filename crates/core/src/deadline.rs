//! The deadline of the call a thread is working for.
//!
//! The server sets it around each request's host work ([`within`]). Work that would only start
//! after the caller stopped waiting is not started: waiting for a disk another operation holds
//! ends at the deadline ([`crate::locks::lock_disk`]), so retries that pile up behind a slow
//! operation give their threads back instead of queueing stale work.

use crate::{Error, Kind, Result};
use std::cell::Cell;
use std::time::Instant;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with `deadline` as the current thread's call deadline, restoring the previous one
/// afterwards (also when `f` panics).
pub fn within<T>(deadline: Option<Instant>, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(DEADLINE.with(|d| d.replace(deadline)));
    f()
}

/// The current thread's call deadline, if its caller gave one.
pub fn current() -> Option<Instant> {
    DEADLINE.with(Cell::get)
}

/// Marks the current thread's call as outlived by its caller: a call that has a deadline now
/// has it passed. For the simulated Windows, whose seam calls can hang past the caller's
/// deadline: the work after such a call meets the deadline the way the real daemon's would.
pub fn expire() {
    DEADLINE.with(|d| {
        if d.get().is_some() {
            d.set(Some(Instant::now()));
        }
    });
}

/// An error when the current call's deadline has passed: `op` on `object` was not started.
pub fn check(op: &str, object: &str) -> Result<()> {
    match current() {
        Some(d) if Instant::now() >= d => Err(passed(op, object, "before the work started")),
        _ => Ok(()),
    }
}

/// The DEADLINE_EXCEEDED error for `op` on `object`, saying at what point it passed.
pub(crate) fn passed(op: &str, object: &str, when: &str) -> Error {
    Error::new(
        Kind::DeadlineExceeded,
        op,
        object,
        format!("the caller's deadline passed {when}; nothing was done, a retry starts it"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_deadline_is_per_thread_and_restored_after_the_call() {
        assert_eq!(current(), None);
        let past = Instant::now() - Duration::from_millis(1);
        within(Some(past), || {
            let e = check("FormatVolume", "volume x").unwrap_err();
            assert_eq!(e.kind(), Kind::DeadlineExceeded);
            assert!(e.to_string().contains("FormatVolume"), "{e}");
            std::thread::spawn(|| assert_eq!(current(), None))
                .join()
                .unwrap();
            let later = Instant::now() + Duration::from_secs(60);
            within(Some(later), || check("Mkdir", "p").unwrap());
            assert_eq!(current(), Some(past));
        });
        assert_eq!(current(), None);
        // A call that outlived its caller: its deadline is now passed; without one, none.
        within(Some(Instant::now() + Duration::from_secs(60)), || {
            expire();
            assert!(check("Rmdir", "p").is_err());
        });
        expire();
        assert_eq!(current(), None);
        let r = std::panic::catch_unwind(|| within(Some(past), || panic!("boom")));
        assert!(r.is_err());
        assert_eq!(current(), None);
    }
}
