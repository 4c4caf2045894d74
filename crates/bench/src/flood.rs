//! `csi-proxy-bench-flood`: a flood of DiscoverTargetPortal against a portal that accepts and
//! never answers, while another client's Mkdir is timed; before (every call admitted at once,
//! as before the admission caps) and after, in the same run.
//!
//! The daemon is served in this process, over Unix sockets, with the filesystem group over a
//! temporary kubelet root and the iSCSI group over the Linux iSCSI host (its own SendTargets
//! discovery, whose wait for an answer is the host's 15 s). Both rows run the same flood: the
//! portal is registered with AddTargetPortal, `--calls` DiscoverTargetPortal without a deadline
//! are sent over `--connections` connections, and once they are in flight another client's
//! Mkdir with a `--deadline` s deadline is timed `--mkdirs` times in a row; the portal's open
//! connections at that moment are counted. Then the portal closes, the flood ends, and the next
//! row starts. Nothing here asserts a time.

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!("csi-proxy-bench-flood: runs on Linux (Unix sockets)");
    std::process::ExitCode::from(2)
}

#[cfg(target_os = "linux")]
mod linux {
    use clap::Parser;
    use csi_proxy_api::filesystem::v1 as fs;
    use csi_proxy_api::iscsi::v1alpha2 as iscsi;
    use csi_proxy_client::Connector;
    use csi_proxy_core::filesystem::FilesystemService;
    use csi_proxy_core::iscsi::IscsiService;
    use csi_proxy_core::paths::{PathPolicy, PathStyle};
    use csi_proxy_server::daemon::{self, Endpoint};
    use std::net::TcpListener;
    use std::process::ExitCode;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Flood figures before and after the admission caps.
    #[derive(Debug, Parser)]
    #[command(name = "csi-proxy-bench-flood")]
    struct Args {
        /// DiscoverTargetPortal calls in the flood, without a deadline.
        #[arg(long, default_value_t = 2400)]
        calls: usize,
        /// Connections the flood is sent over.
        #[arg(long, default_value_t = 21)]
        connections: usize,
        /// Mkdir calls of the other client, one after another.
        #[arg(long, default_value_t = 4)]
        mkdirs: usize,
        /// The other client's deadline, seconds.
        #[arg(long, default_value_t = 10.0)]
        deadline: f64,
    }

    /// A portal that accepts connections and never answers; counts those open.
    struct SilentPortal {
        port: u16,
        peak: Arc<AtomicUsize>,
        held: Arc<Mutex<Vec<std::net::TcpStream>>>,
        closed: Arc<AtomicBool>,
    }

