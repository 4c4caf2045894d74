//! Partial hosts for test doubles: one companion trait per host trait, each method defaulting to
//! what a host that lacks it would answer, and a blanket impl of the real trait over it. A fake
//! then overrides only the methods its test reaches.
//!
//! Only compiled for tests (feature `testing`, which the daemon never enables), so a production
//! host cannot take the defaults: it implements the real trait, where every method is required.
//! A type implements either the companion or the real trait, never both (the two impls would
//! overlap).

use crate::disk::{DiskHost, DiskIds, DiskLocation, DiskUsage, OpenElsewhere};
use crate::error::{Error, Kind, Result};
use crate::iscsi::{Chap, IscsiHost, Secret, TargetPortal};
use crate::smb::{MappingState, SmbHost, SmbMapping, SmbUsers};
use crate::system::{ServiceInfo, SystemHost};
use crate::volume::{ResizeTarget, VolumeHost, VolumeStats};
use std::collections::BTreeMap;
use std::num::NonZeroU32;

/// The answer of an RPC no test double implements: UNIMPLEMENTED naming the group and RPC.
fn unimplemented<T>(group: &str, rpc: &str) -> Result<T> {
    Err(Error::unimplemented(group, rpc))
}

/// A "cannot tell" answer for the data-safety queries, which makes the service refuse to change
/// anything (what a host must do when it does not know what a disk holds).
fn cannot_tell<T>(group: &str, object: impl std::fmt::Display, what: &str) -> Result<T> {
    Err(Error::new(Kind::FailedPrecondition, group, object, what))
}

/// Declares the companion trait `$partial` with the given default bodies, and the blanket impl
/// of `$real` that forwards each method to it.
macro_rules! partial_host {
    (
        $(#[$doc:meta])*
        $partial:ident => $real:ident {
            $(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty $body:block)*
        }
    ) => {
        $(#[$doc])*
        pub trait $partial: Send + Sync {
            $(
                #[allow(unused_variables, reason = "the defaults ignore their arguments")]
                fn $name(&self $(, $arg: $ty)*) -> $ret $body
            )*
        }

        impl<T: $partial> $real for T {
            $(
                fn $name(&self $(, $arg: $ty)*) -> $ret {
                    $partial::$name(self $(, $arg)*)
                }
            )*
        }
    };
}

partial_host! {
    /// [`DiskHost`] with every RPC answering UNIMPLEMENTED and `disk_usage` answering "cannot
    /// tell" (so mutating RPCs are refused before the host is asked).
    PartialDiskHost => DiskHost {
        fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
            unimplemented("disk", "ListDiskLocations")
        }
        fn partition_disk(&self, disk_number: u32) -> Result<()> {
            unimplemented("disk", "PartitionDisk")
        }
        fn rescan(&self) -> Result<()> {
            unimplemented("disk", "Rescan")
        }
        fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
            unimplemented("disk", "ListDiskIDs")
        }
        fn get_disk_size(&self, disk_number: u32) -> Result<u64> {
            unimplemented("disk", "GetDiskStats")
        }
        fn set_disk_online(&self, disk_number: u32, online: bool) -> Result<()> {
            unimplemented("disk", "SetDiskState")
        }
        fn is_disk_online(&self, disk_number: u32) -> Result<bool> {
            unimplemented("disk", "GetDiskState")
        }
        fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage> {
            cannot_tell(
                "disk",
                disk_number,
                "this host cannot tell whether the disk is in use, so it is not changed",
            )
        }
        fn volumes_open_elsewhere(&self, disk_number: u32) -> Result<Vec<OpenElsewhere>> {
            Ok(Vec::new())
        }
    }
}

