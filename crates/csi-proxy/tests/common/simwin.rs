//! The daemon over one simulated Windows machine (`csi_proxy_host::windows::sim`), on Unix
//! sockets in a temp dir: every Windows host (the filesystem one too) over the same simulator,
//! so a driver's whole node sequence sees one machine. Needs nothing from the host.

use super::Node;
use csi_proxy_core::filesystem::{FilesystemService, VolDataFromHost};
use csi_proxy_core::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
use csi_proxy_core::profiles::owners::Owners;
use csi_proxy_core::profiles::{Group, Profile, Profiles};
use csi_proxy_host::windows::disk::WindowsDiskHost;
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::iscsi::WindowsIscsiHost;
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::smb::WindowsSmbHost;
use csi_proxy_host::windows::system::WindowsSystemHost;
use csi_proxy_host::windows::volume::WindowsVolumeHost;
use csi_proxy_server::daemon::{self, Place};
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

/// The groups a driver's profile lists (docs/install.md's profiles example).
pub fn profile_groups(driver: &str) -> Vec<Group> {
    use Group::*;
    match driver {
        "ebs.csi.aws.com" | "disk.csi.azure.com" | "pd.csi.storage.gke.io" => {
            vec![Filesystem, Disk, Volume]
        }
        "csi.vsphere.vmware.com" => vec![Filesystem, Disk, Volume, System],
        "smb.csi.k8s.io" | "file.csi.azure.com" => vec![Filesystem, Smb],
        other => panic!("no profile example for driver {other:?}"),
    }
}

impl SimDaemon {
    pub async fn start() -> SimDaemon {
        Self::serving(|_, _| true).await
    }

    /// The daemon serving only the endpoints `serve(group, version)` keeps: a node where the
    /// newer versions are absent (an older csi-proxy), for the drivers' fallbacks.
    pub async fn serving(serve: impl Fn(&str, &str) -> bool) -> SimDaemon {
        Self::serving_as(None, serve).await
    }

    /// As [`SimDaemon::start`]; with `profile`, the daemon serves only that driver's profile
    /// (its groups as [`profile_groups`]), at the socket directory the driver's clients dial.
    pub async fn start_as(profile: Option<&str>) -> SimDaemon {
        Self::serving_as(profile, |_, _| true).await
    }

    /// As [`SimDaemon::serving`], under `profile` when given (see [`SimDaemon::start_as`]).
    pub async fn serving_as(
        profile: Option<&str>,
        serve: impl Fn(&str, &str) -> bool,
    ) -> SimDaemon {
        let sim = Arc::new(SimWindows::new());
        sim.set_arrival_delay(Duration::from_secs(2));
        sim.mkdir(KUBELET);
        let dir = tempfile::tempdir().unwrap();
        // Every Windows host, over the one simulated machine.
        let s = super::sim_services(&sim, KUBELET, &dir.path().join("state"));
        let sockets = dir.path().join("run");
        let endpoints = match profile {
            None => registry::endpoints(&s),
            Some(driver) => {
                let profile = Profile {
                    driver: driver.into(),
                    groups: profile_groups(driver),
                    paths: vec![],
                };
                let scope = super::sim_scopes(&s, KUBELET, vec![profile]).remove(0);
                registry::endpoints_at(&s.scoped(scope), &Place::Dir(sockets.clone()))
            }
        };
        let (serving, ready, stop) = daemon::serve_in_dir(
            endpoints
                .into_iter()
                .filter(|e| serve(e.group, e.version))
                .collect(),
            sockets.clone(),
        );
        tokio::spawn(serving);
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

    /// The machine as a driver's container on it sees it.
    pub fn host(&self) -> Arc<dyn super::NodeHost> {
        Arc::new(SimHost(self.sim.clone()))
    }

    pub fn k(rel: &str) -> String {
        format!(r"{KUBELET}\{rel}")
    }

    /// What kubelet does before NodeStageVolume and NodePublishVolume for a volume of
    /// `driver`: it makes the directory `path` (the staging or publish path, in any form
    /// kubelet hands it) lies in, and writes its record of the volume's driver there
    /// (`vol_data.json`). Returns that directory, normalised.
    pub fn kubelet_volume(&self, path: &str, driver: &str) -> String {
        let p = super::normalize_windows_path(path);
        let dir = p[..p.rfind('\\').unwrap()].to_string();
        self.sim.mkdir(&dir);
        self.sim.put_file(
            &format!(r"{dir}\vol_data.json"),
            format!(r#"{{"driverName":"{driver}","specVolID":"pvc-1"}}"#).as_bytes(),
        );
        dir
    }
}

/// What the driver's own container reaches at `path` through its bind mount of the kubelet
/// directory (`os.Open`, `ReadDir`, `GetDiskFreeSpaceEx`): every link on the way followed, as
/// Windows follows them; `None` when nothing is there.
pub fn container_open(sim: &Arc<SimWindows>, path: &str) -> Option<String> {
    let fs = WindowsFilesystemHost::with_os(sim.clone());
    let mut p = super::normalize_windows_path(path);
    for _ in 0..8 {
        match fs.link_target(&p) {
            Ok(Some(LinkTarget::Path(t))) => p = t,
            _ => break,
        }
    }
    sim.entry_exists(&p).then_some(p)
}

/// The volume and filesystem size `GetDiskFreeSpaceEx` in the driver's container reports at
/// `path`: the volume mounted where its links lead.
pub fn container_volume(sim: &Arc<SimWindows>, path: &str) -> Option<(String, u64)> {
    let p = container_open(sim, path)?;
    let (_, id) = sim.mount_points().into_iter().find(|(m, _)| {
        m.trim_end_matches('\\')
            .eq_ignore_ascii_case(p.trim_end_matches('\\'))
    })?;
    let size = sim.filesystem_of(&id)?.1;
    Some((id, size))
}

impl Drop for SimDaemon {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The simulated Windows as a driver's container sees it, paths normalised as the drivers do.
pub struct SimHost(pub Arc<SimWindows>);

impl super::NodeHost for SimHost {
    fn norm(&self, path: &str) -> String {
        super::normalize_windows_path(path)
    }

    fn opens(&self, path: &str) -> bool {
        container_open(&self.0, path).is_some()
    }

    fn is_link(&self, path: &str) -> bool {
        let fs = WindowsFilesystemHost::with_os(self.0.clone());
        matches!(
            fs.link_target(&super::normalize_windows_path(path)),
            Ok(Some(_))
        )
    }

    fn fs_size(&self, path: &str) -> Option<u64> {
        container_volume(&self.0, path).map(|(_, size)| size)
    }
}
