//! The Linux benchmark run: a real daemon on Unix sockets in a temp dir, clients in this process.

mod in_use;
mod layers;
mod lean;
mod load;
mod procs;
mod profiles;
mod stage;

use layers::*;
use load::*;
use procs::*;
use stage::*;

use crate::stats::{Row, Samples, fmt_d, fmt_mib, print_markdown, print_table, ratio};
use crate::syscalls;
use clap::Parser;
use csi_proxy_client::Connector;
use csi_proxy_client::disk::DiskClient;
use csi_proxy_client::filesystem::FilesystemClient;
use csi_proxy_client::health::{self, ServingStatus};
use csi_proxy_client::volume::VolumeClient;
use csi_proxy_core::disk::DiskService;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::volume::VolumeService;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::{Code, Status};

/// Benchmarks a release csi-proxy against in-process host calls; prints one table.
#[derive(Debug, Parser)]
#[command(name = "csi-proxy-bench")]
struct Args {
    /// The daemon binary to measure (build it with --release).
    #[arg(long, default_value = "target/release/csi-proxy")]
    daemon: PathBuf,
    /// Sequential calls per single-client measurement.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Seconds per 64-client measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Concurrent clients (each with its own connection).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Start-up measurements (the median is reported).
    #[arg(long, default_value_t = 5)]
    startups: usize,
    /// Size of each loop-device disk for the stage flow, MiB.
    #[arg(long, default_value_t = 256)]
    disk_mib: u64,
    /// Only the per-request costs: start-up, idle RSS, PathExists against the health check on
    /// the same endpoint (1 and N clients, system calls per request, threads), and the layer
    /// table; no ListDiskIDs, stage flow or GetVolumeStats.
    #[arg(long)]
    costs_only: bool,
    /// The bench-only servers of the layer table (plain tonic with none, one or all of the
    /// daemon's layers); default: `csi-proxy-bench-server` beside this binary.
    #[arg(long)]
    baseline_server: Option<PathBuf>,
    /// Skip the layer table (the daemon's layers against a bare tonic server).
    #[arg(long)]
    no_layers: bool,
    /// Only the in-use rule's cost: a repeated PartitionDisk with 0, 1,000 and 3,000 extra
    /// processes (50 descriptors each), `--calls` of them per figure.
    #[arg(long)]
    in_use: bool,
    /// Only what a profile costs a call: PathExists and Mkdir without `--profiles` and under
    /// one profile (its plugin directory, a claimed pod directory), `--calls` of each.
    #[arg(long)]
    profiles: bool,
    /// With `--in-use`: another daemon binary (the build before a change) measured in the
    /// same run, in a column before this one's.
    #[arg(long)]
    before_daemon: Option<PathBuf>,
}

/// The layer table's servers: `csi-proxy-bench-server --layers <name>`, and what each row is.
const LAYERS: [(&str, &str); 9] = [
    (
        "bare",
        "bare tonic (serve_with_incoming, handler calls the service)",
    ),
    (
        "noop",
        "bare tonic, PathExists answered with no work (no path check, no statx): the floor",
    ),
    (
        "adapter",
        "bare + our adapter (call.rs: metrics, inline slot, logging)",
    ),
    (
        "deadline",
        "bare + spec_status layer (deadline, status fixes)",
    ),
    ("accept", "bare + accept back-off"),
    ("handshake", "bare + handshake timeout"),
    ("authority", "bare + :authority rewriter"),
    ("logging", "bare + the daemon's log subscriber (info)"),
    (
        "daemon-stack",
        "daemon::serve, 1 endpoint (all of the above)",
    ),
];

