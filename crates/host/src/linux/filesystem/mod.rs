//! Linux implementation of the filesystem group ([`FilesystemHost`] and [`LinkProbe`]).
//!
//! Semantics follow upstream's filesystem API, translated to Linux:
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
//! Paths are never resolved here: the path policy walks each request path through this host's
//! [`Walker`] (every component below a root opened relative to its parent's descriptor with
//! `O_NOFOLLOW`, links read and checked by the policy), and the operations act on the final name
//! inside the directory descriptor the walk held. A component swapped for a link after it was
//! looked at cannot redirect them.
//!
//! Files: this one the host's operations and its link probe; `nofollow.rs` the files examined
//! through directory descriptors, mount points among them, and one step of a removal;
//! `removal.rs` the recursive removal, bounded in descriptors and memory at any depth.

use crate::linux::mountinfo::{self, MountInfo};
use csi_proxy_core::filesystem::FilesystemHost;
use csi_proxy_core::paths::{Beneath, Found, Held, LinkProbe, LinkTarget, Walker, names_nothing};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxAttributes, StatxFlags};
use rustix::io::Errno;
use rustix::mount::UnmountFlags;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

mod beneath;
mod nofollow;
mod removal;

use nofollow::*;
use removal::{remove_below, remove_tree};

/// Mode of directories created by [`FilesystemHost::mkdir_all`] (before the umask), as
/// upstream's `os.MkdirAll(path, 0755)`.
const DIR_MODE: u32 = 0o755;

