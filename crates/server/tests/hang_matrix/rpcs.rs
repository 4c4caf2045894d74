//! The rows of the hang matrix (which RPC reaches each host call that can hang) and one row's
//! run: the flood, the other client's calls, the ceilings.

use csi_proxy_api::disk::v1 as disk;
use csi_proxy_api::filesystem::v1 as fs;
use csi_proxy_api::iscsi::v1alpha2 as iscsi;
use csi_proxy_api::smb::v1 as smb;
use csi_proxy_api::volume::v1 as volume;
use csi_proxy_client::Connector;
use csi_proxy_core::testing::{HangPlan, HostCall, SPARED_DISK};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The disk the flooded calls act on (never [`SPARED_DISK`]).
pub const HUNG_DISK: u32 = 1;

/// The root of the share whose mapping a fake host reports refused (see
/// [`Rpc::RepairSmbGlobalMapping`]).
#[allow(
    dead_code,
    reason = "the csi-proxy crate's worlds have their own shares"
)]
pub const BROKEN_SHARE: &str = r"\\broken\share";

/// An RPC that reaches a host call which can hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    PartitionDisk,
    Rescan,
    ListDiskIds,
    GetDiskStats,
    SetDiskOffline,
    ListVolumesOnDisk,
    MountVolume,
    UnmountVolume,
    IsVolumeFormatted,
    FormatVolume,
    ResizeVolume,
    GetVolumeStats,
    WriteVolumeCache,
    NewSmbGlobalMapping,
    /// NewSmbGlobalMapping of [`BROKEN_SHARE`], whose mapping the host reports refused: a repair.
    RepairSmbGlobalMapping,
    RemoveSmbGlobalMapping,
    AddTargetPortal,
    DiscoverTargetPortal,
    RemoveTargetPortal,
    ConnectTarget,
    DisconnectTarget,
}

/// The RPC the matrix floods to reach `method` of `host`, or `None` for a call that cannot
/// hang (read from the kernel's or the OS's own tables, or local configuration), which the
/// admission caps leave uncapped. Panics on a method without a row: a new host call must be
/// placed here.
pub fn row(host: &str, method: &str) -> Option<Rpc> {
    use Rpc::*;
    match (host, method) {
        ("DiskHost", "list_disk_locations" | "is_disk_online") => None,
        ("DiskHost", "partition_disk" | "disk_usage") => Some(PartitionDisk),
        ("DiskHost", "rescan") => Some(Rescan),
        ("DiskHost", "list_disk_ids") => Some(ListDiskIds),
        ("DiskHost", "get_disk_size") => Some(GetDiskStats),
        ("DiskHost", "set_disk_online" | "volumes_open_elsewhere") => Some(SetDiskOffline),
        ("VolumeHost", "list_volumes_on_disk") => Some(ListVolumesOnDisk),
        ("VolumeHost", "mount_volume") => Some(MountVolume),
        ("VolumeHost", "unmount_volume") => Some(UnmountVolume),
        ("VolumeHost", "is_volume_formatted") => Some(IsVolumeFormatted),
        (
            "VolumeHost",
            "format_volume" | "volume_disk_number" | "disk_usage" | "volumes_open_elsewhere",
        ) => Some(FormatVolume),
        ("VolumeHost", "resize_volume") => Some(ResizeVolume),
        ("VolumeHost", "get_volume_stats") => Some(GetVolumeStats),
        ("VolumeHost", "write_volume_cache") => Some(WriteVolumeCache),
        (
            "VolumeHost",
            "get_disk_number_from_volume_id"
            | "get_volume_id_from_target_path"
            | "get_closest_volume_id_from_target_path",
        ) => None,
        (
            "SmbHost",
            "new_smb_global_mapping" | "new_smb_link" | "smb_global_mapping" | "credential_mapping",
        ) => Some(NewSmbGlobalMapping),
        ("SmbHost", "remove_credential_mapping") => Some(RepairSmbGlobalMapping),
        ("SmbHost", "remove_smb_global_mapping" | "smb_mapping_users") => {
            Some(RemoveSmbGlobalMapping)
        }
        ("SmbHost", "smb_global_mappings") => None,
        ("IscsiHost", "add_target_portal" | "list_target_portals") => Some(AddTargetPortal),
        ("IscsiHost", "discover_target_portal") => Some(DiscoverTargetPortal),
        ("IscsiHost", "remove_target_portal") => Some(RemoveTargetPortal),
        ("IscsiHost", "connect_target") => Some(ConnectTarget),
        ("IscsiHost", "disconnect_target" | "get_target_disks" | "target_disk_usage") => {
            Some(DisconnectTarget)
        }
        ("IscsiHost", "set_mutual_chap_secret") => None,
        ("SystemHost", _) => None,
        _ => panic!("{host}::{method} has no row in the hang matrix: place it"),
    }
}

