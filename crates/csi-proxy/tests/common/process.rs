//! The processes around the daemon: the tools it runs (found, stopped, continued) and
//! open-file limits.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A direct child of `ppid` whose name starts with one of `prefixes`: its pid and name.
pub fn child_named(ppid: u32, prefixes: &[&str]) -> Option<(u32, String)> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let parent = stat[close + 1..].split_whitespace().nth(1);
        let comm = &stat[open + 1..close];
        if parent == Some(&ppid.to_string())
            && prefixes.iter().any(|p| comm.starts_with(p))
            && let Ok(pid) = stat[..open].trim().parse()
        {
            return Some((pid, comm.to_string()));
        }
    }
    None
}

/// Waits up to `limit` for [`child_named`] to find one. Polls every 200 µs on a blocking
/// thread, so that a tool that runs for a few milliseconds is still caught while it runs.
pub async fn wait_for_child(
    ppid: u32,
    prefixes: &'static [&'static str],
    limit: Duration,
) -> Option<(u32, String)> {
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Some(found) = child_named(ppid, prefixes) {
                return Some(found);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        None
    })
    .await
    .unwrap()
}

/// Sends a signal (`-STOP`, `-CONT`, `-TERM`, ...) with kill(1); says whether it was delivered.
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// A process stopped with SIGSTOP, continued when this drops, so that a failing test never
/// leaves it frozen.
pub struct Thaw(pub u32);

impl Thaw {
    /// Stops `pid` until the returned guard drops.
    pub fn stop(pid: u32) -> Thaw {
        let guard = Thaw(pid);
        signal(pid, "-STOP");
        guard
    }
}

impl Drop for Thaw {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// The soft and hard open-file limits of `pid` ("Max open files" in `/proc/<pid>/limits`;
/// `unlimited` is `u64::MAX`).
pub fn nofile_limits(pid: u32) -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    let mut v = rest.split_whitespace().map(|f| match f {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    });
    Some((v.next()??, v.next()??))
}

/// Sets the soft open-file limit of `pid` to `soft`, keeping its hard limit (`prlimit`,
/// util-linux).
pub fn set_soft_nofile(pid: u32, soft: u64) -> Result<(), String> {
    let ok = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={soft}:")])
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("prlimit: {e}"))?
        .success();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "cannot set the soft open-file limit of {pid} to {soft}"
        ))
    }
}

/// CPU time `pid` has used so far, user plus system (`/proc/<pid>/stat`, fields 14 and 15, in
/// clock ticks of 10 ms on Linux).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_comm = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or("");
    // After "pid (comm)": state is field 3, so utime (14) and stime (15) are the 12th and 13th.
    let ticks: u64 = after_comm
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// How many descriptors `pid` has open.
pub fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|r| r.count() as u64)
        .unwrap_or(0)
}

/// Writes `<dir>/<tool>`, a shell script that runs `before` and then the real tool, and returns
/// the `PATH` that finds the wrapper first. The daemon runs its tools by name, so a daemon started
/// with that `PATH` goes through the wrapper: a test can hold a tool back or crash inside it.
pub fn wrap_tool(dir: &std::path::Path, tool: &str, before: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var("PATH").unwrap_or_default();
    let real = std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file() && !p.starts_with(dir))
        .unwrap_or_else(|| panic!("{tool} is installed"));
    let script = dir.join(tool);
    std::fs::write(
        &script,
        format!("#!/bin/sh\n{before}\nexec '{}' \"$@\"\n", real.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{path}:/usr/sbin:/sbin", dir.display())
}

/// [`wrap_tool`] whose first run creates `<dir>/<tool>.held` and then waits until it is killed
/// (the daemon's tools die with it), while later runs are the real tool. Returns the `PATH` and
/// the marker's path: a crash lands inside the tool for sure, whatever the machine's speed, and
/// the retry after it runs the real one.
pub fn hold_first_run(dir: &std::path::Path, tool: &str) -> (String, std::path::PathBuf) {
    let marker = dir.join(format!("{tool}.held"));
    let m = marker.display();
    let path = wrap_tool(
        dir,
        tool,
        &format!("if [ ! -e '{m}' ]; then touch '{m}'; exec sleep 3600; fi"),
    );
    (path, marker)
}

/// Runs a tool and returns what it did; panics only when it cannot be started.
pub fn output(program: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// Runs a tool as the test's own set-up or clean-up (`mount`, `umount`, `resize2fs`); panics,
/// naming it and what it said, when it fails.
pub fn run(program: &str, args: &[&str]) {
    let out = output(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