/// The Linux filesystem host.
#[derive(Debug, Default, Clone)]
pub struct LinuxFilesystemHost {
    /// The roots, held for the host's life (`beneath.rs`).
    roots: std::sync::Arc<beneath::Roots>,
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

/// What `name` inside `parent` is, without following it; a directory is opened relative to
/// `parent` (`O_NOFOLLOW`), and what was opened is what is described.
fn look_at(parent: &OpenDir, name: &OsStr) -> io::Result<Found<OpenDir>> {
    let dirfd = parent.fd.as_fd();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..MAX_ATTEMPTS {
        match rustix::fs::openat(dirfd, name, flags, Mode::empty()) {
            Ok(fd) => {
                let node = node_of(fd.as_fd())?;
                let dir = OpenDir::known(fd, node, parent.child_path(name));
                let mut mounts = Mounts::default();
                if !mounts.is_mount_point(parent, name, &node)? {
                    return Ok(Found::Dir(dir));
                }
                return Ok(match mount_target(&mut mounts, parent, name, &node)? {
                    LinkTarget::Volume => Found::Volume(dir),
                    LinkTarget::Foreign(why) | LinkTarget::Path(why) => Found::Foreign(why),
                });
            }
            Err(Errno::NOENT) => return Ok(Found::Missing),
            // A symlink (with O_NOFOLLOW) or not a directory: the entry itself says which.
            Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                let node = match node_at(dirfd, name) {
                    Ok(n) => n,
                    Err(Errno::NOENT) => return Ok(Found::Missing),
                    Err(e) => return Err(e.into()),
                };
                if node.file_type != FileType::Symlink {
                    if node.is_dir() {
                        continue; // a directory was put there meanwhile
                    }
                    return Ok(Found::Other);
                }
                match rustix::fs::readlinkat(dirfd, name, Vec::new()) {
                    Ok(target) => {
                        return Ok(match target.into_string() {
                            Ok(s) => Found::Link(s),
                            Err(e) => Found::Foreign(format!(
                                "symlink to a non-UTF-8 path {:?}",
                                String::from_utf8_lossy(e.into_cstring().as_bytes())
                            )),
                        });
                    }
                    // Replaced by something that is not a link meanwhile.
                    Err(Errno::INVAL) | Err(Errno::NOENT) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other(format!(
        "{}: changed {MAX_ATTEMPTS} times while being looked at",
        parent.child_path(name).display()
    )))
}

/// The directory a walk on this host holds (a root is shared: `Arc`).
fn held(h: &Held) -> io::Result<&OpenDir> {
    h.downcast_ref::<OpenDir>()
        .or_else(|| h.downcast_ref::<std::sync::Arc<OpenDir>>().map(|a| &**a))
        .ok_or_else(|| io::Error::other("a directory handle that this host did not open"))
}

impl Walker for LinuxFilesystemHost {
    type Dir = Held;

    fn open_trusted(&self, path: &str, create: bool) -> io::Result<Held> {
        if create {
            use std::os::unix::fs::DirBuilderExt;
            // A root and the way to it are the administrator's: created as std does, links
            // followed (an existing directory, or a link to one, is success).
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(path)?;
        }
        Ok(Box::new(self.roots.open(Path::new(path))?))
    }

    fn look(&self, dir: &Held, name: &str, _at: &str) -> io::Result<Found<Held>> {
        Ok(match look_at(held(dir)?, OsStr::new(name))? {
            Found::Dir(d) => Found::Dir(Box::new(d)),
            Found::Volume(d) => Found::Volume(Box::new(d)),
            Found::Missing => Found::Missing,
            Found::Link(t) => Found::Link(t),
            Found::Foreign(why) => Found::Foreign(why),
            Found::Other => Found::Other,
        })
    }

    fn make_dir(&self, dir: &Held, name: &str, _at: &str) -> io::Result<()> {
        let mode = Mode::from_raw_mode(DIR_MODE);
        match rustix::fs::mkdirat(held(dir)?.fd.as_fd(), name, mode) {
            Ok(()) | Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn beneath(&self, root: &Held, names: &[&str]) -> io::Result<Beneath<Held>> {
        beneath::beneath(root, names)
    }

    fn exists_beneath(&self, root: &Held, names: &[&str]) -> io::Result<Option<bool>> {
        beneath::exists(root, names)
    }
}

/// Answers about a path string: opens its parent as the OS resolves it (for callers that only
/// check a path; request paths go through [`Walker`]).
impl LinkProbe for LinuxFilesystemHost {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        if Path::new(path) == Path::new("/") {
            return Ok(None);
        }
        let (parent, name) = split(path)?;
        let parent = match OpenDir::open(parent, false) {
            Ok(d) => d,
            Err(e) if names_nothing(&e) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        Ok(match look_at(&parent, name)? {
            Found::Link(target) => Some(LinkTarget::Path(target)),
            Found::Volume(_) => Some(LinkTarget::Volume),
            Found::Foreign(why) => Some(LinkTarget::Foreign(why)),
            Found::Dir(_) | Found::Missing | Found::Other => None,
        })
    }
}

impl FilesystemHost for LinuxFilesystemHost {
    fn remove(&self, parent: &Held, name: &str) -> io::Result<()> {
        let parent = held(parent)?;
        let name = OsStr::new(name);
        let dirfd = parent.fd.as_fd();
        let mut mounts = Mounts::default();
        for _ in 0..MAX_ATTEMPTS {
            let node = node_at(dirfd, name)?;
            if node.file_type != FileType::Symlink && mounts.is_mount_point(parent, name, &node)? {
                unmount_at(parent, name)?;
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
            "{}: changed {MAX_ATTEMPTS} times while being removed",
            parent.child_path(name).display()
        )))
    }

    fn remove_all(&self, parent: &Held, name: &str) -> io::Result<()> {
        let parent = held(parent)?;
        let mut mounts = Mounts::default();
        refuse_mounts_below(&mut mounts, &parent.child_path(OsStr::new(name)))?;
        remove_tree(&mut mounts, parent, OsStr::new(name), true)
    }

    fn remove_contents(&self, dir: &Held) -> io::Result<()> {
        let dir = held(dir)?;
        let mut mounts = Mounts::default();
        refuse_mounts_below(&mut mounts, &dir.path)?;
        remove_below(&mut mounts, dir)
    }

    fn create_symlink(&self, parent: &Held, name: &str, target: &str) -> io::Result<()> {
        // Linux symlinks have no file/directory flavour; EEXIST if `name` exists.
        rustix::fs::symlinkat(target, held(parent)?.fd.as_fd(), name).map_err(Into::into)
    }

    fn is_symlink(&self, parent: &Held, name: &str) -> io::Result<bool> {
        let parent = held(parent)?;
        let name = OsStr::new(name);
        let node = node_at(parent.fd.as_fd(), name)?;
        if node.file_type == FileType::Symlink {
            // The core answers whether a link's target exists where the roots let it look
            // (it walks the target itself); a link it leaves to the host is a link.
            return Ok(true);
        }
        // Upstream counts mount points as links: drivers use `!IsSymlink` as "likely not a
        // mount point". A file can be a mount point too (raw block volumes).
        Mounts::default().is_mount_point(parent, name, &node)
    }

    /// `/proc/self/fd/<parent>/<name>`: the kernel jumps to the held directory itself and
    /// resolves only `name` there.
    fn held_entry_path(&self, parent: &Held, name: &str) -> Option<String> {
        let parent = held(parent).ok()?;
        Some(format!("/proc/self/fd/{}/{name}", parent.fd.as_raw_fd()))
    }

    fn held_dir_path(&self, dir: &Held) -> Option<String> {
        let dir = held(dir).ok()?;
        Some(format!("/proc/self/fd/{}", dir.fd.as_raw_fd()))
    }

    /// O_NOFOLLOW refuses a link at `name` (ELOOP); O_NONBLOCK keeps a FIFO from holding the
    /// open; fstat then refuses anything but a regular file before a byte is read.
    fn read_small(&self, parent: &Held, name: &str, limit: usize) -> io::Result<Vec<u8>> {
        let parent = held(parent)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(parent.fd.as_fd(), name, flags, Mode::empty()) {
            Err(Errno::LOOP) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{name:?} is a symbolic link; not followed"),
                ));
            }
            r => r?,
        };
        if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name:?} is not a regular file"),
            ));
        }
        let mut out = Vec::new();
        io::Read::read_to_end(
            &mut io::Read::take(std::fs::File::from(fd), limit as u64 + 1),
            &mut out,
        )?;
        if out.len() > limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name:?} is larger than {limit} bytes"),
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod stale_tests;

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
