//! Two driver profiles served by one daemon over the simulated Windows: profile "a.csi" stages
//! a disk volume, maps an SMB share and logs in to an iSCSI target; profile "b.csi", on its own
//! endpoints, tries every cross-driver action against those objects and is refused each time
//! with PERMISSION_DENIED naming it (and the owner where there is one), while A's objects stay
//! as they were. B's own flow (its own disk in its own directory, joining A's mapping with the
//! same credentials and letting it go) works, and A's removal afterwards removes the mapping.
//! Needs nothing from the host.
#![cfg(unix)]

mod common;

use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::iscsi::v1alpha2 as i2;
use csi_proxy_api::smb::v1 as s1;
use csi_proxy_api::system::v1alpha1 as y1;
use csi_proxy_api::volume::v1;
use csi_proxy_client::Connector;
use csi_proxy_core::profiles::{Group, Profile};
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_server::daemon::{self, Place};
use csi_proxy_server::registry;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

const GIB: u64 = 1 << 30;
const KUBELET: &str = r"C:\var\lib\kubelet";
const A: &str = "a.csi";
const B: &str = "b.csi";
const SHARE: &str = r"\\files.example\vols";
const PORTAL: &str = "10.0.0.7";
const IQN: &str = "iqn.2004-04.com.example:array.a";

fn k(rel: &str) -> String {
    format!(r"{KUBELET}\{rel}")
}

/// A path in driver `driver`'s staging directory.
fn plugin(driver: &str, rel: &str) -> String {
    k(&format!(r"plugins\kubernetes.io\csi\{driver}\{rel}"))
}

/// One driver's clients, on its profile's endpoints.
struct Driver {
    fs: f1::filesystem_client::FilesystemClient<Channel>,
    disk: d1::disk_client::DiskClient<Channel>,
    vol: v1::volume_client::VolumeClient<Channel>,
    smb: s1::smb_client::SmbClient<Channel>,
    iscsi: i2::iscsi_client::IscsiClient<Channel>,
    system: y1::system_client::SystemClient<Channel>,
}

impl Driver {
    async fn at(c: &Connector) -> Driver {
        Driver {
            fs: f1::filesystem_client::FilesystemClient::new(
                c.channel("filesystem", "v1").await.unwrap(),
            ),
            disk: d1::disk_client::DiskClient::new(c.channel("disk", "v1").await.unwrap()),
            vol: v1::volume_client::VolumeClient::new(c.channel("volume", "v1").await.unwrap()),
            smb: s1::smb_client::SmbClient::new(c.channel("smb", "v1").await.unwrap()),
            iscsi: i2::iscsi_client::IscsiClient::new(
                c.channel("iscsi", "v1alpha2").await.unwrap(),
            ),
            system: y1::system_client::SystemClient::new(
                c.channel("system", "v1alpha1").await.unwrap(),
            ),
        }
    }

    /// The block drivers' NodeStage ([`common::stage_disk`]). Returns the volume ID.
    async fn stage(&mut self, disk: u32, staging: &str) -> String {
        common::stage_disk(&mut self.disk, &mut self.vol, &mut self.fs, disk, staging).await
    }

    /// NewSmbGlobalMapping of the share with its link at `local`, whose parent the driver makes
    /// first (as csi-driver-smb does).
    async fn map(&mut self, local: &str, user: &str, password: &str) -> Result<(), tonic::Status> {
        let parent = &local[..local.rfind('\\').unwrap()];
        self.fs
            .mkdir(f1::MkdirRequest {
                path: parent.into(),
            })
            .await?;
        self.smb
            .new_smb_global_mapping(s1::NewSmbGlobalMappingRequest {
                remote_path: SHARE.into(),
                local_path: local.into(),
                username: user.into(),
                password: password.into(),
            })
            .await
            .map(drop)
    }

    async fn unmap(&mut self) -> Result<(), tonic::Status> {
        self.smb
            .remove_smb_global_mapping(s1::RemoveSmbGlobalMappingRequest {
                remote_path: SHARE.into(),
            })
            .await
            .map(drop)
    }

    async fn portals(&mut self) -> Vec<(String, u32)> {
        self.iscsi
            .list_target_portals(i2::ListTargetPortalsRequest {})
            .await
            .unwrap()
            .into_inner()
            .target_portals
            .into_iter()
            .map(|p| (p.target_address, p.target_port))
            .collect()
    }

    async fn online(&mut self, disk: u32) -> bool {
        self.disk
            .get_disk_state(d1::GetDiskStateRequest { disk_number: disk })
            .await
            .unwrap()
            .into_inner()
            .is_online
    }
}

