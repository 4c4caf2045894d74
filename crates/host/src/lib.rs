//! Host implementations of the `csi-proxy-core` host traits.
//!
//! `linux/<group>.rs` and `windows/<group>.rs` hold what each platform does for a group; the
//! core services above them are the same on both. What the bytes the hosts read and write mean
//! (partition tables, signatures, Windows buffers, reparse points, iSCSI PDUs) is the
//! `csi-proxy-formats` crate's, with no I/O.

pub mod format_record;
pub mod iscsi_discovery;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod probe;
pub mod smb_scan;
pub mod windows;

/// Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): parsers of untrusted bytes
/// that are not public API.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// A D-Bus message as the system bus (or whatever listens at its address) sends it;
    /// whether it decoded.
    #[cfg(target_os = "linux")]
    pub fn dbus_message(bytes: &[u8]) -> bool {
        crate::linux::dbus::fuzz_message(bytes)
    }
}

/// The GUID type of this crate's API (partition types and IDs, disk IDs).
pub use csi_proxy_formats::uuid;
