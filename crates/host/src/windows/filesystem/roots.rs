//! Roots held for the host's life: the kubelet directory and the working directories (and any
//! directory on the way to one that a walk passes) are opened once, not on every request.
//!
//! A held root is looked at again by its path at most once per [`RECHECK`] (on the seam's clock):
//! opened again, following links as the administrator's paths are, and compared by file ID
//! (`FileIdInfo`: the volume serial number and the file ID "uniquely identify a file on a single
//! computer"). When the path names another directory now (the root was replaced, or it is a link
//! that now leads elsewhere), the new one is held; when it names the same one, the handle already
//! held stays. A root is held sharing delete, so holding it never stands in the way of an
//! administrator removing or renaming it; a removal only completes once the handle is closed, so
//! when the new look fails the held handle is let go before the root is opened once more.
//!
//! A root is the administrator's choice, never a client's, so nothing on the way to it is looked
//! at, and between two looks a request acts below whatever the root's path names (the host acts
//! on paths built from the held directories' paths).

use super::*;
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// How long a held root is used before its path is looked at again.
pub(super) const RECHECK: Duration = Duration::from_secs(1);

/// The held roots, by the path the policy names them.
#[derive(Default)]
pub(crate) struct Roots {
    held: RwLock<HashMap<String, HeldRoot>>,
}

struct HeldRoot {
    dir: PinnedDir,
    /// Its volume serial number and file ID; `None` when the filesystem gives none (a failed
    /// query, or a zero file ID: FILE_ID_INFORMATION, "For file systems that do not support a
    /// 128-bit file ID, this field must be set to 0, and must be ignored"), and then the root
    /// is held anew at every look.
    id: Option<(u64, u128)>,
    /// When (seam clock) its path was last seen to name it.
    checked: Duration,
}

impl Roots {
    /// The root held for `path` if its path was looked at less than [`RECHECK`] ago.
    fn fresh(&self, path: &str, now: Duration) -> Option<PinnedDir> {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        held.get(path)
            .filter(|r| now.saturating_sub(r.checked) < RECHECK)
            .map(|r| r.dir.clone())
    }

    fn known(&self, path: &str) -> Option<(PinnedDir, Option<(u64, u128)>)> {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        held.get(path).map(|r| (r.dir.clone(), r.id))
    }

    fn keep(&self, path: &str, root: HeldRoot) {
        let mut held = self.held.write().unwrap_or_else(PoisonError::into_inner);
        held.insert(path.to_string(), root);
    }

    fn forget(&self, path: &str) {
        let mut held = self.held.write().unwrap_or_else(PoisonError::into_inner);
        held.remove(path);
    }
}

impl WindowsFilesystemHost {
    /// The directory at `path` (links followed), held; with `create`, made first (with every
    /// missing directory above it) unless it is held and was looked at less than [`RECHECK`] ago.
    pub(super) fn root(&self, path: &str, create: bool) -> io::Result<PinnedDir> {
        let now = self.os.now();
        if let Some(dir) = self.roots.fresh(path, now) {
            return Ok(dir);
        }
        let p = wpath(path)?;
        if create {
            self.fs().mkdir_all(&p).map_err(|e| io_error(&e))?;
        }
        // Looked at again once, as it is now: a failure (a delete pending until our own handle
        // closes, among others) lets the held handle go and opens it as new.
        let looked = match self.roots.known(path) {
            Some((held, id)) => match self.open_root(&p, false) {
                Ok((_, now_id)) if id.is_some() && now_id == id => Some((held, id)),
                Ok(fresh) => Some(fresh),
                Err(_) => None,
            },
            None => None,
        };
        let (dir, id) = match looked {
            Some(found) => found,
            None => {
                self.roots.forget(path);
                self.open_root(&p, true).map_err(|e| io_error(&e))?
            }
        };
        self.roots.keep(
            path,
            HeldRoot {
                dir: dir.clone(),
                id,
                checked: now,
            },
        );
        Ok(dir)
    }

    /// Opens the directory at `p` (following links) sharing delete, and reads its file ID;
    /// `wait` waits out a delete-pending entry of the name ([`past_pending`]).
    fn open_root(&self, p: &[u16], wait: bool) -> Win32Result<(PinnedDir, Option<(u64, u128)>)> {
        let name = z(p);
        let open = || {
            self.os
                .open_entry(&name, access::READ_ATTRIBUTES, SHARE_ALL, true)
        };
        let raw = if wait {
            past_pending(&*self.os, &name, open)?
        } else {
            open()?
        };
        let dir = PinnedDir::held(p.to_vec(), self.os.clone(), raw, None);
        let (attrs, _) = self.os.attribute_tag(raw)?;
        if !has(attrs, attr::DIRECTORY) {
            return Err(OsError::new(ERROR_DIRECTORY));
        }
        let id = self.os.file_id(raw).ok().filter(|&(_, file)| file != 0);
        Ok((dir, id))
    }
}
