//! The Windows hosts.
//!
//! The disk, volume, SMB and system hosts are logic over the [`os::Win32`] seam and compile on every
//! platform: on Windows they run over the real seam ([`win32`]), in tests over the simulated
//! Windows ([`sim`]). The filesystem and iSCSI hosts still call Win32 directly and exist on Windows only.
pub mod disk;
pub mod os;
#[cfg(any(test, feature = "windows-sim"))]
pub mod sim;
pub mod smb;
pub mod system;
pub mod volume;

#[cfg(windows)]
pub mod filesystem;
#[cfg(windows)]
pub mod iscsi;
#[cfg(windows)]
pub mod win;
#[cfg(windows)]
pub mod win32;
#[cfg(windows)]
pub mod wmi;
