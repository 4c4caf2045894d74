//! Which adapter serves which group-version: the list of all endpoints.

use crate::daemon::{Endpoint, Place};
use csi_proxy_core::disk::{DiskHost, DiskService};
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::iscsi::{IscsiHost, IscsiService};
use csi_proxy_core::profiles::{Group, Scope};
use csi_proxy_core::smb::{SmbHost, SmbService};
use csi_proxy_core::system::{SystemHost, SystemService};
use csi_proxy_core::volume::{VolumeHost, VolumeService};
use std::sync::Arc;
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

/// The host of every group but the filesystem one (whose service the others share for path
/// confinement).
pub struct Hosts {
    /// Disk group.
    pub disk: Arc<dyn DiskHost>,
    /// Volume group.
    pub volume: Arc<dyn VolumeHost>,
    /// SMB group.
    pub smb: Arc<dyn SmbHost>,
    /// System group.
    pub system: Arc<dyn SystemHost>,
    /// iSCSI group.
    pub iscsi: Arc<dyn IscsiHost>,
}

impl Hosts {
    /// Every group served by one host object that implements them all (a test double, or one
    /// simulated machine).
    pub fn all<H>(host: Arc<H>) -> Self
    where
        H: DiskHost + VolumeHost + SmbHost + SystemHost + IscsiHost + 'static,
    {
        Hosts {
            disk: host.clone(),
            volume: host.clone(),
            smb: host.clone(),
            system: host.clone(),
            iscsi: host,
        }
    }
}

impl Services {
    /// Every group's service over its host; paths are confined by `filesystem`'s policy, and
    /// SMB mappings require privacy (encryption) when `require_privacy` is set.
    pub fn new(filesystem: FilesystemService, hosts: Hosts, require_privacy: bool) -> Self {
        Services {
            disk: DiskService::new(hosts.disk, filesystem.policy().clone()),
            volume: VolumeService::new(hosts.volume, filesystem.clone()),
            smb: SmbService::new(hosts.smb, filesystem.clone(), require_privacy),
            system: SystemService::new(hosts.system),
            iscsi: IscsiService::new(hosts.iscsi),
            filesystem,
        }
    }
}

impl Services {
    /// The same services for calls made under `scope` (one profile's endpoints): paths,
    /// mounts, mappings, portals and sessions are judged by it; hosts, locks and caches are
    /// shared with every other scope.
    pub fn scoped(&self, scope: Scope) -> Self {
        let filesystem = self.filesystem.with_scope(scope.clone());
        Services {
            disk: self.disk.with_roots(filesystem.policy().clone()),
            volume: self.volume.with_fs(filesystem.clone()),
            smb: self.smb.with_fs(filesystem.clone()),
            system: self.system.clone(),
            iscsi: self.iscsi.with_scope(scope),
            filesystem,
        }
    }

    /// The scope the services judge calls by.
    pub fn scope(&self) -> &Scope {
        self.filesystem.policy().scope()
    }
}

/// The routes of one endpoint: the adapter's server, or, when the scope does not list the
/// group, the same server behind a refusal of every call (PERMISSION_DENIED naming the
/// profile), so a driver that dials every endpoint still connects.
fn routes<S>(server: S, scope: &Scope, group: Group, version: &str) -> Routes
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    match scope.check_group(&format!("{group} {version}"), group) {
        Ok(()) => Routes::new(server),
        Err(e) => {
            let status = crate::status::to_status(&e);
            Routes::new(tonic::service::interceptor::InterceptedService::new(
                server,
                move |_: tonic::Request<()>| Err(status.clone()),
            ))
        }
    }
}

/// `group_endpoints!(list, services, field, Group, place, [Adapter => "version", ...])` pushes
/// one endpoint per version of a group.
macro_rules! group_endpoints {
    ($list:ident, $s:ident, $module:ident, $group:expr, $place:expr,
     [$($adapter:ident => $version:literal),+ $(,)?]) => {
        $(
            $list.push(Endpoint {
                group: stringify!($module),
                version: $version,
                routes: routes(
                    crate::$module::$adapter::new($s.$module.clone())
                        .with_profile(crate::call::profile_label($s.scope().profile()))
                        .into_server(),
                    $s.scope(),
                    $group,
                    $version,
                ),
                place: $place.clone(),
            });
        )+
    };
}

/// Every endpoint (23), in upstream's creation order: filesystem, disk, volume, smb, system,
/// iscsi; versions ascending; at the daemon's default place.
pub fn endpoints(s: &Services) -> Vec<Endpoint> {
    endpoints_at(s, &Place::Default)
}

/// As [`endpoints`], named at `place` (a profile's socket directory or pipe prefix).
#[allow(clippy::vec_init_then_push)] // one push per version, generated by group_endpoints!
pub fn endpoints_at(s: &Services, place: &Place) -> Vec<Endpoint> {
    let mut list = Vec::with_capacity(23);
    group_endpoints!(list, s, filesystem, Group::Filesystem, place, [
        FilesystemV1alpha1 => "v1alpha1", FilesystemV1beta1 => "v1beta1",
        FilesystemV1beta2 => "v1beta2", FilesystemV1 => "v1", FilesystemV2alpha1 => "v2alpha1",
    ]);
    group_endpoints!(list, s, disk, Group::Disk, place, [
        DiskV1alpha1 => "v1alpha1", DiskV1beta1 => "v1beta1", DiskV1beta2 => "v1beta2",
        DiskV1beta3 => "v1beta3", DiskV1 => "v1",
    ]);
    group_endpoints!(list, s, volume, Group::Volume, place, [
        VolumeV1alpha1 => "v1alpha1", VolumeV1beta1 => "v1beta1", VolumeV1beta2 => "v1beta2",
        VolumeV1beta3 => "v1beta3", VolumeV1 => "v1", VolumeV2alpha1 => "v2alpha1",
    ]);
    group_endpoints!(list, s, smb, Group::Smb, place, [
        SmbV1alpha1 => "v1alpha1", SmbV1beta1 => "v1beta1", SmbV1beta2 => "v1beta2", SmbV1 => "v1",
    ]);
    group_endpoints!(list, s, system, Group::System, place, [SystemV1alpha1 => "v1alpha1"]);
    group_endpoints!(list, s, iscsi, Group::Iscsi, place, [
        IscsiV1alpha1 => "v1alpha1", IscsiV1alpha2 => "v1alpha2",
    ]);
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_version_of_the_api_has_exactly_one_endpoint() {
        let hosts = Hosts::all(Arc::new(csi_proxy_core::testing::UnimplementedHost));
        let s = Services::new(csi_proxy_core::testing::kubelet_fs(), hosts, true);
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
