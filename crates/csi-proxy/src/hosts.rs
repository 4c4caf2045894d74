//! Which host implementation serves each group on this platform.
//!
//! One function per platform; a group whose host is not written yet stays on
//! [`csi_proxy_core::UnimplementedHost`] and answers UNIMPLEMENTED naming group and RPC.

use crate::flags::Flags;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::PathPolicy;
use csi_proxy_server::registry::Services;
use std::sync::Arc;

/// The services of every group over this platform's hosts.
pub fn services(policy: Arc<PathPolicy>, flags: &Flags) -> Services {
    let fs = FilesystemService::new(platform::filesystem(), policy);
    #[allow(unused_mut)] // groups are plugged in per platform below
    let mut s = Services::with_pending_groups(fs, flags.require_privacy);
    platform::plug(&mut s, flags);
    // On every platform, whichever system host is plugged in: Start/Stop only on the allowed
    // services when --allowed-service is given.
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
    use csi_proxy_core::filesystem::FilesystemHost;
    use csi_proxy_host::linux;

    pub fn filesystem() -> Arc<dyn FilesystemHost> {
        Arc::new(linux::filesystem::LinuxFilesystemHost::new())
    }

    /// Replaces pending groups with the Linux hosts that exist.
    pub fn plug(s: &mut Services, flags: &Flags) {
        // SMB mounts and iSCSI bookkeeping live beside the sockets (`/run/csi-proxy/{smb,iscsi}`
        // by default): daemon-owned, kept across daemon restarts, gone with a reboot like the
        // mounts and sessions themselves.
        let state = std::path::Path::new(&flags.socket_dir);
        s.smb = csi_proxy_core::smb::SmbService::new(
            Arc::new(linux::smb::LinuxSmbHost::new(state.join("smb"))),
            s.filesystem.clone(),
            flags.require_privacy,
        );
        s.iscsi = csi_proxy_core::iscsi::IscsiService::new(Arc::new(
            linux::iscsi::LinuxIscsiHost::new(state.join("iscsi")),
        ));
        s.disk = csi_proxy_core::disk::DiskService::new(
            Arc::new(linux::disk::LinuxDiskHost::new()),
            s.filesystem.policy().clone(),
        );
        s.system = csi_proxy_core::system::SystemService::new(Arc::new(
            linux::system::LinuxSystemHost::new(),
        ));
        // The flag's parser admits only the names FsType knows.
        let fs_type = flags.format_filesystem.parse().unwrap_or_default();
        s.volume = csi_proxy_core::volume::VolumeService::new(
            Arc::new(linux::volume::LinuxVolumeHost::new(
                &flags.state_dir,
                fs_type,
            )),
            s.filesystem.clone(),
        );
    }
}

#[cfg(windows)]
mod platform {
    use super::*;
    use csi_proxy_core::filesystem::FilesystemHost;
    use csi_proxy_host::windows;

    pub fn filesystem() -> Arc<dyn FilesystemHost> {
        Arc::new(windows::filesystem::WindowsFilesystemHost::new())
    }

    /// Replaces pending groups with the Windows hosts that exist.
    pub fn plug(s: &mut Services, flags: &Flags) {
        let _ = flags;
        s.system = csi_proxy_core::system::SystemService::new(Arc::new(
            windows::system::WindowsSystemHost::new(),
        ));
        s.smb = csi_proxy_core::smb::SmbService::new(
            Arc::new(windows::smb::WindowsSmbHost::new()),
            s.filesystem.clone(),
            flags.require_privacy,
        );
        s.disk = csi_proxy_core::disk::DiskService::new(
            Arc::new(windows::disk::WindowsDiskHost::new()),
            s.filesystem.policy().clone(),
        );
        s.volume = csi_proxy_core::volume::VolumeService::new(
            Arc::new(windows::volume::WindowsVolumeHost::new(&flags.state_dir)),
            s.filesystem.clone(),
        );
        s.iscsi = csi_proxy_core::iscsi::IscsiService::new(Arc::new(
            windows::iscsi::WindowsIscsiHost::new(),
        ));
    }
}
