//! Read RPCs that reach the kernel's view of a disk's partitions (ListVolumesOnDisk, which
//! adds partitions the disk's table lists with BLKRRPART and BLKPG) hold the disk like the
//! changing RPCs do, and never change the host's own disks. Through the daemon's endpoints on
//! real loop disks; needs root, skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, hold_first_run, v1_clients};
use csi_proxy_api::volume::v1;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tonic::Code;

fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn list_request(n: u32, limit: Duration) -> tonic::Request<v1::ListVolumesOnDiskRequest> {
    let mut r = tonic::Request::new(v1::ListVolumesOnDiskRequest {
        disk_number: n,
        partition_number: 0,
    });
    r.set_timeout(limit);
    r
}

/// While a FormatVolume holds the disk (its mkfs held back), ListVolumesOnDisk of that disk
/// waits for it instead of re-reading the partitions under the running mkfs: its deadline
/// passes (DEADLINE_EXCEEDED). Another disk is listed meanwhile. Before: it answered at once,
/// having re-read the table of the disk being formatted.
#[tokio::test(flavor = "multi_thread")]
async fn listing_a_disk_waits_for_the_operation_holding_it() {
    if !can_use_loop_devices() {
        return;
    }
    let wrappers = tempfile::tempdir().unwrap();
    let (path, held) = hold_first_run(wrappers.path(), "mkfs.ext4");
    let d = Daemon::start_env(&[], &[("PATH", &path)]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let busy = LoopDisk::new(d.dir.path(), "busy", 64).unwrap();
    let other = LoopDisk::new(d.dir.path(), "other", 64).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, busy.disk_number()).await;
    common::partition_one(&mut dc, &mut vc, other.disk_number()).await;
    let format = common::spawn_format(&vc, &id);
    let t = Instant::now();
    while !held.exists() {
        assert!(t.elapsed() < Duration::from_secs(30), "mkfs never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = vc
        .list_volumes_on_disk(list_request(busy.disk_number(), Duration::from_secs(1)))
        .await
        .expect_err("the disk is held by the format");
    assert_eq!(s.code(), Code::DeadlineExceeded, "{}", s.message());
    assert!(s.message().contains("ListVolumesOnDisk"), "{}", s.message());
    let listed = vc
        .list_volumes_on_disk(list_request(other.disk_number(), Duration::from_secs(10)))
        .await
        .unwrap()
        .into_inner()
        .volume_ids;
    assert_eq!(listed.len(), 1, "{listed:?}");
    format.abort();
    drop(d); // the held mkfs dies with the daemon
}

/// A disk the host uses (a filesystem of it mounted outside the kubelet path), whose table
/// lists a partition the kernel does not know: ListVolumesOnDisk lists what the kernel has and
/// adds nothing. Before: it added the partition with BLKPG.
#[tokio::test(flavor = "multi_thread")]
async fn listing_never_changes_the_partitions_of_a_disk_the_host_uses() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (_, mut vc) = v1_clients(&d).await;
    // Without partition scan: the kernel knows only the partitions added by hand.
    let l = LoopDisk::without_partscan(d.dir.path(), "hostdisk", 64).unwrap();
    let dev = l.dev.to_string_lossy().into_owned();
    // An MBR with two Linux partitions (no partitioning tool on every host: written by hand).
    let mut mbr = vec![0u8; 512];
    for (i, (start, len)) in [(2048u32, 40960u32), (43008, 40960)]
        .into_iter()
        .enumerate()
    {
        let e = &mut mbr[446 + 16 * i..462 + 16 * i];
        e[4] = 0x83;
        e[8..12].copy_from_slice(&start.to_le_bytes());
        e[12..16].copy_from_slice(&len.to_le_bytes());
    }
    mbr[510..].copy_from_slice(&[0x55, 0xAA]);
    common::write_at(&l.dev, 0, &mbr).unwrap();
    sh("partx", &["-a", "--nr", "1", &dev]);
    let p1 = l.partition(1);
    let t = Instant::now();
    while !p1.exists() {
        assert!(t.elapsed() < Duration::from_secs(5), "no {}", p1.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    sh("mkfs.ext4", &["-q", &p1.to_string_lossy()]);
    let host_mount = d.dir.path().join("host-data");
    std::fs::create_dir(&host_mount).unwrap();
    sh(
        "mount",
        &[&p1.to_string_lossy(), &host_mount.to_string_lossy()],
    );
    let p2 = Path::new("/sys/block")
        .join(l.name())
        .join(format!("{}p2", l.name()));

    let listed = vc
        .list_volumes_on_disk(list_request(l.disk_number(), Duration::from_secs(10)))
        .await
        .unwrap()
        .into_inner()
        .volume_ids;
    let unchanged = !p2.exists();
    let _ = Command::new("umount").arg(&host_mount).status();
    assert!(
        unchanged,
        "the kernel's partitions of the host's disk were changed"
    );
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].contains("-part1-"), "{listed:?}");
}

/// A disk number no disk has: ListVolumesOnDisk answers NOT_FOUND naming the disk, as
/// GetDiskStats does, not an empty list a driver would index into. A disk without volumes is
/// still an empty list.
#[tokio::test]
async fn list_volumes_on_an_unknown_disk_is_not_found_as_get_disk_stats_is() {
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let unknown = 4_000_000_000;
    let stats = dc
        .get_disk_stats(csi_proxy_api::disk::v1::GetDiskStatsRequest {
            disk_number: unknown,
        })
        .await
        .unwrap_err();
    let list = vc
        .list_volumes_on_disk(list_request(unknown, Duration::from_secs(10)))
        .await
        .unwrap_err();
    assert_eq!(
        (stats.code(), list.code()),
        (Code::NotFound, Code::NotFound)
    );
    assert!(
        list.message().contains("ListVolumesOnDisk") && list.message().contains("disk 4000000000"),
        "{}",
        list.message()
    );
    if !can_use_loop_devices() {
        return;
    }
    let blank = LoopDisk::new(d.dir.path(), "blank", 16).unwrap();
    let listed = vc
        .list_volumes_on_disk(list_request(blank.disk_number(), Duration::from_secs(10)))
        .await
        .unwrap()
        .into_inner()
        .volume_ids;
    assert!(listed.is_empty(), "{listed:?}");
}
