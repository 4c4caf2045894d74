//! Unit tests of the Linux iSCSI host's pure parts: the portals file, node-record settings,
//! secret scrubbing.

use super::*;

#[test]
fn portals_state_round_trips_and_skips_junk() {
    let text = "10.0.0.1 3260\nfe80::1 3261\n\nbad\nx 0\nh 70000\n";
    let p = parse_portals(text);
    assert_eq!(p.len(), 2);
    assert_eq!((p[1].address.as_str(), p[1].port), ("fe80::1", 3261));
}

#[test]
fn record_settings_carry_chap_and_replace_old_auth_lines() {
    let chap = Chap {
        auth_type: AuthType::MutualChap,
        username: "user".into(),
        secret: "S3cret-chap".into(),
    };
    let mutual = Secret::new("Mutual-S3cret");
    let old = "node.name = iqn.x\nnode.session.auth.authmethod = None\nnode.session.auth.password_in = stale\nnode.startup = automatic\n";
    let new = apply_settings(old, &record_settings(&chap, "iqn.x", Some(&mutual)));
    assert!(new.starts_with("node.name = iqn.x\n"), "{new}");
    assert!(
        !new.contains("stale") && !new.contains("automatic"),
        "{new}"
    );
    for line in [
        "node.session.auth.authmethod = CHAP",
        "node.session.auth.username = user",
        "node.session.auth.password = S3cret-chap",
        "node.session.auth.username_in = iqn.x",
        "node.session.auth.password_in = Mutual-S3cret",
        "node.startup = manual",
    ] {
        assert!(new.lines().any(|l| l == line), "{line} missing in {new}");
    }
    let none = Chap {
        auth_type: AuthType::None,
        username: String::new(),
        secret: Secret::default(),
    };
    let new = apply_settings(&new, &record_settings(&none, "iqn.x", Some(&mutual)));
    assert!(!new.contains("S3cret"), "{new}");
}

#[test]
fn scrub_removes_every_secret() {
    assert_eq!(
        scrub("pw=abc and abc, def", &["abc", "", "def"]),
        "pw=<redacted> and <redacted>, <redacted>"
    );
}
