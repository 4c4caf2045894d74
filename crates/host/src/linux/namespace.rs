//! Which mount namespace the daemon runs in.
//!
//! Mounts the daemon makes must be seen by kubelet, which lives in the host's mount namespace.
//! A service manager option that gives the daemon a namespace of its own (systemd's
//! `PrivateMounts=`, `ProtectSystem=`, `ProtectHome=`, `ReadOnlyPaths=`, …) would make every
//! MountVolume succeed into a directory kubelet sees empty, so start-up refuses it.

use std::fs;
use std::io;

/// `Ok` when this process shares the host's mount namespace: PID 1's (namespaces(7): two
/// processes are in the same namespace when their `/proc/<pid>/ns/mnt` links read the same
/// `mnt:[inode]`). Where PID 1's link cannot be read (a sandbox that hides PID 1), the process
/// that started the daemon stands in for it: a namespace made for the daemon alone
/// (`unshare -m`, a service manager's private mounts) differs from its starter's too. `Err`
/// explains what differs, and also when the links cannot be read: a check that cannot be made
/// fails closed, since a daemon in the wrong namespace answers every MountVolume with success.
pub fn check_host_mount_namespace() -> Result<(), String> {
    check_with(|path| fs::read_link(path))
}

/// [`check_host_mount_namespace`] reading each `/proc/<pid>/ns/mnt` link through `read_link`.
fn check_with(read_link: impl Fn(&str) -> io::Result<std::path::PathBuf>) -> Result<(), String> {
    let ours = match read_link("/proc/self/ns/mnt") {
        Ok(l) => l,
        Err(e) => return unknown("this process", e),
    };
    let reference = read_link("/proc/1/ns/mnt")
        .map(|l| (l, "PID 1".to_string()))
        .or_else(|e| {
            let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
            tracing::debug!("PID 1's mount namespace cannot be read ({e}); comparing with the parent, PID {parent}");
            read_link(&format!("/proc/{parent}/ns/mnt")).map(|l| (l, format!("PID {parent}, which started it")))
        });
    let (host, whose) = match reference {
        Ok(r) => r,
        Err(e) => return unknown("PID 1 and the parent", e),
    };
    if ours == host {
        return Ok(());
    }
    Err(format!(
        "csi-proxy runs in a mount namespace of its own ({}), not the host's ({} of {whose}): \
         mounts it makes would be invisible to kubelet. Remove PrivateMounts=, ProtectSystem=, \
         ProtectHome= and other sandboxing options that create a mount namespace from its \
         service unit (or run it in a container sharing the host's mount namespace)",
        ours.display(),
        host.display()
    ))
}

fn unknown(whose: &str, e: io::Error) -> Result<(), String> {
    Err(format!(
        "cannot tell whether csi-proxy runs in the host's mount namespace: the mount namespace \
         of {whose} cannot be read ({e}). Mounts made in another namespace would be invisible \
         to kubelet; run csi-proxy as root with /proc mounted and PID 1 (or the process that \
         starts it) visible"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check used to warn and serve when the links could not be read; it now refuses.
    #[test]
    fn a_check_that_cannot_be_made_fails_closed() {
        let denied = |_: &str| -> io::Result<std::path::PathBuf> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        };
        let e = check_with(denied).unwrap_err();
        assert!(
            e.contains("cannot tell") && e.contains("this process"),
            "{e}"
        );
        let only_self = |p: &str| -> io::Result<std::path::PathBuf> {
            if p == "/proc/self/ns/mnt" {
                Ok("mnt:[1]".into())
            } else {
                Err(io::Error::from(io::ErrorKind::PermissionDenied))
            }
        };
        let e = check_with(only_self).unwrap_err();
        assert!(e.contains("PID 1 and the parent"), "{e}");
        let same = |_: &str| -> io::Result<std::path::PathBuf> { Ok("mnt:[7]".into()) };
        assert_eq!(check_with(same), Ok(()));
        let other = |p: &str| -> io::Result<std::path::PathBuf> {
            Ok(if p == "/proc/self/ns/mnt" {
                "mnt:[8]"
            } else {
                "mnt:[7]"
            }
            .into())
        };
        assert!(check_with(other).unwrap_err().contains("of its own"));
    }
}
