//! Windows host implementations.
pub mod filesystem;
