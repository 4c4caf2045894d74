//! The hang matrix over both platforms' hosts: the disk and volume hosts of the fake Linux, and
//! every host of the simulated Windows, each wrapped so that one host call at a time hangs
//! (`csi_proxy_core::testing::Hanging`, whose list of calls is made from the host traits). For
//! each call that can hang, 1,000 calls reaching it are sent without a deadline, and another
//! client's PathExists, Mkdir and GetDiskStats on another disk must each answer within 1 s,
//! with the process's threads and memory under their ceilings (the rows and the run are the
//! server crate's `hang_matrix`, shared). A row whose call this world's host never reaches
//! (the RPC is answered before it: no such session, no such mapping) is printed and skipped;
//! the server crate's run, over a host that lets every RPC reach every call, has every row.

#![cfg(target_os = "linux")]

#[path = "../../server/tests/hang_matrix/rpcs.rs"]
mod rpcs;

use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::testing::{self, HOST_CALLS, HangPlan, Hanging};
use csi_proxy_host::linux::disk::LinuxDiskHost;
use csi_proxy_host::linux::fake::FakeLinux;
use csi_proxy_host::linux::volume::{FsType, LinuxVolumeHost};
use csi_proxy_host::windows::disk::WindowsDiskHost;
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::iscsi::WindowsIscsiHost;
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::smb::WindowsSmbHost;
use csi_proxy_host::windows::system::WindowsSystemHost;
use csi_proxy_host::windows::volume::WindowsVolumeHost;
use csi_proxy_server::daemon;
use csi_proxy_server::registry::{self, Hosts, Services};
use std::sync::Arc;
use std::time::Duration;

const GIB: u64 = 1 << 30;
const WINDOWS_KUBELET: &str = r"C:\var\lib\kubelet";

/// `hosts`, each hanging as `plan` says.
fn hanging(hosts: Hosts, plan: &Arc<HangPlan>) -> Hosts {
    Hosts {
        disk: Hanging::new(hosts.disk, plan.clone()),
        volume: Hanging::new(hosts.volume, plan.clone()),
        smb: Hanging::new(hosts.smb, plan.clone()),
        system: Hanging::new(hosts.system, plan.clone()),
        iscsi: Hanging::new(hosts.iscsi, plan.clone()),
    }
}

/// The simulated Windows: disks 1 and 2, disk 1 partitioned (its volume is the flood's).
fn windows(plan: &Arc<HangPlan>, state: &std::path::Path) -> World {
    let sim = Arc::new(SimWindows::new());
    sim.mkdir(WINDOWS_KUBELET);
    while sim.add_disk(10 * GIB, 1) < rpcs::HUNG_DISK.max(testing::SPARED_DISK) {}
    let disks = WindowsDiskHost::with_os(sim.clone());
    let volumes = WindowsVolumeHost::with_os(sim.clone(), state);
    use csi_proxy_core::disk::DiskHost;
    use csi_proxy_core::volume::VolumeHost;
    disks.set_disk_online(rpcs::HUNG_DISK, true).unwrap();
    disks.partition_disk(rpcs::HUNG_DISK).unwrap();
    let volume = volumes
        .list_volumes_on_disk(rpcs::HUNG_DISK, None)
        .unwrap()
        .remove(0);
    // The flood's mount targets exist, and its SMB links' parents.
    sim.mkdir(&format!(r"{WINDOWS_KUBELET}\plugins"));
    sim.mkdir(&format!(r"{WINDOWS_KUBELET}\plugins\hung"));
    for i in 0..rpcs::FLOOD {
        sim.mkdir(&format!(r"{WINDOWS_KUBELET}\plugins\hung\{i}"));
        sim.mkdir(&format!(r"{WINDOWS_KUBELET}\plugins\hung\{i}\globalmount"));
    }
    let policy = Arc::new(PathPolicy::new(PathStyle::Windows, WINDOWS_KUBELET, &[]).unwrap());
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
        policy,
    );
    let hosts = Hosts {
        disk: Arc::new(disks),
        volume: Arc::new(volumes),
        smb: Arc::new(WindowsSmbHost::with_os(sim.clone())),
        system: Arc::new(WindowsSystemHost::with_os(sim.clone())),
        iscsi: Arc::new(WindowsIscsiHost::with_os(sim.clone())),
    };
    let names = rpcs::Names {
        kubelet: WINDOWS_KUBELET,
        sep: '\\',
        volume,
    };
    // A row offlining disk 1 takes its volume away: each row starts with it online.
    let heal = Box::new(move || {
        let _ = WindowsDiskHost::with_os(sim.clone()).set_disk_online(rpcs::HUNG_DISK, true);
    });
    (Services::new(fs, hanging(hosts, plan), false), names, heal)
}

