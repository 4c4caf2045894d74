//! How two daemons agree on a hand-off, through the state directory only (root's, 0700, never
//! given to a container), so nothing a client reaches can ask a daemon to stop.
//!
//! - `<state-dir>/serving.lock`: the serving daemon holds an exclusive lock on it for its whole
//!   life (`flock` on Linux, `LockFileEx` on Windows, both released by the kernel when the
//!   process ends, however it ends). `<state-dir>/serving.pid` names that daemon, for messages.
//! - `<state-dir>/take-over.lock`: held by a daemon started with `--take-over` until it holds
//!   `serving.lock`, so two take-overs never interleave their renames.
//! - `<state-dir>/take-over`: the request, written (temporary file, then rename) by the new
//!   daemon once its endpoints have their final names; it holds the new daemon's pid. The
//!   serving daemon polls for it and stops as asked; the new daemon removes it once it holds
//!   `serving.lock`, and a normal start removes a stale one.
//!
//! - `<state-dir>/serving.listen`: where and how the serving daemon's endpoints listen (socket
//!   dir and group, or the pipes' SDDL). A take-over must serve the very same endpoints: other
//!   socket paths would leave the old ones without a server, and a pipe keeps the security
//!   descriptor its first instance was made with for as long as any instance exists, so a new
//!   SDDL would never take effect.
//!
//! A poll (every [`POLL`]) rather than inotify: the request is the only thing watched, a stat
//! every 50 ms costs nothing measurable, it works the same on Windows, and the delay is not a
//! gap for clients: both daemons serve meanwhile (the paths already name the new one's).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// How often a serving daemon looks for a take-over request.
pub const POLL: Duration = Duration::from_millis(50);

const SERVING_LOCK: &str = "serving.lock";
const SERVING_PID: &str = "serving.pid";
const TAKE_OVER_LOCK: &str = "take-over.lock";
const REQUEST: &str = "take-over";
const SERVING_LISTEN: &str = "serving.listen";

/// How this daemon starts, as the locks found it.
#[derive(Debug)]
pub enum Start {
    /// No daemon serves with this state directory: this one does, holding the lock.
    Fresh(ServingLock),
    /// Another daemon serves and `--take-over` was given.
    TakeOver(TakeOver),
}

/// The held `serving.lock`.
#[derive(Debug)]
pub struct ServingLock {
    file: File,
}

/// The lock is released when the process ends, not before: in-flight host calls (a format)
/// still run after the endpoints closed, and the next daemon's calls that take a disk wait for
/// exactly that.
static HELD: OnceLock<File> = OnceLock::new();

impl ServingLock {
    /// Keeps the lock until the process exits (or [`release`]).
    pub fn hold_until_exit(self) {
        let _ = HELD.set(self.file);
    }
}

/// Lets `serving.lock` go while the process lives on: only once nothing of this daemon runs
/// any more (its runtime, and with it every host call, has ended), so the next daemon's calls
/// that take a disk find nobody working on it.
pub fn release() {
    if let Some(f) = HELD.get()
        && let Err(e) = f.unlock()
    {
        tracing::warn!("cannot unlock {SERVING_LOCK}: {e}");
    }
}

/// A take-over in progress: `take-over.lock` held, `serving.lock` not yet.
#[derive(Debug)]
pub struct TakeOver {
    dir: PathBuf,
    listen: String,
    serving: File,
    _take_over: File,
    /// The pid the serving daemon recorded, when readable.
    pub previous: Option<u32>,
}

/// Opens (creating, mode 0600) a file of the state directory for locking.
fn lock_file(dir: &Path, name: &str) -> io::Result<File> {
    let path = dir.join(name);
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    o.open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Writes `text` to `<dir>/<name>` through a temporary file renamed over it, so a reader sees
/// the old content or the new, never a part.
fn write_replacing(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut o = OpenOptions::new();
    // create_new: O_EXCL, which also refuses a link planted at the name.
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(file = %path.display(), "cannot remove: {e}");
    }
}

/// Why [`start`] refused: its message, and whether only another daemon serving with this state
/// directory stood in the way (not a failure of this one: a service manager should not
/// restart it for that, see the daemon's service status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    message: String,
    /// Another daemon serves, and this one was not asked to take over.
    pub another_serves: bool,
}

