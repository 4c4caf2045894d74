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

/// How many times one directory entry is re-examined when it keeps changing under us (each
/// unmount of a stacked mount also counts as one).
const MAX_ATTEMPTS: usize = 64;

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

/// What `statx` (or `fstatat` on kernels without it) says about one file, without following
/// a final symbolic link.
#[derive(Debug, Clone, Copy)]
struct Node {
    file_type: FileType,
    dev: u64,
    ino: u64,
    /// `stx_mnt_id` when the kernel reports it.
    mnt_id: Option<u64>,
    /// `STATX_ATTR_MOUNT_ROOT` when the kernel reports it.
    mount_root: Option<bool>,
}

impl Node {
    fn from_statx(s: &rustix::fs::Statx) -> Self {
        let mount_root = s
            .stx_attributes_mask
            .contains(StatxAttributes::MOUNT_ROOT)
            .then(|| s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT));
        Node {
            file_type: FileType::from_raw_mode(s.stx_mode.into()),
            dev: rustix::fs::makedev(s.stx_dev_major, s.stx_dev_minor),
            ino: s.stx_ino,
            mnt_id: (s.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(s.stx_mnt_id),
            mount_root,
        }
    }

    fn from_stat(s: &rustix::fs::Stat) -> Self {
        Node {
            file_type: FileType::from_raw_mode(s.st_mode),
            dev: s.st_dev,
            ino: s.st_ino,
            mnt_id: None,
            mount_root: None,
        }
    }

    fn is_dir(&self) -> bool {
        self.file_type == FileType::Directory
    }

    /// Whether this node is on another mount than `parent` (the kernel's own answer where it
    /// gives one, else device and mount-ID comparison).
    fn differs_in_mount_from(&self, parent: &Node) -> bool {
        if let Some(root) = self.mount_root {
            return root;
        }
        if let (Some(a), Some(b)) = (self.mnt_id, parent.mnt_id)
            && a != b
        {
            return true;
        }
        self.dev != parent.dev
    }
}

const STATX_MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::INO)
    .union(StatxFlags::MNT_ID);

/// `name` in `dir`, not following a final symlink nor triggering an automount.
fn node_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Node, Errno> {
    let flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
    match rustix::fs::statx(dir, name, flags, STATX_MASK) {
        Ok(s) => Ok(Node::from_statx(&s)),
        Err(Errno::NOSYS) => {
            rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|s| Node::from_stat(&s))
        }
        Err(e) => Err(e),
    }
}

/// The file `fd` refers to.
fn node_of(fd: BorrowedFd<'_>) -> Result<Node, Errno> {
    match rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, STATX_MASK) {
        Ok(s) => Ok(Node::from_statx(&s)),
        Err(Errno::NOSYS) => rustix::fs::fstat(fd).map(|s| Node::from_stat(&s)),
        Err(e) => Err(e),
    }
}

/// An open directory, what it is, and the path it is known by (for messages and for
/// `/proc/self/mountinfo` lookups).
struct OpenDir {
    fd: OwnedFd,
    node: Node,
    path: PathBuf,
}

impl OpenDir {
    /// Opens the directory at `path`, following links in it unless `nofollow` (which applies to
    /// the final component only).
    fn open(path: &Path, nofollow: bool) -> io::Result<Self> {
        let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if nofollow {
            flags |= OFlags::NOFOLLOW;
        }
        let fd = rustix::fs::open(path, flags, Mode::empty())?;
        let node = node_of(fd.as_fd())?;
        // The path the kernel has for it, as /proc/self/mountinfo names mount points.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .ok()
            .filter(|p| p.is_absolute() && !p.as_os_str().as_bytes().ends_with(b" (deleted)"));
        Ok(OpenDir {
            fd,
            node,
            path: real.unwrap_or_else(|| path.to_path_buf()),
        })
    }

    fn child_path(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// The names in this directory, without `.` and `..`.
    fn names(&self) -> io::Result<Vec<OsString>> {
        let wrap = |e: Errno| with_context(e.into(), "read directory", &self.path);
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd).map_err(wrap)? {
            let entry = entry.map_err(wrap)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_owned());
            }
        }
        Ok(names)
    }
}

