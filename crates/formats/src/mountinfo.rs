//! A parser for `/proc/self/mountinfo` (proc(5), "/proc/pid/mountinfo").
//!
//! Each line is
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! (1)(2)(3)   (4)   (5)         (6)       (7)    (8) (9)   (10)      (11)
//! ```
//!
//! mount ID, parent ID, `major:minor` of the filesystem, root of the mount within its
//! filesystem, mount point relative to the process root, per-mount options, zero or more
//! optional fields, a `-` separator, filesystem type, mount source, per-superblock options.
//! The kernel escapes space, tab, newline and backslash in paths as a backslash and three octal
//! digits (`\040`, `\011`, `\012`, `\134`); [`unescape`] decodes them.
//!
//! Pure functions over the table's bytes; the Linux host reads the file.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// Field 1: unique ID of the mount (may be reused after unmount).
    pub mount_id: u64,
    /// Field 2: ID of the parent mount (itself for the root of the mount tree).
    pub parent_id: u64,
    /// Field 3: major device number of the filesystem.
    pub major: u32,
    /// Field 3: minor device number of the filesystem.
    pub minor: u32,
    /// Field 4: the directory of the filesystem that forms the root of this mount (`/` when
    /// the whole filesystem is mounted; a subdirectory for a bind mount of a subtree).
    pub root: PathBuf,
    /// Field 5: the mount point, relative to the process's root directory.
    pub mount_point: PathBuf,
    /// Field 6: per-mount options.
    pub mount_options: String,
    /// Field 7: optional fields (`shared:N`, `master:N`, `propagate_from:N`, `unbindable`).
    pub optional_fields: Vec<String>,
    /// Field 9: filesystem type (`ext4`, `tmpfs`, `fuse.sshfs`, …).
    pub fs_type: String,
    /// Field 10: filesystem-specific source (`/dev/sda1`, `tmpfs`, `server:/export`, …).
    pub source: String,
    /// Field 11: per-superblock options.
    pub super_options: String,
}

/// A line that is not in the documented format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number (1 for [`parse_line`]).
    pub line: usize,
    /// What was wrong.
    pub reason: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mountinfo line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

impl From<ParseError> for io::Error {
    fn from(e: ParseError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// Decodes the kernel's `\ooo` octal escapes; any other backslash is kept as is.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = |d: u8| (b'0'..=b'7').contains(&d).then(|| u32::from(d - b'0'));
        if field[i] == b'\\'
            && let Some(&[a, b, c]) = field.get(i + 1..i + 4)
            && let (Some(a), Some(b), Some(c)) = (octal(a), octal(b), octal(c))
            && let Ok(byte) = u8::try_from(a * 64 + b * 8 + c)
        {
            out.push(byte);
            i += 4;
            continue;
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

/// A path field as the kernel's bytes (Linux paths are bytes, not necessarily UTF-8). The table
/// exists only on Linux; elsewhere (this crate builds for Windows too) the bytes are read as
/// UTF-8, lossily.
fn path_field(field: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        PathBuf::from(std::ffi::OsString::from_vec(unescape(field)))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(&unescape(field)).into_owned())
    }
}

fn text_field(field: &[u8]) -> String {
    String::from_utf8_lossy(&unescape(field)).into_owned()
}

/// Parses one line (without its newline).
///
/// Fields are separated by single spaces and may be empty (a mount whose source is the empty
/// string shows as two spaces in a row); the separator is the first " - ", which no field can
/// hold since the kernel escapes spaces in paths.
pub fn parse_line(line: &[u8]) -> Result<MountInfo, ParseError> {
    let err = |reason| ParseError { line: 1, reason };
    let sep = line
        .windows(3)
        .position(|w| w == b" - ")
        .ok_or(err("no \" - \" separator"))?;
    let fields: Vec<&[u8]> = line[..sep].split(|&b| b == b' ').collect();
    if fields.len() < 6 {
        return Err(err("fewer than 6 fields before the separator"));
    }
    let after: Vec<&[u8]> = line[sep + 3..].splitn(3, |&b| b == b' ').collect();
    let [fs_type, source, super_options] = after[..] else {
        return Err(err("fewer than 3 fields after the separator"));
    };
    let number = |f: &[u8], what| {
        std::str::from_utf8(f)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(err(what))
    };
    let mount_id = number(fields[0], "mount ID is not a number")?;
    let parent_id = number(fields[1], "parent ID is not a number")?;
    let (major, minor) = std::str::from_utf8(fields[2])
        .ok()
        .and_then(|s| s.split_once(':'))
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or(err("device is not major:minor"))?;
    Ok(MountInfo {
        mount_id,
        parent_id,
        major,
        minor,
        root: path_field(fields[3]),
        mount_point: path_field(fields[4]),
        mount_options: text_field(fields[5]),
        optional_fields: fields[6..]
            .iter()
            .filter(|f| !f.is_empty())
            .map(|f| text_field(f))
            .collect(),
        fs_type: text_field(fs_type),
        source: text_field(source),
        super_options: text_field(super_options),
    })
}

/// Parses a whole table; any malformed line is an error (the kernel's format is fixed, so a
/// bad line means we are not reading what we think we are).
pub fn parse(content: &[u8]) -> Result<Vec<MountInfo>, ParseError> {
    content
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| parse_line(l).map_err(|e| ParseError { line: i + 1, ..e }))
        .collect()
}

