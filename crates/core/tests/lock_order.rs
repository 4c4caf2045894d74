//! The lock order against a disk or a share that stops answering: a call on it holds no path
//! while it waits, and none may hold a directory every client's paths lie under.
//!
//! The attack: PartitionDisk on the attacker's own disk hangs in the host holding the disk
//! (a hostile iSCSI target), then MountVolume of a volume on that disk with the kubelet root
//! as its target. Taking the target path first and then waiting for the disk held every path
//! below the root for as long as the disk wait lasted (120 s without a deadline): other
//! clients' Mkdir under `plugins/` and `pods/` answered DEADLINE_EXCEEDED. Each RPC that takes
//! both a disk or share and a path is tried here with the kubelet root, two shared
//! directories and a driver's own staging path as its target, while its disk or share hangs;
//! another client's Mkdir below that target, given 1 s, must succeed.

use csi_proxy_core::disk::{DiskService, DiskUsage, OpenElsewhere};
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::smb::{MappingState, NewSmbGlobalMappingRequest, SmbService};
use csi_proxy_core::testing::{PartialDiskHost, PartialSmbHost, PartialVolumeHost, kubelet_fs};
use csi_proxy_core::volume::VolumeService;
use csi_proxy_core::{Kind, Result, deadline, locks};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The attacker's disk (a number no other test uses).
const DISK: u32 = 7_000_001;
/// The attacker's share, and its root as the lock table names it.
const SHARE: &str = r"\\attacker\stall\sub";
const SHARE_ROOT: &str = r"\\attacker\stall";
const STAGING: &str = "/var/lib/kubelet/plugins/kubernetes.io/csi/d/abc/globalmount";

