//! Linux host implementations.
pub mod block;
pub mod disk;
pub mod filesystem;
pub mod mountinfo;
pub mod tool;
pub mod volume;
