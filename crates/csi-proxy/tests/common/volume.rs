//! The v1 disk and volume steps that several tests start their work with.

use super::daemon::Daemon;
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// A disk v1 client.
pub type DiskClient = d1::disk_client::DiskClient<Channel>;
/// A volume v1 client.
pub type VolumeClient = v1::volume_client::VolumeClient<Channel>;

/// Disk and volume v1 clients on channels dialled now.
pub async fn v1_clients(d: &Daemon) -> (DiskClient, VolumeClient) {
    let c = d.connector();
    (
        DiskClient::new(c.channel("disk", "v1").await.unwrap()),
        VolumeClient::new(c.channel("volume", "v1").await.unwrap()),
    )
}

/// The IDs of the volumes on disk `n`.
pub async fn volumes_on(vc: &mut VolumeClient, n: u32) -> Vec<String> {
    vc.list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
        disk_number: n,
        partition_number: 0,
    })
    .await
    .unwrap()
    .into_inner()
    .volume_ids
}

/// The numbers of the disks whose serial number satisfies `wanted` (ListDiskIDs, v1).
pub async fn disks_by_serial(dc: &mut DiskClient, wanted: impl Fn(&str) -> bool) -> Vec<u32> {
    let ids = dc
        .list_disk_i_ds(d1::ListDiskIDsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_i_ds;
    ids.iter()
        .filter(|(_, id)| wanted(&id.serial_number))
        .map(|(n, _)| *n)
        .collect()
}

/// FormatVolume of volume `id`, which must succeed.
pub async fn format_ok(vc: &mut VolumeClient, id: &str) {
    vc.format_volume(v1::FormatVolumeRequest {
        volume_id: id.into(),
    })
    .await
    .unwrap();
}

/// IsVolumeFormatted of volume `id`.
pub async fn is_formatted(vc: &mut VolumeClient, id: &str) -> bool {
    vc.is_volume_formatted(v1::IsVolumeFormattedRequest {
        volume_id: id.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .formatted
}

/// PartitionDisk on disk `n`, then the ID of the one volume on it.
pub async fn partition_one(dc: &mut DiskClient, vc: &mut VolumeClient, n: u32) -> String {
    dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .unwrap();
    volumes_on(vc, n).await.remove(0)
}

/// A v1 filesystem client.
pub type FsClient = csi_proxy_api::filesystem::v1::filesystem_client::FilesystemClient<Channel>;

/// The block drivers' NodeStage of disk `n`, each step expected to succeed: online, one
/// partition, its volume formatted, the staging directory made and the volume mounted there.
/// Returns the volume ID.
pub async fn stage_disk(
    dc: &mut DiskClient,
    vc: &mut VolumeClient,
    fc: &mut FsClient,
    n: u32,
    staging: &str,
) -> String {
    use csi_proxy_api::filesystem::v1 as f1;
    dc.set_disk_state(d1::SetDiskStateRequest {
        disk_number: n,
        is_online: true,
    })
    .await
    .unwrap();
    let id = partition_one(dc, vc, n).await;
    vc.format_volume(v1::FormatVolumeRequest {
        volume_id: id.clone(),
    })
    .await
    .unwrap();
    fc.mkdir(f1::MkdirRequest {
        path: staging.into(),
    })
    .await
    .unwrap();
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.clone(),
        target_path: staging.into(),
    })
    .await
    .unwrap();
    id
}

/// FormatVolume on a task of its own, for a test that crashes or freezes the daemon meanwhile.
pub fn spawn_format(
    vc: &VolumeClient,
    id: &str,
) -> JoinHandle<Result<tonic::Response<v1::FormatVolumeResponse>, tonic::Status>> {
    let (mut vc, volume_id) = (vc.clone(), id.to_string());
    tokio::spawn(async move {
        vc.format_volume(v1::FormatVolumeRequest { volume_id })
            .await
    })
}
