//! Host implementations of the `csi-proxy-core` host traits.
//!
//! `linux/<group>.rs` and `windows/<group>.rs` hold what each platform does for a group; the
//! core services above them are the same on both.

pub mod format_record;
pub mod gpt;
pub mod iscsi_discovery;
pub mod layout;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod partition_plan;
pub mod reparse;
pub mod signatures;
pub mod smb_scan;
pub mod windows;
pub mod windows_data;

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

/// The GUID type of this crate's API (partition types and IDs, disk IDs), re-exported so callers
/// need no dependency of their own. GPT and Windows buffers store GUIDs mixed-endian:
/// `Uuid::from_bytes_le` / `to_bytes_le` read and write that layout.
pub use uuid;
