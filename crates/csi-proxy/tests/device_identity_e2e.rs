//! A volume request acts on the disk it resolved, even when that disk is detached and another one
//! is attached under the same name meanwhile. Through the daemon's endpoints on real loop disks;
//! needs root, skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, partition_one, spawn_format, v1_clients, wrap_tool};
use std::path::Path;
use std::time::{Duration, Instant};

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
    common::run(
        "mkfs.ext4",
        &["-q", "-F", &b.partition(1).display().to_string()],
    );
    b.detach();
    let before = std::fs::read(&b.file).unwrap();

    std::fs::write(&gate, "").unwrap();
    let format = spawn_format(&vc, &id);
    let t0 = Instant::now();
    while !started.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "mkfs never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let a_dev = a.dev.display().to_string();
    let took_name = a.replace_image(&b.file, Duration::ZERO).is_ok();
    if took_name {
        // As a kernel without a GPT parser needs: the other disk's partition gets its node.
        let _ = common::output("partx", &["-a", &a_dev]);
    }
    std::fs::remove_file(&gate).unwrap();
    let answer = format.await.unwrap();

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

/// Writes an MBR with one Linux partition and no disk signature (as many image tools leave
/// it): its volume is named `…-part1-00000000-01`, like every other such disk's.
fn signatureless_mbr(l: &LoopDisk) {
    let mut mbr = vec![0u8; 512];
    let sectors = (common::len_of(&l.dev) / 512 - 2048) as u32;
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&sectors.to_le_bytes());
    mbr[510..].copy_from_slice(&[0x55, 0xAA]);
    common::write_at(&l.dev, 0, &mbr).unwrap();
}

/// Two disks whose partitions share a name (signature-less MBRs; clones share their PARTUUID
/// the same way) keep separate format records: formatting the second does not make the
/// first's retry (after a lost answer) a refusal. Before: the records were keyed by the
/// shared name, the second format overwrote the first's, and the retry was
/// FAILED_PRECONDITION "already holds ext4".
#[tokio::test(flavor = "multi_thread")]
async fn disks_sharing_a_partition_name_keep_their_own_format_records() {
    if !common::can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (_, mut vc) = v1_clients(&d).await;
    let mut ids = Vec::new();
    let mut disks = Vec::new();
    for name in ["mbr-a", "mbr-b"] {
        let l = LoopDisk::new(d.dir.path(), name, 64).unwrap();
        signatureless_mbr(&l);
        let listed = common::volumes_on(&mut vc, l.disk_number()).await;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert!(listed[0].ends_with("-part1-00000000-01"), "{listed:?}");
        ids.push(listed[0].clone());
        disks.push(l);
    }
    common::format_ok(&mut vc, &ids[0]).await;
    common::format_ok(&mut vc, &ids[1]).await;
    // The first format's answer was lost: the driver retries.
    common::format_ok(&mut vc, &ids[0]).await;
    common::format_ok(&mut vc, &ids[1]).await;
}
