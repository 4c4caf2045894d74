//! The lock-order check ([`super`]'s module docs state the order): in debug and test builds
//! each acquisition that may wait is compared with what the calling thread holds, and an
//! inversion panics naming both; release builds keep no record and check nothing.

/// The kinds of object, in the order a call takes them.
#[cfg_attr(not(any(debug_assertions, test)), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Class {
    Disk,
    Share,
    Path,
}

/// One acquisition, as the check sees it (release builds look at none of it).
#[cfg_attr(not(any(debug_assertions, test)), allow(dead_code))]
pub(super) struct Acquire<'a> {
    pub class: Class,
    /// The disk's number (disks are ordered among themselves by it).
    pub disk: Option<u32>,
    /// The object, named for the panic message ("disk 3", "path \"/x\"").
    pub named: &'a str,
    /// The operation taking it.
    pub op: &'a str,
}

/// Why taking `want` while `held` is held breaks the order, if it does.
#[cfg_attr(not(any(debug_assertions, test)), allow(dead_code))]
fn inversion(held: (Class, Option<u32>), want: (Class, Option<u32>)) -> Option<&'static str> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    match held.0.cmp(&want.0) {
        Less => None,
        Greater => Some(
            "a call holding a path never waits for a disk or a share, nor one holding a share \
             for a disk: it takes the disk or share first",
        ),
        Equal => match (held.1, want.1) {
            (Some(h), Some(w)) if h < w => None,
            (Some(_), Some(_)) => Some("disks are taken in ascending number"),
            _ => Some(
                "a call waits for one share and one path at most (further shares only without \
                 waiting)",
            ),
        },
    }
}

#[cfg(any(debug_assertions, test))]
mod imp {
    use super::{Acquire, Class, inversion};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, MutexGuard};
    use std::thread::{self, ThreadId};

    /// A lock some thread holds.
    struct Taken {
        id: u64,
        thread: ThreadId,
        class: Class,
        disk: Option<u32>,
        named: String,
        op: String,
    }

    /// Every lock held, by the thread that took it (a guard may be dropped elsewhere: its
    /// record goes by its id).
    static TAKEN: Mutex<Vec<Taken>> = Mutex::new(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(1);

    fn taken() -> MutexGuard<'static, Vec<Taken>> {
        TAKEN.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Kept by a guard: its record goes when the guard does.
    pub(in crate::locks) struct Witness(u64);

    impl Drop for Witness {
        fn drop(&mut self) {
            taken().retain(|t| t.id != self.0);
        }
    }

    /// Panics if the calling thread holds a lock that `a` may not be waited for under.
    pub(in crate::locks) fn check(a: &Acquire<'_>) {
        let me = thread::current().id();
        let found = taken().iter().filter(|t| t.thread == me).find_map(|t| {
            inversion((t.class, t.disk), (a.class, a.disk))
                .map(|why| format!("{} holds {} (taken by {}): {why}", a.op, t.named, t.op))
        });
        if let Some(found) = found {
            panic!(
                "lock order inverted: {} waits for {} while {found} (crate::locks)",
                a.op, a.named
            );
        }
    }

    /// Records `a` as held by the calling thread.
    pub(in crate::locks) fn record(a: &Acquire<'_>) -> Witness {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        taken().push(Taken {
            id,
            thread: thread::current().id(),
            class: a.class,
            disk: a.disk,
            named: a.named.to_owned(),
            op: a.op.to_owned(),
        });
        Witness(id)
    }
}

#[cfg(not(any(debug_assertions, test)))]
mod imp {
    use super::Acquire;

    /// Nothing is recorded in release builds.
    pub(in crate::locks) struct Witness;

    pub(in crate::locks) fn check(_: &Acquire<'_>) {}

    pub(in crate::locks) fn record(_: &Acquire<'_>) -> Witness {
        Witness
    }
}

pub(super) use imp::{Witness, check, record};

#[cfg(test)]
mod tests {
    use super::Class::{Disk, Path, Share};
    use super::inversion;

    /// The order, pair by pair: what may be waited for while holding what.
    #[test]
    fn the_order_pair_by_pair() {
        let allowed = [
            ((Disk, Some(1)), (Disk, Some(2))),
            ((Disk, Some(1)), (Share, None)),
            ((Disk, Some(1)), (Path, None)),
            ((Share, None), (Path, None)),
        ];
        let inverted = [
            ((Disk, Some(2)), (Disk, Some(1))),
            ((Disk, Some(2)), (Disk, Some(2))),
            ((Share, None), (Disk, Some(1))),
            ((Share, None), (Share, None)),
            ((Path, None), (Disk, Some(1))),
            ((Path, None), (Share, None)),
            ((Path, None), (Path, None)),
        ];
        for (held, want) in allowed {
            assert_eq!(inversion(held, want), None, "{want:?} under {held:?}");
        }
        for (held, want) in inverted {
            assert!(inversion(held, want).is_some(), "{want:?} under {held:?}");
        }
    }
}
