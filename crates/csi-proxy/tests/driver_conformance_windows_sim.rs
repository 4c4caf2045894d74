//! Driver conformance, Windows path forms: the same node call sequences as
//! `driver_conformance.rs`, through the daemon's v1 gRPC endpoints, with the Windows disk and
//! volume hosts running over the simulated Windows (`csi_proxy_host::windows::sim`): disks
//! found by serial and by LUN, volumes that appear 2 s after the layout write (virtual time),
//! drive-letter paths and the rooted `\var\lib\kubelet\…` form kubelet hands drivers.
//!
//! The filesystem group runs over the simulator's directory tree (the real Windows filesystem
//! host is tested under wine), so the whole sequence sees one machine. Needs nothing from the
//! host: no root, no loop devices.
#![cfg(unix)]

mod common;

use common::{EBS_NOT_MOUNTED, Node};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::smb::v1 as s1;
use csi_proxy_api::volume::v1;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
use csi_proxy_host::windows::disk::WindowsDiskHost;
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::iscsi::WindowsIscsiHost;
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::smb::WindowsSmbHost;
use csi_proxy_host::windows::system::WindowsSystemHost;
use csi_proxy_host::windows::volume::WindowsVolumeHost;
use csi_proxy_server::daemon::{self, Listen};
use csi_proxy_server::registry::{self, Hosts, Services};
use std::sync::Arc;
use std::time::Duration;

const GIB: u64 = 1 << 30;
const KUBELET: &str = r"C:\var\lib\kubelet";

