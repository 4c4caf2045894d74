//! The filesystem and SMB clients of a driver's mounter over the API version it connected to:
//! `v1`, or filesystem v1beta1 (`LinkPath`, `IsMountPoint`, a `PathContext` per request) and
//! smb v1beta1, the sets drivers fall back to on an older csi-proxy.

use csi_proxy_api::filesystem::{v1 as f1, v1beta1 as fb1};
use csi_proxy_api::smb::{v1 as s1, v1beta1 as sb1};
use csi_proxy_client::Connector;
use tonic::Status;
use tonic::transport::Channel;

/// v1beta1's `PathContext`: drivers name the kubelet directory a path is in.
#[derive(Clone, Copy)]
pub enum PathContext {
    Plugin = 0,
    Pod = 1,
}

#[derive(Clone)]
enum Fs {
    V1(f1::filesystem_client::FilesystemClient<Channel>),
    V1beta1(fb1::filesystem_client::FilesystemClient<Channel>),
}

async fn channel(c: &Connector, group: &str, version: &str) -> Result<Channel, String> {
    c.channel(group, version)
        .await
        .map_err(|e| format!("{group} {version}: {e}"))
}

/// A driver's filesystem client on the version it connected to.
#[derive(Clone)]
pub struct FsApi(Fs);

impl FsApi {
    /// Connects `version`; an endpoint that does not answer is an error.
    pub async fn connect(c: &Connector, version: &str) -> Result<Self, String> {
        Ok(FsApi(match version {
            "v1" => Fs::V1(f1::filesystem_client::FilesystemClient::new(
                channel(c, "filesystem", version).await?,
            )),
            "v1beta1" => Fs::V1beta1(fb1::filesystem_client::FilesystemClient::new(
                channel(c, "filesystem", version).await?,
            )),
            _ => return Err(format!("filesystem {version}: not replayed")),
        }))
    }

    /// The version in use.
    pub fn version(&self) -> &'static str {
        match self.0 {
            Fs::V1(_) => "v1",
            Fs::V1beta1(_) => "v1beta1",
        }
    }

    pub async fn path_exists(&mut self, path: &str, ctx: PathContext) -> Result<bool, Status> {
        let path = path.to_string();
        Ok(match &mut self.0 {
            Fs::V1(c) => {
                c.path_exists(f1::PathExistsRequest { path })
                    .await?
                    .into_inner()
                    .exists
            }
            Fs::V1beta1(c) => {
                let context = ctx as i32;
                let r = fb1::PathExistsRequest { path, context };
                c.path_exists(r).await?.into_inner().exists
            }
        })
    }

    /// v1 IsSymlink; v1beta1 IsMountPoint.
    pub async fn is_link(&mut self, path: &str) -> Result<bool, Status> {
        let path = path.to_string();
        Ok(match &mut self.0 {
            Fs::V1(c) => {
                let r = f1::IsSymlinkRequest { path };
                c.is_symlink(r).await?.into_inner().is_symlink
            }
            Fs::V1beta1(c) => {
                let r = fb1::IsMountPointRequest { path };
                c.is_mount_point(r).await?.into_inner().is_mount_point
            }
        })
    }

    pub async fn mkdir(&mut self, path: &str, ctx: PathContext) -> Result<(), Status> {
        let path = path.to_string();
        match &mut self.0 {
            Fs::V1(c) => c.mkdir(f1::MkdirRequest { path }).await.map(drop),
            Fs::V1beta1(c) => {
                let context = ctx as i32;
                c.mkdir(fb1::MkdirRequest { path, context }).await.map(drop)
            }
        }
    }

    /// Rmdir with `force` (every surveyed driver sets it).
    pub async fn rmdir(&mut self, path: &str, ctx: PathContext) -> Result<(), Status> {
        let path = path.to_string();
        match &mut self.0 {
            Fs::V1(c) => c
                .rmdir(f1::RmdirRequest { path, force: true })
                .await
                .map(drop),
            Fs::V1beta1(c) => {
                let r = fb1::RmdirRequest {
                    path,
                    context: ctx as i32,
                    force: true,
                };
                c.rmdir(r).await.map(drop)
            }
        }
    }

    /// v1 CreateSymlink; v1beta1 LinkPath.
    pub async fn link(&mut self, source_path: &str, target_path: &str) -> Result<(), Status> {
        let (source_path, target_path) = (source_path.to_string(), target_path.to_string());
        match &mut self.0 {
            Fs::V1(c) => {
                let r = f1::CreateSymlinkRequest {
                    source_path,
                    target_path,
                };
                c.create_symlink(r).await.map(drop)
            }
            Fs::V1beta1(c) => {
                let r = fb1::LinkPathRequest {
                    source_path,
                    target_path,
                };
                c.link_path(r).await.map(drop)
            }
        }
    }
}

#[derive(Clone)]
enum Smb {
    V1(s1::smb_client::SmbClient<Channel>),
    V1beta1(sb1::smb_client::SmbClient<Channel>),
}

/// A driver's SMB client on the version it connected to (v1, or v1beta1 whose responses carry
/// an `error` string upstream always leaves empty).
#[derive(Clone)]
pub struct SmbApi(Smb);

impl SmbApi {
    /// Connects `version`; an endpoint that does not answer is an error.
    pub async fn connect(c: &Connector, version: &str) -> Result<Self, String> {
        Ok(SmbApi(match version {
            "v1" => Smb::V1(s1::smb_client::SmbClient::new(
                channel(c, "smb", version).await?,
            )),
            "v1beta1" => Smb::V1beta1(sb1::smb_client::SmbClient::new(
                channel(c, "smb", version).await?,
            )),
            _ => return Err(format!("smb {version}: not replayed")),
        }))
    }

    /// The version in use.
    pub fn version(&self) -> &'static str {
        match self.0 {
            Smb::V1(_) => "v1",
            Smb::V1beta1(_) => "v1beta1",
        }
    }

    /// NewSmbGlobalMapping.
    pub async fn map(
        &mut self,
        remote_path: &str,
        local_path: &str,
        username: &str,
        password: &str,
    ) -> Result<(), Status> {
        let (remote_path, local_path) = (remote_path.to_string(), local_path.to_string());
        let (username, password) = (username.to_string(), password.to_string());
        match &mut self.0 {
            Smb::V1(c) => {
                let r = s1::NewSmbGlobalMappingRequest {
                    remote_path,
                    local_path,
                    username,
                    password,
                };
                c.new_smb_global_mapping(r).await.map(drop)
            }
            Smb::V1beta1(c) => {
                let r = sb1::NewSmbGlobalMappingRequest {
                    remote_path,
                    local_path,
                    username,
                    password,
                };
                c.new_smb_global_mapping(r).await.map(drop)
            }
        }
    }

    /// RemoveSmbGlobalMapping.
    pub async fn unmap(&mut self, remote_path: &str) -> Result<(), Status> {
        let remote_path = remote_path.to_string();
        match &mut self.0 {
            Smb::V1(c) => {
                let r = s1::RemoveSmbGlobalMappingRequest { remote_path };
                c.remove_smb_global_mapping(r).await.map(drop)
            }
            Smb::V1beta1(c) => {
                let r = sb1::RemoveSmbGlobalMappingRequest { remote_path };
                c.remove_smb_global_mapping(r).await.map(drop)
            }
        }
    }
}
