//! Running the filesystem tools (`mkfs.*`, `resize2fs`, `xfs_growfs`, `e2fsck`).
//!
//! Linux has no system call that creates or grows an ext4 or xfs filesystem, so these are the
//! one place the Linux host starts a process. Arguments are never secrets; the child dies with
//! the daemon so a retry after a crash never races an orphaned mkfs.

use csi_proxy_core::{Error, Kind, Result};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// What a tool printed when it failed.
#[derive(Debug)]
pub struct Failure {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Its standard error and output, trimmed.
    pub output: String,
}

/// Runs `program args…` with no input; `Ok(stdout)` on exit 0, `Err(Ok(failure))` on another
/// exit, `Err(Err(error))` when it could not be started.
pub fn run(
    op: &str,
    object: &str,
    program: &str,
    args: &[&str],
) -> Result<String, Result<Failure>> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("LC_ALL", "C");
    child_setup(&mut cmd);
    let out = cmd.output().map_err(|e| {
        Err(if e.kind() == std::io::ErrorKind::NotFound {
            Error::new(
                Kind::FailedPrecondition,
                op,
                object,
                format!("{program} is not installed on this host"),
            )
        } else {
            Error::io(op, object, &e).context(format!("starting {program}"))
        })
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let mut text = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.trim().is_empty() {
        if !text.is_empty() {
            text.push_str(" / ");
        }
        text.push_str(stdout.trim());
    }
    Err(Ok(Failure {
        code: out.status.code(),
        output: reason(&text),
    }))
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
    run(op, object, program, args).map_err(|r| match r {
        Ok(f) => f.error(op, object, program),
        Err(e) => e,
    })
}

impl Failure {
    /// The error for this failure of `program`: FAILED_PRECONDITION when the tool found the
    /// device busy (another process has it open or mounted: the caller can act on that),
    /// INTERNAL otherwise.
    pub fn error(&self, op: &str, object: &str, program: &str) -> Error {
        let kind = if self.output.contains("Device or resource busy") {
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
}
