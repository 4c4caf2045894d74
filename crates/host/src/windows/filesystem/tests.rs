//! The path forms the filesystem host hands to Win32. Its behaviour over the simulated Windows
//! is tested in `super::super::sim::filesystem_tests`.

use super::*;

fn u(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

#[test]
fn long_paths_get_the_verbatim_prefix() {
    assert_eq!(show(&z(&u(r"C:\short"))), r"C:\short");
    let long = format!(r"C:\{}", "a".repeat(300));
    assert_eq!(show(&z(&u(&long))), format!(r"\\?\{long}"));
    let long_fwd = format!("C:/{}/b", "a".repeat(300));
    assert_eq!(
        show(&z(&u(&long_fwd))),
        format!(r"\\?\C:\{}\b", "a".repeat(300))
    );
    let unc = format!(r"\\srv\share\{}", "a".repeat(300));
    assert_eq!(
        show(&z(&u(&unc))),
        format!(r"\\?\UNC\srv\share\{}", "a".repeat(300))
    );
    let verbatim = format!(r"\\?\C:\{}", "a".repeat(300));
    assert_eq!(show(&z(&u(&verbatim))), verbatim);
    let relative = "a".repeat(300);
    assert_eq!(show(&z(&u(&relative))), relative);
}

#[test]
fn nul_is_refused() {
    assert!(wpath("C:\\a\0b").is_err());
}

#[test]
fn joins() {
    assert_eq!(show(&join(&u(r"C:\a"), &u("b"))), r"C:\a\b");
    assert_eq!(show(&join(&u(r"C:\"), &u("b"))), r"C:\b");
}

#[test]
fn parents_stop_at_the_root() {
    let p = |s: &str| parent(&u(s)).map(show);
    assert_eq!(p(r"C:\a\b").as_deref(), Some(r"C:\a"));
    assert_eq!(p(r"C:\a\b\").as_deref(), Some(r"C:\a"));
    assert_eq!(p(r"C:\a").as_deref(), Some(r"C:\"));
    assert_eq!(p(r"C:\"), None);
    assert_eq!(p(r"\\srv\share\a").as_deref(), None);
    assert_eq!(p(r"\\srv\share\a\b").as_deref(), Some(r"\\srv\share\a"));
    assert_eq!(p("relative"), None);
}