/// A runtime of two workers (the daemon's side or the clients' side of a run): few enough
/// that a call holding one in place of a blocking thread would show.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The names a platform's requests use.
#[derive(Debug, Clone)]
pub struct Names {
    /// The kubelet root.
    pub kubelet: &'static str,
    /// The path separator.
    pub sep: char,
    /// A volume on [`HUNG_DISK`].
    pub volume: String,
}

impl Names {
    /// The Posix names of the server's tests.
    #[allow(dead_code, reason = "the csi-proxy crate's run names its own worlds")]
    pub fn posix() -> Self {
        Names {
            kubelet: "/var/lib/kubelet",
            sep: '/',
            volume: "/dev/hung1".into(),
        }
    }

    fn under(&self, rel: &str) -> String {
        format!(
            "{}{}{}",
            self.kubelet,
            self.sep,
            rel.replace('/', &self.sep.to_string())
        )
    }
}

fn portal() -> Option<iscsi::TargetPortal> {
    Some(iscsi::TargetPortal {
        target_address: "10.250.0.1".into(),
        target_port: 3260,
    })
}

const IQN: &str = "iqn.2026-01.test:hung";

impl Rpc {
    fn group(self) -> (&'static str, &'static str) {
        use Rpc::*;
        match self {
            PartitionDisk | Rescan | ListDiskIds | GetDiskStats | SetDiskOffline => ("disk", "v1"),
            NewSmbGlobalMapping | RepairSmbGlobalMapping | RemoveSmbGlobalMapping => ("smb", "v1"),
            AddTargetPortal | DiscoverTargetPortal | RemoveTargetPortal | ConnectTarget
            | DisconnectTarget => ("iscsi", "v1alpha2"),
            _ => ("volume", "v1"),
        }
    }