pub fn main() -> ExitCode {
    let args = Args::parse();
    if !args.daemon.exists() {
        eprintln!(
            "csi-proxy-bench: no daemon binary at {} (build it: cargo build --release -p csi-proxy)",
            args.daemon.display()
        );
        return ExitCode::from(2);
    }
    if args.in_use {
        let head = match args.before_daemon {
            Some(_) => vec![
                "PartitionDisk, median",
                "before",
                "after, --in-use-scan=proc",
                "after",
            ],
            None => vec![
                "PartitionDisk, median",
                "this build, --in-use-scan=proc",
                "this build",
            ],
        };
        return crate::run_to_exit(
            in_use::in_use_costs(&args.daemon, args.before_daemon.as_deref(), args.calls),
            |rows| print_markdown(&head, &rows),
        );
    }
    if args.profiles {
        let head = [
            "round",
            "daemon",
            "path",
            "PathExists: CPU / p50",
            "Mkdir (exists): CPU / p50",
        ];
        return crate::run_to_exit(profiles::profile_costs(&args.daemon, args.calls), |rows| {
            print_markdown(&head, &rows)
        });
    }
    crate::run_to_exit(run(&args), |(rows, layers)| {
        print_table(&rows);
        if !layers.is_empty() {
            println!();
            print_markdown(&LAYER_HEAD, &layers);
        }
    })
}

/// The result table and the layer table.
type Report = (Vec<Row>, Vec<Vec<String>>);

