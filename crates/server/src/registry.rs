//! Which adapter serves which group-version: the list of all endpoints.

use crate::daemon::Endpoint;
use crate::filesystem::*;
use csi_proxy_core::filesystem::FilesystemService;
use tonic::service::Routes;

/// The version-agnostic services behind every endpoint.
#[derive(Clone)]
pub struct Services {
    /// Filesystem group.
    pub filesystem: FilesystemService,
}

macro_rules! endpoint {
    ($group:literal, $version:literal, $adapter:expr) => {
        Endpoint {
            group: $group,
            version: $version,
            routes: Routes::new($adapter.into_server()),
        }
    };
}

/// Every endpoint, in upstream's creation order (filesystem, disk, volume, smb, system, iscsi).
pub fn endpoints(s: &Services) -> Vec<Endpoint> {
    let fs = &s.filesystem;
    vec![
        endpoint!("filesystem", "v1alpha1", FilesystemV1alpha1::new(fs.clone())),
        endpoint!("filesystem", "v1beta1", FilesystemV1beta1::new(fs.clone())),
        endpoint!("filesystem", "v1beta2", FilesystemV1beta2::new(fs.clone())),
        endpoint!("filesystem", "v1", FilesystemV1::new(fs.clone())),
        endpoint!("filesystem", "v2alpha1", FilesystemV2alpha1::new(fs.clone())),
    ]
}
