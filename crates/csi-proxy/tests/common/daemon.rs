//! The real `csi-proxy` binary on Unix sockets in a temp dir, and how to crash, restart and retry.

use super::loopdisk::mounts_under;
use super::process::signal;
use csi_proxy_client::Connector;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// The daemon with its sockets, kubelet dir, state dir and log in its own temp dir. Dropping it
/// kills the daemon and unmounts whatever is still mounted under the temp dir.
pub struct Daemon {
    pub child: Child,
    pub sockets: PathBuf,
    pub kubelet: PathBuf,
    pub state: PathBuf,
    pub dir: tempfile::TempDir,
    extra: Vec<String>,
    env: Vec<(String, String)>,
}

impl Daemon {
    /// Starts the daemon with the harness's flags plus `extra`, and waits until it serves.
    pub fn start(extra: &[&str]) -> Daemon {
        Daemon::start_env(extra, &[])
    }

    /// As [`Daemon::start`], with environment variables for the daemon.
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = dir.path().join("kubelet");
        std::fs::create_dir_all(&kubelet).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut d = Daemon {
            child: spawn(dir.path(), &kubelet, &extra, &env),
            sockets: dir.path().join("run"),
            state: dir.path().join("state"),
            kubelet,
            dir,
            extra,
            env,
        };
        d.wait_ready();
        d
    }

    /// As [`Daemon::start`] with `--profiles`: `profiles` is given the daemon's directory (its
    /// default socket directory is `<dir>/run`) and returns the file's text.
    pub fn start_profiled(profiles: impl FnOnce(&Path) -> String, extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = dir.path().join("kubelet");
        std::fs::create_dir_all(&kubelet).unwrap();
        let file = dir.path().join("profiles.toml");
        std::fs::write(&file, profiles(dir.path())).unwrap();
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        extra.push(format!("--profiles={}", file.display()));
        let mut d = Daemon {
            child: spawn(dir.path(), &kubelet, &extra, &[]),
            sockets: dir.path().join("run"),
            state: dir.path().join("state"),
            kubelet,
            dir,
            extra,
            env: Vec::new(),
        };
        d.wait_ready();
        d
    }

    fn spawn(&self) -> Child {
        spawn(self.dir.path(), &self.kubelet, &self.extra, &self.env)
    }

    /// Waits until the last socket accepts connections: it is bound last, and a socket file
    /// left by a killed daemon exists but refuses connections until a new daemon rebinds it.
    pub fn wait_ready(&mut self) {
        let last = self.sockets.join("csi-proxy-iscsi-v1alpha2.sock");
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&last).is_err() {
            if let Ok(Some(s)) = self.child.try_wait() {
                panic!("daemon exited at start ({s}); log:\n{}", self.log_tail());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "daemon did not serve on its sockets; log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The client crate's connector for this daemon.
    pub fn connector(&self) -> Connector {
        Connector::SocketDir(self.sockets.clone())
    }

    /// A path below the kubelet dir.
    pub fn k(&self, rel: &str) -> String {
        self.kubelet.join(rel).display().to_string()
    }

    /// Whether the process is still running (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `sig` (`-TERM`, `-KILL`, ...) to the daemon, asserting that it was delivered.
    pub fn signal(&self, sig: &str) {
        assert!(
            signal(self.child.id(), sig),
            "kill {sig} {}",
            self.child.id()
        );
    }

    /// Waits for the daemon to exit by itself, for at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(t.elapsed() < limit, "daemon did not stop within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, then reap: a crash, with no chance to clean up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the binary again with the same flags, environment and directories, after a kill or
    /// an exit (a daemon still running is killed first), and waits until it serves.
    pub fn restart(&mut self) {
        self.kill9();
        self.child = self.spawn();
        self.wait_ready();
    }

    /// Crashes the daemon (SIGKILL) while `call` is in flight, restarts it, and retries the
    /// interrupted RPC with `retry` on a new `group`/`version` channel until it succeeds. Only
    /// UNAVAILABLE is retried, for up to 60 s. Returns what the interrupted call got.
    pub async fn kill_restart_retry<R, T, F, Fut>(
        &mut self,
        call: JoinHandle<R>,
        (group, version): (&str, &str),
        what: &str,
        mut retry: F,
    ) -> R
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.kill9();
        let interrupted = call.await.expect("the interrupted call's task");
        self.restart();
        let ch = self.connector().channel(group, version).await.unwrap();
        let what = format!("{what} after the crash");
        retry_unavailable(&what, Duration::from_secs(60), || retry(ch.clone())).await;
        interrupted
    }

    /// Starts another daemon on this one's directories (sockets, state, kubelet) with the
    /// harness's flags, this one's extra flags and environment, plus `extra`; its stderr goes
    /// to `<dir>/<log>`. Not waited for.
    pub fn spawn_another(&self, extra: &[&str], log: &str) -> Child {
        let mut all = self.extra.clone();
        all.extend(extra.iter().map(|s| s.to_string()));
        spawn_logging(self.dir.path(), &self.kubelet, &all, &self.env, log)
    }

    /// Resident memory of the daemon in KiB (`VmRSS` in `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// The daemon's stderr, appended across restarts.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let s = self.log();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
        // A test that failed half-way leaves mounts behind; the temp dir cannot go with them.
        for mp in mounts_under(self.dir.path()) {
            let _ = Command::new("umount").arg(&mp).status();
        }
    }
}

