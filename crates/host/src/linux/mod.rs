//! Linux host implementations.
pub mod blkid;
pub mod block;
pub mod block_users;
/// The D-Bus client of the system host. Ours, not a crate's: zbus, the candidate, would add
/// 1.4 MB to a binary that must stay under 8 MiB (see BENCHMARKS.md).
pub(crate) mod dbus;
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
pub mod state_dir;
pub mod system;
pub mod task_iter;
pub mod tool;
pub mod volume;

#[cfg(test)]
mod systemd_tests;
