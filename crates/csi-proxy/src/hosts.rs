//! Which host implementation serves each group on this platform: one function per platform
//! names every group's host, so a platform without one does not compile.

use crate::flags::Flags;
use csi_proxy_core::filesystem::{FilesystemHost, FilesystemService};
use csi_proxy_core::paths::PathPolicy;
use csi_proxy_server::registry::{Hosts, Services};
use std::sync::Arc;

/// The services of every group over this platform's hosts; an error (an unsafe `--state-dir`)
/// stops the start-up.
pub fn services(policy: Arc<PathPolicy>, flags: &Flags) -> Result<Services, String> {
    let (filesystem, hosts) = platform::hosts(flags, &policy)?;
    let mut s = Services::new(
        FilesystemService::new(filesystem, policy),
        hosts,
        flags.require_privacy,
    );
    // On every platform: Start/Stop only on the allowed services when --allowed-service is given.
    s.system = s.system.with_allowed_services(&flags.allowed_services);
    // On Linux no service at all without the flag: upstream's allow-everything is for Windows.
    if cfg!(target_os = "linux") && flags.allowed_services.iter().all(|n| n.is_empty()) {
        s.system = s.system.allowing_no_service();
    }
    Ok(s)
}

/// The state directory, checked (and created) by the platform's rules before anything else
/// uses it: the hand-off locks live there.
pub fn state_dir(flags: &Flags, policy: &PathPolicy) -> Result<std::path::PathBuf, String> {
    platform::state_dir(flags, policy)
}

#[cfg(target_os = "linux")]
mod platform {
    use super::*;
    use csi_proxy_host::linux;
    use std::path::{Component, Path, PathBuf};

    /// The Linux hosts.
    pub fn hosts(
        flags: &Flags,
        policy: &PathPolicy,
    ) -> Result<(Arc<dyn FilesystemHost>, Hosts), String> {
        // Everything the daemon keeps (format records, iSCSI portals and the mutual-CHAP
        // secret, the SMB mounts and their credential key) lives in the state directory, which
        // no client reaches: never beside the sockets, which every client container mounts.
        // Judged before anything is created: a refused directory is never made, also not
        // inside the kubelet path or the socket directory.
        let state = state_dir(flags, policy)?;
        // The flag's parser admits only the names FsType knows.
        let fs_type = flags.format_filesystem.parse().unwrap_or_default();
        linux::block_users::skip_unreadable_processes(flags.skip_unreadable_processes);
        let proc_only = flags.in_use_scan == "proc";
        linux::block_users::scan_proc_only(proc_only);
        // Probed now, so the log says at start what every guarded call will do.
        if proc_only {
            tracing::info!(method = "/proc (--in-use-scan proc)", "in-use facts");
        } else {
            linux::task_iter::shared().method();
        }
        Ok((
            Arc::new(linux::filesystem::LinuxFilesystemHost::new()),
            Hosts {
                disk: Arc::new(linux::disk::LinuxDiskHost::new()),
                volume: Arc::new(
                    linux::volume::LinuxVolumeHost::new(&state, fs_type)
                        .with_mount_filesystems(flags.mount_filesystems.clone()),
                ),
                smb: Arc::new(linux::smb::LinuxSmbHost::new(state.join("smb"))),
                system: Arc::new(linux::system::LinuxSystemHost::new()),
                iscsi: Arc::new(linux::iscsi::LinuxIscsiHost::new(state.join("iscsi"))),
            },
        ))
    }

    /// The state directory, refused when clients reach it, created 0700 when missing.
    pub fn state_dir(flags: &Flags, policy: &PathPolicy) -> Result<PathBuf, String> {
        not_shared(Path::new(&flags.state_dir), flags, policy)?;
        linux::state_dir::prepare(Path::new(&flags.state_dir))
    }

    /// Refuses a state directory that clients reach: the socket directory, the kubelet path or
    /// a working dir, one inside them, or one holding them.
    fn not_shared(state: &Path, flags: &Flags, policy: &PathPolicy) -> Result<(), String> {
        let state = real(state);
        let shared = std::iter::once(("--socket-dir", flags.socket_dir.as_str())).chain(
            policy
                .roots()
                .iter()
                .map(|r| ("--kubelet-path/--working-dir", r.as_str())),
        );
        for (flag, dir) in shared {
            let dir = real(Path::new(dir));
            if state.starts_with(&dir) || dir.starts_with(&state) {
                return Err(format!(
                    "--state-dir {:?} overlaps {flag} {:?}, which clients reach; the daemon's \
                     state must live where no client can read or write it",
                    state.display(),
                    dir.display()
                ));
            }
        }
        Ok(())
    }

    /// Where `p` is, or will be once created: each component that exists resolved as the
    /// kernel does (links followed), each one still to be made appended (a `..` after one is
    /// that new directory's parent, as `create_dir_all` makes it).
    fn real(p: &Path) -> PathBuf {
        let mut out = PathBuf::new();
        let mut exists = true;
        for c in p.components() {
            match c {
                Component::ParentDir if !exists => {
                    out.pop();
                    // Back in a directory that exists (already resolved): resolve again.
                    exists = out.exists();
                }
                Component::CurDir if !exists => {}
                c => {
                    out.push(c);
                    if exists {
                        match std::fs::canonicalize(&out) {
                            Ok(r) => out = r,
                            Err(_) => exists = false,
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(windows)]
mod platform {
    use super::*;
    use csi_proxy_host::windows;

    /// The state directory, SYSTEM's and Administrators' alone.
    pub fn state_dir(flags: &Flags, _policy: &PathPolicy) -> Result<std::path::PathBuf, String> {
        let dir = std::path::Path::new(&flags.state_dir);
        windows::state_dir::prepare(&windows::win32::state_dir::SystemStateDir, dir)?;
        Ok(dir.to_path_buf())
    }

    /// The Windows hosts.
    pub fn hosts(
        flags: &Flags,
        _policy: &PathPolicy,
    ) -> Result<(Arc<dyn FilesystemHost>, Hosts), String> {
        // The format records decide what FormatVolume may format: their folder is SYSTEM's and
        // Administrators' alone, or the daemon does not start.
        state_dir(flags, _policy)?;
        Ok((
            Arc::new(windows::filesystem::WindowsFilesystemHost::new()),
            Hosts {
                disk: Arc::new(windows::disk::WindowsDiskHost::new()),
                volume: Arc::new(windows::volume::WindowsVolumeHost::new(&flags.state_dir)),
                smb: Arc::new(windows::smb::WindowsSmbHost::new()),
                system: Arc::new(windows::system::WindowsSystemHost::new()),
                iscsi: Arc::new(windows::iscsi::WindowsIscsiHost::new()),
            },
        ))
    }
}
