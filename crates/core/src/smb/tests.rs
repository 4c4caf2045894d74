//! Remote-path parsing, link-target forms and the mapping decision.

use super::*;

#[test]
fn remote_paths_normalise_to_a_lower_cased_share_root() {
    let cases = [
        (
            "\\\\Host\\Share\\sub\\dir",
            "\\\\host\\share",
            "\\\\Host\\Share\\sub\\dir",
        ),
        (
            "//Host/Share/sub",
            "\\\\host\\share",
            "\\\\Host\\Share\\sub",
        ),
        ("Host\\Share", "\\\\host\\share", "Host\\Share"),
        ("\\\\h\\\\s\\", "\\\\h\\s", "\\\\h\\\\s\\"),
    ];
    for (input, root, path) in cases {
        let r = RemotePath::parse("Op", input).unwrap();
        assert_eq!((r.root.as_str(), r.path.as_str()), (root, path), "{input}");
    }
}

#[test]
fn remote_paths_without_a_share_are_invalid() {
    let bad = [
        "",
        "hostname",
        "\\\\hostname",
        "\\\\hostname\\",
        "//",
        "\\\\?\\c:",
        "\\\\.\\pipe",
    ];
    for remote in bad {
        let e = RemotePath::parse("Op", remote).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument, "{remote}");
    }
    let e = RemotePath::parse("Op", "hostname").unwrap_err();
    assert!(
        e.message().contains("remote path \"hostname\" is invalid"),
        "{}",
        e.message()
    );
    let e = RemotePath::parse("Op", "").unwrap_err();
    assert!(
        e.message().contains("remote path is empty"),
        "{}",
        e.message()
    );
}

#[test]
fn server_names_stay_strict_and_share_names_refuse_only_what_no_unc_path_carries() {
    for remote in [
        "\\\\srv,ip=10.0.0.1\\share",
        "\\\\[::1]\\share",
        "\\\\srv=1\\share",
        "\\\\srv;x\\share",
    ] {
        let e = RemotePath::parse("NewSmbGlobalMapping", remote).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument, "{remote}");
        assert!(
            e.message().contains("no SMB server name"),
            "{}",
            e.message()
        );
    }
    for c in ['"', ':', '|', '<', '>', '?', '*'] {
        let remote = format!("\\\\srv\\a{c}b");
        let e = RemotePath::parse("NewSmbGlobalMapping", &remote).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument, "{remote}");
        assert!(
            e.message().contains("the share name contains"),
            "{}",
            e.message()
        );
    }
    // Samba and NAS exports carry these: each is accepted, kept verbatim in the path, and only
    // lower-cased in the root.
    for c in ['[', ']', '+', '=', ';', ','] {
        for share in [format!("A{c}b"), format!("{c}"), format!("x{c}{c}y{c}")] {
            let remote = format!("\\\\Nas01\\{share}\\Sub");
            let r = RemotePath::parse("NewSmbGlobalMapping", &remote).unwrap();
            assert_eq!(r.path, remote);
            assert_eq!(r.root, format!("\\\\nas01\\{}", share.to_lowercase()));
            assert_eq!(r.sub_components(), ["Sub"]);
        }
    }
    // Names real drivers use stay valid, and the directory part is not restricted.
    for remote in [
        "\\\\account.file.core.windows.net\\pvc-1\\dir,with=odd;chars",
        "//10.0.0.4/share$",
        "\\\\smb-server_1\\data-01",
        "\\\\fs01\\Team Share\\pvc 1",
        "//fs01/Team Share",
        "\\\\nas\\x,file_mode=0777",
        "//nas/[team]+a=b;c,d",
    ] {
        RemotePath::parse("NewSmbGlobalMapping", remote).unwrap();
    }
}

#[test]
fn secrets_never_show_in_debug() {
    let req = NewSmbGlobalMappingRequest {
        remote_path: "\\\\s\\h".into(),
        username: "u".into(),
        password: "pa55word".into(),
        ..Default::default()
    };
    let creds = SmbCredentials {
        username: "u".into(),
        password: "pa55word".into(),
    };
    let shown = format!("{req:?} {req:#?} {creds:?}");
    assert!(!shown.contains("pa55word"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    assert_eq!(format!("{:?}", Secret::default()), "\"\"");
    assert_eq!(Secret::new("x").expose(), "x");
}