    impl SilentPortal {
        fn start() -> std::io::Result<SilentPortal> {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let port = listener.local_addr()?.port();
            let peak = Arc::new(AtomicUsize::new(0));
            let held = Arc::new(Mutex::new(Vec::new()));
            let closed = Arc::new(AtomicBool::new(false));
            let (p, h, c) = (peak.clone(), held.clone(), closed.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if c.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(conn) = conn {
                        let mut held = h.lock().unwrap_or_else(|e| e.into_inner());
                        held.push(conn);
                        // Connections the daemon closed (its discovery gave up) are not
                        // open: what it sent is read away, then the end shows.
                        held.retain_mut(still_open);
                        p.fetch_max(held.len(), Ordering::SeqCst);
                    }
                }
            });
            Ok(SilentPortal {
                port,
                peak,
                held,
                closed,
            })
        }

        /// Closes every connection and stops accepting: the discoveries end at once.
        fn close(&self) {
            self.closed.store(true, Ordering::SeqCst);
            self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
            // Wakes the accept loop so it sees `closed`.
            let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        }
    }

    /// Whether the daemon still holds `s` open (reads away what it sent).
    fn still_open(s: &mut std::net::TcpStream) -> bool {
        use std::io::Read;
        if s.set_nonblocking(true).is_err() {
            return false;
        }
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
    }

    /// One row's figures.
    struct Row {
        name: &'static str,
        portal_peak: usize,
        threads_peak: usize,
        mkdirs: Vec<(Duration, String)>,
        flood: std::collections::BTreeMap<String, usize>,
        flood_seconds: f64,
    }

    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
    }

    async fn row(name: &'static str, bypass: bool, args: &Args) -> Result<Row, String> {
        csi_proxy_server::admission::bypass_for_benchmarks(bypass);
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let kubelet = dir.path().join("kubelet");
        let state = dir.path().join("state");
        for d in [&kubelet, &state] {
            std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
        }
        let root = kubelet.display().to_string();
        let policy =
            Arc::new(PathPolicy::new(PathStyle::Posix, &root, &[]).map_err(|e| e.to_string())?);
        let fs_svc = FilesystemService::new(
            Arc::new(csi_proxy_host::linux::filesystem::LinuxFilesystemHost::new()),
            policy,
        );
        let iscsi_svc = IscsiService::new(Arc::new(
            csi_proxy_host::linux::iscsi::LinuxIscsiHost::new(&state),
        ));
        let endpoints = vec![
            Endpoint {
                group: "filesystem",
                version: "v1",
                routes: tonic::service::Routes::new(
                    csi_proxy_server::filesystem::FilesystemV1::new(fs_svc).into_server(),
                ),
                place: csi_proxy_server::daemon::Place::Default,
            },
            Endpoint {
                group: "iscsi",
                version: "v1alpha2",
                routes: tonic::service::Routes::new(
                    csi_proxy_server::iscsi::IscsiV1alpha2::new(iscsi_svc).into_server(),
                ),
                place: csi_proxy_server::daemon::Place::Default,
            },
        ];
        let sockets = dir.path().join("run");
        let (serving, ready_rx, stop_tx) = daemon::serve_in_dir(endpoints, sockets.clone());
        let daemon = tokio::spawn(serving);
        ready_rx
            .await
            .map_err(|_| "the daemon did not start".to_string())?;
        let connector = Connector::SocketDir(sockets);
        let portal_srv = SilentPortal::start().map_err(|e| e.to_string())?;
        let portal = Some(iscsi::TargetPortal {
            target_address: "127.0.0.1".into(),
            target_port: u32::from(portal_srv.port),
        });
        let channel = |group, version| {
            let connector = connector.clone();
            async move {
                connector
                    .channel(group, version)
                    .await
                    .map_err(|e| e.to_string())
            }
        };
        iscsi::iscsi_client::IscsiClient::new(channel("iscsi", "v1alpha2").await?)
            .add_target_portal(iscsi::AddTargetPortalRequest {
                target_portal: portal.clone(),
            })
            .await
            .map_err(|e| format!("AddTargetPortal: {e}"))?;
        let mut clients = Vec::new();
        for _ in 0..args.connections {
            clients.push(iscsi::iscsi_client::IscsiClient::new(
                channel("iscsi", "v1alpha2").await?,
            ));
        }
        let started = Instant::now();
        let flood: Vec<_> = (0..args.calls)
            .map(|i| {
                let mut c = clients[i % clients.len()].clone();
                let portal = portal.clone();
                tokio::spawn(async move {
                    c.discover_target_portal(iscsi::DiscoverTargetPortalRequest {
                        target_portal: portal,
                    })
                    .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut other =
            fs::filesystem_client::FilesystemClient::new(channel("filesystem", "v1").await?);
        let mut mkdirs = Vec::new();
        let mut threads_peak = threads();
        for i in 0..args.mkdirs {
            let mut r = tonic::Request::new(fs::MkdirRequest {
                path: format!("{root}/plugins/other-{i}"),
            });
            r.set_timeout(Duration::from_secs_f64(args.deadline));
            let t = Instant::now();
            let answer = match other.mkdir(r).await {
                Ok(_) => "OK".to_string(),
                Err(s) => format!("{:?}", s.code()),
            };
            mkdirs.push((t.elapsed(), answer));
            threads_peak = threads_peak.max(threads());
        }
        let portal_peak = portal_srv.peak.load(Ordering::SeqCst);
        portal_srv.close();
        let mut codes = std::collections::BTreeMap::new();
        for f in flood {
            let code = match f.await {
                Ok(Ok(_)) => "OK".to_string(),
                Ok(Err(s)) => format!("{:?}", s.code()),
                Err(e) => format!("task: {e}"),
            };
            *codes.entry(code).or_insert(0) += 1;
        }
        let flood_seconds = started.elapsed().as_secs_f64();
        let _ = stop_tx.send(());
        let _ = daemon.await;
        csi_proxy_server::admission::bypass_for_benchmarks(false);
        Ok(Row {
            name,
            portal_peak,
            threads_peak,
            mkdirs,
            flood: codes,
            flood_seconds,
        })
    }

    pub fn main() -> ExitCode {
        let args = Args::parse();
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("csi-proxy-bench-flood: {e}");
                return ExitCode::FAILURE;
            }
        };
        let rows = rt.block_on(async {
            // After first: the blocking threads the "before" row starts outlive it (tokio keeps
            // an idle one 10 s), and would count in the next row.
            let after = row("after (admission caps)", false, &args).await?;
            let before = row("before (every call admitted at once)", true, &args).await?;
            Ok::<_, String>([before, after])
        });
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("csi-proxy-bench-flood: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!(
            "{} DiscoverTargetPortal without a deadline over {} connections against a silent \
             portal; another client's Mkdir with a {} s deadline, {} in a row",
            args.calls, args.connections, args.deadline, args.mkdirs
        );
        println!(
            "| | portal connections open at once | process threads | other client's Mkdir | flood answers | flood ended after |"
        );
        println!("|---|---|---|---|---|---|");
        for r in rows {
            let mkdirs: Vec<String> = r
                .mkdirs
                .iter()
                .map(|(d, a)| format!("{a} {:.1} ms", d.as_secs_f64() * 1e3))
                .collect();
            println!(
                "| {} | {} | {} | {} | {:?} | {:.1} s |",
                r.name,
                r.portal_peak,
                r.threads_peak,
                mkdirs.join(", "),
                r.flood,
                r.flood_seconds
            );
        }
        ExitCode::SUCCESS
    }
}
