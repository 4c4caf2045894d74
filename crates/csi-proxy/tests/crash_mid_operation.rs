//! SIGKILL mid-operation: the daemon is killed during PartitionDisk, FormatVolume and
//! ResizeVolume on loop disks, restarted, and the same RPC retried. The retry succeeds, the volume
//! is consistent, data written before the resize is intact, and other disks were never touched.
//! Needs root and losetup; skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::transport::Channel;

type DiskClient = d1::disk_client::DiskClient<Channel>;
type VolumeClient = v1::volume_client::VolumeClient<Channel>;

async fn clients(d: &Daemon) -> (DiskClient, VolumeClient) {
    let c = d.connector();
    (
        DiskClient::new(c.channel("disk", "v1").await.unwrap()),
        VolumeClient::new(c.channel("volume", "v1").await.unwrap()),
    )
}

/// Waits (up to `limit`) until the daemon has a child process whose name starts with one of
/// `names` (the external tool doing the work), and says whether one was seen.
fn wait_for_child(pid: u32, names: &[&str], limit: Duration) -> Option<String> {
    let t = Instant::now();
    while t.elapsed() < limit {
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces, so split at the last ')'.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let comm = &stat[open + 1..close];
            let ppid = stat[close + 1..].split_whitespace().nth(1);
            if ppid == Some(&pid.to_string()) && names.iter().any(|n| comm.starts_with(n)) {
                return Some(comm.to_string());
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    None
}

/// Runs `f` until it succeeds, for up to 60 s; only UNAVAILABLE (daemon not up yet) is retried.
async fn retried<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let t = Instant::now();
    loop {
        match f().await {
            Ok(r) => return r.into_inner(),
            Err(s) if s.code() == Code::Unavailable && t.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => panic!("{what}: the retry after the crash failed: {s:?}"),
        }
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_partition_format_and_resize_then_retry_succeeds() {
    let mut d = Daemon::start(&[]);
    let dir = d.dir.path().to_path_buf();
    let bystander = match LoopDisk::new(&dir, "bystander", 64) {
        Ok(l) => l,
        Err(why) => {
            eprintln!("SKIPPED: loop disks unavailable: {why}");
            return;
        }
    };
    // The bystander holds data the daemon is never asked about: it must stay bit-identical.
    std::fs::write(&bystander.dev, pattern(1 << 20, 7)).unwrap();
    let bystander_before = bystander.fingerprint();

    // --- PartitionDisk: written in-process, so the kill lands at several points in time.
    let mut part_disks = Vec::new();
    for (i, delay_us) in [0u64, 500, 2000, 8000].into_iter().enumerate() {
        let disk = LoopDisk::new(&dir, &format!("part{i}"), 64).unwrap();
        let n = disk.disk_number();
        let (mut dc, _) = clients(&d).await;
        let call = tokio::spawn(async move {
            dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
                .await
        });
        tokio::time::sleep(Duration::from_micros(delay_us)).await;
        d.kill9();
        let interrupted = call.await.unwrap().is_err();
        d.restart();
        let (dc, mut vc) = clients(&d).await;
        retried("PartitionDisk", || {
            let mut dc = dc.clone();
            async move {
                dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
                    .await
            }
        })
        .await;
        let ids = vc
            .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
                disk_number: n,
                partition_number: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .volume_ids;
        assert_eq!(
            ids.len(),
            1,
            "kill after {delay_us} µs: one partition: {ids:?}"
        );
        eprintln!("PartitionDisk killed after {delay_us} µs (call interrupted: {interrupted})");
        part_disks.push(disk);
    }

    // --- FormatVolume: killed while mkfs runs.
    let disk = LoopDisk::new(&dir, "victim", 128).unwrap();
    let n = disk.disk_number();
    let (mut dc, mut vc) = clients(&d).await;
    dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .unwrap();
    let id = vc
        .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
            disk_number: n,
            partition_number: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .volume_ids
        .remove(0);
    let call = {
        let (mut vc, volume_id) = (vc.clone(), id.clone());
        tokio::spawn(async move {
            vc.format_volume(v1::FormatVolumeRequest { volume_id })
                .await
        })
    };
    let pid = d.child.id();
    let seen = tokio::task::spawn_blocking(move || {
        wait_for_child(pid, &["mkfs", "mke2fs"], Duration::from_secs(20))
    })
    .await
    .unwrap();
    d.kill9();
    let _ = call.await;
    eprintln!("FormatVolume killed while {seen:?} ran");
    d.restart();
    let (_, vc) = clients(&d).await;
    retried("FormatVolume", || {
        let (mut vc, volume_id) = (vc.clone(), id.clone());
        async move {
            vc.format_volume(v1::FormatVolumeRequest { volume_id })
                .await
        }
    })
    .await;
    let mut vc = vc;
    assert!(
        vc.is_volume_formatted(v1::IsVolumeFormattedRequest {
            volume_id: id.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .formatted
    );

    // The filesystem is consistent: it mounts and holds data; write what the resize must keep.
    let stage = d.k("plugins/crash/globalmount");
    std::fs::create_dir_all(&stage).unwrap();
    let data = pattern(8 << 20, 42);
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .unwrap();
    std::fs::write(Path::new(&stage).join("data.bin"), &data).unwrap();
    vc.unmount_volume(v1::UnmountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .unwrap();
    let before = vc
        .get_volume_stats(v1::GetVolumeStatsRequest {
            volume_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .total_bytes;

    // --- ResizeVolume: the disk grows; the kill lands while the partition or filesystem grows.
    disk.grow_to(320);
    let (mut dc, _) = clients(&d).await;
    dc.rescan(d1::RescanRequest {}).await.unwrap();
    let call = {
        let (mut vc, volume_id) = (vc.clone(), id.clone());
        tokio::spawn(async move {
            vc.resize_volume(v1::ResizeVolumeRequest {
                volume_id,
                size_bytes: 0,
            })
            .await
        })
    };
    let pid = d.child.id();
    let seen = tokio::task::spawn_blocking(move || {
        wait_for_child(
            pid,
            &["resize2fs", "e2fsck", "xfs_growfs"],
            Duration::from_secs(20),
        )
    })
    .await
    .unwrap();
    d.kill9();
    let _ = call.await;
    eprintln!("ResizeVolume killed while {seen:?} ran");
    d.restart();
    let (_, vc) = clients(&d).await;
    retried("ResizeVolume", || {
        let (mut vc, volume_id) = (vc.clone(), id.clone());
        async move {
            vc.resize_volume(v1::ResizeVolumeRequest {
                volume_id,
                size_bytes: 0,
            })
            .await
        }
    })
    .await;
    let mut vc = vc;
    let after = vc
        .get_volume_stats(v1::GetVolumeStatsRequest {
            volume_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .total_bytes;
    assert!(
        after > before + (100 << 20),
        "the filesystem grew: {before} -> {after}"
    );
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .unwrap();
    let read = std::fs::read(Path::new(&stage).join("data.bin")).unwrap();
    assert!(read == data, "data written before the resize is intact");
    vc.unmount_volume(v1::UnmountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .unwrap();

    // Other disks were never touched.
    assert_eq!(
        bystander.fingerprint(),
        bystander_before,
        "the bystander disk changed"
    );
    drop(part_disks);
}
