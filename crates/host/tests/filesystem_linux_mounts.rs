//! Mount points under the Linux filesystem host: removal unmounts (never lazily) and never
//! deletes what a mount shows; `is_symlink` and `link_target` recognise mounts.
//!
//! These need `CAP_SYS_ADMIN`; without it each test prints why it is skipped and returns.

#![cfg(target_os = "linux")]

use csi_proxy_core::paths::PathStyle;
use csi_proxy_core::paths::{LinkProbe, LinkTarget};
use csi_proxy_core::testing::PathOps;
use csi_proxy_host::linux::filesystem::LinuxFilesystemHost;
use csi_proxy_host::linux::mountinfo;
use rustix::mount::{MountFlags, UnmountFlags};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

fn host() -> PathOps<LinuxFilesystemHost> {
    PathOps::new(LinuxFilesystemHost::new(), PathStyle::Posix)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn write(p: &Path, content: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// Mount points made by a test; whatever is still mounted when the test ends is detached
/// (test clean-up only; the code under test never detaches lazily).
struct Mounts(Vec<PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            while rustix::mount::unmount(p, UnmountFlags::DETACH).is_ok() {}
        }
    }
}

impl Mounts {
    /// `None` (after printing why) when this process may not mount.
    fn new() -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: mount tests need root (euid is not 0)");
            return None;
        }
        Some(Mounts(Vec::new()))
    }

    fn bind(&mut self, from: &Path, to: &Path) -> Option<()> {
        fs::create_dir_all(to).unwrap();
        self.0.push(to.to_path_buf());
        match rustix::mount::mount_bind(from, to) {
            Ok(()) => Some(()),
            Err(rustix::io::Errno::PERM) => {
                eprintln!("SKIPPED: bind mount refused with EPERM (no CAP_SYS_ADMIN here)");
                None
            }
            Err(e) => panic!("bind {from:?} -> {to:?}: {e}"),
        }
    }

    fn tmpfs(&mut self, at: &Path) -> Option<()> {
        fs::create_dir_all(at).unwrap();
        self.0.push(at.to_path_buf());
        match rustix::mount::mount("tmpfs", at, "tmpfs", MountFlags::empty(), c"size=1m") {
            Ok(()) => Some(()),
            Err(rustix::io::Errno::PERM) => {
                eprintln!("SKIPPED: tmpfs mount refused with EPERM (no CAP_SYS_ADMIN here)");
                None
            }
            Err(e) => panic!("tmpfs at {at:?}: {e}"),
        }
    }
}

fn mounted_at(p: &Path) -> bool {
    let real = fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    mountinfo::read()
        .unwrap()
        .iter()
        .any(|m| m.mount_point == real)
}

