//! Windows implementation of the filesystem group ([`FilesystemHost`] and [`LinkProbe`]), as
//! logic over the seam's file primitives ([`FileApi`]): it runs over the real Windows and, in
//! tests on Linux, over the simulated one.
//!
//! Semantics follow upstream-behaviour.md §2.3 and §7 items 6–8:
//!
//! * A reparse point (symbolic link, junction, volume mount point, or any other tag) is removed
//!   as itself and never descended into: `RemoveDirectoryW` for a directory reparse point
//!   ("when lpPathName refers to a directory junction, RemoveDirectory will remove the specified
//!   link regardless of whether the target directory is empty or not"), `DeleteFileW` for a
//!   file link ("If the path points to a symbolic link, the symbolic link is deleted, not the
//!   target", *Symbolic Link Effects on File Systems Functions*). A volume mount point is first
//!   given to `DeleteVolumeMountPointW` so the mount manager forgets it ("Deleting a mounted
//!   folder does not cause the underlying directory to be deleted"), then removed as a directory.
//! * Whether something is a reparse point is read with `GetFileAttributesW`, which "returns
//!   information about the link itself and not the link destination". Before descending into a
//!   directory, it is opened with `FILE_FLAG_OPEN_REPARSE_POINT` (so a link swapped in is opened
//!   as itself) and checked through that handle (`FileAttributeTagInfo`); the handle is held
//!   without `FILE_SHARE_DELETE` while the directory is emptied, so the directory cannot be
//!   renamed away and replaced by a junction meanwhile.
//! * `FILE_ATTRIBUTE_READONLY` blocks deletion; it is cleared (through a handle opened on the
//!   entry itself) when a delete fails with `ERROR_ACCESS_DENIED`, and the delete retried.
//! * Request paths are walked by the path policy through this host's [`Walker`]: each component
//!   below a root is opened as itself (`FILE_FLAG_OPEN_REPARSE_POINT`) without
//!   `FILE_SHARE_DELETE`, its reparse data read and checked by the policy, and every directory
//!   reached stays open that way while the operation runs ([`PinnedDir`]). CreateFileW: "If this
//!   flag is not specified, but the file or device has been opened for delete access, the
//!   function fails"; renaming or deleting an entry needs delete access, so none of the held
//!   directories can be renamed away and replaced by a junction, and the path built from them
//!   names the directories that were checked (the scheme of kubelet's subPath fix on Windows).
//! * `RemoveDirectoryW` and `DeleteFileW` only mark an entry that others hold open (sharing
//!   delete): it goes at the last close, and until then creating an entry of its name fails
//!   with ERROR_ACCESS_DENIED (delete-pending). Creating a directory waits that out, bounded
//!   ([`create_directory`]), so Rmdir followed by Mkdir of the same path works.
//! * Paths of 248 UTF-16 units or more (the documented `CreateDirectoryW` limit of `MAX_PATH`
//!   minus an 8.3 name) are passed with the `\\?\` prefix, which lifts the limit to 32,767.

use super::os::files::{
    self, ERROR_DIRECTORY, ERROR_INVALID_NAME, access, attr, create_symlink, io_error,
};
use super::os::{Handle, OsError, Win32, Win32Result, code, seam_host};
use csi_proxy_core::filesystem::FilesystemHost;
use csi_proxy_core::paths::{Found, Held, LinkProbe, LinkTarget, Walker};
use csi_proxy_formats::reparse::{self, LinkDestination, ReparsePoint};
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// How many times one entry is re-examined when it keeps changing under us.
const MAX_ATTEMPTS: usize = 16;

/// Paths this long (UTF-16 units) or longer get the `\\?\` prefix (`MAX_PATH` − 12).
const SHORT_PATH_LIMIT: usize = 248;

/// ERROR_NOT_READY, ERROR_BAD_NETPATH, ERROR_BAD_NET_NAME, ERROR_CANT_RESOLVE_FILENAME: a link's
/// target is not reachable (see [`unreachable`]).
const ERROR_BAD_NETPATH: u32 = 53;
const ERROR_BAD_NET_NAME: u32 = 67;
const ERROR_CANT_RESOLVE_FILENAME: u32 = 1921;

seam_host!(
    /// The Windows filesystem host.
    WindowsFilesystemHost
);

#[cfg(windows)]
pub use super::win32::running_under_wine;

