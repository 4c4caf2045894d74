//! What other tools left on a disk decides what the daemon does, never what the kernel happens
//! to remember: through the daemon's endpoints on real loop disks, content made by the real
//! tools (LUKS, LVM, swap, filesystems, md members, ...) goes through a driver's whole NodeStage
//! sequence and not a byte of the disk changes. Needs root (loop devices); skipped with the
//! reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, DiskClient, LoopDisk, VolumeClient, can_use_loop_devices, v1_clients};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use std::process::Command;
use tonic::Code;

fn run(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn checked(program: &str, args: &[&str]) {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A whole-disk LUKS2 volume with a fast key derivation, keyed by `key`.
fn luks_format(on: &Path, key: &Path, version: &str) {
    checked(
        "cryptsetup",
        &[
            "luksFormat",
            "--type",
            version,
            "--batch-mode",
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
            "--key-file",
            &key.display().to_string(),
            &on.display().to_string(),
        ],
    );
}

/// Whether `key` still opens the LUKS volume on `on` (its header and keyslot are intact).
fn luks_opens(on: &Path, key: &Path) -> bool {
    run(
        "cryptsetup",
        &[
            "open",
            "--test-passphrase",
            "--key-file",
            &key.display().to_string(),
            &on.display().to_string(),
        ],
    )
    .status
    .success()
}

/// A driver's NodeStage sequence on disk `n` (ListDiskIDs, GetDiskStats, ListVolumesOnDisk,
/// PartitionDisk, then for every volume listed IsVolumeFormatted, FormatVolume and
/// ResizeVolume), returning what each step answered for the report.
async fn node_stage(dc: &mut DiskClient, vc: &mut VolumeClient, n: u32) -> Vec<String> {
    let mut log = Vec::new();
    let ids = dc.list_disk_i_ds(d1::ListDiskIDsRequest {}).await.unwrap();
    assert!(ids.into_inner().disk_i_ds.contains_key(&n));
    dc.get_disk_stats(d1::GetDiskStatsRequest { disk_number: n })
        .await
        .unwrap();
    let mut listed = common::volumes_on(vc, n).await;
    log.push(format!("ListVolumesOnDisk: {listed:?}"));
    let parted = dc
        .partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await;
    log.push(format!("PartitionDisk: {:?}", parted.as_ref().map(drop)));
    if parted.is_ok() {
        listed = common::volumes_on(vc, n).await;
        log.push(format!("ListVolumesOnDisk: {listed:?}"));
    }
    for id in listed {
        let formatted = vc
            .is_volume_formatted(v1::IsVolumeFormattedRequest {
                volume_id: id.clone(),
            })
            .await
            .map(|r| r.into_inner().formatted);
        log.push(format!("IsVolumeFormatted {id}: {formatted:?}"));
        let format = vc
            .format_volume(v1::FormatVolumeRequest {
                volume_id: id.clone(),
            })
            .await
            .map(drop);
        log.push(format!("FormatVolume {id}: {format:?}"));
        let resize = vc
            .resize_volume(v1::ResizeVolumeRequest {
                volume_id: id.clone(),
                size_bytes: 0,
            })
            .await
            .map(drop);
        log.push(format!("ResizeVolume {id}: {resize:?}"));
    }
    log
}

/// The case: a loop device attached without partition scan keeps the partition the
/// daemon added with BLKPG for the image it held before, after that image is detached. The
/// next image there, a whole-disk LUKS2 volume, has no partition table. Before, the stale
/// partition was listed as its volume 1 (`…-part1-00000000-01`), IsVolumeFormatted answered
/// false, and FormatVolume wrote ext4 over the LUKS keyslots.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_partition_device_is_never_a_volume_of_the_next_image() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::without_partscan(d.dir.path(), "before", 64).unwrap();
    let old = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    assert!(l.partition(1).exists(), "the daemon added partition 1");

    // The next tenant's image: whole-disk LUKS2, attached to the same loop device.
    let key = d.dir.path().join("key");
    std::fs::write(&key, "secret").unwrap();
    let luks = d.dir.path().join("luks.img");
    std::fs::File::create(&luks)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    luks_format(&luks, &key, "luks2");
    let dev = l.dev.display().to_string();
    checked("losetup", &["-d", &dev]);
    checked("losetup", &[&dev, &luks.display().to_string()]);
    assert!(
        l.partition(1).exists(),
        "the kernel kept the old image's partition (the case under test)"
    );
    let n = l.disk_number();
    let before = l.fingerprint();

    let log = node_stage(&mut dc, &mut vc, n).await;
    eprintln!("{log:#?}");
    assert_eq!(
        l.fingerprint(),
        before,
        "the LUKS disk changed; the stage sequence answered {log:#?}"
    );
    assert!(luks_opens(&l.dev, &key), "the LUKS keyslot is intact");
    assert!(
        common::volumes_on(&mut vc, n).await.is_empty(),
        "a disk without a partition table lists no partition volumes"
    );
    let stale = format!("diskseq{n}-part1-00000000-01");
    for r in [
        vc.is_volume_formatted(v1::IsVolumeFormattedRequest {
            volume_id: stale.clone(),
        })
        .await
        .map(drop),
        vc.format_volume(v1::FormatVolumeRequest {
            volume_id: stale.clone(),
        })
        .await
        .map(drop),
    ] {
        let s = r.expect_err("the stale partition is not a volume");
        assert_eq!(s.code(), Code::NotFound, "{}", s.message());
    }
    let s = dc
        .partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .expect_err("a whole-disk LUKS volume is never partitioned");
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    assert!(s.message().contains("crypto_LUKS"), "{}", s.message());
    assert!(
        !l.partition(1).exists(),
        "PartitionDisk dropped the stale partition device"
    );
    assert_eq!(l.fingerprint(), before);
    drop(old);
}