/// Starts the binary on `<dir>/run`, `<dir>/state` and `kubelet`; stderr goes to
/// `<dir>/daemon.log`.
fn spawn(dir: &Path, kubelet: &Path, extra: &[String], env: &[(String, String)]) -> Child {
    spawn_logging(dir, kubelet, extra, env, "daemon.log")
}

fn spawn_logging(
    dir: &Path,
    kubelet: &Path,
    extra: &[String],
    env: &[(String, String)],
    log: &str,
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(log))
        .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_csi-proxy"));
    cmd.arg(format!("-kubelet-path={}", kubelet.display()))
        .arg("--socket-dir")
        .arg(dir.join("run"))
        .arg(format!("--state-dir={}", dir.join("state").display()))
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // The daemon takes -v once: a test that sets its own level keeps it.
    let sets_level = extra
        .iter()
        .map(String::as_str)
        .any(|a| a == "-v" || a == "--v" || a.starts_with("-v=") || a.starts_with("--v="));
    if !sets_level {
        cmd.arg("-v=2");
    }
    if !every_process_readable() {
        cmd.arg("--skip-unreadable-processes");
    }
    cmd.spawn().unwrap()
}

/// Whether this process may read every other process's descriptors (root with all the
/// capabilities of every process, as on a node). Where it may not (this VM's init holds one
/// its root lacks), the daemon's in-use check would refuse every write, naming that process,
/// so the tests' daemons are told to skip what they cannot read.
pub fn every_process_readable() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().all(|p| {
        let fds = p.path().join("fd");
        match std::fs::read_dir(&fds) {
            Ok(mut fds) => match fds.next() {
                Some(Ok(fd)) => std::fs::read_link(fd.path()).map_or_else(
                    |e| e.kind() != std::io::ErrorKind::PermissionDenied,
                    |_| true,
                ),
                _ => true,
            },
            Err(e) => e.kind() != std::io::ErrorKind::PermissionDenied,
        }
    })
}

/// Runs `f` until it succeeds; only UNAVAILABLE (the daemon not up yet, or the object still
/// held by work a deadline cut off) is retried, for up to `limit`.
pub async fn retry_unavailable<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let t = Instant::now();
    loop {
        match f().await {
            Ok(v) => return v,
            Err(s) if s.code() == Code::Unavailable && t.elapsed() < limit => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => panic!("{what}: the retry failed: {s:?}"),
        }
    }
}
