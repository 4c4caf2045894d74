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
/// explains what differs; `Ok` when neither can be read, since then nothing can be compared.
pub fn check_host_mount_namespace() -> Result<(), String> {
    let ours = match fs::read_link("/proc/self/ns/mnt") {
        Ok(l) => l,
        Err(e) => return unknown("this process", e),
    };
    let reference = fs::read_link("/proc/1/ns/mnt")
        .map(|l| (l, "PID 1".to_string()))
        .or_else(|e| {
            let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
            tracing::debug!("PID 1's mount namespace cannot be read ({e}); comparing with the parent, PID {parent}");
            fs::read_link(format!("/proc/{parent}/ns/mnt")).map(|l| (l, format!("PID {parent}, which started it")))
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
    tracing::warn!("cannot read the mount namespace of {whose} to compare: {e}");
    Ok(())
}