// ---------------------------------------------------------------------------------------------
// Paths and errors

/// A path as UTF-16 without terminator (names on NTFS need not be valid UTF-16).
type WPath = Vec<u16>;

fn wpath(path: &str) -> io::Result<WPath> {
    if path.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path contains a NUL character",
        ));
    }
    Ok(files::utf16(path))
}

fn starts_with_ascii(p: &[u16], prefix: &str) -> bool {
    p.len() >= prefix.len()
        && p.iter()
            .zip(prefix.bytes())
            .all(|(&a, b)| a == u16::from(b))
}

fn is_sep(u: u16) -> bool {
    u == u16::from(b'\\') || u == u16::from(b'/')
}

/// The form handed to Win32: `\\?\`-prefixed (with `/` turned into `\`, as the prefix disables
/// that normalisation) when the path is long, as given otherwise.
fn z(p: &[u16]) -> WPath {
    let verbatim = [r"\\?\", r"\\.\", r"\??\"]
        .iter()
        .any(|pre| starts_with_ascii(p, pre));
    let drive_absolute = p.len() >= 3
        && p[0] < 0x80
        && (p[0] as u8).is_ascii_alphabetic()
        && p[1] == u16::from(b':')
        && is_sep(p[2]);
    let unc = p.len() >= 2 && is_sep(p[0]) && is_sep(p[1]);
    if p.len() < SHORT_PATH_LIMIT || verbatim || !(drive_absolute || unc) {
        return p.to_vec();
    }
    let (prefix, rest) = if unc {
        (r"\\?\UNC\", &p[2..])
    } else {
        (r"\\?\", p)
    };
    let mut out: WPath = Vec::with_capacity(p.len() + 8);
    out.extend(prefix.encode_utf16());
    out.extend(
        rest.iter()
            .map(|&u| if is_sep(u) { u16::from(b'\\') } else { u }),
    );
    out
}

fn join(parent: &[u16], name: &[u16]) -> WPath {
    let mut p = parent.to_vec();
    if p.last().is_some_and(|&u| !is_sep(u)) {
        p.push(u16::from(b'\\'));
    }
    p.extend_from_slice(name);
    p
}

/// The parent directory of `p`, if it has one below a root (`C:\`, `\\server\share`).
fn parent(p: &[u16]) -> Option<&[u16]> {
    let trimmed = p.len() - p.iter().rev().take_while(|&&u| is_sep(u)).count();
    let i = p[..trimmed].iter().rposition(|&u| is_sep(u))?;
    let parent = &p[..i];
    let root = parent.len() == 2 && parent[1] == u16::from(b':');
    let unc_share =
        starts_with_ascii(parent, r"\\") && parent[2..].iter().filter(|&&u| is_sep(u)).count() <= 1;
    (!parent.is_empty() && !unc_share).then_some(if root { &p[..=i] } else { parent })
}

fn show(p: &[u16]) -> String {
    String::from_utf16_lossy(p)
}

fn is_code(e: &OsError, c: u32) -> bool {
    e.code == c
}

/// An error with the operation and the (inner) path it concerns, keeping its kind.
fn with_context(e: &OsError, what: &str, path: &[u16]) -> io::Error {
    let io = io_error(e);
    io::Error::new(io.kind(), format!("{what} {}: {io}", show(path)))
}

fn has(attrs: u32, flag: u32) -> bool {
    attrs & flag != 0
}

/// How long creating a directory waits for a delete-pending entry of its name to go: whoever
/// holds it (a scanner, an indexer, a container runtime) closes it at its own pace.
const DELETE_PENDING_LIMIT: Duration = Duration::from_secs(10);
/// The pause between two attempts.
const DELETE_PENDING_POLL: Duration = Duration::from_millis(50);

/// `CreateDirectoryW(path)`, waiting out a delete-pending entry of the name ([`past_pending`]).
fn create_directory(os: &dyn Win32, path: &[u16]) -> Win32Result<()> {
    past_pending(os, path, || os.create_directory(path))
}

/// Runs `call` on `path`; while the entry there is delete-pending (ERROR_ACCESS_DENIED although
/// its directory still lists it: DeleteFileW and RemoveDirectoryW, Remarks, "marks a file for
/// deletion on close ... the file deletion does not occur until the last handle to the file is
/// closed"), runs it again until the entry has gone, for at most [`DELETE_PENDING_LIMIT`] and
/// never past the caller's deadline.
fn past_pending<T>(
    os: &dyn Win32,
    path: &[u16],
    mut call: impl FnMut() -> Win32Result<T>,
) -> Win32Result<T> {
    super::os::retry_within(os, DELETE_PENDING_LIMIT, DELETE_PENDING_POLL, || {
        let r = call();
        let pending =
            matches!(&r, Err(e) if is_code(e, code::ACCESS_DENIED) && os.find_entry(path).is_ok());
        if pending {
            tracing::debug!(path = %show(path), "a delete-pending entry is in the way");
        }
        (r, pending)
    })
}

const SHARE_ALL: u32 = access::SHARE_READ | access::SHARE_WRITE | access::SHARE_DELETE;
/// Sharing for a directory we are emptying: others may read and write, but nobody may delete or
/// rename it while we hold it.
const SHARE_PIN: u32 = access::SHARE_READ | access::SHARE_WRITE;

/// The filesystem logic over one seam.
struct Fs<'a> {
    os: &'a dyn Win32,
}

impl<'a> Fs<'a> {
    /// Opens an existing file or directory; with `follow == false` a reparse point itself.
    fn open(&self, path: &[u16], access: u32, share: u32, follow: bool) -> Win32Result<Handle<'a>> {
        super::os::open_entry(self.os, &z(path), access, share, follow)
    }

    /// The attributes of the entry itself (a link's own, not its target's).
    fn attributes(&self, path: &[u16]) -> Win32Result<u32> {
        self.os.file_attributes(&z(path))
    }

    fn read_reparse_point(&self, path: &[u16]) -> io::Result<ReparsePoint> {
        let data = self.os.reparse_data(&z(path)).map_err(|e| io_error(&e))?;
        Ok(reparse::parse(&data)?)
    }

    /// The reparse tag of the entry at `path`, from its directory entry: needs no access to the
    /// entry itself, as upstream's check.
    fn reparse_tag(&self, path: &[u16]) -> Win32Result<Option<u32>> {
        let (attrs, tag) = self.os.find_entry(&z(path))?;
        Ok(has(attrs, attr::REPARSE_POINT).then_some(tag))
    }

    /// The names in the directory at `path`, without `.` and `..`.
    fn list_dir(&self, path: &[u16]) -> Win32Result<Vec<WPath>> {
        let pattern = join(path, &[u16::from(b'*')]);
        match self.os.find_names(&z(&pattern)) {
            Ok(names) => Ok(names
                .into_iter()
                .filter(|n| !n.is_empty() && n != &[0x2e] && n != &[0x2e, 0x2e])
                .collect()),
            // Nothing matched (a root directory has no `.`/`..`).
            Err(e) if is_code(&e, code::FILE_NOT_FOUND) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Clears FILE_ATTRIBUTE_READONLY on the entry itself (never a link's target); `Ok(true)`
    /// if it was set.
    fn clear_readonly(&self, path: &[u16]) -> Win32Result<bool> {
        let access = access::READ_ATTRIBUTES | access::WRITE_ATTRIBUTES;
        let h = self.open(path, access, SHARE_ALL, false)?;
        let attrs = self.os.basic_attributes(h.raw())?;
        if !has(attrs, attr::READONLY) {
            return Ok(false);
        }
        let mut attrs = attrs & !attr::READONLY;
        if attrs == 0 {
            attrs = attr::NORMAL;
        }
        self.os.set_basic_attributes(h.raw(), attrs)?;
        Ok(true)
    }

    /// Runs a delete; on ERROR_ACCESS_DENIED clears the read-only attribute and retries once.
    fn with_readonly_retry(
        &self,
        path: &[u16],
        delete: impl Fn(&[u16]) -> Win32Result<()>,
    ) -> Win32Result<()> {
        let name = z(path);
        match delete(&name) {
            Err(e)
                if is_code(&e, code::ACCESS_DENIED)
                    && self.clear_readonly(path).unwrap_or(false) =>
            {
                delete(&name)
            }
            r => r,
        }
    }

    /// An empty directory, or a directory reparse point itself.
    fn remove_directory(&self, path: &[u16]) -> Win32Result<()> {
        self.with_readonly_retry(path, |p| self.os.remove_directory(p))
    }

    /// A file, or a file symbolic link itself.
    fn delete_file(&self, path: &[u16]) -> Win32Result<()> {
        self.with_readonly_retry(path, |p| self.os.delete_file(p))
    }

    /// Removes a reparse point itself; a volume mount point is first given to
    /// `DeleteVolumeMountPointW`, so the mount manager forgets it. What it leads to is never
    /// touched.
    fn remove_reparse_point(&self, path: &[u16], attrs: u32) -> Win32Result<()> {
        if !has(attrs, attr::DIRECTORY) {
            return self.delete_file(path);
        }
        if self
            .read_reparse_point(path)
            .is_ok_and(|rp| rp.is_volume_mount_point())
        {
            tracing::info!(path = %show(path), "deleting volume mount point");
            // DeleteVolumeMountPointW needs the trailing backslash. A name that is not valid
            // UTF-16 cannot be passed; RemoveDirectoryW below still removes the mount point.
            let mut mp = show(path);
            if !mp.ends_with('\\') {
                mp.push('\\');
            }
            if let Err(e) = self.os.delete_volume_mount_point(&mp) {
                tracing::warn!(path = %mp, error = %e, "DeleteVolumeMountPointW failed");
            }
        }
        self.remove_directory(path)
    }

    /// Removes `path` unless it is a non-empty plain directory, which is pinned and listed
    /// instead.
    fn step(&self, path: WPath) -> io::Result<Step<'a>> {
        for _ in 0..MAX_ATTEMPTS {
            let attrs = match self.attributes(&path) {
                Ok(a) => a,
                Err(e) if e.names_nothing() => return Ok(Step::Gone),
                Err(e) => return Err(with_context(&e, "attributes of", &path)),
            };
            if has(attrs, attr::REPARSE_POINT) {
                return match self.remove_reparse_point(&path, attrs) {
                    Err(e) if !e.names_nothing() => {
                        Err(with_context(&e, "remove reparse point", &path))
                    }
                    _ => Ok(Step::Gone),
                };
            }
            if !has(attrs, attr::DIRECTORY) {
                return match self.delete_file(&path) {
                    Err(e) if is_code(&e, code::ACCESS_DENIED) && self.dir_now(&path) => continue,
                    Err(e) if !e.names_nothing() => Err(with_context(&e, "delete", &path)),
                    _ => Ok(Step::Gone),
                };
            }
            match self.remove_directory(&path) {
                Ok(()) => return Ok(Step::Gone),
                Err(e) if e.names_nothing() => return Ok(Step::Gone),
                Err(e) if is_code(&e, code::DIR_NOT_EMPTY) => {}
                Err(e) if is_code(&e, ERROR_DIRECTORY) => continue, // now a file
                Err(e) => return Err(with_context(&e, "remove directory", &path)),
            }
            let pin = match self.open(&path, access::READ_ATTRIBUTES, SHARE_PIN, false) {
                Ok(h) => h,
                Err(e) if e.names_nothing() => return Ok(Step::Gone),
                Err(e) => return Err(with_context(&e, "open", &path)),
            };
            let (attrs, _) = self
                .os
                .attribute_tag(pin.raw())
                .map_err(|e| with_context(&e, "query", &path))?;
            if has(attrs, attr::REPARSE_POINT) || !has(attrs, attr::DIRECTORY) {
                continue; // swapped for a link or a file since we looked
            }
            let entries = self
                .list_dir(&path)
                .map_err(|e| with_context(&e, "list", &path))?;
            return Ok(Step::Descend(Frame {
                path,
                pin,
                entries: entries.into_iter(),
                error: None,
            }));
        }
        Err(io::Error::other(format!(
            "{}: changed {MAX_ATTEMPTS} times while being removed",
            show(&path)
        )))
    }

    fn dir_now(&self, path: &[u16]) -> bool {
        self.attributes(path).is_ok_and(|a| has(a, attr::DIRECTORY))
    }

    /// Removes `path` and everything below it (iteratively); after an error the remaining
    /// siblings are still removed and the first error is returned.
    fn remove_tree(&self, path: WPath) -> io::Result<()> {
        let mut stack = match self.step(path)? {
            Step::Gone => return Ok(()),
            Step::Descend(frame) => vec![frame],
        };
        loop {
            let Some(frame) = stack.last_mut() else {
                return Ok(());
            };
            if let Some(name) = frame.entries.next() {
                match self.step(join(&frame.path, &name)) {
                    Ok(Step::Descend(child)) => stack.push(child),
                    Ok(Step::Gone) => {}
                    Err(e) => {
                        frame.error.get_or_insert(e);
                    }
                }
                continue;
            }
            let Some(Frame {
                path, pin, error, ..
            }) = stack.pop()
            else {
                return Ok(());
            };
            // Unpin first: our own handle without FILE_SHARE_DELETE would block the removal.
            drop(pin);
            let error = match self.remove_directory(&path) {
                Ok(()) => None,
                Err(e) if e.names_nothing() => None,
                Err(e) => {
                    Some(error.unwrap_or_else(|| with_context(&e, "remove directory", &path)))
                }
            };
            match (stack.last_mut(), error) {
                (Some(parent), Some(e)) => {
                    parent.error.get_or_insert(e);
                }
                (None, Some(e)) => return Err(e),
                _ => {}
            }
        }
    }

    /// Whether the directory at `path`, links followed, is a directory (what std's
    /// `metadata().is_dir()` answers).
    fn is_dir_following(&self, path: &[u16]) -> bool {
        self.open(path, 0, SHARE_ALL, true)
            .and_then(|h| self.os.attribute_tag(h.raw()))
            .is_ok_and(|(a, _)| has(a, attr::DIRECTORY))
    }

    /// Creates `path` and the directories above it that are missing; an existing directory
    /// (or link to one) is success, anything else there is ERROR_ALREADY_EXISTS.
    fn mkdir_all(&self, path: &[u16]) -> Win32Result<()> {
        let mut missing = vec![path];
        loop {
            let Some(&p) = missing.last() else {
                return Ok(());
            };
            match create_directory(self.os, &z(p)) {
                Ok(()) => {
                    missing.pop();
                }
                Err(e) if is_code(&e, code::PATH_NOT_FOUND) => match parent(p) {
                    Some(up) if missing.len() < 4096 => missing.push(up),
                    _ => return Err(e),
                },
                Err(e) if self.is_dir_following(p) => {
                    tracing::trace!(path = %show(p), error = %e, "already a directory");
                    missing.pop();
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A directory being emptied, pinned open without FILE_SHARE_DELETE.
struct Frame<'a> {
    path: WPath,
    pin: Handle<'a>,
    entries: std::vec::IntoIter<WPath>,
    error: Option<io::Error>,
}

enum Step<'a> {
    Gone,
    Descend(Frame<'a>),
}

/// Errors that mean "nothing is there" for a link's target (a dangling link answers false, not
/// an error); any other error, such as a logon failure on a share, is reported.
fn unreachable(e: &OsError) -> bool {
    [
        code::FILE_NOT_FOUND,
        code::PATH_NOT_FOUND,
        code::NOT_READY,
        ERROR_BAD_NETPATH,
        ERROR_BAD_NET_NAME,
        ERROR_INVALID_NAME,
        code::UNRECOGNIZED_VOLUME,
        ERROR_CANT_RESOLVE_FILENAME,
    ]
    .contains(&e.code)
}

impl WindowsFilesystemHost {
    fn fs(&self) -> Fs<'_> {
        Fs { os: &*self.os }
    }

    /// Opens `path` as itself (or, with `follow`, what it leads to) and pins it.
    fn pin(&self, path: WPath, follow: bool, up: Option<PinnedDir>) -> Win32Result<PinnedDir> {
        let name = z(&path);
        let raw = past_pending(&*self.os, &name, || {
            self.os
                .open_entry(&name, access::READ_ATTRIBUTES, SHARE_PIN, follow)
        })?;
        let pin = PinnedDir(Arc::new(Pin {
            path,
            os: self.os.clone(),
            raw,
            _up: up,
        }));
        Ok(pin)
    }
}

/// A directory held open without `FILE_SHARE_DELETE`, and with it every directory above it that
/// the walk reached (see the module docs): while it lives, its path names what was checked.
#[derive(Clone)]
pub(crate) struct PinnedDir(Arc<Pin>);

struct Pin {
    path: WPath,
    os: Arc<dyn Win32>,
    raw: u64,
    _up: Option<PinnedDir>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.os.close(self.raw);
    }
}

impl PinnedDir {
    /// The path of `name` inside this directory.
    fn child(&self, name: &str) -> io::Result<WPath> {
        Ok(join(&self.0.path, &wpath(name)?))
    }
}

/// The directory a walk on this host holds.
fn pinned(h: &Held) -> io::Result<&PinnedDir> {
    h.downcast_ref::<PinnedDir>()
        .ok_or_else(|| io::Error::other("a directory handle that this host did not open"))
}

impl Walker for WindowsFilesystemHost {
    type Dir = Held;

    fn open_trusted(&self, path: &str, create: bool) -> io::Result<Held> {
        let p = wpath(path)?;
        if create {
            self.fs().mkdir_all(&p).map_err(|e| io_error(&e))?;
        }
        // A root is the administrator's: a link there is followed.
        let pin = self.pin(p, true, None).map_err(|e| io_error(&e))?;
        let (attrs, _) = self.os.attribute_tag(pin.0.raw).map_err(|e| io_error(&e))?;
        if !has(attrs, attr::DIRECTORY) {
            return Err(io_error(&OsError::new(ERROR_DIRECTORY)));
        }
        Ok(Box::new(pin))
    }

    fn look(&self, dir: &Held, name: &str, _at: &str) -> io::Result<Found<Held>> {
        let dir = pinned(dir)?;
        let path = dir.child(name)?;
        let pin = match self.pin(path, false, Some(dir.clone())) {
            Ok(pin) => pin,
            Err(e) if e.names_nothing() => return Ok(Found::Missing),
            Err(e) => return Err(io_error(&e)),
        };
        let (attrs, _) = self.os.attribute_tag(pin.0.raw).map_err(|e| io_error(&e))?;
        if has(attrs, attr::REPARSE_POINT) {
            // Read while the entry is held: it cannot be replaced meanwhile.
            match self.fs().read_reparse_point(&pin.0.path)?.destination() {
                Some(LinkDestination::Path(target)) => return Ok(Found::Link(target)),
                Some(LinkDestination::Volume(_)) => return Ok(Found::Volume(Box::new(pin))),
                Some(LinkDestination::Other(nt)) => {
                    return Ok(Found::Foreign(format!("link to the NT path {nt:?}")));
                }
                // Deduplication, cloud files, …: data reparse points, not links.
                None => {}
            }
        }
        Ok(if has(attrs, attr::DIRECTORY) {
            Found::Dir(Box::new(pin))
        } else {
            Found::Other
        })
    }

    fn make_dir(&self, dir: &Held, name: &str, _at: &str) -> io::Result<()> {
        let path = pinned(dir)?.child(name)?;
        match create_directory(&*self.os, &z(&path)) {
            Err(e) if !is_code(&e, code::ALREADY_EXISTS) => Err(io_error(&e)),
            _ => Ok(()),
        }
    }
}

/// Answers about a path string (for callers that only check a path; request paths go through
/// [`Walker`]).
impl LinkProbe for WindowsFilesystemHost {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        let fs = self.fs();
        let p = wpath(path)?;
        let attrs = match fs.attributes(&p) {
            Ok(a) => a,
            Err(e) if e.names_nothing() => return Ok(None),
            Err(e) => return Err(io_error(&e)),
        };
        if !has(attrs, attr::REPARSE_POINT) {
            return Ok(None);
        }
        Ok(match fs.read_reparse_point(&p)?.destination() {
            // Deduplication, cloud files, …: data reparse points, not links.
            None => None,
            Some(LinkDestination::Path(target)) => Some(LinkTarget::Path(target)),
            Some(LinkDestination::Volume(_)) => Some(LinkTarget::Volume),
            Some(LinkDestination::Other(nt)) => {
                Some(LinkTarget::Foreign(format!("link to the NT path {nt:?}")))
            }
        })
    }
}

impl FilesystemHost for WindowsFilesystemHost {
    fn remove(&self, parent: &Held, name: &str) -> io::Result<()> {
        let fs = self.fs();
        let p = pinned(parent)?.child(name)?;
        let attrs = fs.attributes(&p).map_err(|e| io_error(&e))?;
        if has(attrs, attr::REPARSE_POINT) {
            fs.remove_reparse_point(&p, attrs)
        } else if has(attrs, attr::DIRECTORY) {
            fs.remove_directory(&p)
        } else {
            fs.delete_file(&p)
        }
        .map_err(|e| io_error(&e))
    }

    fn remove_all(&self, parent: &Held, name: &str) -> io::Result<()> {
        self.fs().remove_tree(pinned(parent)?.child(name)?)
    }

    fn remove_contents(&self, dir: &Held) -> io::Result<()> {
        let fs = self.fs();
        let p = pinned(dir)?.0.path.clone();
        let attrs = fs.attributes(&p).map_err(|e| io_error(&e))?;
        // The contents of a mounted volume are the directory's contents; a symbolic link's or
        // junction's target is somewhere else and is not emptied through it.
        let follow = if has(attrs, attr::REPARSE_POINT) {
            if !fs.read_reparse_point(&p)?.is_volume_mount_point() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "is a link; its target is not emptied through it",
                ));
            }
            true
        } else if !has(attrs, attr::DIRECTORY) {
            return Err(io_error(&OsError::new(ERROR_DIRECTORY)));
        } else {
            false
        };
        let pin = fs
            .open(&p, access::READ_ATTRIBUTES, SHARE_PIN, follow)
            .map_err(|e| io_error(&e))?;
        let (attrs, _) = fs.os.attribute_tag(pin.raw()).map_err(|e| io_error(&e))?;
        if !has(attrs, attr::DIRECTORY) || (!follow && has(attrs, attr::REPARSE_POINT)) {
            return Err(io::Error::other("changed while being emptied; retry"));
        }
        let mut first_error = None;
        for name in fs.list_dir(&p).map_err(|e| io_error(&e))? {
            if let Err(e) = fs.remove_tree(join(&p, &name)) {
                first_error.get_or_insert(e);
            }
        }
        drop(pin);
        first_error.map_or(Ok(()), Err)
    }

    fn create_symlink(&self, parent: &Held, name: &str, target: &str) -> io::Result<()> {
        let fs = self.fs();
        let target_w = wpath(target)?;
        // A directory link iff the target is a directory now (following links), as upstream;
        // a missing target gives a file link.
        let directory = fs.is_dir_following(&target_w);
        let link = pinned(parent)?.child(name)?;
        create_symlink(fs.os, &z(&link), &z(&target_w), directory).map_err(|e| io_error(&e))
    }

    /// The pinned directory's path: every directory on it is held open without
    /// `FILE_SHARE_DELETE`, so it names what was checked.
    fn held_entry_path(&self, parent: &Held, name: &str) -> Option<String> {
        Some(show(&pinned(parent).ok()?.child(name).ok()?))
    }

    fn held_dir_path(&self, dir: &Held) -> Option<String> {
        Some(show(&pinned(dir).ok()?.0.path))
    }

    fn is_symlink(&self, parent: &Held, name: &str) -> io::Result<bool> {
        let fs = self.fs();
        let p = pinned(parent)?.child(name)?;
        let path = &show(&p);
        let attrs = fs.attributes(&p).map_err(|e| io_error(&e))?;
        if !has(attrs, attr::REPARSE_POINT) {
            return Ok(false);
        }
        // Upstream tests `tag & IO_REPARSE_TAG_MOUNT_POINT != 0`, a bitmask that every Microsoft
        // tag passes (deduplicated files included). Here only real links count: symbolic links
        // and mount points (junctions and volume mount points).
        let tag = fs.reparse_tag(&p).map_err(|e| io_error(&e))?;
        if tag != Some(reparse::IO_REPARSE_TAG_SYMLINK)
            && tag != Some(reparse::IO_REPARSE_TAG_MOUNT_POINT)
        {
            return Ok(false);
        }
        let named = fs
            .read_reparse_point(&p)?
            .destination()
            .and_then(|d| reparse::direct_target(path, &d));
        match named {
            // GetFileAttributesW does not follow a final link (the entry's own attributes), so
            // only the link's direct target is looked at, as upstream's Lstat does.
            Some(target) => match fs.attributes(&wpath(&target)?) {
                Ok(_) => Ok(true),
                Err(e) if unreachable(&e) => Ok(false),
                Err(e) => Err(io_error(&e)),
            },
            // An NT path with no Win32 form (`\??\GLOBALROOT\Device\…`): nothing the roots
            // let anyone look at, so it is answered as a link without following it (issue 34).
            None => Ok(true),
        }
    }
}

#[cfg(test)]
mod tests;
