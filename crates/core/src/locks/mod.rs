//! Ordering of operations that act on the same object: operations on one disk (and the
//! volumes on it) run one at a time, and so do operations that change the same request path
//! (or a path above or below it); operations on different objects never wait for each other.
//!
//! A call kubelet gave up on may still be running (a device or share that stopped answering):
//! while it runs it holds its object, so the retry, and every later call on the object, waits
//! for it to end instead of doing the work beside it and then having it undone by the stale
//! call acting late.
//!
//! Every wait is bounded: by the caller's deadline, else by [`DEFAULT_WAIT`]; and the waiters
//! are capped, [`WAITERS_PER_OBJECT`] on one disk or path and [`WAITERS_TOTAL`] on all disks
//! (and again on all paths) together. A waiter is a blocked thread of the daemon's blocking
//! pool (512 threads), so without the caps one held disk's deadline-less callers would take
//! every thread other disks, other groups and metadata calls need.
//!
//! # The lock order
//!
//! A disk or an SMB share can stop answering (a hostile iSCSI target, a frozen server), and
//! the call holding it then holds it until the device answers; a path lock covers every path
//! below it. So one order, for every call:
//!
//! 1. **Disks, then SMB shares, then paths.** A call that holds a path never waits for a disk
//!    or a share: it takes the disk (or share) first, or gives the path back before it waits.
//!    Waiting for a disk therefore never holds up a call on a path.
//! 2. **One of a kind, or in order.** Several disks are taken in ascending number; a call
//!    waits for at most one share and one path. Further shares are taken only without waiting
//!    ([`try_lock_smb_root`]).
//! 3. **No shared directory is held by a call on a disk or share.** The allowed roots (the
//!    kubelet path, each working dir) and the directories kubelet keeps for every driver and
//!    pod (`plugins/`, `pods/`, ...; [`crate::paths::PathPolicy::is_shared`]) are never a
//!    mount target or a link made by such a call (MountVolume, UnmountVolume,
//!    NewSmbGlobalMapping refuse them before taking anything), so a disk that hangs under a
//!    mount holds up only the caller's own path.
//! 4. **Every wait is bounded** by the caller's deadline, else by [`DEFAULT_WAIT`].
//!
//! In debug and test builds every acquisition that may wait is checked against what the
//! calling thread already holds, and an inversion panics naming both locks (as the kernel's
//! lockdep does), whether or not the lock was contended: a test that takes them the wrong way
//! fails the first time it runs.

use crate::{Error, Kind, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod order;
use order::{Acquire, Class};

/// How long a lock wait lasts when the caller gave no deadline: kubelet's own timeout for a
/// CSI call (2 min), so a driver that passes no deadline learns what holds the object (the
/// ABORTED answer names it and for how long) at the time kubelet would have given up anyway.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(120);
/// Calls waiting for one disk (or one path) at most; more get RESOURCE_EXHAUSTED at once.
pub const WAITERS_PER_OBJECT: usize = 8;
/// Calls waiting for any disk at most (and, apart, for any path): the blocking threads held
/// objects may take in all.
pub const WAITERS_TOTAL: usize = 64;

static TOO_MANY_WAITERS: AtomicU64 = AtomicU64::new(0);
static DEFAULT_WAIT_PASSED: AtomicU64 = AtomicU64::new(0);

/// What the lock-wait limits refused since start (for the daemon's metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusals {
    /// Calls refused because [`WAITERS_PER_OBJECT`] or [`WAITERS_TOTAL`] were waiting.
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

/// Who holds an object.
struct Holder {
    op: String,
    object: String,
    since: Instant,
}

fn describe(h: &Holder) -> String {
    format!(
        "held by {} on {} for {} s",
        h.op,
        h.object,
        h.since.elapsed().as_secs()
    )
}

/// The held objects of one kind and the calls waiting for them.
struct State<K> {
    held: Vec<(K, Holder)>,
    /// Waiters by the exact object they wait for.
    waiting: Vec<(K, usize)>,
    waiting_total: usize,
}

impl<K> State<K> {
    /// Records `key` as held by `op` on `object` from now.
    fn hold(&mut self, key: K, op: &str, object: &str) {
        self.held.push((
            key,
            Holder {
                op: op.to_owned(),
                object: object.to_owned(),
                since: Instant::now(),
            },
        ));
    }
}

/// Objects with an operation in progress, of one kind.
struct Table<K> {
    state: Mutex<State<K>>,
    freed: Condvar,
}

/// How one kind of object is named in refusals: "disk 3", "path /x".
struct Kinds<'a> {
    /// The object's kind, for "the daemon's limit per {kind}".
    kind: &'a str,
    /// The object waited for, named.
    named: &'a str,
}

