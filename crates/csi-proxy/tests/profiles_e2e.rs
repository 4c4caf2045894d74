//! Least privilege per driver, through the daemon's endpoints on real loop disks: two drivers'
//! profiles, A ("a.csi") and B ("b.csi"), each on its own socket directory. A stages a volume
//! and publishes it into a pod as kubelet asked; B then tries every cross-driver action against
//! A's staged volume, disk and publish target, directly and through links and forged kubelet
//! records it planted itself. Each is PERMISSION_DENIED naming B's profile, and nothing of A's
//! changes (its mount, its data, its link); B's own flow and A's unstaging pass. The claims
//! survive a restart. Needs root (loop devices, mounts); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, is_mounted, run};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::system::v1alpha1 as s1;
use csi_proxy_api::volume::v1;
use csi_proxy_client::Connector;
use std::path::Path;
use tonic::Code;
use tonic::transport::Channel;

type Fs = f1::filesystem_client::FilesystemClient<Channel>;
type Disk = d1::disk_client::DiskClient<Channel>;
type Vol = v1::volume_client::VolumeClient<Channel>;

/// One driver's clients on its profile's sockets.
struct Driver {
    fs: Fs,
    disk: Disk,
    vol: Vol,
    sys: s1::system_client::SystemClient<Channel>,
}

async fn driver(sockets: &Path) -> Driver {
    let c = Connector::SocketDir(sockets.to_path_buf());
    Driver {
        fs: Fs::new(c.channel("filesystem", "v1").await.unwrap()),
        disk: Disk::new(c.channel("disk", "v1").await.unwrap()),
        vol: Vol::new(c.channel("volume", "v1").await.unwrap()),
        sys: s1::system_client::SystemClient::new(c.channel("system", "v1alpha1").await.unwrap()),
    }
}

/// A's sockets in `<dir>/run-a`; B's at the daemon's default place (`<dir>/run`, what the
/// harness waits for), which is how a driver that keeps upstream's names gets a profile.
fn profiles(dir: &Path) -> String {
    format!(
        "[[profile]]\n\
         driver = \"a.csi\"\n\
         socket_dir = \"{a}\"\n\
         groups = [\"filesystem\", \"disk\", \"volume\", \"system\"]\n\n\
         [[profile]]\n\
         driver = \"b.csi\"\n\
         socket_dir = \"{b}\"\n\
         groups = [\"filesystem\", \"disk\", \"volume\"]\n",
        a = dir.join("run-a").display(),
        b = dir.join("run").display(),
    )
}

/// kubelet's record of a per-volume directory, as kubelet writes it before it calls the driver.
fn vol_data(dir: &str, driver: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        format!("{dir}/vol_data.json"),
        format!(r#"{{"driverName":"{driver}","specVolID":"pv","volumeHandle":"h"}}"#),
    )
    .unwrap();
}

#[track_caller]
fn denied<T: std::fmt::Debug>(what: &str, r: Result<T, tonic::Status>, owner: Option<&str>) {
    let s = r.expect_err(what);
    assert_eq!(s.code(), Code::PermissionDenied, "{what}: {s:?}");
    assert!(
        s.message().contains("profile \"b.csi\""),
        "{what}: the refusal does not name B's profile: {}",
        s.message()
    );
    if let Some(owner) = owner {
        assert!(
            s.message().contains(owner),
            "{what}: {owner:?} not named: {}",
            s.message()
        );
    }
}

/// Stages disk `n` for a driver ([`common::stage_disk`]).
async fn stage(d: &mut Driver, n: u32, staging: &str) -> String {
    common::stage_disk(&mut d.disk, &mut d.vol, &mut d.fs, n, staging).await
}

