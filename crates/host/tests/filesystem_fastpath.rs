//! The walk's fast path on the Linux host: a plain path below a held root is resolved by one kernel
//! lookup ([`Walker::beneath`]); a link or a mount point on the way makes the host hand the path
//! back to the component walk, whose rules then decide (a link inside the roots and a mounted
//! volume are allowed, a link out is refused). Roots are held, and opened again once their path
//! names another directory.
//!
//! The mount test needs `CAP_SYS_ADMIN`; without it it prints why it is skipped and returns.

#![cfg(target_os = "linux")]

use csi_proxy_core::Kind;
use csi_proxy_core::paths::{Beneath, Found, Held, Mode, PathPolicy, PathStyle, Walk, Walker};
use csi_proxy_host::linux::filesystem::LinuxFilesystemHost;
use rustix::mount::{MountFlags, UnmountFlags};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// What `beneath` answers, in a word (the handles are dropped).
fn fast(host: &LinuxFilesystemHost, root: &Held, names: &[&str]) -> String {
    match host.beneath(root, names).unwrap() {
        Beneath::Reached { found, .. } => match found {
            Found::Dir(_) => "dir".into(),
            Found::Missing => "missing".into(),
            Found::Other => "other".into(),
            Found::Link(t) => format!("link {t}"),
            Found::Volume(_) => "volume".into(),
            Found::Foreign(_) => "foreign".into(),
        },
        Beneath::Absent => "absent".into(),
        Beneath::Walk => "walk".into(),
    }
}

/// The kubelet path `k` below a temporary directory, with the policy confining to it.
fn setup() -> (tempfile::TempDir, std::path::PathBuf, PathPolicy) {
    let tmp = tempfile::tempdir().unwrap();
    let k = tmp.path().join("kubelet");
    fs::create_dir_all(k.join("a/b/c")).unwrap();
    let policy = PathPolicy::new(PathStyle::Posix, s(&k), &[]).unwrap();
    (tmp, k, policy)
}

#[test]
fn a_plain_path_takes_the_fast_path() {
    let (_tmp, k, _) = setup();
    fs::write(k.join("a/b/file"), "x").unwrap();
    symlink("c", k.join("a/b/last-link")).unwrap();
    let host = LinuxFilesystemHost::new();
    let root = host.open_trusted(s(&k), false).unwrap();
    assert_eq!(fast(&host, &root, &["a"]), "dir");
    assert_eq!(fast(&host, &root, &["a", "b", "c"]), "dir");
    assert_eq!(fast(&host, &root, &["a", "b", "nothing"]), "missing");
    assert_eq!(fast(&host, &root, &["a", "nothing", "x"]), "absent");
    assert_eq!(fast(&host, &root, &["a", "b", "file"]), "other");
    assert_eq!(fast(&host, &root, &["a", "b", "file", "x"]), "absent");
    // A link at the end is reported, not followed (the walk follows it when asked to).
    assert_eq!(fast(&host, &root, &["a", "b", "last-link"]), "link c");
}

/// PathExists's fast path ([`Walker::exists_beneath`]): the same answers as the walk for plain
/// paths, from a look at the final entry (no descriptor opened for it); a link on the way is the
/// walk's, which refuses the one that leads out instead of answering about what is there.
#[test]
fn path_exists_looks_at_the_final_entry_and_leaves_links_on_the_way_to_the_walk() {
    let (tmp, k, policy) = setup();
    fs::write(k.join("a/b/file"), "x").unwrap();
    symlink("nowhere", k.join("a/b/dangling")).unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir_all(outside.join("secret")).unwrap();
    symlink(&outside, k.join("a/out")).unwrap();
    let host = LinuxFilesystemHost::new();
    let root = host.open_trusted(s(&k), false).unwrap();
    let exists = |names: &[&str]| host.exists_beneath(&root, names).unwrap();
    assert_eq!(exists(&["a"]), Some(true));
    assert_eq!(exists(&["nothing"]), Some(false));
    assert_eq!(exists(&["a", "b", "c"]), Some(true));
    assert_eq!(exists(&["a", "b", "file"]), Some(true));
    assert_eq!(
        exists(&["a", "b", "dangling"]),
        Some(true),
        "a dangling link exists"
    );
    assert_eq!(exists(&["a", "b", "nothing"]), Some(false));
    assert_eq!(exists(&["a", "nothing", "x"]), Some(false));
    assert_eq!(exists(&["a", "b", "file", "x"]), Some(false));
    assert_eq!(
        exists(&["a", "out", "secret"]),
        None,
        "a link on the way: walked"
    );
    assert_eq!(
        exists(&["a", "out"]),
        Some(true),
        "a final link is not followed"
    );
    let e = policy
        .exists("PathExists", s(&k.join("a/out/secret")), &host)
        .unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied, "{e}");
    for (path, want) in [("a/b/dangling", true), ("a/b/nothing", false), ("a", true)] {
        assert_eq!(
            policy
                .exists("PathExists", s(&k.join(path)), &host)
                .unwrap(),
            want,
            "{path}"
        );
    }
}

