//! The D-Bus wire format: the type system and its marshalling (`marshal`), messages with their
//! header fields and body (`message`). Written from the D-Bus Specification
//! (dbus.freedesktop.org/doc/dbus-specification.html), whose section names the comments cite.
//! Messages are encoded little-endian; messages of either byte order are decoded ("Byte order
//! and alignment"). The Linux host's client does the socket, the address and authentication.

mod marshal;
mod message;
#[cfg(test)]
mod tests;

pub use marshal::Value;
pub use message::{Message, MessageType, decodes_and_round_trips};

use std::fmt;

/// "The maximum length of a message, including header, header alignment padding, and body is
/// 2 to the 27th power" ("Valid Names" / "Message Format").
const MAX_MESSAGE: usize = 1 << 27;
/// Nesting bound of container types (the spec allows 32 arrays and 32 structs deep).
const MAX_DEPTH: usize = 64;

/// Bytes that are not a D-Bus message or value as the specification lays them out, or a value
/// that cannot be encoded; says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

/// Results of this module.
pub type Result<T> = std::result::Result<T, ProtocolError>;

fn protocol<T>(m: impl Into<String>) -> Result<T> {
    Err(ProtocolError(m.into()))
}
