//! `csi-proxy-bench-server`: bench-only gRPC servers that serve the filesystem v1 PathExists and
//! the gRPC health check on one Unix socket, with none, one, or all of the daemon's own layers,
//! so `csi-proxy-bench` can show what each layer costs against plain tonic in the same run.
//!
//! Every variant runs in its own process on the runtime the daemon builds (multi-threaded, one
//! worker per CPU) and answers PathExists through the same `FilesystemService::path_exists`
//! (path confinement, then `statx` through the Linux host) that the daemon's adapter calls.
//!
//! - `bare`: `tonic::transport::Server::serve_with_incoming` over the listener's stream; the
//!   handler calls the service directly on the worker. Nothing of ours around it.
//! - `adapter`, `deadline`, `accept`, `handshake`, `authority`, `logging`: `bare` plus exactly one
//!   of the daemon's pieces, taken from the server crate (or, for `logging`, the subscriber the
//!   daemon installs): the `FilesystemV1` adapter (`call.rs`: metrics, inline slot, deadline
//!   check, request logging), the `spec_status` layer, the accept back-off, the handshake timeout,
//!   the `:authority` rewriter.
//! - `noop`: `bare` whose PathExists answers "exists" without any work (no path check, no
//!   `statx`): the floor a PathExists costs on plain tonic, which the health check is compared
//!   against (the two differ only in their method, request and answer).
//! - `daemon-stack`: `daemon::serve` itself with this one endpoint and the daemon's logging: the
//!   daemon's whole stack, one endpoint instead of 23.

#[cfg(target_os = "linux")]
mod linux {
    use clap::{Parser, ValueEnum};
    use csi_proxy_api::filesystem::v1;
    use csi_proxy_core::filesystem::FilesystemService;
    use csi_proxy_core::paths::{PathPolicy, PathStyle};
    use csi_proxy_server::daemon::{self, Endpoint, Listen};
    use csi_proxy_server::filesystem::FilesystemV1;
    use csi_proxy_server::transport::{
        accept::AcceptBackoff, authority::AuthorityFix, handshake_timeout::HandshakeTimeout, unix,
    };
    use std::path::PathBuf;
    use std::process::ExitCode;
    use std::sync::Arc;
    use tokio_stream::StreamExt;
    use tokio_stream::wrappers::UnixListenerStream;
    use tonic::service::Routes;
    use tonic::transport::Server;
    use tonic::{Request, Response, Status};

    /// Which of the daemon's layers the server has (see the module documentation).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
    pub enum Layers {
        Bare,
        Noop,
        Adapter,
        Deadline,
        Accept,
        Handshake,
        Authority,
        Logging,
        DaemonStack,
    }

    /// Serves filesystem v1 (PathExists) and the health check on `<socket-dir>/csi-proxy-filesystem-v1.sock`.
    #[derive(Debug, Parser)]
    #[command(name = "csi-proxy-bench-server")]
    struct Args {
        /// Directory of the socket.
        #[arg(long)]
        socket_dir: PathBuf,
        /// The kubelet directory PathExists paths must lie in.
        #[arg(long)]
        kubelet_path: String,
        /// Which of the daemon's layers to add to plain tonic.
        #[arg(long, value_enum)]
        layers: Layers,
        /// Accepted and unused, so scripts start this server as they start the daemon.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    }

    /// PathExists straight to the service, on the worker that received it; nothing else. With
    /// `noop`, not even the service: every path exists.
    struct Bare {
        svc: FilesystemService,
        noop: bool,
    }

    fn unimplemented<T>() -> Result<Response<T>, Status> {
        Err(Status::unimplemented("bench server: PathExists only"))
    }

