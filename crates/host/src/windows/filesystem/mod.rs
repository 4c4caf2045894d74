//! Windows implementation of the filesystem group ([`FilesystemHost`] and [`LinkProbe`]), as
//! logic over the seam's file primitives ([`FileApi`]): it runs over the real Windows and, in
//! tests on Linux, over the simulated one.
//!
//! Semantics follow upstream's filesystem API:
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
//!   information about the link itself and not the link destination". The recursive removal
//!   (`removal.rs`) opens each entry as itself relative to its directory's handle and checks
//!   it through that handle (`FileAttributeTagInfo`); a directory being emptied is held without
//!   `FILE_SHARE_DELETE` while it is among the 8 deepest, so it cannot be renamed away and
//!   replaced by a junction meanwhile, and one met again after it was closed is checked by
//!   file ID.
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

/// The most bytes one `ReadFile` of [`FilesystemHost::read_small`] asks for.
const READ_CHUNK: usize = 64 * 1024;

/// ERROR_NOT_READY, ERROR_BAD_NETPATH, ERROR_BAD_NET_NAME, ERROR_CANT_RESOLVE_FILENAME: a link's
/// target is not reachable (see [`unreachable`]).
const ERROR_BAD_NETPATH: u32 = 53;
const ERROR_BAD_NET_NAME: u32 = 67;
const ERROR_CANT_RESOLVE_FILENAME: u32 = 1921;

seam_host!(
    /// The Windows filesystem host.
    WindowsFilesystemHost {
        roots: Arc<roots::Roots>
    }
);

#[cfg(windows)]
pub use super::win32::running_under_wine;

mod entries;
mod removal;
mod roots;
mod wide;

use entries::*;
#[cfg(test)]
pub(crate) use removal::{LISTING_BUFFER, OPEN_LEVELS};
use wide::*;

impl WindowsFilesystemHost {
    fn fs(&self) -> Fs<'_> {
        Fs { os: &*self.os }
    }

    /// Opens `path` as itself and pins it; also answers the handle.
    fn pin(&self, path: WPath, up: PinnedDir) -> Win32Result<(PinnedDir, u64)> {
        let name = z(&path);
        let raw = past_pending(&*self.os, &name, || {
            self.os
                .open_entry(&name, access::READ_ATTRIBUTES, SHARE_PIN, false)
        })?;
        Ok((PinnedDir::held(path, self.os.clone(), raw, Some(up)), raw))
    }
}

/// A directory held open without `FILE_SHARE_DELETE`, and with it every directory above it that
/// the walk reached (see the module docs): while it lives, its path names what was checked.
#[derive(Clone)]
pub(crate) struct PinnedDir(Arc<Pin>);

struct Pin {
    path: WPath,
    os: Arc<dyn Win32>,
    /// `None` for a final entry only looked at ([`Walker::peek`]): its directory is held, it
    /// is not.
    raw: Option<u64>,
    _up: Option<PinnedDir>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let Some(raw) = self.raw {
            self.os.close(raw);
        }
    }
}

impl PinnedDir {
    /// `raw` (open on the directory at `path`), held with the directory above it.
    fn held(path: WPath, os: Arc<dyn Win32>, raw: u64, up: Option<PinnedDir>) -> Self {
        PinnedDir(Arc::new(Pin {
            path,
            os,
            raw: Some(raw),
            _up: up,
        }))
    }

    /// The directory `path` inside the held `up`, looked at but not held itself.
    fn unheld(path: WPath, up: &PinnedDir) -> Self {
        PinnedDir(Arc::new(Pin {
            path,
            os: up.0.os.clone(),
            raw: None,
            _up: Some(up.clone()),
        }))
    }

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

    /// A root is the administrator's: a link there is followed. Held for the host's life
    /// ([`roots`]).
    fn open_trusted(&self, path: &str, create: bool) -> io::Result<Held> {
        Ok(Box::new(self.root(path, create)?))
    }

