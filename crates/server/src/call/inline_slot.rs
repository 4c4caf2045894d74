//! The inline slots: which metadata calls may run on the async worker that received them.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Metadata calls running on async workers now.
static INLINE_IN_USE: AtomicUsize = AtomicUsize::new(0);

/// A metadata call's claim to run on the async worker that received it. At most all workers but
/// one of the current runtime hold such calls at once: a metadata call can still block for long
/// (a stat on a dead network share), so the last worker always stays free to serve every other
/// request, and metadata calls beyond the limit (or on a single-threaded runtime) go to the
/// blocking pool as all other host work does.
pub(super) struct InlineSlot {
    /// The entry of [`HOLDERS`] naming the holding thread, if it is named there.
    holder: Option<usize>,
}

/// How long the holders of the inline slots may give none back before they count as stuck in a
/// long call, unless one of them is waiting for a core: then a metadata call that finds every
/// slot taken stops waiting for one and goes to the blocking pool.
const SLOT_WAIT: Duration = Duration::from_millis(10);

/// The longest a metadata call waits for an inline slot while the holders are moving.
const SLOT_WAIT_MAX: Duration = Duration::from_secs(1);

/// Wakes a metadata call waiting for an inline slot when one is given back.
static SLOT_FREED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// When an inline slot was last given back, in microseconds since [`epoch`].
static SLOT_FREED_AT: AtomicU64 = AtomicU64::new(0);

/// The kernel thread ids of the threads holding an inline slot (0: a free entry), so that a call
/// waiting for a slot can tell holders waiting for a core from holders blocked in the kernel.
/// More holders than entries (a runtime of more than 17 workers) go unnamed.
static HOLDERS: [AtomicU32; 16] = [const { AtomicU32::new(0) }; 16];

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn micros_since_epoch() -> u64 {
    u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl InlineSlot {
    /// A slot now, or once one is given back while the holders are moving.
    ///
    /// Under load the slots are taken and given back every few microseconds, so a call that
    /// finds them all taken gets one soon. Sending it to the blocking pool instead made tokio
    /// start a thread for every call of a burst that found no idle one: 30 to 60 threads under
    /// 64 clients on 2 cores, for work that needs none.
    ///
    /// When no slot has been given back for [`SLOT_WAIT`], either the holders are stuck in long
    /// calls (a stat on a dead network share: their threads sleep in the kernel), and the call
    /// goes to the blocking pool at once, as all other host work does; or a holder's thread is
    /// waiting for a core that other processes took (it is runnable), and the slot comes back
    /// as soon as it gets one, so the call keeps waiting, up to [`SLOT_WAIT_MAX`]. Where thread
    /// states cannot be read (not Linux), every silence of [`SLOT_WAIT`] counts as stuck.
    pub(super) async fn wait() -> Option<InlineSlot> {
        let limit = Self::limit();
        if let Some(slot) = Self::take(limit) {
            return Some(slot);
        }
        if limit == 0 {
            return None;
        }
        let wait_us = u64::try_from(SLOT_WAIT.as_micros()).unwrap_or(u64::MAX);
        let give_up = tokio::time::Instant::now() + SLOT_WAIT_MAX;
        loop {
            let freed = SLOT_FREED.notified();
            tokio::pin!(freed);
            // Registered before looking again, so a slot given back in between still wakes us.
            freed.as_mut().enable();
            if let Some(slot) = Self::take(limit) {
                return Some(slot);
            }
            let since_freed =
                micros_since_epoch().saturating_sub(SLOT_FREED_AT.load(Ordering::Relaxed));
            let stuck = since_freed > wait_us && !a_holder_is_runnable();
            if stuck || tokio::time::Instant::now() >= give_up {
                return None;
            }
            // Woken by a slot given back, or after SLOT_WAIT to look at the holders again.
            let _ = tokio::time::timeout(SLOT_WAIT, freed).await;
        }
    }

    /// All workers of the current runtime but one; 0 outside a runtime or on one worker.
    fn limit() -> usize {
        tokio::runtime::Handle::try_current()
            .map(|h| h.metrics().num_workers())
            .unwrap_or(1)
            .saturating_sub(1)
    }

    /// A slot if fewer than `limit` are held, with the holding thread named in [`HOLDERS`].
    fn take(limit: usize) -> Option<InlineSlot> {
        INLINE_IN_USE
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()?;
        let holder = this_thread_id().and_then(|tid| {
            HOLDERS.iter().position(|h| {
                h.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
        });
        Some(InlineSlot { holder })
    }
}

impl Drop for InlineSlot {
    fn drop(&mut self) {
        if let Some(h) = self.holder.and_then(|i| HOLDERS.get(i)) {
            h.store(0, Ordering::Release);
        }
        INLINE_IN_USE.fetch_sub(1, Ordering::Release);
        SLOT_FREED_AT.store(micros_since_epoch(), Ordering::Relaxed);
        SLOT_FREED.notify_one();
    }
}

/// Whether a thread holding an inline slot is runnable: on a core, or waiting for one.
fn a_holder_is_runnable() -> bool {
    HOLDERS
        .iter()
        .map(|h| h.load(Ordering::Acquire))
        .filter(|&tid| tid != 0)
        .any(|tid| thread_state(tid) == Some(b'R'))
}

/// The calling thread's kernel thread id, read once per thread from `/proc/thread-self`
/// (proc(5): a link to `<pid>/task/<tid>`).
#[cfg(target_os = "linux")]
fn this_thread_id() -> Option<u32> {
    thread_local! {
        static TID: Option<u32> = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok());
    }
    TID.with(|t| *t)
}

#[cfg(not(target_os = "linux"))]
fn this_thread_id() -> Option<u32> {
    None
}

/// The state letter of thread `tid` of this process: the field after the command name in
/// `/proc/self/task/<tid>/stat` (proc(5): `R` running or runnable, `S` sleeping, `D` waiting in
/// uninterruptible disk sleep, ...). The command name is in parentheses and may itself hold
/// spaces and parentheses, so the state is found after the last `)`.
#[cfg(target_os = "linux")]
fn thread_state(tid: u32) -> Option<u8> {
    let stat = std::fs::read(format!("/proc/self/task/{tid}/stat")).ok()?;
    let end = stat.iter().rposition(|&b| b == b')')?;
    stat.get(end.checked_add(2)?).copied()
}

#[cfg(not(target_os = "linux"))]
fn thread_state(_tid: u32) -> Option<u8> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn thread_states_read_from_proc() {
        let me = this_thread_id().expect("a thread id on Linux");
        // This thread is running while it looks at itself.
        assert_eq!(thread_state(me), Some(b'R'));
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tx.send(this_thread_id().unwrap()).unwrap();
            let _ = release_rx.recv();
        });
        let tid = rx.recv().unwrap();
        assert_ne!(tid, me);
        // Blocked in recv (a futex wait): sleeping, once it got there.
        let mut state = None;
        for _ in 0..1000 {
            state = thread_state(tid);
            if state == Some(b'S') {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(state, Some(b'S'));
        release_tx.send(()).unwrap();
        sleeper.join().unwrap();
        assert_eq!(thread_state(tid), None, "a thread that ended has no state");
    }
}
