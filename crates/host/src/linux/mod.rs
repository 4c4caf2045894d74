//! Linux host implementations.
pub mod block;
pub mod dbus;
pub mod disk;
#[cfg(any(test, feature = "linux-fake"))]
pub mod fake;
pub mod filesystem;
pub mod iscsi;
pub mod kernel;
pub mod limits;
pub mod memory;
pub mod mountinfo;
pub mod namespace;
pub mod os;
pub mod smb;
pub mod system;
pub mod tool;
pub mod volume;
