//! SIGKILL mid-operation: the daemon is killed during PartitionDisk, FormatVolume and
//! ResizeVolume on loop disks, restarted, and the same RPC retried. The retry succeeds, the volume
//! is consistent, data written before the resize is intact, and other disks were never touched.
//! Needs root and losetup; skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Daemon, DiskClient, LoopDisk, VolumeClient, mounts_under, partition_one, spawn_format,
    v1_clients, volumes_on, wait_for_child,
};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use std::time::Duration;

async fn total_bytes(vc: &mut VolumeClient, id: &str) -> i64 {
    vc.get_volume_stats(v1::GetVolumeStatsRequest {
        volume_id: id.to_string(),
    })
    .await
    .unwrap()
    .into_inner()
    .total_bytes
}

/// Mounts volume `id` on `stage`, runs `f` on the mounted directory, and unmounts it.
async fn with_mounted<T>(
    vc: &mut VolumeClient,
    id: &str,
    stage: &str,
    f: impl FnOnce(&Path) -> T,
) -> T {
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.to_string(),
        target_path: stage.to_string(),
    })
    .await
    .unwrap();
    let r = f(Path::new(stage));
    vc.unmount_volume(v1::UnmountVolumeRequest {
        volume_id: id.to_string(),
        target_path: stage.to_string(),
    })
    .await
    .unwrap();
    r
}

/// ResizeVolume to the most the disk allows (`size_bytes` 0), on a client of its own: the call
/// the tests interrupt and the retry that finishes it.
async fn grow_to_max(
    mut vc: VolumeClient,
    volume_id: String,
) -> Result<tonic::Response<v1::ResizeVolumeResponse>, tonic::Status> {
    vc.resize_volume(v1::ResizeVolumeRequest {
        volume_id,
        size_bytes: 0,
    })
    .await
}

/// The file written before a resize, whose contents must survive it.
const DATA: &str = "data.bin";

/// Mounts the volume and checks the file written before the resize still holds `data`.
async fn assert_data_intact(vc: &mut VolumeClient, id: &str, stage: &str, data: &[u8]) {
    with_mounted(vc, id, stage, |dir| {
        let read = std::fs::read(dir.join(DATA)).unwrap();
        assert!(read == data, "data written before the resize is intact");
    })
    .await;
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
    let Some(bystander) = LoopDisk::or_skip(&dir, "bystander", 64) else {
        return;
    };
    // The bystander holds data the daemon is never asked about: it must stay bit-identical.
    std::fs::write(&bystander.dev, pattern(1 << 20, 7)).unwrap();
    let bystander_before = bystander.fingerprint();

    // --- PartitionDisk: written in-process, so the kill lands at several points in time.
    let mut part_disks = Vec::new();
    for (i, delay_us) in [0u64, 500, 2000, 8000].into_iter().enumerate() {
        let disk = LoopDisk::new(&dir, &format!("part{i}"), 64).unwrap();
        let n = disk.disk_number();
        let (mut dc, _) = v1_clients(&d).await;
        let call = tokio::spawn(async move {
            dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
                .await
        });
        tokio::time::sleep(Duration::from_micros(delay_us)).await;
        let interrupted = d
            .kill_restart_retry(call, ("disk", "v1"), "PartitionDisk", |ch| async move {
                DiskClient::new(ch)
                    .partition_disk(d1::PartitionDiskRequest { disk_number: n })
                    .await
            })
            .await
            .is_err();
        let (_, mut vc) = v1_clients(&d).await;
        let ids = volumes_on(&mut vc, n).await;
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
    let (mut dc, mut vc) = v1_clients(&d).await;
    let id = partition_one(&mut dc, &mut vc, n).await;
    let call = spawn_format(&vc, &id);
    let seen = wait_for_child(d.child.id(), &["mkfs", "mke2fs"], Duration::from_secs(20)).await;
    let _ = d
        .kill_restart_retry(call, ("volume", "v1"), "FormatVolume", |ch| {
            let volume_id = id.clone();
            async move {
                VolumeClient::new(ch)
                    .format_volume(v1::FormatVolumeRequest { volume_id })
                    .await
            }
        })
        .await;
    eprintln!("FormatVolume killed while {seen:?} ran");
    let (_, mut vc) = v1_clients(&d).await;
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
    with_mounted(&mut vc, &id, &stage, |dir| {
        std::fs::write(dir.join(DATA), &data).unwrap()
    })
    .await;
    let before = total_bytes(&mut vc, &id).await;

    // --- ResizeVolume: the disk grows; the kill lands while the partition or filesystem grows.
    disk.grow_to(320);
    let (mut dc, _) = v1_clients(&d).await;
    dc.rescan(d1::RescanRequest {}).await.unwrap();
    let call = tokio::spawn(grow_to_max(vc.clone(), id.clone()));
    let seen = wait_for_child(
        d.child.id(),
        &["resize2fs", "e2fsck"],
        Duration::from_secs(20),
    )
    .await;
    let _ = d
        .kill_restart_retry(call, ("volume", "v1"), "ResizeVolume", |ch| {
            grow_to_max(VolumeClient::new(ch), id.clone())
        })
        .await;
    eprintln!("ResizeVolume killed while {seen:?} ran");
    let (_, mut vc) = v1_clients(&d).await;
    let after = total_bytes(&mut vc, &id).await;
    assert!(
        after > before + (100 << 20),
        "the filesystem grew: {before} -> {after}"
    );
    assert_data_intact(&mut vc, &id, &stage, &data).await;

    // Other disks were never touched.
    assert_eq!(
        bystander.fingerprint(),
        bystander_before,
        "the bystander disk changed"
    );
    drop(part_disks);
}

/// An unmounted xfs grows through a private temporary mount under the state dir (the kernel's
/// XFS_IOC_FSGROWFSDATA on its root, so no tool can be held there any more: a kill lands in the
/// window between the mount and the unmount). What such a crash leaves, the volume mounted
/// there nosuid, nodev and noexec, is made by hand after a SIGKILL: the restarted daemon
/// unmounts it, the retry grows the volume, the data is intact, and no private mount is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_an_xfs_grows_on_a_private_mount_then_retry_succeeds() {
    let mut d = Daemon::start(&["--format-filesystem", "xfs"]);
    let dir = d.dir.path().to_path_buf();
    // xfs needs at least 300 MiB.
    let Some(disk) = LoopDisk::or_skip(&dir, "xfsgrow", 400) else {
        return;
    };
    let n = disk.disk_number();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let id = partition_one(&mut dc, &mut vc, n).await;
    vc.format_volume(v1::FormatVolumeRequest {
        volume_id: id.clone(),
    })
    .await
    .unwrap();
    let stage = d.k("plugins/xfs/globalmount");
    std::fs::create_dir_all(&stage).unwrap();
    let data = pattern(4 << 20, 9);
    with_mounted(&mut vc, &id, &stage, |dir| {
        std::fs::write(dir.join(DATA), &data).unwrap()
    })
    .await;
    let before = total_bytes(&mut vc, &id).await;

    disk.grow_to(700);
    dc.rescan(d1::RescanRequest {}).await.unwrap();
    // The crash, with the volume on its temporary mount.
    d.kill9();
    let private = d.state.join("mnt");
    let left = private.join(&id);
    std::fs::create_dir_all(&left).unwrap();
    let part = disk.partition(1);
    common::run(
        "mount",
        &[
            "-t",
            "xfs",
            "-o",
            "nosuid,nodev,noexec",
            &part.to_string_lossy(),
            &left.to_string_lossy(),
        ],
    );
    let temporary = |private: &Path| -> Vec<std::path::PathBuf> {
        mounts_under(private)
            .into_iter()
            .filter(|p| p != private)
            .collect()
    };
    assert_eq!(temporary(&private), std::slice::from_ref(&left));
    d.restart();
    assert_eq!(
        temporary(&private),
        Vec::<std::path::PathBuf>::new(),
        "the restarted daemon unmounted what the killed one left"
    );
    let (_, mut vc) = v1_clients(&d).await;
    grow_to_max(vc.clone(), id.clone()).await.unwrap();
    assert_eq!(
        temporary(&private),
        Vec::<std::path::PathBuf>::new(),
        "no temporary mount is left behind"
    );
    let after = total_bytes(&mut vc, &id).await;
    assert!(
        after > before + (200 << 20),
        "the filesystem grew: {before} -> {after}"
    );
    assert_data_intact(&mut vc, &id, &stage, &data).await;
}

