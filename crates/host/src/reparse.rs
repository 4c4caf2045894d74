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
mod tests {
    use super::*;

    #[test]
    fn a_links_direct_target_is_named_as_windows_resolves_it() {
        let link = r"C:\var\lib\kubelet\pods\p\volumes\v\mount";
        let path = |s: &str| LinkDestination::Path(s.into());
        let stage = r"C:\var\lib\kubelet\plugins\x\globalmount";
        assert_eq!(direct_target(link, &path(stage)).as_deref(), Some(stage));
        assert_eq!(
            direct_target(link, &path(r"\\srv\share\sub")).as_deref(),
            Some(r"\\srv\share\sub")
        );
        assert_eq!(
            direct_target(link, &path(r"..\other")).as_deref(),
            Some(r"C:\var\lib\kubelet\pods\p\volumes\v\..\other")
        );
        let vol = r"\\?\Volume{01234567-89ab-cdef-0123-456789abcdef}\";
        assert_eq!(
            direct_target(link, &LinkDestination::Volume(vol.into())).as_deref(),
            Some(vol)
        );
        assert_eq!(
            direct_target(
                link,
                &LinkDestination::Other(r"\Device\HarddiskVolume3\x".into())
            ),
            None
        );
    }

    fn utf16(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    /// Builds a buffer per the documented layout: substitute name first, then print name, each
    /// followed by a NUL that the lengths do not count (as Windows writes them).
    fn buffer(tag: u32, substitute: &str, print: &str, flags: Option<u32>) -> Vec<u8> {
        let (sub, prn) = (utf16(substitute), utf16(print));
        let mut path_buffer = sub.clone();
        path_buffer.extend([0, 0]);
        let print_off = path_buffer.len();
        path_buffer.extend(&prn);
        path_buffer.extend([0, 0]);
        let fixed = if flags.is_some() { 12 } else { 8 };
        let mut b = Vec::new();
        b.extend(tag.to_le_bytes());
        b.extend(((fixed + path_buffer.len()) as u16).to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend((sub.len() as u16).to_le_bytes());
        b.extend((print_off as u16).to_le_bytes());
        b.extend((prn.len() as u16).to_le_bytes());
        if let Some(f) = flags {
            b.extend(f.to_le_bytes());
        }
        b.extend(path_buffer);
        b
    }

    #[test]
    fn symlink_absolute() {
        let b = buffer(
            IO_REPARSE_TAG_SYMLINK,
            r"\??\C:\var\lib\kubelet\plugins\x",
            r"C:\var\lib\kubelet\plugins\x",
            Some(0),
        );
        let rp = parse(&b).unwrap();
        assert_eq!(
            rp,
            ReparsePoint::Symlink {
                substitute_name: r"\??\C:\var\lib\kubelet\plugins\x".into(),
                print_name: r"C:\var\lib\kubelet\plugins\x".into(),
                relative: false,
            }
        );
        assert_eq!(rp.tag(), IO_REPARSE_TAG_SYMLINK);
        assert_eq!(
            rp.destination(),
            Some(LinkDestination::Path(
                r"C:\var\lib\kubelet\plugins\x".into()
            ))
        );
        assert!(!rp.is_volume_mount_point());
    }

    #[test]
    fn symlink_relative() {
        let b = buffer(IO_REPARSE_TAG_SYMLINK, r"..\target", r"..\target", Some(1));
        let rp = parse(&b).unwrap();
        assert!(matches!(rp, ReparsePoint::Symlink { relative: true, .. }));
        assert_eq!(
            rp.destination(),
            Some(LinkDestination::Path(r"..\target".into()))
        );
        // Drive-root-relative: not placeable relative to the parent.
        let b = buffer(IO_REPARSE_TAG_SYMLINK, r"\Windows", r"\Windows", Some(1));
        assert_eq!(
            parse(&b).unwrap().destination(),
            Some(LinkDestination::Other(r"\Windows".into()))
        );
    }

    #[test]
    fn symlink_to_unc_share() {
        let b = buffer(
            IO_REPARSE_TAG_SYMLINK,
            r"\??\UNC\server\share\dir\",
            r"\\server\share\dir\",
            Some(0),
        );
        assert_eq!(
            parse(&b).unwrap().destination(),
            Some(LinkDestination::Path(r"\\server\share\dir\".into()))
        );
    }

    #[test]
    fn junction_to_path() {
        let b = buffer(
            IO_REPARSE_TAG_MOUNT_POINT,
            r"\??\C:\var\lib\kubelet\pods",
            r"C:\var\lib\kubelet\pods",
            None,
        );
        let rp = parse(&b).unwrap();
        assert_eq!(
            rp,
            ReparsePoint::MountPoint {
                substitute_name: r"\??\C:\var\lib\kubelet\pods".into(),
                print_name: r"C:\var\lib\kubelet\pods".into(),
            }
        );
        assert_eq!(
            rp.destination(),
            Some(LinkDestination::Path(r"C:\var\lib\kubelet\pods".into()))
        );
        assert!(!rp.is_volume_mount_point());
    }

    #[test]
    fn volume_mount_point() {
        let guid = "5d3c4b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a";
        let b = buffer(
            IO_REPARSE_TAG_MOUNT_POINT,
            &format!(r"\??\Volume{{{guid}}}\"),
            "",
            None,
        );
        let rp = parse(&b).unwrap();
        assert!(rp.is_volume_mount_point());
        assert_eq!(
            rp.destination(),
            Some(LinkDestination::Volume(format!(r"\\?\Volume{{{guid}}}\")))
        );
        // A path inside a volume named by GUID is not the whole volume.
        let b = buffer(
            IO_REPARSE_TAG_MOUNT_POINT,
            &format!(r"\??\Volume{{{guid}}}\sub"),
            "",
            None,
        );
        assert!(matches!(
            parse(&b).unwrap().destination(),
            Some(LinkDestination::Other(_))
        ));
    }

    #[test]
    fn other_tags_are_not_links() {
        // IO_REPARSE_TAG_DEDUP with arbitrary data.
        let mut b = 0x8000_0013u32.to_le_bytes().to_vec();
        b.extend([3, 0, 0, 0, 1, 2, 3]);
        let rp = parse(&b).unwrap();
        assert_eq!(rp, ReparsePoint::Other { tag: 0x8000_0013 });
        assert_eq!(rp.destination(), None);
        assert!(is_name_surrogate(IO_REPARSE_TAG_SYMLINK));
        assert!(is_name_surrogate(IO_REPARSE_TAG_MOUNT_POINT));
        assert!(!is_name_surrogate(0x8000_0013));
    }

    #[test]
    fn truncated_buffers() {
        assert!(matches!(parse(&[]), Err(ReparseError::Truncated { .. })));
        assert!(matches!(
            parse(&[0x0c, 0, 0, 0xa0, 0]),
            Err(ReparseError::Truncated { .. })
        ));
        let full = buffer(IO_REPARSE_TAG_SYMLINK, r"\??\C:\x", r"C:\x", Some(0));
        for cut in 0..full.len() {
            assert!(parse(&full[..cut]).is_err(), "cut at {cut}");
        }
        // ReparseDataLength too small for the fixed fields.
        let mut b = full.clone();
        b[4..6].copy_from_slice(&4u16.to_le_bytes());
        assert!(matches!(parse(&b), Err(ReparseError::Truncated { .. })));
        // Extra bytes after the data are ignored.
        let mut b = full.clone();
        b.extend([0xff; 32]);
        assert!(parse(&b).is_ok());
    }

    #[test]
    fn lengths_out_of_range() {
        let full = buffer(IO_REPARSE_TAG_MOUNT_POINT, r"\??\C:\x", r"C:\x", None);
        let mut b = full.clone();
        b[10..12].copy_from_slice(&0xfffeu16.to_le_bytes()); // SubstituteNameLength
        assert!(matches!(
            parse(&b),
            Err(ReparseError::NameOutOfRange {
                name: "substitute name",
                ..
            })
        ));
        let mut b = full.clone();
        b[12..14].copy_from_slice(&0xfff0u16.to_le_bytes()); // PrintNameOffset
        assert!(matches!(
            parse(&b),
            Err(ReparseError::NameOutOfRange {
                name: "print name",
                ..
            })
        ));
        // Offset + length overflowing u16 arithmetic is still just out of range.
        let mut b = full;
        b[8..10].copy_from_slice(&0xfffeu16.to_le_bytes());
        b[10..12].copy_from_slice(&0xfffeu16.to_le_bytes());
        assert!(matches!(
            parse(&b),
            Err(ReparseError::NameOutOfRange { .. })
        ));
    }

    #[test]
    fn odd_lengths() {
        let full = buffer(IO_REPARSE_TAG_SYMLINK, r"\??\C:\x", r"C:\x", Some(0));
        let mut b = full.clone();
        b[10..12].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(
            parse(&b),
            Err(ReparseError::OddLength {
                name: "substitute name"
            })
        );
        let mut b = full;
        b[12..14].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(
            parse(&b),
            Err(ReparseError::OddLength { name: "print name" })
        );
    }

    #[test]
    fn invalid_utf16() {
        let mut b = buffer(IO_REPARSE_TAG_SYMLINK, "ab", "ab", Some(1));
        // Replace the first substitute unit with an unpaired high surrogate.
        b[20..22].copy_from_slice(&0xd800u16.to_le_bytes());
        assert_eq!(
            parse(&b),
            Err(ReparseError::InvalidUtf16 {
                name: "substitute name"
            })
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic generator; every prefix of every buffer is parsed.
        let mut x: u32 = 0x1234_5678;
        for round in 0..2000 {
            let len = (round % 64) as usize;
            let mut b = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                b.push(x as u8);
            }
            if len >= 4 {
                let tag = if round % 2 == 0 {
                    IO_REPARSE_TAG_SYMLINK
                } else {
                    IO_REPARSE_TAG_MOUNT_POINT
                };
                b[..4].copy_from_slice(&tag.to_le_bytes());
            }
            let _ = parse(&b);
        }
    }

    #[test]
    fn nt_paths() {
        assert_eq!(
            nt_to_win32(r"\??\C:\"),
            LinkDestination::Path(r"C:\".into())
        );
        assert_eq!(nt_to_win32(r"\??\c:"), LinkDestination::Path("c:".into()));
        assert_eq!(
            nt_to_win32(r"\\?\D:\data"),
            LinkDestination::Path(r"D:\data".into())
        );
        assert_eq!(
            nt_to_win32(r"\??\unc\srv\share"),
            LinkDestination::Path(r"\\srv\share".into())
        );
        assert!(matches!(
            nt_to_win32(r"\??\UNC\"),
            LinkDestination::Other(_)
        ));
        assert!(matches!(
            nt_to_win32(r"\Device\HarddiskVolume3\x"),
            LinkDestination::Other(_)
        ));
        assert!(matches!(nt_to_win32(""), LinkDestination::Other(_)));
        assert!(matches!(nt_to_win32(r"\??\C:x"), LinkDestination::Other(_)));
        assert!(matches!(
            nt_to_win32(r"\??\Volume{not-a-guid}\"),
            LinkDestination::Other(_)
        ));
        assert_eq!(
            nt_to_win32(r"\??\volume{5D3C4B2A-1F0E-4D9C-8B7A-6F5E4D3C2B1A}"),
            LinkDestination::Volume(r"\\?\Volume{5D3C4B2A-1F0E-4D9C-8B7A-6F5E4D3C2B1A}\".into())
        );
    }
}
