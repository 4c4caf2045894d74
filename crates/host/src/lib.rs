//! Host implementations of the `csi-proxy-core` host traits.
//!
//! `linux/<group>.rs` and `windows/<group>.rs` hold what each platform does for a group; the
//! core services above them are the same on both.

pub mod gpt;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod reparse;
pub mod signatures;
#[cfg(windows)]
pub mod windows;
