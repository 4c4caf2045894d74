//! Running open-iscsi's `iscsiadm`, and the node records it keeps: where they are, the settings
//! a login needs written into them, secrets kept off command lines and out of messages.

use super::*;

/// Where open-iscsi keeps node records (Debian first, then the RHEL layout).
const NODE_DIRS: [&str; 2] = ["/etc/iscsi/nodes", "/var/lib/iscsi/nodes"];
/// How long one `iscsiadm` run may take (login retries are limited in the record too).
const ISCSIADM_TIMEOUT: Duration = Duration::from_secs(90);
/// `iscsiadm` exit status for "no records / sessions found".
const ISCSI_ERR_NO_OBJS_FOUND: i32 = 21;

pub(super) fn find_iscsiadm() -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join("iscsiadm"))
        .find(|p| p.exists())
}

/// Replaces every occurrence of the non-empty `secrets` in `text`.
pub fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(s, "<redacted>");
    }
    out
}

/// Refuses values that would break the one-line-per-key record format.
pub(super) fn record_value_ok(op: &str, iqn: &str, what: &str, v: &str) -> Result<()> {
    if v.chars().any(|c| c.is_control()) {
        return Err(Error::invalid(
            op,
            format!("target {iqn:?}"),
            format!("{what} contains a control character"),
        ));
    }
    Ok(())
}

/// The node-record lines a login needs: authentication, manual startup, bounded retries.
pub fn record_settings(
    chap: &Chap,
    iqn: &str,
    mutual: Option<&Secret>,
) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("node.startup", "manual".to_string()),
        ("node.session.initial_login_retry_max", "1".to_string()),
        ("node.conn[0].timeo.login_timeout", "15".to_string()),
    ];
    match chap.auth_type {
        AuthType::None => v.push(("node.session.auth.authmethod", "None".into())),
        AuthType::OneWayChap | AuthType::MutualChap => {
            v.push(("node.session.auth.authmethod", "CHAP".into()));
            v.push(("node.session.auth.username", chap.username.clone()));
            v.push((
                "node.session.auth.password",
                chap.secret.expose().to_string(),
            ));
        }
    }
    if chap.auth_type == AuthType::MutualChap
        && let Some(m) = mutual
    {
        // The target answers the initiator's challenge under its own name.
        v.push(("node.session.auth.username_in", iqn.to_string()));
        v.push(("node.session.auth.password_in", m.expose().to_string()));
    }
    v
}

/// The authentication keys a login compares: what [`record_settings`] writes.
const AUTH_KEYS: [&str; 5] = [
    "node.session.auth.authmethod",
    "node.session.auth.username",
    "node.session.auth.password",
    "node.session.auth.username_in",
    "node.session.auth.password_in",
];

/// Whether an existing session, whose node record reads `record` (`None`: open-iscsi keeps no
/// record of it, as for a session an operator made by other means), was made with the CHAP
/// settings a ConnectTarget with `chap` (and the node's `mutual` secret) would write. `Err`
/// says why not, without any secret. An empty value counts as absent, and method `None` as no
/// method.
pub fn session_chap_matches(
    record: Option<&str>,
    chap: &Chap,
    iqn: &str,
    mutual: Option<&Secret>,
) -> std::result::Result<(), String> {
    let Some(record) = record else {
        return Err(
            "open-iscsi keeps no node record of the session, so its CHAP credentials \
                    cannot be compared"
                .into(),
        );
    };
    let auth = |pairs: &mut dyn Iterator<Item = (String, String)>| {
        let mut m = std::collections::BTreeMap::new();
        for (k, v) in pairs {
            let v = if k == AUTH_KEYS[0] && v.eq_ignore_ascii_case("none") {
                String::new()
            } else {
                v
            };
            if AUTH_KEYS.contains(&k.as_str()) && !v.is_empty() {
                m.insert(k, v);
            }
        }
        m
    };
    let have = auth(&mut record.lines().filter_map(|l| {
        let (k, v) = l.split_once('=')?;
        Some((k.trim().to_string(), v.trim().to_string()))
    }));
    let want = auth(
        &mut record_settings(chap, iqn, mutual)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
    );
    let differing: Vec<&str> = AUTH_KEYS
        .iter()
        .filter(|k| !same_value(have.get(**k), want.get(**k), k.contains("password")))
        .map(|k| k.trim_start_matches("node.session.auth."))
        .collect();
    if differing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a session to this target exists, made with other CHAP settings ({} differ); \
             DisconnectTarget first to log in with these",
            differing.join(", ")
        ))
    }
}

