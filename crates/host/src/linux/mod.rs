//! Linux host implementations.
pub mod filesystem;
pub mod mountinfo;
