//! Version-agnostic csi-proxy: one service per API group, the host traits they call, the path
//! policy and the error type. Nothing here calls the OS; `csi-proxy-host` implements the traits.
#![forbid(unsafe_code)]

pub mod error;
pub mod filesystem;
pub mod paths;

pub use error::{Error, Kind, Result};