    #[tonic::async_trait]
    impl v1::filesystem_server::Filesystem for Bare {
        async fn path_exists(
            &self,
            r: Request<v1::PathExistsRequest>,
        ) -> Result<Response<v1::PathExistsResponse>, Status> {
            if self.noop {
                return Ok(Response::new(v1::PathExistsResponse { exists: true }));
            }
            match self.svc.path_exists(&r.into_inner().path) {
                Ok(exists) => Ok(Response::new(v1::PathExistsResponse { exists })),
                Err(e) => Err(csi_proxy_server::status::to_status(&e)),
            }
        }
        async fn create_symlink(
            &self,
            _: Request<v1::CreateSymlinkRequest>,
        ) -> Result<Response<v1::CreateSymlinkResponse>, Status> {
            unimplemented()
        }
        async fn is_symlink(
            &self,
            _: Request<v1::IsSymlinkRequest>,
        ) -> Result<Response<v1::IsSymlinkResponse>, Status> {
            unimplemented()
        }
        async fn mkdir(
            &self,
            _: Request<v1::MkdirRequest>,
        ) -> Result<Response<v1::MkdirResponse>, Status> {
            unimplemented()
        }
        async fn rmdir(
            &self,
            _: Request<v1::RmdirRequest>,
        ) -> Result<Response<v1::RmdirResponse>, Status> {
            unimplemented()
        }
    }

    pub fn main() -> ExitCode {
        let a = Args::parse();
        // The daemon's runtime (crates/csi-proxy/src/main.rs).
        let rt = match csi_proxy_server::daemon::runtime() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("csi-proxy-bench-server: {e}");
                return ExitCode::FAILURE;
            }
        };
        match rt.block_on(serve(a)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("csi-proxy-bench-server: {e}");
                ExitCode::FAILURE
            }
        }
    }

    async fn serve(a: Args) -> Result<(), String> {
        let policy =
            PathPolicy::new(PathStyle::Posix, &a.kubelet_path, &[]).map_err(|e| e.to_string())?;
        let svc = FilesystemService::new(
            Arc::new(csi_proxy_host::linux::filesystem::LinuxFilesystemHost::new()),
            Arc::new(policy),
        );
        if matches!(a.layers, Layers::Logging | Layers::DaemonStack) {
            // As the daemon's init_logging at its defaults (info, stderr, no colour).
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
                .with_target(false)
                .with_ansi(false)
                .with_writer(std::io::stderr)
                .init();
        }
        let fs = match a.layers {
            Layers::Adapter | Layers::DaemonStack => {
                Routes::new(FilesystemV1::new(svc).into_server())
            }
            _ => Routes::new(v1::filesystem_server::FilesystemServer::new(Bare {
                svc,
                noop: a.layers == Layers::Noop,
            })),
        };
        if a.layers == Layers::DaemonStack {
            let endpoint = Endpoint {
                group: "filesystem",
                version: "v1",
                routes: fs,
                place: csi_proxy_server::daemon::Place::Default,
            };
            let listen = Listen::Unix {
                dir: a.socket_dir,
                gid: None,
            };
            return daemon::serve(vec![endpoint], listen, std::future::pending())
                .await
                .map_err(|e| e.to_string());
        }
        let (_reporter, health) = tonic_health::server::health_reporter();
        let routes = fs.add_service(health);
        unix::ensure_dir(&a.socket_dir).map_err(|e| e.to_string())?;
        let path = unix::socket_path(&a.socket_dir, "filesystem", "v1");
        let accepted = UnixListenerStream::new(unix::bind(&path, None).map_err(|e| e.to_string())?);
        let name = path.display().to_string();
        let mut builder = Server::builder();
        let r = match a.layers {
            Layers::Deadline => {
                builder
                    .layer(csi_proxy_server::spec_status::Layer)
                    .add_routes(routes)
                    .serve_with_incoming(accepted)
                    .await
            }
            Layers::Accept => {
                let accepted = AcceptBackoff::new(accepted, name);
                builder
                    .add_routes(routes)
                    .serve_with_incoming(accepted)
                    .await
            }
            Layers::Handshake => {
                let accepted = accepted.map(|c| c.map(HandshakeTimeout::new));
                builder
                    .add_routes(routes)
                    .serve_with_incoming(accepted)
                    .await
            }
            Layers::Authority => {
                let accepted = accepted.map(|c| c.map(AuthorityFix::new));
                builder
                    .add_routes(routes)
                    .serve_with_incoming(accepted)
                    .await
            }
            _ => {
                builder
                    .add_routes(routes)
                    .serve_with_incoming(accepted)
                    .await
            }
        };
        r.map_err(|e| e.to_string())
    }
}

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!("csi-proxy-bench-server: Linux only (Unix sockets)");
    std::process::ExitCode::from(2)
}
