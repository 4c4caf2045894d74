//! A volume request acts on the disk it resolved, even when that disk is detached and another one
//! is attached under the same name meanwhile. Through the daemon's endpoints on real loop disks;
//! needs root, skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, partition_one, spawn_format, v1_clients, wrap_tool};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn run(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program).args(args).output().unwrap()
}

fn checked(program: &str, args: &[&str]) {
    let out = run(program, args);
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// A loop disk, detached while FormatVolume's mkfs is about to run, and another tenant's disk
/// (a GPT with an ext4 partition) attached under the same name: before, nothing held the device,
/// so the detach took effect at once, the other disk took the name, and mkfs formatted its
/// partition. Now the request holds the device from resolution on, so the kernel keeps the
/// first disk attached until the request ends and the other disk cannot take its name.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_swapped_under_a_running_format_is_never_formatted() {
    let wrappers = tempfile::tempdir().unwrap();
    let started = wrappers.path().join("started");
    let gate = wrappers.path().join("gate");
    let path = wrap_tool(
        wrappers.path(),
        "mkfs.ext4",
        &format!(
            "touch '{}'; while [ -e '{}' ]; do sleep 0.02; done",
            started.display(),
            gate.display()
        ),
    );
    let d = Daemon::start_env(&[], &[("PATH", &path)]);
    let Some(a) = LoopDisk::or_skip(d.dir.path(), "resolved", 64) else {
        return;
    };
    let (mut dc, mut vc) = v1_clients(&d).await;
    let id = partition_one(&mut dc, &mut vc, a.disk_number()).await;

    // The other tenant's disk: partitioned by the daemon too, with an ext4 of its own.
    let b = LoopDisk::new(d.dir.path(), "bystander", 64).unwrap();
    partition_one(&mut dc, &mut vc, b.disk_number()).await;
    checked(
        "mkfs.ext4",
        &["-q", "-F", &b.partition(1).display().to_string()],
    );
    checked("losetup", &["-d", &b.dev.display().to_string()]);
    let before = std::fs::read(&b.file).unwrap();

    std::fs::write(&gate, "").unwrap();
    let format = spawn_format(&vc, &id);
    let t0 = Instant::now();
    while !started.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "mkfs never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let a_dev = a.dev.display().to_string();
    checked("losetup", &["-d", &a_dev]);
    let took_name = run("losetup", &[&a_dev, &b.file.display().to_string()])
        .status
        .success();
    if took_name {
        // As a kernel without a GPT parser needs: the other disk's partition gets its node.
        let _ = run("partx", &["-a", &a_dev]);
    }
    std::fs::remove_file(&gate).unwrap();
    let answer = format.await.unwrap();
    if took_name {
        checked("losetup", &["-d", &a_dev]);
    }

    assert!(
        !took_name,
        "the other disk took the name while the request held the first (answer {answer:?})"
    );
    assert!(
        answer.is_ok(),
        "the resolved disk was formatted: {answer:?}"
    );
    assert_eq!(
        std::fs::read(&b.file).unwrap(),
        before,
        "the other tenant's disk is untouched"
    );
    assert!(Path::new(&b.file).exists());
}
