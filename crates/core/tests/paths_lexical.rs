//! Lexical path rules: hostile and legitimate tables for both styles, upstream's table, roots.

use csi_proxy_core::Kind;
use csi_proxy_core::paths::{
    LinkProbe, LinkTarget, POSIX_MAX_PATH_BYTES, PathPolicy, PathStyle, WINDOWS_MAX_PATH_UNITS,
};
use std::cell::RefCell;
use std::io;

const I: Kind = Kind::InvalidArgument;
const P: Kind = Kind::PermissionDenied;

fn posix() -> PathPolicy {
    PathPolicy::new(
        PathStyle::Posix,
        "/var/lib/kubelet",
        &["/tmp/csi-work".to_string()],
    )
    .unwrap()
}

fn windows() -> PathPolicy {
    PathPolicy::new(
        PathStyle::Windows,
        r"C:\var\lib\kubelet",
        &[r"D:\csi".to_string()],
    )
    .unwrap()
}

/// Records every probe; lexically refused paths must never reach it.
#[derive(Default)]
struct Recorder(RefCell<Vec<String>>);

impl LinkProbe for Recorder {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        self.0.borrow_mut().push(path.to_string());
        Ok(None)
    }
}

/// A path for a failure message: long ones are cut so the report stays readable.
fn short(path: &str) -> String {
    if path.len() <= 120 {
        format!("{path:?}")
    } else {
        let head: String = path.chars().take(60).collect();
        format!("{head:?}… ({} bytes)", path.len())
    }
}

