//! The daemon's open-file limit.
//!
//! Every client connection is one descriptor, and a node with many volumes keeps hundreds of
//! connections open; the usual soft limit of 1,024 would make `accept` fail with EMFILE long
//! before the hard limit is reached. The daemon raises its soft limit to the hard limit at
//! start-up (as Go programs, upstream included, do), and puts the original soft limit back in
//! the tools it starts, which may still use `select(2)` and its 1,024-descriptor ceiling.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use std::sync::atomic::{AtomicU64, Ordering};

/// The soft limit before [`raise_open_file_limit`] raised it; 0 when it was not raised.
static ORIGINAL_SOFT: AtomicU64 = AtomicU64::new(0);

/// Used when the hard limit is unlimited: Linux's default `fs.nr_open`, the most a process may
/// open.
const UNLIMITED_TARGET: u64 = 1 << 20;

/// Raises the soft RLIMIT_NOFILE to the hard limit. Returns the soft limit before and after.
pub fn raise_open_file_limit() -> std::io::Result<(u64, u64)> {
    let lim = getrlimit(Resource::Nofile);
    let before = lim.current.unwrap_or(u64::MAX);
    let target = lim.maximum.unwrap_or(UNLIMITED_TARGET);
    if before >= target {
        return Ok((before, before));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: lim.maximum,
        },
    )?;
    ORIGINAL_SOFT.store(before, Ordering::Relaxed);
    Ok((before, target))
}

/// In a freshly forked child, before `exec`: puts back the soft limit the daemon started with.
///
/// Only an atomic load and one setrlimit(2) call, both async-signal-safe, as code between fork
/// and exec must be.
pub(crate) fn restore_in_child() -> std::io::Result<()> {
    let original = ORIGINAL_SOFT.load(Ordering::Relaxed);
    if original == 0 {
        return Ok(());
    }
    let lim = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(original),
            maximum: lim.maximum,
        },
    )
    .map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_reaches_the_hard_limit_and_children_get_the_original_back() {
        let hard = getrlimit(Resource::Nofile).maximum;
        if hard.is_some_and(|h| h <= 512) {
            eprintln!("SKIPPED: the hard open-file limit {hard:?} leaves nothing to raise");
            return;
        }
        // Start from a low soft limit, as under a default systemd or shell limit.
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(512),
                maximum: hard,
            },
        )
        .unwrap();
        let (before, after) = raise_open_file_limit().unwrap();
        assert_eq!(before, 512);
        assert_eq!(after, hard.unwrap_or(UNLIMITED_TARGET));
        assert_eq!(getrlimit(Resource::Nofile).current, Some(after));
        // Raising again changes nothing.
        assert_eq!(raise_open_file_limit().unwrap(), (after, after));
        // A tool started by the daemon gets the limit the daemon started with.
        let out =
            crate::linux::tool::run_checked("test", "limits", "sh", &["-c", "ulimit -n"]).unwrap();
        assert_eq!(out.trim(), "512");
    }
}
