//! Reparse buffers on byte fixtures: every tag this parser reads, and hostile lengths.

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