/// A platform's services, the names its requests use, and what puts its world back as it
/// was before a row.
type World = (Services, rpcs::Names, Box<dyn Fn()>);

/// The fake Linux's disk and volume hosts: disks 1 and 2, disk 1 partitioned. The SMB, iSCSI
/// and system groups have no fake Linux (their rows run over the simulated Windows and the
/// server crate's host).
fn linux(plan: &Arc<HangPlan>, state: &std::path::Path) -> World {
    let fake = FakeLinux::new();
    fake.add_dir("/var/lib/kubelet");
    for name in ["sdb", "sdc"] {
        fake.add_disk(name, 10 * GIB);
    }
    let disks = LinuxDiskHost::with_os(fake.clone());
    let volumes = LinuxVolumeHost::with_os(fake.clone(), state, FsType::Ext4);
    use csi_proxy_core::disk::DiskHost;
    use csi_proxy_core::volume::VolumeHost;
    disks.partition_disk(rpcs::HUNG_DISK).unwrap();
    let volume = volumes
        .list_volumes_on_disk(rpcs::HUNG_DISK, None)
        .unwrap()
        .remove(0);
    let mut hosts = Hosts::all(Arc::new(testing::UnimplementedHost));
    hosts.disk = Arc::new(disks);
    hosts.volume = Arc::new(volumes);
    let names = rpcs::Names {
        kubelet: "/var/lib/kubelet",
        sep: '/',
        volume,
    };
    (
        Services::new(testing::kubelet_fs(), hanging(hosts, plan), false),
        names,
        Box::new(|| {}),
    )
}

/// Runs every row of the `hosts` traits against the daemon over `services`.
fn run(platform: &str, hosts: &[&str], world: impl FnOnce(&Arc<HangPlan>) -> World) {
    let plan = Arc::new(HangPlan::default());
    let (services, names, heal) = world(&plan);
    let daemon_rt = rpcs::runtime();
    let client_rt = rpcs::runtime();
    let dir = tempfile::tempdir().unwrap();
    let sockets = dir.path().join("run");
    let (serving, ready_rx, stop_tx) =
        daemon::serve_in_dir(registry::endpoints(&services), sockets.clone());
    let daemon = daemon_rt.spawn(serving);
    let connector = csi_proxy_client::Connector::SocketDir(sockets);
    let (mut reached, mut not) = (Vec::new(), Vec::new());
    client_rt.block_on(async {
        ready_rx.await.unwrap();
        for call in HOST_CALLS.iter().filter(|c| hosts.contains(&c.host)) {
            let Some(rpc) = rpcs::row(call.host, call.method) else {
                continue;
            };
            heal();
            let within = Duration::from_secs(1);
            if rpcs::flood_and_check(&connector, &names, &plan, *call, rpc, within).await {
                reached.push(format!("{}::{}", call.host, call.method));
            } else {
                not.push(format!("{}::{}", call.host, call.method));
            }
        }
    });
    println!(
        "{platform}: {} host calls hung 1,000 times each, other clients served; not reached \
         in this world: {not:?}",
        reached.len()
    );
    stop_tx.send(()).unwrap();
    daemon_rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), daemon).await })
        .expect("stops within 10 s")
        .unwrap()
        .unwrap();
    assert!(
        !reached.is_empty(),
        "{platform}: no host call was reached at all"
    );
}

/// The thread and memory counts are the whole process's: one platform at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn every_host_call_that_can_hang_leaves_other_clients_served_on_the_simulated_windows() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let state = tempfile::tempdir().unwrap();
    run("simulated Windows", &ALL_HOSTS, |plan| {
        windows(plan, state.path())
    });
}

#[test]
fn every_host_call_that_can_hang_leaves_other_clients_served_on_the_fake_linux() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let state = tempfile::tempdir().unwrap();
    run("fake Linux", &["DiskHost", "VolumeHost"], |plan| {
        linux(plan, state.path())
    });
}

/// Every host trait of the matrix.
const ALL_HOSTS: [&str; 5] = [
    "DiskHost",
    "VolumeHost",
    "SmbHost",
    "IscsiHost",
    "SystemHost",
];
