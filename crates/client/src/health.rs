//! The standard gRPC health check (`grpc.health.v1.Health/Check`) every endpoint answers.

use crate::{ClientError, Connector};
use tonic::Status;
pub use tonic_health::pb::health_check_response::ServingStatus;

/// Asks the `group`/`version` endpoint about `service` (`""` = the whole server, or the
/// endpoint's own service such as `v1.Disk`).
pub async fn check(
    connector: &Connector,
    group: &str,
    version: &str,
    service: &str,
) -> Result<ServingStatus, HealthError> {
    let ch = connector.channel(group, version).await?;
    let mut c = tonic_health::pb::health_client::HealthClient::new(ch);
    let resp = c
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.to_string(),
        })
        .await?
        .into_inner();
    Ok(ServingStatus::try_from(resp.status).unwrap_or(ServingStatus::Unknown))
}

pub use csi_proxy_api::service_name;

/// Why a health check failed.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The endpoint could not be reached.
    #[error(transparent)]
    Connect(#[from] ClientError),
    /// The endpoint answered the check with an error status.
    #[error("health check: {}: {}", .0.code(), .0.message())]
    Status(#[from] Status),
}
