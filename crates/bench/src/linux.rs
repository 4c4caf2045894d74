//! The Linux benchmark run: a real daemon on Unix sockets in a temp dir, clients in this process.

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
}

/// The layer table's servers: `csi-proxy-bench-server --layers <name>`, and what each row is.
const LAYERS: [(&str, &str); 8] = [
    (
        "bare",
        "bare tonic (serve_with_incoming, handler calls the service)",
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
    crate::run_to_exit(run(&args), |(rows, layers)| {
        print_table(&rows);
        if !layers.is_empty() {
            println!();
            print_markdown(&LAYER_HEAD, &layers);
        }
    })
}

/// A daemon in its own temp dir (sockets, kubelet root, log).
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

impl Daemon {
    fn spawn(bin: &Path) -> Result<Daemon, String> {
        Self::spawn_with(bin, |dir| {
            vec![format!("--state-dir={}", dir.join("state").display())]
        })
    }

    /// Starts `bin --kubelet-path=<dir>/kubelet --socket-dir=<dir>/run` plus the arguments
    /// `extra` makes from the temp dir.
    fn spawn_with(bin: &Path, extra: impl FnOnce(&Path) -> Vec<String>) -> Result<Daemon, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        std::fs::create_dir_all(dir.path().join("kubelet"))
            .map_err(|e| format!("kubelet dir: {e}"))?;
        let log = std::fs::File::create(dir.path().join("daemon.log"))
            .map_err(|e| format!("daemon log: {e}"))?;
        let child = Command::new(bin)
            .arg(format!(
                "--kubelet-path={}",
                dir.path().join("kubelet").display()
            ))
            .arg(format!("--socket-dir={}", dir.path().join("run").display()))
            .args(extra(dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        Ok(Daemon { child, dir })
    }

    fn connector(&self) -> Connector {
        Connector::SocketDir(self.dir.path().join("run"))
    }

    fn kubelet(&self) -> PathBuf {
        self.dir.path().join("kubelet")
    }

    fn rss(&self) -> u64 {
        rss_of(self.child.id())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CPU time process `pid`'s threads now alive have used (the first field of each
/// `/proc/<pid>/task/<tid>/schedstat`, nanoseconds on a CPU).
fn cpu_of(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// The CPU time server `pid` spends per call over `n` sequential calls: all its threads, kernel
/// and user time, without the waits. Less noisy than a latency on a shared machine, as it does
/// not count the time the server waits for a core.
async fn cpu_per_call<F, Fut>(pid: u32, n: usize, mut call: F) -> Result<Duration, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Status>>,
{
    let before = cpu_of(pid);
    for _ in 0..n {
        call().await?;
    }
    Ok(cpu_of(pid).saturating_sub(before) / n.max(1) as u32)
}

/// The threads of process `pid` now (its entries in `/proc/<pid>/task`).
fn threads_of(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count() as u64)
}

fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The floor: the daemon's services over the same Linux hosts, called in this process.
struct Direct {
    fs: FilesystemService,
    disk: DiskService,
    volume: VolumeService,
}

impl Direct {
    /// Built as the daemon builds them (crates/csi-proxy/src/hosts.rs), over the same kubelet
    /// root and a state dir of their own.
    fn new(kubelet: &Path, state: &Path) -> Result<Direct, String> {
        use csi_proxy_host::linux;
        let policy = Arc::new(
            PathPolicy::new(PathStyle::Posix, &kubelet.display().to_string(), &[])
                .map_err(|e| e.to_string())?,
        );
        let fs = FilesystemService::new(
            Arc::new(linux::filesystem::LinuxFilesystemHost::new()),
            policy.clone(),
        );
        let disk = DiskService::new(Arc::new(linux::disk::LinuxDiskHost::new()), policy);
        let volume = VolumeService::new(
            Arc::new(linux::volume::LinuxVolumeHost::new(
                state,
                linux::volume::FsType::default(),
            )),
            fs.clone(),
        );
        Ok(Direct { fs, disk, volume })
    }
}

/// Polls until every endpoint answers its health check with SERVING.
async fn wait_all_serving(c: &Connector, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    for group in csi_proxy_api::GROUPS {
        for version in csi_proxy_api::versions(group).unwrap_or_default() {
            wait_serving(c, group, version, t + limit).await?;
        }
    }
    Ok(())
}

/// Polls until one endpoint answers its health check with SERVING, at most until `until`.
async fn wait_serving(
    c: &Connector,
    group: &str,
    version: &str,
    until: Instant,
) -> Result<(), String> {
    loop {
        if let Ok(ServingStatus::Serving) = health::check(c, group, version, "").await {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(format!("{group} {version} did not answer in time"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `n` calls of `a` and `n` of `b`, alternating, so both see the same moments of a noisy
/// machine.
async fn paired<A, AF, B, BF>(n: usize, mut a: A, mut b: B) -> Result<(Samples, Samples), Status>
where
    A: FnMut() -> AF,
    AF: Future<Output = Result<(), Status>>,
    B: FnMut() -> BF,
    BF: Future<Output = Result<(), Status>>,
{
    for _ in 0..(n / 10).max(10) {
        a().await?; // warm-up: connections, caches
        b().await?;
    }
    let (mut sa, mut sb) = (Samples::default(), Samples::default());
    for _ in 0..n {
        let t = Instant::now();
        a().await?;
        let u = Instant::now();
        b().await?;
        sb.latencies.push(u.elapsed());
        sa.latencies.push(u - t);
    }
    // Each alone would have taken its own calls' time.
    sa.wall = sa.latencies.iter().sum();
    sb.wall = sb.latencies.iter().sum();
    Ok((sa, sb))
}

/// `n` calls one after another.
async fn sequential<F, Fut>(n: usize, mut call: F) -> Result<Samples, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Status>>,
{
    for _ in 0..(n / 10).max(10) {
        call().await?; // warm-up: connections, caches
    }
    let mut s = Samples::default();
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        call().await?;
        s.latencies.push(t.elapsed());
    }
    s.wall = start.elapsed();
    Ok(s)
}

/// The largest resident size and thread count of a server sampled during a load.
#[derive(Debug, Default, Clone, Copy)]
struct Peak {
    rss: u64,
    threads: u64,
}

/// One task per client, each calling in a loop for `dur`; the server's (`pid`) RSS and thread
/// count are sampled every 50 ms meanwhile.
async fn concurrent<C, F, Fut>(
    clients: Vec<C>,
    dur: Duration,
    call: F,
    pid: u32,
) -> Result<(Samples, Peak), Status>
where
    C: Clone + Send + 'static,
    F: Fn(C) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), Status>> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak[0].fetch_max(rss_of(pid), Ordering::Relaxed);
                peak[1].fetch_max(threads_of(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in clients {
        let (call, stop) = (call.clone(), stop.clone());
        tasks.spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                call(c.clone()).await?;
                lat.push(t.elapsed());
            }
            Ok::<_, Status>(lat)
        });
    }
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut s = Samples::default();
    let mut first_err = None;
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(Ok(lat)) => s.latencies.extend(lat),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(Status::internal(e.to_string()));
            }
        }
    }
    s.wall = start.elapsed();
    let _ = sampler.await;
    match first_err {
        Some(e) => Err(e),
        None => Ok((
            s,
            Peak {
                rss: peak[0].load(Ordering::Relaxed),
                threads: peak[1].load(Ordering::Relaxed),
            },
        )),
    }
}

/// The floor, one thread: `n` direct calls.
fn direct_sequential<F>(n: usize, call: F) -> Samples
where
    F: Fn(),
{
    for _ in 0..(n / 10).max(10) {
        call();
    }
    let mut s = Samples::default();
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        call();
        s.latencies.push(t.elapsed());
    }
    s.wall = start.elapsed();
    s
}

/// The floor, `threads` OS threads calling for `dur`.
fn direct_concurrent<F>(threads: usize, dur: Duration, call: F) -> Samples
where
    F: Fn() + Sync,
{
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let lat: Vec<Vec<Duration>> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut lat = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        call();
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    Samples {
        latencies: lat.into_iter().flatten().collect(),
        wall: start.elapsed(),
    }
}

/// Rows for one RPC: single-client and n-client p50/p99/throughput, each against the floor when
/// there is one.
fn rpc_rows(
    rows: &mut Vec<Row>,
    name: &str,
    clients: usize,
    seq: &Samples,
    par: &Samples,
    direct: Option<(&Samples, &Samples)>,
) {
    let (ds, dp) = (direct.map(|x| x.0), direct.map(|x| x.1));
    load_rows(rows, &format!("{name} 1 client"), seq, ds);
    load_rows(rows, &format!("{name} {clients} clients"), par, dp);
}

/// The p50, p99 and throughput rows of one load (`what`: the RPC and its clients).
fn load_rows(rows: &mut Vec<Row>, what: &str, daemon: &Samples, direct: Option<&Samples>) {
    for q in [0.5, 0.99] {
        let secs = |s: &Samples| s.quantile(q).as_secs_f64();
        rows.push(Row {
            what: format!("{what} p{}", (q * 100.0).round()),
            daemon: fmt_d(daemon.quantile(q)),
            direct: direct.map_or("n/a".into(), |s| fmt_d(s.quantile(q))),
            ratio: direct.map_or("-".into(), |s| ratio(secs(daemon), secs(s))),
        });
    }
    rows.push(Row {
        what: format!("{what} throughput"),
        daemon: format!("{:.0}/s", daemon.throughput()),
        direct: direct.map_or("n/a".into(), |s| format!("{:.0}/s", s.throughput())),
        // Inverted so that, as elsewhere, >1 means the daemon costs more than the floor.
        ratio: direct.map_or("-".into(), |s| ratio(s.throughput(), daemon.throughput())),
    });
}

fn na(rows: &mut Vec<Row>, what: &str, why: &str) {
    rows.push(Row::single(what, format!("n/a: {why}")));
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
    let (seq, par) = (&costs.path_exists, &costs.many);
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
    rows.push(Row::single(
        format!("daemon RSS peak under {}-client load", a.clients),
        fmt_mib(costs.peak.rss),
    ));
    let t = &costs.threads;
    rows.push(Row::single(
        format!(
            "daemon threads: idle / after 1 client / peak under {} clients / just after",
            a.clients
        ),
        format!("{} / {} / {} / {}", t[0], t[1], costs.peak.threads, t[2]),
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

/// What one server (the daemon, or a bench-only server) costs on its filesystem v1 endpoint.
struct EndpointCosts {
    /// PathExists, 1 client, alternating with `health`.
    path_exists: Samples,
    /// The gRPC health check, same client, same endpoint.
    health: Samples,
    /// Server CPU time per PathExists and per health check (1 client, sequential).
    cpu: (Duration, Duration),
    /// PathExists from `--clients` clients, each on its own connection.
    many: Samples,
    /// During the `many` load.
    peak: Peak,
    /// System calls of the server per PathExists and per health check, or why not counted.
    syscalls: Result<(syscalls::PerCall, syscalls::PerCall), String>,
    /// The server's threads: idle, after the 1-client calls, just after the `many` load.
    threads: [u64; 3],
}

/// The per-request costs of the server `pid` behind `c`: 1-client PathExists against the health
/// check (alternating), system calls of each, the N-client load, thread counts.
async fn endpoint_costs(
    a: &Args,
    c: &Connector,
    pid: u32,
    probe: &str,
) -> Result<EndpointCosts, String> {
    let mut threads = [threads_of(pid), 0, 0];
    let fs = FilesystemClient::connect(c)
        .await
        .map_err(|e| e.to_string())?;
    let ch = c
        .channel("filesystem", "v1")
        .await
        .map_err(|e| e.to_string())?;
    let health = tonic_health::pb::health_client::HealthClient::new(ch);
    let check = move || {
        let mut h = health.clone();
        async move {
            h.check(tonic_health::pb::HealthCheckRequest::default())
                .await
                .map(drop)
        }
    };
    let exists = || {
        let mut fs = fs.clone();
        async move { fs.path_exists(probe).await.map(drop) }
    };
    let (path_exists, health) = paired(a.calls, exists, check.clone())
        .await
        .map_err(|e| format!("PathExists or health Check: {e}"))?;
    let cpu = (
        cpu_per_call(pid, a.calls, exists)
            .await
            .map_err(|e| format!("PathExists: {e}"))?,
        cpu_per_call(pid, a.calls, check.clone())
            .await
            .map_err(|e| format!("health Check: {e}"))?,
    );
    let n = a.calls.min(2000);
    let syscalls = match syscalls::available() {
        Err(why) => Err(why),
        Ok(()) => Ok((
            syscalls::count(pid, n, exists).await?,
            syscalls::count(pid, n, check).await?,
        )),
    };
    threads[1] = threads_of(pid);
    let mut clients = Vec::new();
    for _ in 0..a.clients {
        let ch = c
            .channel("filesystem", "v1")
            .await
            .map_err(|e| e.to_string())?;
        clients.push(FilesystemClient::from_channel("v1", ch).ok_or("filesystem v1")?);
    }
    let p = probe.to_string();
    let (many, peak) = concurrent(
        clients,
        Duration::from_secs_f64(a.seconds),
        move |mut fs: FilesystemClient| {
            let p = p.clone();
            async move { fs.path_exists(&p).await.map(drop) }
        },
        pid,
    )
    .await
    .map_err(|e| format!("PathExists: {e}"))?;
    threads[2] = threads_of(pid);
    Ok(EndpointCosts {
        path_exists,
        health,
        cpu,
        many,
        peak,
        syscalls,
        threads,
    })
}

/// The columns of the layer table.
const LAYER_HEAD: [&str; 9] = [
    "server (same run, same client)",
    "health p50",
    "PathExists p50",
    "PathExists ÷ health",
    "PathExists p50 − bare's",
    "server CPU per PathExists / health",
    "PathExists, N clients",
    "syscalls per PathExists / health",
    "threads idle / peak",
];

/// One row of the layer table.
fn layer_row(what: &str, c: &EndpointCosts, bare_p50: Duration) -> Vec<String> {
    let (h, p) = (c.health.quantile(0.5), c.path_exists.quantile(0.5));
    let extra = p.as_secs_f64() - bare_p50.as_secs_f64();
    vec![
        what.to_string(),
        fmt_d(h),
        fmt_d(p),
        format!("{:.2}×", p.as_secs_f64() / h.as_secs_f64().max(1e-9)),
        format!("{:+.1} µs", extra * 1e6),
        format!("{} / {}", fmt_d(c.cpu.0), fmt_d(c.cpu.1)),
        format!("{:.0}/s", c.many.throughput()),
        match &c.syscalls {
            Ok((pe, hc)) => format!("{:.1} / {:.1}", pe.total, hc.total),
            Err(_) => "n/a".into(),
        },
        format!("{} / {}", c.threads[0], c.peak.threads),
    ]
}

/// Starts the bench-only server `bin --layers <layers>` and measures it as the daemon is.
async fn baseline_costs(a: &Args, bin: &Path, layers: &str) -> Result<EndpointCosts, String> {
    let s = Daemon::spawn_with(bin, |_| vec![format!("--layers={layers}")])?;
    let c = s.connector();
    let until = Instant::now() + Duration::from_secs(30);
    wait_serving(&c, "filesystem", "v1", until)
        .await
        .map_err(|e| format!("{} --layers={layers}: {e}", bin.display()))?;
    let probe = s.kubelet().join("probe");
    std::fs::create_dir_all(&probe).map_err(|e| e.to_string())?;
    endpoint_costs(a, &c, s.child.id(), &probe.display().to_string()).await
}

/// A loop device over a sparse file; detached on drop.
struct LoopDisk {
    dev: String,
    file: PathBuf,
}

impl LoopDisk {
    fn attach(dir: &Path, name: &str, mib: u64) -> Result<LoopDisk, String> {
        let file = dir.join(name);
        let f = std::fs::File::create(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        f.set_len(mib * 1024 * 1024)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let out = Command::new("losetup")
            .args(["-fP", "--show"])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(LoopDisk { dev, file })
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        // The flows unmount through the API; this only catches what a failed run left.
        for part in [format!("{}p1", self.dev), self.dev.clone()] {
            let _ = Command::new("umount")
                .arg(&part)
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// Partition, format, mount through the daemon (and the same steps in-process where this build
/// can make them), then GetVolumeStats on the mounted volume.
async fn stage_flow(a: &Args, d: &Daemon, direct: &Direct, rows: &mut Vec<Row>, load: Duration) {
    const WHAT: &str = "stage flow (partition, format, mount)";
    if !is_root() {
        na(rows, WHAT, "needs root for loop devices");
        na(rows, "GetVolumeStats", "needs a loop device (root)");
        return;
    }
    let c = d.connector();
    let Ok(mut disk) = DiskClient::connect(&c).await else {
        na(rows, WHAT, "disk endpoint not reachable");
        return;
    };
    if let Err(s) = disk.list_disk_ids().await {
        let why = if s.code() == Code::Unimplemented {
            "the disk/volume hosts are not plugged in on this build".to_string()
        } else {
            format!("ListDiskIDs: {:?}: {}", s.code(), s.message())
        };
        na(rows, WHAT, &why);
        na(rows, "GetVolumeStats", &why);
        return;
    }
    let lo = match LoopDisk::attach(d.dir.path(), "bench-disk.img", a.disk_mib) {
        Ok(l) => l,
        Err(e) => {
            na(rows, WHAT, &e);
            na(rows, "GetVolumeStats", &e);
            return;
        }
    };
    // The same steps in-process, on a second loop disk of the same size.
    let lo2 = LoopDisk::attach(d.dir.path(), "bench-disk-direct.img", a.disk_mib);
    let daemon = daemon_flow(&c, &mut disk, &lo, &d.kubelet()).await;
    let direct_flow = match &lo2 {
        Ok(lo2) => direct_stage(direct, lo2, &d.kubelet()),
        Err(e) => Err(e.clone()),
    };
    let steps = |f: &[Duration; 3]| {
        format!(
            "{} (partition {}, format {}, mount {})",
            fmt_d(f.iter().sum()),
            fmt_d(f[0]),
            fmt_d(f[1]),
            fmt_d(f[2])
        )
    };
    match &daemon {
        Err(e) => {
            na(rows, WHAT, e);
            na(rows, "GetVolumeStats", e);
        }
        Ok((flow, volume_id, _)) => {
            let total = |f: &[Duration; 3]| f.iter().sum::<Duration>().as_secs_f64();
            rows.push(Row {
                what: format!("{WHAT}, {} MiB loop disk", a.disk_mib),
                daemon: steps(flow),
                direct: match &direct_flow {
                    Ok((f, _, _)) => steps(f),
                    Err(e) => format!("n/a: {e}"),
                },
                ratio: match &direct_flow {
                    Ok((f, _, _)) => ratio(total(flow), total(f)),
                    Err(_) => "-".into(),
                },
            });
            volume_stats(a, &c, direct, volume_id, rows, load, d.child.id()).await;
        }
    }
    if let Ok((_, volume_id, target)) = &daemon
        && let Ok(mut v) = VolumeClient::connect(&c).await
    {
        let _ = v.unmount(volume_id, target).await;
    }
    if let Ok((_, volume_id, target)) = &direct_flow {
        let _ = direct.volume.unmount_volume(volume_id, target);
    }
    drop(lo2);
    drop(lo);
}

/// The disk number of a loop device: its serial is its backing file (design §4).
fn loop_disk_number(
    ids: &std::collections::BTreeMap<u32, String>,
    lo: &LoopDisk,
) -> Result<u32, String> {
    let file = lo.file.display().to_string();
    ids.iter()
        .find(|(_, serial)| **serial == file)
        .map(|(n, _)| *n)
        .ok_or_else(|| format!("{} ({file}) is not in ListDiskIDs", lo.dev))
}

/// The in-process side of the stage flow: (step times, volume ID, mount target).
fn direct_stage(
    direct: &Direct,
    lo: &LoopDisk,
    kubelet: &Path,
) -> Result<([Duration; 3], String, String), String> {
    let ids = direct.disk.list_disk_ids().map_err(|e| e.to_string())?;
    let serials = ids
        .into_iter()
        .map(|(n, id)| (n, id.serial_number))
        .collect();
    let n = loop_disk_number(&serials, lo)?;
    let t = Instant::now();
    direct
        .disk
        .partition_disk(n)
        .map_err(|e| format!("PartitionDisk: {e}"))?;
    let partition = t.elapsed();
    let id = direct
        .volume
        .list_volumes_on_disk(n, 0)
        .map_err(|e| format!("ListVolumesOnDisk: {e}"))?
        .into_iter()
        .next()
        .ok_or("no volume after PartitionDisk")?;
    let t = Instant::now();
    direct
        .volume
        .format_volume(&id)
        .map_err(|e| format!("FormatVolume: {e}"))?;
    let format = t.elapsed();
    let target = kubelet.join("bench-staging-direct");
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let target = target.display().to_string();
    let t = Instant::now();
    direct
        .volume
        .mount_volume(&id, &target)
        .map_err(|e| format!("MountVolume: {e}"))?;
    Ok(([partition, format, t.elapsed()], id, target))
}

/// The daemon side of the stage flow: (step times, volume ID, mount target).
async fn daemon_flow(
    c: &Connector,
    disk: &mut DiskClient,
    lo: &LoopDisk,
    kubelet: &Path,
) -> Result<([Duration; 3], String, String), String> {
    let ids = disk.list_disk_ids().await.map_err(|s| s.to_string())?;
    let serials = ids
        .into_iter()
        .map(|(n, id)| (n, id.serial_number))
        .collect();
    let n = loop_disk_number(&serials, lo)?;
    let mut v = VolumeClient::connect(c).await.map_err(|e| e.to_string())?;
    let t = Instant::now();
    disk.partition_disk(n)
        .await
        .map_err(|s| format!("PartitionDisk: {s}"))?;
    let partition = t.elapsed();
    let vols = v
        .list_volumes_on_disk(n, 0)
        .await
        .map_err(|s| format!("ListVolumesOnDisk: {s}"))?;
    let id = vols
        .first()
        .cloned()
        .ok_or("no volume after PartitionDisk")?;
    let t = Instant::now();
    v.format(&id)
        .await
        .map_err(|s| format!("FormatVolume: {s}"))?;
    let format = t.elapsed();
    let target = kubelet.join("bench-staging");
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let target = target.display().to_string();
    let t = Instant::now();
    v.mount(&id, &target)
        .await
        .map_err(|s| format!("MountVolume: {s}"))?;
    Ok(([partition, format, t.elapsed()], id, target))
}

async fn volume_stats(
    a: &Args,
    c: &Connector,
    direct: &Direct,
    id: &str,
    rows: &mut Vec<Row>,
    load: Duration,
    pid: u32,
) {
    let Ok(v) = VolumeClient::connect(c).await else {
        na(rows, "GetVolumeStats", "volume endpoint not reachable");
        return;
    };
    let seq = sequential(a.calls / 2, || {
        let (mut v, id) = (v.clone(), id.to_string());
        async move { v.stats(&id).await.map(drop) }
    })
    .await;
    let mut clients = Vec::new();
    for _ in 0..a.clients {
        if let Ok(ch) = c.channel("volume", "v1").await
            && let Some(v) = VolumeClient::from_channel("v1", ch)
        {
            clients.push(v);
        }
    }
    let id2 = id.to_string();
    let par = concurrent(
        clients,
        load,
        move |mut v: VolumeClient| {
            let id = id2.clone();
            async move { v.stats(&id).await.map(drop) }
        },
        pid,
    )
    .await;
    match (seq, par) {
        (Ok(seq), Ok((par, _))) => {
            let dseq = direct_sequential(a.calls / 2, || {
                let _ = std::hint::black_box(direct.volume.get_volume_stats(id));
            });
            let dpar = direct_concurrent(a.clients, load, || {
                let _ = std::hint::black_box(direct.volume.get_volume_stats(id));
            });
            rpc_rows(
                rows,
                "GetVolumeStats",
                a.clients,
                &seq,
                &par,
                Some((&dseq, &dpar)),
            );
        }
        (Err(s), _) | (_, Err(s)) => na(
            rows,
            "GetVolumeStats",
            &format!("{:?}: {}", s.code(), s.message()),
        ),
    }
}
