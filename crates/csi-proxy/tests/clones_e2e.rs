//! Clones of one disk on one node (a snapshot restored where the original is staged): the same
//! partition table, PARTUUIDs and filesystem UUIDs on different disks. Each is its own volume:
//! grown, mounted and kept apart through the daemon's endpoints on real loop disks. Needs root
//! (loop devices); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, output, v1_clients};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use tonic::Code;

/// The data blocks of the xfs on `dev` (its superblock's `dblocks`), read without mounting it.
fn xfs_blocks(dev: &Path) -> u64 {
    let out = output(
        "xfs_db",
        &[
            "-r",
            "-c",
            "sb 0",
            "-c",
            "p dblocks",
            &dev.to_string_lossy(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .strip_prefix("dblocks = ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("xfs_db on {}: {text} {out:?}", dev.display()))
}

/// The original xfs volume is mounted (staged); two clones of it grow at the same time, each
/// through a temporary mount of its own, while the original stays mounted; then the original
/// grows online, and a clone is staged beside it. Every filesystem ends up filling its grown
/// partition. The original's disk attached a second time (same backing file, as a second SCSI
/// path shows the same serial) is refused. Before: the clones' temporary mounts failed with
/// EINVAL (xfs's duplicate-UUID check), so a restored snapshot could be neither grown nor
/// staged on the node holding the original.
#[tokio::test(flavor = "multi_thread")]
async fn clones_of_a_mounted_xfs_grow_at_the_same_time() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&["--format-filesystem", "xfs"]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let a = LoopDisk::new(d.dir.path(), "original", 320).unwrap();
    let id_a = common::partition_one(&mut dc, &mut vc, a.disk_number()).await;
    common::format_ok(&mut vc, &id_a).await;
    let clones = [a.clone_as("clone1"), a.clone_as("clone2")];
    let target = d.kubelet.join("original-mnt");
    std::fs::create_dir(&target).unwrap();
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id_a.clone(),
        target_path: target.to_string_lossy().into(),
    })
    .await
    .unwrap();
    let before = xfs_blocks(&a.partition(1));
    for l in clones.iter().chain([&a]) {
        l.grow_to(512);
    }
    dc.rescan(d1::RescanRequest {}).await.unwrap();

    let mut ids = Vec::new();
    for l in &clones {
        let listed = common::volumes_on(&mut vc, l.disk_number()).await;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_ne!(listed[0], id_a, "a clone is its own volume");
        ids.push(listed[0].clone());
    }
    let grows: Vec<_> = ids
        .iter()
        .map(|id| {
            let mut vc = vc.clone();
            let id = id.clone();
            tokio::spawn(async move {
                vc.resize_volume(v1::ResizeVolumeRequest {
                    volume_id: id.clone(),
                    size_bytes: 0,
                })
                .await
                .map(drop)
                .map_err(|s| format!("{id}: {s:?}"))
            })
        })
        .collect();
    for g in grows {
        g.await.unwrap().unwrap();
    }
    vc.resize_volume(v1::ResizeVolumeRequest {
        volume_id: id_a.clone(),
        size_bytes: 0,
    })
    .await
    .unwrap();
    for l in &clones {
        let after = xfs_blocks(&l.partition(1));
        assert!(
            after > before * 3 / 2,
            "{}: {before} -> {after} blocks",
            l.name()
        );
    }
    // A mounted xfs's superblock on disk may lag behind its log; ask the mounted filesystem.
    let info = output("xfs_info", &[&target.to_string_lossy()]);
    let info = String::from_utf8_lossy(&info.stdout);
    let after: u64 = info
        .lines()
        .find(|l| l.starts_with("data"))
        .and_then(|l| l.split("blocks=").nth(1))
        .and_then(|b| b.split(',').next())
        .and_then(|b| b.trim().parse().ok())
        .unwrap_or_else(|| panic!("xfs_info: {info}"));
    assert!(
        after > before * 3 / 2,
        "original: {before} -> {after} blocks"
    );
    assert!(common::is_mounted(&target), "the original stays mounted");

    // A clone is staged beside the original; the original's own disk seen through a second
    // device is not: one xfs mounted twice corrupts itself.
    let clone_target = d.kubelet.join("clone-mnt");
    std::fs::create_dir(&clone_target).unwrap();
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: ids[0].clone(),
        target_path: clone_target.to_string_lossy().into(),
    })
    .await
    .unwrap();
    assert!(common::is_mounted(&clone_target));
    let second = a.another_path();
    let listed = common::volumes_on(&mut vc, second.disk_number()).await;
    let path_target = d.kubelet.join("second-path-mnt");
    std::fs::create_dir(&path_target).unwrap();
    let s = vc
        .mount_volume(v1::MountVolumeRequest {
            volume_id: listed[0].clone(),
            target_path: path_target.to_string_lossy().into(),
        })
        .await
        .expect_err("the same disk through a second path is never mounted twice");
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    assert!(
        s.message().contains("MountVolume") && s.message().contains("another path"),
        "{}",
        s.message()
    );
    assert!(!common::is_mounted(&path_target));
}
