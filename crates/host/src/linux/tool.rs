//! Running the filesystem tools (`mkfs.*`, `resize2fs`, `xfs_growfs`, `e2fsck`).
//!
//! Linux has no system call that creates or grows an ext4 or xfs filesystem, so these are the
//! one place the Linux host starts a process. Arguments are never secrets. A tool dies with the
//! daemon when the daemon dies (a retry after a crash never races an orphaned mkfs); a daemon
//! asked to stop waits for running tools instead (docs/install.md, "Linux").

use super::os::{LinuxOs, Ran};
use csi_proxy_core::{Error, Kind, Result};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// What a tool printed when it failed.
#[derive(Debug)]
pub struct Failure {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Its standard error and output, trimmed.
    pub output: String,
}

/// How long `program` may run before it is stopped: every tool reads a tenant's content while
/// the disk is held, and a crafted filesystem can keep a checker or a resizer busy for ever.
/// An interrupted mkfs is redone from its pending record; blkid only reads. resize2fs and e2fsck get the longest limit, as
/// stopping an offline resize2fs moving metadata can leave the filesystem needing a check
/// (the message says so; the retry's resize2fs asks for e2fsck -f, which the daemon runs).
pub fn time_limit(program: &str) -> Duration {
    match program {
        "blkid" => Duration::from_secs(60),
        "resize2fs" | "e2fsck" => LONGEST_TIME_LIMIT,
        _ => Duration::from_secs(20 * 60),
    }
}

/// The longest [`time_limit`] of any tool: a stopping daemon waits for its tools that long at
/// most, so the systemd unit's `TimeoutStopSec` must be longer (checked by a test).
pub const LONGEST_TIME_LIMIT: Duration = Duration::from_secs(60 * 60);

/// What a status message says after a tool was stopped at its limit, besides the retry.
fn stopped_leaves(program: &str) -> &'static str {
    match program {
        "resize2fs" | "e2fsck" => {
            "the filesystem may need a check (e2fsck -f) before it is mounted; a retry runs it"
        }
        _ => "nothing was reported done",
    }
}

/// How much of each output stream of a tool is kept in memory: its first and last `KEPT`
/// bytes (a reason is at one end or the other; a tenant's filesystem can make e2fsck print
/// without end).
const KEPT: usize = 32 << 10;
/// How much of a tool's output a status message carries: its first and last `SHOWN` bytes.
const SHOWN: usize = 1536;

/// Runs `program args…` on this machine; see [`run_on`].
pub fn run(
    op: &str,
    object: &str,
    program: &str,
    args: &[&str],
) -> Result<String, Result<Failure>> {
    run_on(&*super::os::system(), op, object, program, args)
}

/// Runs `program args…` through `os` with no input, for at most its [`time_limit`];
/// `Ok(stdout)` on exit 0, `Err(Ok(failure))` on another exit, `Err(Err(error))` when it could
/// not be started or ran past its limit (UNAVAILABLE: it was stopped, a retry starts over).
pub fn run_on(
    os: &dyn LinuxOs,
    op: &str,
    object: &str,
    program: &str,
    args: &[&str],
) -> Result<String, Result<Failure>> {
    run_limited(os, op, object, program, args, Some(time_limit(program)))
}

fn run_limited(
    os: &dyn LinuxOs,
    op: &str,
    object: &str,
    program: &str,
    args: &[&str],
    limit: Option<Duration>,
) -> Result<String, Result<Failure>> {
    let Ran {
        code,
        stdout,
        stderr,
    } = os.run(program, args, limit).map_err(|e| {
        Err(match (e.kind(), limit) {
            (std::io::ErrorKind::NotFound, _) => Error::new(
                Kind::FailedPrecondition,
                op,
                object,
                format!("{program} is not installed on this host"),
            ),
            (std::io::ErrorKind::TimedOut, Some(limit)) => Error::new(
                Kind::Unavailable,
                op,
                object,
                format!(
                    "{program} did not finish within {} s and was stopped, which frees the \
                     disk; {}, a retry starts it again",
                    limit.as_secs(),
                    stopped_leaves(program)
                ),
            ),
            _ => Error::io(op, object, &e).context(format!("running {program}")),
        })
    })?;
    if code == Some(0) {
        return Ok(String::from_utf8_lossy(&stdout).into_owned());
    }
    let mut text = String::from_utf8_lossy(&stderr).trim().to_string();
    let stdout = String::from_utf8_lossy(&stdout);
    if !stdout.trim().is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(stdout.trim());
    }
    Err(Ok(Failure {
        code,
        output: reason(&text),
    }))
}

