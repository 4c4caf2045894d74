//! Which host implementation serves each group on this platform: one function per platform
//! names every group's host, so a platform without one does not compile.

use crate::flags::Flags;
use csi_proxy_core::filesystem::{FilesystemHost, FilesystemService};
use csi_proxy_core::paths::PathPolicy;
use csi_proxy_server::registry::{Hosts, Services};
use std::sync::Arc;

/// The services of every group over this platform's hosts.
pub fn services(policy: Arc<PathPolicy>, flags: &Flags) -> Services {
    let (filesystem, hosts) = platform::hosts(flags);
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
    s
}

#[cfg(target_os = "linux")]
mod platform {
    use super::*;
    use csi_proxy_host::linux;

    /// The Linux hosts.
    pub fn hosts(flags: &Flags) -> (Arc<dyn FilesystemHost>, Hosts) {
        // SMB mounts and iSCSI bookkeeping live beside the sockets (`/run/csi-proxy/{smb,iscsi}`
        // by default): daemon-owned, kept across daemon restarts, gone with a reboot like the
        // mounts and sessions themselves.
        let state = std::path::Path::new(&flags.socket_dir);
        // The flag's parser admits only the names FsType knows.
        let fs_type = flags.format_filesystem.parse().unwrap_or_default();
        (
            Arc::new(linux::filesystem::LinuxFilesystemHost::new()),
            Hosts {
                disk: Arc::new(linux::disk::LinuxDiskHost::new()),
                volume: Arc::new(linux::volume::LinuxVolumeHost::new(
                    &flags.state_dir,
                    fs_type,
                )),
                smb: Arc::new(linux::smb::LinuxSmbHost::new(state.join("smb"))),
                system: Arc::new(linux::system::LinuxSystemHost::new()),
                iscsi: Arc::new(linux::iscsi::LinuxIscsiHost::new(state.join("iscsi"))),
            },
        )
    }
}

#[cfg(windows)]
mod platform {
    use super::*;
    use csi_proxy_host::windows;

    /// The Windows hosts.
    pub fn hosts(flags: &Flags) -> (Arc<dyn FilesystemHost>, Hosts) {
        (
            Arc::new(windows::filesystem::WindowsFilesystemHost::new()),
            Hosts {
                disk: Arc::new(windows::disk::WindowsDiskHost::new()),
                volume: Arc::new(windows::volume::WindowsVolumeHost::new(&flags.state_dir)),
                smb: Arc::new(windows::smb::WindowsSmbHost::new()),
                system: Arc::new(windows::system::WindowsSystemHost::new()),
                iscsi: Arc::new(windows::iscsi::WindowsIscsiHost::new()),
            },
        )
    }
}
