//! A real iSCSI target for tests: Debian's userspace `tgtd` on 127.0.0.1, on a free port with its
//! own control port, one target backed by a sparse file; always stopped on drop.
//! Shared by host and daemon tests through `#[path]`.
#![allow(dead_code)] // each test file uses part of it

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `tgtd`.
pub struct Tgt {
    child: Child,
    /// The portal port on 127.0.0.1.
    pub port: u16,
    control: u16,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

/// Why the target cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    for tool in ["tgtd", "tgtadm"] {
        let found = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(tool).exists());
        if !found {
            return Some(format!("{tool} is not installed (Debian package tgt)"));
        }
    }
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        != 0
    {
        return Some("tgtd needs root".into());
    }
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Tgt {
    /// Starts `tgtd` and waits (bounded) until its portal and control channel answer.
    pub fn start() -> Tgt {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("tgtd.log");
        let port = free_port();
        // The control port names tgtd's management socket (/var/run/tgtd/socket.N): pick one no
        // other tgtd uses.
        static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        let mut control = 0;
        for _ in 0..1000 {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // tgtd accepts control ports below 32768.
            control = 1000 + (std::process::id() % 3000) as u16 * 10 + n % 10;
            if !std::path::Path::new(&format!("/var/run/tgtd/socket.{control}")).exists() {
                break;
            }
        }
        let child = Command::new("tgtd")
            .args(["-f", "-C", &control.to_string(), "--iscsi"])
            .arg(format!("portal=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.path().join("tgtd.err")).unwrap())
            .spawn()
            .expect("tgtd starts");
        let t = Tgt {
            child,
            port,
            control,
            _dir: dir,
            log,
        };
        let mut t = t;
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = t.child.try_wait() {
                panic!(
                    "tgtd exited ({status}): {}",
                    std::fs::read_to_string(t._dir.path().join("tgtd.err")).unwrap_or_default()
                );
            }
            let up = TcpStream::connect(("127.0.0.1", port)).is_ok()
                && t.try_admin(&["--op", "show", "--mode", "target"]).is_ok();
            if up {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "tgtd did not come up: {}",
                std::fs::read_to_string(t._dir.path().join("tgtd.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        t
    }

    fn try_admin(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("tgtadm")
            .args(["-C", &self.control.to_string(), "--lld", "iscsi"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs `tgtadm` on this daemon; panics on failure.
    pub fn admin(&self, args: &[&str]) -> String {
        self.try_admin(args)
            .unwrap_or_else(|e| panic!("tgtadm {args:?}: {e}"))
    }

    /// Creates target `tid` named `iqn` with one 16 MiB LUN, open to every initiator.
    pub fn add_target(&self, tid: u32, iqn: &str) {
        let tid = tid.to_string();
        self.admin(&["--op", "new", "--mode", "target", "--tid", &tid, "-T", iqn]);
        let img = self._dir.path().join(format!("lun{tid}.img"));
        std::fs::File::create(&img)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        self.admin(&[
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            &tid,
            "--lun",
            "1",
            "-b",
            img.to_str().unwrap(),
        ]);
        self.admin(&[
            "--op", "bind", "--mode", "target", "--tid", &tid, "-I", "ALL",
        ]);
    }

    /// Requires one-way CHAP (`user`/`secret`) for target `tid`.
    pub fn require_chap(&self, tid: u32, user: &str, secret: &str) {
        let tid = tid.to_string();
        self.admin(&[
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            user,
            "--password",
            secret,
        ]);
        self.admin(&[
            "--op", "bind", "--mode", "account", "--tid", &tid, "--user", user,
        ]);
    }

    /// Whatever tgtd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Tgt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(format!("/var/run/tgtd/socket.{}", self.control));
        let _ = std::fs::remove_file(format!("/var/run/tgtd/socket.{}.lock", self.control));
    }
}
