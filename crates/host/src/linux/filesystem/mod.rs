//! Linux implementation of the filesystem group ([`FilesystemHost`] and [`LinkProbe`]).
//!
//! Semantics follow upstream-behaviour.md §2.3 and §7 items 6–8, translated to Linux:
//!
//! * Links are never followed by the removing operations, and recursion never descends into a
//!   symbolic link or a mount point. Removal works on directory file descriptors (`openat` with
//!   `O_NOFOLLOW | O_DIRECTORY`, `unlinkat`, `statx` with `AT_SYMLINK_NOFOLLOW`), and before
//!   descending into a directory it checks that the directory it opened is the one it examined
//!   and is not a mount root, so a concurrent rename/symlink/mount swap cannot redirect it.
//! * The path `remove_all`/`remove` is given may itself be a mount point: it is unmounted with
//!   a plain `umount2(…, UMOUNT_NOFOLLOW)` (never `MNT_DETACH`, never `MNT_FORCE`) and then
//!   removed, which is what Windows' `RemoveDirectory` does to a volume mount point (drivers
//!   Rmdir their staging mount point). Files can be mount points too (a raw block volume is a
//!   device bind-mounted on a file) and are handled alike. If the unmount fails (`EBUSY`: files
//!   open, nested mounts) the error is returned and nothing under the mount point is touched.
//! * Mounts *below* that path are someone else's (kubelet's subPath binds, secret tmpfs, other
//!   drivers' volumes): `remove_all` and `remove_contents` never unmount them. They refuse
//!   (`ResourceBusy`, naming them) before removing anything, and a mount that appears during
//!   the removal stops it there. Stricter than upstream, whose recursive removal on Windows
//!   removes nested mount points too.
//! * Mount points are recognised by `statx`'s `STATX_ATTR_MOUNT_ROOT` (Linux ≥ 5.8). On older
//!   kernels a different `st_dev` or mount ID from the parent, or an entry in
//!   `/proc/self/mountinfo` ([`super::mountinfo`]), counts as a mount point.
//!
//! The leading components of a path given to this host are resolved normally (they have been
//! confined by the path policy, which checks links and mount points); only the final component
//! and everything below it are handled without following links.
//!
//! Files: this one the host's operations and its link probe; `nofollow.rs` the files examined
//! through directory descriptors, mount points among them, and the recursive removal.

use crate::linux::mountinfo::{self, MountInfo};
use csi_proxy_core::filesystem::FilesystemHost;
use csi_proxy_core::paths::{LinkProbe, LinkTarget};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxAttributes, StatxFlags};
use rustix::io::Errno;
use rustix::mount::UnmountFlags;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

mod nofollow;

use nofollow::*;

/// Mode of directories created by [`FilesystemHost::mkdir_all`] (before the umask), as
/// upstream's `os.MkdirAll(path, 0755)`.
const DIR_MODE: u32 = 0o755;

/// The Linux filesystem host.
#[derive(Debug, Default, Clone, Copy)]
pub struct LinuxFilesystemHost {
    _private: (),
}

impl LinuxFilesystemHost {
    /// A host acting on the local filesystem.
    pub fn new() -> Self {
        Self::default()
    }
}

/// An error with the operation and the (inner) path it concerns, keeping its kind.
fn with_context(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// Splits an absolute path into its parent directory and final name.
fn split(path: &str) -> io::Result<(&Path, &OsStr)> {
    let p = Path::new(path);
    match (p.is_absolute(), p.parent(), p.file_name()) {
        (true, Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{path:?} is not an absolute path with a final name"),
        )),
    }
}

