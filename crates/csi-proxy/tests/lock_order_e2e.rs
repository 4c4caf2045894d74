//! The lock order through the real daemon on a loop disk: while the disk's own work hangs
//! (its FormatVolume's mkfs stopped with SIGSTOP, as a disk that stops answering writes holds
//! its call), MountVolume of its volume with the kubelet root as the target is refused at once,
//! MountVolume at a staging path waits for the disk without holding its path, and another
//! client's Mkdir under `plugins/`, under `pods/` and below that staging path, each with a 1 s
//! deadline, succeeds three times in a row. Before, MountVolume held the kubelet root while it
//! waited for the disk (up to 120 s) and those Mkdirs answered DEADLINE_EXCEEDED. Needs root
//! and losetup; skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, Thaw, partition_one, spawn_format, v1_clients, wait_for_child};
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::volume::v1;
use std::time::Duration;
use tonic::Code;

fn within_a_second<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(Duration::from_secs(1));
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_disk_holds_up_no_other_clients_path() {
    let d = Daemon::start(&[]);
    let Some(disk) = LoopDisk::or_skip(d.dir.path(), "hung", 64) else {
        return;
    };
    let (mut dc, mut vc) = v1_clients(&d).await;
    let id = partition_one(&mut dc, &mut vc, disk.disk_number()).await;
    let format = spawn_format(&vc, &id);
    let (mkfs, _) = wait_for_child(d.child.id(), &["mkfs", "mke2fs"], Duration::from_secs(20))
        .await
        .expect("FormatVolume runs mkfs");
    let thaw = Thaw::stop(mkfs);

    // The attacker: its own volume, the kubelet root as the target, no deadline.
    let attacker = {
        let (mut vc, volume_id) = (vc.clone(), id.clone());
        let target_path = d.kubelet.display().to_string();
        tokio::spawn(async move {
            vc.mount_volume(v1::MountVolumeRequest {
                volume_id,
                target_path,
            })
            .await
        })
    };
    // A driver's stage on the same disk: it waits for the disk, holding no path.
    let staging = d.k("plugins/kubernetes.io/csi/x/abc/globalmount");
    std::fs::create_dir_all(&staging).unwrap();
    let waiting = {
        let (mut vc, volume_id, target_path) = (vc.clone(), id.clone(), staging.clone());
        tokio::spawn(async move {
            vc.mount_volume(v1::MountVolumeRequest {
                volume_id,
                target_path,
            })
            .await
        })
    };
    // Time for both to reach the daemon's wait for the disk, where they would hold their paths.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Another client.
    let ch = d.connector().channel("filesystem", "v1").await.unwrap();
    let mut fs = f1::filesystem_client::FilesystemClient::new(ch);
    for round in 0..3 {
        for path in [
            d.k(&format!("plugins/other.csi.example/r{round}")),
            d.k(&format!("pods/pod-{round}/volumes")),
            format!("{staging}/below-{round}"),
        ] {
            fs.mkdir(within_a_second(f1::MkdirRequest { path: path.clone() }))
                .await
                .unwrap_or_else(|s| panic!("Mkdir {path} while the disk hangs: {s:?}"));
        }
    }

    let s = attacker
        .await
        .unwrap()
        .expect_err("the kubelet root as a mount target");
    assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
    assert!(s.message().contains("never a mount target"), "{s:?}");
    assert!(
        !waiting.is_finished(),
        "MountVolume waits for the hung disk"
    );

    drop(thaw);
    format.await.unwrap().expect("the format finishes");
    // The mkdirs below the staging path made it non-empty: the mount is refused or done, but
    // answered once the disk is free (and taken away again, so the disk detaches).
    let mounted = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("MountVolume answers once the disk is free")
        .unwrap();
    if mounted.is_ok() {
        vc.unmount_volume(v1::UnmountVolumeRequest {
            volume_id: id,
            target_path: staging,
        })
        .await
        .unwrap();
    }
}