/// A PartitionDisk cut off between its table writes, at each of them in turn (the writes made
/// here exactly as the daemon orders them), is finished by the retry: one partition, the
/// protective MBR in place, and the partition's identity kept once the backup table was out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_table_writes_cut_off_at_each_step_are_finished_by_the_retry() {
    use csi_proxy_formats::gpt::{Gpt, LINUX_FILESYSTEM, random_guid};
    use csi_proxy_formats::uuid::Uuid;
    use std::os::unix::fs::FileExt;
    let d = Daemon::start(&[]);
    let dir = d.dir.path().to_path_buf();
    let Some(probe) = LoopDisk::or_skip(&dir, "cut-probe", 16) else {
        return;
    };
    drop(probe);
    let (sector, total) = (512u64, (64u64 << 20) / 512);
    let mut table = Gpt::new(sector, total, Uuid::from_bytes([0x11; 16])).unwrap();
    let part_guid = random_guid([0x22; 16]);
    table
        .add_max_partition(LINUX_FILESYSTEM, part_guid)
        .unwrap();
    let writes = table.serialize(total);
    for done in 1..writes.len() {
        let disk = LoopDisk::new(&dir, &format!("cut{done}"), 64).unwrap();
        {
            let dev = std::fs::OpenOptions::new()
                .write(true)
                .open(&disk.dev)
                .unwrap();
            for (off, bytes) in &writes[..done] {
                dev.write_all_at(bytes, *off).unwrap();
            }
            dev.sync_all().unwrap();
        }
        let n = disk.disk_number();
        let (mut dc, mut vc) = v1_clients(&d).await;
        dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await
            .unwrap_or_else(|s| panic!("retry after {done} of {} writes: {s:?}", writes.len()));
        let ids = volumes_on(&mut vc, n).await;
        assert_eq!(ids.len(), 1, "after {done} writes: {ids:?}");
        assert!(
            ids[0].ends_with(&part_guid.to_string()),
            "after {done} writes the table written so far is finished, not replaced: {ids:?}"
        );
        let mut lba0 = vec![0u8; 512];
        std::fs::File::open(&disk.dev)
            .unwrap()
            .read_exact_at(&mut lba0, 0)
            .unwrap();
        assert_eq!(
            lba0[450], 0xEE,
            "after {done} writes: protective MBR in place"
        );
        eprintln!("PartitionDisk finished a table cut off after {done} writes");
    }
}
