//! A small, blocking D-Bus client over a Unix socket: what the system group needs to drive
//! systemd (method calls, replies, errors, a bus name), and no more.
//!
//! The wire format (values, messages) is [`csi_proxy_formats::dbus`]'s; this is the connection,
//! its address and authentication, from the D-Bus Specification
//! (dbus.freedesktop.org/doc/dbus-specification.html). Every read and write is bounded by a
//! timeout, so a hung bus fails a call instead of hanging it.
//!
//! Kept ours rather than zbus: zbus alone grew the release binary by 1.3 MiB, past the 8 MiB
//! budget with the metrics crates, for four systemd calls.

mod connection;
#[cfg(test)]
mod tests;

pub use connection::Connection;
pub use csi_proxy_formats::dbus::{Message, MessageType, Value};

use std::fmt;
use std::io;
use std::time::Duration;

/// The system bus when `DBUS_SYSTEM_BUS_ADDRESS` is not set ("Well-known Message Bus
/// Instances": the default system bus address).
pub const SYSTEM_BUS_DEFAULT: &str = "unix:path=/run/dbus/system_bus_socket";
/// How long one call (or connecting) may take before it fails.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Header flag NO_REPLY_EXPECTED ("Message Format": flags).
#[cfg(test)]
const NO_REPLY_EXPECTED: u8 = 0x1;

/// What went wrong talking to the bus.
#[derive(Debug)]
pub enum Error {
    /// The socket failed, closed, or timed out (`io::ErrorKind::TimedOut`).
    Io(io::Error),
    /// The peer sent something this client cannot read, or refused authentication.
    Protocol(String),
    /// The peer answered with an error message.
    Remote {
        /// The D-Bus error name, e.g. `org.freedesktop.systemd1.NoSuchUnit`.
        name: String,
        /// The error's text (its first string argument), may be empty.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Protocol(m) => write!(f, "D-Bus protocol error: {m}"),
            Error::Remote { name, message } if message.is_empty() => write!(f, "{name}"),
            Error::Remote { name, message } => write!(f, "{name}: {message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<csi_proxy_formats::dbus::ProtocolError> for Error {
    fn from(e: csi_proxy_formats::dbus::ProtocolError) -> Self {
        Error::Protocol(e.0)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// Results of this module.
pub type Result<T> = std::result::Result<T, Error>;

fn protocol<T>(m: impl Into<String>) -> Result<T> {
    Err(Error::Protocol(m.into()))
}
