//! Filesystem group: directories and links, confined to the allowed roots.
//!
//! [`FilesystemService`] holds the version-agnostic logic (validation, root protection); the
//! [`FilesystemHost`] trait is the thin OS layer implemented per platform in `csi-proxy-host`.

use crate::error::{Error, Kind, Result};
use crate::paths::{LinkProbe, PathPolicy};
use std::io;
use std::sync::Arc;

/// OS primitives of the filesystem group. Paths are already confined and normalised.
///
/// Semantics follow upstream (upstream-behaviour.md §2.3): nothing here follows a final-component
/// link unless it says so.
pub trait FilesystemHost: LinkProbe + Send + Sync {
    /// Whether anything exists at `path`, without following a final link (a dangling link exists).
    fn path_exists(&self, path: &str) -> io::Result<bool>;
    /// Creates `path` and missing parents; an existing directory (or link to one) is success.
    fn mkdir_all(&self, path: &str) -> io::Result<()>;
    /// Removes an empty directory, or a link / mount point itself; fails on a missing path.
    fn remove(&self, path: &str) -> io::Result<()>;
    /// Removes `path` recursively without following links and without touching what links and
    /// mount points lead to (they are unlinked / unmounted); a missing path is success.
    fn remove_all(&self, path: &str) -> io::Result<()>;
    /// Removes everything inside the directory `path` as [`FilesystemHost::remove_all`] would,
    /// keeping `path` itself; fails if `path` is missing.
    fn remove_contents(&self, path: &str) -> io::Result<()>;
    /// Creates a link at `link` pointing to `target` (a directory link when `target` is a
    /// directory); fails if `link` exists.
    fn create_symlink(&self, target: &str, link: &str) -> io::Result<()>;
    /// True for a link / mount point whose target exists, false for anything else that exists;
    /// an error for a missing path.
    fn is_symlink(&self, path: &str) -> io::Result<bool>;
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

    /// The path policy, shared with other groups that take paths.
    pub fn policy(&self) -> &Arc<PathPolicy> {
        &self.policy
    }

    /// The host, shared with other groups that need its link probe.
    pub fn host(&self) -> &Arc<dyn FilesystemHost> {
        &self.host
    }

    /// Confines `path` for operation `op`.
    pub fn confine(&self, op: &str, path: &str) -> Result<String> {
        self.policy.confine(op, path, self.host.as_ref())
    }

    /// Confines `path` for operation `op`, following a link at the final component too; returns
    /// where the path leads (for operations that act on the link's destination).
    pub fn confine_following(&self, op: &str, path: &str) -> Result<String> {
        self.policy.confine_following(op, path, self.host.as_ref())
    }

    fn protect_root(&self, op: &str, path: &str) -> Result<()> {
        if self.policy.is_root(path) {
            return Err(Error::new(
                Kind::PermissionDenied,
                op,
                format!("{path:?}"),
                "an allowed root itself cannot be removed or emptied",
            ));
        }
        Ok(())
    }

    /// PathExists: whether anything exists at `path` (a dangling link counts).
    pub fn path_exists(&self, path: &str) -> Result<bool> {
        const OP: &str = "PathExists";
        let p = self.confine(OP, path)?;
        self.host
            .path_exists(&p)
            .map_err(|e| Error::io(OP, format!("{p:?}"), &e))
    }

    /// Mkdir: recursive and idempotent.
    pub fn mkdir(&self, path: &str) -> Result<()> {
        const OP: &str = "Mkdir";
        let p = self.confine(OP, path)?;
        self.host
            .mkdir_all(&p)
            .map_err(|e| Error::io(OP, format!("{p:?}"), &e))
    }

    /// Rmdir: with `force`, recursive and a missing path is success; without, only an empty
    /// directory or a link is removed.
    pub fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        const OP: &str = "Rmdir";
        let p = self.confine(OP, path)?;
        self.protect_root(OP, &p)?;
        let r = if force {
            self.host.remove_all(&p)
        } else {
            self.host.remove(&p)
        };
        r.map_err(|e| Error::io(OP, format!("{p:?}"), &e))
    }

    /// RmdirContents: empties the directory, keeps it.
    pub fn rmdir_contents(&self, path: &str) -> Result<()> {
        const OP: &str = "RmdirContents";
        // Emptying follows a final link, so the link's destination is what must be confined
        // (and must not be a root).
        let p = self
            .policy
            .confine_following(OP, path, self.host.as_ref())?;
        self.protect_root(OP, &p)?;
        self.host
            .remove_contents(&p)
            .map_err(|e| Error::io(OP, format!("{p:?}"), &e))
    }

    /// CreateSymlink: a link at `target_path` pointing to `source_path` (upstream's naming).
    pub fn create_symlink(&self, source_path: &str, target_path: &str) -> Result<()> {
        const OP: &str = "CreateSymlink";
        // Upstream validates the target (the link) first, then the source.
        let link = self.confine(OP, target_path)?;
        let source = self.confine(OP, source_path)?;
        self.host
            .create_symlink(&source, &link)
            .map_err(|e| Error::io(OP, format!("link {link:?} -> {source:?}"), &e))
    }

    /// IsSymlink: true for a link or mount point whose target exists; error on a missing path.
    pub fn is_symlink(&self, path: &str) -> Result<bool> {
        const OP: &str = "IsSymlink";
        let p = self.confine(OP, path)?;
        self.host
            .is_symlink(&p)
            .map_err(|e| Error::io(OP, format!("{p:?}"), &e))
    }
}