/// Asserts every row is refused with its kind by `check`, `confine` and `confine_following`,
/// without probing, and that messages name the operation and the path.
fn assert_rejected(policy: &PathPolicy, table: &[(String, Kind)]) {
    let mut failures = Vec::new();
    for (path, kind) in table {
        let probe = Recorder::default();
        let results = [
            policy.check("Mkdir", path),
            policy.confine("Mkdir", path, &probe),
            policy.confine_following("Mkdir", path, &probe),
        ];
        for r in results {
            match r {
                Ok(n) => failures.push(format!("{}: accepted as {}", short(path), short(&n))),
                Err(e) if e.kind() != *kind => {
                    failures.push(format!("{}: {:?} not {kind:?}: {e}", short(path), e.kind()))
                }
                Err(e) => {
                    let prefix = if path.len() <= 512 {
                        format!("Mkdir {path:?}: ")
                    } else {
                        "Mkdir \"".to_string()
                    };
                    if !e.message().starts_with(&prefix) {
                        failures.push(format!("{}: message {:?}", short(path), e.message()));
                    }
                }
            }
        }
        if !probe.0.borrow().is_empty() {
            failures.push(format!(
                "{}: probed {:?}",
                short(path),
                probe.0.borrow().len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Asserts every row is accepted by `check` and `confine` with the given normalised result.
fn assert_accepted(policy: &PathPolicy, table: &[(String, String)]) {
    let mut failures = Vec::new();
    for (path, want) in table {
        let probe = Recorder::default();
        for r in [
            policy.check("Mkdir", path),
            policy.confine("Mkdir", path, &probe),
            policy.confine_following("Mkdir", path, &probe),
        ] {
            match r {
                Ok(got) if got == *want => {}
                Ok(got) => failures.push(format!(
                    "{}: {} not {}",
                    short(path),
                    short(&got),
                    short(want)
                )),
                Err(e) => failures.push(format!("{}: refused: {e}", short(path))),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

fn rows(table: &[(&str, Kind)]) -> Vec<(String, Kind)> {
    table.iter().map(|(p, k)| (p.to_string(), *k)).collect()
}

fn pairs(table: &[(&str, &str)]) -> Vec<(String, String)> {
    table
        .iter()
        .map(|(p, n)| (p.to_string(), n.to_string()))
        .collect()
}

#[test]
fn posix_hostile_paths_are_rejected() {
    let mut table = rows(&[
        // Empty and relative.
        ("", I),
        ("var/lib/kubelet/x", I),
        ("./var/lib/kubelet", I),
        ("../var/lib/kubelet", I),
        ("~/x", I),
        (".", I),
        ("..", I),
        ("...", I),
        (" /var/lib/kubelet", I),
        ("\\var\\lib\\kubelet", I),
        ("C:\\var\\lib\\kubelet", I),
        ("file:///var/lib/kubelet", I),
        // Traversal: `..` is refused even where it would end inside.
        ("/..", I),
        ("/../var/lib/kubelet", I),
        ("/var/lib/kubelet/..", I),
        ("/var/lib/kubelet/../", I),
        ("/var/lib/kubelet/../x", I),
        ("/var/lib/kubelet/../kubelet/x", I),
        ("/var/lib/kubelet/./../x", I),
        ("/var/lib/kubelet/pods/../../../etc", I),
        ("/var/lib/kubelet/x/..", I),
        ("/var/lib/kubelet/x/../..", I),
        ("/var/lib/kubelet/.../..", I),
        ("/var/lib/kubelet/x/../../kubelet-evil", I),
        ("/var/lib/kubelet-evil/../kubelet/x", I),
        ("/tmp/csi-work/../../etc/shadow", I),
        ("/sys/../var/lib/kubelet", I),
        ("/run/../var/lib/kubelet/x", I),
        // Prefix tricks: component-wise, not string prefix.
        ("/var/lib/kubelet-evil", P),
        ("/var/lib/kubelet-evil/x", P),
        ("/var/lib/kubelet2/x", P),
        ("/var/lib/kubele", P),
        ("/var/lib/kubelet /x", P),
        ("/var/lib/kubelet./x", P),
        ("/var/lib/kubelet\\..\\..\\etc", P),
        ("/var/lib/kubelet%2f..%2fetc", P),
        ("/var/lib/kubelet\u{200b}/x", P),
        ("/var/lib/kubelet\u{ff0f}x", P),
        ("/tmp/csi-work-evil", P),
        ("/tmp/csi-workx/y", P),
        ("/tmp/csi/work", P),
        ("/./var/lib/kubelet-evil", P),
        ("/var/./lib/kubelet2", P),
        ("//var//lib//kubelet-evil", P),
        ("/var/lib/./kubelet-evil/", P),
        // POSIX is case-sensitive.
        ("/VAR/lib/kubelet/x", P),
        ("/var/lib/Kubelet/x", P),
        ("/var/lib/KUBELET", P),
        ("/TMP/csi-work/x", P),
        // Ancestors of roots and elsewhere.
        ("/var/lib", P),
        ("/var", P),
        ("/", P),
        ("//", P),
        ("/tmp", P),
        ("/etc/passwd", P),
        ("/proc/self/root/var/lib/kubelet", P),
        ("/dev/null", P),
        // NUL and other control characters.
        ("/var/lib/kubelet\0/x", I),
        ("/var/lib/kubelet/x\0", I),
        ("/tmp/csi-work\0", I),
        ("/var/lib/kubelet/\n", I),
        ("/var/lib/kubelet/x\r", I),
        ("/var/lib/kubelet/a\tb", I),
        ("/var/lib/kubelet/\u{1b}[31m", I),
        ("/var/lib/kubelet/\u{7f}", I),
        ("/var/lib/kubelet/\u{85}", I),
        ("/var/lib/kubelet/\u{9b}", I),
    ]);
    // Overlong components and paths.
    table.push((format!("/var/lib/kubelet/{}", "a".repeat(256)), I));
    table.push((format!("/var/lib/kubelet/{}/b", "a".repeat(300)), I));
    table.push((format!("/var/lib/kubelet/{}", "é".repeat(128)), I)); // 256 bytes
    let long = format!("/var/lib/kubelet{}", "/abcdefg".repeat(510)); // 4096 bytes
    assert_eq!(long.len(), POSIX_MAX_PATH_BYTES + 1);
    table.push((long, I));
    table.push((format!("/var/lib/kubelet{}", "/x".repeat(50_000)), I));
    assert!(table.len() >= 60, "{} rows", table.len());
    assert_rejected(&posix(), &table);
}

#[test]
fn posix_legitimate_paths_are_accepted_normalised() {
    let mut table = pairs(&[
        ("/var/lib/kubelet", "/var/lib/kubelet"),
        ("/var/lib/kubelet/", "/var/lib/kubelet"),
        ("/var/lib/kubelet/.", "/var/lib/kubelet"),
        ("/var/lib/kubelet/pods/pv1", "/var/lib/kubelet/pods/pv1"),
        ("//var//lib///kubelet//pods/", "/var/lib/kubelet/pods"),
        ("/var/lib/kubelet/./pods/./x", "/var/lib/kubelet/pods/x"),
        ("/./var/./lib/kubelet", "/var/lib/kubelet"),
        ("/tmp/csi-work", "/tmp/csi-work"),
        ("/tmp/csi-work/a/b/", "/tmp/csi-work/a/b"),
        ("/var/lib/kubelet/a..b", "/var/lib/kubelet/a..b"),
        ("/var/lib/kubelet/...", "/var/lib/kubelet/..."),
        ("/var/lib/kubelet/.hidden", "/var/lib/kubelet/.hidden"),
        ("/var/lib/kubelet/%2e%2e", "/var/lib/kubelet/%2e%2e"),
        ("/var/lib/kubelet/a\\b", "/var/lib/kubelet/a\\b"),
        ("/var/lib/kubelet/x.", "/var/lib/kubelet/x."),
        ("/var/lib/kubelet/a b", "/var/lib/kubelet/a b"),
        ("/var/lib/kubelet/CON", "/var/lib/kubelet/CON"),
        ("/var/lib/kubelet/a:b", "/var/lib/kubelet/a:b"),
        ("/var/lib/kubelet/ünïcødé", "/var/lib/kubelet/ünïcødé"),
        (
            "/var/lib/kubelet/pods/uid/volumes/kubernetes.io~csi/pv/mount",
            "/var/lib/kubelet/pods/uid/volumes/kubernetes.io~csi/pv/mount",
        ),
        (
            "/var/lib/kubelet/plugins/kubernetes.io/csi/drv/globalmount",
            "/var/lib/kubelet/plugins/kubernetes.io/csi/drv/globalmount",
        ),
    ]);
    let comp255 = format!("/var/lib/kubelet/{}", "a".repeat(255));
    table.push((comp255.clone(), comp255));
    let multibyte = format!("/var/lib/kubelet/{}a", "é".repeat(127)); // 255 bytes
    table.push((multibyte.clone(), multibyte));
    let max = format!("/var/lib/kubelet{}/abcdef", "/abcdefg".repeat(509)); // 4095 bytes
    assert_eq!(max.len(), POSIX_MAX_PATH_BYTES);
    table.push((max.clone(), max));
    assert_accepted(&posix(), &table);
}

/// Kubelet hands drivers staging paths rooted without a drive; some drivers pass them on as
/// they are (gce-pd's IsSymlink and MountVolume, azuredisk's unmount). They name the kubelet
/// path's drive, as Win32 would resolve them against the current drive.
#[test]
fn windows_rooted_paths_take_the_kubelet_paths_drive() {
    let staging =
        r"\var\lib\kubelet\plugins\kubernetes.io\csi\pd.csi.storage.gke.io\abc\globalmount";
    let probe = Recorder::default();
    for (kubelet, want) in [
        (r"C:\var\lib\kubelet", r"C:\var\lib\kubelet\plugins"),
        (r"d:\var\lib\kubelet", r"d:\var\lib\kubelet\plugins"),
    ] {
        let policy = PathPolicy::new(PathStyle::Windows, kubelet, &[]).unwrap();
        let got = policy.check("MountVolume", staging).unwrap();
        assert!(got.starts_with(want), "{got}");
        assert!(got.ends_with(r"abc\globalmount"), "{got}");
        assert_eq!(policy.confine("IsSymlink", staging, &probe).unwrap(), got);
    }
    let w = windows();
    for (path, kind) in [
        (r"\", Kind::PermissionDenied),
        (r"\Windows\System32", Kind::PermissionDenied),
        (r"\var\lib\kubelet-evil\x", Kind::PermissionDenied),
        (r"\var\lib\kubelet\..\..\Windows", Kind::InvalidArgument),
        (r"\var\lib\kubelet\x:stream", Kind::InvalidArgument),
    ] {
        let e = w.check("Mkdir", path).unwrap_err();
        assert_eq!(e.kind(), kind, "{path}: {e}");
    }
}

#[test]
fn windows_hostile_paths_are_rejected() {
    let mut table = rows(&[
        // Empty and relative.
        ("", I),
        (r"pv1\foo", I),
        (r"var\lib\kubelet", I),
        (r".\x", I),
        (r"..\x", I),
        // UNC and namespace forms.
        (r"\\server\share", I),
        (r"\\server\share\var\lib\kubelet", I),
        (r"\\?\C:\var\lib\kubelet\x", I),
        (r"\\?\c:\var\lib\kubelet", I),
        (r"\\.\C:\var\lib\kubelet\x", I),
        (r"\\.\PhysicalDrive0", I),
        (r"\\.\pipe\csi-proxy-filesystem-v1", I),
        (r"\??\C:\var\lib\kubelet\x", I),
        (r"\??\UNC\server\share", I),
        (r"\\?\UNC\server\share\x", I),
        (r"\\?\unc\server\share\x", I),
        (r"\\?\GLOBALROOT\Device\HarddiskVolume1\x", I),
        (r"\\?\Volume{01234567-89ab-cdef-0123-456789abcdef}\x", I),
        (r"\\csi-plugin\..\..\..\system32", I),
        ("//server/share", I),
        ("//?/C:/var/lib/kubelet", I),
        // Drive-relative (rooted paths are qualified: see the test below).
        (r"C:var\lib\kubelet", I),
        (r"C:", I),
        (r"C:..\x", I),
        (r"1:\x", I),
        (r"ä:\x", I),
        (r"CC:\x", I),
        (r"C::\x", I),
        // Alternate data streams.
        (r"C:\var\lib\kubelet\x:stream", I),
        (r"C:\var\lib\kubelet\x::$DATA", I),
        (r"C:\var\lib\kubelet\x:stream:$DATA", I),
        (r"C:\var\lib\kubelet::$INDEX_ALLOCATION", I),
        (r"C:\var\lib\kubelet\pods\pv1:foo", I),
        // Reserved device names, with and without extension, any case.
        (r"C:\var\lib\kubelet\CON", I),
        (r"C:\var\lib\kubelet\con", I),
        (r"C:\var\lib\kubelet\nul.txt", I),
        (r"C:\var\lib\kubelet\NUL", I),
        (r"C:\var\lib\kubelet\NUL\x", I),
        (r"C:\var\lib\kubelet\COM1", I),
        (r"C:\var\lib\kubelet\com9.log", I),
        (r"C:\var\lib\kubelet\COM0", I),
        (r"C:\var\lib\kubelet\LPT1", I),
        (r"C:\var\lib\kubelet\lpt9\x", I),
        (r"C:\var\lib\kubelet\PRN", I),
        (r"C:\var\lib\kubelet\AUX.tar.gz", I),
        ("C:\\var\\lib\\kubelet\\COM\u{b9}", I),
        ("C:\\var\\lib\\kubelet\\com\u{b2}", I),
        ("C:\\var\\lib\\kubelet\\LPT\u{b3}.txt", I),
        (r"C:\var\lib\kubelet\CONIN$", I),
        (r"C:\var\lib\kubelet\conout$", I),
        (r"c:\var\lib\kubelet\conin$.txt", I),
        (r"C:\var\lib\kubelet\CON .txt", I),
        // Trailing dot or space (aliases), `.` components, `..` anywhere.
        (r"C:\var\lib\kubelet\x.", I),
        (r"C:\var\lib\kubelet\x ", I),
        (r"C:\var\lib\kubelet\x \y", I),
        (r"C:\var\lib\kubelet.\x", I),
        (r"C:\var\lib\kubelet \x", I),
        (r"C:\var\lib\kubelet\.\x", I),
        (r"C:\var\lib\kubelet\.", I),
        (r"C:\var\lib\kubelet\x...", I),
        (r"C:\var\lib\kubelet\a..b", I),
        (r"C:\var\lib\kubelet\..\..\Windows", I),
        (r"C:\var\lib\kubelet\pods\pv1\..\..\..\system32", I),
        (r"C:\..\var\lib\kubelet", I),
        // Characters Windows forbids, and '/'.
        (r#"C:\var\lib\kubelet\"x""#, I),
        (r"C:\var\lib\kubelet\*", I),
        (r"C:\var\lib\kubelet\x?", I),
        (r"C:\var\lib\kub?let\x", I),
        (r"C:\var\lib\kubelet\a|b", I),
        (r"C:\var\lib\kubelet\<x", I),
        (r"C:\var\lib\kubelet\x>", I),
        (r"C:\var\lib\kubelet/x", I),
        (r"C:/var/lib/kubelet/x", I),
        // Control characters.
        ("C:\\var\\lib\\kubelet\\x\0", I),
        ("C:\\var\\lib\\kubelet\\x\n", I),
        ("C:\\var\\lib\\kubelet\\\u{1f}x", I),
        ("C:\\var\\lib\\kubelet\\x\u{7f}", I),
        ("C:\\var\\lib\\kubelet\\x\u{85}", I),
        // Well formed but outside: other drives, prefix tricks, ancestors.
        (r"E:\var\lib\kubelet\x", P),
        (r"D:\var\lib\kubelet\x", P),
        (r"C:\csi\x", P),
        (r"C:\var\lib\kubelet-evil", P),
        (r"C:\var\lib\kubelet2\x", P),
        (r"c:\var\lib\KUBELET-EVIL\x", P),
        (r"C:\var\lib\kubelet~1\x", P),
        ("C:\\var\\lib\\\u{212a}ubelet\\x", P),
        (r"C:\ var\lib\kubelet", P),
        (r"C:\var\lib", P),
        (r"C:\", P),
        (r"C:\\", P),
        (r"C:\Windows\System32", P),
        (r"D:\csi-evil\x", P),
        (r"D:\", P),
    ]);
    // Overlong components (UTF-16 units, not bytes) and paths.
    table.push((format!(r"C:\var\lib\kubelet\{}", "a".repeat(256)), I));
    table.push((format!(r"C:\var\lib\kubelet\{}", "😀".repeat(128)), I)); // 256 units
    let long = format!(r"C:\var\lib\kubelet{}", r"\abcdefg".repeat(4094)); // 32,770 units
    assert!(long.encode_utf16().count() > WINDOWS_MAX_PATH_UNITS);
    table.push((long, I));
    let just_over = {
        let head = r"C:\var\lib\kubelet";
        let mut s = head.to_string();
        while s.len() + 8 <= WINDOWS_MAX_PATH_UNITS {
            s.push_str(r"\abcdefg");
        }
        while s.len() <= WINDOWS_MAX_PATH_UNITS {
            s.push('x');
        }
        s
    };
    assert_eq!(just_over.encode_utf16().count(), WINDOWS_MAX_PATH_UNITS + 1);
    table.push((just_over, I));
    assert!(table.len() >= 60, "{} rows", table.len());
    assert_rejected(&windows(), &table);
}

#[test]
fn windows_legitimate_paths_are_accepted_normalised() {
    let mut table = pairs(&[
        (r"C:\var\lib\kubelet", r"C:\var\lib\kubelet"),
        (r"C:\var\lib\kubelet\", r"C:\var\lib\kubelet"),
        (r"c:\VAR\LIB\KUBELET\ok", r"c:\VAR\LIB\KUBELET\ok"),
        (
            r"C:\var\lib\kubelet\\pods\\\pv1\",
            r"C:\var\lib\kubelet\pods\pv1",
        ),
        (r"C:\\var\lib\kubelet", r"C:\var\lib\kubelet"),
        (r"D:\csi\x", r"D:\csi\x"),
        (r"d:\CSI", r"d:\CSI"),
        (
            r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\pv\globalmount",
            r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\pv\globalmount",
        ),
        (
            r"c:\var\lib\kubelet\pods\uid\volumes\kubernetes.io~csi\pv\mount",
            r"c:\var\lib\kubelet\pods\uid\volumes\kubernetes.io~csi\pv\mount",
        ),
        (r"C:\var\lib\kubelet\.hidden", r"C:\var\lib\kubelet\.hidden"),
        (r"C:\var\lib\kubelet\a.b.c", r"C:\var\lib\kubelet\a.b.c"),
        (r"C:\var\lib\kubelet\CONSOLE", r"C:\var\lib\kubelet\CONSOLE"),
        (r"C:\var\lib\kubelet\COM10", r"C:\var\lib\kubelet\COM10"),
        (r"C:\var\lib\kubelet\LPT", r"C:\var\lib\kubelet\LPT"),
        (
            r"C:\var\lib\kubelet\NULL.txt",
            r"C:\var\lib\kubelet\NULL.txt",
        ),
        (r"C:\var\lib\kubelet\xCON", r"C:\var\lib\kubelet\xCON"),
        (r"C:\var\lib\kubelet\ lead", r"C:\var\lib\kubelet\ lead"),
        (r"C:\var\lib\kubelet\a b", r"C:\var\lib\kubelet\a b"),
        (r"C:\var\lib\kubelet\x$", r"C:\var\lib\kubelet\x$"),
        (r"C:\var\lib\kubelet\a~1", r"C:\var\lib\kubelet\a~1"),
        (r"C:\var\lib\kubelet\{guid}", r"C:\var\lib\kubelet\{guid}"),
        (r"C:\var\lib\kubelet\日本語", r"C:\var\lib\kubelet\日本語"),
    ]);
    let comp255 = format!(r"C:\var\lib\kubelet\{}a", "😀".repeat(127)); // 255 units
    table.push((comp255.clone(), comp255));
    let max = {
        let mut s = r"C:\var\lib\kubelet".to_string();
        while s.len() + 8 <= WINDOWS_MAX_PATH_UNITS {
            s.push_str(r"\abcdefg");
        }
        while s.len() < WINDOWS_MAX_PATH_UNITS {
            s.push('x');
        }
        s
    };
    assert_eq!(max.encode_utf16().count(), WINDOWS_MAX_PATH_UNITS);
    table.push((max.clone(), max));
    assert_accepted(&windows(), &table);
}

/// Upstream's own table of Windows path answers, working dirs = [`C:\var\lib\kubelet`], same for
/// Mkdir and Rmdir.
#[test]
fn upstream_windows_table_gives_the_same_answers() {
    let policy = PathPolicy::new(PathStyle::Windows, r"C:\var\lib\kubelet", &[]).unwrap();
    let table: [(&str, Option<Kind>); 11] = [
        (r"C:\foo\bar", Some(P)),
        (r"C:\var\lib\kubelet\pods\pv1", None),
        (r"C:\var\lib\kubelet\plugins\pv1", None),
        (r"C:\var\lib\kubelet\plugins\csi-plugin\pv1:foo", Some(I)),
        (r"C:\var\lib\kubelet\pods\pv1/foo", Some(I)),
        (r"C:\var\lib\kubelet\plugins\csi-plugin\pv1*foo", Some(I)),
        (r"C:\var\lib\kubelet\pods\pv1?foo", Some(I)),
        (r"C:\var\lib\kubelet\plugins\csi-plugin|pv1\foo", Some(I)),
        (r"C:\var\lib\kubelet\pods\pv1\..\..\..\system32", Some(I)),
        (r"\\csi-plugin\..\..\..\system32", Some(I)),
        (r"pv1\foo", Some(I)),
    ];
    for op in ["Mkdir", "Rmdir"] {
        for (path, want) in table {
            match (policy.check(op, path), want) {
                (Ok(n), None) => assert_eq!(n, path),
                (Err(e), Some(k)) => {
                    assert_eq!(e.kind(), k, "{path}: {e}");
                    assert!(e.message().starts_with(&format!("{op} {path:?}: ")), "{e}");
                }
                (r, w) => panic!("{op} {path}: got {r:?}, want {w:?}"),
            }
        }
    }
}

#[test]
fn messages_name_operation_path_and_cause() {
    let e = posix()
        .check("Mkdir", "/var/lib/kubelet-evil/x")
        .unwrap_err();
    assert_eq!(
        e.message(),
        r#"Mkdir "/var/lib/kubelet-evil/x": not within the allowed roots [/tmp/csi-work, /var/lib/kubelet]"#
    );
    let e = posix().check("Rmdir", "/var/lib/kubelet/../x").unwrap_err();
    assert_eq!(
        e.message(),
        r#"Rmdir "/var/lib/kubelet/../x": '..' components are not allowed"#
    );
    let e = posix().check("Mkdir", "").unwrap_err();
    assert_eq!(e.message(), r#"Mkdir "": path is empty"#);
    let e = posix().check("Mkdir", "/var/lib/kubelet/a\0").unwrap_err();
    assert_eq!(
        e.message(),
        r#"Mkdir "/var/lib/kubelet/a\0": contains the control character '\0'"#
    );
    let e = windows()
        .check("Mkdir", r"C:\var\lib\kubelet\nul.txt")
        .unwrap_err();
    assert_eq!(
        e.message(),
        r#"Mkdir "C:\\var\\lib\\kubelet\\nul.txt": component "nul.txt" is the reserved device name NUL"#
    );
    let e = windows()
        .check("PathExists", r"\\?\UNC\srv\share")
        .unwrap_err();
    assert!(
        e.message().contains(r"\\?\UNC\ (extended-length UNC)"),
        "{e}"
    );
    let e = windows().check("PathExists", r"C:\x:y").unwrap_err();
    assert!(e.message().contains("alternate data streams"), "{e}");
    let e = windows().check("Mkdir", r"E:\x").unwrap_err();
    assert_eq!(
        e.message(),
        r#"Mkdir "E:\\x": not within the allowed roots [D:\csi, C:\var\lib\kubelet]"#
    );
    // A huge path is not echoed whole.
    let huge = format!("/var/lib/kubelet{}", "/x".repeat(100_000));
    let e = posix().check("Mkdir", &huge).unwrap_err();
    assert_eq!(e.kind(), I);
    assert!(e.message().len() < 400, "{}", e.message().len());
    assert!(e.message().contains("200016 bytes"), "{e}");
}

#[test]
fn roots_are_validated_and_normalised() {
    let p = PathPolicy::new(
        PathStyle::Posix,
        "/var/lib/kubelet/",
        &["//tmp//csi-work/.".to_string(), "/srv/x".to_string()],
    )
    .unwrap();
    assert_eq!(p.roots(), ["/tmp/csi-work", "/srv/x", "/var/lib/kubelet"]);
    assert_eq!(p.style(), PathStyle::Posix);

    let w = PathPolicy::new(
        PathStyle::Windows,
        r"c:\var\lib\kubelet\",
        &[r"D:\\csi\\".to_string()],
    )
    .unwrap();
    assert_eq!(w.roots(), [r"D:\csi", r"c:\var\lib\kubelet"]);
    assert_eq!(w.style(), PathStyle::Windows);

    let bad_posix: [(&str, &[&str], &str); 12] = [
        ("/", &[], "--kubelet-path \"/\": the filesystem root"),
        ("//", &[], "--kubelet-path \"//\": the filesystem root"),
        ("/./", &[], "--kubelet-path \"/./\": the filesystem root"),
        ("", &[], "--kubelet-path \"\": path is empty"),
        ("var/lib/kubelet", &[], "not an absolute path"),
        ("/var/../", &[], "'..' components"),
        ("/var/lib/kubelet\0", &[], "control character"),
        (
            "/var/lib/kubelet",
            &[""],
            "--working-dir \"\": path is empty",
        ),
        (
            "/var/lib/kubelet",
            &["/"],
            "--working-dir \"/\": the filesystem root",
        ),
        (
            "/var/lib/kubelet",
            &["relative"],
            "--working-dir \"relative\"",
        ),
        ("/var/lib/kubelet", &["/ok", "/"], "--working-dir \"/\""),
        (r"C:\var\lib\kubelet", &[], "not an absolute path"),
    ];
    for (kubelet, dirs, needle) in bad_posix {
        let dirs: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
        let e = PathPolicy::new(PathStyle::Posix, kubelet, &dirs).unwrap_err();
        assert_eq!(e.kind(), I, "{kubelet:?} {dirs:?}");
        assert!(e.message().contains(needle), "{kubelet:?}: {e}");
    }

    let bad_windows: [(&str, &[&str], &str); 11] = [
        (r"C:\", &[], r#"--kubelet-path "C:\\": the filesystem root"#),
        (r"c:\\", &[], "the filesystem root"),
        (r"C:", &[], "drive-relative"),
        ("", &[], "path is empty"),
        (r"\\server\share", &[], "UNC paths"),
        (r"\\?\C:\var", &[], "extended-length"),
        (r"\var\lib\kubelet", &[], "rooted paths"),
        ("/var/lib/kubelet", &[], "'/'"),
        (r"C:\var\lib\kubelet", &[r"D:\"], r#"--working-dir "D:\\""#),
        (
            r"C:\var\lib\kubelet",
            &[""],
            "--working-dir \"\": path is empty",
        ),
        (
            r"C:\var\lib\kubelet",
            &[r"C:\x\NUL"],
            "reserved device name",
        ),
    ];
    for (kubelet, dirs, needle) in bad_windows {
        let dirs: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
        let e = PathPolicy::new(PathStyle::Windows, kubelet, &dirs).unwrap_err();
        assert_eq!(e.kind(), I, "{kubelet:?} {dirs:?}");
        assert!(e.message().contains(needle), "{kubelet:?}: {e}");
    }
}

#[test]
fn is_root_recognises_roots_in_any_spelling_but_nothing_else() {
    let p = posix();
    for yes in [
        "/var/lib/kubelet",
        "/var/lib/kubelet/",
        "//var/lib/./kubelet",
        "/var/lib/kubelet/x/..",
        "/tmp/csi-work",
    ] {
        assert!(p.is_root(yes), "{yes}");
    }
    for no in [
        "/var/lib/kubelet/x",
        "/var/lib",
        "/",
        "",
        "var/lib/kubelet",
        "/var/lib/kubelet-evil",
        "/VAR/lib/kubelet",
        "/tmp/csi-work/a",
    ] {
        assert!(!p.is_root(no), "{no}");
    }
    let w = windows();
    for yes in [
        r"C:\var\lib\kubelet",
        r"c:\VAR\LIB\KUBELET",
        r"C:\var\lib\kubelet\",
        r"C:\var\lib\kubelet.",
        r"C:\var\lib\kubelet. \",
        r"C:/var/lib/kubelet",
        r"\\?\C:\var\lib\kubelet",
        r"\??\C:\var\lib\kubelet",
        r"C:\var\lib\kubelet\x\..",
        r"d:\CSI",
    ] {
        assert!(w.is_root(yes), "{yes}");
    }
    for no in [
        r"C:\var\lib\kubelet\x",
        r"C:\var\lib",
        r"C:\",
        "",
        r"\var\lib\kubelet",
        r"C:\var\lib\kubelet-evil",
        r"D:\var\lib\kubelet",
        r"D:\csi\x",
    ] {
        assert!(!w.is_root(no), "{no}");
    }
    // Whatever check/confine return for a root is recognised as one.
    for input in ["/var/lib/kubelet/./", "//tmp/csi-work//"] {
        assert!(p.is_root(&p.check("Rmdir", input).unwrap()), "{input}");
    }
    assert!(w.is_root(&w.check("Rmdir", r"c:\Var\Lib\Kubelet\\").unwrap()));
}

#[test]
fn native_style_matches_the_build_target() {
    let want = if cfg!(windows) {
        PathStyle::Windows
    } else {
        PathStyle::Posix
    };
    assert_eq!(PathStyle::native(), want);
}