/// Equality of two record values; secrets compared without an early exit on the first
/// differing byte.
fn same_value(a: Option<&String>, b: Option<&String>, secret: bool) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if secret => {
            a.len() == b.len()
                && a.bytes()
                    .zip(b.bytes())
                    .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                    == 0
        }
        (a, b) => a == b,
    }
}

/// `text` (a node record) with every key of `settings` replaced by its new value.
pub fn apply_settings(text: &str, settings: &[(&'static str, String)]) -> String {
    let keys: Vec<&str> = settings.iter().map(|(k, _)| *k).collect();
    let mut out: String = text
        .lines()
        .filter(|l| {
            let key = l.split('=').next().unwrap_or("").trim();
            !keys.contains(&key) && !key.starts_with("node.session.auth.")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    for (k, v) in settings {
        out.push_str(&format!("{k} = {v}\n"));
    }
    out
}

/// Finds the node record file of `iqn` at `portal` under open-iscsi's node directories.
pub(super) fn node_record(iqn: &str, portal: &TargetPortal) -> Option<PathBuf> {
    let prefixes = [
        format!("{},{},", portal.address, portal.port),
        format!("[{}],{},", portal.address, portal.port),
    ];
    for dir in NODE_DIRS {
        let Ok(entries) = fs::read_dir(Path::new(dir).join(iqn)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !prefixes.iter().any(|p| name.starts_with(p)) {
                continue;
            }
            let path = e.path();
            if path.is_dir() {
                // Newer layout: one file per interface; `default` is the one logins use.
                let f = path.join("default");
                if f.exists() {
                    return Some(f);
                }
                if let Some(first) = fs::read_dir(&path).ok()?.flatten().next() {
                    return Some(first.path());
                }
            } else {
                return Some(path);
            }
        }
    }
    None
}

/// Output of an `iscsiadm` run.
pub(super) struct Run {
    pub(super) code: i32,
    pub(super) output: String,
}

/// Runs `iscsiadm args` with a time limit; no secret is ever among `args`.
pub(super) fn iscsiadm(op: &str, object: &str, args: &[&str]) -> Result<Run> {
    let bin = find_iscsiadm().ok_or_else(|| {
        Error::new(
            Kind::FailedPrecondition,
            op,
            object,
            "iscsiadm (open-iscsi) is not installed",
        )
    })?;
    let mut cmd = Command::new(&bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::linux::tool::child_setup(&mut cmd);
    let child = cmd.spawn().map_err(|e| Error::io(op, object, &e))?;
    let done = crate::linux::tool::finish(child, Some(ISCSIADM_TIMEOUT)).map_err(|e| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            Error::new(
                Kind::DeadlineExceeded,
                op,
                object,
                format!(
                    "iscsiadm {} did not finish within {ISCSIADM_TIMEOUT:?}",
                    args.join(" ")
                ),
            )
        } else {
            Error::io(op, object, &e)
        }
    })?;
    let mut output = String::from_utf8_lossy(&done.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&done.stderr));
    Ok(Run {
        code: done.status.code().unwrap_or(-1),
        output: output.trim().to_string(),
    })
}

/// Runs `iscsiadm args` for an undo step: success, or "no objects found" (what it undoes is
/// already gone, as after a retry), is OK; any other exit is UNAVAILABLE, `failure` plus the
/// exit code and output.
pub(super) fn iscsiadm_unless_gone(
    op: &str,
    object: &str,
    args: &[&str],
    failure: &str,
) -> Result<()> {
    let r = iscsiadm(op, object, args)?;
    if r.code != 0 && r.code != ISCSI_ERR_NO_OBJS_FOUND {
        return Err(Error::new(
            Kind::Unavailable,
            op,
            object,
            format!("{failure} (exit {}): {}", r.code, r.output),
        ));
    }
    Ok(())
}
