//! Filesystem adapters: one thin struct per API version over [`FilesystemService`].
//!
//! v1beta2, v1 and v2alpha1 share one shape (v2alpha1 adds RmdirContents); v1alpha1 and v1beta1
//! share the legacy shape (`error` fields, `context`, LinkPath, IsMountPoint, and `exists` /
//! `is_mount_point` at field 2). Conversions (as upstream's): `context` is ignored, LinkPath is
//! CreateSymlink, IsMountPoint is IsSymlink, `error` is never set (failures are statuses).

use crate::{adapter, unary};
use csi_proxy_api::filesystem::{v1, v1alpha1, v1beta1, v1beta2, v2alpha1};
use csi_proxy_core::filesystem::FilesystemService;

/// The RPCs whose shape is the same in v1beta2, v1 and v2alpha1.
macro_rules! current_rpcs {
    ($v:ident) => {
        unary!(filesystem, $v, path_exists, "PathExists", PathExistsRequest => PathExistsResponse,
            |svc, r| Ok($v::PathExistsResponse { exists: svc.path_exists(&r.path)? }));
        unary!(filesystem, $v, mkdir, "Mkdir", MkdirRequest => MkdirResponse,
            |svc, r| svc.mkdir(&r.path).map(|()| $v::MkdirResponse {}));
        unary!(filesystem, $v, rmdir, "Rmdir", RmdirRequest => RmdirResponse,
            |svc, r| svc.rmdir(&r.path, r.force).map(|()| $v::RmdirResponse {}));
        unary!(filesystem, $v, create_symlink, "CreateSymlink", CreateSymlinkRequest => CreateSymlinkResponse,
            |svc, r| svc.create_symlink(&r.source_path, &r.target_path).map(|()| $v::CreateSymlinkResponse {}));
        unary!(filesystem, $v, is_symlink, "IsSymlink", IsSymlinkRequest => IsSymlinkResponse,
            |svc, r| Ok($v::IsSymlinkResponse { is_symlink: svc.is_symlink(&r.path)? }));
    };
}

/// The RPCs of the legacy shape (v1alpha1, v1beta1).
macro_rules! legacy_rpcs {
    ($v:ident) => {
        unary!(filesystem, $v, path_exists, "PathExists", PathExistsRequest => PathExistsResponse,
            |svc, r| Ok($v::PathExistsResponse { exists: svc.path_exists(&r.path)?, error: String::new() }));
        unary!(filesystem, $v, mkdir, "Mkdir", MkdirRequest => MkdirResponse,
            |svc, r| svc.mkdir(&r.path).map(|()| $v::MkdirResponse { error: String::new() }));
        unary!(filesystem, $v, rmdir, "Rmdir", RmdirRequest => RmdirResponse,
            |svc, r| svc.rmdir(&r.path, r.force).map(|()| $v::RmdirResponse { error: String::new() }));
        unary!(filesystem, $v, link_path, "LinkPath", LinkPathRequest => LinkPathResponse,
            |svc, r| svc.create_symlink(&r.source_path, &r.target_path).map(|()| $v::LinkPathResponse { error: String::new() }));
        unary!(filesystem, $v, is_mount_point, "IsMountPoint", IsMountPointRequest => IsMountPointResponse,
            |svc, r| Ok($v::IsMountPointResponse { is_mount_point: svc.is_symlink(&r.path)?, error: String::new() }));
    };
}

adapter!(
    /// `v1alpha1.Filesystem`.
    FilesystemV1alpha1, FilesystemService, filesystem::v1alpha1::filesystem_server::FilesystemServer
);
impl v1alpha1::filesystem_server::Filesystem for FilesystemV1alpha1 {
    legacy_rpcs!(v1alpha1);
}

adapter!(
    /// `v1beta1.Filesystem`.
    FilesystemV1beta1, FilesystemService, filesystem::v1beta1::filesystem_server::FilesystemServer
);
impl v1beta1::filesystem_server::Filesystem for FilesystemV1beta1 {
    legacy_rpcs!(v1beta1);
}

adapter!(
    /// `v1beta2.Filesystem`.
    FilesystemV1beta2, FilesystemService, filesystem::v1beta2::filesystem_server::FilesystemServer
);
impl v1beta2::filesystem_server::Filesystem for FilesystemV1beta2 {
    current_rpcs!(v1beta2);
}

adapter!(
    /// `v1.Filesystem`.
    FilesystemV1, FilesystemService, filesystem::v1::filesystem_server::FilesystemServer
);
impl v1::filesystem_server::Filesystem for FilesystemV1 {
    current_rpcs!(v1);
}

adapter!(
    /// `v2alpha1.Filesystem`: v1 plus RmdirContents.
    FilesystemV2alpha1, FilesystemService, filesystem::v2alpha1::filesystem_server::FilesystemServer
);
impl v2alpha1::filesystem_server::Filesystem for FilesystemV2alpha1 {
    current_rpcs!(v2alpha1);
    unary!(filesystem, v2alpha1, rmdir_contents, "RmdirContents", RmdirContentsRequest => RmdirContentsResponse,
        |svc, r| svc.rmdir_contents(&r.path).map(|()| v2alpha1::RmdirContentsResponse {}));
}
