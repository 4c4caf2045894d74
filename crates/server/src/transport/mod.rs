//! Transports: Unix sockets (Linux) and named pipes (Windows), both wrapped in the
//! `:authority` fix that lets upstream Go clients through.

pub mod authority;
pub mod deadline;
#[cfg(windows)]
pub mod pipe;
#[cfg(unix)]
pub mod unix;
