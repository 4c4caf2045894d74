//! Test doubles shared by this workspace's tests (feature `testing`), and the partial host traits
//! ([`PartialDiskHost`] and its siblings) that let a fake implement only what its test reaches.

use crate::filesystem::{FilesystemHost, FilesystemService};
use crate::paths::{Found, Held, LinkProbe, LinkTarget, PathPolicy, PathStyle, Walker};
use std::io;
use std::sync::Arc;

mod hanging;
mod partial;
mod path_ops;
pub use hanging::{HOST_CALLS, HangPlan, Hanging, HostCall, SPARED_DISK};
pub use partial::{
    PartialDiskHost, PartialIscsiHost, PartialSmbHost, PartialSystemHost, PartialVolumeHost,
};
pub use path_ops::PathOps;

/// A filesystem host with no links anywhere on it, where every path is a directory and every
/// operation succeeds; for tests of groups that only need path confinement from the filesystem service.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLinksFs;

impl LinkProbe for NoLinksFs {
    fn link_target(&self, _: &str) -> io::Result<Option<LinkTarget>> {
        Ok(None)
    }
}

impl Walker for NoLinksFs {
    type Dir = Held;
    fn open_trusted(&self, _: &str, _: bool) -> io::Result<Held> {
        Ok(Box::new(()))
    }
    fn look(&self, _: &Held, _: &str, _: &str) -> io::Result<Found<Held>> {
        Ok(Found::Dir(Box::new(())))
    }
    fn make_dir(&self, _: &Held, _: &str, _: &str) -> io::Result<()> {
        Ok(())
    }
}

impl FilesystemHost for NoLinksFs {
    fn remove(&self, _: &Held, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_all(&self, _: &Held, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_contents(&self, _: &Held) -> io::Result<()> {
        Ok(())
    }
    fn create_symlink(&self, _: &Held, _: &str, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn is_symlink(&self, _: &Held, _: &str) -> io::Result<bool> {
        Ok(false)
    }
    fn held_entry_path(&self, _: &Held, _: &str) -> Option<String> {
        None
    }
    fn held_dir_path(&self, _: &Held) -> Option<String> {
        None
    }
}

/// A filesystem service over [`NoLinksFs`] confining paths to `/var/lib/kubelet` (Posix rules).
pub fn kubelet_fs() -> FilesystemService {
    let policy =
        PathPolicy::new(PathStyle::Posix, "/var/lib/kubelet", &[]).expect("a valid test root");
    FilesystemService::new(Arc::new(NoLinksFs), Arc::new(policy))
}

/// A host that implements nothing: every RPC of the disk, volume, SMB, iSCSI and system groups
/// answers UNIMPLEMENTED naming its group and RPC. For tests that serve groups they do not
/// exercise; the daemon itself always has a host for every group.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnimplementedHost;

impl PartialDiskHost for UnimplementedHost {
    /// Nothing is ever changed by this host, so no disk needs protecting from it; the RPC itself
    /// then answers UNIMPLEMENTED.
    fn disk_usage(&self, _: u32) -> crate::Result<crate::disk::DiskUsage> {
        Ok(crate::disk::DiskUsage::default())
    }
}
impl PartialVolumeHost for UnimplementedHost {
    /// As for disks: nothing is changed by this host, so the RPCs answer UNIMPLEMENTED.
    fn volume_disk_number(&self, _: &str) -> crate::Result<u32> {
        Ok(0)
    }

    fn disk_usage(&self, _: u32) -> crate::Result<crate::disk::DiskUsage> {
        Ok(crate::disk::DiskUsage::default())
    }
}
impl PartialSmbHost for UnimplementedHost {}
impl PartialIscsiHost for UnimplementedHost {}
impl PartialSystemHost for UnimplementedHost {}

/// Runs `f` on a thread of its own with a deadline `ms` from now (none: `None`), as a call
/// the daemon serves would; its answer arrives on the channel.
pub fn on_thread<T: Send + 'static>(
    ms: Option<u64>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::sync::mpsc::Receiver<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let deadline =
            ms.map(|ms| std::time::Instant::now() + std::time::Duration::from_millis(ms));
        let _ = tx.send(crate::deadline::within(deadline, f));
    });
    rx
}
