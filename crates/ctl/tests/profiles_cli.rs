//! `csi-proxy-ctl profiles`: the profiles file and the owners book read from a state directory,
//! no daemon involved.

use std::path::Path;
use std::process::{Command, Output};

/// Both endpoint fields, so the same file reads on Linux (socket_dir) and Windows (pipe_prefix).
const PROFILES: &str = r#"
[[profile]]
driver = "ebs.csi.aws.com"
socket_dir = "/run/csi-proxy/ebs"
pipe_prefix = "csi-proxy-ebs"
groups = ["disk", "volume", "filesystem"]

[[profile]]
driver = "smb.csi.k8s.io"
socket_dir = "/run/csi-proxy/smb"
pipe_prefix = "csi-proxy-smb"
groups = ["smb", "filesystem"]
paths = ["/var/lib/kubelet/extra"]
"#;

/// The book as the daemon writes it: `<kind> <profile> <key>`, keys percent-escaped.
const BOOK: &str = "# csi-proxy profile owners: <kind> <profile> <key>\n\
dir ebs.csi.aws.com /var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv-1\n\
smb smb.csi.k8s.io \\\\files\\share\n\
smb ebs.csi.aws.com \\\\files\\share\n\
portal iscsi.example.com 10.0.0.9:3260\n\
session iscsi.example.com 10.0.0.9:3260%20iqn.2001-05.com.example:disk\n";

fn ctl(args: &[&str], profiles: &Path, state: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_csi-proxy-ctl"))
        .args(args)
        .arg("profiles")
        .arg("--profiles")
        .arg(profiles)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

fn state_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profiles.toml"), PROFILES).unwrap();
    dir
}

#[test]
fn each_profile_is_listed_with_what_the_owners_book_says_it_holds() {
    let dir = state_dir();
    std::fs::write(dir.path().join("profile-owners"), BOOK).unwrap();
    let file = dir.path().join("profiles.toml");
    let out = ctl(&[], &file, dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let line = |driver: &str| {
        text.lines()
            .find(|l| l.starts_with(driver))
            .unwrap_or_else(|| panic!("no line for {driver} in:\n{text}"))
            .to_string()
    };
    let place = |unix: &str, windows: &str| if cfg!(windows) { windows } else { unix }.to_string();
    let ebs = line("ebs.csi.aws.com");
    for want in [
        place("/run/csi-proxy/ebs", "csi-proxy-ebs"),
        "disk,volume,filesystem".into(),
        "/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv-1".into(),
        r"\\files\share".into(),
    ] {
        assert!(ebs.contains(&want), "{want} missing in {ebs}");
    }
    let smb = line("smb.csi.k8s.io");
    for want in [
        place("/run/csi-proxy/smb", "csi-proxy-smb"),
        "smb,filesystem".into(),
        "/var/lib/kubelet/extra".into(),
        r"\\files\share".into(),
    ] {
        assert!(smb.contains(&want), "{want} missing in {smb}");
    }
    // A holder the file no longer lists still shows, with what it holds.
    let gone = line("iscsi.example.com");
    assert!(gone.contains("10.0.0.9:3260"), "{gone}");
    assert!(
        gone.contains("10.0.0.9:3260 iqn.2001-05.com.example:disk"),
        "{gone}"
    );

    let out = ctl(&["-o", "json"], &file, dir.path());
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["profiles"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{doc}");
    assert_eq!(rows[0]["driver"], "ebs.csi.aws.com");
    assert_eq!(
        rows[0]["directories"],
        serde_json::json!(["/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv-1"])
    );
    assert_eq!(rows[1]["driver"], "smb.csi.k8s.io");
    assert_eq!(
        rows[1]["smb_mappings"],
        serde_json::json!([r"\\files\share"])
    );
    assert_eq!(
        rows[1]["paths"],
        serde_json::json!(["/var/lib/kubelet/extra"])
    );
    assert_eq!(rows[2]["driver"], "iscsi.example.com");
    assert!(rows[2]["place"].is_null());
    assert_eq!(doc["not_in_file"], serde_json::json!(["iscsi.example.com"]));
    assert_eq!(doc["owners_book_found"], true);
}

#[test]
fn without_an_owners_book_the_profiles_hold_nothing() {
    let dir = state_dir();
    let out = ctl(
        &["-o", "json"],
        &dir.path().join("profiles.toml"),
        dir.path(),
    );
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["owners_book_found"], false);
    for row in doc["profiles"].as_array().unwrap() {
        for held in [
            "directories",
            "smb_mappings",
            "portals",
            "sessions",
            "storage",
        ] {
            assert_eq!(row[held], serde_json::json!([]), "{doc}");
        }
    }
}

#[test]
fn a_bad_profiles_file_is_named_with_the_parsers_error_and_exits_non_zero() {
    let dir = state_dir();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        PROFILES.replace(
            r#"groups = ["smb", "filesystem"]"#,
            r#"groups = ["smb", "tape"]"#,
        ),
    )
    .unwrap();
    let out = ctl(&[], &bad, dir.path());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "--profiles {}: profile \"smb.csi.k8s.io\": groups: unknown group \"tape\"",
        bad.display()
    );
    assert!(err.contains(&want), "{err}");

    std::fs::write(&bad, "[[profile]]\ndriver = 1\n").unwrap();
    let out = ctl(&[], &bad, dir.path());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2"), "{err}");

    let missing = dir.path().join("missing.toml");
    let out = ctl(&[], &missing, dir.path());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&missing.display().to_string()),
        "{out:?}"
    );
}