impl From<String> for Refused {
    fn from(message: String) -> Self {
        Self {
            message,
            another_serves: false,
        }
    }
}

impl From<Refused> for String {
    fn from(r: Refused) -> Self {
        r.message
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::ops::Deref for Refused {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

/// Takes `serving.lock` in `state_dir` (already checked and created by the host's state-dir
/// rules). Held by another daemon: a hand-off with `take_over`, else refused with the pid of
/// the serving daemon and what to do. `listen` describes where this daemon's endpoints
/// listen ([`crate::daemon::listen_key`]); a take-over is refused unless the serving daemon
/// recorded the same.
pub fn start(state_dir: &Path, take_over: bool, listen: &str) -> Result<Start, Refused> {
    let ctx = |e: io::Error| Refused::from(format!("--state-dir {}: {e}", state_dir.display()));
    let serving = lock_file(state_dir, SERVING_LOCK).map_err(ctx)?;
    match serving.try_lock() {
        Ok(()) => {
            let lock = ServingLock { file: serving };
            // A request left by a take-over that died before this start is stale.
            remove(&state_dir.join(REQUEST));
            record_pid(state_dir);
            record_listen(state_dir, listen);
            if take_over {
                tracing::info!(
                    "--take-over: no csi-proxy serves with this state directory; starting normally"
                );
            }
            Ok(Start::Fresh(lock))
        }
        Err(TryLockError::WouldBlock) => {
            let previous = read_pid(&state_dir.join(SERVING_PID));
            let who = previous.map_or("another csi-proxy".to_string(), |p| {
                format!("another csi-proxy (pid {p})")
            });
            if !take_over {
                return Err(Refused {
                    message: format!(
                        "{who} is serving with --state-dir {} (it holds {}); to replace it \
                         without a failed call, start this one with --take-over, or stop that \
                         one first",
                        state_dir.display(),
                        state_dir.join(SERVING_LOCK).display()
                    ),
                    another_serves: true,
                });
            }
            let recorded = std::fs::read_to_string(state_dir.join(SERVING_LISTEN)).ok();
            if recorded.as_deref().map(str::trim) != Some(listen) {
                return Err(format!(
                    "{who} serves endpoints that listen as {}, this one's would as {}: \
                     a take-over serves the same endpoints (the same --socket-dir and \
                     --socket-group, or --pipe-sddl); stop that one first to change them",
                    recorded
                        .as_deref()
                        .map_or("(not recorded)".into(), |r| shown(r.trim())),
                    shown(listen)
                )
                .into());
            }
            let take = lock_file(state_dir, TAKE_OVER_LOCK).map_err(ctx)?;
            match take.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(format!(
                        "another csi-proxy is already taking over from {who} (it holds {})",
                        state_dir.join(TAKE_OVER_LOCK).display()
                    )
                    .into());
                }
                Err(TryLockError::Error(e)) => return Err(ctx(e)),
            }
            tracing::info!(previous = ?previous, "taking over from {who}");
            Ok(Start::TakeOver(TakeOver {
                dir: state_dir.to_path_buf(),
                listen: listen.to_string(),
                serving,
                _take_over: take,
                previous,
            }))
        }
        Err(TryLockError::Error(e)) => Err(ctx(e)),
    }
}

/// A listen key ([`crate::daemon::listen_key`]) as an operator reads it: the key keeps its
/// recorded form (`group None`, `group Some(990)`), so a take-over from a daemon that recorded
/// it still matches, and only the message says `no --socket-group` and `group 990`.
fn shown(key: &str) -> String {
    let Some((head, group)) = key.rsplit_once(" group ") else {
        return format!("\"{key}\"");
    };
    let group = match group {
        "None" => "no --socket-group (the daemon's own group)".to_string(),
        g => match g.strip_prefix("Some(").and_then(|g| g.strip_suffix(')')) {
            Some(gid) => format!("group {gid}"),
            None => format!("group {g}"),
        },
    };
    format!("\"{head}\", {group}")
}

fn record_listen(dir: &Path, listen: &str) {
    if let Err(e) = write_replacing(dir, SERVING_LISTEN, &format!("{listen}\n")) {
        tracing::warn!("cannot record the endpoints in {}: {e}", dir.display());
    }
}

fn record_pid(dir: &Path) {
    if let Err(e) = write_replacing(dir, SERVING_PID, &format!("{}\n", std::process::id())) {
        tracing::warn!("cannot record the pid in {}: {e}", dir.display());
    }
}

impl TakeOver {
    /// Asks the serving daemon to stop (every endpoint already has its final name and is
    /// served by this process).
    pub fn request(&self) -> Result<(), String> {
        write_replacing(&self.dir, REQUEST, &format!("{}\n", std::process::id())).map_err(|e| {
            format!(
                "cannot write the take-over request {}: {e}",
                self.dir.join(REQUEST).display()
            )
        })
    }

