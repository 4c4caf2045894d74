//! Volume adapters: one thin struct per API version over [`VolumeService`].
//!
//! v1beta3, v1 and v2alpha1 share one shape (`current_rpcs!`; v2alpha1 adds
//! GetClosestVolumeIDFromTargetPath). v1alpha1, v1beta1 and v1beta2 share the legacy base
//! (`legacy_rpcs!`: string `disk_id`, `path`, `size`, DismountVolume); v1beta1 and v1beta2 add
//! VolumeStats / GetVolumeDiskNumber / GetVolumeIDFromMount (`legacy_stats_rpcs!`), v1beta2 adds
//! WriteVolumeCache. IsVolumeFormatted and FormatVolume are the same in every version
//! (`shared_rpcs!`). Conversions follow upstream's: a legacy `disk_id` selects every partition
//! (partition 0) of that disk.

use crate::disk::{parse_disk_id, wire_bytes};
use crate::{adapter, unary};
use csi_proxy_api::volume::{v1, v1alpha1, v1beta1, v1beta2, v1beta3, v2alpha1};
use csi_proxy_core::volume::VolumeService;

/// IsVolumeFormatted and FormatVolume: the same shape in every version.
macro_rules! shared_rpcs {
    ($v:ident) => {
        unary!(volume, $v, is_volume_formatted, "IsVolumeFormatted", IsVolumeFormattedRequest => IsVolumeFormattedResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| Ok($v::IsVolumeFormattedResponse { formatted: svc.is_volume_formatted(&r.volume_id)? }));
        unary!(volume, $v, format_volume, "FormatVolume", FormatVolumeRequest => FormatVolumeResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.format_volume(&r.volume_id).map(|()| $v::FormatVolumeResponse {}));
    };
}

/// WriteVolumeCache: v1beta2 onwards, the same shape everywhere.
macro_rules! write_volume_cache {
    ($v:ident) => {
        unary!(volume, $v, write_volume_cache, "WriteVolumeCache", WriteVolumeCacheRequest => WriteVolumeCacheResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.write_volume_cache(&r.volume_id).map(|()| $v::WriteVolumeCacheResponse {}));
    };
}

/// The RPCs of v1beta3, v1 and v2alpha1.
macro_rules! current_rpcs {
    ($v:ident) => {
        shared_rpcs!($v);
        write_volume_cache!($v);
        unary!(volume, $v, list_volumes_on_disk, "ListVolumesOnDisk", ListVolumesOnDiskRequest => ListVolumesOnDiskResponse,
            on |r| Some(format!("disk {}", r.disk_number)),
            |svc, r| Ok($v::ListVolumesOnDiskResponse {
                volume_ids: svc.list_volumes_on_disk(r.disk_number, r.partition_number)?,
            }));
        unary!(volume, $v, mount_volume, "MountVolume", MountVolumeRequest => MountVolumeResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.mount_volume(&r.volume_id, &r.target_path).map(|()| $v::MountVolumeResponse {}));
        unary!(volume, $v, unmount_volume, "UnmountVolume", UnmountVolumeRequest => UnmountVolumeResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.unmount_volume(&r.volume_id, &r.target_path).map(|()| $v::UnmountVolumeResponse {}));
        unary!(volume, $v, resize_volume, "ResizeVolume", ResizeVolumeRequest => ResizeVolumeResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.resize_volume(&r.volume_id, r.size_bytes).map(|()| $v::ResizeVolumeResponse {}));
        unary!(volume, $v, get_volume_stats, "GetVolumeStats", GetVolumeStatsRequest => GetVolumeStatsResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| {
                let s = svc.get_volume_stats(&r.volume_id)?;
                Ok($v::GetVolumeStatsResponse {
                    total_bytes: wire_bytes("GetVolumeStats", "total_bytes", s.total_bytes)?,
                    used_bytes: wire_bytes("GetVolumeStats", "used_bytes", s.used_bytes)?,
                })
            });
        unary!(volume, $v, get_disk_number_from_volume_id, "GetDiskNumberFromVolumeID",
            GetDiskNumberFromVolumeIdRequest => GetDiskNumberFromVolumeIdResponse,
            |svc, r| Ok($v::GetDiskNumberFromVolumeIdResponse {
                disk_number: svc.get_disk_number_from_volume_id(&r.volume_id)?,
            }));
        unary!(volume, $v, get_volume_id_from_target_path, "GetVolumeIDFromTargetPath",
            GetVolumeIdFromTargetPathRequest => GetVolumeIdFromTargetPathResponse,
            |svc, r| Ok($v::GetVolumeIdFromTargetPathResponse {
                volume_id: svc.get_volume_id_from_target_path(&r.target_path)?,
            }));
    };
}

