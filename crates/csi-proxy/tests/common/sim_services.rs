//! Every Windows host over one simulated machine, as the daemon's services, and profiles over
//! them: shared by the tests that serve a simulated Windows (`common/simwin.rs`,
//! `profiles_windows_sim.rs`) and the simulation's profiles world, which includes this file
//! by path.

use csi_proxy_core::filesystem::{FilesystemService, VolDataFromHost};
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::profiles::owners::Owners;
use csi_proxy_core::profiles::{Profile, Profiles, Scope};
use csi_proxy_host::windows::disk::WindowsDiskHost;
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::iscsi::WindowsIscsiHost;
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::smb::WindowsSmbHost;
use csi_proxy_host::windows::system::WindowsSystemHost;
use csi_proxy_host::windows::volume::WindowsVolumeHost;
use csi_proxy_server::registry::{Hosts, Services};
use std::path::Path;
use std::sync::Arc;

/// The services of every group over `sim`, confined to `kubelet`, with the volume host's
/// records in `state` (made here, as the daemon makes its state directory at start-up).
pub fn sim_services(sim: &Arc<SimWindows>, kubelet: &str, state: &Path) -> Services {
    std::fs::create_dir_all(state).unwrap();
    let policy = Arc::new(PathPolicy::new(PathStyle::Windows, kubelet, &[]).unwrap());
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
        policy,
    );
    let hosts = Hosts {
        disk: Arc::new(WindowsDiskHost::with_os(sim.clone())),
        volume: Arc::new(WindowsVolumeHost::with_os(sim.clone(), state)),
        smb: Arc::new(WindowsSmbHost::with_os(sim.clone())),
        system: Arc::new(WindowsSystemHost::with_os(sim.clone())),
        iscsi: Arc::new(WindowsIscsiHost::with_os(sim.clone())),
    };
    Services::new(fs, hosts, true)
}

/// The scope of each profile of `list`, in order, over `services`' roots, with one book of
/// owners in memory for all of them.
pub fn sim_scopes(services: &Services, kubelet: &str, list: Vec<Profile>) -> Vec<Scope> {
    let drivers: Vec<String> = list.iter().map(|p| p.driver.clone()).collect();
    let profiles = Profiles::new(
        PathStyle::Windows,
        kubelet,
        services.filesystem.policy(),
        list,
        Arc::new(Owners::in_memory()),
    )
    .unwrap();
    let reader = Arc::new(VolDataFromHost::new(&services.filesystem));
    drivers
        .iter()
        .map(|d| profiles.scope(d, reader.clone()).unwrap())
        .collect()
}