#[tokio::test(flavor = "multi_thread")]
async fn one_driver_cannot_touch_another_drivers_volume_disk_or_publish_target() {
    if !can_use_loop_devices() {
        return;
    }
    let mut d = Daemon::start_profiled(profiles, &[]);
    let root = d.dir.path().to_path_buf();
    let mut a = driver(&root.join("run-a")).await;
    let mut b = driver(&root.join("run")).await;
    // kubelet's own directories, which it makes before it calls any driver.
    for dir in [
        "plugins/kubernetes.io/csi",
        "pods/u1/volumes/kubernetes.io~csi",
    ] {
        std::fs::create_dir_all(d.k(dir)).unwrap();
    }

    // A stages its volume and publishes it into pod u1, as kubelet asked (record first).
    let la = LoopDisk::new(&root, "a-disk", 64).unwrap();
    let na = la.disk_number();
    let a_staging = d.k("plugins/kubernetes.io/csi/a.csi/h1/globalmount");
    let a_vol = stage(&mut a, na, &a_staging).await;
    std::fs::write(format!("{a_staging}/data"), "A's data").unwrap();
    let pv1 = d.k("pods/u1/volumes/kubernetes.io~csi/pv1");
    vol_data(&pv1, "a.csi");
    let a_target = format!("{pv1}/mount");
    a.fs.create_symlink(f1::CreateSymlinkRequest {
        source_path: a_staging.clone(),
        target_path: a_target.clone(),
    })
    .await
    .unwrap();

    // B's own disk, staged in its own directory: its flow passes.
    let lb = LoopDisk::new(&root, "b-disk", 64).unwrap();
    let b_staging = d.k("plugins/kubernetes.io/csi/b.csi/h2/globalmount");
    let b_vol = stage(&mut b, lb.disk_number(), &b_staging).await;

    // A hostile B rewrites kubelet's record of A's publish target, plants a record naming A
    // for a pod directory of its choosing, and links its own directory to A's.
    vol_data(&pv1, "b.csi");
    let pv2 = d.k("pods/u2/volumes/kubernetes.io~csi/pv2");
    vol_data(&pv2, "a.csi");
    let b_link = d.k("plugins/kubernetes.io/csi/b.csi/to-a");
    std::os::unix::fs::symlink("../a.csi/h1", &b_link).unwrap();

    let a_owner = Some("\"a.csi\"");
    denied(
        "Rmdir A's staging path",
        b.fs.rmdir(f1::RmdirRequest {
            path: a_staging.clone(),
            force: true,
        })
        .await,
        a_owner,
    );
    denied(
        "Rmdir through B's link to A's directory",
        b.fs.rmdir(f1::RmdirRequest {
            path: format!("{b_link}/globalmount"),
            force: true,
        })
        .await,
        a_owner,
    );
    denied(
        "Rmdir A's publish target (record rewritten by B)",
        b.fs.rmdir(f1::RmdirRequest {
            path: a_target.clone(),
            force: false,
        })
        .await,
        a_owner,
    );
    denied(
        "Mkdir in a pod directory whose record names A",
        b.fs.mkdir(f1::MkdirRequest {
            path: format!("{pv2}/mount"),
        })
        .await,
        a_owner,
    );
    denied(
        "CreateSymlink from A's staging into B's directory",
        b.fs.create_symlink(f1::CreateSymlinkRequest {
            source_path: a_staging.clone(),
            target_path: d.k("plugins/kubernetes.io/csi/b.csi/stolen"),
        })
        .await,
        a_owner,
    );
    denied(
        "UnmountVolume of A's volume at A's staging path",
        b.vol
            .unmount_volume(v1::UnmountVolumeRequest {
                volume_id: a_vol.clone(),
                target_path: a_staging.clone(),
            })
            .await,
        a_owner,
    );
    let b_dir = d.k("plugins/kubernetes.io/csi/b.csi/h3/globalmount");
    b.fs.mkdir(f1::MkdirRequest {
        path: b_dir.clone(),
    })
    .await
    .unwrap();
    denied(
        "MountVolume of A's volume into B's directory",
        b.vol
            .mount_volume(v1::MountVolumeRequest {
                volume_id: a_vol.clone(),
                target_path: b_dir.clone(),
            })
            .await,
        a_owner,
    );
    denied(
        "MountVolume through B's link into A's directory",
        b.vol
            .mount_volume(v1::MountVolumeRequest {
                volume_id: b_vol.clone(),
                target_path: format!("{b_link}/globalmount"),
            })
            .await,
        a_owner,
    );
    denied(
        "FormatVolume of A's volume",
        b.vol
            .format_volume(v1::FormatVolumeRequest {
                volume_id: a_vol.clone(),
            })
            .await,
        a_owner,
    );
    denied(
        "ResizeVolume of A's volume",
        b.vol
            .resize_volume(v1::ResizeVolumeRequest {
                volume_id: a_vol.clone(),
                size_bytes: 0,
            })
            .await,
        a_owner,
    );
    denied(
        "PartitionDisk of A's disk",
        b.disk
            .partition_disk(d1::PartitionDiskRequest { disk_number: na })
            .await,
        a_owner,
    );
    denied(
        "SetDiskState offline of A's disk",
        b.disk
            .set_disk_state(d1::SetDiskStateRequest {
                disk_number: na,
                is_online: false,
            })
            .await,
        a_owner,
    );
    denied(
        "a group B's profile does not list",
        b.sys
            .get_bios_serial_number(s1::GetBiosSerialNumberRequest {})
            .await,
        None,
    );

    // Nothing of A's changed.
    assert!(
        is_mounted(Path::new(&a_staging)),
        "A's staging mount is gone"
    );
    assert_eq!(
        std::fs::read_to_string(format!("{a_staging}/data")).unwrap(),
        "A's data"
    );
    assert_eq!(
        std::fs::read_link(&a_target).unwrap().display().to_string(),
        a_staging
    );
    assert!(!is_mounted(Path::new(&b_dir)));
    assert!(!Path::new(&d.k("plugins/kubernetes.io/csi/b.csi/stolen")).exists());
    assert!(!Path::new(&format!("{pv2}/mount")).exists());

    // The claims are in the state directory: after a restart B is still refused A's target,
    // although the record there now names B.
    d.restart();
    let mut b = driver(&root.join("run")).await;
    let mut a = driver(&root.join("run-a")).await;
    denied(
        "Rmdir A's publish target after a restart",
        b.fs.rmdir(f1::RmdirRequest {
            path: a_target.clone(),
            force: false,
        })
        .await,
        a_owner,
    );

    // A unpublishes and unstages; B unstages its own.
    a.fs.rmdir(f1::RmdirRequest {
        path: a_target.clone(),
        force: false,
    })
    .await
    .unwrap();
    a.vol
        .unmount_volume(v1::UnmountVolumeRequest {
            volume_id: a_vol.clone(),
            target_path: a_staging.clone(),
        })
        .await
        .unwrap();
    b.vol
        .unmount_volume(v1::UnmountVolumeRequest {
            volume_id: b_vol.clone(),
            target_path: b_staging.clone(),
        })
        .await
        .unwrap();
    assert!(!is_mounted(Path::new(&a_staging)));

    // Unstaged, A's volume is mounted nowhere, and its data is still A's: the storage stays
    // A's profile's until the disk leaves the node.
    denied(
        "MountVolume of A's unstaged volume into B's directory",
        b.vol
            .mount_volume(v1::MountVolumeRequest {
                volume_id: a_vol.clone(),
                target_path: b_dir.clone(),
            })
            .await,
        a_owner,
    );
    denied(
        "PartitionDisk of A's unstaged disk",
        b.disk
            .partition_disk(d1::PartitionDiskRequest { disk_number: na })
            .await,
        a_owner,
    );
    assert!(!is_mounted(Path::new(&b_dir)));
    // A stages it again: its own storage.
    a.vol
        .mount_volume(v1::MountVolumeRequest {
            volume_id: a_vol.clone(),
            target_path: a_staging.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("{a_staging}/data")).unwrap(),
        "A's data"
    );
    a.vol
        .unmount_volume(v1::UnmountVolumeRequest {
            volume_id: a_vol.clone(),
            target_path: a_staging.clone(),
        })
        .await
        .unwrap();
    run("e2fsck", &["-fn", &la.partition(1).display().to_string()]);
}

