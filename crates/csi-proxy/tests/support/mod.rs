//! Shared by the end-to-end tests on real block devices: the daemon binary in a temp dir, loop
//! disks that detach themselves, and the skip rule for machines where this cannot run.
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `SKIPPED: why` unless this process is root on Linux with `losetup`: loop devices need both.
pub fn can_use_loop_devices() -> bool {
    let root = rustix_is_root();
    let losetup = Command::new("losetup")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !root || !losetup {
        eprintln!(
            "SKIPPED: loop-device tests need root and losetup (root: {root}, losetup: {losetup})"
        );
        return false;
    }
    true
}

fn rustix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// The real daemon with its sockets, kubelet dir and state dir in a temp dir. Dropping it kills
/// the daemon and unmounts whatever is still mounted under the temp dir.
pub struct Daemon {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub sockets: PathBuf,
    pub kubelet: PathBuf,
    extra: Vec<String>,
}

impl Daemon {
    /// Starts the daemon with `extra` flags and waits for its sockets.
    pub fn start(extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = dir.path().join("kubelet");
        std::fs::create_dir_all(&kubelet).unwrap();
        let sockets = dir.path().join("run");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let child = spawn(dir.path(), &sockets, &kubelet, &extra);
        let d = Daemon {
            child,
            dir,
            sockets,
            kubelet,
            extra,
        };
        d.wait_ready();
        d
    }

    /// Kills the daemon (SIGKILL) and starts it again on the same directories.
    pub fn restart_after_kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.dir.path(), &self.sockets, &self.kubelet, &self.extra);
        // The old sockets stay behind after SIGKILL; wait for the new daemon to answer.
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(self.sockets.join("csi-proxy-volume-v1.sock"))
            .is_err()
        {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "daemon did not restart"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_ready(&self) {
        let last = self.sockets.join("csi-proxy-iscsi-v1alpha2.sock");
        let t = Instant::now();
        while !last.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "daemon did not create its sockets; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The client crate's connector for this daemon.
    pub fn connector(&self) -> csi_proxy_client::Connector {
        csi_proxy_client::Connector::SocketDir(self.sockets.clone())
    }

    /// A path under the kubelet dir.
    pub fn k(&self, rel: &str) -> String {
        self.kubelet.join(rel).display().to_string()
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// The state dir given to the daemon.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }
}

fn spawn(dir: &Path, sockets: &Path, kubelet: &Path, extra: &[String]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("daemon.log"))
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("-kubelet-path={}", kubelet.display()))
        .arg("--socket-dir")
        .arg(sockets)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(extra)
        .arg("-v=2")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Mount points under `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    v
}

/// Whether `path` is a mount point now.
pub fn is_mounted(path: &Path) -> bool {
    mounts_under(path).iter().any(|p| p == path)
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for mp in mounts_under(self.dir.path()) {
            let _ = Command::new("umount").arg(&mp).status();
        }
    }
}

/// A loop device over a sparse file, attached with partition scanning; detached on drop.
pub struct LoopDisk {
    /// `/dev/loopN`.
    pub dev: String,
    /// The backing file: the disk's serial number through the API.
    pub file: PathBuf,
}

impl LoopDisk {
    /// A new loop disk of `mib` MiB backed by a file in `dir`.
    pub fn new(dir: &Path, name: &str, mib: u64) -> LoopDisk {
        let file = dir.join(name);
        let f = std::fs::File::create(&file).unwrap();
        f.set_len(mib << 20).unwrap();
        drop(f);
        let out = Command::new("losetup")
            .args(["-f", "-P", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        LoopDisk { dev, file }
    }

    /// Grows the backing file (the disk grows at the next Rescan).
    pub fn grow_to(&self, mib: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.file)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
    }

    /// The serial number the daemon reports for it.
    pub fn serial(&self) -> String {
        self.file.display().to_string()
    }

    /// Runs a command on the device (e.g. `mkfs.ext4 -q`), asserting success.
    pub fn run(&self, program: &str, args: &[&str], on: &str) {
        let out = Command::new(program).args(args).arg(on).output().unwrap();
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}
