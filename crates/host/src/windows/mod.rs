//! Windows host implementations.
pub mod disk;
pub mod filesystem;
pub mod iscsi;
pub mod smb;
pub mod system;
pub mod volume;
pub mod win;
pub mod wmi;