fn portal() -> Option<i2::TargetPortal> {
    Some(i2::TargetPortal {
        target_address: PORTAL.into(),
        target_port: 3260,
    })
}

/// The daemon over one simulated Windows, serving profile A (every group) and profile B
/// (no system group) each at its own socket directory.
struct World {
    sim: Arc<SimWindows>,
    a: Connector,
    b: Connector,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn world() -> World {
    let sim = Arc::new(SimWindows::new());
    sim.set_arrival_delay(Duration::from_secs(2));
    // Kubelet makes the staging root before any driver's call; a profile makes nothing
    // outside its own directories (its Mkdir of a missing ancestor above them is refused).
    sim.mkdir(&k(r"plugins\kubernetes.io\csi"));
    let dir = tempfile::tempdir().unwrap();
    let services = common::sim_services(&sim, KUBELET, &dir.path().join("state"));
    let scopes = common::sim_scopes(
        &services,
        KUBELET,
        vec![
            Profile {
                driver: A.into(),
                groups: Group::ALL.to_vec(),
                paths: vec![],
            },
            Profile {
                driver: B.into(),
                groups: Group::ALL
                    .into_iter()
                    .filter(|g| *g != Group::System)
                    .collect(),
                paths: vec![k(r"b-extra")],
            },
        ],
    );
    let (da, db) = (dir.path().join("a"), dir.path().join("b"));
    let mut endpoints = Vec::new();
    for (scope, at) in scopes.into_iter().zip([&da, &db]) {
        std::fs::create_dir_all(at).unwrap();
        endpoints.extend(registry::endpoints_at(
            &services.scoped(scope),
            &Place::Dir(at.clone()),
        ));
    }
    let (serving, ready, stop) = daemon::serve_in_dir(endpoints, dir.path().join("run"));
    tokio::spawn(serving);
    ready.await.expect("the daemon serves");
    World {
        sim,
        a: Connector::SocketDir(da),
        b: Connector::SocketDir(db),
        stop: Some(stop),
        _dir: dir,
    }
}

/// `r` is PERMISSION_DENIED naming profile B and, when given, the owner profile; otherwise
/// what went wrong is added to `leaks` (every one of B's attempts is made and reported).
fn refused<T: std::fmt::Debug>(
    leaks: &mut Vec<String>,
    what: &str,
    r: Result<T, tonic::Status>,
    owner: Option<&str>,
) {
    let e = match r {
        Ok(v) => return leaks.push(format!("{what}: B's call went through: {v:?}")),
        Err(e) => e,
    };
    eprintln!("{what}: {:?}: {}", e.code(), e.message());
    let named = |p: &str| e.message().contains(&format!("{p:?}"));
    if e.code() != tonic::Code::PermissionDenied || !named(B) || owner.is_some_and(|o| !named(o)) {
        leaks.push(format!(
            "{what}: not PERMISSION_DENIED naming profile {B:?}{}: {:?}: {}",
            owner
                .map(|o| format!(" and the owner {o:?}"))
                .unwrap_or_default(),
            e.code(),
            e.message()
        ));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_profile_cannot_touch_another_profiles_objects() {
    let w = world().await;
    let disk_a = w.sim.add_disk(8 * GIB, 1);
    let disk_b = w.sim.add_disk(4 * GIB, 2);
    let lun = w.sim.add_disk(2 * GIB, 3);
    // The server takes any credentials: a mapping with other ones would replace A's.
    w.sim.add_share(SHARE, None);
    w.sim.add_iscsi_target(PORTAL, 3260, IQN, &[lun], None);
    let mut a = Driver::at(&w.a).await;
    let mut b = Driver::at(&w.b).await;

    // A stages a volume, maps the share and logs in to the target.
    let staging_a = plugin(A, r"h1\globalmount");
    let vol_a = a.stage(disk_a, &staging_a).await;
    let smb_link_a = plugin(A, r"smb1\globalmount");
    a.map(&smb_link_a, r"EXAMPLE\svc", "s3cret").await.unwrap();
    a.iscsi
        .add_target_portal(i2::AddTargetPortalRequest {
            target_portal: portal(),
        })
        .await
        .unwrap();
    a.iscsi
        .connect_target(i2::ConnectTargetRequest {
            target_portal: portal(),
            iqn: IQN.into(),
            auth_type: i2::AuthenticationType::None as i32,
            chap_username: String::new(),
            chap_secret: String::new(),
        })
        .await
        .unwrap();

    let before = snapshot(&w.sim, &vol_a, disk_a);
    assert!(
        before
            .mounts
            .iter()
            .any(
                |(m, id)| m.trim_end_matches('\\').eq_ignore_ascii_case(&staging_a) && *id == vol_a
            ),
        "A's volume is mounted at its staging path: {:?}",
        before.mounts
    );
    assert_eq!(before.smb, [SHARE]);
    assert_eq!(before.sessions, 1);

    // B, on its own endpoints, against every one of A's objects.
    let mut leaks = Vec::new();
    refused(
        &mut leaks,
        "Rmdir of A's staging path",
        b.fs.rmdir(f1::RmdirRequest {
            path: staging_a.clone(),
            force: true,
        })
        .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "UnmountVolume of A's volume at A's path",
        b.vol
            .unmount_volume(v1::UnmountVolumeRequest {
                volume_id: vol_a.clone(),
                target_path: staging_a.clone(),
            })
            .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "FormatVolume of A's volume",
        b.vol
            .format_volume(v1::FormatVolumeRequest {
                volume_id: vol_a.clone(),
            })
            .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "ResizeVolume of A's volume",
        b.vol
            .resize_volume(v1::ResizeVolumeRequest {
                volume_id: vol_a.clone(),
                size_bytes: 0,
            })
            .await,
        Some(A),
    );
    let into_b = plugin(B, r"stolen\globalmount");
    b.fs.mkdir(f1::MkdirRequest {
        path: into_b.clone(),
    })
    .await
    .unwrap();
    refused(
        &mut leaks,
        "MountVolume of A's volume into B's directory",
        b.vol
            .mount_volume(v1::MountVolumeRequest {
                volume_id: vol_a.clone(),
                target_path: into_b.clone(),
            })
            .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "PartitionDisk of A's disk",
        b.disk
            .partition_disk(d1::PartitionDiskRequest {
                disk_number: disk_a,
            })
            .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "SetDiskState(offline) of A's disk",
        b.disk
            .set_disk_state(d1::SetDiskStateRequest {
                disk_number: disk_a,
                is_online: false,
            })
            .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "NewSmbGlobalMapping of A's share with other credentials",
        b.map(
            &plugin(B, r"smb1\globalmount"),
            r"EXAMPLE\other",
            "different",
        )
        .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "RemoveSmbGlobalMapping of A's mapping",
        b.unmap().await,
        Some(A),
    );
    let listed = b.portals().await;
    if !listed.is_empty() {
        leaks.push(format!("ListTargetPortals shows B A's portal: {listed:?}"));
    }
    refused(
        &mut leaks,
        "DisconnectTarget of A's session",
        b.iscsi
            .disconnect_target(i2::DisconnectTargetRequest {
                target_portal: portal(),
                iqn: IQN.into(),
            })
            .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "ConnectTarget to A's session",
        b.iscsi
            .connect_target(i2::ConnectTargetRequest {
                target_portal: portal(),
                iqn: IQN.into(),
                auth_type: i2::AuthenticationType::None as i32,
                chap_username: String::new(),
                chap_secret: String::new(),
            })
            .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "RemoveTargetPortal of A's portal",
        b.iscsi
            .remove_target_portal(i2::RemoveTargetPortalRequest {
                target_portal: portal(),
            })
            .await,
        Some(A),
    );
    b.fs.mkdir(f1::MkdirRequest {
        path: plugin(B, "pub1"),
    })
    .await
    .unwrap();
    refused(
        &mut leaks,
        "CreateSymlink from A's staging path",
        b.fs.create_symlink(f1::CreateSymlinkRequest {
            source_path: staging_a.clone(),
            target_path: plugin(B, r"pub1\mount"),
        })
        .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "GetBIOSSerialNumber (a group B does not list)",
        b.system
            .get_bios_serial_number(y1::GetBiosSerialNumberRequest {})
            .await,
        None,
    );
    assert!(
        leaks.is_empty(),
        "B reached A's objects:\n{}",
        leaks.join("\n")
    );

    // A's objects are as they were.
    let after = snapshot(&w.sim, &vol_a, disk_a);
    assert_eq!(after, before, "A's objects are unchanged");
    assert!(a.online(disk_a).await, "A's disk is still online");
    assert_eq!(a.portals().await, [(PORTAL.to_string(), 3260)]);
    assert!(
        !w.sim.entry_exists(&plugin(B, r"pub1\mount")),
        "no link of B's leads to A's staging path"
    );

    // B's own flow: its own disk in its own directory.
    let staging_b = plugin(B, r"h2\globalmount");
    let vol_b = b.stage(disk_b, &staging_b).await;
    assert!(
        w.sim
            .mount_points()
            .iter()
            .any(
                |(m, id)| m.trim_end_matches('\\').eq_ignore_ascii_case(&staging_b) && *id == vol_b
            ),
        "B's volume is mounted at B's staging path"
    );
    // B joins A's mapping with the same credentials, then lets it go: kept for A.
    let smb_link_b = plugin(B, r"smb1\globalmount");
    b.map(&smb_link_b, r"EXAMPLE\svc", "s3cret").await.unwrap();
    assert_eq!(w.sim.smb_roots(), [SHARE]);
    b.unmap().await.unwrap();
    assert_eq!(w.sim.smb_roots(), [SHARE], "kept for A, who still holds it");
    // B's unstage goes on as csi-driver-smb's does: its staging link is removed next.
    b.fs.rmdir(f1::RmdirRequest {
        path: smb_link_b.clone(),
        force: true,
    })
    .await
    .unwrap();
    assert!(!w.sim.entry_exists(&smb_link_b));
    assert!(w.sim.entry_exists(&smb_link_a), "A's link stays");
    // A's removal afterwards removes it.
    a.unmap().await.unwrap();
    assert!(
        w.sim.smb_roots().is_empty(),
        "A, the last holder, removed it: {:?}",
        w.sim.smb_roots()
    );
    // A's own session and portal are still A's to end.
    a.iscsi
        .disconnect_target(i2::DisconnectTargetRequest {
            target_portal: portal(),
            iqn: IQN.into(),
        })
        .await
        .unwrap();
    assert_eq!(w.sim.iscsi_sessions(), 0);
    a.iscsi
        .remove_target_portal(i2::RemoveTargetPortalRequest {
            target_portal: portal(),
        })
        .await
        .unwrap();
    assert!(a.portals().await.is_empty());
}

/// What of A's the machine shows: every mount point, the filesystem on A's volume (its serial
/// changes if it were formatted again, its size if resized), A's disk's partitions, the SMB
/// mappings and the iSCSI sessions.
#[derive(Debug, PartialEq)]
struct Snapshot {
    mounts: Vec<(String, String)>,
    filesystem: Option<(String, u64)>,
    serial: Option<u32>,
    partitions: Vec<(u32, u64, u64)>,
    smb: Vec<String>,
    sessions: usize,
}

fn snapshot(sim: &SimWindows, vol: &str, disk: u32) -> Snapshot {
    Snapshot {
        mounts: sim.mount_points(),
        filesystem: sim.filesystem_of(vol),
        serial: sim.filesystem_serial(vol),
        partitions: sim
            .partitions(disk)
            .into_iter()
            .map(|(n, off, len, _)| (n, off, len))
            .collect(),
        smb: sim.smb_roots(),
        sessions: sim.iscsi_sessions(),
    }
}

/// A per-volume directory kubelet made for A's volume (its record `vol_data.json` there) is
/// never B's: B's Mkdir and CreateSymlink of a publish target in it are refused, naming B,
/// and nothing is made there. (The record here is empty, which names no driver: the refusal
/// holds as it does for a record naming A.)
#[tokio::test(flavor = "multi_thread")]
async fn a_per_volume_directory_of_another_driver_is_refused() {
    let w = world().await;
    let dir = k(r"pods\uid-a\volumes\kubernetes.io~csi\pv-a");
    w.sim.mkdir(&dir);
    w.sim.add_file(&format!(r"{dir}\vol_data.json"));
    let mut b = Driver::at(&w.b).await;
    let target = format!(r"{dir}\mount");
    let mut leaks = Vec::new();
    refused(
        &mut leaks,
        "Mkdir in A's per-volume directory",
        b.fs.mkdir(f1::MkdirRequest {
            path: target.clone(),
        })
        .await,
        None,
    );
    b.fs.mkdir(f1::MkdirRequest {
        path: plugin(B, r"h9\globalmount"),
    })
    .await
    .unwrap();
    refused(
        &mut leaks,
        "CreateSymlink into A's per-volume directory",
        b.fs.create_symlink(f1::CreateSymlinkRequest {
            source_path: plugin(B, r"h9\globalmount"),
            target_path: target.clone(),
        })
        .await,
        None,
    );
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
    assert!(!w.sim.entry_exists(&target), "nothing was made there");
}

/// kubelet's per-volume directory of a pod's volume, and its record naming `driver`.
fn pod_volume(w: &World, uid: &str, pv: &str, driver: &str) -> String {
    let dir = k(&format!(r"pods\{uid}\volumes\kubernetes.io~csi\{pv}"));
    w.sim.mkdir(&dir);
    record(w, &dir, driver);
    dir
}

/// kubelet (re)writes its record of the volume's driver in `dir`.
fn record(w: &World, dir: &str, driver: &str) {
    w.sim.put_file(
        &format!(r"{dir}\vol_data.json"),
        format!(r#"{{"driverName":"{driver}","specVolID":"pv1"}}"#).as_bytes(),
    );
}

/// A's publish into a pod's volume directory whose record kubelet wrote for A's driver
/// succeeds: the directory becomes A's. B is refused there (naming A, its owner) even after the
/// record is rewritten to name B's driver; the first claim holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_volume_recorded_for_a_is_claimed_by_a_and_stays_a_s() {
    let w = world().await;
    let mut a = Driver::at(&w.a).await;
    let mut b = Driver::at(&w.b).await;
    let staging_a = plugin(A, r"h1\globalmount");
    a.fs.mkdir(f1::MkdirRequest {
        path: staging_a.clone(),
    })
    .await
    .unwrap();
    let dir = pod_volume(&w, "u1", "pv1", A);
    let target = format!(r"{dir}\mount");
    a.fs.create_symlink(f1::CreateSymlinkRequest {
        source_path: staging_a.clone(),
        target_path: target.clone(),
    })
    .await
    .expect("A publishes where kubelet recorded its driver");
    assert!(w.sim.entry_exists(&target));

    record(&w, &dir, B);
    let staging_b = plugin(B, r"h2\globalmount");
    b.fs.mkdir(f1::MkdirRequest {
        path: staging_b.clone(),
    })
    .await
    .unwrap();
    let mut leaks = Vec::new();
    refused(
        &mut leaks,
        "Rmdir of A's publish path",
        b.fs.rmdir(f1::RmdirRequest {
            path: target.clone(),
            force: true,
        })
        .await,
        Some(A),
    );
    refused(
        &mut leaks,
        "CreateSymlink in A's claimed directory",
        b.fs.create_symlink(f1::CreateSymlinkRequest {
            source_path: staging_b.clone(),
            target_path: format!(r"{dir}\other"),
        })
        .await,
        Some(A),
    );
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
    assert!(w.sim.entry_exists(&target), "A's link stays");
    assert!(!w.sim.entry_exists(&format!(r"{dir}\other")));
    // A still holds it, whatever the record says now.
    a.fs.rmdir(f1::RmdirRequest {
        path: target.clone(),
        force: true,
    })
    .await
    .expect("A unpublishes");
}

/// A record that is a link (here to a directory holding a record naming A) or a directory is
/// never read as kubelet's: A's publish into such a directory is refused and nothing is made.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_that_is_a_link_or_a_directory_is_refused() {
    let w = world().await;
    let mut a = Driver::at(&w.a).await;
    let staging_a = plugin(A, r"h1\globalmount");
    a.fs.mkdir(f1::MkdirRequest {
        path: staging_a.clone(),
    })
    .await
    .unwrap();
    // Elsewhere, a record naming A (as a pod could write in its own emptyDir).
    let decoy = k(r"pods\u9\volumes\kubernetes.io~empty-dir\x");
    w.sim.mkdir(&decoy);
    record(&w, &decoy, A);

    let linked = k(r"pods\u1\volumes\kubernetes.io~csi\pv-link");
    w.sim.mkdir(&linked);
    w.sim
        .add_dir_link(&format!(r"{linked}\vol_data.json"), &decoy);
    let directory = k(r"pods\u2\volumes\kubernetes.io~csi\pv-dir");
    w.sim.mkdir(&format!(r"{directory}\vol_data.json"));

    // Refused for the profile, naming the record and why it is not one kubelet wrote.
    for (dir, why) in [
        (&linked, "is a link or another reparse point; not followed"),
        (&directory, "is a directory, not a file"),
    ] {
        let target = format!(r"{dir}\mount");
        let e =
            a.fs.create_symlink(f1::CreateSymlinkRequest {
                source_path: staging_a.clone(),
                target_path: target.clone(),
            })
            .await
            .expect_err("the record is no file kubelet wrote");
        eprintln!("{dir}: {:?}: {}", e.code(), e.message());
        assert_eq!(
            e.code(),
            tonic::Code::PermissionDenied,
            "{dir}: {}",
            e.message()
        );
        assert!(
            e.message().contains("kubelet's record \"vol_data.json\"")
                && e.message().contains(why)
                && e.message().contains("profile \"a.csi\""),
            "{dir}: {:?}: {}",
            e.code(),
            e.message()
        );
        assert!(!w.sim.entry_exists(&target), "nothing was made in {dir}");
    }
}
