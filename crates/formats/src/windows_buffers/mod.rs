//! Pure parsers and planners of Windows data structures.
//!
//! Everything here works on byte buffers laid out as Microsoft documents them (the buffers
//! `DeviceIoControl` and `GetSystemFirmwareTable` fill in) and on plain values, with no OS call
//! and no `windows` crate, so it compiles on every platform and is unit-tested on Linux with byte
//! fixtures. The Windows hosts in `csi_proxy_host::windows` only move these buffers in and out of the OS.

mod bytes;
pub mod ioctl;
pub mod iscsi;
pub mod layout;
pub mod sddl;
pub mod smbios;
pub mod storage;
pub mod volume;
pub mod wmi_codes;
