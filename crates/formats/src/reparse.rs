//! Parsing of Windows reparse-point data.
//!
//! `FSCTL_GET_REPARSE_POINT` returns a `REPARSE_DATA_BUFFER` (ntifs.h; [MS-FSCC] 2.1.2.2,
//! 2.1.2.4 "Symbolic Link Reparse Data Buffer", 2.1.2.5 "Mount Point Reparse Data Buffer"). All
//! integers are little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `ReparseTag` |
//! | 4 | 2 | `ReparseDataLength`: bytes after `Reserved` |
//! | 6 | 2 | `Reserved` |
//! | 8 | 2 | `SubstituteNameOffset` (bytes, from the start of `PathBuffer`) |
//! | 10 | 2 | `SubstituteNameLength` (bytes, no terminating NUL) |
//! | 12 | 2 | `PrintNameOffset` |
//! | 14 | 2 | `PrintNameLength` |
//! | 16 | 4 | `Flags` (symbolic links only; `SYMLINK_FLAG_RELATIVE` = 1) |
//! | 20 / 16 | … | `PathBuffer`, UTF-16LE (symbolic link / mount point) |
//!
//! This module is pure and compiled on every platform so that it is unit-tested on Linux. The
//! parser is bounds-checked: bad bytes give a [`ReparseError`], never a panic.

use std::fmt;

/// `IO_REPARSE_TAG_MOUNT_POINT`: a junction or a volume mount point.
pub const IO_REPARSE_TAG_MOUNT_POINT: u32 = 0xA000_0003;
/// `IO_REPARSE_TAG_SYMLINK`: a symbolic link.
pub const IO_REPARSE_TAG_SYMLINK: u32 = 0xA000_000C;
/// `SYMLINK_FLAG_RELATIVE`: the substitute name is relative to the link's parent directory.
pub const SYMLINK_FLAG_RELATIVE: u32 = 0x1;
/// `MAXIMUM_REPARSE_DATA_BUFFER_SIZE`: the largest buffer `FSCTL_GET_REPARSE_POINT` can return.
pub const MAXIMUM_REPARSE_DATA_BUFFER_SIZE: usize = 16 * 1024;

/// Bytes before the tag-specific data: `ReparseTag`, `ReparseDataLength`, `Reserved`.
const HEADER_LEN: usize = 8;
/// Fixed part of the symbolic-link data: four `u16` name fields and `Flags`.
const SYMLINK_FIXED_LEN: usize = 12;
/// Fixed part of the mount-point data: four `u16` name fields.
const MOUNT_POINT_FIXED_LEN: usize = 8;

/// Whether a reparse tag has the name-surrogate bit (bit 29) set, i.e. it stands for another
/// named entity (symbolic link, junction, mount point) rather than carrying data of its own.
pub const fn is_name_surrogate(tag: u32) -> bool {
    tag & 0x2000_0000 != 0
}

/// A parsed reparse point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReparsePoint {
    /// `IO_REPARSE_TAG_SYMLINK`.
    Symlink {
        /// The name the system follows: an NT path such as `\??\C:\dir`, or, when `relative`,
        /// a path relative to the link's parent directory.
        substitute_name: String,
        /// The name meant for display.
        print_name: String,
        /// `Flags & SYMLINK_FLAG_RELATIVE`.
        relative: bool,
    },
    /// `IO_REPARSE_TAG_MOUNT_POINT`: a junction (`\??\C:\dir`) or a volume mount point
    /// (`\??\Volume{GUID}\`).
    MountPoint {
        /// The NT path the system follows.
        substitute_name: String,
        /// The name meant for display (often empty for volume mount points).
        print_name: String,
    },
    /// Any other tag (deduplication, cloud files, AppExecLink, WSL, …): its data is not parsed.
    Other {
        /// The reparse tag.
        tag: u32,
    },
}

impl ReparsePoint {
    /// The reparse tag this point was parsed from.
    pub fn tag(&self) -> u32 {
        match self {
            ReparsePoint::Symlink { .. } => IO_REPARSE_TAG_SYMLINK,
            ReparsePoint::MountPoint { .. } => IO_REPARSE_TAG_MOUNT_POINT,
            ReparsePoint::Other { tag } => *tag,
        }
    }