    /// Sends the RPC once on `ch`, without a deadline; its answer does not matter.
    async fn send(self, ch: Channel, n: &Names, i: usize) -> Result<(), tonic::Status> {
        use Rpc::*;
        let d = HUNG_DISK;
        let v = n.volume.clone();
        let target = n.under(&format!("plugins/hung/{i}/globalmount"));
        match self {
            PartitionDisk => disk_c(ch)
                .partition_disk(disk::PartitionDiskRequest { disk_number: d })
                .await
                .map(drop),
            Rescan => disk_c(ch).rescan(disk::RescanRequest {}).await.map(drop),
            ListDiskIds => disk_c(ch)
                .list_disk_i_ds(disk::ListDiskIDsRequest {})
                .await
                .map(drop),
            GetDiskStats => disk_c(ch)
                .get_disk_stats(disk::GetDiskStatsRequest { disk_number: d })
                .await
                .map(drop),
            SetDiskOffline => disk_c(ch)
                .set_disk_state(disk::SetDiskStateRequest {
                    disk_number: d,
                    is_online: false,
                })
                .await
                .map(drop),
            ListVolumesOnDisk => vol_c(ch)
                .list_volumes_on_disk(volume::ListVolumesOnDiskRequest {
                    disk_number: d,
                    partition_number: 0,
                })
                .await
                .map(drop),
            MountVolume => vol_c(ch)
                .mount_volume(volume::MountVolumeRequest {
                    volume_id: v,
                    target_path: target,
                })
                .await
                .map(drop),
            UnmountVolume => vol_c(ch)
                .unmount_volume(volume::UnmountVolumeRequest {
                    volume_id: v,
                    target_path: target,
                })
                .await
                .map(drop),
            IsVolumeFormatted => vol_c(ch)
                .is_volume_formatted(volume::IsVolumeFormattedRequest { volume_id: v })
                .await
                .map(drop),
            FormatVolume => vol_c(ch)
                .format_volume(volume::FormatVolumeRequest { volume_id: v })
                .await
                .map(drop),
            ResizeVolume => vol_c(ch)
                .resize_volume(volume::ResizeVolumeRequest {
                    volume_id: v,
                    size_bytes: 0,
                })
                .await
                .map(drop),
            GetVolumeStats => vol_c(ch)
                .get_volume_stats(volume::GetVolumeStatsRequest { volume_id: v })
                .await
                .map(drop),
            WriteVolumeCache => vol_c(ch)
                .write_volume_cache(volume::WriteVolumeCacheRequest { volume_id: v })
                .await
                .map(drop),
            NewSmbGlobalMapping => smb_c(ch)
                .new_smb_global_mapping(smb::NewSmbGlobalMappingRequest {
                    remote_path: r"\\hung\share".into(),
                    local_path: n.under(&format!("plugins/hung/{i}/smb")),
                    username: String::new(),
                    password: String::new(),
                })
                .await
                .map(drop),
            RepairSmbGlobalMapping => smb_c(ch)
                .new_smb_global_mapping(smb::NewSmbGlobalMappingRequest {
                    remote_path: r"\\broken\share".into(),
                    local_path: n.under(&format!("plugins/hung/{i}/smb")),
                    username: "tenant".into(),
                    password: "rotated".into(),
                })
                .await
                .map(drop),
            RemoveSmbGlobalMapping => smb_c(ch)
                .remove_smb_global_mapping(smb::RemoveSmbGlobalMappingRequest {
                    remote_path: r"\\hung\share".into(),
                })
                .await
                .map(drop),
            AddTargetPortal => iscsi_c(ch)
                .add_target_portal(iscsi::AddTargetPortalRequest {
                    target_portal: portal(),
                })
                .await
                .map(drop),
            DiscoverTargetPortal => iscsi_c(ch)
                .discover_target_portal(iscsi::DiscoverTargetPortalRequest {
                    target_portal: portal(),
                })
                .await
                .map(drop),
            RemoveTargetPortal => iscsi_c(ch)
                .remove_target_portal(iscsi::RemoveTargetPortalRequest {
                    target_portal: portal(),
                })
                .await
                .map(drop),
            ConnectTarget => iscsi_c(ch)
                .connect_target(iscsi::ConnectTargetRequest {
                    target_portal: portal(),
                    iqn: IQN.into(),
                    ..Default::default()
                })
                .await
                .map(drop),
            DisconnectTarget => iscsi_c(ch)
                .disconnect_target(iscsi::DisconnectTargetRequest {
                    target_portal: portal(),
                    iqn: IQN.into(),
                })
                .await
                .map(drop),
        }
    }
}

fn disk_c(ch: Channel) -> disk::disk_client::DiskClient<Channel> {
    disk::disk_client::DiskClient::new(ch)
}
fn vol_c(ch: Channel) -> volume::volume_client::VolumeClient<Channel> {
    volume::volume_client::VolumeClient::new(ch)
}
fn smb_c(ch: Channel) -> smb::smb_client::SmbClient<Channel> {
    smb::smb_client::SmbClient::new(ch)
}
fn iscsi_c(ch: Channel) -> iscsi::iscsi_client::IscsiClient<Channel> {
    iscsi::iscsi_client::IscsiClient::new(ch)
}

/// Calls sent in one row's flood, without a deadline.
pub const FLOOD: usize = 1000;
/// Connections the flood is spread over (each carries at most 64 calls at once).
const FLOOD_CONNECTIONS: usize = 16;
/// The most threads the process may have while a call hangs [`FLOOD`] times: the admission
/// caps of every kind together (128), the runtimes and the harness. Before the caps a flood
/// took 512 blocking threads.
pub const THREAD_CEILING: usize = 200;
/// The most the process's resident memory may grow while a call hangs [`FLOOD`] times.
pub const MEMORY_CEILING: u64 = 192 << 20;

/// `r` with the deadline `within` from now.
fn with_deadline<T>(within: Duration, mut r: tonic::Request<T>) -> tonic::Request<T> {
    r.set_timeout(within);
    r
}

/// Threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// Resident memory of this process, in bytes.
pub fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// One row: `call` hangs, [`FLOOD`] calls of `rpc` reach it without a deadline, and another
/// client's PathExists, Mkdir and GetDiskStats of [`SPARED_DISK`] each answer within `within`
/// while the threads and memory stay under their ceilings. False when no call of the flood
/// reached `call` within 5 s (the world's host answered the RPC before it).
pub async fn flood_and_check(
    connector: &Connector,
    names: &Names,
    plan: &HangPlan,
    call: HostCall,
    rpc: Rpc,
    within: Duration,
) -> bool {
    let what = format!("{}::{} (through {rpc:?})", call.host, call.method);
    let rss_before = resident();
    plan.hang(call);
    let (group, version) = rpc.group();
    let mut channels = Vec::new();
    for _ in 0..FLOOD_CONNECTIONS {
        channels.push(connector.channel(group, version).await.unwrap());
    }
    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            let ch = channels[i % FLOOD_CONNECTIONS].clone();
            let names = names.clone();
            tokio::spawn(async move { rpc.send(ch, &names, i).await })
        })
        .collect();
    let t = Instant::now();
    while plan.entered() == 0 {
        if t.elapsed() > Duration::from_secs(5) {
            // The host answered before the call (a precondition of this world): no row here.
            plan.release();
            let mut first = None;
            for f in flood {
                let r = f.await.expect("a flood task");
                let answer = r.err().map(|s| format!("{:?}: {}", s.code(), s.message()));
                first.get_or_insert(answer.unwrap_or_else(|| "OK".into()));
            }
            println!("{what}: not reached in this world; the first call answered {first:?}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the flood arrive whole.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let threads = threads();
    let grown = resident().saturating_sub(rss_before);

    // The other client: new connections, its own calls.
    let fs_ch = connector.channel("filesystem", "v1").await.unwrap();
    let disk_ch = connector.channel("disk", "v1").await.unwrap();
    let mut fs_c = fs::filesystem_client::FilesystemClient::new(fs_ch);
    let mut disk_c = disk::disk_client::DiskClient::new(disk_ch);
    let timed = |t: Instant| t.elapsed();
    let t = Instant::now();
    let exists = fs_c
        .path_exists(with_deadline(
            within,
            tonic::Request::new(fs::PathExistsRequest {
                path: names.under("pods"),
            }),
        ))
        .await;
    let exists_took = timed(t);
    let t = Instant::now();
    let mkdir = fs_c
        .mkdir(with_deadline(
            within,
            tonic::Request::new(fs::MkdirRequest {
                path: names.under("plugins/other"),
            }),
        ))
        .await;
    let mkdir_took = timed(t);
    let t = Instant::now();
    let stats = disk_c
        .get_disk_stats(with_deadline(
            within,
            tonic::Request::new(disk::GetDiskStatsRequest {
                disk_number: SPARED_DISK,
            }),
        ))
        .await;
    let stats_took = timed(t);
    let hung = plan.entered();
    plan.release();
    let mut codes = std::collections::BTreeMap::new();
    for f in flood {
        let code = match tokio::time::timeout(Duration::from_secs(120), f).await {
            Ok(Ok(Ok(()))) => tonic::Code::Ok,
            Ok(Ok(Err(s))) => s.code(),
            Ok(Err(e)) => panic!("{what}: a flood task failed: {e}"),
            Err(_) => panic!("{what}: a flooded call did not end once the host call returned"),
        };
        *codes.entry(format!("{code:?}")).or_insert(0usize) += 1;
    }
    println!(
        "{what}: {hung} hung at once; PathExists {exists_took:?}, Mkdir {mkdir_took:?}, \
         GetDiskStats(disk {SPARED_DISK}) {stats_took:?}; {threads} threads, +{} MiB; flood: {codes:?}",
        grown >> 20
    );
    for (name, r) in [
        ("PathExists", exists.map(drop)),
        ("Mkdir", mkdir.map(drop)),
        ("GetDiskStats", stats.map(drop)),
    ] {
        if let Err(s) = r {
            // The hosts may refuse the call itself (no such disk); only a missed deadline is
            // the daemon being held.
            assert!(
                !matches!(
                    s.code(),
                    tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                ),
                "{what}: the other client's {name} was not answered within {within:?}: {s:?}"
            );
        }
    }
    assert!(
        threads <= THREAD_CEILING,
        "{what}: {threads} threads, over the ceiling of {THREAD_CEILING}"
    );
    assert!(
        grown <= MEMORY_CEILING,
        "{what}: resident memory grew {} MiB, over the ceiling of {} MiB",
        grown >> 20,
        MEMORY_CEILING >> 20
    );
    true
}