/// A host call that does not return until released: the disk or server stopped answering.
#[derive(Default)]
struct Stall {
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Stall {
    /// Called by the host: says it is in, then hangs until [`Stall::release`].
    fn hang(&self) {
        let mut s = self.state.lock().unwrap();
        s.0 = true;
        self.changed.notify_all();
        while !s.1 {
            s = self.changed.wait(s).unwrap();
        }
    }

    fn wait_entered(&self) {
        let mut s = self.state.lock().unwrap();
        while !s.0 {
            s = self.changed.wait(s).unwrap();
        }
    }

    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

/// Disk [`DISK`] is free for anyone to use, and partitioning it hangs; its volume `v` mounts
/// and unmounts at once; share [`SHARE_ROOT`]'s state hangs when asked.
#[derive(Default)]
struct Host {
    stall: Stall,
}

impl PartialDiskHost for Host {
    fn disk_usage(&self, _: u32) -> Result<DiskUsage> {
        Ok(DiskUsage::default())
    }
    fn volumes_open_elsewhere(&self, _: u32) -> Result<Vec<OpenElsewhere>> {
        Ok(Vec::new())
    }
    fn partition_disk(&self, _: u32) -> Result<()> {
        self.stall.hang();
        Ok(())
    }
}

impl PartialVolumeHost for Host {
    fn volume_disk_number(&self, _: &str) -> Result<u32> {
        Ok(DISK)
    }
    fn disk_usage(&self, _: u32) -> Result<DiskUsage> {
        Ok(DiskUsage::default())
    }
    fn mount_volume(&self, _: &str, _: &str) -> Result<()> {
        Ok(())
    }
    fn unmount_volume(&self, _: &str, _: &str) -> Result<()> {
        Ok(())
    }
}

impl PartialSmbHost for Host {
    fn smb_global_mapping(&self, _: &str) -> Result<MappingState> {
        self.stall.hang();
        Ok(MappingState::Absent)
    }
}

/// The RPCs that take a disk or a share and a target path.
#[derive(Debug, Clone, Copy)]
enum Rpc {
    MountVolume,
    UnmountVolume,
    NewSmbGlobalMapping,
}

struct Services {
    host: Arc<Host>,
    fs: FilesystemService,
    disk: DiskService,
    volume: VolumeService,
    smb: SmbService,
}

fn services() -> Services {
    let host = Arc::new(Host::default());
    let fs = kubelet_fs();
    Services {
        disk: DiskService::new(host.clone(), fs.policy().clone()),
        volume: VolumeService::new(host.clone(), fs.clone()),
        smb: SmbService::new(host.clone(), fs.clone(), true),
        fs,
        host,
    }
}

impl Services {
    /// Starts the call that hangs holding `rpc`'s disk or share, and waits until it hangs.
    fn stall(&self, rpc: Rpc) -> JoinHandle<()> {
        let (disk, smb) = (self.disk.clone(), self.smb.clone());
        let holder = std::thread::spawn(move || match rpc {
            Rpc::MountVolume | Rpc::UnmountVolume => drop(disk.partition_disk(DISK)),
            Rpc::NewSmbGlobalMapping => drop(smb.remove_smb_global_mapping(SHARE)),
        });
        self.host.stall.wait_entered();
        holder
    }

    /// Starts `rpc` with `target` and no deadline (the attacker's), and returns once it either
    /// answered or waits for its disk or share.
    fn attack(&self, rpc: Rpc, target: &str) -> JoinHandle<Result<()>> {
        let (volume, smb, target) = (self.volume.clone(), self.smb.clone(), target.to_string());
        let attacker = std::thread::spawn(move || match rpc {
            Rpc::MountVolume => volume.mount_volume("v", &target),
            Rpc::UnmountVolume => volume.unmount_volume("v", &target),
            Rpc::NewSmbGlobalMapping => smb.new_smb_global_mapping(&NewSmbGlobalMappingRequest {
                remote_path: SHARE.into(),
                local_path: target,
                ..Default::default()
            }),
        });
        let waiting = || match rpc {
            Rpc::MountVolume | Rpc::UnmountVolume => locks::waiting_for_disk(DISK),
            Rpc::NewSmbGlobalMapping => locks::waiting_for_share(SHARE_ROOT),
        };
        let give_up = Instant::now() + Duration::from_secs(30);
        while !attacker.is_finished() && waiting() == 0 {
            assert!(
                Instant::now() < give_up,
                "{rpc:?} neither answered nor waits"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        attacker
    }
}

/// Another client's Mkdir of `path`, which gives up after 1 s.
fn mkdir_within_a_second(fs: &FilesystemService, path: &str) -> Result<()> {
    deadline::within(Some(Instant::now() + Duration::from_secs(1)), || {
        fs.mkdir(path)
    })
}

#[test]
fn a_call_waiting_for_a_hung_disk_or_share_holds_up_no_other_clients_path() {
    let shared = [
        "/var/lib/kubelet",
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/pods/",
    ];
    for rpc in [
        Rpc::MountVolume,
        Rpc::UnmountVolume,
        Rpc::NewSmbGlobalMapping,
    ] {
        for target in shared.iter().copied().chain([STAGING]) {
            let s = services();
            let holder = s.stall(rpc);
            let attacker = s.attack(rpc, target);
            // Under the target, and (for the root) under plugins/ and pods/, as kubelet's
            // other drivers and pods would.
            let others = [
                format!("{}/other", target.trim_end_matches('/')),
                "/var/lib/kubelet/plugins/other-driver/x".to_string(),
                "/var/lib/kubelet/pods/other-pod/volumes".to_string(),
            ];
            for path in &others {
                mkdir_within_a_second(&s.fs, path).unwrap_or_else(|e| {
                    panic!("{rpc:?} at {target} waiting for its hung disk or share: {e}")
                });
            }
            let is_shared = shared.contains(&target);
            if is_shared {
                // Refused before it took or waited for anything.
                assert!(attacker.is_finished(), "{rpc:?} at {target} waited");
            }
            s.host.stall.release();
            holder.join().unwrap();
            let answer = attacker.join().expect("the lock order holds");
            if is_shared {
                let e = answer.expect_err("a shared directory as the target");
                assert_eq!(e.kind(), Kind::PermissionDenied, "{rpc:?} at {target}: {e}");
                assert!(
                    e.message().contains(&format!("{rpc:?}"))
                        && e.message().contains("never a mount target"),
                    "{e}"
                );
            }
        }
    }
}

/// Every directory kubelet keeps for all drivers and pods is refused as a mount target before
/// the disk is asked for; a driver's own staging and publish paths, and a working dir's
/// subdirectories, are not.
#[test]
fn shared_directories_are_never_mount_targets_and_drivers_paths_are() {
    let policy = kubelet_fs().policy().clone();
    for shared in [
        "/var/lib/kubelet",
        "/var/lib/kubelet/",
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins/kubernetes.io",
        "/var/lib/kubelet/plugins/kubernetes.io/csi",
        "/var/lib/kubelet/plugins/kubernetes.io/csi/pv",
        "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging",
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/pods",
        "/var/lib/kubelet/pods/0b6c",
        "/var/lib/kubelet/pods/0b6c/volumes",
        "/var/lib/kubelet/pods/0b6c/volumes/kubernetes.io~csi",
        "/var/lib/kubelet/pods/0b6c/volumeDevices/kubernetes.io~csi",
    ] {
        assert!(policy.is_shared(shared), "{shared}");
    }
    for own in [
        STAGING,
        "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pv-1/globalmount",
        "/var/lib/kubelet/plugins/kubernetes.io/csi/ebs.csi.aws.com",
        "/var/lib/kubelet/pods/0b6c/volumes/kubernetes.io~csi/pv-1/mount",
        "/var/lib/kubelet/plugins/smb.csi.k8s.io",
    ] {
        assert!(!policy.is_shared(own), "{own}");
    }
    let windows = csi_proxy_core::paths::PathPolicy::new(
        csi_proxy_core::paths::PathStyle::Windows,
        r"C:\var\lib\kubelet",
        &[r"C:\csi".to_string()],
    )
    .unwrap();
    for shared in [
        r"c:\VAR\lib\kubelet",
        r"C:\var\lib\kubelet\PODS",
        r"C:\var\lib\kubelet\plugins\kubernetes.io\csi",
        r"C:\csi",
    ] {
        assert!(windows.is_shared(shared), "{shared}");
    }
    for own in [
        r"C:\csi\smbmounts",
        r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\pd.csi.storage.gke.io\abc\globalmount",
    ] {
        assert!(!windows.is_shared(own), "{own}");
    }
}
