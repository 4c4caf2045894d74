//! The in-use rule through the daemon's endpoints, on real loop disks used by the real tools:
//! a member of a multi-device btrfs the host has mounted, and a disk mapped as a raw block
//! volume (a loop device over it) or held open by a process. Every write, mount and growth of
//! such a disk is refused naming its user, and not a byte of it changes. Needs root (loop
//! devices, mounts); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Daemon, Holder, HostMount, LoopDisk, Mapping, can_use_loop_devices, is_mounted, partition_one,
    raw_data, refused, run, v1_clients,
};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use std::process::Command;

/// A case once missed: one btrfs (raid1 data and metadata) across the partitions of two disks,
/// mounted outside the kubelet path with a secret in it. The mount table names one member only,
/// under an anonymous device number; the second member's volume was mounted into the client's
/// directory (the secret readable there), and partitioned, formatted and grown.
#[tokio::test(flavor = "multi_thread")]
async fn every_member_of_a_mounted_multi_device_filesystem_is_in_use() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let a = LoopDisk::new(d.dir.path(), "btrfs-a", 160).unwrap();
    let b = LoopDisk::new(d.dir.path(), "btrfs-b", 160).unwrap();
    let vol_a = partition_one(&mut dc, &mut vc, a.disk_number()).await;
    let vol_b = partition_one(&mut dc, &mut vc, b.disk_number()).await;
    let (pa, pb) = (a.partition(1), b.partition(1));
    let (pa_s, pb_s) = (pa.display().to_string(), pb.display().to_string());
    run(
        "mkfs.btrfs",
        &["-q", "-f", "-d", "raid1", "-m", "raid1", &pa_s, &pb_s],
    );
    // Outside the kubelet path and working dirs: the host's own filesystem.
    let host_dir = d.dir.path().join("host-fs");
    std::fs::create_dir(&host_dir).unwrap();
    run(
        "mount",
        &[
            "-o",
            &format!("device={pb_s}"),
            &pa_s,
            &host_dir.display().to_string(),
        ],
    );
    let _mounted = HostMount(host_dir.clone());
    std::fs::write(host_dir.join("secret"), "the host's").unwrap();
    let host_mp = host_dir.display().to_string();

    let m2 = d.k("plugins/example.csi/m2");
    std::fs::create_dir_all(&m2).unwrap();
    let mount = vc
        .mount_volume(v1::MountVolumeRequest {
            volume_id: vol_b.clone(),
            target_path: m2.clone(),
        })
        .await;
    let mounted_there = is_mounted(Path::new(&m2));
    if mounted_there {
        let _ = Command::new("umount").arg(&m2).status();
    }
    refused(
        "MountVolume of the second member",
        mount,
        &[&host_mp, &a.name()],
    );
    assert!(!mounted_there, "the host's filesystem was mounted in m2");
    refused(
        "MountVolume of the first member",
        vc.mount_volume(v1::MountVolumeRequest {
            volume_id: vol_a.clone(),
            target_path: m2.clone(),
        })
        .await,
        &[&host_mp],
    );
    refused(
        "PartitionDisk",
        dc.partition_disk(d1::PartitionDiskRequest {
            disk_number: b.disk_number(),
        })
        .await,
        &[&host_mp, &a.name()],
    );
    refused(
        "FormatVolume",
        vc.format_volume(v1::FormatVolumeRequest {
            volume_id: vol_b.clone(),
        })
        .await,
        &[&host_mp, &a.name()],
    );
    refused(
        "ResizeVolume",
        vc.resize_volume(v1::ResizeVolumeRequest {
            volume_id: vol_b.clone(),
            size_bytes: 0,
        })
        .await,
        &[&host_mp, &a.name()],
    );
    refused(
        "SetDiskState(offline)",
        dc.set_disk_state(d1::SetDiskStateRequest {
            disk_number: b.disk_number(),
            is_online: false,
        })
        .await,
        &[&host_mp, &a.name()],
    );
    assert_eq!(
        std::fs::read_to_string(host_dir.join("secret")).unwrap(),
        "the host's"
    );
    drop(_mounted);
    // Both members are still one sound filesystem (the host's writes change the bytes, so
    // the check is the filesystem's own).
    run("btrfs", &["check", "--readonly", &pb_s]);
}

/// Another case once missed: a disk holding an application's raw data, mapped the way kubelet maps
/// a raw block volume (a loop device over the block device) and held open by a process.
/// PartitionDisk wrote a GPT over the data's first and last sectors; FormatVolume of the listed
/// volume formatted it. Then the same without the mapping: the process alone holds the disk.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_mapped_as_a_raw_block_volume_or_held_open_is_in_use() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "raw-block", 64).unwrap();
    let n = l.disk_number();
    raw_data(&l);
    let before = l.fingerprint();
    let dev = format!("/dev/{}", l.name());
    let out = Command::new("losetup")
        .args(["-f", "--show", &dev])
        .output()
        .unwrap();
    assert!(out.status.success(), "losetup: {out:?}");
    let mapping = Mapping(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let mapped = mapping.0.trim_start_matches("/dev/").to_string();
    let holder = Holder::hold(Path::new(&mapping.0));

    let volumes = common::volumes_on(&mut vc, n).await;
    refused(
        "PartitionDisk under a raw block mapping",
        dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await,
        &[&mapped],
    );
    for id in &volumes {
        refused(
            "FormatVolume under a raw block mapping",
            vc.format_volume(v1::FormatVolumeRequest {
                volume_id: id.clone(),
            })
            .await,
            &[&mapped],
        );
    }
    drop(holder);
    drop(mapping);

    // A process alone holding the disk open: named by pid and command.
    let holder = Holder::hold(Path::new(&dev));
    let pid = format!("{} (sleep)", holder.0.id());
    refused(
        "PartitionDisk while a process holds the disk",
        dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await,
        &[&pid],
    );
    for id in &volumes {
        refused(
            "FormatVolume while a process holds the disk",
            vc.format_volume(v1::FormatVolumeRequest {
                volume_id: id.clone(),
            })
            .await,
            &[&pid],
        );
    }
    refused(
        "SetDiskState(offline) while a process holds the disk",
        dc.set_disk_state(d1::SetDiskStateRequest {
            disk_number: n,
            is_online: false,
        })
        .await,
        &[&pid],
    );
    drop(holder);
    assert_eq!(l.fingerprint(), before, "the raw data changed");

    // Once nobody holds it, the disk is the client's again.
    dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .unwrap();
}
