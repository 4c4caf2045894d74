//! The harness of the end-to-end tests: the real `csi-proxy` binary on Unix sockets in a temp
//! dir (started, crashed, restarted), loop disks that detach themselves, raw gRPC calls with a
//! protobuf encoder driven by the wire contract, host-state snapshots, and the tools the daemon
//! runs, found and frozen.
// Each test binary uses a different part of the harness: the rest is dead code and unused
// re-exports there.
#![allow(dead_code, unused_imports)]

#[cfg(unix)]
mod azuredisk_driver;
mod contract;
#[cfg(unix)]
mod crafted;
mod daemon;
mod driver;
#[cfg(unix)]
mod ebs_driver;
#[cfg(unix)]
mod fs_api;
#[cfg(unix)]
mod go_client;
mod host;
#[cfg(target_os = "linux")]
mod in_use;
mod klog_line;
mod loopdisk;
#[cfg(unix)]
mod node_host;
#[cfg(unix)]
mod pd_driver;
mod process;
#[cfg(unix)]
mod proxy_api;
mod raw;
#[cfg(unix)]
mod sim_services;
#[cfg(unix)]
mod simwin;
#[cfg(unix)]
mod smb_driver;
mod volume;
#[cfg(unix)]
mod vsphere_driver;

#[cfg(unix)]
pub use azuredisk_driver::*;
pub use contract::*;
#[cfg(unix)]
pub use crafted::*;
pub use daemon::*;
pub use driver::*;
#[cfg(unix)]
pub use ebs_driver::*;
#[cfg(unix)]
pub use fs_api::*;
#[cfg(unix)]
pub use go_client::*;
pub use host::*;
#[cfg(target_os = "linux")]
pub use in_use::*;
pub use klog_line::*;
pub use loopdisk::*;
#[cfg(unix)]
pub use node_host::*;
#[cfg(unix)]
pub use pd_driver::*;
pub use process::*;
#[cfg(unix)]
pub use proxy_api::*;
pub use raw::*;
#[cfg(unix)]
pub use sim_services::*;
#[cfg(unix)]
pub use simwin::*;
#[cfg(unix)]
pub use smb_driver::*;
pub use volume::*;
#[cfg(unix)]
pub use vsphere_driver::*;
