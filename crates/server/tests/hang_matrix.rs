//! The hang matrix: for every host call that can block on the outside world (the list is
//! `csi_proxy_core::testing::HOST_CALLS`, made from the host traits themselves, so a new method
//! joins it), the host makes that call hang; one client sends 1,000 calls reaching it without a
//! deadline; another client's PathExists, Mkdir and a disk call on another disk each answer
//! within [`ANSWER_WITHIN`], and the process's threads and memory stay under their ceilings.
//! Before the admission caps (`csi_proxy_server::admission`), each hung call held one of the
//! blocking pool's 512 threads and the other client's calls found none.
//!
//! The host here answers every call the way that lets each RPC reach its host call; the same
//! matrix over the fake Linux and the simulated Windows hosts is in the csi-proxy crate's
//! `hang_matrix` test.

#![cfg(target_os = "linux")]

#[path = "hang_matrix/rpcs.rs"]
mod rpcs;

use csi_proxy_core::Result;
use csi_proxy_core::disk::{DiskUsage, OpenElsewhere};
use csi_proxy_core::iscsi::TargetPortal;
use csi_proxy_core::smb::{MappingInfo, MappingState, SmbUsers};
use csi_proxy_core::testing::{self, HOST_CALLS, HangPlan, Hanging};
use csi_proxy_server::daemon;
use csi_proxy_server::registry::{self, Hosts, Services};
use std::sync::Arc;
use std::time::Duration;

/// How soon the other client's calls must answer while a call hangs 1,000 times.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// Answers every call with what lets each RPC go on to its next host call.
struct Willing;

impl testing::PartialDiskHost for Willing {
    fn disk_usage(&self, _: u32) -> Result<DiskUsage> {
        Ok(DiskUsage::default())
    }
    fn volumes_open_elsewhere(&self, _: u32) -> Result<Vec<OpenElsewhere>> {
        Ok(vec![])
    }
    fn get_disk_size(&self, _: u32) -> Result<u64> {
        Ok(1 << 30)
    }
    fn is_disk_online(&self, _: u32) -> Result<bool> {
        Ok(true)
    }
}
impl testing::PartialVolumeHost for Willing {
    fn volume_disk_number(&self, _: &str) -> Result<u32> {
        Ok(1)
    }
    fn get_disk_number_from_volume_id(&self, _: &str) -> Result<u32> {
        Ok(1)
    }
    fn disk_usage(&self, _: u32) -> Result<DiskUsage> {
        Ok(DiskUsage::default())
    }
    fn volumes_open_elsewhere(&self, _: u32) -> Result<Vec<OpenElsewhere>> {
        Ok(vec![])
    }
    fn is_volume_formatted(&self, _: &str) -> Result<bool> {
        Ok(false)
    }
}
impl testing::PartialSmbHost for Willing {
    fn new_smb_global_mapping(&self, _: &csi_proxy_core::smb::SmbMapping) -> Result<()> {
        Ok(())
    }
    fn smb_global_mapping(&self, _: &str) -> Result<MappingState> {
        Ok(MappingState::Unknown)
    }
    /// The share `\\broken\share` is kept per credential, and this one's mapping was refused
    /// by its server (a rotated key): a NewSmbGlobalMapping of it repairs the mapping, so the
    /// flood reaches `remove_credential_mapping`.
    fn credential_mapping(
        &self,
        m: &csi_proxy_core::smb::SmbMapping,
    ) -> Result<Option<MappingState>> {
        Ok((m.root == rpcs::BROKEN_SHARE).then(|| {
            MappingState::Present(MappingInfo {
                healthy: false,
                status: "access denied".into(),
                username: None,
                remap_heals: true,
            })
        }))
    }
    fn smb_global_mappings(&self) -> Result<Vec<String>> {
        Ok(vec![])
    }
    fn smb_mapping_users(&self, _: &str, _: &[String]) -> Result<SmbUsers> {
        Ok(SmbUsers::default())
    }
}
impl testing::PartialIscsiHost for Willing {
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        Ok(vec![])
    }
    fn get_target_disks(&self, _: &TargetPortal, _: &str) -> Result<Vec<u32>> {
        Ok(vec![1])
    }
    fn target_disk_usage(&self, _: u32) -> Result<Option<DiskUsage>> {
        Ok(Some(DiskUsage::default()))
    }
}
impl testing::PartialSystemHost for Willing {}

/// Every group over [`Willing`], hanging as `plan` says.
fn services(plan: &Arc<HangPlan>) -> Services {
    let willing = Hosts::all(Arc::new(Willing));
    let hosts = Hosts {
        disk: Hanging::new(willing.disk, plan.clone()),
        volume: Hanging::new(willing.volume, plan.clone()),
        smb: Hanging::new(willing.smb, plan.clone()),
        system: Hanging::new(willing.system, plan.clone()),
        iscsi: Hanging::new(willing.iscsi, plan.clone()),
    };
    Services::new(testing::kubelet_fs(), hosts, false)
}