partial_host! {
    /// [`VolumeHost`] with every RPC answering UNIMPLEMENTED and the two data-safety queries
    /// answering "cannot tell" (so mutating RPCs are refused before the host is asked).
    PartialVolumeHost => VolumeHost {
        fn list_volumes_on_disk(
            &self,
            disk_number: u32,
            partition: Option<NonZeroU32>
        ) -> Result<Vec<String>> {
            unimplemented("volume", "ListVolumesOnDisk")
        }
        fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
            unimplemented("volume", "MountVolume")
        }
        fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
            unimplemented("volume", "UnmountVolume")
        }
        fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
            unimplemented("volume", "IsVolumeFormatted")
        }
        fn format_volume(&self, volume_id: &str) -> Result<()> {
            unimplemented("volume", "FormatVolume")
        }
        fn resize_volume(&self, volume_id: &str, target: ResizeTarget) -> Result<()> {
            unimplemented("volume", "ResizeVolume")
        }
        fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
            unimplemented("volume", "GetVolumeStats")
        }
        fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32> {
            unimplemented("volume", "GetDiskNumberFromVolumeID")
        }
        fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
            unimplemented("volume", "GetVolumeIDFromTargetPath")
        }
        fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
            unimplemented("volume", "GetClosestVolumeIDFromTargetPath")
        }
        fn write_volume_cache(&self, volume_id: &str) -> Result<()> {
            unimplemented("volume", "WriteVolumeCache")
        }
        fn volume_disk_number(&self, volume_id: &str) -> Result<u32> {
            cannot_tell(
                "volume",
                format!("{volume_id:?}"),
                "this host cannot tell which disk holds the volume, so it is not changed",
            )
        }
        fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage> {
            cannot_tell(
                "volume",
                format!("disk {disk_number}"),
                "this host cannot tell what the disk is used for, so it is not changed",
            )
        }
        fn volumes_open_elsewhere(&self, disk_number: u32) -> Result<Vec<OpenElsewhere>> {
            Ok(Vec::new())
        }
    }
}

partial_host! {
    /// [`SmbHost`] with the primitives answering UNIMPLEMENTED and the queries answering "cannot
    /// tell": state unknown, no mappings, no users.
    PartialSmbHost => SmbHost {
        fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
            unimplemented("smb", "NewSmbGlobalMapping")
        }
        fn new_smb_link(&self, mapping: &SmbMapping, remote_path: &str, local_path: &str) -> Result<()> {
            unimplemented("smb", "NewSmbGlobalMapping")
        }
        fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
            unimplemented("smb", "RemoveSmbGlobalMapping")
        }
        fn remove_credential_mapping(&self, mapping: &SmbMapping) -> Result<()> {
            unimplemented("smb", "RemoveSmbGlobalMapping")
        }
        fn smb_global_mapping(&self, root: &str) -> Result<MappingState> {
            Ok(MappingState::Unknown)
        }
        fn credential_mapping(&self, mapping: &SmbMapping) -> Result<Option<MappingState>> {
            Ok(None)
        }
        fn smb_global_mappings(&self) -> Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<SmbUsers> {
            Ok(SmbUsers::default())
        }
    }
}

partial_host! {
    /// [`IscsiHost`] with every RPC answering UNIMPLEMENTED and no session disk in use (as on a
    /// host whose logout refuses a busy session by itself).
    PartialIscsiHost => IscsiHost {
        fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
            unimplemented("iscsi", "AddTargetPortal")
        }
        fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
            unimplemented("iscsi", "DiscoverTargetPortal")
        }
        fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
            unimplemented("iscsi", "RemoveTargetPortal")
        }
        fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
            unimplemented("iscsi", "ListTargetPortals")
        }
        fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()> {
            unimplemented("iscsi", "ConnectTarget")
        }
        fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
            unimplemented("iscsi", "DisconnectTarget")
        }
        fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
            unimplemented("iscsi", "GetTargetDisks")
        }
        fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
            unimplemented("iscsi", "SetMutualChapSecret")
        }
        fn target_disk_usage(&self, number: u32) -> Result<Option<DiskUsage>> {
            Ok(None)
        }
    }
}

partial_host! {
    /// [`SystemHost`] with every RPC answering UNIMPLEMENTED.
    PartialSystemHost => SystemHost {
        fn bios_serial_number(&self) -> Result<String> {
            unimplemented("system", "GetBIOSSerialNumber")
        }
        fn get_service(&self, name: &str) -> Result<ServiceInfo> {
            unimplemented("system", "GetService")
        }
        fn start_service(&self, name: &str) -> Result<()> {
            unimplemented("system", "StartService")
        }
        fn stop_service(&self, name: &str, force: bool) -> Result<()> {
            unimplemented("system", "StopService")
        }
    }
}
