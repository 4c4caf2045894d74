//! Confinement decisions over a scripted link probe, both path styles.

use super::lexical::reserved_device_name;
use super::*;

#[test]
fn reserved_device_names_cover_extensions_case_and_superscripts() {
    for (comp, name) in [
        ("CON", "CON"),
        ("con", "CON"),
        ("nul.txt", "NUL"),
        ("NUL .txt", "NUL"),
        ("Aux.tar.gz", "AUX"),
        ("prn", "PRN"),
        ("COM1", "COM1"),
        ("com0", "COM0"),
        ("LPT9.log", "LPT9"),
        ("COM\u{b9}", "COM\u{b9}"),
        ("lpt\u{b3}.x", "LPT\u{b3}"),
        ("CONIN$", "CONIN$"),
        ("conout$.txt", "CONOUT$"),
    ] {
        assert_eq!(reserved_device_name(comp).as_deref(), Some(name), "{comp}");
    }
    for comp in [
        "CONSOLE",
        "COM10",
        "COM",
        "LPT",
        "xCON",
        "NULL.txt",
        "COM1x",
        "con_1",
        "CONIN",
        "é",
        "",
        "COM\u{b4}",
    ] {
        assert_eq!(reserved_device_name(comp), None, "{comp}");
    }
}

#[test]
fn windows_link_targets_parse_to_start_and_components() {
    let w = PathStyle::Windows;
    assert_eq!(
        parse_target(w, r"\??\C:\var\lib").unwrap(),
        (Start::Drive("C:"), vec!["var", "lib"])
    );
    assert_eq!(
        parse_target(w, r"\\?\d:\csi\").unwrap(),
        (Start::Drive("d:"), vec!["csi"])
    );
    assert_eq!(
        parse_target(w, r"C:/var/lib").unwrap(),
        (Start::Drive("C:"), vec!["var", "lib"])
    );
    assert_eq!(
        parse_target(w, r"..\a\.\b").unwrap(),
        (Start::Relative, vec!["..", "a", ".", "b"])
    );
    for bad in [
        "",
        r"\??\UNC\srv\share",
        r"\\?\unc\srv\share",
        r"\\srv\share",
        r"//srv/share",
        r"\\.\PhysicalDrive0",
        r"\??\Volume{01234567-89ab-cdef-0123-456789abcdef}\",
        r"\Windows",
        r"C:Windows",
        r"C:\x:stream",
        r"C:\kubelet.\x",
        r"C:\x\CON",
        "C:\\x\u{1}",
        r"C:\a\...\b",
    ] {
        assert!(parse_target(w, bad).is_err(), "{bad:?}");
    }
}

#[test]
fn posix_link_targets_parse_to_start_and_components() {
    let p = PathStyle::Posix;
    assert_eq!(
        parse_target(p, "/etc//x/").unwrap(),
        (Start::Root, vec!["etc", "x"])
    );
    assert_eq!(
        parse_target(p, "../a/./b").unwrap(),
        (Start::Relative, vec!["..", "a", ".", "b"])
    );
    assert!(parse_target(p, "").is_err());
}

#[test]
fn render_round_trips_both_styles() {
    assert_eq!(PathStyle::Posix.render::<&str>(&[]), "/");
    assert_eq!(PathStyle::Posix.render(&["a", "b"]), "/a/b");
    assert_eq!(PathStyle::Windows.render(&["C:"]), "C:\\");
    assert_eq!(PathStyle::Windows.render(&["C:", "a", "b"]), r"C:\a\b");
}

#[test]
fn shown_truncates_only_huge_input() {
    assert_eq!(shown("/a\"b"), "\"/a\\\"b\"");
    let long = "x".repeat(5000);
    let s = shown(&long);
    assert!(s.ends_with("… (5000 bytes)"), "{s}");
    assert!(s.len() < 200, "{s}");
}

#[test]
fn windows_comparison_folds_ascii_only() {
    let w = PathStyle::Windows;
    assert!(w.same("KUBELET", "kubelet"));
    // The Kelvin sign lowercases to `k` but NTFS keeps it distinct: never equate them.
    assert!(!w.same("\u{212a}ubelet", "kubelet"));
    assert!(!w.same("É", "é"));
    assert!(!PathStyle::Posix.same("Kubelet", "kubelet"));
}

#[test]
fn limits_are_the_documented_values() {
    assert_eq!(POSIX_MAX_PATH_BYTES, 4095);
    assert_eq!(WINDOWS_MAX_PATH_UNITS, 32_763);
    assert_eq!(MAX_COMPONENT_LEN, 255);
    assert_eq!(MAX_LINK_HOPS, 40);
}
