//! The processes measured: a daemon in its own temp dir, the in-process floor, and what
//! /proc says of a process (CPU time, threads, RSS).

use super::*;

/// A daemon in its own temp dir (sockets, kubelet root, log).
pub(super) struct Daemon {
    pub(super) child: Child,
    pub(super) dir: tempfile::TempDir,
}

impl Daemon {
    pub(super) fn spawn(bin: &Path) -> Result<Daemon, String> {
        Self::spawn_with(bin, |dir| {
            vec![format!("--state-dir={}", dir.join("state").display())]
        })
    }

    /// Starts `bin --kubelet-path=<dir>/kubelet --socket-dir=<dir>/run` plus the arguments
    /// `extra` makes from the temp dir.
    pub(super) fn spawn_with(
        bin: &Path,
        extra: impl FnOnce(&Path) -> Vec<String>,
    ) -> Result<Daemon, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        std::fs::create_dir_all(dir.path().join("kubelet"))
            .map_err(|e| format!("kubelet dir: {e}"))?;
        let log = std::fs::File::create(dir.path().join("daemon.log"))
            .map_err(|e| format!("daemon log: {e}"))?;
        let child = Command::new(bin)
            .arg(format!(
                "--kubelet-path={}",
                dir.path().join("kubelet").display()
            ))
            .arg(format!("--socket-dir={}", dir.path().join("run").display()))
            .args(extra(dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        Ok(Daemon { child, dir })
    }

    pub(super) fn connector(&self) -> Connector {
        Connector::SocketDir(self.dir.path().join("run"))
    }

    pub(super) fn kubelet(&self) -> PathBuf {
        self.dir.path().join("kubelet")
    }

    pub(super) fn rss(&self) -> u64 {
        rss_of(self.child.id())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CPU time process `pid`'s threads now alive have used (the first field of each
/// `/proc/<pid>/task/<tid>/schedstat`, nanoseconds on a CPU).
pub(super) fn cpu_of(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// The CPU time server `pid` spends per call over `n` sequential calls: all its threads, kernel
/// and user time, without the waits. Less noisy than a latency on a shared machine, as it does
/// not count the time the server waits for a core.
pub(super) async fn cpu_per_call<F, Fut>(
    pid: u32,
    n: usize,
    mut call: F,
) -> Result<Duration, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Status>>,
{
    let before = cpu_of(pid);
    for _ in 0..n {
        call().await?;
    }
    Ok(per_call(cpu_of(pid).saturating_sub(before), n))
}

/// `total` divided among `calls` calls.
pub(super) fn per_call(total: Duration, calls: usize) -> Duration {
    total / u32::try_from(calls.max(1)).unwrap_or(u32::MAX)
}

/// The threads of process `pid` now (its entries in `/proc/<pid>/task`).
pub(super) fn threads_of(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count() as u64)
}

pub(super) fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The floor: the daemon's services over the same Linux hosts, called in this process.
pub(super) struct Direct {
    pub(super) fs: FilesystemService,
    pub(super) disk: DiskService,
    pub(super) volume: VolumeService,
}

impl Direct {
    /// Built as the daemon builds them (crates/csi-proxy/src/hosts.rs), over the same kubelet
    /// root and a state dir of their own.
    pub(super) fn new(kubelet: &Path, state: &Path) -> Result<Direct, String> {
        use csi_proxy_host::linux;
        let policy = Arc::new(
            PathPolicy::new(PathStyle::Posix, &kubelet.display().to_string(), &[])
                .map_err(|e| e.to_string())?,
        );
        let fs = FilesystemService::new(
            Arc::new(linux::filesystem::LinuxFilesystemHost::new()),
            policy.clone(),
        );
        let disk = DiskService::new(Arc::new(linux::disk::LinuxDiskHost::new()), policy);
        let volume = VolumeService::new(
            Arc::new(linux::volume::LinuxVolumeHost::new(
                state,
                linux::volume::FsType::default(),
            )),
            fs.clone(),
        );
        Ok(Direct { fs, disk, volume })
    }
}

/// Polls until every endpoint answers its health check with SERVING.
pub(super) async fn wait_all_serving(c: &Connector, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    for group in csi_proxy_api::GROUPS {
        for version in csi_proxy_api::versions(group).unwrap_or_default() {
            wait_serving(c, group, version, t + limit).await?;
        }
    }
    Ok(())
}

/// Polls until one endpoint answers its health check with SERVING, at most until `until`.
pub(super) async fn wait_serving(
    c: &Connector,
    group: &str,
    version: &str,
    until: Instant,
) -> Result<(), String> {
    loop {
        if let Ok(ServingStatus::Serving) = health::check(c, group, version, "").await {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(format!("{group} {version} did not answer in time"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
