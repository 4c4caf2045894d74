//! Running the filesystem tools (`mkfs.*`, `resize2fs`, `xfs_growfs`, `e2fsck`).
//!
//! Linux has no system call that creates or grows an ext4 or xfs filesystem, so these are the
//! one place the Linux host starts a process. Arguments are never secrets. A tool dies with the
//! daemon when the daemon dies (a retry after a crash never races an orphaned mkfs); a daemon
//! asked to stop waits for running tools instead (see README, "Stopping").

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

/// How long `program` may run before it is stopped. `None`: never stopped, because cutting it
/// off can damage the filesystem it works on (an offline resize2fs moving metadata, an e2fsck
/// repairing it); the disk stays held until it ends, and a stopping daemon waits for it.
/// The others are safe to stop: an interrupted mkfs is redone from its pending record,
/// xfs_growfs and btrfs resize commit in kernel transactions, blkid only reads.
pub fn time_limit(program: &str) -> Option<Duration> {
    match program {
        "resize2fs" | "e2fsck" => None,
        "blkid" => Some(Duration::from_secs(60)),
        _ => Some(Duration::from_secs(20 * 60)),
    }
}

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
    run_limited(os, op, object, program, args, time_limit(program))
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
                    "{program} did not finish within {} s and was stopped; nothing was \
                     reported done, a retry starts it again",
                    limit.as_secs()
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
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
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
/// reason).
fn reason(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("usage:"))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
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
        assert_eq!(super::time_limit("resize2fs"), None, "never cut off");
    }
}
