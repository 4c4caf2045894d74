//! Which adapter serves which group-version: the list of all endpoints.

use crate::daemon::Endpoint;
use csi_proxy_core::disk::DiskService;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::iscsi::IscsiService;
use csi_proxy_core::smb::SmbService;
use csi_proxy_core::system::SystemService;
use csi_proxy_core::volume::VolumeService;
use tonic::service::Routes;

/// The version-agnostic services behind every endpoint.
#[derive(Clone)]
pub struct Services {
    /// Filesystem group.
    pub filesystem: FilesystemService,
    /// Disk group.
    pub disk: DiskService,
    /// Volume group.
    pub volume: VolumeService,
    /// SMB group.
    pub smb: SmbService,
    /// System group.
    pub system: SystemService,
    /// iSCSI group.
    pub iscsi: IscsiService,
}

/// `group_endpoints!(list, service, module, [Adapter => "version", ...])` pushes one endpoint per
/// version of a group.
macro_rules! group_endpoints {
    ($list:ident, $svc:expr, $module:ident, [$($adapter:ident => $version:literal),+ $(,)?]) => {
        $(
            $list.push(Endpoint {
                group: stringify!($module),
                version: $version,
                routes: Routes::new(crate::$module::$adapter::new($svc.clone()).into_server()),
            });
        )+
    };
}

/// Every endpoint (23), in upstream's creation order: filesystem, disk, volume, smb, system,
/// iscsi; versions ascending.
pub fn endpoints(s: &Services) -> Vec<Endpoint> {
    let mut list = Vec::with_capacity(23);
    group_endpoints!(list, s.filesystem, filesystem, [
        FilesystemV1alpha1 => "v1alpha1", FilesystemV1beta1 => "v1beta1",
        FilesystemV1beta2 => "v1beta2", FilesystemV1 => "v1", FilesystemV2alpha1 => "v2alpha1",
    ]);
    group_endpoints!(list, s.disk, disk, [
        DiskV1alpha1 => "v1alpha1", DiskV1beta1 => "v1beta1", DiskV1beta2 => "v1beta2",
        DiskV1beta3 => "v1beta3", DiskV1 => "v1",
    ]);
    group_endpoints!(list, s.volume, volume, [
        VolumeV1alpha1 => "v1alpha1", VolumeV1beta1 => "v1beta1", VolumeV1beta2 => "v1beta2",
        VolumeV1beta3 => "v1beta3", VolumeV1 => "v1", VolumeV2alpha1 => "v2alpha1",
    ]);
    group_endpoints!(list, s.smb, smb, [
        SmbV1alpha1 => "v1alpha1", SmbV1beta1 => "v1beta1", SmbV1beta2 => "v1beta2", SmbV1 => "v1",
    ]);
    group_endpoints!(list, s.system, system, [SystemV1alpha1 => "v1alpha1"]);
    group_endpoints!(list, s.iscsi, iscsi, [IscsiV1alpha1 => "v1alpha1", IscsiV1alpha2 => "v1alpha2"]);
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_core::UnimplementedHost;
    use csi_proxy_core::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
    use std::sync::Arc;

    struct NoFs;
    impl LinkProbe for NoFs {
        fn link_target(&self, _: &str) -> std::io::Result<Option<LinkTarget>> {
            Ok(None)
        }
    }
    impl csi_proxy_core::filesystem::FilesystemHost for NoFs {
        fn path_exists(&self, _: &str) -> std::io::Result<bool> {
            Ok(false)
        }
        fn mkdir_all(&self, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn remove(&self, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn remove_all(&self, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn remove_contents(&self, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn create_symlink(&self, _: &str, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn is_symlink(&self, _: &str) -> std::io::Result<bool> {
            Ok(false)
        }
    }

    #[test]
    fn every_group_version_of_the_api_has_exactly_one_endpoint() {
        let policy = PathPolicy::new(PathStyle::Posix, "/var/lib/kubelet", &[]).unwrap();
        let fs = FilesystemService::new(Arc::new(NoFs), Arc::new(policy));
        let h = Arc::new(UnimplementedHost);
        let s = Services {
            disk: DiskService::new(h.clone()),
            volume: VolumeService::new(h.clone(), fs.clone()),
            smb: SmbService::new(h.clone(), fs.clone(), true),
            system: SystemService::new(h.clone()),
            iscsi: IscsiService::new(h),
            filesystem: fs,
        };
        let got: Vec<(&str, &str)> = endpoints(&s).iter().map(|e| (e.group, e.version)).collect();
        let mut want = Vec::new();
        for g in csi_proxy_api::GROUPS {
            for v in csi_proxy_api::versions(g).unwrap() {
                want.push((*g, *v));
            }
        }
        assert_eq!(got, want);
        assert_eq!(got.len(), 23);
    }
}
