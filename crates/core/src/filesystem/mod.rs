//! Filesystem group: directories and links, confined to the allowed roots.
//!
//! [`FilesystemService`] holds the version-agnostic logic (validation, root protection); the
//! [`FilesystemHost`] trait is the thin OS layer implemented per platform in `csi-proxy-host`.

use crate::error::{Error, Kind, Result};
use crate::locks::{PathGuard, lock_path};
use crate::paths::{Found, Held, Mode, PathPolicy, PathStyle, Reached, Walk, Walker};
use std::io;
use std::sync::Arc;

/// OS primitives of the filesystem group, acting inside directories the host's [`Walker`] opened
/// while the path policy walked the request path: every method is handed the held directory, never
/// a path to resolve again.
///
/// Semantics follow upstream's: nothing here follows a final-component link unless it says so.
/// Creating directories and telling whether an entry exists are the walker's ([`Walker::make_dir`],
/// [`Walker::look`]).
pub trait FilesystemHost: Walker<Dir = Held> + Send + Sync {
    /// Removes the empty directory, link or mount point `name` inside `parent`; fails on a
    /// missing entry.
    fn remove(&self, parent: &Held, name: &str) -> io::Result<()>;
    /// Removes `name` inside `parent` recursively without following links and without touching
    /// what links and mount points lead to (they are unlinked / unmounted); a missing entry is
    /// success.
    fn remove_all(&self, parent: &Held, name: &str) -> io::Result<()>;
    /// Removes everything inside the held directory `dir` as [`FilesystemHost::remove_all`]
    /// would, keeping `dir` itself.
    fn remove_contents(&self, dir: &Held) -> io::Result<()>;
    /// Creates a link `name` inside `parent` pointing to `target` (a directory link when `target`
    /// is a directory); fails if `name` exists.
    fn create_symlink(&self, parent: &Held, name: &str, target: &str) -> io::Result<()>;
    /// True for a mount point `name` inside `parent` whose volume can be reached, and for a
    /// link to a network share that can be reached; true for any other link (the service
    /// answers about link targets itself, looking only inside the roots, and asks here only
    /// about those it leaves to the host); false for anything else that exists; an error for a
    /// missing entry.
    fn is_symlink(&self, parent: &Held, name: &str) -> io::Result<bool>;
    /// A path naming `name` inside the held `parent` that the OS resolves only through the held
    /// directory, valid while `parent` is held: for other groups' hosts, which act on paths.
    /// `None` when this host has no such path (test doubles).
    fn held_entry_path(&self, parent: &Held, name: &str) -> Option<String>;
    /// A path naming exactly the held directory `dir`, as [`FilesystemHost::held_entry_path`].
    fn held_dir_path(&self, dir: &Held) -> Option<String>;
    /// The content of the regular file `name` inside `parent`, opened without following a
    /// link and without blocking on a FIFO: kubelet's per-volume records, which a client may
    /// have written. More than `limit` bytes is an `InvalidData` error. `Unsupported` where the
    /// host cannot read files (a profile then has no record to claim by, and is refused).
    fn read_small(&self, parent: &Held, name: &str, limit: usize) -> io::Result<Vec<u8>> {
        let _ = (parent, name, limit);
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// The most bytes of kubelet's per-volume record read (kubelet writes a few hundred).
pub const VOL_DATA_LIMIT: usize = 64 * 1024;

/// Reads kubelet's per-volume records ([`crate::profiles::VolDataReader`]) through the
/// filesystem host: the directory is walked by the roots' rules (no link leads out, none is
/// followed at the record), and the record is parsed with bounds.
pub struct VolDataFromHost {
    host: Arc<dyn FilesystemHost>,
    /// The roots without any profile (the reader works for every profile's scope).
    policy: PathPolicy,
}

impl VolDataFromHost {
    /// A reader over `fs`'s host and roots.
    pub fn new(fs: &FilesystemService) -> Self {
        VolDataFromHost {
            host: fs.host.clone(),
            policy: fs.policy.with_scope(crate::profiles::Scope::all()),
        }
    }
}

impl crate::profiles::VolDataReader for VolDataFromHost {
    fn driver_of(&self, op: &str, dir: &str, file: &[&str]) -> Result<Option<String>> {
        let Some((name, subdirs)) = file.split_last() else {
            return Ok(None);
        };
        let sep = match self.policy.style() {
            PathStyle::Windows => "\\",
            PathStyle::Posix => "/",
        };
        let mut parent = dir.to_string();
        for d in subdirs {
            parent.push_str(sep);
            parent.push_str(d);
        }
        let held = match self
            .policy
            .walk(op, &parent, Mode::FOLLOW, self.host.as_ref())?
        {
            Walk::Reached(Reached {
                found: Found::Dir(d),
                ..
            }) => d,
            _ => return Ok(None),
        };
        let bytes = match self.host.read_small(&held, name, VOL_DATA_LIMIT) {
            Ok(b) => b,
            Err(e) if crate::paths::names_nothing(&e) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => return Ok(None),
            // A link, a directory, a file too large: not a record kubelet wrote, and never
            // one a profile is given a directory by.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(Error::new(
                    Kind::PermissionDenied,
                    op,
                    format!("kubelet's record {:?} in {dir:?}", file.join("/")),
                    e,
                ));
            }
            Err(e) => {
                return Err(Error::io(
                    op,
                    format!("kubelet's record {:?} in {dir:?}", file.join("/")),
                    &e,
                ));
            }
        };
        Ok(driver_named(&bytes))
    }
}

