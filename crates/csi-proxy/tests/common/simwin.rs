//! The daemon over one simulated Windows machine (`csi_proxy_host::windows::sim`), on Unix
//! sockets in a temp dir: every Windows host (the filesystem one too) over the same simulator,
//! so a driver's whole node sequence sees one machine. Needs nothing from the host.

use super::Node;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
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

pub const GIB: u64 = 1 << 30;
pub const KUBELET: &str = r"C:\var\lib\kubelet";

/// The daemon serving the Windows hosts over one simulated machine, on Unix sockets.
pub struct SimDaemon {
    pub sim: Arc<SimWindows>,
    pub connector: csi_proxy_client::Connector,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl SimDaemon {
    pub async fn start() -> SimDaemon {
        let sim = Arc::new(SimWindows::new());
        sim.set_arrival_delay(Duration::from_secs(2));
        sim.mkdir(KUBELET);
        let dir = tempfile::tempdir().unwrap();
        // The daemon prepares its state dir at start-up; the hosts write inside it only.
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
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

    pub async fn node(&self) -> Node {
        Node::new(&self.connector, true).await
    }

    pub fn k(rel: &str) -> String {
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