    /// Waits (on a blocking thread) until the previous daemon has exited and this one holds
    /// `serving.lock`; removes the request and records this pid.
    pub async fn wait(self) -> Result<ServingLock, String> {
        let TakeOver {
            dir,
            listen,
            serving,
            _take_over,
            ..
        } = self;
        let serving = tokio::task::spawn_blocking(move || serving.lock().map(|()| serving))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("waiting for {}: {e}", dir.join(SERVING_LOCK).display()))?;
        remove(&dir.join(REQUEST));
        record_pid(&dir);
        record_listen(&dir, &listen);
        drop(_take_over);
        Ok(ServingLock { file: serving })
    }
}

/// Completes when another daemon has asked this one to hand over (a request naming another
/// pid appears in `state_dir`); returns that pid.
pub async fn requested(state_dir: PathBuf) -> u32 {
    let path = state_dir.join(REQUEST);
    let me = std::process::id();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(pid) = read_pid(&path)
            && pid != me
        {
            return pid;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal names the groups as an operator writes them, never `None` or `Some(990)`.
    #[test]
    fn a_listen_key_is_shown_without_rust_debug_forms() {
        assert_eq!(
            shown("unix sockets in /run/csi-proxy group None"),
            "\"unix sockets in /run/csi-proxy\", no --socket-group (the daemon's own group)"
        );
        assert_eq!(
            shown("unix sockets in /run/csi-proxy group Some(990)"),
            "\"unix sockets in /run/csi-proxy\", group 990"
        );
        assert_eq!(
            shown("named pipes with SDDL D:P"),
            "\"named pipes with SDDL D:P\""
        );
    }

    /// One daemon per state directory: a second start is refused naming the first's pid; a
    /// take-over is admitted once (a second take-over meanwhile is refused); the request is
    /// seen by the serving side; the take-over gets the lock once the first lets it go.
    #[tokio::test]
    async fn the_state_directory_admits_one_server_and_one_take_over() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(REQUEST), "1\n").unwrap();
        let Start::Fresh(first) = start(dir.path(), false, "L").unwrap() else {
            panic!("the first start serves");
        };
        assert!(
            !dir.path().join(REQUEST).exists(),
            "a stale request is removed"
        );
        let e = start(dir.path(), false, "L").unwrap_err();
        assert!(
            e.contains(&format!("pid {}", std::process::id())) && e.contains("--take-over"),
            "{e}"
        );
        assert!(e.another_serves, "{e}");
        let Start::TakeOver(t) = start(dir.path(), true, "L").unwrap() else {
            panic!("a take-over while the first serves");
        };
        assert_eq!(t.previous, Some(std::process::id()));
        let e = start(dir.path(), true, "L").unwrap_err();
        assert!(e.contains("already taking over"), "{e}");
        assert!(!e.another_serves, "a refused take-over is a failure: {e}");
        let e = start(dir.path(), true, "M").unwrap_err();
        assert!(
            e.contains("\"L\"") && e.contains("\"M\"") && e.contains("same endpoints"),
            "{e}"
        );
        // Our own pid in the request is not a request to us; another's is.
        t.request().unwrap();
        let own = tokio::time::timeout(POLL * 4, requested(dir.path().into())).await;
        assert!(own.is_err(), "a request naming this process is ignored");
        std::fs::write(dir.path().join(REQUEST), "4242\n").unwrap();
        assert_eq!(requested(dir.path().into()).await, 4242);
        let waiting = tokio::spawn(t.wait());
        tokio::time::sleep(POLL).await;
        assert!(!waiting.is_finished(), "the lock is still held");
        drop(first);
        waiting.await.unwrap().expect("the lock, once released");
        assert!(!dir.path().join(REQUEST).exists());
    }
}