/// The mount with this ID.
pub fn by_id(table: &[MountInfo], mount_id: u64) -> Option<&MountInfo> {
    table.iter().find(|m| m.mount_id == mount_id)
}

/// The topmost mount at `mount_point` (when several are stacked on the same directory, the one
/// no other mount at that directory is mounted on), or `None` if nothing is mounted there.
pub fn topmost_at<'a>(table: &'a [MountInfo], mount_point: &Path) -> Option<&'a MountInfo> {
    let here: Vec<&MountInfo> = table
        .iter()
        .filter(|m| m.mount_point == mount_point)
        .collect();
    here.iter()
        .copied()
        .find(|m| {
            !here
                .iter()
                .any(|o| o.parent_id == m.mount_id && o.mount_id != m.mount_id)
        })
        .or_else(|| here.last().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 22 0:45 / /var/lib/kubelet/pods/a\\040b/volumes rw,relatime - tmpfs tmpfs rw,size=1024k
41 22 8:1 /srv/data\\011x /var/lib/kubelet/bind rw shared:3 master:2 - ext4 /dev/sda1 rw
42 40 0:46 / /var/lib/kubelet/pods/a\\040b/volumes rw - tmpfs none rw
";

    #[test]
    fn parses_documented_example() {
        let m = parse_line(
            b"36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
        )
        .unwrap();
        assert_eq!(
            m,
            MountInfo {
                mount_id: 36,
                parent_id: 35,
                major: 98,
                minor: 0,
                root: "/mnt1".into(),
                mount_point: "/mnt/parent".into(),
                mount_options: "rw,noatime".into(),
                optional_fields: vec!["master:1".into()],
                fs_type: "ext3".into(),
                source: "/dev/root".into(),
                super_options: "rw,errors=continue".into(),
            }
        );
    }

    #[test]
    fn parses_table_with_escapes_and_optional_fields() {
        let t = parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(
            t[3].mount_point,
            Path::new("/var/lib/kubelet/pods/a b/volumes")
        );
        assert_eq!(t[3].optional_fields, Vec::<String>::new());
        assert_eq!(t[4].root, Path::new("/srv/data\tx"));
        assert_eq!(t[4].optional_fields, vec!["shared:3", "master:2"]);
        assert_eq!(by_id(&t, 23).unwrap().fs_type, "proc");
        assert!(by_id(&t, 99).is_none());
    }

    #[test]
    fn topmost_of_stacked_mounts() {
        let t = parse(SAMPLE.as_bytes()).unwrap();
        let top = topmost_at(&t, Path::new("/var/lib/kubelet/pods/a b/volumes")).unwrap();
        assert_eq!(top.mount_id, 42);
        assert_eq!(topmost_at(&t, Path::new("/")).unwrap().mount_id, 22);
        assert!(topmost_at(&t, Path::new("/var")).is_none());
    }

    #[test]
    fn unescape_cases() {
        assert_eq!(unescape(br"a\040b"), b"a b");
        assert_eq!(unescape(br"\134"), b"\\");
        assert_eq!(unescape(br"\012\011"), b"\n\t");
        // Not an escape: kept verbatim.
        assert_eq!(unescape(br"a\04"), br"a\04");
        assert_eq!(unescape(br"a\089"), br"a\089");
        assert_eq!(unescape(br"\777"), br"\777");
        assert_eq!(unescape(b"\\"), b"\\");
        // Non-UTF-8 bytes survive in paths.
        assert_eq!(unescape(br"\377"), [0xff]);
    }

    #[test]
    fn malformed_lines() {
        assert!(parse_line(b"").is_err());
        assert!(parse_line(b"1 2 3:4 / /x rw ext4 /dev/x rw").is_err()); // no separator
        assert!(parse_line(b"1 2 3:4 / /x - ext4 /dev/x rw").is_err()); // too few before
        assert!(parse_line(b"1 2 3:4 / /x rw - ext4 /dev/x").is_err()); // too few after
        assert!(parse_line(b"x 2 3:4 / /x rw - ext4 /dev/x rw").is_err());
        assert!(parse_line(b"1 2 34 / /x rw - ext4 /dev/x rw").is_err());
        let e = parse(b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\nbad\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    /// `mount -t tmpfs "" /x` gives an empty source: two spaces in a row. Before, the fields
    /// after the separator shifted, the line failed, and with it the whole table.
    #[test]
    fn empty_fields_are_kept() {
        let m = parse_line(b"50 22 0:60 / /x rw,relatime shared:9 - tmpfs  rw,size=4k").unwrap();
        assert_eq!(m.fs_type, "tmpfs");
        assert_eq!(m.source, "");
        assert_eq!(m.super_options, "rw,size=4k");
        assert_eq!(m.optional_fields, vec!["shared:9".to_string()]);
        let t = parse(b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n50 22 0:60 / /x rw - tmpfs  rw\n")
            .unwrap();
        assert_eq!(t.len(), 2);
        // No optional fields at all.
        let m = parse_line(b"1 2 3:4 / /x rw - ext4 /dev/x rw").unwrap();
        assert!(m.optional_fields.is_empty());
    }
}
