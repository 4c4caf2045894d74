//! The Linux facts of the in-use rule as DisconnectTarget applies it (every mount counts: the
//! disk is about to go away), checked on a real loop disk, since iSCSI sessions need a kernel
//! initiator this machine may lack. Needs root; skipped with the reason otherwise.
#![cfg(target_os = "linux")]

use csi_proxy_core::disk::{OwnUse, refuse_in_use};
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

/// Where not every process's descriptors can be read (a sandbox: this VM's init holds a
/// capability its root lacks), the facts fail closed naming the process, and the rest of the
/// test runs as the daemon does with `--skip-unreadable-processes`.
fn skip_unreadable_where_needed() {
    let Err(e) = csi_proxy_host::linux::block_users::processes_holding(
        &*csi_proxy_host::linux::os::system(),
        std::path::Path::new("/proc"),
        &[],
        &[],
        0,
        false,
    ) else {
        return;
    };
    assert!(
        e.to_string()
            .contains("cannot read the descriptors and mappings of process")
            && e.to_string().contains("CAP_SYS_PTRACE"),
        "{e}"
    );
    eprintln!("NOTE: fails closed here, as it must: {e}; skipping unreadable processes from now");
    csi_proxy_host::linux::block_users::skip_unreadable_processes(true);
}

/// Why DisconnectTarget would refuse to take `disk` away, or `None`; an error when the facts
/// cannot be read.
fn in_use(disk: &block::Disk) -> csi_proxy_core::Result<Option<String>> {
    let usage = block::in_use(disk)?;
    Ok(
        refuse_in_use("DisconnectTarget", "disk", &usage, OwnUse::Nothing)
            .err()
            .map(|e| e.message().to_string()),
    )
}

/// `disk` is free.
fn assert_free(disk: &block::Disk, what: &str) {
    assert_eq!(in_use(disk).unwrap(), None, "{what}");
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
    skip_unreadable_where_needed();
    assert_free(&disk, "a fresh disk is free");

    run("mkfs.ext4", &["-q", devs]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run("mount", &[devs, mnt.to_str().unwrap()]);
    let why = in_use(&disk).unwrap();
    run("umount", &[mnt.to_str().unwrap()]);
    let why = why.expect("a mounted disk is in use");
    assert!(why.contains("holds a filesystem mounted at"), "{why}");

    let holder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
        .open(&dev)
        .unwrap();
    let why = in_use(&disk).unwrap();
    drop(holder);
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("claimed exclusively")),
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
    skip_unreadable_where_needed();
    assert_free(&disk, "a fresh disk is free");

    let raw = Loop::attach(&dev).expect("a loop device over the disk");
    let why = in_use(&disk).unwrap();
    drop(raw);
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("backs loop device")),
        "{why:?}"
    );
    assert_free(&disk, "free again");

    // Another process: the daemon's own reads (under the disk's lock) are not a user.
    let mut reader = Command::new("sleep")
        .arg("600")
        .stdin(std::fs::File::open(&dev).unwrap())
        .spawn()
        .unwrap();
    let why = in_use(&disk).unwrap();
    let _ = reader.kill();
    let _ = reader.wait();
    let pid = reader.id().to_string();
    assert!(
        why.as_deref().is_some_and(
            |w| w.contains("held open by process") && w.contains(&format!("{pid} (sleep)"))
        ),
        "{why:?}"
    );
    assert_free(&disk, "free again");
}
