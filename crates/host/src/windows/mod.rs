//! The Windows hosts.
//!
//! Every host (disk, volume, filesystem, SMB, system, iSCSI) is logic over the [`os::Win32`]
//! seam and compiles on every platform: on Windows it runs over the real seam ([`win32`]), in
//! tests over the simulated Windows ([`sim`]).
pub mod console;
pub mod disk;
pub mod filesystem;
pub mod iscsi;
pub mod os;
#[cfg(any(test, feature = "windows-sim"))]
pub mod sim;
pub mod smb;
pub mod state_dir;
pub mod system;
pub mod vhd;
pub mod volume;

#[cfg(windows)]
pub mod win;
#[cfg(windows)]
pub mod win32;
#[cfg(windows)]
pub mod wmi;
