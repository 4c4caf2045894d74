//! Linux host implementations.