#[test]
fn every_host_call_that_can_hang_leaves_other_clients_served() {
    // Every listed call has its row, and every row names a listed call.
    for call in HOST_CALLS {
        rpcs::row(call.host, call.method);
    }
    let plan = Arc::new(HangPlan::default());
    let daemon_rt = rpcs::runtime();
    let client_rt = rpcs::runtime();
    let dir = tempfile::tempdir().unwrap();
    let sockets = dir.path().join("run");
    let (serving, ready_rx, stop_tx) =
        daemon::serve_in_dir(registry::endpoints(&services(&plan)), sockets.clone());
    let daemon = daemon_rt.spawn(serving);
    let connector = csi_proxy_client::Connector::SocketDir(sockets);
    client_rt.block_on(async {
        ready_rx.await.unwrap();
        let names = rpcs::Names::posix();
        let mut ran = 0;
        for call in HOST_CALLS {
            let Some(rpc) = rpcs::row(call.host, call.method) else {
                continue;
            };
            let reached =
                rpcs::flood_and_check(&connector, &names, &plan, *call, rpc, ANSWER_WITHIN).await;
            assert!(reached, "{call:?}: no call of the flood reached it");
            ran += 1;
        }
        println!("{ran} host calls hung, each 1,000 times");
    });
    stop_tx.send(()).unwrap();
    daemon_rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), daemon).await })
        .expect("stops within 10 s")
        .unwrap()
        .unwrap();
}

/// A stalled disk never holds up the kubelet tree: PartitionDisk of disk 1 hangs holding the
/// disk, then a MountVolume of a volume on disk 1 names the kubelet root as its target
/// (without a deadline); another client's Mkdir under `plugins/` and under `pods/` must each
/// answer within [`ANSWER_WITHIN`]. The call must not wait for the disk while holding the
/// root's path: that is the lock order (disk before path, roots never mount targets).
#[test]
fn a_stalled_disk_never_holds_the_kubelet_tree() {
    use csi_proxy_api::disk::v1 as disk;
    use csi_proxy_api::filesystem::v1 as fs;
    use csi_proxy_api::volume::v1 as volume;
    let plan = Arc::new(HangPlan::default());
    let _release = Release(plan.clone());
    let rt = rpcs::runtime();
    let dir = tempfile::tempdir().unwrap();
    let sockets = dir.path().join("run");
    let services = services(&plan);
    rt.block_on(async {
        let (serving, ready_rx, _stop_tx) =
            daemon::serve_in_dir(registry::endpoints(&services), sockets.clone());
        tokio::spawn(serving);
        ready_rx.await.unwrap();
        let connector = csi_proxy_client::Connector::SocketDir(sockets);
        plan.hang(testing::HostCall {
            host: "DiskHost",
            method: "partition_disk",
        });
        let mut attacker_disk =
            disk::disk_client::DiskClient::new(connector.channel("disk", "v1").await.unwrap());
        let partition = tokio::spawn(async move {
            attacker_disk
                .partition_disk(disk::PartitionDiskRequest { disk_number: 1 })
                .await
        });
        while plan.entered() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut attacker_volume = volume::volume_client::VolumeClient::new(
            connector.channel("volume", "v1").await.unwrap(),
        );
        let mount = tokio::spawn(async move {
            attacker_volume
                .mount_volume(volume::MountVolumeRequest {
                    volume_id: "/dev/hung1".into(),
                    target_path: "/var/lib/kubelet".into(),
                })
                .await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut other = fs::filesystem_client::FilesystemClient::new(
            connector.channel("filesystem", "v1").await.unwrap(),
        );
        for path in ["/var/lib/kubelet/plugins/x", "/var/lib/kubelet/pods/y"] {
            let mut r = tonic::Request::new(fs::MkdirRequest { path: path.into() });
            r.set_timeout(ANSWER_WITHIN);
            let t = std::time::Instant::now();
            let answer = other.mkdir(r).await;
            println!(
                "Mkdir {path} beside the stalled disk: {:?} in {:?}",
                answer.as_ref().map(drop),
                t.elapsed()
            );
            assert!(answer.is_ok(), "Mkdir {path}: {answer:?}");
        }
        plan.release();
        let _ = partition.await;
        let _ = mount.await;
    });
}

/// Lets every hung call go when dropped, also when the test fails (the runtime's drop waits
/// for its blocking threads).
struct Release(Arc<HangPlan>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}