    /// Where the system sends a path that crosses this reparse point; `None` for tags that are
    /// not links ([`ReparsePoint::Other`]).
    ///
    /// Decided on the substitute name (what the I/O manager follows), never on the print name.
    pub fn destination(&self) -> Option<LinkDestination> {
        match self {
            ReparsePoint::Symlink {
                substitute_name,
                relative: true,
                ..
            } => {
                // A relative link starting with a separator is relative to the root of the
                // link's drive, not to its parent directory: not a path we can place safely.
                if substitute_name.starts_with('\\') || substitute_name.starts_with('/') {
                    Some(LinkDestination::Other(substitute_name.clone()))
                } else {
                    Some(LinkDestination::Path(substitute_name.clone()))
                }
            }
            ReparsePoint::Symlink {
                substitute_name, ..
            }
            | ReparsePoint::MountPoint {
                substitute_name, ..
            } => Some(nt_to_win32(substitute_name)),
            ReparsePoint::Other { .. } => None,
        }
    }

    /// Whether this is a mount point whose substitute name is a whole volume
    /// (`\??\Volume{GUID}\`), i.e. a volume mount point rather than a junction.
    pub fn is_volume_mount_point(&self) -> bool {
        matches!(
            self,
            ReparsePoint::MountPoint { substitute_name, .. }
                if matches!(nt_to_win32(substitute_name), LinkDestination::Volume(_))
        )
    }
}

/// What a link's substitute name designates, in Win32 terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkDestination {
    /// A Win32 path: drive-absolute (`C:\dir`), UNC (`\\server\share\dir`), or, for a relative
    /// symbolic link, a path relative to the link's parent directory.
    Path(String),
    /// The root of a whole volume, as `\\?\Volume{GUID}\`.
    Volume(String),
    /// An NT path that is neither (e.g. `\Device\HarddiskVolume3\dir`, a path inside a volume
    /// named by GUID, or an empty name).
    Other(String),
}

/// The Win32 path of what the link at `link` (a drive-absolute path) names directly, whose
/// existence IsSymlink reports: upstream reads the link and checks its target without following
/// it further, so a publish link to a staging link is "a link" even while the share behind the
/// staging link is unreachable. A relative target is taken from the link's parent directory.
/// `None` for an NT path with no Win32 form (the caller then follows the link instead).
pub fn direct_target(link: &str, dest: &LinkDestination) -> Option<String> {
    match dest {
        LinkDestination::Path(t) => {
            let b = t.as_bytes();
            let drive_absolute = b.len() >= 3 && b[0].is_ascii_alphabetic() && &b[1..3] == b":\\";
            if drive_absolute || t.starts_with(r"\\") {
                Some(t.clone())
            } else {
                let (parent, _) = link.trim_end_matches('\\').rsplit_once('\\')?;
                Some(format!(r"{parent}\{t}"))
            }
        }
        LinkDestination::Volume(v) => Some(v.clone()),
        LinkDestination::Other(_) => None,
    }
}

