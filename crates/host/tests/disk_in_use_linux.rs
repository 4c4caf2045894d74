//! What counts as "in use" before a disk is taken away (DisconnectTarget logs out an iSCSI
//! session only when none of its disks is): checked on a real loop disk, since iSCSI sessions
//! need a kernel initiator this machine may lack. Needs root; skipped with the reason otherwise.
#![cfg(target_os = "linux")]

use csi_proxy_host::linux::block;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::Command;

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether this process may read every other process's descriptors (root with
/// CAP_SYS_PTRACE, as on a node). Where it may not (a sandbox), the in-use check cannot tell
/// that a disk is free and must say so rather than answer "free".
fn fds_readable() -> bool {
    csi_proxy_host::linux::block_users::processes_holding(std::path::Path::new("/proc"), &[])
        .is_ok()
}

/// `disk` is free: `None` where every process's descriptors can be read, else an error saying
/// why it cannot tell.
fn assert_free(disk: &block::Disk, what: &str) {
    match block::in_use(disk) {
        Ok(why) => assert_eq!(why, None, "{what}"),
        Err(e) if !fds_readable() => {
            assert!(e.message().contains("CAP_SYS_PTRACE"), "{what}: {e}");
            eprintln!("NOTE: {what}: cannot be told here, as it must say: {e}");
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

#[test]
fn a_disk_is_in_use_while_mounted_or_held_exclusively() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: loop devices and mounts need root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((disk_loop, disk)) = loop_disk(dir.path()) else {
        return;
    };
    let dev = PathBuf::from(&disk_loop.0);
    let devs = dev.to_str().unwrap();
    assert_free(&disk, "a fresh disk is free");

    run("mkfs.ext4", &["-q", devs]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run("mount", &[devs, mnt.to_str().unwrap()]);
    let why = block::in_use(&disk).unwrap();
    run("umount", &[mnt.to_str().unwrap()]);
    let why = why.expect("a mounted disk is in use");
    assert!(why.contains("is mounted at"), "{why}");

    let holder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
        .open(&dev)
        .unwrap();
    let why = block::in_use(&disk).unwrap();
    drop(holder);
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("held open exclusively")),
        "{why:?}"
    );
    assert_free(&disk, "free again");
}

/// A loop device this test attached; detached when dropped, also when an assertion failed.
struct Loop(String);

impl Loop {
    fn attach(backing: &std::path::Path) -> Option<Loop> {
        let o = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .ok()?;
        o.status
            .success()
            .then(|| Loop(String::from_utf8_lossy(&o.stdout).trim().to_string()))
    }
}

/// A 64 MiB image in `dir` attached as a loop device, and the disk the host sees in it
/// (looked up by its diskseq); `None`, saying why, when no loop device can be attached.
fn loop_disk(dir: &std::path::Path) -> Option<(Loop, block::Disk)> {
    let img = dir.join("d.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let Some(disk_loop) = Loop::attach(&img) else {
        eprintln!("SKIPPED: no loop device");
        return None;
    };
    let name = disk_loop.0.trim_start_matches("/dev/").to_string();
    let number: u32 = std::fs::read_to_string(format!("/sys/block/{name}/diskseq"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let disk = block::disk("test", number).unwrap();
    Some((disk_loop, disk))
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// Raw-block users count too: a loop device backed by the disk (how kubelet maps a raw block
/// volume) and a process holding the disk open without a claim; neither makes an exclusive
/// open fail, so before this check DisconnectTarget took the disk from under them.
#[test]
fn a_disk_is_in_use_while_a_loop_device_or_a_process_holds_it() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: loop devices need root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((disk_loop, disk)) = loop_disk(dir.path()) else {
        return;
    };
    let dev = PathBuf::from(&disk_loop.0);
    assert_free(&disk, "a fresh disk is free");

    let raw = Loop::attach(&dev).expect("a loop device over the disk");
    let why = block::in_use(&disk).unwrap();
    drop(raw);
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("backs loop device")),
        "{why:?}"
    );
    assert_free(&disk, "free again");

    if !fds_readable() {
        eprintln!(
            "SKIPPED: a process holding the disk: this process may not read others' descriptors (no CAP_SYS_PTRACE)"
        );
        return;
    }
    let reader = std::fs::File::open(&dev).unwrap();
    let why = block::in_use(&disk).unwrap();
    drop(reader);
    let me = std::process::id().to_string();
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("held open by process") && w.contains(&me)),
        "{why:?}"
    );
    assert_free(&disk, "free again");
}
