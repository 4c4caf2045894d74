//! Test doubles shared by this workspace's tests (feature `testing`).

use crate::filesystem::{FilesystemHost, FilesystemService};
use crate::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
use std::io;
use std::sync::Arc;

/// A filesystem host with no links anywhere on it, where every operation succeeds and nothing
/// exists; for tests of groups that only need path confinement from the filesystem service.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLinksFs;

impl LinkProbe for NoLinksFs {
    fn link_target(&self, _: &str) -> io::Result<Option<LinkTarget>> {
        Ok(None)
    }
}

impl FilesystemHost for NoLinksFs {
    fn path_exists(&self, _: &str) -> io::Result<bool> {
        Ok(false)
    }
    fn mkdir_all(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_all(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_contents(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn create_symlink(&self, _: &str, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn is_symlink(&self, _: &str) -> io::Result<bool> {
        Ok(false)
    }
}

/// A filesystem service over [`NoLinksFs`] confining paths to `/var/lib/kubelet` (Posix rules).
pub fn kubelet_fs() -> FilesystemService {
    let policy =
        PathPolicy::new(PathStyle::Posix, "/var/lib/kubelet", &[]).expect("a valid test root");
    FilesystemService::new(Arc::new(NoLinksFs), Arc::new(policy))
}
