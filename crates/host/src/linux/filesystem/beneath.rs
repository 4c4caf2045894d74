//! The walk's fast path on Linux ([`Walker::beneath`]): roots held for the daemon's life, and
//! the rest of a request path resolved below the held root by one `openat2` that the kernel
//! refuses at any link, mount point or `..` (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`). What it reaches was reached through plain
//! directories only, which is where the component walk would have led too; anything else
//! (`ELOOP`, `EXDEV`, a kernel before 5.6 or a seccomp filter without `openat2`) is left to that
//! walk, which reads and checks each link and mount point.
//!
//! A held root is looked at again by its path at most once per [`RECHECK`]: when its path names
//! another directory than the one held (the root was replaced, or something was mounted on it after
//! start), the new one is opened and held. Checking on every request would cost a `statx` per
//! request (the cost this avoids); checking only when a lookup fails would miss the case that
//! matters most, a volume mounted on the root after start, where lookups in the old directory
//! succeed and would act on it. So the window is bounded in time instead.

use super::*;
use rustix::fs::ResolveFlags;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// How long a held root is used before its path is looked at again.
pub(super) const RECHECK: Duration = Duration::from_secs(1);

/// The fast path's resolution: below the directory given, no link of any kind, no mount point
/// crossed (each answers `ELOOP` / `EXDEV`, and the component walk takes over).
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Set once `openat2` was found unusable in this process (Linux before 5.6, or a seccomp filter
/// that refuses it): every later path is walked, without asking the kernel again.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);
/// Set once the kernel was asked whether `openat2` is usable (at most once per process).
static PROBED: AtomicBool = AtomicBool::new(false);

/// Roots (and the directories on the way to them) held open, by the path the policy names them.
/// Only the policy's roots and their ancestors are opened as trusted, so this stays small: a
/// list compared byte for byte, which costs less per request than hashing a path.
#[derive(Debug, Default)]
pub(super) struct Roots {
    held: RwLock<Vec<HeldRoot>>,
}

#[derive(Debug)]
struct HeldRoot {
    path: PathBuf,
    dir: Arc<OpenDir>,
    /// When its path was last seen to name `dir`.
    checked: Instant,
}

impl std::fmt::Debug for OpenDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenDir").field("path", &self.path).finish()
    }
}

impl Roots {
    /// The directory at `path` (links followed: the administrator chose it), held.
    pub(super) fn open(&self, path: &Path) -> io::Result<Arc<OpenDir>> {
        let now = Instant::now();
        let known = {
            let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
            match held.iter().find(|r| r.path == path) {
                Some(r) if now.duration_since(r.checked) < RECHECK => return Ok(r.dir.clone()),
                Some(r) => Some(r.dir.clone()),
                None => None,
            }
        };
        // Looked at outside the lock: a slow filesystem under one root holds up no other.
        let dir = match known {
            Some(dir) if still_names(path, &dir)? => dir,
            _ => match OpenDir::open(path, false) {
                Ok(dir) => Arc::new(dir),
                Err(e) => {
                    self.forget(path);
                    return Err(e);
                }
            },
        };
        let mut held = self.held.write().unwrap_or_else(PoisonError::into_inner);
        let entry = HeldRoot {
            path: path.to_path_buf(),
            dir: dir.clone(),
            checked: now,
        };
        match held.iter_mut().find(|r| r.path == path) {
            Some(r) => *r = entry,
            None => held.push(entry),
        }
        Ok(dir)
    }

    fn forget(&self, path: &Path) {
        let mut held = self.held.write().unwrap_or_else(PoisonError::into_inner);
        held.retain(|r| r.path != path);
    }
}