    fn look(&self, dir: &Held, name: &str, _at: &str) -> io::Result<Found<Held>> {
        let dir = pinned(dir)?;
        let path = dir.child(name)?;
        let (pin, raw) = match self.pin(path, dir.clone()) {
            Ok(pin) => pin,
            Err(e) if e.names_nothing() => return Ok(Found::Missing),
            Err(e) => return Err(io_error(&e)),
        };
        let (attrs, _) = self.os.attribute_tag(raw).map_err(|e| io_error(&e))?;
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

    /// `GetFileAttributesW` of the name inside the held directory: the entry's own attributes
    /// ("not the link destination"), with no handle opened on it. Only a reparse point is
    /// opened and read, as [`Walker::look`] does.
    fn peek(&self, dir: &Held, name: &str, at: &str) -> io::Result<Found<Held>> {
        let held = pinned(dir)?;
        let path = z(&held.child(name)?);
        let attrs = match past_pending(&*self.os, &path, || self.os.file_attributes(&path)) {
            Ok(attrs) => attrs,
            Err(e) if e.names_nothing() => return Ok(Found::Missing),
            Err(e) => return Err(io_error(&e)),
        };
        Ok(if has(attrs, attr::REPARSE_POINT) {
            return self.look(dir, name, at);
        } else if has(attrs, attr::DIRECTORY) {
            Found::Dir(Box::new(PinnedDir::unheld(held.child(name)?, held)))
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
            .open(
                &p,
                access::READ_ATTRIBUTES | access::LIST_DIRECTORY,
                SHARE_PIN,
                follow,
            )
            .map_err(|e| io_error(&e))?;
        let (attrs, _) = fs.os.attribute_tag(pin.raw()).map_err(|e| io_error(&e))?;
        if !has(attrs, attr::DIRECTORY) || (!follow && has(attrs, attr::REPARSE_POINT)) {
            return Err(io::Error::other("changed while being emptied; retry"));
        }
        fs.remove_below(pin, p, follow)
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
            // An NT path with no Win32 form (`\??\GLOBALROOT\Device\…`): nothing the roots let
            // anyone look at, so it is answered as a link without following it.
            None => Ok(true),
        }
    }

    /// `name` is opened as itself (FILE_FLAG_OPEN_REPARSE_POINT: "normal reparse point
    /// processing will not occur", so a link there is not followed) with FILE_READ_DATA,
    /// sharing everything (kubelet may rewrite or remove its record meanwhile), and what the
    /// handle is open on is checked through the handle before a byte is read: a reparse point
    /// or a directory is refused. A named pipe lives in its own filesystem (`\\.\pipe\`),
    /// never in a directory here, so there is no FIFO to wait on; a delete-pending record is
    /// waited out as the walk does (bounded), then answers NotFound. The reads go to the end of
    /// the file (`ReadFile` answers no bytes there), at most `limit` + 1 bytes.
    fn read_small(&self, parent: &Held, name: &str, limit: usize) -> io::Result<Vec<u8>> {
        let path = z(&pinned(parent)?.child(name)?);
        let h = past_pending(&*self.os, &path, || {
            super::os::open_entry(
                &*self.os,
                &path,
                access::READ_DATA | access::READ_ATTRIBUTES,
                SHARE_ALL,
                false,
            )
        })
        .map_err(|e| io_error(&e))?;
        let (attrs, _) = self.os.attribute_tag(h.raw()).map_err(|e| io_error(&e))?;
        if has(attrs, attr::REPARSE_POINT) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name:?} is a link or another reparse point; not followed"),
            ));
        }
        if has(attrs, attr::DIRECTORY) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name:?} is a directory, not a file"),
            ));
        }
        let mut out = Vec::new();
        while out.len() <= limit {
            let want = (limit.saturating_add(1) - out.len()).min(READ_CHUNK);
            let got = self
                .os
                .read_handle(h.raw(), want)
                .map_err(|e| io_error(&e))?;
            if got.is_empty() {
                return Ok(out);
            }
            out.extend_from_slice(&got[..got.len().min(want)]);
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{name:?} is larger than {limit} bytes"),
        ))
    }
}

#[cfg(test)]
mod tests;
