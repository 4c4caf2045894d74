//! Volume names, paths and the decisions of the Windows volume host.
//!
//! A volume is named by its volume GUID path `\\?\Volume{GUID}\` ("Naming a Volume": the form
//! `FindFirstVolumeW` returns and `GetVolumeNameForVolumeMountPointW` answers). The volume group
//! hands these out verbatim as volume IDs. The same GUID names the volume device
//! `\\.\Volume{GUID}` (no trailing backslash: with it, `CreateFileW` would open the root directory
//! of the filesystem instead of the volume).

/// A volume ID in the one form this host hands out, checked character by character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeName {
    /// The GUID text between the braces, lower-cased (Windows prints them lower-case).
    guid: String,
}

impl VolumeName {
    /// Parses exactly `\\?\Volume{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}\` (hex digits of any
    /// case); anything else is `None`, so no other string reaches a Win32 call as a volume name.
    pub fn parse(id: &str) -> Option<VolumeName> {
        let inner = id.strip_prefix(r"\\?\Volume{")?.strip_suffix(r"}\")?;
        let ok = inner.len() == 36
            && inner.char_indices().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == '-',
                _ => c.is_ascii_hexdigit(),
            });
        ok.then(|| VolumeName {
            guid: inner.to_ascii_lowercase(),
        })
    }

    /// The GUID text, lower-case, without braces.
    pub fn guid(&self) -> &str {
        &self.guid
    }

    /// `\\?\Volume{GUID}\`: the name Win32 volume calls take (SetVolumeMountPointW requires the
    /// trailing backslash).
    pub fn guid_path(&self) -> String {
        format!(r"\\?\Volume{{{}}}\", self.guid)
    }

    /// `\\.\Volume{GUID}`: the volume device, for `CreateFileW` and device I/O controls.
    pub fn device_path(&self) -> String {
        format!(r"\\.\Volume{{{}}}", self.guid)
    }
}

/// Whether two volume names denote the same volume (GUID text compared case-insensitively, as
/// Windows' object names are).
pub fn same_volume(a: &str, b: &str) -> bool {
    match (VolumeName::parse(a), VolumeName::parse(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// `path` with exactly one trailing backslash, as `SetVolumeMountPointW`,
/// `DeleteVolumeMountPointW` and `GetVolumeNameForVolumeMountPointW` require of a mount point.
pub fn mount_point_path(path: &str) -> String {
    let mut p = path.trim_end_matches(['\\', '/']).to_string();
    p.push('\\');
    p
}

/// Whether a filesystem name from `GetVolumeInformationW` means the volume carries a
/// filesystem: anything but empty or `RAW` (the name Windows reports for an unrecognised
/// volume).
pub fn filesystem_present(name: &str) -> bool {
    let n = name.trim();
    !n.is_empty() && !n.eq_ignore_ascii_case("RAW")
}

/// The number of sectors of `bytes_per_sector` a filesystem occupies when it fills a partition
/// of `partition_length` bytes: the input of `FSCTL_EXTEND_VOLUME` ("the total number of
/// sectors that should be in the extended volume"). One short of the partition: NTFS keeps its
/// backup boot sector in the partition's last sector, outside the volume (as `format` leaves
/// it).
pub fn extend_sectors(partition_length: u64, bytes_per_sector: u32) -> u64 {
    (partition_length / u64::from(bytes_per_sector.max(1))).saturating_sub(1)
}

/// The filesystem is extended when it is smaller than its partition by more than this: NTFS
/// keeps its backup boot sector in the last sector and rounds to whole clusters (at most 2 MiB),
/// so a filesystem that fills its partition is a little smaller than it.
pub const FS_SLACK: u64 = 8 << 20;

/// `s` as a WQL string literal between single quotes: backslash and quote are escaped with a
/// backslash ("WQL-Supported Data Types": strings use `\` as the escape character).
pub fn wql_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\\' || c == '\'' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = r"\\?\Volume{0a1b2c3d-4e5f-6789-abcd-ef0123456789}\";

    #[test]
    fn volume_ids_parse_exactly() {
        let v = VolumeName::parse(ID).unwrap();
        assert_eq!(v.guid_path(), ID);
        assert_eq!(
            v.device_path(),
            r"\\.\Volume{0a1b2c3d-4e5f-6789-abcd-ef0123456789}"
        );
        let upper = r"\\?\Volume{0A1B2C3D-4E5F-6789-ABCD-EF0123456789}\";
        assert!(same_volume(ID, upper));
        for bad in [
            "",
            "-1",
            r"\\?\Volume{0a1b2c3d-4e5f-6789-abcd-ef0123456789}",
            r"\\.\Volume{0a1b2c3d-4e5f-6789-abcd-ef0123456789}\",
            r"\\?\Volume{0a1b2c3d-4e5f-6789-abcd-ef012345678}\",
            r"\\?\Volume{0a1b2c3d-4e5f-6789-abcd-ef01234567890}\",
            r"\\?\Volume{0a1b2c3d_4e5f-6789-abcd-ef0123456789}\",
            r"\\?\Volume{0a1b2c3d-4e5f-6789-abcd-ef012345678g}\",
            r"\\?\Volume{0a1b2c3d-4e5f-6789-abcd-ef0123456789}\..\",
            r"\\?\C:\",
            "\\\\?\\Volume{0a1b2c3d-4e5f-6789-abcd-ef01234567é}\\",
        ] {
            assert_eq!(VolumeName::parse(bad), None, "{bad:?}");
        }
        assert!(!same_volume(ID, "-1"));
    }

    #[test]
    fn mount_points_end_in_one_backslash() {
        assert_eq!(mount_point_path(r"C:\var\x"), r"C:\var\x\");
        assert_eq!(mount_point_path(r"C:\var\x\\"), r"C:\var\x\");
        assert_eq!(mount_point_path("C:/var/x/"), r"C:/var/x\");
    }

    #[test]
    fn filesystem_names() {
        assert!(filesystem_present("NTFS"));
        assert!(filesystem_present("ReFS"));
        assert!(filesystem_present("FAT32"));
        assert!(!filesystem_present("RAW"));
        assert!(!filesystem_present("raw"));
        assert!(!filesystem_present(""));
    }

    #[test]
    fn wql_strings_are_escaped() {
        assert_eq!(wql_string(ID), format!("'{}'", ID.replace('\\', r"\\")));
        assert_eq!(wql_string("a'b"), r"'a\'b'");
    }
}
