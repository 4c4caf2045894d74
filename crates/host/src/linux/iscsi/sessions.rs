//! iSCSI sessions and their disks, as sysfs shows them.

use super::*;

/// Active sessions as sysfs shows them: (session dir, target name, address, port).
pub(super) fn sessions() -> Vec<(PathBuf, String, String, u16)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir("/sys/class/iscsi_session") else {
        return out;
    };
    for e in entries.flatten() {
        let dir = e.path();
        let Ok(target) = fs::read_to_string(dir.join("targetname")) else {
            continue;
        };
        // The connection's address lives under the session's device.
        let (mut addr, mut port) = (String::new(), 0);
        if let Ok(dev) = fs::read_dir(dir.join("device")) {
            for c in dev.flatten() {
                let name = c.file_name().to_string_lossy().into_owned();
                if !name.starts_with("connection") {
                    continue;
                }
                let conn = c.path().join("iscsi_connection").join(&name);
                addr = fs::read_to_string(conn.join("persistent_address"))
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                port = fs::read_to_string(conn.join("persistent_port"))
                    .ok()
                    .and_then(|p| p.trim().parse().ok())
                    .unwrap_or(0);
            }
        }
        out.push((dir, target.trim().to_string(), addr, port));
    }
    out
}

pub(super) fn session_of(portal: &TargetPortal, iqn: &str) -> Option<PathBuf> {
    sessions()
        .into_iter()
        .find(|(_, t, a, p)| t == iqn && *p == portal.port && same_address(a, &portal.address))
        .map(|(d, ..)| d)
}

pub(super) fn same_address(sysfs: &str, requested: &str) -> bool {
    use std::net::ToSocketAddrs;
    if sysfs.eq_ignore_ascii_case(requested) {
        return true;
    }
    // The request may name the portal by host name; sysfs has the address.
    (requested, 0)
        .to_socket_addrs()
        .map(|mut addrs| addrs.any(|a| a.ip().to_string() == sysfs))
        .unwrap_or(false)
}

/// Block devices under a session directory, as disk numbers (`diskseq`).
pub(super) fn session_disks(session: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![(session.join("device"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if name == "block" {
                for b in fs::read_dir(&path).into_iter().flatten().flatten() {
                    let seq = fs::read_to_string(b.path().join("diskseq"))
                        .ok()
                        .and_then(|s| s.trim().parse().ok());
                    if let Some(n) = seq {
                        out.push(n);
                    }
                }
            } else if depth < 4
                && (name.starts_with("target") || name.contains(':'))
                && e.file_type().map(|t| t.is_dir()).unwrap_or(false)
            {
                stack.push((path, depth + 1));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}
