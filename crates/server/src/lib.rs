//! csi-proxy gRPC server: one endpoint per API group-version, each a thin adapter over the
//! group's version-agnostic service from `csi-proxy-core`.

pub mod admission;
pub mod call;
pub mod daemon;
pub mod disk;
pub mod endpoint_server;
pub mod filesystem;
pub mod handoff;
pub mod iscsi;
pub mod limits;
pub mod metrics;
pub mod registry;
pub mod smb;
pub mod spec_status;
pub mod status;
pub mod system;
pub mod transport;
pub mod volume;
