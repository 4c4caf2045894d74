//! A filesystem client that works against whichever filesystem API version the daemon serves.

use crate::{ClientError, Connector};
use csi_proxy_api::filesystem::{v1, v1alpha1, v1beta1, v1beta2, v2alpha1};
use tonic::Status;
use tonic::transport::Channel;

/// A connected filesystem client of one API version.
#[derive(Debug, Clone)]
pub enum FilesystemClient {
    /// `v2alpha1` (experimental; only when asked for).
    V2alpha1(v2alpha1::filesystem_client::FilesystemClient<Channel>),
    /// `v1`.
    V1(v1::filesystem_client::FilesystemClient<Channel>),
    /// `v1beta2`.
    V1beta2(v1beta2::filesystem_client::FilesystemClient<Channel>),
    /// `v1beta1` (legacy shape).
    V1beta1(v1beta1::filesystem_client::FilesystemClient<Channel>),
    /// `v1alpha1` (legacy shape).
    V1alpha1(v1alpha1::filesystem_client::FilesystemClient<Channel>),
}

/// Calls `$call` on whichever version this is; `$cur` builds requests of the v1 shape and
/// `$legacy` of the v1alpha1/v1beta1 shape, each given the version module.
macro_rules! dispatch {
    ($self:ident, |$c:ident, $m:ident| current: $cur:expr, legacy: $legacy:expr) => {
        match $self {
            FilesystemClient::V2alpha1($c) => {
                use v2alpha1 as $m;
                $cur
            }
            FilesystemClient::V1($c) => {
                use v1 as $m;
                $cur
            }
            FilesystemClient::V1beta2($c) => {
                use v1beta2 as $m;
                $cur
            }
            FilesystemClient::V1beta1($c) => {
                use v1beta1 as $m;
                $legacy
            }
            FilesystemClient::V1alpha1($c) => {
                use v1alpha1 as $m;
                $legacy
            }
        }
    };
}

impl FilesystemClient {
    /// Connects to the newest stable-or-older filesystem version the daemon serves.
    pub async fn connect(connector: &Connector) -> Result<Self, ClientError> {
        let (version, ch) = connector.newest("filesystem").await?;
        Ok(Self::from_channel(version, ch).expect("fallback versions are known"))
    }

    /// Connects to one named version.
    pub async fn connect_version(
        connector: &Connector,
        version: &str,
    ) -> Result<Self, ClientError> {
        let ch = connector.channel("filesystem", version).await?;
        Self::from_channel(version, ch)
            .ok_or_else(|| ClientError::UnknownGroup(format!("filesystem/{version}")))
    }

    /// Wraps a channel to a known version.
    pub fn from_channel(version: &str, ch: Channel) -> Option<Self> {
        Some(match version {
            "v2alpha1" => Self::V2alpha1(v2alpha1::filesystem_client::FilesystemClient::new(ch)),
            "v1" => Self::V1(v1::filesystem_client::FilesystemClient::new(ch)),
            "v1beta2" => Self::V1beta2(v1beta2::filesystem_client::FilesystemClient::new(ch)),
            "v1beta1" => Self::V1beta1(v1beta1::filesystem_client::FilesystemClient::new(ch)),
            "v1alpha1" => Self::V1alpha1(v1alpha1::filesystem_client::FilesystemClient::new(ch)),
            _ => return None,
        })
    }

    /// The API version in use.
    pub fn version(&self) -> &'static str {
        match self {
            Self::V2alpha1(_) => "v2alpha1",
            Self::V1(_) => "v1",
            Self::V1beta2(_) => "v1beta2",
            Self::V1beta1(_) => "v1beta1",
            Self::V1alpha1(_) => "v1alpha1",
        }
    }

    /// PathExists.
    pub async fn path_exists(&mut self, path: &str) -> Result<bool, Status> {
        let path = path.to_string();
        dispatch!(self, |c, m| current: Ok(c.path_exists(m::PathExistsRequest { path }).await?.into_inner().exists),
            legacy: Ok(c.path_exists(m::PathExistsRequest { path, context: 0 }).await?.into_inner().exists))
    }

    /// Mkdir (recursive, idempotent).
    pub async fn mkdir(&mut self, path: &str) -> Result<(), Status> {
        let path = path.to_string();
        dispatch!(self, |c, m| current: c.mkdir(m::MkdirRequest { path }).await.map(drop),
            legacy: c.mkdir(m::MkdirRequest { path, context: 0 }).await.map(drop))
    }

    /// Rmdir; with `force` recursive and a missing path is success.
    pub async fn rmdir(&mut self, path: &str, force: bool) -> Result<(), Status> {
        let path = path.to_string();
        dispatch!(self, |c, m| current: c.rmdir(m::RmdirRequest { path, force }).await.map(drop),
            legacy: c.rmdir(m::RmdirRequest { path, force, context: 0 }).await.map(drop))
    }

    /// CreateSymlink (LinkPath in legacy versions): a link at `target_path` to `source_path`.
    pub async fn create_symlink(
        &mut self,
        source_path: &str,
        target_path: &str,
    ) -> Result<(), Status> {
        let (source_path, target_path) = (source_path.to_string(), target_path.to_string());
        dispatch!(self, |c, m| current: c.create_symlink(m::CreateSymlinkRequest { source_path, target_path }).await.map(drop),
            legacy: c.link_path(m::LinkPathRequest { source_path, target_path }).await.map(drop))
    }

    /// IsSymlink (IsMountPoint in legacy versions).
    pub async fn is_symlink(&mut self, path: &str) -> Result<bool, Status> {
        let path = path.to_string();
        dispatch!(self, |c, m| current: Ok(c.is_symlink(m::IsSymlinkRequest { path }).await?.into_inner().is_symlink),
            legacy: Ok(c.is_mount_point(m::IsMountPointRequest { path }).await?.into_inner().is_mount_point))
    }

    /// RmdirContents (v2alpha1 only).
    pub async fn rmdir_contents(&mut self, path: &str) -> Result<(), Status> {
        match self {
            Self::V2alpha1(c) => c
                .rmdir_contents(v2alpha1::RmdirContentsRequest {
                    path: path.to_string(),
                })
                .await
                .map(drop),
            other => Err(Status::unimplemented(format!(
                "RmdirContents exists only in filesystem v2alpha1, connected to {}",
                other.version()
            ))),
        }
    }
}
