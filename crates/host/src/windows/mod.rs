//! Windows host implementations.
