//! Files as seen through directory descriptors, never following a final link: what one entry
//! is (`statx` without following), directories opened `O_NOFOLLOW`, mount points told apart from
//! plain directories, and the step of a removal that never leaves the tree it was given.

use super::*;
use std::sync::OnceLock;

/// How many times one directory entry is re-examined when it keeps changing under us (each
/// unmount of a stacked mount also counts as one).
pub(super) const MAX_ATTEMPTS: usize = 64;

/// What `statx` (or `fstatat` on kernels without it) says about one file, without following
/// a final symbolic link.
#[derive(Debug, Clone, Copy)]
pub(super) struct Node {
    pub(super) file_type: FileType,
    pub(super) dev: u64,
    pub(super) ino: u64,
    /// `stx_mnt_id` when the kernel reports it.
    pub(super) mnt_id: Option<u64>,
    /// `STATX_ATTR_MOUNT_ROOT` when the kernel reports it.
    pub(super) mount_root: Option<bool>,
}

impl Node {
    pub(super) fn from_statx(s: &rustix::fs::Statx) -> Self {
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

    pub(super) fn from_stat(s: &rustix::fs::Stat) -> Self {
        Node {
            file_type: FileType::from_raw_mode(s.st_mode),
            dev: s.st_dev,
            ino: s.st_ino,
            mnt_id: None,
            mount_root: None,
        }
    }

    pub(super) fn is_dir(&self) -> bool {
        self.file_type == FileType::Directory
    }

    /// Whether this node is on another mount than `parent` (the kernel's own answer where it
    /// gives one, else device and mount-ID comparison).
    pub(super) fn differs_in_mount_from(&self, parent: &Node) -> bool {
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

pub(super) const STATX_MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::INO)
    .union(StatxFlags::MNT_ID);

/// `name` in `dir`, not following a final symlink nor triggering an automount.
pub(super) fn node_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Node, Errno> {
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
pub(super) fn node_of(fd: BorrowedFd<'_>) -> Result<Node, Errno> {
    match rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, STATX_MASK) {
        Ok(s) => Ok(Node::from_statx(&s)),
        Err(Errno::NOSYS) => rustix::fs::fstat(fd).map(|s| Node::from_stat(&s)),
        Err(e) => Err(e),
    }
}

/// An open directory, what it is, and the path it is known by (for messages and for
/// `/proc/self/mountinfo` lookups).
pub(super) struct OpenDir {
    /// `O_RDONLY`, or `O_PATH` when the fast path opened it (every use is an `*at` call, a
    /// `/proc/self/fd` path, or a `statx` through it; listing re-opens `.`).
    pub(super) fd: OwnedFd,
    /// What `fd` is, read through it when first needed: most lookups never need it.
    node: OnceLock<Node>,
    pub(super) path: PathBuf,
}

impl OpenDir {
    /// Opens the directory at `path`, following links in it unless `nofollow` (which applies to
    /// the final component only).
    pub(super) fn open(path: &Path, nofollow: bool) -> io::Result<Self> {
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
        Ok(OpenDir::known(
            fd,
            node,
            real.unwrap_or_else(|| path.to_path_buf()),
        ))
    }

    /// A directory whose node was already read through `fd`.
    pub(super) fn known(fd: OwnedFd, node: Node, path: PathBuf) -> Self {
        OpenDir {
            fd,
            node: OnceLock::from(node),
            path,
        }
    }

    /// A directory whose node is read through `fd` when first needed.
    pub(super) fn unread(fd: OwnedFd, path: PathBuf) -> Self {
        OpenDir {
            fd,
            node: OnceLock::new(),
            path,
        }
    }

    /// What this directory is (`statx` through its descriptor, once).
    pub(super) fn node(&self) -> Result<Node, Errno> {
        if let Some(n) = self.node.get() {
            return Ok(*n);
        }
        let n = node_of(self.fd.as_fd())?;
        Ok(*self.node.get_or_init(|| n))
    }

    pub(super) fn child_path(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }
}

/// A lazily read snapshot of `/proc/self/mountinfo`.
#[derive(Default)]
pub(super) struct Mounts {
    pub(super) table: Option<Vec<MountInfo>>,
}

impl Mounts {
    pub(super) fn table(&mut self) -> io::Result<&[MountInfo]> {
        if self.table.is_none() {
            self.table = Some(mountinfo::read()?);
        }
        Ok(self.table.as_deref().unwrap_or_default())
    }

    pub(super) fn invalidate(&mut self) {
        self.table = None;
    }

    /// Whether the directory `name` in `parent`, described by `node`, is a mount point.
    pub(super) fn is_mount_point(
        &mut self,
        parent: &OpenDir,
        name: &OsStr,
        node: &Node,
    ) -> io::Result<bool> {
        if let Some(root) = node.mount_root {
            return Ok(root);
        }
        if node.differs_in_mount_from(&parent.node()?) {
            return Ok(true);
        }
        // Kernel < 5.8 and same device: a bind mount inside one filesystem only shows here.
        let path = parent.child_path(name);
        Ok(self.table()?.iter().any(|m| m.mount_point == path))
    }
}

/// Unmounts the mount on top of `name` in `parent` (non-lazy, not forced).
///
/// The target is named through the parent's descriptor (`/proc/self/fd/N/name`) so the
/// unmount hits the directory we examined even if a path component above it was swapped;
/// `UMOUNT_NOFOLLOW` refuses a final symlink put in its place. Without `/proc`, the path is
/// used.
pub(super) fn unmount_at(parent: &OpenDir, name: &OsStr) -> io::Result<()> {
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
pub(super) enum Step {
    /// The entry is gone (removed by us, unmounted and removed, or vanished meanwhile).
    Gone,
    /// A non-empty directory on the parent's mount, opened without following links: its
    /// contents must be removed first.
    Descend(OpenDir),
}

/// Removes `name` in `parent` if it is not a non-empty directory; otherwise opens it for
/// descent. Symlinks and other non-directories are unlinked; mount points are unmounted and
/// re-examined (stacked mounts, then the directory underneath).
pub(super) fn step(
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
            || opened.differs_in_mount_from(
                &parent
                    .node()
                    .map_err(|e| with_context(e.into(), "stat", &parent.path))?,
            )
        {
            continue;
        }
        return Ok(Step::Descend(OpenDir::known(fd, opened, path())));
    }
    Err(io::Error::other(format!(
        "{}: changed {MAX_ATTEMPTS} times while being removed",
        path().display()
    )))
}

/// The refusal of a removal that would have to unmount `mounts`, which lie below the path it
/// was asked to remove.
pub(super) fn mounted_below(mounts: &[PathBuf]) -> io::Error {
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
pub(super) fn refuse_mounts_below(mounts: &mut Mounts, dir: &Path) -> io::Result<()> {
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
