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

/// ConnectTarget on an existing session succeeds only for the CHAP settings the session was
/// made with (as its node record has them); anything else, or a session without a record, is
/// refused, naming which settings differ but no secret.
#[test]
fn an_existing_session_is_only_reused_with_its_own_chap_settings() {
    let chap = |auth_type, user: &str, secret: &str| Chap {
        auth_type,
        username: user.into(),
        secret: Secret::new(secret),
    };
    let mutual = Secret::new("Mutual-S3cret");
    let base = "node.name = iqn.x\nnode.session.auth.chap_algs = MD5\nnode.startup = manual\n";
    let made_with =
        |c: &Chap, m: Option<&Secret>| apply_settings(base, &record_settings(c, "iqn.x", m));

    let alice = chap(AuthType::OneWayChap, "alice", "Alice-S3cret");
    let record = made_with(&alice, None);
    session_chap_matches(Some(&record), &alice, "iqn.x", None).unwrap();
    for other in [
        chap(AuthType::OneWayChap, "alice", "Alice-S3creT"),
        chap(AuthType::OneWayChap, "bob", "Alice-S3cret"),
        chap(AuthType::None, "", ""),
        chap(AuthType::MutualChap, "alice", "Alice-S3cret"),
    ] {
        let e = session_chap_matches(Some(&record), &other, "iqn.x", Some(&mutual)).unwrap_err();
        assert!(e.contains("DisconnectTarget first"), "{e}");
        assert!(!e.contains("S3cret"), "{e}");
    }
    let e = session_chap_matches(
        Some(&record),
        &chap(AuthType::OneWayChap, "alice", "wrong"),
        "iqn.x",
        None,
    )
    .unwrap_err();
    assert!(e.contains("(password differ)"), "{e}");

    // No authentication: a record iscsiadm wrote itself (method None, empty fields) matches.
    let none = chap(AuthType::None, "", "");
    let plain = "node.name = iqn.x\nnode.session.auth.authmethod = None\nnode.session.auth.username = \nnode.session.auth.password = \n";
    session_chap_matches(Some(plain), &none, "iqn.x", None).unwrap();
    assert!(session_chap_matches(Some(plain), &alice, "iqn.x", None).is_err());

    // Mutual CHAP compares the node's mutual secret too.
    let m = chap(AuthType::MutualChap, "alice", "Alice-S3cret");
    let record = made_with(&m, Some(&mutual));
    session_chap_matches(Some(&record), &m, "iqn.x", Some(&mutual)).unwrap();
    let e = session_chap_matches(Some(&record), &m, "iqn.x", Some(&Secret::new("rotated")))
        .unwrap_err();
    assert!(e.contains("password_in"), "{e}");

    // A session open-iscsi keeps no record of cannot be compared: refused.
    assert!(session_chap_matches(None, &none, "iqn.x", None).is_err());
}
