//! An SMB client for the calls the selftest makes (`v1`): a global mapping made and removed.

use crate::{ClientError, Connector};
use csi_proxy_api::smb::v1;
use tonic::Status;
use tonic::transport::Channel;

/// A connected `v1` SMB client.
#[derive(Debug, Clone)]
pub struct SmbClient(v1::smb_client::SmbClient<Channel>);

impl SmbClient {
    /// Connects to `v1`.
    pub async fn connect(connector: &Connector) -> Result<Self, ClientError> {
        let (_, ch) = connector.first_of("smb", &["v1"]).await?;
        Ok(Self(v1::smb_client::SmbClient::new(ch)))
    }

    /// NewSmbGlobalMapping of `remote_path`, with no link and the given credentials (empty:
    /// the node's own identity).
    pub async fn new_mapping(
        &mut self,
        remote_path: &str,
        username: &str,
        password: &str,
    ) -> Result<(), Status> {
        self.0
            .new_smb_global_mapping(v1::NewSmbGlobalMappingRequest {
                remote_path: remote_path.into(),
                local_path: String::new(),
                username: username.into(),
                password: password.into(),
            })
            .await
            .map(drop)
    }

    /// RemoveSmbGlobalMapping of `remote_path`.
    pub async fn remove_mapping(&mut self, remote_path: &str) -> Result<(), Status> {
        self.0
            .remove_smb_global_mapping(v1::RemoveSmbGlobalMappingRequest {
                remote_path: remote_path.into(),
            })
            .await
            .map(drop)
    }
}