/// The daemon serving the Windows hosts over one simulated machine, on Unix sockets.
struct SimDaemon {
    sim: Arc<SimWindows>,
    connector: csi_proxy_client::Connector,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl SimDaemon {
    async fn start() -> SimDaemon {
        let sim = Arc::new(SimWindows::new());
        sim.set_arrival_delay(Duration::from_secs(2));
        sim.mkdir(KUBELET);
        let dir = tempfile::tempdir().unwrap();
        let policy = Arc::new(PathPolicy::new(PathStyle::Windows, KUBELET, &[]).unwrap());
        // Every Windows host, over the one simulated machine.
        let fs = FilesystemService::new(
            Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
            policy,
        );
        let hosts = Hosts {
            disk: Arc::new(WindowsDiskHost::with_os(sim.clone())),
            volume: Arc::new(WindowsVolumeHost::with_os(
                sim.clone(),
                dir.path().join("state"),
            )),
            smb: Arc::new(WindowsSmbHost::with_os(sim.clone())),
            system: Arc::new(WindowsSystemHost::with_os(sim.clone())),
            iscsi: Arc::new(WindowsIscsiHost::with_os(sim.clone())),
        };
        let s = Services::new(fs, hosts, true);
        let sockets = dir.path().join("run");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(daemon::serve_and_tell(
            registry::endpoints(&s),
            Listen::Unix {
                dir: sockets.clone(),
                gid: None,
            },
            move || {
                let _ = ready_tx.send(());
            },
            async move {
                let _ = stopped.await;
            },
        ));
        // Every endpoint is bound and served once the daemon says so.
        ready.await.expect("the daemon serves");
        SimDaemon {
            sim,
            connector: csi_proxy_client::Connector::SocketDir(sockets),
            stop: Some(stop),
            _dir: dir,
        }
    }

    async fn node(&self) -> Node {
        Node::new(&self.connector, true).await
    }

    fn k(rel: &str) -> String {
        format!(r"{KUBELET}\{rel}")
    }
}

impl Drop for SimDaemon {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// aws-ebs and gce-pd through a whole volume life in drive-letter paths, every node operation
/// twice, on a disk whose volume arrives 2 s after PartitionDisk's layout write.
#[tokio::test(flavor = "multi_thread")]
async fn ebs_and_pd_node_operations_each_twice() {
    let d = SimDaemon::start().await;
    let mut node = d.node().await;
    let disk = d.sim.add_disk(10 * GIB, 0);
    let serial = format!("SIM{disk:04}");
    let staging = SimDaemon::k(r"plugins\kubernetes.io\csi\ebs.csi.aws.com\abc\globalmount");
    let target = SimDaemon::k(r"pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount");
    d.sim
        .mkdir(&SimDaemon::k(r"pods\uid-1\volumes\kubernetes.io~csi\pvc-1"));

    // Unstage of a volume never staged is done at once (the driver reads "not mounted").
    node.unstage(&staging).await;

    let id = node.stage(&serial, &staging).await;
    assert_eq!(node.stage(&serial, &staging).await, id);
    assert_eq!(d.sim.filesystem_of(&id).unwrap().0, "NTFS");

    node.publish(&staging, &target).await;
    node.publish(&staging, &target).await;
    let linked = node
        .fs
        .is_symlink(f1::IsSymlinkRequest {
            path: target.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .is_symlink;
    assert!(linked);

    let before = node.expand_and_stats(&target).await;
    d.sim.grow_disk(disk, 20 * GIB);
    node.disk.rescan(d1::RescanRequest {}).await.unwrap();
    let grown = node.expand_and_stats(&target).await;
    assert!(grown > before + 9 * GIB as i64, "{before} -> {grown}");
    assert_eq!(node.expand_and_stats(&target).await, grown);

    node.rmdir(&target).await;
    node.rmdir(&target).await;
    assert!(!node.path_exists(&target).await);

    node.unstage(&staging).await;
    node.unstage(&staging).await;
    assert!(!node.path_exists(&staging).await);
    let online = node
        .disk
        .get_disk_state(d1::GetDiskStateRequest { disk_number: disk })
        .await
        .unwrap()
        .into_inner()
        .is_online;
    assert!(!online, "unstage took the disk offline, as the drivers do");

    // Staged again: online, the same volume, already formatted (not formatted again).
    let formats = d.sim.calls()["format_ntfs"];
    assert_eq!(node.stage(&serial, &staging).await, id);
    assert_eq!(d.sim.calls()["format_ntfs"], formats);
    node.unstage(&staging).await;
}

/// gce-pd passes kubelet's rooted staging path (`\var\lib\kubelet\…`) unchanged to Mkdir,
/// MountVolume, IsSymlink and GetVolumeIDFromTargetPath; each resolves against the kubelet
/// path's drive.
#[tokio::test(flavor = "multi_thread")]
async fn pd_rooted_staging_paths_resolve_on_the_kubelet_drive() {
    let d = SimDaemon::start().await;
    let mut node = d.node().await;
    let disk = d.sim.add_disk(10 * GIB, 1);
    let rooted = r"\var\lib\kubelet\plugins\kubernetes.io\csi\pd.csi.storage.gke.io\x\globalmount";
    let id = node.stage(&format!("SIM{disk:04}"), rooted).await;
    assert_eq!(node.mounted_volume(rooted).await.unwrap(), Some(id.clone()));
    assert!(
        d.sim
            .mount_points()
            .iter()
            .any(|(p, v)| p.starts_with(r"C:\var\lib\kubelet\plugins") && *v == id),
        "{:?}",
        d.sim.mount_points()
    );
    let is_link = node
        .fs
        .is_symlink(f1::IsSymlinkRequest {
            path: rooted.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .is_symlink;
    assert!(
        is_link,
        "a mounted folder answers IsSymlink true, as upstream"
    );
    node.unstage(rooted).await;
    node.unstage(rooted).await;
    assert_eq!(node.mounted_volume(rooted).await.unwrap(), None);
}

/// azuredisk finds its disk by LUN (ListDiskLocations), stages, and unstages with a flush and
/// Rmdir of the staging mount point, twice; a volume named by a GUID path the mount manager no
/// longer lists first still unmounts.
#[tokio::test(flavor = "multi_thread")]
async fn azuredisk_by_lun_and_unstage_by_rmdir() {
    let d = SimDaemon::start().await;
    let mut node = d.node().await;
    let disk = d.sim.add_disk(10 * GIB, 7);
    d.sim.add_disk(10 * GIB, 8);
    let locations = node
        .disk
        .list_disk_locations(d1::ListDiskLocationsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_locations;
    let by_lun: Vec<u32> = locations
        .iter()
        .filter(|(_, l)| l.lunid == "7")
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(by_lun, [disk]);
    assert_eq!(locations[&disk].bus, "");

    let staging = SimDaemon::k(r"plugins\kubernetes.io\csi\disk.csi.azure.com\xyz\globalmount");
    let id = node.stage(&format!("SIM{disk:04}"), &staging).await;
    node.unstage_by_rmdir(&id, &staging).await;
    assert!(!node.path_exists(&staging).await);
    assert!(d.sim.mount_points().iter().all(|(_, v)| *v != id));

    // Staged again; the mount manager now lists another GUID path first.
    assert_eq!(node.stage(&format!("SIM{disk:04}"), &staging).await, id);
    let first = d.sim.add_volume_name(&id).unwrap();
    assert_eq!(node.mounted_volume(&staging).await.unwrap(), Some(first));
    node.vol
        .unmount_volume(v1::UnmountVolumeRequest {
            volume_id: id.clone(),
            target_path: staging.clone(),
        })
        .await
        .expect("the volume's older GUID path names the same volume");
    let e = node
        .vol
        .get_volume_id_from_target_path(v1::GetVolumeIdFromTargetPathRequest {
            target_path: staging.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains(EBS_NOT_MOUNTED), "{}", e.message());
}

/// csi-driver-smb (and azurefile) with its "remove the mapping at unmount" option, as its
/// Windows mounter calls the v1 endpoints.
struct SmbDriver {
    node: Node,
    smb: s1::smb_client::SmbClient<tonic::transport::Channel>,
    sim: Arc<SimWindows>,
}

impl SmbDriver {
    async fn new(d: &SimDaemon) -> SmbDriver {
        SmbDriver {
            node: d.node().await,
            smb: s1::smb_client::SmbClient::new(d.connector.channel("smb", "v1").await.unwrap()),
            sim: d.sim.clone(),
        }
    }

    /// NodeStage: already a link whose target answers → done; else the parent directory is
    /// made if missing and the mapping is made with the staging path as its local link.
    async fn stage(&mut self, remote: &str, staging: &str, user: &str, password: &str) {
        if self.node.path_exists(staging).await && self.is_symlink(staging).await {
            return;
        }
        let parent = &staging[..staging.rfind('\\').unwrap()];
        if !self.node.path_exists(parent).await {
            self.node
                .fs
                .mkdir(f1::MkdirRequest {
                    path: parent.into(),
                })
                .await
                .unwrap();
        }
        self.smb
            .new_smb_global_mapping(s1::NewSmbGlobalMappingRequest {
                remote_path: remote.trim_end_matches('\\').into(),
                local_path: staging.into(),
                username: user.into(),
                password: password.into(),
            })
            .await
            .unwrap();
    }

    async fn is_symlink(&mut self, path: &str) -> bool {
        self.node
            .fs
            .is_symlink(f1::IsSymlinkRequest { path: path.into() })
            .await
            .unwrap()
            .into_inner()
            .is_symlink
    }

    /// NodeUnstage: the remote path is read from the staging link on the node (the driver's
    /// own readlink); when there is one, the mapping is removed first (an error fails the
    /// unstage), then the staging link is removed.
    async fn unstage(&mut self, staging: &str) -> Result<(), tonic::Status> {
        let node_fs = WindowsFilesystemHost::with_os(self.sim.clone());
        if let Ok(Some(LinkTarget::Path(remote))) = node_fs.link_target(staging) {
            self.smb
                .remove_smb_global_mapping(s1::RemoveSmbGlobalMappingRequest {
                    remote_path: remote.trim_end_matches('\\').into(),
                })
                .await?;
        }
        self.node.rmdir(staging).await;
        Ok(())
    }
}

/// csi-driver-smb through a volume life, each operation twice: stage (the mapping and its
/// link), publish (a link to the staging link), unpublish, unstage (mapping removed before the
/// staging link, the driver's order); a second volume on the same share with other credentials
/// reuses the healthy mapping and keeps it while its link lives.
#[tokio::test(flavor = "multi_thread")]
async fn smb_node_operations_each_twice() {
    let d = SimDaemon::start().await;
    let mut drv = SmbDriver::new(&d).await;
    d.sim
        .add_share(r"\\files.example\vols", Some(("svc", "s3cret")));
    let remote = r"\\files.example\vols\pvc-1";
    let staging = SimDaemon::k(r"plugins\kubernetes.io\csi\smb.csi.k8s.io\h1\globalmount");
    let target = SimDaemon::k(r"pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount");
    d.sim
        .mkdir(&SimDaemon::k(r"pods\uid-1\volumes\kubernetes.io~csi\pvc-1"));

    // Unstage of a volume never staged: nothing to read, nothing to remove.
    drv.unstage(&staging).await.unwrap();

    drv.stage(remote, &staging, "svc", "s3cret").await;
    drv.stage(remote, &staging, "svc", "s3cret").await;
    assert_eq!(d.sim.smb_roots(), [r"\\files.example\vols"]);
    assert!(drv.is_symlink(&staging).await);

    drv.node.publish(&staging, &target).await;
    drv.node.publish(&staging, &target).await;
    assert!(drv.is_symlink(&target).await);

    // A second volume on the same share, with a rotated secret the server also takes: the
    // healthy mapping is reused, not replaced under the first volume.
    let staging2 = SimDaemon::k(r"plugins\kubernetes.io\csi\smb.csi.k8s.io\h2\globalmount");
    drv.stage(r"\\files.example\vols\pvc-2", &staging2, "svc", "rotated")
        .await;
    assert_eq!(d.sim.calls()["smb_create_global_mapping"], 1);
    assert!(
        drv.is_symlink(&staging).await,
        "the first volume's link still answers"
    );

    drv.node.rmdir(&target).await;
    drv.node.rmdir(&target).await;
    assert!(!drv.node.path_exists(&target).await);

    // The first volume unstages: the second volume's link keeps the mapping.
    drv.unstage(&staging).await.unwrap();
    drv.unstage(&staging).await.unwrap();
    assert!(!drv.node.path_exists(&staging).await);
    assert_eq!(d.sim.smb_roots().len(), 1, "kept for the other volume");
    assert!(drv.is_symlink(&staging2).await);

    // The last volume unstages in the driver's order: the mapping goes.
    drv.unstage(&staging2).await.unwrap();
    drv.unstage(&staging2).await.unwrap();
    assert!(d.sim.smb_roots().is_empty(), "{:?}", d.sim.smb_roots());
    assert!(!drv.node.path_exists(&staging2).await);
}
