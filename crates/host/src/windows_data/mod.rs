//! Pure parsers and planners of Windows data structures.
//!
//! Everything here works on byte buffers laid out as Microsoft documents them (the buffers
//! `DeviceIoControl` and `GetSystemFirmwareTable` fill in) and on plain values, with no OS call
//! and no `windows` crate, so it compiles on every platform and is unit-tested on Linux with byte
//! fixtures. The Windows hosts in `crate::windows` only move these buffers in and out of the OS.

mod bytes;
pub mod ioctl;
pub mod iscsi;
pub mod layout;
pub mod smbios;
pub mod storage;
pub mod volume;
pub mod wmi_codes;

use std::fmt;

/// A GUID in its in-memory (mixed-endian) byte order: `Data1` (u32 LE), `Data2` (u16 LE),
/// `Data3` (u16 LE), then `Data4` (8 bytes as written).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// The GUID written `{aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee}` (braces optional, any case).
    pub const fn parse_const(s: &str) -> Option<Guid> {
        let b = s.as_bytes();
        let (start, len) = if !b.is_empty() && b[0] == b'{' {
            (1, 38)
        } else {
            (0, 36)
        };
        if b.len() != len {
            return None;
        }
        // Text positions of the 16 bytes in "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee" order, and
        // where each lands in memory (Data1..3 are little-endian).
        const TEXT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
        const MEM: [usize; 16] = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];
        let mut out = [0u8; 16];
        let mut i = 0;
        while i < 16 {
            let hi = hex(b[start + TEXT[i]]);
            let lo = hex(b[start + TEXT[i] + 1]);
            if hi > 15 || lo > 15 {
                return None;
            }
            out[MEM[i]] = hi << 4 | lo;
            i += 1;
        }
        let dashes = [8, 13, 18, 23];
        let mut d = 0;
        while d < 4 {
            if b[start + dashes[d]] != b'-' {
                return None;
            }
            d += 1;
        }
        if start == 1 && b[37] != b'}' {
            return None;
        }
        Some(Guid(out))
    }
}

/// The value of one hex digit, or 16 for anything else.
const fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 16,
    }
}

impl fmt::Display for Guid {
    /// Lowercase `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-",
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            u16::from_le_bytes([b[4], b[5]]),
            u16::from_le_bytes([b[6], b[7]]),
            b[8],
            b[9]
        )?;
        b[10..].iter().try_for_each(|x| write!(f, "{x:02x}"))
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{self}}}")
    }
}

/// A constant GUID from its text form; a malformed literal fails compilation.
#[macro_export]
#[doc(hidden)]
macro_rules! __guid {
    ($s:literal) => {{
        const G: $crate::windows_data::Guid = match $crate::windows_data::Guid::parse_const($s) {
            Some(g) => g,
            None => panic!("malformed GUID literal"),
        };
        G
    }};
}
pub use crate::__guid as guid;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_text_and_memory_order() {
        let g = guid!("{EBD0A0A2-B9E5-4433-87C0-68B6B72699C7}");
        assert_eq!(
            g.0,
            [
                0xa2, 0xa0, 0xd0, 0xeb, 0xe5, 0xb9, 0x33, 0x44, 0x87, 0xc0, 0x68, 0xb6, 0xb7, 0x26,
                0x99, 0xc7
            ]
        );
        assert_eq!(g.to_string(), "ebd0a0a2-b9e5-4433-87c0-68b6b72699c7");
        assert_eq!(
            Guid::parse_const("ebd0a0a2-b9e5-4433-87c0-68b6b72699c7"),
            Some(g)
        );
        assert_eq!(
            Guid::parse_const("ebd0a0a2-b9e5-4433-87c0-68b6b72699c"),
            None
        );
        assert_eq!(
            Guid::parse_const("ebd0a0a2xb9e5-4433-87c0-68b6b72699c7"),
            None
        );
        assert_eq!(
            Guid::parse_const("{ebd0a0a2-b9e5-4433-87c0-68b6b72699c7)"),
            None
        );
        assert_eq!(
            Guid::parse_const("gbd0a0a2-b9e5-4433-87c0-68b6b72699c7"),
            None
        );
    }
}