async fn run(a: &Args) -> Result<Report, String> {
    let mut rows = Vec::new();
    let load = Duration::from_secs_f64(a.seconds);

    // Start-up: spawn to every endpoint answering its health check.
    let mut startups = Vec::new();
    for _ in 0..a.startups.max(1) {
        let t = Instant::now();
        let d = Daemon::spawn(&a.daemon)?;
        wait_all_serving(&d.connector(), Duration::from_secs(30)).await?;
        startups.push(t.elapsed());
    }
    startups.sort();
    rows.push(Row::single(
        format!(
            "start-up to 23 endpoints answering (median of {})",
            startups.len()
        ),
        format!(
            "{} (max {})",
            fmt_d(startups[startups.len() / 2]),
            fmt_d(startups[startups.len() - 1])
        ),
    ));

    let d = Daemon::spawn(&a.daemon)?;
    let c = d.connector();
    wait_all_serving(&c, Duration::from_secs(30)).await?;
    let pid = d.child.id();

    // Idle with a connection open to every endpoint.
    let mut open = Vec::new();
    for group in csi_proxy_api::GROUPS {
        for version in csi_proxy_api::versions(group).unwrap_or_default() {
            open.push(c.channel(group, version).await.map_err(|e| e.to_string())?);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    rows.push(Row::single(
        format!("daemon RSS idle, {} endpoints connected", open.len()),
        fmt_mib(d.rss()),
    ));

    // PathExists against the health check on the same endpoint; then the same measurements
    // of the bench-only servers (the daemon's layers one by one against bare tonic).
    let probe = d.kubelet().join("probe");
    std::fs::create_dir_all(&probe).map_err(|e| e.to_string())?;
    let probe = probe.display().to_string();
    let costs = endpoint_costs(a, &c, pid, &probe).await?;
    deep_path_syscalls(a, &c, pid, &d.kubelet(), &mut rows).await?;
    let (seq, par) = (&costs.path_exists, &costs.many.0);
    let (h50, p50) = (costs.health.quantile(0.5), seq.quantile(0.5));
    rows.push(Row {
        what: "PathExists 1 client p50 (floor: health Check p50, same endpoint, alternating)"
            .into(),
        daemon: fmt_d(p50),
        direct: fmt_d(h50),
        // Two decimals: the goal is 1.15×.
        ratio: format!("{:.2}×", p50.as_secs_f64() / h50.as_secs_f64().max(1e-9)),
    });
    rows.push(Row::single(
        "daemon CPU time per PathExists / health Check (1 client, all threads)",
        format!("{} / {}", fmt_d(costs.cpu.0), fmt_d(costs.cpu.1)),
    ));
    match &costs.syscalls {
        Err(why) => na(&mut rows, "system calls per request", why),
        Ok((pe, hc)) => {
            let n = a.calls.min(2000);
            rows.push(Row::single(
                format!("daemon system calls per PathExists (strace -c -f, {n} calls)"),
                pe.shown(),
            ));
            rows.push(Row::single(
                format!("daemon system calls per health Check (strace -c -f, {n} calls)"),
                hc.shown(),
            ));
        }
    }
    let direct = Direct::new(&d.kubelet(), &d.dir.path().join("direct-state"))?;
    let dseq = direct_sequential(a.calls, || {
        let _ = std::hint::black_box(direct.fs.path_exists(&probe));
    });
    let dpar = direct_concurrent(a.clients, load, || {
        let _ = std::hint::black_box(direct.fs.path_exists(&probe));
    });
    rpc_rows(
        &mut rows,
        "PathExists",
        a.clients,
        seq,
        par,
        Some((&dseq, &dpar)),
    );
    load_rows(
        &mut rows,
        &format!("PathExists {} lean raw HTTP/2 clients", a.clients),
        &costs.lean.0,
        Some(&dpar),
    );
    rows.push(Row::single(
        format!(
            "daemon CPU time per PathExists under {} tonic / lean clients",
            a.clients
        ),
        format!(
            "{} / {}",
            fmt_d(costs.many.1.cpu_per_call),
            fmt_d(costs.lean.1.cpu_per_call)
        ),
    ));
    rows.push(Row::single(
        format!("daemon RSS peak under {}-client load", a.clients),
        fmt_mib(costs.peak().0),
    ));
    let t = &costs.threads;
    rows.push(Row::single(
        format!(
            "daemon threads: idle / after 1 client / peak under {} clients / just after",
            a.clients
        ),
        format!("{} / {} / {} / {}", t[0], t[1], costs.peak().1, t[2]),
    ));
    rows.push(Row::single(
        "`:authority` rewriter alone, CPU per request (in-process): pipe path fixed / valid passed",
        format!(
            "{} / {} ns",
            crate::rewriter::per_request(br"\\.\pipe\csi-proxy-filesystem-v1").as_nanos(),
            crate::rewriter::per_request(b"localhost").as_nanos()
        ),
    ));
    let mut layers = Vec::new();
    if !a.no_layers {
        let bin = match &a.baseline_server {
            Some(b) => b.clone(),
            None => std::env::current_exe()
                .map_err(|e| e.to_string())?
                .with_file_name("csi-proxy-bench-server"),
        };
        let mut bare = None;
        for (name, what) in LAYERS {
            let costs = baseline_costs(a, &bin, name).await?;
            let base = bare.get_or_insert_with(|| costs.path_exists.quantile(0.5));
            layers.push(layer_row(what, &costs, *base));
        }
        if let Some(base) = bare {
            layers.push(layer_row("the daemon (23 endpoints)", &costs, base));
        }
        // The layer table took a minute: past tokio's keep-alive of idle blocking threads.
        rows.push(Row::single(
            "daemon threads once idle again (after the layer table)",
            threads_of(pid).to_string(),
        ));
    }
    if a.costs_only {
        return Ok((rows, layers));
    }

    // ListDiskIDs.
    let mut disk = DiskClient::connect(&c).await.map_err(|e| e.to_string())?;
    match disk.list_disk_ids().await {
        Err(s) if s.code() == Code::Unimplemented => {
            na(
                &mut rows,
                "ListDiskIDs",
                "the disk host is not plugged in on this build",
            );
        }
        Err(s) => na(
            &mut rows,
            "ListDiskIDs",
            &format!("{:?}: {}", s.code(), s.message()),
        ),
        Ok(_) => {
            let seq = sequential(a.calls / 4, || {
                let mut d = disk.clone();
                async move { d.list_disk_ids().await.map(drop) }
            })
            .await
            .map_err(|e| format!("ListDiskIDs: {e}"))?;
            let mut clients = Vec::new();
            for _ in 0..a.clients {
                let ch = c.channel("disk", "v1").await.map_err(|e| e.to_string())?;
                clients.push(DiskClient::from_channel("v1", ch).ok_or("disk v1")?);
            }
            let (par, _) = concurrent(
                clients,
                load,
                |mut d: DiskClient| async move { d.list_disk_ids().await.map(drop) },
                pid,
            )
            .await
            .map_err(|e| format!("ListDiskIDs: {e}"))?;
            let dseq = direct_sequential(a.calls / 4, || {
                let _ = std::hint::black_box(direct.disk.list_disk_ids());
            });
            let dpar = direct_concurrent(a.clients, load, || {
                let _ = std::hint::black_box(direct.disk.list_disk_ids());
            });
            rpc_rows(
                &mut rows,
                "ListDiskIDs",
                a.clients,
                &seq,
                &par,
                Some((&dseq, &dpar)),
            );
        }
    }

    // The stage flow and GetVolumeStats need a disk: a loop device.
    stage_flow(a, &d, &direct, &mut rows, load).await;
    drop(open);
    Ok((rows, layers))
}

/// System calls per PathExists and per Mkdir (of a directory that exists, as drivers call it on
/// every stage) of a staging path as deep as kubelet makes them: what resolving each component
/// beneath its held parent costs.
async fn deep_path_syscalls(
    a: &Args,
    c: &Connector,
    pid: u32,
    kubelet: &std::path::Path,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    const DEEP: &str = "plugins/kubernetes.io/csi/example.csi.io/0123abcd/globalmount";
    let path = kubelet.join(DEEP);
    std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
    let path = path.display().to_string();
    let what = |rpc: &str, n: usize| {
        format!(
            "daemon system calls per {rpc} of a path 6 levels below the kubelet path (strace -c -f, {n} calls)"
        )
    };
    let n = a.calls.min(2000);
    if let Err(why) = syscalls::available() {
        na(rows, &what("PathExists / Mkdir", n), &why);
        return Ok(());
    }
    let fs = FilesystemClient::connect(c)
        .await
        .map_err(|e| e.to_string())?;
    let exists = || {
        let (mut fs, p) = (fs.clone(), path.clone());
        async move { fs.path_exists(&p).await.map(drop) }
    };
    let mkdir = || {
        let (mut fs, p) = (fs.clone(), path.clone());
        async move { fs.mkdir(&p).await.map(drop) }
    };
    let pe = syscalls::count(pid, n, exists).await?;
    let mk = syscalls::count(pid, n, mkdir).await?;
    rows.push(Row::single(what("PathExists", n), pe.shown()));
    rows.push(Row::single(what("Mkdir", n), mk.shown()));
    // The probe again from a client that pings on each answer as grpc-go does: the PING's
    // acknowledgement should leave with the next answer, not in a write of its own.
    {
        use csi_proxy_api::filesystem::v1::{PathExistsRequest, PathExistsResponse};
        use prost::Message;
        let probe = kubelet.join("probe").display().to_string();
        let call = lean::UnaryCall::new(
            "/v1.Filesystem/PathExists",
            &PathExistsRequest { path: probe }.encode_to_vec(),
            &PathExistsResponse { exists: true }.encode_to_vec(),
        );
        let socket = PathBuf::from(c.endpoint_name("filesystem", "v1"));
        let conn = lean::LeanConn::connect(&socket, call).await?;
        let conn = Arc::new(tokio::sync::Mutex::new(conn.pinging_like_grpc_go()));
        let call = || {
            let conn = conn.clone();
            async move { conn.lock().await.call().await.map_err(Status::internal) }
        };
        let pe = syscalls::count(pid, n, call).await?;
        rows.push(Row::single(
            format!(
                "daemon system calls per PathExists, 1 level below, from a client pinging on each answer as grpc-go does (strace -c -f, {n} calls)"
            ),
            pe.shown(),
        ));
    }
    // Depths 4 and 8 (a pod's volume directory, and a directory inside its mounted volume):
    // how the cost grows with depth.
    for rel in [
        "pods/0123abcd-uid/volumes/kubernetes.io~csi",
        "pods/0123abcd-uid/volumes/kubernetes.io~csi/pvc-0123abcd/mount/data/logs",
    ] {
        let path = kubelet.join(rel);
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        let path = path.display().to_string();
        let exists = || {
            let (mut fs, p) = (fs.clone(), path.clone());
            async move { fs.path_exists(&p).await.map(drop) }
        };
        let pe = syscalls::count(pid, n, exists).await?;
        let depth = rel.split('/').count();
        rows.push(Row::single(
            format!(
                "daemon system calls per PathExists of a path {depth} levels below the kubelet path (strace -c -f, {n} calls)"
            ),
            pe.shown(),
        ));
    }
    Ok(())
}
