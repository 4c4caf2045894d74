//! The filesystem host's semantics on a real filesystem (upstream's semantics), the same tests on
//! Linux and on Windows.
//!
//! Under Wine symbolic links are silently faked, so tests that need them print why they are
//! skipped and return; so do they on Windows when the process may not create symbolic links.

#![cfg(any(target_os = "linux", windows))]

use csi_proxy_core::paths::PathStyle;
use csi_proxy_core::paths::{LinkProbe, LinkTarget};
use csi_proxy_core::testing::PathOps;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
fn host() -> PathOps<csi_proxy_host::linux::filesystem::LinuxFilesystemHost> {
    let host = csi_proxy_host::linux::filesystem::LinuxFilesystemHost::new();
    PathOps::new(host, PathStyle::Posix)
}

#[cfg(windows)]
fn host() -> PathOps<csi_proxy_host::windows::filesystem::WindowsFilesystemHost> {
    let host = csi_proxy_host::windows::filesystem::WindowsFilesystemHost::new();
    PathOps::new(host, PathStyle::Windows)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Why symbolic links cannot be tested here, if they cannot.
fn symlinks_unavailable() -> Option<String> {
    #[cfg(windows)]
    if csi_proxy_host::windows::filesystem::running_under_wine() {
        return Some("running under Wine, which fakes symbolic links".into());
    }
    None
}

/// Creates a link through the host, or says why the test is skipped.
fn link_or_skip(target: &Path, link: &Path) -> bool {
    if let Some(why) = symlinks_unavailable() {
        eprintln!("SKIPPED: {why}");
        return false;
    }
    match host().create_symlink(s(target), s(link)) {
        Ok(()) => true,
        // ERROR_PRIVILEGE_NOT_HELD: not elevated and no Developer Mode.
        Err(e) if cfg!(windows) && e.raw_os_error() == Some(1314) => {
            eprintln!("SKIPPED: this process may not create symbolic links: {e}");
            false
        }
        Err(e) => panic!("create_symlink({target:?}, {link:?}): {e}"),
    }
}

fn write(p: &Path, content: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

#[test]
fn mkdir_nested_and_idempotent() {
    let t = tmp();
    let d = t.path().join("plugin").join("volume").join("deep");
    host().mkdir_all(s(&d)).unwrap();
    assert!(d.is_dir());
    host().mkdir_all(s(&d)).unwrap();
    host().mkdir_all(s(t.path())).unwrap();
    assert!(host().path_exists(s(&d)).unwrap());
}

#[test]
fn mkdir_over_a_file_fails() {
    let t = tmp();
    let f = t.path().join("file");
    write(&f, "x");
    assert!(host().mkdir_all(s(&f)).is_err());
    assert!(host().mkdir_all(s(&f.join("sub"))).is_err());
    assert_eq!(fs::read_to_string(&f).unwrap(), "x");
    // Below a file nothing exists.
    assert!(!host().path_exists(s(&f.join("sub"))).unwrap());
}

#[test]
fn mkdir_through_a_link_to_a_directory() {
    let t = tmp();
    let target = t.path().join("target");
    fs::create_dir(&target).unwrap();
    let link = t.path().join("link");
    if !link_or_skip(&target, &link) {
        return;
    }
    host().mkdir_all(s(&link)).unwrap();
    host().mkdir_all(s(&link.join("sub"))).unwrap();
    assert!(target.join("sub").is_dir());
}

#[test]
fn path_exists_uses_lstat() {
    let t = tmp();
    assert!(!host().path_exists(s(&t.path().join("missing"))).unwrap());
    assert!(host().path_exists(s(t.path())).unwrap());
    let link = t.path().join("dangling");
    if !link_or_skip(&t.path().join("nowhere"), &link) {
        return;
    }
    assert!(
        host().path_exists(s(&link)).unwrap(),
        "a dangling link exists"
    );
}

#[test]
fn create_symlink_then_link_exists() {
    let t = tmp();
    let stage = t.path().join("plugins").join("stage");
    host().mkdir_all(s(&stage)).unwrap();
    write(&stage.join("data"), "volume data");
    let pod = t.path().join("pods").join("pod").join("volumes");
    host().mkdir_all(s(&pod)).unwrap();
    let rootvol = pod.join("rootvol");
    if !link_or_skip(&stage, &rootvol) {
        return;
    }
    assert!(host().path_exists(s(&rootvol)).unwrap());
    assert!(
        fs::symlink_metadata(&rootvol)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_link(&rootvol).unwrap(), stage);
    assert_eq!(
        fs::read_to_string(rootvol.join("data")).unwrap(),
        "volume data"
    );
    assert_eq!(
        host().link_target(s(&rootvol)).unwrap(),
        Some(LinkTarget::Path(s(&stage).to_string()))
    );
    // Upstream flow: Rmdir(pod, force) then Rmdir(stage, force).
    host().remove_all(s(&t.path().join("pods"))).unwrap();
    assert!(!t.path().join("pods").exists());
    assert_eq!(
        fs::read_to_string(stage.join("data")).unwrap(),
        "volume data"
    );
    host().remove_all(s(&stage)).unwrap();
    assert!(!stage.exists());
}

#[test]
fn create_symlink_to_a_file_and_dangling() {
    let t = tmp();
    let file = t.path().join("file");
    write(&file, "f");
    let link = t.path().join("file-link");
    if !link_or_skip(&file, &link) {
        return;
    }
    assert_eq!(fs::read_to_string(&link).unwrap(), "f");
    let dangling = t.path().join("dangling");
    host()
        .create_symlink(s(&t.path().join("missing")), s(&dangling))
        .unwrap();
    assert!(host().path_exists(s(&dangling)).unwrap());
    // On Linux the host answers about the link itself: whether a dangling link counts is the
    // filesystem service's rule, which looks at the target only inside the roots (daemon_e2e:
    // is_symlink_never_tells_whether_a_path_outside_the_roots_exists).
    assert_eq!(
        host().is_symlink(s(&dangling)).unwrap(),
        cfg!(target_os = "linux")
    );
}

#[test]
fn create_symlink_over_existing_fails() {
    let t = tmp();
    let target = t.path().join("target");
    fs::create_dir(&target).unwrap();
    let link = t.path().join("link");
    if !link_or_skip(&target, &link) {
        return;
    }
    let again = host().create_symlink(s(&target), s(&link)).unwrap_err();
    assert_eq!(again.kind(), io::ErrorKind::AlreadyExists, "{again}");
    let dir = t.path().join("dir");
    fs::create_dir(&dir).unwrap();
    let e = host().create_symlink(s(&target), s(&dir)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    let file = t.path().join("file");
    write(&file, "x");
    let e = host().create_symlink(s(&target), s(&file)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    assert_eq!(fs::read_to_string(&file).unwrap(), "x");
    assert!(dir.is_dir());
}

#[test]
fn rmdir_force_never_follows_links() {
    let t = tmp();
    let outside = t.path().join("outside");
    write(&outside.join("keep"), "precious");
    write(&outside.join("sub").join("keep2"), "precious");
    let root = t.path().join("root");
    write(&root.join("a").join("b").join("file"), "x");
    write(&root.join("c"), "y");
    if !link_or_skip(&outside, &root.join("a").join("link-to-outside")) {
        return;
    }
    host()
        .create_symlink(s(&outside.join("keep")), s(&root.join("file-link")))
        .unwrap();
    host().remove_all(s(&root)).unwrap();
    assert!(!root.exists());
    assert_eq!(
        fs::read_to_string(outside.join("keep")).unwrap(),
        "precious"
    );
    assert_eq!(
        fs::read_to_string(outside.join("sub").join("keep2")).unwrap(),
        "precious"
    );
}

#[test]
fn rmdir_force_of_a_link_removes_only_the_link() {
    let t = tmp();
    let outside = t.path().join("outside");
    write(&outside.join("keep"), "precious");
    let link = t.path().join("link");
    if !link_or_skip(&outside, &link) {
        return;
    }
    host().remove_all(s(&link)).unwrap();
    assert!(fs::symlink_metadata(&link).is_err());
    assert_eq!(
        fs::read_to_string(outside.join("keep")).unwrap(),
        "precious"
    );
}

#[test]
fn rmdir_force_of_a_missing_path_succeeds() {
    let t = tmp();
    host().remove_all(s(&t.path().join("missing"))).unwrap();
    host()
        .remove_all(s(&t.path().join("missing").join("deeper")))
        .unwrap();
}

#[test]
fn rmdir_force_removes_files_dirs_and_read_only_files() {
    let t = tmp();
    let root = t.path().join("root");
    let ro = root.join("x").join("read-only");
    write(&ro, "r");
    let mut perm = fs::metadata(&ro).unwrap().permissions();
    perm.set_readonly(true);
    fs::set_permissions(&ro, perm).unwrap();
    for i in 0..20 {
        write(&root.join(format!("d{i}")).join(format!("f{i}")), "z");
    }
    host().remove_all(s(&root)).unwrap();
    assert!(!root.exists());
    // A single file too.
    let f = t.path().join("single");
    write(&f, "1");
    host().remove_all(s(&f)).unwrap();
    assert!(!f.exists());
}

#[test]
fn long_paths() {
    let t = tmp();
    let mut deep: PathBuf = t.path().join("long");
    while deep.as_os_str().len() < 400 {
        deep.push("component-of-a-long-path");
    }
    host().mkdir_all(s(&deep)).unwrap();
    assert!(host().path_exists(s(&deep)).unwrap());
    assert!(!host().is_symlink(s(&deep)).unwrap());
    assert_eq!(host().link_target(s(&deep)).unwrap(), None);
    fs::write(deep.join("file"), "x").unwrap();
    host().remove_all(s(&t.path().join("long"))).unwrap();
    assert!(!t.path().join("long").exists());
}

#[test]
fn remove_without_force() {
    let t = tmp();
    let missing = host().remove(s(&t.path().join("missing"))).unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound, "{missing}");

    let full = t.path().join("full");
    write(&full.join("file"), "x");
    assert!(host().remove(s(&full)).is_err());
    assert!(full.join("file").exists());

    let empty = t.path().join("empty");
    fs::create_dir(&empty).unwrap();
    host().remove(s(&empty)).unwrap();
    assert!(!empty.exists());

    host().remove(s(&full.join("file"))).unwrap();
    assert!(!full.join("file").exists());

    let link = t.path().join("link");
    if !link_or_skip(&full, &link) {
        return;
    }
    write(&full.join("keep"), "k");
    host().remove(s(&link)).unwrap();
    assert!(fs::symlink_metadata(&link).is_err());
    assert!(full.join("keep").exists());
}

#[test]
fn rmdir_contents_empties_but_keeps_the_directory() {
    let t = tmp();
    let root = t.path().join("root");
    write(&root.join("foo").join("goo"), "1");
    write(&root.join("foo").join("bar").join("baz"), "2");
    fs::create_dir_all(root.join("alpha").join("beta").join("gamma")).unwrap();
    host().remove_contents(s(&root)).unwrap();
    assert!(root.is_dir());
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
    // Already empty: still fine.
    host().remove_contents(s(&root)).unwrap();
}

/// Deeper than the removal holds open (8 directories) and wider than one listing read (256
/// names on Linux, 16 KiB of records on Windows): levels closed on the way down are opened again
/// and checked on the way back, listings read in several batches.
#[test]
fn rmdir_contents_and_force_remove_trees_deeper_and_wider_than_one_window() {
    let t = tmp();
    let root = t.path().join("root");
    let mut deep = root.clone();
    for i in 0..40 {
        deep = deep.join(format!("level{i:02}"));
        write(&deep.join("file"), "x");
    }
    let wide = root.join("level00").join("wide");
    for i in 0..600 {
        write(&wide.join(format!("entry-with-a-longer-name-{i:04}")), "x");
    }
    host().remove_contents(s(&root)).unwrap();
    assert!(root.is_dir());
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0);

    deep = root.join("again");
    for i in 0..40 {
        deep = deep.join(format!("l{i}"));
    }
    fs::create_dir_all(&deep).unwrap();
    write(&deep.join("file"), "x");
    host().remove_all(s(&root.join("again"))).unwrap();
    assert!(!root.join("again").exists());
}

#[test]
fn rmdir_contents_does_not_follow_symlinks() {
    let t = tmp();
    let inside = t.path().join("inside");
    write(&inside.join("foo").join("bar"), "1");
    let outside = t.path().join("outside");
    write(&outside.join("target"), "precious");
    write(&outside.join("dir").join("file"), "precious");
    if !link_or_skip(&outside.join("target"), &inside.join("source")) {
        return;
    }
    host()
        .create_symlink(
            s(&outside.join("dir")),
            s(&inside.join("foo").join("dirlink")),
        )
        .unwrap();
    host().remove_contents(s(&inside)).unwrap();
    assert!(inside.is_dir());
    assert_eq!(fs::read_dir(&inside).unwrap().count(), 0);
    assert_eq!(
        fs::read_to_string(outside.join("target")).unwrap(),
        "precious"
    );
    assert!(outside.join("dir").join("file").exists());

    // Emptying through a link is refused and leaves the target alone.
    let link = t.path().join("link-to-outside");
    host().create_symlink(s(&outside), s(&link)).unwrap();
    assert!(host().remove_contents(s(&link)).is_err());
    assert!(outside.join("target").exists());
}

#[test]
fn rmdir_contents_of_a_missing_path_or_a_file_fails() {
    let t = tmp();
    let e = host()
        .remove_contents(s(&t.path().join("missing")))
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    let f = t.path().join("file");
    write(&f, "x");
    assert!(host().remove_contents(s(&f)).is_err());
    assert!(f.exists());
}

#[test]
fn is_symlink_follows_upstream() {
    let t = tmp();
    let e = host().is_symlink(s(&t.path().join("missing"))).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    let dir = t.path().join("dir");
    fs::create_dir(&dir).unwrap();
    assert!(!host().is_symlink(s(&dir)).unwrap());
    let file = t.path().join("file");
    write(&file, "x");
    assert!(!host().is_symlink(s(&file)).unwrap());

    let tgt = t.path().join("dir-tgt");
    fs::create_dir(&tgt).unwrap();
    let ln = t.path().join("ln");
    if !link_or_skip(&tgt, &ln) {
        return;
    }
    assert!(host().is_symlink(s(&ln)).unwrap());
    fs::remove_dir(&tgt).unwrap();
    // On Linux the host answers about the link itself: whether a dangling link counts is the
    // filesystem service's rule, which looks at the target only inside the roots (daemon_e2e:
    // is_symlink_never_tells_whether_a_path_outside_the_roots_exists).
    assert_eq!(
        host().is_symlink(s(&ln)).unwrap(),
        cfg!(target_os = "linux"),
        "dangling: no error"
    );
}

/// Only a link's direct target is checked, as upstream does: a publish link to a staging link
/// whose own target is gone (an SMB share after a secret rotation) is still a link.
#[test]
fn is_symlink_checks_the_direct_target_only() {
    let t = tmp();
    let share = t.path().join("share");
    fs::create_dir(&share).unwrap();
    let stage = t.path().join("stage");
    let publish = t.path().join("publish");
    if !link_or_skip(&share, &stage) || !link_or_skip(&stage, &publish) {
        return;
    }
    fs::remove_dir(&share).unwrap();
    // On Linux the host answers about the link itself: whether a dangling link counts is the
    // filesystem service's rule, which looks at the target only inside the roots (daemon_e2e:
    // is_symlink_never_tells_whether_a_path_outside_the_roots_exists).
    assert_eq!(
        host().is_symlink(s(&stage)).unwrap(),
        cfg!(target_os = "linux"),
        "stage dangles"
    );
    assert!(
        host().is_symlink(s(&publish)).unwrap(),
        "publish leads to the stage link, which exists"
    );
}

#[test]
fn link_target_of_plain_and_missing_paths() {
    let t = tmp();
    assert_eq!(host().link_target(s(t.path())).unwrap(), None);
    assert_eq!(
        host().link_target(s(&t.path().join("missing"))).unwrap(),
        None
    );
    assert_eq!(
        host()
            .link_target(s(&t.path().join("missing").join("deeper")))
            .unwrap(),
        None
    );
    let f = t.path().join("f");
    write(&f, "x");
    assert_eq!(host().link_target(s(&f)).unwrap(), None);
}

#[cfg(target_os = "linux")]
#[test]
fn rmdir_force_handles_odd_names_special_files_and_deep_trees() {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;

    let t = tmp();
    let root = t.path().join("root");
    let odd = root.join(std::ffi::OsStr::from_bytes(b"not-utf8-\xff\xfe"));
    write(&odd.join(std::ffi::OsStr::from_bytes(b"\x80 file")), "x");
    write(&root.join("with space\tand\ttabs").join("f"), "x");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo"),
        rustix::fs::FileType::Fifo,
        Mode::RUSR | Mode::WUSR,
        0,
    )
    .unwrap();
    // Deeper than PATH_MAX allows naming in one path: built relative to descriptors.
    let mut fd =
        rustix::fs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..3000 {
        rustix::fs::mkdirat(&fd, "dd", Mode::RWXU).unwrap();
        fd = rustix::fs::openat(&fd, "dd", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .unwrap();
    }
    fs::write(
        format!(
            "/proc/self/fd/{}/leaf",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ),
        "x",
    )
    .unwrap();
    drop(fd);
    host().remove_all(s(&root)).unwrap();
    assert!(!root.exists());
}

#[cfg(windows)]
#[test]
fn read_only_attribute_does_not_block_removal() {
    let t = tmp();
    let ro = t.path().join("ro-file");
    write(&ro, "r");
    let mut perm = fs::metadata(&ro).unwrap().permissions();
    perm.set_readonly(true);
    fs::set_permissions(&ro, perm.clone()).unwrap();
    // DeleteFileW alone refuses a read-only file.
    let plain = fs::remove_file(&ro).unwrap_err();
    assert_eq!(plain.kind(), io::ErrorKind::PermissionDenied, "{plain}");
    host().remove(s(&ro)).unwrap();
    assert!(!ro.exists());

    let rodir = t.path().join("ro-dir");
    write(&rodir.join("ro-inner"), "r");
    fs::set_permissions(rodir.join("ro-inner"), perm.clone()).unwrap();
    fs::set_permissions(&rodir, perm).unwrap();
    host().remove_all(s(&rodir)).unwrap();
    assert!(!rodir.exists());
}

/// A chain of `depth` directories named `d` below `root`, made with `mkdirat` through each
/// directory's descriptor (so it may go deeper than a path can name).
#[cfg(target_os = "linux")]
fn deep_chain(root: &Path, depth: usize) {
    use rustix::fs::{Mode, OFlags};
    fs::create_dir_all(root).unwrap();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(root, flags, Mode::empty()).unwrap();
    for i in 0..depth {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        if i % 50 == 0 {
            // A file beside the chain now and then, so levels are not all single entries.
            let f = rustix::fs::openat(&dir, "f", OFlags::CREATE | OFlags::WRONLY, Mode::RUSR);
            drop(f.unwrap());
        }
        dir = rustix::fs::openat(&dir, "d", flags, Mode::empty()).unwrap();
    }
}

/// Runs `f` with this process limited to `limit` open descriptors.
#[cfg(target_os = "linux")]
fn with_descriptor_limit<T>(limit: u64, f: impl FnOnce() -> T) -> T {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let old = getrlimit(Resource::Nofile);
    let low = Rlimit {
        current: Some(limit.min(old.current.unwrap_or(u64::MAX))),
        maximum: old.maximum,
    };
    setrlimit(Resource::Nofile, low).unwrap();
    let out = f();
    setrlimit(Resource::Nofile, old).unwrap();
    out
}

#[cfg(target_os = "linux")]
#[test]
fn rmdir_contents_of_a_deep_tree_holds_a_few_descriptors() {
    // 1,000 levels: a removal holding a descriptor (and a listing) per level runs out of the
    // 300 descriptors this process is then allowed, half-way down.
    let t = tmp();
    let root = t.path().join("root");
    deep_chain(&root, 1000);
    let removed = with_descriptor_limit(300, || host().remove_contents(s(&root)));
    removed.unwrap();
    assert!(root.is_dir());
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0);

    // Rmdir(force) takes the same path.
    deep_chain(&root.join("again"), 1000);
    let removed = with_descriptor_limit(300, || host().remove_all(s(&root.join("again"))));
    removed.unwrap();
    assert!(!root.join("again").exists());
}

#[cfg(target_os = "linux")]
#[test]
fn rmdir_contents_stops_past_its_depth_and_says_so() {
    // More levels than a removal descends (4,096): the rest of the tree is removed, the
    // too-deep chain is left and reported, and nothing beside the directory is touched.
    let t = tmp();
    let root = t.path().join("root");
    deep_chain(&root, 4100);
    write(&root.join("shallow").join("file"), "x");
    write(&t.path().join("beside"), "kept");
    let err = host().remove_contents(s(&root)).unwrap_err();
    assert!(err.to_string().contains("more than 4096 levels"), "{err}");
    assert!(!root.join("shallow").exists(), "the rest is still removed");
    assert!(root.join("d").is_dir(), "the too-deep chain is left");
    assert_eq!(fs::read_to_string(t.path().join("beside")).unwrap(), "kept");
    // What is left is removed from a few levels down, where it is within the bound.
    host().remove_all(s(&root.join("d/d/d/d/d/d/d/d"))).unwrap();
    host().remove_all(s(&root)).unwrap();
}

/// kubelet's per-volume record read through the real Win32 calls (`CreateFileW` with
/// FILE_FLAG_OPEN_REPARSE_POINT, `ReadFile` to the end of the file): a file's bytes, a
/// directory refused, a missing file NotFound, more than the limit InvalidData, and a link at
/// the name refused without reading its target.
#[cfg(windows)]
#[test]
fn read_small_reads_a_file_and_refuses_what_is_not_one() {
    use csi_proxy_core::filesystem::FilesystemHost;
    use csi_proxy_core::paths::{Found, Held, Mode, PathPolicy, Reached, Walk};
    let h = host();
    let read = |dir: &Path, name: &str, limit: usize| {
        let policy = PathPolicy::unconfined(PathStyle::Windows);
        let held: Held = match policy.walk("test", s(dir), Mode::FOLLOW, h.host()).unwrap() {
            Walk::Reached(Reached {
                found: Found::Dir(d),
                ..
            }) => d,
            _ => panic!("{dir:?} is not a directory"),
        };
        h.host().read_small(&held, name, limit)
    };
    let t = tmp();
    let record = r#"{"driverName":"disk.csi.example.com"}"#;
    write(&t.path().join("vol_data.json"), record);
    assert_eq!(
        read(t.path(), "vol_data.json", 64 * 1024).unwrap(),
        record.as_bytes()
    );
    assert_eq!(
        read(t.path(), "vol_data.json", record.len()).unwrap(),
        record.as_bytes()
    );
    let big = "x".repeat(200 * 1024);
    write(&t.path().join("big"), &big);
    let e = read(t.path(), "big", 64 * 1024).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    assert_eq!(read(t.path(), "big", big.len()).unwrap().len(), big.len());
    let e = read(t.path(), "missing", 10).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    fs::create_dir(t.path().join("dir")).unwrap();
    let e = read(t.path(), "dir", 10).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    let elsewhere = tmp();
    write(
        &elsewhere.path().join("record"),
        r#"{"driverName":"other"}"#,
    );
    if link_or_skip(&elsewhere.path().join("record"), &t.path().join("link")) {
        let e = read(t.path(), "link", 64 * 1024).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}