/// Whether `path` (links followed) still names the directory `dir` holds, on the same mount.
fn still_names(path: &Path, dir: &OpenDir) -> io::Result<bool> {
    let now = match rustix::fs::statx(rustix::fs::CWD, path, AtFlags::empty(), STATX_MASK) {
        Ok(s) => Node::from_statx(&s),
        Err(Errno::NOSYS) => Node::from_stat(&rustix::fs::stat(path)?),
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let held = dir.node()?;
    Ok((now.dev, now.ino) == (held.dev, held.ino)
        && (now.mnt_id.is_none() || held.mnt_id.is_none() || now.mnt_id == held.mnt_id))
}

/// `names` below the held `root` in one lookup for the directories on the way (none when the
/// parent is the root) and one for the final entry, both refused by the kernel at any link or
/// mount point.
pub(super) fn beneath(root: &Held, names: &[&str]) -> io::Result<Beneath<Held>> {
    if NO_OPENAT2.load(Ordering::Relaxed) {
        return Ok(Beneath::Walk);
    }
    let Some((last, above)) = names.split_last() else {
        return Ok(Beneath::Walk);
    };
    let parent: Held = if above.is_empty() {
        match root.downcast_ref::<Arc<OpenDir>>() {
            Some(root) => Box::new(root.clone()),
            None => return Ok(Beneath::Walk),
        }
    } else {
        let root = held(root)?;
        let rest = above.join("/");
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::openat2(&root.fd, &rest, flags, Mode::empty(), RESOLVE) {
            Ok(fd) => Box::new(OpenDir::unread(fd, root.path.join(rest))),
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(Beneath::Absent),
            Err(e) => return refused(e, root),
        }
    };
    let dir = held(&parent)?;
    let name = OsStr::new(last);
    // `O_DIRECTORY`: a directory opens (its node is read only if an operation needs it);
    // anything else answers ENOTDIR (ELOOP for a link) and is looked at inside the parent.
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let found = match rustix::fs::openat2(&dir.fd, name, flags, Mode::empty(), RESOLVE) {
        Ok(fd) => Found::Dir(Box::new(OpenDir::unread(fd, dir.child_path(name))) as Held),
        Err(Errno::NOENT) => Found::Missing,
        Err(Errno::NOTDIR) | Err(Errno::LOOP) => match not_a_dir(dir, name)? {
            Some(found) => found,
            None => return Ok(Beneath::Walk),
        },
        Err(e) => return refused(e, dir),
    };
    Ok(Beneath::Reached { parent, found })
}

/// Whether `names` below the held `root` name anything, for a caller that wants no handle on
/// it (PathExists): the directories on the way resolved as [`beneath`] does (none when the parent
/// is the root), then one `statx` of the final name inside its parent, not followed, so no
/// descriptor is opened for it. `None`: the component walk decides.
pub(super) fn exists(root: &Held, names: &[&str]) -> io::Result<Option<bool>> {
    if NO_OPENAT2.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let Some((last, above)) = names.split_last() else {
        return Ok(None);
    };
    let root = held(root)?;
    let parent;
    let dir = if above.is_empty() {
        root.fd.as_fd()
    } else {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::openat2(&root.fd, above.join("/"), flags, Mode::empty(), RESOLVE) {
            Ok(fd) => {
                parent = fd;
                parent.as_fd()
            }
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(Some(false)),
            Err(e) => return refused(e, root).map(|_| None),
        }
    };
    Ok(match node_at(dir, OsStr::new(last)) {
        Ok(_) => Some(true),
        Err(Errno::NOENT) => Some(false),
        // Looked at again by the walk, which reports what it finds.
        Err(_) => None,
    })
}

/// What the final entry `name` in `dir` is when it did not open as a directory: one `statx` of
/// that one name inside the held directory, not followed (no handle on it is kept: operations
/// act on the name inside `dir`, as after the component walk). `None`: it changed meanwhile.
fn not_a_dir(dir: &OpenDir, name: &OsStr) -> io::Result<Option<Found<Held>>> {
    let node = match node_at(dir.fd.as_fd(), name) {
        Ok(node) => node,
        Err(Errno::NOENT) => return Ok(Some(Found::Missing)),
        Err(e) => return Err(e.into()),
    };
    if node.is_dir() {
        return Ok(None);
    }
    if node.file_type != FileType::Symlink {
        return Ok(Some(Found::Other));
    }
    match rustix::fs::readlinkat(dir.fd.as_fd(), name, Vec::new()) {
        Ok(target) => Ok(target.into_string().ok().map(Found::Link)),
        Err(Errno::INVAL) | Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What a refused `openat2` from `dir` means: the component walk decides, or an error.
fn refused(e: Errno, dir: &OpenDir) -> io::Result<Beneath<Held>> {
    match e {
        // A link (ELOOP), a mount point (EXDEV), a rename racing the lookup (EAGAIN): the walk
        // looks at each component and decides.
        Errno::LOOP | Errno::XDEV | Errno::AGAIN => Ok(Beneath::Walk),
        // No `openat2` (ENOSYS, before 5.6), a seccomp filter refusing it (EPERM or ENOSYS), or
        // flags this kernel does not know (EINVAL): asked once whether `openat2` works at all,
        // and if not, remembered, so the fallback costs nothing on later requests.
        Errno::NOSYS | Errno::PERM | Errno::INVAL => {
            if !PROBED.swap(true, Ordering::Relaxed) && !openat2_works(dir.fd.as_fd()) {
                NO_OPENAT2.store(true, Ordering::Relaxed);
            }
            Ok(Beneath::Walk)
        }
        e => Err(e.into()),
    }
}

/// Whether `openat2` with the fast path's flags works here: `.` of a directory already open
/// can only be refused by a kernel or a filter that refuses the call itself.
fn openat2_works(dir: BorrowedFd<'_>) -> bool {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    !matches!(
        rustix::fs::openat2(dir, ".", flags, Mode::empty(), RESOLVE),
        Err(Errno::NOSYS | Errno::PERM | Errno::INVAL)
    )
}