/// What a child process left when it ended.
pub(crate) struct Finished {
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
}

/// Waits for `child` (started with piped stdout and stderr) for at most `limit`, reading both
/// pipes while it runs so a chatty process never blocks on a full pipe. Past the limit it is
/// killed and reaped, and the error is `TimedOut`.
pub(crate) fn finish(mut child: Child, limit: Option<Duration>) -> std::io::Result<Finished> {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut kept = Kept::default();
            let mut buf = vec![0u8; 8192];
            if let Some(mut r) = r {
                loop {
                    match r.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => kept.push(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            }
            kept.into_bytes()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let status = wait(&mut child, limit)?;
    Ok(Finished {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Waits for `child`; past `limit` it is killed, reaped, and `TimedOut` returned. Polls with a
/// growing interval (up to 100 ms): a tool's run is far longer than the first intervals.
fn wait(child: &mut Child, limit: Option<Duration>) -> std::io::Result<ExitStatus> {
    let Some(limit) = limit else {
        return child.wait();
    };
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        std::thread::sleep(pause.min(limit.saturating_sub(start.elapsed())));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// What a failed tool said, on one line: its lines joined with "; ", without the usage text
/// some tools print after the reason (mkfs.xfs's is 28 lines; a status message carries only the
/// reason), and at most its first and last [`SHOWN`] bytes.
fn reason(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("usage:"))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    ends(&joined, SHOWN)
}

/// `text` when it is at most `2 * keep` bytes, else its first and last `keep` bytes (cut at
/// character boundaries) around a note of how much was left out.
fn ends(text: &str, keep: usize) -> String {
    if text.len() <= 2 * keep {
        return text.to_string();
    }
    let mut head = keep;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - keep;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{} [... {} bytes left out ...] {}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// A tool's output stream as kept: the first and last [`KEPT`] bytes, and how many were read.
#[derive(Default)]
struct Kept {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total: usize,
}

impl Kept {
    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        let room = KEPT - self.head.len();
        let (first, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(first);
        bytes = rest;
        if bytes.len() >= KEPT {
            self.tail.clear();
            bytes = &bytes[bytes.len() - KEPT..];
        }
        let over = (self.tail.len() + bytes.len()).saturating_sub(KEPT);
        self.tail.drain(..over);
        self.tail.extend(bytes);
    }

    fn into_bytes(self) -> Vec<u8> {
        let mut out = self.head;
        let left_out = self.total - out.len() - self.tail.len();
        if left_out > 0 {
            out.extend_from_slice(format!("\n[... {left_out} bytes left out ...]\n").as_bytes());
        }
        out.extend(self.tail);
        out
    }
}

/// Prepares `cmd` to start a helper process: it dies with the daemon and gets the open-file
/// limit the daemon started with ([`super::limits`]).
#[allow(unsafe_code, reason = "pre_exec runs a closure between fork and exec")]
pub(crate) fn child_setup(cmd: &mut Command) {
    // SAFETY: the closure makes only async-signal-safe calls (prctl(2), getrlimit(2),
    // setrlimit(2) and an atomic load) in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // prctl(PR_SET_PDEATHSIG): the tool gets SIGKILL when the thread that started it
            // (and so the daemon) dies, instead of running on unseen.
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)?;
            super::limits::restore_in_child()
        });
    }
}

/// As [`run`], with a failed exit turned into an error naming the tool, its exit and output.
pub fn run_checked(op: &str, object: &str, program: &str, args: &[&str]) -> Result<String> {
    run_checked_on(&*super::os::system(), op, object, program, args)
}

/// As [`run_on`], with a failed exit turned into an error naming the tool, its exit and output.
pub fn run_checked_on(
    os: &dyn LinuxOs,
    op: &str,
    object: &str,
    program: &str,
    args: &[&str],
) -> Result<String> {
    run_on(os, op, object, program, args).map_err(|r| match r {
        Ok(f) => f.error(op, object, program, &[]),
        Err(e) => e,
    })
}

impl Failure {
    /// The error for this failure of `program`: FAILED_PRECONDITION when the tool found the
    /// device busy (another process has it open or mounted) or said one of `preconditions`
    /// (reasons that lie with the device, which the caller can act on), INTERNAL otherwise.
    pub fn error(&self, op: &str, object: &str, program: &str, preconditions: &[&str]) -> Error {
        let kind = if ["Device or resource busy"]
            .iter()
            .chain(preconditions)
            .any(|r| self.output.contains(r))
        {
            Kind::FailedPrecondition
        } else {
            Kind::Internal
        };
        Error::new(
            kind,
            op,
            object,
            format!("{program} failed (exit {:?}): {}", self.code, self.output),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failure_keeps_the_reason_and_drops_the_usage_text() {
        let out = "Filesystem must be larger than 300MB.\nUsage: mkfs.xfs\n/* blocksize */\t[-b size=num]\n";
        assert_eq!(super::reason(out), "Filesystem must be larger than 300MB.");
        assert_eq!(super::reason("a\n\n  b  \n"), "a; b");
        assert_eq!(super::reason(""), "");
    }

    #[test]
    fn output_is_kept_and_shown_bounded_at_both_ends() {
        let mut k = super::Kept::default();
        for _ in 0..1000 {
            k.push(&[b'a'; 1000]);
        }
        k.push(b"THE END");
        let kept = k.into_bytes();
        assert!(kept.len() < 2 * super::KEPT + 100, "{}", kept.len());
        assert!(kept.starts_with(b"aaa") && kept.ends_with(b"THE END"));
        let text = format!("first line\n{}\nlast line", "x".repeat(100_000));
        let r = super::reason(&text);
        assert!(r.len() <= 2 * super::SHOWN + 64, "{}", r.len());
        assert!(
            r.starts_with("first line; x") && r.ends_with("x; last line"),
            "{r}"
        );
        assert!(r.contains("bytes left out"), "{r}");
        // Multi-byte characters are never cut.
        let r = super::ends(&"é".repeat(5000), 101);
        assert!(r.contains("bytes left out"));
    }

    #[test]
    fn a_tool_past_its_limit_is_stopped_and_reported_unavailable() {
        let t = std::time::Instant::now();
        let os = super::super::os::system();
        let e = super::run_limited(
            &*os,
            "Op",
            "thing",
            "sleep",
            &["30"],
            Some(std::time::Duration::from_millis(200)),
        )
        .unwrap_err()
        .unwrap_err();
        assert_eq!(e.kind(), csi_proxy_core::Kind::Unavailable);
        assert!(
            e.message().contains("sleep did not finish within"),
            "{}",
            e.message()
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(25),
            "it was stopped, not waited for"
        );
        // Within its limit, output and exit code come back as before.
        let out = super::run_limited(
            &*os,
            "Op",
            "thing",
            "sh",
            &["-c", "echo hi; echo oops >&2; exit 3"],
            Some(std::time::Duration::from_secs(30)),
        )
        .unwrap_err()
        .unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.output, "oops; hi");
        assert_eq!(
            super::time_limit("resize2fs"),
            std::time::Duration::from_secs(3600)
        );
    }

    /// One truth about stopping: the unit's TimeoutStopSec outlasts every tool's limit (it was
    /// 30 min while resize2fs and e2fsck may run 60), so systemd never kills a tool the
    /// daemon still waits for, and the unit's comment names the limits the code has.
    #[test]
    fn the_units_stop_timeout_outlasts_every_tools_limit() {
        let unit = include_str!("../../../../deploy/linux/csi-proxy.service");
        let value = unit
            .lines()
            .find_map(|l| l.strip_prefix("TimeoutStopSec="))
            .expect("TimeoutStopSec in the unit");
        let minutes: u64 = value
            .strip_suffix("min")
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("TimeoutStopSec={value}: expected <N>min"));
        let tools = [
            "blkid",
            "resize2fs",
            "e2fsck",
            "mkfs.ext4",
            "mkfs.xfs",
            "xfs_growfs",
            "btrfs",
            "mount",
            "iscsiadm",
            "sfdisk",
        ];
        for tool in tools {
            assert!(
                super::time_limit(tool) <= super::LONGEST_TIME_LIMIT,
                "{tool}"
            );
        }
        assert!(
            minutes * 60 > super::LONGEST_TIME_LIMIT.as_secs(),
            "TimeoutStopSec={value} is not longer than the longest tool limit"
        );
        let longest = format!(
            "{} minutes for resize2fs",
            super::LONGEST_TIME_LIMIT.as_secs() / 60
        );
        assert!(
            unit.contains(&longest),
            "the unit's comment says {longest:?}"
        );
        assert!(!unit.contains("never cut"), "no tool is unlimited");
    }
}