/// Every file below `dir`, with its content.
fn snapshot(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((p.clone(), fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Rmdir(force) of a mount point itself unmounts it (what drivers do with their staging path);
/// of a directory with a mount below it refuses, removing nothing: what is mounted inside
/// belongs to someone else (kubelet's subPath binds, secret tmpfs, other drivers' volumes).
#[test]
fn rmdir_force_unmounts_the_path_itself_never_a_mount_below_it() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    write(&outside.join("keep"), "precious");
    write(&outside.join("sub").join("keep2"), "precious too");
    let before = snapshot(&outside);
    let root = t.path().join("root");
    let stage = root.join("plugins").join("stage");
    if mounts.bind(&outside, &stage).is_none() {
        return;
    }
    assert!(stage.join("keep").exists());
    assert!(host().is_symlink(s(&stage)).unwrap());
    write(&root.join("sibling"), "s");

    let e = host().remove_all(s(&root)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    assert!(e.to_string().contains("never unmounts"), "{e}");
    assert!(mounted_at(&stage), "a mount below the path stays");
    assert!(root.join("sibling").exists(), "nothing was removed");

    host().remove_all(s(&stage)).unwrap();
    assert!(!mounted_at(&stage));
    assert!(!stage.exists());
    host().remove_all(s(&root)).unwrap();
    assert!(!root.exists());
    assert_eq!(
        snapshot(&outside),
        before,
        "nothing under the source was deleted"
    );
}

#[test]
fn tmpfs_is_a_volume_and_is_unmounted_by_rmdir_force() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let vol = t.path().join("root").join("vol");
    if mounts.tmpfs(&vol).is_none() {
        return;
    }
    write(&vol.join("data"), "on tmpfs");
    assert!(host().is_symlink(s(&vol)).unwrap(), "mount points count");
    assert_eq!(
        host().link_target(s(&vol)).unwrap(),
        Some(LinkTarget::Volume)
    );
    assert!(host().path_exists(s(&vol)).unwrap());
    // A plain directory inside the volume is not a link.
    fs::create_dir(vol.join("d")).unwrap();
    assert!(!host().is_symlink(s(&vol.join("d"))).unwrap());
    assert_eq!(host().link_target(s(&vol.join("d"))).unwrap(), None);

    host().remove_all(s(&vol)).unwrap();
    assert!(!vol.exists());
    assert!(!mounted_at(&vol));
}

#[test]
fn bind_mount_of_a_subtree_is_foreign() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let sub = t.path().join("outside").join("sub");
    write(&sub.join("f"), "x");
    let b = t.path().join("root").join("b");
    if mounts.bind(&sub, &b).is_none() {
        return;
    }
    match host().link_target(s(&b)).unwrap() {
        Some(LinkTarget::Foreign(why)) => {
            assert!(why.starts_with("bind mount of "), "{why}");
            assert!(why.contains("outside/sub"), "{why}");
        }
        other => panic!("expected Foreign, got {other:?}"),
    }
    assert!(host().is_symlink(s(&b)).unwrap());
    host().remove(s(&b)).unwrap();
    assert!(!b.exists());
    assert!(!mounted_at(&b));
    assert!(sub.join("f").exists());
}

#[test]
fn busy_mount_is_not_detached_and_nothing_is_deleted() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let vol = root.join("vol");
    if mounts.tmpfs(&vol).is_none() {
        return;
    }
    write(&vol.join("open-file"), "in use");
    write(&root.join("sibling"), "s");
    let held = fs::File::open(vol.join("open-file")).unwrap();

    let e = host().remove_all(s(&vol)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    assert!(mounted_at(&vol), "still mounted: never detached lazily");
    assert_eq!(fs::read_to_string(vol.join("open-file")).unwrap(), "in use");

    let e = host().remove(s(&vol)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    let e = host().remove_contents(s(&root)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    assert!(root.join("sibling").exists(), "nothing was removed");

    drop(held);
    host().remove_all(s(&vol)).unwrap();
    host().remove_all(s(&root)).unwrap();
    assert!(!root.exists());
}

#[test]
fn nested_mounts_are_busy_not_deleted() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let outer = root.join("outer");
    if mounts.tmpfs(&outer).is_none() {
        return;
    }
    let outside = t.path().join("outside");
    write(&outside.join("keep"), "precious");
    let inner = outer.join("inner");
    if mounts.bind(&outside, &inner).is_none() {
        return;
    }
    for top in [&root, &outer] {
        let e = host().remove_all(s(top)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    }
    assert!(mounted_at(&outer) && mounted_at(&inner));
    assert_eq!(
        fs::read_to_string(outside.join("keep")).unwrap(),
        "precious"
    );

    // Once the inner mount is gone by itself, the outer mount point and the rest go.
    rustix::mount::unmount(&inner, UnmountFlags::empty()).unwrap();
    host().remove_all(s(&outer)).unwrap();
    host().remove_all(s(&root)).unwrap();
    assert!(!root.exists());
    assert_eq!(
        fs::read_to_string(outside.join("keep")).unwrap(),
        "precious"
    );
}

#[test]
fn stacked_mounts_are_all_unmounted() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    write(&outside.join("keep"), "precious");
    let root = t.path().join("root");
    let m = root.join("m");
    if mounts.bind(&outside, &m).is_none() || mounts.tmpfs(&m).is_none() {
        return;
    }
    write(&m.join("on-top"), "tmpfs");
    host().remove_all(s(&m)).unwrap();
    assert!(!m.exists());
    assert!(!mounted_at(&m));
    assert_eq!(snapshot(&outside).len(), 1);
}

/// RmdirContents never unmounts what is inside the directory: it refuses, removing nothing.
#[test]
fn rmdir_contents_never_unmounts_what_is_inside() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    write(&outside.join("keep"), "precious");
    let dir = t.path().join("dir");
    write(&dir.join("plain").join("f"), "x");
    if mounts.bind(&outside, &dir.join("mnt")).is_none() {
        return;
    }
    let e = host().remove_contents(s(&dir)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    assert!(mounted_at(&dir.join("mnt")), "the mount inside stays");
    assert!(dir.join("plain").join("f").exists(), "nothing was removed");
    host().remove_all(s(&dir.join("mnt"))).unwrap();
    host().remove_contents(s(&dir)).unwrap();
    assert!(dir.is_dir());
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    assert_eq!(
        fs::read_to_string(outside.join("keep")).unwrap(),
        "precious"
    );
}

#[test]
fn rmdir_contents_of_a_mounted_volume_empties_the_volume() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let vol = t.path().join("vol");
    if mounts.tmpfs(&vol).is_none() {
        return;
    }
    write(&vol.join("a").join("b"), "x");
    host().remove_contents(s(&vol)).unwrap();
    assert!(mounted_at(&vol), "the mount point itself stays");
    assert_eq!(fs::read_dir(&vol).unwrap().count(), 0);
}

#[test]
fn link_inside_a_mounted_volume_is_a_path() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let vol = t.path().join("vol");
    if mounts.tmpfs(&vol).is_none() {
        return;
    }
    std::os::unix::fs::symlink("/etc", vol.join("etc")).unwrap();
    assert_eq!(
        host().link_target(s(&vol.join("etc"))).unwrap(),
        Some(LinkTarget::Path("/etc".into()))
    );
    host().remove_all(s(&vol)).unwrap();
    assert!(!vol.exists());
    assert!(Path::new("/etc/hostname").exists() || Path::new("/etc").is_dir());
}

#[test]
fn file_mount_points_are_unmounted_not_written() {
    let Some(mut mounts) = Mounts::new() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let source = t.path().join("device-like");
    write(&source, "block data");
    let root = t.path().join("root");
    let target = root.join("publish").join("block");
    write(&target, "");
    mounts.0.push(target.clone());
    if let Err(e) = rustix::mount::mount_bind(&source, &target) {
        eprintln!("SKIPPED: file bind mount failed: {e}");
        return;
    }
    assert_eq!(fs::read_to_string(&target).unwrap(), "block data");
    assert!(
        host().is_symlink(s(&target)).unwrap(),
        "a mounted file counts"
    );
    assert_eq!(host().link_target(s(&target)).unwrap(), None);
    host().remove_all(s(&target)).unwrap();
    assert!(!target.exists());
    assert_eq!(fs::read_to_string(&source).unwrap(), "block data");

    // remove() without force does the same for a file mount point.
    write(&target, "");
    rustix::mount::mount_bind(&source, &target).unwrap();
    host().remove(s(&target)).unwrap();
    assert!(!target.exists());
    assert_eq!(fs::read_to_string(&source).unwrap(), "block data");
}
