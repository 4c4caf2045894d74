//! Loop disks that detach themselves, the skip rule for machines that cannot make them, and the
//! mount table.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Held while a test of this process attaches or detaches a loop device. A device one test
/// detaches to put another image on it is free in between, and `losetup -f` in a test running
/// beside it would take it (CI saw exactly that: the re-attach failed with "busy").
static ATTACHING: Mutex<()> = Mutex::new(());

fn attaching() -> MutexGuard<'static, ()> {
    // A test that panicked while holding it left nothing half-done that matters here.
    ATTACHING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this process runs with effective uid 0 (loop devices and mounts need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        // Real, effective, saved, filesystem: privilege is the effective one.
        .and_then(|v| v.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

/// Whether loop disks can be made here; prints `SKIPPED: why` when not.
pub fn can_use_loop_devices() -> bool {
    let root = is_root();
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

/// Mount points under `dir`, deepest first (the order they can be unmounted in).
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

/// A sparse file attached as a loop device (`losetup -fP --show`, so partitions get device
/// nodes); unmounted, detached and removed on drop.
pub struct LoopDisk {
    /// `/dev/loopN`.
    pub dev: PathBuf,
    /// The backing file; the daemon reports its path as the disk's serial number.
    pub file: PathBuf,
    /// Set once the device was detached by the test itself: it may be another test's by now.
    detached: AtomicBool,
    /// Whether the backing file is this disk's own, removed on drop (not for a second path).
    owns_file: bool,
}

impl LoopDisk {
    /// A loop disk of `mib` MiB backed by `<dir>/<name>.img`, or why one cannot be made here.
    pub fn new(dir: &Path, name: &str, mib: u64) -> Result<LoopDisk, String> {
        LoopDisk::attach(dir, name, mib, true)
    }

    /// As [`LoopDisk::new`], with the kernel's partition scan off (`losetup -f` without `-P`,
    /// as many tools attach images): partitions then appear only when added with BLKPG, and
    /// stay when the image is detached.
    pub fn without_partscan(dir: &Path, name: &str, mib: u64) -> Result<LoopDisk, String> {
        LoopDisk::attach(dir, name, mib, false)
    }

    /// A copy of this disk's image as it is now, attached as another disk: a clone, as a
    /// snapshot restored on the same node is (same partition table, PARTUUIDs, filesystem
    /// UUIDs).
    pub fn clone_as(&self, name: &str) -> LoopDisk {
        let file = self.file.with_file_name(format!("{name}.img"));
        let out = Command::new("cp")
            .arg("--sparse=always")
            .arg(&self.file)
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "cp: {out:?}");
        LoopDisk::attach_file(file, true).unwrap()
    }

    /// The same image attached a second time, as one disk reached through two paths is (two
    /// SCSI paths without multipath): the same serial number, another device.
    pub fn another_path(&self) -> LoopDisk {
        let mut path = LoopDisk::attach_file(self.file.clone(), true).unwrap();
        path.owns_file = false;
        path
    }

    fn attach(dir: &Path, name: &str, mib: u64, partscan: bool) -> Result<LoopDisk, String> {
        if !is_root() {
            return Err("not root".into());
        }
        let file = dir.join(format!("{name}.img"));
        let f = std::fs::File::create(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        f.set_len(mib << 20).map_err(|e| e.to_string())?;
        drop(f);
        LoopDisk::attach_file(file, partscan)
    }

    fn attach_file(file: PathBuf, partscan: bool) -> Result<LoopDisk, String> {
        let _attaching = attaching();
        let out = Command::new("losetup")
            .args([if partscan { "-fP" } else { "-f" }, "--show"])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&file);
            return Err(format!(
                "losetup -fP: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        Ok(LoopDisk {
            dev,
            file,
            detached: AtomicBool::new(false),
            owns_file: true,
        })
    }

    /// Detaches this device's image and attaches `image` to the same device, as the next
    /// tenant's image gets a freed loop device. While the device stays busy after the detach
    /// (udev still probing it, or an opener keeping it until autoclear), the attach is retried
    /// for up to `patience`; the error says why it did not take.
    pub fn replace_image(&self, image: &Path, patience: Duration) -> Result<(), String> {
        let _attaching = attaching();
        let dev = self.dev.display().to_string();
        super::run("losetup", &["-d", &dev]);
        let t = Instant::now();
        loop {
            let out = Command::new("losetup")
                .arg(&dev)
                .arg(image)
                .output()
                .unwrap();
            if out.status.success() {
                return Ok(());
            }
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if !why.contains("busy") || t.elapsed() >= patience {
                // The device is no longer ours: another test may attach it next.
                self.detached.store(true, Ordering::Relaxed);
                return Err(format!("losetup {dev} {}: {why}", image.display()));
            }
            let _ = Command::new("udevadm").arg("settle").status();
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Detaches the image now; the device is then no longer this disk's to detach on drop.
    pub fn detach(&self) {
        let _attaching = attaching();
        super::run("losetup", &["-d", &self.dev.to_string_lossy()]);
        self.detached.store(true, Ordering::Relaxed);
    }

    /// As [`LoopDisk::new`], printing `SKIPPED: why` when none can be made here.
    pub fn or_skip(dir: &Path, name: &str, mib: u64) -> Option<LoopDisk> {
        LoopDisk::new(dir, name, mib)
            .inspect_err(|why| eprintln!("SKIPPED: loop disks unavailable: {why}"))
            .ok()
    }

    /// The kernel name (`loop7`).
    pub fn name(&self) -> String {
        self.dev
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    }

    /// The device node of partition `n` (`/dev/loop7p1`).
    pub fn partition(&self, n: u32) -> PathBuf {
        PathBuf::from(format!("{}p{n}", self.dev.display()))
    }

    /// The serial number the daemon reports for it.
    pub fn serial(&self) -> String {
        self.file.display().to_string()
    }

    /// The daemon's disk number for it: the kernel's `diskseq` (unique until reboot).
    pub fn disk_number(&self) -> u32 {
        std::fs::read_to_string(format!("/sys/block/{}/diskseq", self.name()))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .expect("loop disks have a diskseq")
    }

    /// Grows the backing file only: the loop device keeps its old size until the daemon's
    /// Rescan picks the new one up, which is what the tests check.
    pub fn grow_to(&self, mib: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.file)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
    }

    /// Runs `program args.. on` (e.g. `mkfs.ext4 -q -F /dev/loop7`), asserting success.
    pub fn run(&self, program: &str, args: &[&str], on: &Path) {
        let out = Command::new(program).args(args).arg(on).output().unwrap();
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A fingerprint of the whole device's contents (FNV-1a over every byte): enough to see
    /// that nothing wrote to it, without a hashing crate.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint_of(&self.dev)
    }

    /// [`LoopDisk::fingerprint`] of one device node of it (a partition).
    pub fn fingerprint_of(&self, node: &Path) -> u64 {
        use std::io::Read;
        let mut f = std::fs::File::open(node).unwrap();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                return h;
            }
            for b in &buf[..n] {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        if *self.detached.get_mut() {
            if self.owns_file {
                let _ = std::fs::remove_file(&self.file);
            }
            return;
        }
        // Anything still mounted from this disk would keep it busy: unmount lazily first.
        if let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") {
            let dev = self.dev.display().to_string();
            for l in mi.lines() {
                let f: Vec<&str> = l.split(' ').collect();
                if let Some(pos) = f.iter().position(|x| *x == "-")
                    && f.get(pos + 2).is_some_and(|s| {
                        // This disk or its partitions (`/dev/loop1p1`), never `/dev/loop12p1`.
                        s.strip_prefix(dev.as_str()).is_some_and(|rest| {
                            rest.is_empty()
                                || rest.strip_prefix('p').is_some_and(|n| {
                                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                                })
                        })
                    })
                {
                    let _ = Command::new("umount").args(["-l", f[4]]).status();
                }
            }
        }
        // Partitions added with BLKPG outlive a detach without partition scan: the next image
        // on this device must not inherit them.
        let _ = Command::new("partx")
            .arg("-d")
            .arg(&self.dev)
            .stderr(Stdio::null())
            .status();
        let _attaching = attaching();
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        if self.owns_file {
            let _ = std::fs::remove_file(&self.file);
        }
    }
}