/// The `driverName` kubelet's record names: a JSON object of strings. Anything else (not
/// JSON, no such field, not a string) names no driver.
pub fn driver_named(bytes: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let name = value.as_object()?.get("driverName")?.as_str()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// A request path checked and held for another group's host: `os_path` names what was checked
/// through the directories held open here, so the host acting on it while this lives acts on
/// what was checked.
pub struct HeldPath {
    /// The path to give the OS (valid while this lives).
    pub os_path: String,
    /// The request path, normalised, for messages.
    pub normalised: String,
    /// The parent directory and, when the path was followed, the directory it leads to.
    _held: (Held, Option<Held>),
    /// The path held against other changes ([`FilesystemService::hold_to_change`]).
    _order: Option<PathGuard>,
}

/// The version-agnostic filesystem service every filesystem API version is served by.
#[derive(Clone)]
pub struct FilesystemService {
    host: Arc<dyn FilesystemHost>,
    policy: Arc<PathPolicy>,
}

impl FilesystemService {
    /// A service over `host`, confining paths with `policy`.
    pub fn new(host: Arc<dyn FilesystemHost>, policy: Arc<PathPolicy>) -> Self {
        Self { host, policy }
    }

    /// The same service judging paths for `scope` (one profile's endpoints).
    pub fn with_scope(&self, scope: crate::profiles::Scope) -> Self {
        Self {
            host: self.host.clone(),
            policy: Arc::new(self.policy.with_scope(scope)),
        }
    }

    /// The path policy, shared with other groups that take paths.
    pub fn policy(&self) -> &Arc<PathPolicy> {
        &self.policy
    }

    /// The host, shared with other groups that need its link probe.
    pub fn host(&self) -> &Arc<dyn FilesystemHost> {
        &self.host
    }

    /// Holds `path` for operation `op`, which changes what is there, until the guard is dropped:
    /// another change of the path, or of a path above or below it, waits for it (until its own
    /// deadline). A call whose caller gave up may still be running (a hung removal); the
    /// caller's retry and the calls after it then wait for it to end, instead of doing their
    /// work beside it and having it undone when the stale call acts late (a mount point made
    /// again, then removed by the stale Rmdir). Paths are compared as written (normalised, and
    /// case-folded on Windows): retries and the calls that follow name the same path.
    pub fn order(&self, op: &str, path: &str) -> Result<PathGuard> {
        let normalised = self.policy.check(op, path)?;
        let (key, separator) = match self.policy.style() {
            PathStyle::Windows => (normalised.to_lowercase(), '\\'),
            PathStyle::Posix => (normalised.clone(), '/'),
        };
        lock_path(key, separator, op, &format!("{normalised:?}"))
    }

    /// Walks `path` for operation `op` through the host's handles. A call whose caller stopped
    /// waiting during the walk (a slow share, a hung device) goes no further: what it resolved
    /// may have been replaced meanwhile by the caller's retry, and acting on it would undo that.
    pub fn walk(&self, op: &str, path: &str, mode: Mode) -> Result<Walk<Held>> {
        let w = self.policy.walk(op, path, mode, self.host.as_ref())?;
        crate::deadline::check(op, path)?;
        Ok(w)
    }

    /// Confines `path` for operation `op`; returns it normalised.
    pub fn confine(&self, op: &str, path: &str) -> Result<String> {
        self.walk(op, path, Mode::ENTRY)
            .map(|w| w.normalised().to_string())
    }

    /// Confines `path` for operation `op`, following a link at the final component too; returns
    /// where the path leads (for operations that act on the link's destination).
    pub fn confine_following(&self, op: &str, path: &str) -> Result<String> {
        self.walk(op, path, Mode::FOLLOW)
            .map(|w| w.resolved().to_string())
    }

    /// Walks `path` for another group's operation `op` and holds it. With `follow`, a final link
    /// is followed and the directory it leads to is held (its own path given to the OS); without,
    /// the final entry is named inside its held parent. `Ok(None)`: nothing exists there (a
    /// directory above it is missing, or, with `follow`, the entry itself).
    pub fn hold(&self, op: &str, path: &str, follow: bool) -> Result<Option<HeldPath>> {
        let mode = if follow { Mode::FOLLOW } else { Mode::ENTRY };
        let r = match self.walk(op, path, mode)? {
            Walk::Reached(r) => r,
            Walk::Absent { .. } => return Ok(None),
        };
        let os_path = match &r.found {
            Found::Missing if follow => return Ok(None),
            // (A foreign mount a followed path leads to was refused by the walk.)
            Found::Dir(d) | Found::Volume(d) if follow => self.host.held_dir_path(d),
            _ => self.host.held_entry_path(&r.parent, &r.name),
        };
        let os_path = os_path.unwrap_or_else(|| r.resolved.clone());
        // Without `follow` the entry itself is acted on: a handle the walk opened on it would
        // stand in the way (an open directory keeps a mount on it busy; Windows refuses to
        // delete what is open without FILE_SHARE_DELETE). Its parent stays held.
        let Reached {
            parent,
            found,
            normalised,
            ..
        } = r;
        let dir = if follow { found.into_dir() } else { None };
        Ok(Some(HeldPath {
            os_path,
            normalised,
            _held: (parent, dir),
            _order: None,
        }))
    }

    /// Checks `path` for another group's operation `op` that mounts or makes a link there, before
    /// the call takes its disk or share (the lock order, [`crate::locks`]): confined (lexically;
    /// the walk comes with [`FilesystemService::hold_to_change`]), and not a directory every
    /// client's paths lie under ([`PathPolicy::is_shared`]), which the call would hold for as
    /// long as its disk or share takes to answer. Returns the path normalised.
    pub fn check_target(&self, op: &str, path: &str) -> Result<String> {
        let normalised = self.policy.check(op, path)?;
        if self.policy.is_shared(&normalised) {
            return Err(Error::new(
                Kind::PermissionDenied,
                op,
                format!("{normalised:?}"),
                "an allowed root, or a directory kubelet keeps for every driver and pod, is \
                 never a mount target nor a link: the call would hold every path below it",
            ));
        }
        Ok(normalised)
    }

    /// As [`FilesystemService::hold`] without following, for an operation that changes what is
    /// at `path` (a mount, a link): the path is checked as [`FilesystemService::check_target`]
    /// does, and held against other changes ([`FilesystemService::order`]) until the
    /// [`HeldPath`] is dropped. A call that needs a disk or a share holds it before this.
    pub fn hold_to_change(&self, op: &str, path: &str) -> Result<Option<HeldPath>> {
        self.check_target(op, path)?;
        let order = self.order(op, path)?;
        Ok(self.hold(op, path, false)?.map(|held| HeldPath {
            _order: Some(order),
            ..held
        }))
    }

    /// Refuses a path that is, or leads to, an allowed root.
    fn protect_root(&self, op: &str, walk: &Walk<Held>) -> Result<()> {
        for path in [walk.normalised(), walk.resolved()] {
            if self.policy.is_root(path) {
                return Err(Error::new(
                    Kind::PermissionDenied,
                    op,
                    format!("{path:?}"),
                    "an allowed root itself cannot be removed or emptied",
                ));
            }
        }
        Ok(())
    }

    /// PathExists: whether anything exists at `path` (a dangling link counts).
    pub fn path_exists(&self, path: &str) -> Result<bool> {
        const OP: &str = "PathExists";
        let exists = self.policy.exists(OP, path, self.host.as_ref())?;
        crate::deadline::check(OP, path)?;
        Ok(exists)
    }

    /// Mkdir: recursive and idempotent; an existing directory, or a link to one, is success.
    pub fn mkdir(&self, path: &str) -> Result<()> {
        const OP: &str = "Mkdir";
        let _order = self.order(OP, path)?;
        let r = reached(OP, self.walk(OP, path, Mode::CREATE)?)?;
        match r.found {
            Found::Dir(_) | Found::Volume(_) | Found::Foreign(_) => Ok(()),
            _ => Err(io_error(
                OP,
                &r,
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a directory",
                ),
            )),
        }
    }

    /// Rmdir: with `force`, recursive and a missing path is success; without, only an empty
    /// directory or a link is removed.
    pub fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        const OP: &str = "Rmdir";
        let _order = self.order(OP, path)?;
        let walk = self.walk(OP, path, Mode::ENTRY)?;
        self.protect_root(OP, &walk)?;
        let r = match walk {
            Walk::Reached(r) if r.found.exists() => r,
            _ if force => return Ok(()),
            absent => return Err(not_found(OP, &absent)),
        };
        // The entry itself is removed: a handle the walk opened on it would stand in the way
        // (Windows refuses to delete what is open without FILE_SHARE_DELETE).
        let Reached {
            parent,
            name,
            found,
            normalised,
            ..
        } = r;
        drop(found);
        if force {
            self.host.remove_all(&parent, &name)
        } else {
            self.host.remove(&parent, &name)
        }
        .map_err(|e| Error::io(OP, format!("{normalised:?}"), &e))
    }

    /// RmdirContents: empties the directory (or what a final link leads to), keeps it.
    pub fn rmdir_contents(&self, path: &str) -> Result<()> {
        const OP: &str = "RmdirContents";
        let _order = self.order(OP, path)?;
        let walk = self.walk(OP, path, Mode::FOLLOW)?;
        self.protect_root(OP, &walk)?;
        let r = reached(OP, walk)?;
        match &r.found {
            Found::Dir(dir) | Found::Volume(dir) => self
                .host
                .remove_contents(dir)
                .map_err(|e| io_error(OP, &r, e)),
            Found::Missing => Err(not_found(OP, &Walk::Reached(r))),
            // The walk refused a foreign mount it followed to; a link it followed is walked on.
            Found::Other | Found::Link(_) | Found::Foreign(_) => Err(io_error(
                OP,
                &r,
                io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            )),
        }
    }

    /// CreateSymlink: a link at `target_path` pointing to `source_path` (upstream's naming).
    pub fn create_symlink(&self, source_path: &str, target_path: &str) -> Result<()> {
        const OP: &str = "CreateSymlink";
        // Upstream validates the target (the link) first, then the source.
        let _order = self.order(OP, target_path)?;
        let walk = self.walk(OP, target_path, Mode::ENTRY)?;
        let source = self.confine(OP, source_path)?;
        let what = |link: &str| format!("link {link:?} -> {source:?}");
        let r = match walk {
            Walk::Reached(r) if !r.found.exists() => r,
            Walk::Reached(r) => {
                return Err(Error::new(
                    Kind::AlreadyExists,
                    OP,
                    what(&r.normalised),
                    "the link's path exists already",
                ));
            }
            Walk::Absent { normalised, .. } => {
                return Err(Error::new(
                    Kind::NotFound,
                    OP,
                    what(&normalised),
                    "the directory to hold the link does not exist",
                ));
            }
        };
        self.host
            .create_symlink(&r.parent, &r.name, &source)
            .map_err(|e| Error::io(OP, what(&r.normalised), &e))
    }

    /// IsSymlink: true for a link or mount point whose target exists; error on a missing path.
    ///
    /// Only what lies inside the roots is looked at: a link's direct target is walked through the
    /// roots as a link target (one hop, upstream's Readlink then Lstat), and a link leading outside
    /// them is answered as a link (true) without looking there, so the answer never tells whether a
    /// path outside the roots exists.
    pub fn is_symlink(&self, path: &str) -> Result<bool> {
        const OP: &str = "IsSymlink";
        let r = match self.walk(OP, path, Mode::ENTRY)? {
            Walk::Reached(r) if r.found.exists() => r,
            absent => return Err(not_found(OP, &absent)),
        };
        if let Found::Link(target) = &r.found
            && !is_network_path(self.policy.style(), target)
        {
            return match self.walk(OP, path, Mode::LINK_TARGET) {
                Ok(Walk::Reached(t)) => Ok(t.found.exists()),
                Ok(Walk::Absent { .. }) => Ok(false),
                Err(e) if e.kind() == Kind::PermissionDenied => Ok(true),
                Err(e) => Err(e),
            };
        }
        // What counts as a link is the host's: mount points do (drivers use `!IsSymlink` as
        // "likely not a mount point"), a file can be one (raw block volumes). A link to a
        // network share (Windows: the SMB staging link) is the host's to answer too: drivers
        // read a dead share's link as one to remove and map again.
        self.host
            .is_symlink(&r.parent, &r.name)
            .map_err(|e| io_error(OP, &r, e))
    }
}

