//! Version-agnostic csi-proxy: one service per API group, the host traits they call, the path
//! policy and the error type. Nothing here calls the OS; `csi-proxy-host` implements the traits.
#![forbid(unsafe_code)]

pub mod deadline;
pub mod disk;
pub mod error;
pub mod filesystem;
pub mod iscsi;
pub mod locks;
pub mod paths;
pub mod profiles;
pub mod quota;
pub mod smb;
pub mod system;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod volume;

pub use error::{Error, Kind, Result};