/// The RPCs common to v1alpha1, v1beta1 and v1beta2.
macro_rules! legacy_rpcs {
    ($v:ident) => {
        shared_rpcs!($v);
        unary!(volume, $v, list_volumes_on_disk, "ListVolumesOnDisk", ListVolumesOnDiskRequest => ListVolumesOnDiskResponse,
            on |r| Some(format!("disk {}", r.disk_id)),
            |svc, r| Ok($v::ListVolumesOnDiskResponse {
                volume_ids: svc.list_volumes_on_disk(parse_disk_id("ListVolumesOnDisk", "disk_id", &r.disk_id)?, 0)?,
            }));
        unary!(volume, $v, mount_volume, "MountVolume", MountVolumeRequest => MountVolumeResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.mount_volume(&r.volume_id, &r.path).map(|()| $v::MountVolumeResponse {}));
        unary!(volume, $v, dismount_volume, "DismountVolume", DismountVolumeRequest => DismountVolumeResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.unmount_volume(&r.volume_id, &r.path).map(|()| $v::DismountVolumeResponse {}));
        unary!(volume, $v, resize_volume, "ResizeVolume", ResizeVolumeRequest => ResizeVolumeResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| svc.resize_volume(&r.volume_id, r.size).map(|()| $v::ResizeVolumeResponse {}));
    };
}

/// VolumeStats, GetVolumeDiskNumber and GetVolumeIDFromMount of v1beta1 and v1beta2.
macro_rules! legacy_stats_rpcs {
    ($v:ident) => {
        unary!(volume, $v, volume_stats, "VolumeStats", VolumeStatsRequest => VolumeStatsResponse,
            on |r| Some(format!("volume {}", r.volume_id)),
            |svc, r| {
                let s = svc.get_volume_stats(&r.volume_id)?;
                Ok($v::VolumeStatsResponse {
                    volume_size: wire_bytes("VolumeStats", "volumeSize", s.total_bytes)?,
                    volume_used_size: wire_bytes("VolumeStats", "volumeUsedSize", s.used_bytes)?,
                })
            });
        unary!(volume, $v, get_volume_disk_number, "GetVolumeDiskNumber", VolumeDiskNumberRequest => VolumeDiskNumberResponse,
            |svc, r| Ok($v::VolumeDiskNumberResponse {
                disk_number: i64::from(svc.get_disk_number_from_volume_id(&r.volume_id)?),
            }));
        unary!(volume, $v, get_volume_id_from_mount, "GetVolumeIDFromMount", VolumeIdFromMountRequest => VolumeIdFromMountResponse,
            |svc, r| Ok($v::VolumeIdFromMountResponse {
                volume_id: svc.get_volume_id_from_target_path(&r.mount)?,
            }));
    };
}

adapter!(
    /// `v1alpha1.Volume`.
    VolumeV1alpha1, VolumeService, volume::v1alpha1::volume_server::VolumeServer
);
impl v1alpha1::volume_server::Volume for VolumeV1alpha1 {
    legacy_rpcs!(v1alpha1);
}

adapter!(
    /// `v1beta1.Volume`: v1alpha1 plus VolumeStats, GetVolumeDiskNumber, GetVolumeIDFromMount.
    VolumeV1beta1, VolumeService, volume::v1beta1::volume_server::VolumeServer
);
impl v1beta1::volume_server::Volume for VolumeV1beta1 {
    legacy_rpcs!(v1beta1);
    legacy_stats_rpcs!(v1beta1);
}

adapter!(
    /// `v1beta2.Volume`: v1beta1 plus WriteVolumeCache.
    VolumeV1beta2, VolumeService, volume::v1beta2::volume_server::VolumeServer
);
impl v1beta2::volume_server::Volume for VolumeV1beta2 {
    legacy_rpcs!(v1beta2);
    legacy_stats_rpcs!(v1beta2);
    write_volume_cache!(v1beta2);
}

adapter!(
    /// `v1beta3.Volume`.
    VolumeV1beta3, VolumeService, volume::v1beta3::volume_server::VolumeServer
);
impl v1beta3::volume_server::Volume for VolumeV1beta3 {
    current_rpcs!(v1beta3);
}

adapter!(
    /// `v1.Volume`.
    VolumeV1, VolumeService, volume::v1::volume_server::VolumeServer
);
impl v1::volume_server::Volume for VolumeV1 {
    current_rpcs!(v1);
}

adapter!(
    /// `v2alpha1.Volume`: v1 plus GetClosestVolumeIDFromTargetPath.
    VolumeV2alpha1, VolumeService, volume::v2alpha1::volume_server::VolumeServer
);
impl v2alpha1::volume_server::Volume for VolumeV2alpha1 {
    current_rpcs!(v2alpha1);
    unary!(volume, v2alpha1, get_closest_volume_id_from_target_path, "GetClosestVolumeIDFromTargetPath",
    GetClosestVolumeIdFromTargetPathRequest => GetClosestVolumeIdFromTargetPathResponse,
    |svc, r| Ok(v2alpha1::GetClosestVolumeIdFromTargetPathResponse {
        volume_id: svc.get_closest_volume_id_from_target_path(&r.target_path)?,
    }));
}
