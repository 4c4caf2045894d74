//! The Windows hosts.
//!
//! The disk, volume, SMB, system and iSCSI hosts are logic over the [`os::Win32`] seam and
//! compile on every platform: on Windows they run over the real seam ([`win32`]), in tests over
//! the simulated Windows ([`sim`]). The filesystem host still calls Win32 directly and exists on
//! Windows only.
pub mod disk;
pub mod iscsi;
pub mod os;
#[cfg(any(test, feature = "windows-sim"))]
pub mod sim;
pub mod smb;
pub mod system;
pub mod volume;

#[cfg(windows)]
pub mod filesystem;
#[cfg(windows)]
pub mod win;
#[cfg(windows)]
pub mod win32;
#[cfg(windows)]
pub mod wmi;
