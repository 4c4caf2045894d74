//! The node a replayed driver runs on, as the driver's own container sees it: the path form
//! its kubelet hands and its mounter sends (`normalizeWindowsPath` on Windows, Linux paths as
//! they are), and what the driver does itself, without csi-proxy, through its bind mount of the
//! kubelet directory (`os.Lstat`, `os.ReadDir`, `GetDiskFreeSpaceEx` / `statfs`). One replay of
//! a driver's node code then runs over the simulated Windows and on Linux loop disks.

use std::path::Path;
use std::sync::Mutex;

/// A node as a replayed driver's container sees it.
pub trait NodeHost: Send + Sync {
    /// The path the driver's mounter sends for `path` (its `normalizeWindowsPath` on Windows).
    fn norm(&self, path: &str) -> String;
    /// `os.ReadDir(path)` succeeds: every link on the way followed to something there.
    fn opens(&self, path: &str) -> bool;
    /// `os.Lstat(path)` reports `ModeSymlink` (Go before 1.23 on Windows: a symbolic link, a
    /// junction or a mounted folder; on Linux: a symbolic link or a mount point, as the
    /// mounters' `IsLikelyNotMountPoint` reads it).
    fn is_link(&self, path: &str) -> bool;
    /// The size of the filesystem `path` is on, as the driver's container measures it.
    fn fs_size(&self, path: &str) -> Option<u64>;
    /// The serial number (ListDiskIDs) of the disk a driver knows by `key` (its page 83 ID,
    /// LUN or device name), on a node whose disks carry none of those: Linux loop disks have
    /// no page 83 ID and no SCSI address, so the driver's lookup is replaced by this one.
    /// `None`: the driver's own lookup runs.
    fn disk_serial(&self, key: &str) -> Option<String> {
        let _ = key;
        None
    }
}

/// Go's `filepath.Dir` for the paths kubelet hands (no trailing separator).
pub fn parent_dir(path: &str) -> &str {
    &path[..path.rfind(['\\', '/']).unwrap_or(0)]
}

/// A Linux node: paths go as kubelet hands them, the container's view is this machine's, and
/// loop disks are named for the keys drivers look them up by.
#[derive(Default)]
pub struct LinuxHost {
    keys: Mutex<Vec<(String, String)>>,
}

impl LinuxHost {
    /// The disk with serial `serial` is the one a driver looks up by `key`.
    pub fn name_disk(&self, key: &str, serial: &str) {
        let mut k = self.keys.lock().unwrap();
        k.push((key.to_string(), serial.to_string()));
    }
}

impl NodeHost for LinuxHost {
    fn disk_serial(&self, key: &str) -> Option<String> {
        let k = self.keys.lock().unwrap();
        k.iter().find(|(k, _)| k == key).map(|(_, s)| s.clone())
    }

    fn norm(&self, path: &str) -> String {
        path.to_string()
    }

    fn opens(&self, path: &str) -> bool {
        std::fs::read_dir(path).is_ok()
    }

    fn is_link(&self, path: &str) -> bool {
        let p = Path::new(path);
        p.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
            || super::loopdisk::is_mounted(p)
    }

    fn fs_size(&self, path: &str) -> Option<u64> {
        // statfs(2) as `stat -f` reports it: blocks times the fundamental block size.
        let out = std::process::Command::new("stat")
            .args(["-f", "-L", "-c", "%b %S", path])
            .output()
            .ok()?;
        let s = String::from_utf8_lossy(&out.stdout);
        let mut f = s.split_whitespace().map(|v| v.parse::<u64>().ok());
        Some(f.next()?? * f.next()??)
    }
}
