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

/// Every session to `iqn` through `portal` (open-iscsi can hold several: one per interface,
/// or ones made by other means).
pub(super) fn sessions_of(portal: &TargetPortal, iqn: &str) -> Vec<PathBuf> {
    sessions()
        .into_iter()
        .filter(|(_, t, a, p)| t == iqn && *p == portal.port && same_address(a, &portal.address))
        .map(|(d, ..)| d)
        .collect()
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

/// Block devices under a session directory, as disk numbers (`diskseq`). Fails closed: a
/// directory that cannot be read (but for one gone meanwhile) or a disk without a readable
/// `diskseq` is an error, never a disk left out of the in-use check.
pub(super) fn session_disks(session: &Path) -> std::io::Result<Vec<u32>> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mut out = Vec::new();
    let mut stack = vec![(session.join("device"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e),
        };
        for e in entries {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if name == "block" {
                for b in fs::read_dir(&path)? {
                    let b = b?;
                    let seq = fs::read_to_string(b.path().join("diskseq"))?;
                    let n = seq.trim().parse().map_err(|_| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("{}: diskseq {:?}", b.path().display(), seq.trim()),
                        )
                    })?;
                    out.push(n);
                }
            } else if depth < 4
                && (name.starts_with("target") || name.contains(':'))
                && e.file_type()?.is_dir()
            {
                stack.push((path, depth + 1));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
