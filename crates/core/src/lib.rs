//! Version-agnostic csi-proxy: one service per API group, the host traits they call, the path
//! policy and the error type. Nothing here calls the OS; `csi-proxy-host` implements the traits.
#![forbid(unsafe_code)]

pub mod deadline;
pub mod disk;
pub mod error;
pub mod filesystem;
pub mod iscsi;
pub mod locks;
pub mod paths;
pub mod smb;
pub mod system;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod volume;

pub use error::{Error, Kind, Result};

/// A host that implements nothing: every RPC of the disk, volume, SMB, iSCSI and system groups
/// answers UNIMPLEMENTED naming its group and RPC. Stands in where a platform's host layer for a
/// group is not written yet.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnimplementedHost;

impl disk::DiskHost for UnimplementedHost {
    /// Nothing is ever changed by this host, so no disk needs protecting from it; the RPC itself
    /// then answers UNIMPLEMENTED.
    fn disk_usage(&self, _: u32) -> Result<disk::DiskUsage> {
        Ok(disk::DiskUsage::default())
    }
}
impl volume::VolumeHost for UnimplementedHost {
    /// As for disks: nothing is changed by this host, so the RPCs answer UNIMPLEMENTED.
    fn volume_disk_number(&self, _: &str) -> Result<u32> {
        Ok(0)
    }

    fn disk_usage(&self, _: u32) -> Result<disk::DiskUsage> {
        Ok(disk::DiskUsage::default())
    }
}
impl smb::SmbHost for UnimplementedHost {}
impl iscsi::IscsiHost for UnimplementedHost {}
impl system::SystemHost for UnimplementedHost {}