/// A profiles file the daemon cannot serve stops the start-up, naming the file, the profile and
/// what is wrong; nothing is served. Needs nothing from the host.
#[test]
fn a_bad_profiles_file_stops_the_start_naming_the_profile_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("kubelet");
    std::fs::create_dir_all(&kubelet).unwrap();
    let run = dir.path().join("run");
    let cases = [
        (
            format!(
                "socket_dir = \"{}\"\ngroups = [\"disk\", \"tape\"]\n",
                run.display()
            ),
            "unknown group \"tape\"",
        ),
        (
            format!(
                "socket_dir = \"{}\"\ngroups = [\"disk\"]\npaths = [\"/etc\"]\n",
                run.display()
            ),
            "not within the allowed roots",
        ),
        (
            format!(
                "socket_dir = \"{}\"\ngroups = [\"disk\"]\n",
                dir.path().join("state").join("x").display()
            ),
            "overlaps --state-dir",
        ),
    ];
    for (body, why) in cases {
        let file = dir.path().join("profiles.toml");
        std::fs::write(&file, format!("[[profile]]\ndriver = \"a.csi\"\n{body}")).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_csi-proxy"))
            .arg(format!("--kubelet-path={}", kubelet.display()))
            .arg(format!("--socket-dir={}", run.display()))
            .arg(format!(
                "--state-dir={}",
                dir.path().join("state").display()
            ))
            .arg(format!("--profiles={}", file.display()))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{why}: the daemon started: {stderr}");
        assert!(
            stderr.contains(why) && stderr.contains("profile \"a.csi\""),
            "{why}: {stderr}"
        );
        assert!(
            !run.join("csi-proxy-disk-v1.sock").exists(),
            "{why}: a socket was left"
        );
    }
}