#[test]
fn a_link_on_the_way_falls_back_to_the_walk_and_its_rules() {
    let (tmp, k, policy) = setup();
    let outside = tmp.path().join("outside");
    fs::create_dir_all(outside.join("c")).unwrap();
    symlink("b", k.join("a/in")).unwrap();
    symlink(&outside, k.join("a/out")).unwrap();
    let host = LinuxFilesystemHost::new();
    let root = host.open_trusted(s(&k), false).unwrap();
    assert_eq!(fast(&host, &root, &["a", "in", "c"]), "walk");
    assert_eq!(fast(&host, &root, &["a", "out", "c"]), "walk");

    // The walk allows the link that stays inside and resolves through it...
    let w = policy
        .walk("test", s(&k.join("a/in/c")), Mode::ENTRY, &host)
        .unwrap();
    let Walk::Reached(r) = w else {
        panic!("a/in/c exists")
    };
    assert!(matches!(r.found, Found::Dir(_)));
    assert_eq!(r.resolved, s(&k.join("a/b/c")));
    // ...and refuses the one that leads out.
    let e = policy
        .walk("test", s(&k.join("a/out/c")), Mode::ENTRY, &host)
        .unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied, "{e}");
    // A followed final link: the fast path reports it, the walk follows and checks it.
    let w = policy
        .walk("test", s(&k.join("a/out")), Mode::FOLLOW, &host)
        .unwrap_err();
    assert_eq!(w.kind(), Kind::PermissionDenied, "{w}");
}

#[test]
fn a_mount_point_on_the_way_falls_back_to_the_walk() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: mounting needs root (euid is not 0)");
        return;
    }
    let (tmp, k, policy) = setup();
    let m = k.join("a/m");
    fs::create_dir_all(&m).unwrap();
    match rustix::mount::mount("tmpfs", &m, "tmpfs", MountFlags::empty(), c"size=1m") {
        Ok(()) => {}
        Err(rustix::io::Errno::PERM) => {
            eprintln!("SKIPPED: tmpfs mount refused with EPERM (no CAP_SYS_ADMIN here)");
            return;
        }
        Err(e) => panic!("tmpfs at {m:?}: {e}"),
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            while rustix::mount::unmount(self.0, UnmountFlags::DETACH).is_ok() {}
        }
    }
    let _unmount = Unmount(&m);
    fs::create_dir_all(m.join("inside")).unwrap();
    // The whole root filesystem bind-mounted below the kubelet path leads everywhere.
    let everything = k.join("a/everything");
    fs::create_dir_all(&everything).unwrap();
    rustix::mount::mount_bind(tmp.path(), &everything).unwrap();
    let _unbind = Unmount(&everything);

    let host = LinuxFilesystemHost::new();
    let root = host.open_trusted(s(&k), false).unwrap();
    assert_eq!(fast(&host, &root, &["a", "m", "inside"]), "walk");
    assert_eq!(fast(&host, &root, &["a", "m"]), "walk");
    let w = policy
        .walk("test", s(&m.join("inside")), Mode::ENTRY, &host)
        .unwrap();
    assert!(matches!(w, Walk::Reached(r) if matches!(r.found, Found::Dir(_))));
    let w = policy.walk("test", s(&m), Mode::ENTRY, &host).unwrap();
    assert!(matches!(w, Walk::Reached(r) if matches!(r.found, Found::Volume(_))));
    // A bind mount of a directory from elsewhere is not a volume: the walk refuses to pass it.
    assert_eq!(fast(&host, &root, &["a", "everything", "kubelet"]), "walk");
    let e = policy
        .walk("test", s(&everything.join("kubelet")), Mode::ENTRY, &host)
        .unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied, "{e}");
}

#[test]
fn a_replaced_root_is_opened_again() {
    let (tmp, k, policy) = setup();
    let host = LinuxFilesystemHost::new();
    let exists = |p: &Path| match policy.walk("test", s(p), Mode::ENTRY, &host).unwrap() {
        Walk::Reached(r) => r.found.exists(),
        Walk::Absent { .. } => false,
    };
    assert!(exists(&k.join("a/b")));
    // The kubelet path replaced by another directory (as when a volume is mounted on it after
    // start): once the held root was looked at again, paths resolve in the new one.
    fs::rename(&k, tmp.path().join("old")).unwrap();
    fs::create_dir_all(k.join("new")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(exists(&k.join("new")));
    assert!(!exists(&k.join("a/b")));
}

/// The kernel, not only the policy's lexical rules, keeps the fast path below the held root: a
/// `..` out of it (which the walk never passes on, client paths with `..` being refused) is
/// refused by `RESOLVE_BENEATH` and handed back to the walk, whether it comes before the final
/// component or is the final component.
#[test]
fn the_kernel_refuses_dot_dot_out_of_the_root() {
    let (tmp, k, _) = setup();
    fs::create_dir_all(tmp.path().join("outside/c")).unwrap();
    let host = LinuxFilesystemHost::new();
    let root = host.open_trusted(s(&k), false).unwrap();
    assert_eq!(fast(&host, &root, &[".."]), "walk");
    assert_eq!(fast(&host, &root, &["..", "outside"]), "walk");
    assert_eq!(
        fast(&host, &root, &["a", "..", "..", "outside", "c"]),
        "walk"
    );
}