/// A lazily read snapshot of `/proc/self/mountinfo`.
#[derive(Default)]
struct Mounts {
    table: Option<Vec<MountInfo>>,
}

impl Mounts {
    fn table(&mut self) -> io::Result<&[MountInfo]> {
        if self.table.is_none() {
            self.table = Some(mountinfo::read()?);
        }
        Ok(self.table.as_deref().unwrap_or_default())
    }

    fn invalidate(&mut self) {
        self.table = None;
    }

    /// Whether the directory `name` in `parent`, described by `node`, is a mount point.
    fn is_mount_point(&mut self, parent: &OpenDir, name: &OsStr, node: &Node) -> io::Result<bool> {
        if let Some(root) = node.mount_root {
            return Ok(root);
        }
        if node.differs_in_mount_from(&parent.node) {
            return Ok(true);
        }
        // Kernel < 5.8 and same device: a bind mount inside one filesystem only shows here.
        let path = parent.child_path(name);
        Ok(self.table()?.iter().any(|m| m.mount_point == path))
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

/// Unmounts the mount on top of `name` in `parent` (non-lazy, not forced).
///
/// The target is named through the parent's descriptor (`/proc/self/fd/N/name`) so the
/// unmount hits the directory we examined even if a path component above it was swapped;
/// `UMOUNT_NOFOLLOW` refuses a final symlink put in its place. Without `/proc`, the path is
/// used.
fn unmount_at(parent: &OpenDir, name: &OsStr) -> io::Result<()> {
    let via_fd = Path::new("/proc/self/fd");
    let target = if via_fd.is_dir() {
        via_fd.join(parent.fd.as_raw_fd().to_string()).join(name)
    } else {
        parent.child_path(name)
    };
    tracing::info!(path = %parent.child_path(name).display(), "unmounting");
    rustix::mount::unmount(&target, UnmountFlags::NOFOLLOW).map_err(io::Error::from)
}

/// What [`step`] did with one entry.
enum Step {
    /// The entry is gone (removed by us, unmounted and removed, or vanished meanwhile).
    Gone,
    /// A non-empty directory on the parent's mount, opened without following links: its
    /// contents must be removed first.
    Descend(OpenDir),
}

/// Removes `name` in `parent` if it is not a non-empty directory; otherwise opens it for
/// descent. Symlinks and other non-directories are unlinked; mount points are unmounted and
/// re-examined (stacked mounts, then the directory underneath).
fn step(
    mounts: &mut Mounts,
    parent: &OpenDir,
    name: &OsStr,
    may_unmount: bool,
) -> io::Result<Step> {
    let path = || parent.child_path(name);
    let dirfd = parent.fd.as_fd();
    for _ in 0..MAX_ATTEMPTS {
        let node = match node_at(dirfd, name) {
            Ok(n) => n,
            Err(Errno::NOENT) => return Ok(Step::Gone),
            Err(e) => return Err(with_context(e.into(), "stat", &path())),
        };
        // Directories and files (a raw block volume is a device bind-mounted on a file) can be
        // mount points; symlinks cannot.
        if node.file_type != FileType::Symlink && mounts.is_mount_point(parent, name, &node)? {
            if !may_unmount {
                return Err(mounted_below(&[path()]));
            }
            unmount_at(parent, name).map_err(|e| with_context(e, "unmount", &path()))?;
            mounts.invalidate();
            continue;
        }
        if !node.is_dir() {
            match rustix::fs::unlinkat(dirfd, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => return Ok(Step::Gone),
                Err(Errno::ISDIR) => continue, // replaced by a directory meanwhile
                Err(Errno::BUSY) => continue,  // mounted on meanwhile
                Err(e) => return Err(with_context(e.into(), "unlink", &path())),
            }
        }
        match rustix::fs::unlinkat(dirfd, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => return Ok(Step::Gone),
            Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => {}
            // Replaced by a non-directory, or mounted on, meanwhile.
            Err(Errno::NOTDIR) | Err(Errno::BUSY) => continue,
            Err(e) => return Err(with_context(e.into(), "rmdir", &path())),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(dirfd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(Step::Gone),
            Err(Errno::LOOP) | Err(Errno::NOTDIR) => continue,
            Err(e) => return Err(with_context(e.into(), "open", &path())),
        };
        let opened = node_of(fd.as_fd()).map_err(|e| with_context(e.into(), "stat", &path()))?;
        // Descend only into the very directory examined above, and only on the parent's mount.
        if opened.dev != node.dev
            || opened.ino != node.ino
            || opened.differs_in_mount_from(&parent.node)
        {
            continue;
        }
        return Ok(Step::Descend(OpenDir {
            fd,
            node: opened,
            path: path(),
        }));
    }
    Err(io::Error::other(format!(
        "{}: changed {MAX_ATTEMPTS} times while being removed",
        path().display()
    )))
}

/// The refusal of a removal that would have to unmount `mounts`, which lie below the path it
/// was asked to remove.
fn mounted_below(mounts: &[PathBuf]) -> io::Error {
    let list: Vec<String> = mounts.iter().map(|p| format!("{}", p.display())).collect();
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!(
            "mount point(s) below it: {}; a removal never unmounts what is mounted inside the \
             removed directory (it belongs to someone else): unmount it first",
            list.join(", ")
        ),
    )
}

/// Refuses, before anything is removed, when a mount point lies strictly below `dir` (as the
/// kernel names it).
fn refuse_mounts_below(mounts: &mut Mounts, dir: &Path) -> io::Result<()> {
    let below: Vec<PathBuf> = mounts
        .table()?
        .iter()
        .map(|m| m.mount_point.clone())
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect();
    if below.is_empty() {
        Ok(())
    } else {
        Err(mounted_below(&below))
    }
}

/// A directory being emptied.
struct Frame {
    dir: OpenDir,
    name: OsString,
    entries: std::vec::IntoIter<OsString>,
    error: Option<io::Error>,
}

impl Frame {
    fn new(dir: OpenDir, name: &OsStr) -> io::Result<Self> {
        let entries = dir.names()?.into_iter();
        Ok(Frame {
            dir,
            name: name.to_owned(),
            entries,
            error: None,
        })
    }
}

/// Removes `name` in `top` and everything below it (iteratively, so depth is not limited by the
/// thread's stack). After an error the remaining siblings are still removed; the first error is
/// returned.
fn remove_tree(
    mounts: &mut Mounts,
    top: &OpenDir,
    name: &OsStr,
    unmount_top: bool,
) -> io::Result<()> {
    let mut stack = match step(mounts, top, name, unmount_top)? {
        Step::Gone => return Ok(()),
        Step::Descend(dir) => vec![Frame::new(dir, name)?],
    };
    loop {
        let Some(frame) = stack.last_mut() else {
            return Ok(());
        };
        if let Some(child) = frame.entries.next() {
            let next = step(mounts, &frame.dir, &child, false).and_then(|s| match s {
                Step::Gone => Ok(None),
                Step::Descend(dir) => Frame::new(dir, &child).map(Some),
            });
            match next {
                Ok(Some(f)) => stack.push(f),
                Ok(None) => {}
                Err(e) => {
                    frame.error.get_or_insert(e);
                }
            }
            continue;
        }
        let Some(done) = stack.pop() else {
            return Ok(());
        };
        let parent = stack.last().map_or(top, |f| &f.dir);
        let error = match rustix::fs::unlinkat(&parent.fd, &done.name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => None,
            Err(e) => Some(
                done.error
                    .unwrap_or_else(|| with_context(e.into(), "rmdir", &done.dir.path)),
            ),
        };
        match (stack.last_mut(), error) {
            (Some(f), Some(e)) => {
                f.error.get_or_insert(e);
            }
            (None, Some(e)) => return Err(e),
            _ => {}
        }
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