/// Converts an absolute NT substitute name into a [`LinkDestination`].
///
/// `\??\C:\x` → `Path("C:\x")`; `\??\UNC\srv\share\x` → `Path("\\srv\share\x")`;
/// `\??\Volume{GUID}\` (trailing separator optional) → `Volume("\\?\Volume{GUID}\")`; anything
/// else → `Other`. `\\?\` is accepted as a synonym of `\??\`.
pub fn nt_to_win32(substitute_name: &str) -> LinkDestination {
    let other = || LinkDestination::Other(substitute_name.to_string());
    let Some(rest) = substitute_name
        .strip_prefix(r"\??\")
        .or_else(|| substitute_name.strip_prefix(r"\\?\"))
    else {
        return other();
    };
    if let Some(unc) = strip_prefix_ignore_case(rest, r"UNC\") {
        if unc.is_empty() || unc.starts_with('\\') {
            return other();
        }
        return LinkDestination::Path(format!(r"\\{unc}"));
    }
    if let Some(guid) = volume_guid(rest) {
        return LinkDestination::Volume(format!(r"\\?\Volume{{{guid}}}\"));
    }
    let b = rest.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b.len() == 2 || b[2] == b'\\')
    {
        return LinkDestination::Path(rest.to_string());
    }
    other()
}

/// `Volume{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}` with an optional trailing `\` and nothing
/// else → the GUID text.
fn volume_guid(s: &str) -> Option<&str> {
    let inner = strip_prefix_ignore_case(s, "Volume{")?;
    let close = inner.find('}')?;
    let (guid, tail) = (&inner[..close], &inner[close + 1..]);
    if !(tail.is_empty() || tail == "\\") {
        return None;
    }
    let ok = guid.len() == 36
        && guid.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    ok.then_some(guid)
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Why a reparse buffer could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReparseError {
    /// The buffer is shorter than its own fields say.
    Truncated {
        /// Bytes the fields require.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// A name's offset + length lies outside `PathBuffer`.
    NameOutOfRange {
        /// `"substitute name"` or `"print name"`.
        name: &'static str,
        /// The name's byte offset in `PathBuffer`.
        offset: usize,
        /// The name's byte length.
        length: usize,
        /// The length of `PathBuffer`.
        path_buffer_len: usize,
    },
    /// A name's offset or length is odd (UTF-16 names are counted in bytes, so always even).
    OddLength {
        /// `"substitute name"` or `"print name"`.
        name: &'static str,
    },
    /// A name is not valid UTF-16 (an unpaired surrogate).
    InvalidUtf16 {
        /// `"substitute name"` or `"print name"`.
        name: &'static str,
    },
}

impl fmt::Display for ReparseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReparseError::Truncated { needed, available } => write!(
                f,
                "reparse data truncated: {needed} bytes needed, {available} present"
            ),
            ReparseError::NameOutOfRange {
                name,
                offset,
                length,
                path_buffer_len,
            } => write!(
                f,
                "reparse {name} out of range: offset {offset} + length {length} > path buffer of \
                 {path_buffer_len} bytes"
            ),
            ReparseError::OddLength { name } => {
                write!(f, "reparse {name} has an odd byte offset or length")
            }
            ReparseError::InvalidUtf16 { name } => write!(f, "reparse {name} is not valid UTF-16"),
        }
    }
}

impl std::error::Error for ReparseError {}

impl From<ReparseError> for std::io::Error {
    fn from(e: ReparseError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parses the bytes `FSCTL_GET_REPARSE_POINT` returned (`buf` may be longer than the reparse
/// data; bytes past `8 + ReparseDataLength` are ignored).
pub fn parse(buf: &[u8]) -> Result<ReparsePoint, ReparseError> {
    let truncated = |needed: usize| ReparseError::Truncated {
        needed,
        available: buf.len(),
    };
    let (Some(tag), Some(data_len)) = (u32_at(buf, 0), u16_at(buf, 4)) else {
        return Err(truncated(HEADER_LEN));
    };
    let fixed = match tag {
        IO_REPARSE_TAG_SYMLINK => SYMLINK_FIXED_LEN,
        IO_REPARSE_TAG_MOUNT_POINT => MOUNT_POINT_FIXED_LEN,
        _ => return Ok(ReparsePoint::Other { tag }),
    };
    let end = HEADER_LEN + usize::from(data_len);
    let data = buf.get(HEADER_LEN..end).ok_or_else(|| truncated(end))?;
    if data.len() < fixed {
        return Err(ReparseError::Truncated {
            needed: HEADER_LEN + fixed,
            available: end,
        });
    }
    // The fixed fields are present: these reads cannot fail.
    let field = |at: usize| usize::from(u16_at(data, at).unwrap_or(0));
    let (sub_off, sub_len, print_off, print_len) = (field(0), field(2), field(4), field(6));
    let path_buffer = &data[fixed..];
    let substitute_name = utf16_name(path_buffer, sub_off, sub_len, "substitute name")?;
    let print_name = utf16_name(path_buffer, print_off, print_len, "print name")?;
    Ok(match tag {
        IO_REPARSE_TAG_SYMLINK => ReparsePoint::Symlink {
            substitute_name,
            print_name,
            relative: u32_at(data, 8).unwrap_or(0) & SYMLINK_FLAG_RELATIVE != 0,
        },
        _ => ReparsePoint::MountPoint {
            substitute_name,
            print_name,
        },
    })
}

fn utf16_name(
    path_buffer: &[u8],
    offset: usize,
    length: usize,
    name: &'static str,
) -> Result<String, ReparseError> {
    if !offset.is_multiple_of(2) || !length.is_multiple_of(2) {
        return Err(ReparseError::OddLength { name });
    }
    let bytes = path_buffer
        .get(offset..offset + length)
        .ok_or(ReparseError::NameOutOfRange {
            name,
            offset,
            length,
            path_buffer_len: path_buffer.len(),
        })?;
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16(&units).map_err(|_| ReparseError::InvalidUtf16 { name })
}

#[cfg(test)]
#[path = "reparse_tests.rs"]
mod tests;
