//! Host implementations of the `csi-proxy-core` host traits.
//!
//! `linux/<group>.rs` and `windows/<group>.rs` hold what each platform does for a group; the
//! core services above them are the same on both. What the bytes the hosts read and write mean
//! (partition tables, signatures, Windows buffers, reparse points, iSCSI PDUs, D-Bus messages,
//! the mount table) is the `csi-proxy-formats` crate's, with no I/O.

pub mod format_record;
pub mod iscsi_discovery;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod probe;
pub mod profiles_file;
pub mod smb_scan;
pub mod windows;

/// The GUID type of this crate's API (partition types and IDs, disk IDs).
pub use csi_proxy_formats::uuid;
