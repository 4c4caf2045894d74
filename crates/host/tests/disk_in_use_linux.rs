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

#[test]
fn a_disk_is_in_use_while_mounted_or_held_exclusively() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: loop devices and mounts need root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let dev = match Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&img)
        .output()
    {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        other => {
            eprintln!("SKIPPED: no loop device: {other:?}");
            return;
        }
    };
    let name = dev.file_name().unwrap().to_string_lossy().into_owned();
    let number: u32 = std::fs::read_to_string(format!("/sys/block/{name}/diskseq"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let disk = block::disk("test", number).unwrap();
    let devs = dev.to_str().unwrap();
    assert_eq!(block::in_use(&disk).unwrap(), None, "a fresh disk is free");

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
    assert_eq!(block::in_use(&disk).unwrap(), None, "free again");
    run("losetup", &["-d", devs]);
}