/// A symlink's target exists (following it): stat succeeds.
fn target_exists(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<bool> {
    // Only the link's own target is looked at, not followed further (upstream: Readlink then
    // Lstat): a publish link to a staging link stays "a link" while the share or volume behind
    // the staging link is unreachable, which is what lets a driver notice and remount.
    let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
    // A relative target is relative to the link's directory, as the kernel resolves it.
    match rustix::fs::statat(dir, target.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => Ok(true),
        Err(Errno::NOENT) | Err(Errno::NOTDIR) | Err(Errno::LOOP) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// What the mount at `name` in `parent` is, from `/proc/self/mountinfo`.
fn mount_target(
    mounts: &mut Mounts,
    parent: &OpenDir,
    name: &OsStr,
    node: &Node,
) -> io::Result<LinkTarget> {
    let path = parent.child_path(name);
    let table = mounts.table()?;
    let entry = node
        .mnt_id
        .and_then(|id| mountinfo::by_id(table, id))
        .or_else(|| mountinfo::topmost_at(table, &path));
    let Some(m) = entry else {
        return Ok(LinkTarget::Foreign(format!(
            "mount point {} not found in /proc/self/mountinfo",
            path.display()
        )));
    };
    if m.root != Path::new("/") {
        return Ok(LinkTarget::Foreign(format!(
            "bind mount of {} from {}",
            m.root.display(),
            m.source
        )));
    }
    // The whole root filesystem mounted (or bind-mounted) again here leads everywhere.
    if let Some(rootfs) = mountinfo::topmost_at(table, Path::new("/"))
        && (rootfs.major, rootfs.minor) == (m.major, m.minor)
    {
        return Ok(LinkTarget::Foreign(format!(
            "mount of the root filesystem ({}) from {}",
            m.fs_type, m.source
        )));
    }
    Ok(LinkTarget::Volume)
}

impl LinkProbe for LinuxFilesystemHost {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        if Path::new(path) == Path::new("/") {
            return Ok(None);
        }
        let (parent, name) = split(path)?;
        let parent = match OpenDir::open(parent, false) {
            Ok(d) => d,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let node = match node_at(parent.fd.as_fd(), name) {
            Ok(n) => n,
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if node.file_type == FileType::Symlink {
            let target = rustix::fs::readlinkat(parent.fd.as_fd(), name, Vec::new())?;
            return Ok(Some(match target.into_string() {
                Ok(s) => LinkTarget::Path(s),
                Err(e) => LinkTarget::Foreign(format!(
                    "symlink to a non-UTF-8 path {:?}",
                    String::from_utf8_lossy(e.into_cstring().as_bytes())
                )),
            }));
        }
        // Only a directory mount can be passed through; nothing is reached through a file that
        // has something mounted on it (a raw block volume), so it is not a link here.
        let mut mounts = Mounts::default();
        if node.is_dir() && mounts.is_mount_point(&parent, name, &node)? {
            return mount_target(&mut mounts, &parent, name, &node).map(Some);
        }
        Ok(None)
    }
}

impl FilesystemHost for LinuxFilesystemHost {
    fn path_exists(&self, path: &str) -> io::Result<bool> {
        match std::fs::symlink_metadata(path) {
            Ok(_) => Ok(true),
            // ENOTDIR (a leading component is a file) is "not there" too, as Windows'
            // ERROR_PATH_NOT_FOUND is for upstream.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn mkdir_all(&self, path: &str) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        // std's recursive create: an existing directory (or a link to one) is success, an
        // existing non-directory is EEXIST.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(path)
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let (parent, name) = split(path)?;
        let parent = OpenDir::open(parent, false)?;
        let dirfd = parent.fd.as_fd();
        let mut mounts = Mounts::default();
        for _ in 0..MAX_ATTEMPTS {
            let node = node_at(dirfd, name)?;
            if node.file_type != FileType::Symlink && mounts.is_mount_point(&parent, name, &node)? {
                unmount_at(&parent, name)?;
                mounts.invalidate();
                continue;
            }
            if !node.is_dir() {
                return match rustix::fs::unlinkat(dirfd, name, AtFlags::empty()) {
                    Err(Errno::ISDIR) | Err(Errno::BUSY) => continue,
                    r => r.map_err(Into::into),
                };
            }
            return match rustix::fs::unlinkat(dirfd, name, AtFlags::REMOVEDIR) {
                Err(Errno::NOTDIR) | Err(Errno::BUSY) => continue,
                r => r.map_err(Into::into),
            };
        }
        Err(io::Error::other(format!(
            "{path}: changed {MAX_ATTEMPTS} times while being removed"
        )))
    }

    fn remove_all(&self, path: &str) -> io::Result<()> {
        let (parent, name) = split(path)?;
        let parent = match OpenDir::open(parent, false) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut mounts = Mounts::default();
        refuse_mounts_below(&mut mounts, &parent.child_path(name))?;
        remove_tree(&mut mounts, &parent, name, true)
    }

    fn remove_contents(&self, path: &str) -> io::Result<()> {
        let dir = OpenDir::open(Path::new(path), true).map_err(|e| {
            if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "is a symbolic link; its target is not emptied through it",
                )
            } else {
                e
            }
        })?;
        let mut mounts = Mounts::default();
        refuse_mounts_below(&mut mounts, &dir.path)?;
        let mut first_error = None;
        for name in dir.names()? {
            if let Err(e) = remove_tree(&mut mounts, &dir, &name, false) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn create_symlink(&self, target: &str, link: &str) -> io::Result<()> {
        // Linux symlinks have no file/directory flavour; EEXIST if `link` exists.
        std::os::unix::fs::symlink(target, link)
    }

    fn is_symlink(&self, path: &str) -> io::Result<bool> {
        if Path::new(path) == Path::new("/") {
            return Ok(true); // the root of the mount tree
        }
        let (parent, name) = split(path)?;
        let parent = OpenDir::open(parent, false)?;
        let node = node_at(parent.fd.as_fd(), name)?;
        if node.file_type == FileType::Symlink {
            return target_exists(parent.fd.as_fd(), name);
        }
        // Upstream counts mount points as links: drivers use `!IsSymlink` as "likely not a
        // mount point". A file can be a mount point too (raw block volumes).
        Mounts::default().is_mount_point(&parent, name, &node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_paths() {
        assert_eq!(split("/a/b").unwrap(), (Path::new("/a"), OsStr::new("b")));
        assert_eq!(split("/a").unwrap(), (Path::new("/"), OsStr::new("a")));
        assert!(split("/").is_err());
        assert!(split("a/b").is_err());
        assert!(split("/a/..").is_err());
    }
}