/// Whether a link target names a network share (Windows UNC: `\\server\share`, or its NT form
/// `\??\UNC\…`) rather than a path on this host.
fn is_network_path(style: PathStyle, target: &str) -> bool {
    let unc_nt = [r"\??\", r"\\?\"].iter().any(|p| {
        target
            .strip_prefix(p)
            .and_then(|rest| rest.get(..4))
            .is_some_and(|u| u.eq_ignore_ascii_case(r"UNC\"))
    });
    style == PathStyle::Windows
        && (unc_nt
            || target.starts_with(r"\\")
                && !target.starts_with(r"\\?\")
                && !target.starts_with(r"\\.\"))
}

/// The walk's result when every component before the last must exist.
fn reached(op: &str, walk: Walk<Held>) -> Result<Reached<Held>> {
    match walk {
        Walk::Reached(r) => Ok(r),
        absent => Err(not_found(op, &absent)),
    }
}

/// "No such file or directory" about the request path.
fn not_found(op: &str, walk: &Walk<Held>) -> Error {
    Error::io(
        op,
        format!("{:?}", walk.normalised()),
        &io::Error::from(io::ErrorKind::NotFound),
    )
}

/// A host error about the request path.
fn io_error(op: &str, r: &Reached<Held>, e: io::Error) -> Error {
    Error::io(op, format!("{:?}", r.normalised), &e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A call whose caller stopped waiting while its path was resolved acts on nothing.
    #[test]
    fn a_caller_that_has_gone_resolves_no_path() {
        let fs = crate::testing::kubelet_fs();
        let past = Instant::now() - Duration::from_millis(1);
        let Err(e) = crate::deadline::within(Some(past), || {
            fs.walk("Rmdir", "/var/lib/kubelet/pods/p/mount", Mode::ENTRY)
        }) else {
            panic!("resolved for a caller that has gone");
        };
        assert_eq!(e.kind(), Kind::DeadlineExceeded);
        assert!(e.to_string().contains("Rmdir"), "{e}");
    }
}