impl<K: PartialEq + Clone> Table<K> {
    const fn new() -> Self {
        Table {
            state: Mutex::new(State {
                held: Vec::new(),
                waiting: Vec::new(),
                waiting_total: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// A panic while holding the table's mutex cannot leave it inconsistent (each change is a
    /// single step), so a poisoned lock is taken over.
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until no held object `overlaps` `key`, then holds `key` for `op` on `object`. The
    /// wait ends at the current call's deadline (DEADLINE_EXCEEDED), else after `default_wait`
    /// (ABORTED naming the holder); past the waiter caps the call does not wait
    /// (RESOURCE_EXHAUSTED naming the limit and the holder).
    fn hold(
        &self,
        key: K,
        overlaps: impl Fn(&K, &K) -> bool,
        op: &str,
        object: &str,
        names: Kinds<'_>,
        default_wait: Duration,
    ) -> Result<()> {
        let deadline = crate::deadline::current();
        // A caller that has gone starts nothing, held object or not: its retry may already
        // have done the work, and done again later it would undo what came after (a stale
        // unmount of a volume staged again).
        crate::deadline::check(op, object)?;
        GATE.pass(op, object, names.named, default_wait)?;
        let mut st = self.lock();
        let blocker = |st: &State<K>| st.held.iter().position(|(h, _)| overlaps(h, &key));
        if let Some(i) = blocker(&st) {
            let on_key = st
                .waiting
                .iter()
                .find(|(k, _)| *k == key)
                .map_or(0, |w| w.1);
            let limit = if on_key >= WAITERS_PER_OBJECT {
                Some(format!(
                    "{WAITERS_PER_OBJECT} calls already wait for {}, the daemon's limit per {}",
                    names.named, names.kind
                ))
            } else if st.waiting_total >= WAITERS_TOTAL {
                Some(format!(
                    "{WAITERS_TOTAL} calls already wait for held {}s, the daemon's limit",
                    names.kind
                ))
            } else {
                None
            };
            if let Some(limit) = limit {
                TOO_MANY_WAITERS.fetch_add(1, Ordering::Relaxed);
                let holder = describe(&st.held[i].1);
                return Err(Error::new(
                    Kind::ResourceExhausted,
                    op,
                    object,
                    format!("{limit} ({holder}); nothing was done, retry later"),
                ));
            }
            match st.waiting.iter_mut().find(|(k, _)| *k == key) {
                Some(w) => w.1 += 1,
                None => st.waiting.push((key.clone(), 1)),
            }
            st.waiting_total += 1;
            let until = deadline.unwrap_or_else(|| Instant::now() + default_wait);
            while blocker(&st).is_some() {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = self
                    .freed
                    .wait_timeout(st, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            st.waiting_total -= 1;
            if let Some(w) = st.waiting.iter().position(|(k, _)| *k == key) {
                st.waiting[w].1 -= 1;
                if st.waiting[w].1 == 0 {
                    st.waiting.swap_remove(w);
                }
            }
            if let Some(i) = blocker(&st) {
                if deadline.is_some() {
                    let busy = format!(
                        "while another operation on the {} was still running",
                        names.kind
                    );
                    return Err(crate::deadline::passed(op, object, &busy));
                }
                DEFAULT_WAIT_PASSED.fetch_add(1, Ordering::Relaxed);
                return Err(Error::new(
                    Kind::Aborted,
                    op,
                    object,
                    format!(
                        "waited the daemon's {} s for {} without a caller deadline, and it is \
                         still held ({}); nothing was done, a retry starts it",
                        default_wait.as_secs(),
                        names.named,
                        describe(&st.held[i].1)
                    ),
                ));
            }
        }
        st.hold(key, op, object);
        Ok(())
    }

    /// Holds `key` for `op` on `object` if no held object `overlaps` it; never waits.
    fn try_hold(&self, key: K, overlaps: impl Fn(&K, &K) -> bool, op: &str, object: &str) -> bool {
        // Never waits: a closed gate is an object held by the predecessor.
        if !GATE.open_hint.load(Ordering::SeqCst) {
            return false;
        }
        let mut st = self.lock();
        if st.held.iter().any(|(h, _)| overlaps(h, &key)) {
            return false;
        }
        st.hold(key, op, object);
        true
    }

    /// How many calls wait for exactly `key`.
    #[cfg(any(test, feature = "testing"))]
    fn waiting_for(&self, key: &K) -> usize {
        self.lock()
            .waiting
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0, |w| w.1)
    }

    fn release(&self, key: &K) {
        let mut st = self.lock();
        if let Some(i) = st.held.iter().position(|(h, _)| h == key) {
            st.held.swap_remove(i);
        }
        drop(st);
        self.freed.notify_all();
    }
}

/// Whether this daemon's predecessor may still be running: a daemon started with
/// `--take-over` serves while the daemon it replaces finishes its in-flight calls (a format,
/// a mount), and until that one has exited, no call of this daemon that takes an object (a
/// disk, a path, an SMB share) may start: two processes' in-process locks do not see each
/// other, and a second mkfs beside the first would ruin both. Read-only calls take no object
/// and go through at once.
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    /// Fast path: true once open (the usual state, from start on for a daemon that took over
    /// from nobody).
    open_hint: std::sync::atomic::AtomicBool,
    waiting: std::sync::atomic::AtomicUsize,
}

impl Gate {
    const fn new() -> Self {
        Gate {
            open: Mutex::new(true),
            opened: Condvar::new(),
            open_hint: std::sync::atomic::AtomicBool::new(true),
            waiting: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn set(&self, open: bool) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = open;
        self.open_hint.store(open, Ordering::SeqCst);
        if open {
            self.opened.notify_all();
        }
    }

    /// Waits until the gate is open, within the same bounds as a lock wait: the call's
    /// deadline (DEADLINE_EXCEEDED), else `default_wait` (UNAVAILABLE); past
    /// [`WAITERS_TOTAL`] waiters UNAVAILABLE at once. `named` is the object, for the message.
    fn pass(&self, op: &str, object: &str, named: &str, default_wait: Duration) -> Result<()> {
        if self.open_hint.load(Ordering::SeqCst) {
            return Ok(());
        }
        let still = || {
            format!(
                "the previous csi-proxy is still finishing its calls (this daemon took over \
                 from it), and {named} waits for it to exit"
            )
        };
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= WAITERS_TOTAL {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            TOO_MANY_WAITERS.fetch_add(1, Ordering::Relaxed);
            return Err(Error::new(
                Kind::Unavailable,
                op,
                object,
                format!(
                    "{}; {WAITERS_TOTAL} calls already wait, retry later",
                    still()
                ),
            ));
        }
        let deadline = crate::deadline::current();
        let until = deadline.unwrap_or_else(|| Instant::now() + default_wait);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        while !*open {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            open = self
                .opened
                .wait_timeout(open, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let passed = *open;
        drop(open);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if passed {
            Ok(())
        } else if deadline.is_some() {
            Err(crate::deadline::passed(
                op,
                object,
                &format!("while {}", still()),
            ))
        } else {
            Err(Error::new(
                Kind::Unavailable,
                op,
                object,
                format!(
                    "waited {} s: {}; nothing was done, retry",
                    default_wait.as_secs(),
                    still()
                ),
            ))
        }
    }
}

static GATE: Gate = Gate::new();

/// Called by a daemon that takes over from a running one, before it serves: from now on,
/// every call that takes a disk, a path or an SMB share waits (bounded as a lock wait) until
/// [`predecessor_exited`].
pub fn predecessor_running() {
    GATE.set(false);
}

/// The predecessor has exited (its serving lock was released): calls that take objects go
/// through again.
pub fn predecessor_exited() {
    GATE.set(true);
}

static DISKS: Table<u32> = Table::new();
static PATHS: Table<String> = Table::new();
static SMB_ROOTS: Table<String> = Table::new();

/// Takes `key` of `table` for `op` on `object`: checks the order (debug and test builds),
/// waits as [`Table::hold`] does, and records it as the calling thread's.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site per kind of object"
)]
fn take<K: PartialEq + Clone>(
    table: &Table<K>,
    key: K,
    overlaps: impl Fn(&K, &K) -> bool,
    class: Class,
    disk: Option<u32>,
    op: &str,
    object: &str,
    names: Kinds<'_>,
    default_wait: Duration,
) -> Result<order::Witness> {
    let acquire = Acquire {
        class,
        disk,
        named: names.named,
        op,
    };
    order::check(&acquire);
    table.hold(key, overlaps, op, object, names, default_wait)?;
    Ok(order::record(&acquire))
}

/// Holds disk `number` until dropped.
#[must_use = "the disk is released when the guard is dropped"]
pub struct DiskGuard {
    number: u32,
    _order: order::Witness,
}

/// Waits until no other operation holds disk `number`, then holds it for `op` on `object`.
///
/// One process-wide table: every service and API version shares it, so a FormatVolume through
/// volume v1 and a PartitionDisk through disk v1beta3 on the same disk are serialised too.
///
/// The wait ends at the current call's deadline ([`crate::deadline`]): `op` on `object` then
/// fails with DEADLINE_EXCEEDED, having done nothing. Without a deadline it ends after
/// [`DEFAULT_WAIT`] with ABORTED naming the holder. Past [`WAITERS_PER_OBJECT`] or
/// [`WAITERS_TOTAL`] waiters the call does not wait: RESOURCE_EXHAUSTED naming the limit.
///
/// Taken before any path or share the call needs, and several disks in ascending number (the
/// lock order, in the module docs).
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
    let order = take(
        &DISKS,
        number,
        |a, b| a == b,
        Class::Disk,
        Some(number),
        op,
        object,
        Kinds {
            kind: "disk",
            named: &format!("disk {number}"),
        },
        default_wait,
    )?;
    Ok(DiskGuard {
        number,
        _order: order,
    })
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
    _order: order::Witness,
}

/// Waits until no other operation holds `key`, a path above it or a path below it, then holds
/// it; as [`lock_disk`], process-wide, bounded and capped the same way.
///
/// `key` is the normalised request path in the form that compares equal for the same path
/// (case-folded where the filesystem ignores case), `separator` its component separator: a
/// path held is "above" `key` when `key` continues it after a separator.
///
/// Taken last: a call holding a path never waits for a disk or a share, nor for another path.
pub fn lock_path(key: String, separator: char, op: &str, object: &str) -> Result<PathGuard> {
    let key = key.trim_end_matches(separator).to_string();
    let overlaps = |a: &String, b: &String| within(a, b, separator) || within(b, a, separator);
    let order = take(
        &PATHS,
        key.clone(),
        overlaps,
        Class::Path,
        None,
        op,
        object,
        Kinds {
            kind: "path",
            named: &format!("path {key:?}"),
        },
        DEFAULT_WAIT,
    )?;
    Ok(PathGuard { key, _order: order })
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

/// Holds an SMB share root (the lower-cased `\\server\share` a mapping is made of) until
/// dropped.
#[must_use = "the share root is released when the guard is dropped"]
pub struct SmbRootGuard {
    root: String,
    _order: order::Witness,
}

/// Waits until no other operation holds the SMB share root `root` (compared as given: the
/// caller lower-cases it where names ignore case), then holds it; as [`lock_disk`],
/// process-wide, bounded and capped the same way. Each root is ordered apart, so a share whose
/// server does not answer holds up only the calls for that share.
///
/// Taken after any disk and before any path the call needs (the lock order).
pub fn lock_smb_root(root: &str, op: &str, object: &str) -> Result<SmbRootGuard> {
    let order = take(
        &SMB_ROOTS,
        root.to_string(),
        |a, b| a == b,
        Class::Share,
        None,
        op,
        object,
        Kinds {
            kind: "SMB share",
            named: &format!("share {root:?}"),
        },
        DEFAULT_WAIT,
    )?;
    Ok(SmbRootGuard {
        root: root.to_string(),
        _order: order,
    })
}

/// Holds the SMB share root `root` if no operation holds it now; `None` (nothing held)
/// otherwise. Never waits, so a call holding one root may take others without two calls
/// ever waiting for each other (and the lock order has nothing to check).
pub fn try_lock_smb_root(root: &str, op: &str, object: &str) -> Option<SmbRootGuard> {
    SMB_ROOTS
        .try_hold(root.to_string(), |a, b| a == b, op, object)
        .then(|| SmbRootGuard {
            root: root.to_string(),
            _order: order::record(&Acquire {
                class: Class::Share,
                disk: None,
                named: &format!("share {root:?}"),
                op,
            }),
        })
}

impl Drop for SmbRootGuard {
    fn drop(&mut self) {
        SMB_ROOTS.release(&self.root);
    }
}

/// How many calls wait for disk `number` now (for tests that must know a call is waiting).
#[cfg(any(test, feature = "testing"))]
pub fn waiting_for_disk(number: u32) -> usize {
    DISKS.waiting_for(&number)
}

/// How many calls wait for the SMB share root `root` now (as [`waiting_for_disk`]).
#[cfg(any(test, feature = "testing"))]
pub fn waiting_for_share(root: &str) -> usize {
    SMB_ROOTS.waiting_for(&root.to_string())
}

#[cfg(test)]
mod tests;
