//! Rust client for csi-proxy.
//!
//! [`Connector`] reaches a group-version endpoint over a Unix socket (Linux) or a named pipe
//! (Windows) and hands back a tonic [`Channel`] for the generated clients in `csi-proxy-api`.
//! [`Connector::newest`] falls back from the stable version to older ones the way upstream
//! drivers do, and the typed clients ([`filesystem`], [`disk`], [`volume`], [`iscsi`], [`smb`]) hide which
//! version answered; [`health`] asks an endpoint's standard gRPC health service.
//!
//! Channels reconnect by themselves: after a daemon restart the next call dials again.

pub mod disk;
pub mod filesystem;
pub mod health;
pub mod iscsi;
pub mod retry;
pub mod smb;
pub mod volume;

use std::path::PathBuf;
use tonic::transport::{Channel, Endpoint, Uri};

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The group name is not one csi-proxy serves.
    #[error("unknown API group {0:?}")]
    UnknownGroup(String),
    /// No version of the group answered.
    #[error("no endpoint of group {group} answers (tried {tried}): {last}")]
    NoVersion {
        /// The group.
        group: String,
        /// Endpoints tried, newest first.
        tried: String,
        /// The last error.
        last: String,
    },
    /// Dialling the endpoint failed.
    #[error("connecting to {endpoint}: {source}")]
    Connect {
        /// Socket path or pipe name.
        endpoint: String,
        /// The transport error.
        source: tonic::transport::Error,
    },
}

/// Where the daemon's endpoints are.
#[derive(Debug, Clone)]
pub enum Connector {
    /// Unix sockets in this directory.
    SocketDir(PathBuf),
    /// Windows named pipes `\\.\pipe\csi-proxy-<group>-<version>`.
    Pipes,
}

impl Default for Connector {
    /// The daemon's default: `/run/csi-proxy` on Unix, the named pipes on Windows.
    fn default() -> Self {
        if cfg!(windows) {
            Connector::Pipes
        } else {
            Connector::SocketDir(PathBuf::from("/run/csi-proxy"))
        }
    }
}

impl Connector {
    /// The socket path or pipe name of a group-version.
    pub fn endpoint_name(&self, group: &str, version: &str) -> String {
        match self {
            Connector::SocketDir(dir) => dir
                .join(format!("csi-proxy-{group}-{version}.sock"))
                .display()
                .to_string(),
            Connector::Pipes => format!(r"\\.\pipe\csi-proxy-{group}-{version}"),
        }
    }

    /// Connects to one group-version now; the channel redials by itself after a disconnect.
    pub async fn channel(&self, group: &str, version: &str) -> Result<Channel, ClientError> {
        let name = self.endpoint_name(group, version);
        placeholder_uri()
            .connect_with_connector(dialer(self.clone(), name.clone()))
            .await
            .map_err(|source| ClientError::Connect {
                endpoint: name,
                source,
            })
    }

    /// A channel that dials on first use (and again after any disconnect).
    pub fn lazy_channel(&self, group: &str, version: &str) -> Channel {
        let name = self.endpoint_name(group, version);
        placeholder_uri().connect_with_connector_lazy(dialer(self.clone(), name))
    }

    /// Connects to the newest of `versions` that answers, trying them in the order given.
    pub async fn first_of(
        &self,
        group: &str,
        versions: &[&'static str],
    ) -> Result<(&'static str, Channel), ClientError> {
        let mut last = String::from("no versions to try");
        for v in versions {
            match self.channel(group, v).await {
                Ok(ch) => return Ok((v, ch)),
                Err(e) => last = e.to_string(),
            }
        }
        Err(ClientError::NoVersion {
            group: group.to_string(),
            tried: versions.join(", "),
            last,
        })
    }

    /// Connects to the newest non-experimental version of `group` that answers: the stable
    /// version first, then betas and alphas newest first (as upstream drivers fall back).
    pub async fn newest(&self, group: &str) -> Result<(&'static str, Channel), ClientError> {
        let order = fallback_order(group)?;
        self.first_of(group, &order).await
    }
}

/// The URI is never dialled (the connector is); it only supplies the `:authority`.
fn placeholder_uri() -> Endpoint {
    Endpoint::from_static("http://localhost")
}

/// Versions of `group` in fallback order: stable first, then newest pre-release first;
/// experimental `v2alpha*` versions are left out (ask for them by name).
pub fn fallback_order(group: &str) -> Result<Vec<&'static str>, ClientError> {
    let versions =
        csi_proxy_api::versions(group).ok_or_else(|| ClientError::UnknownGroup(group.into()))?;
    let mut order: Vec<&'static str> = versions
        .iter()
        .copied()
        .filter(|v| !v.starts_with("v2"))
        .collect();
    // VERSIONS is oldest first; the stable version (no qualifier) goes first.
    order.reverse();
    order.sort_by_key(|v| v.contains("alpha") || v.contains("beta"));
    Ok(order)
}

fn dialer(
    connector: Connector,
    name: String,
) -> impl tower::Service<
    Uri,
    Response = hyper_util::rt::TokioIo<Stream>,
    Error = std::io::Error,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_: Uri| {
        let connector = connector.clone();
        let name = name.clone();
        async move {
            open(&connector, &name)
                .await
                .map(hyper_util::rt::TokioIo::new)
        }
    })
}

#[cfg(unix)]
type Stream = tokio::net::UnixStream;
#[cfg(windows)]
type Stream = tokio::net::windows::named_pipe::NamedPipeClient;

#[cfg(unix)]
async fn open(connector: &Connector, name: &str) -> std::io::Result<Stream> {
    match connector {
        Connector::SocketDir(_) => tokio::net::UnixStream::connect(name).await,
        Connector::Pipes => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "named pipes exist only on Windows",
        )),
    }
}

#[cfg(windows)]
async fn open(connector: &Connector, name: &str) -> std::io::Result<Stream> {
    use tokio::net::windows::named_pipe::ClientOptions;
    // ERROR_PIPE_BUSY (231): every instance is taken right now; the server creates the next
    // instance as soon as it hands one out, so a short retry is enough.
    const ERROR_PIPE_BUSY: i32 = 231;
    match connector {
        Connector::Pipes => {
            for _ in 0..50 {
                match ClientOptions::new().open(name) {
                    Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY) => {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    other => return other,
                }
            }
            ClientOptions::new().open(name)
        }
        Connector::SocketDir(_) => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "Unix sockets are not used on Windows",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_prefers_stable_then_newest_prerelease() {
        assert_eq!(
            fallback_order("disk").unwrap(),
            ["v1", "v1beta3", "v1beta2", "v1beta1", "v1alpha1"]
        );
        assert_eq!(
            fallback_order("filesystem").unwrap(),
            ["v1", "v1beta2", "v1beta1", "v1alpha1"]
        );
        assert_eq!(fallback_order("iscsi").unwrap(), ["v1alpha2", "v1alpha1"]);
        assert!(matches!(
            fallback_order("nope"),
            Err(ClientError::UnknownGroup(_))
        ));
    }

    #[test]
    fn endpoint_names_match_the_daemon() {
        let c = Connector::SocketDir("/run/csi-proxy".into());
        assert_eq!(
            c.endpoint_name("disk", "v1"),
            "/run/csi-proxy/csi-proxy-disk-v1.sock"
        );
        assert_eq!(
            Connector::Pipes.endpoint_name("volume", "v1beta3"),
            r"\\.\pipe\csi-proxy-volume-v1beta3"
        );
    }
}
