//! The Windows bench client, run under wine by `scripts/bench-wine.sh` against a daemon the script
//! started: PathExists and the gRPC health check on the filesystem v1 pipe, one client then eight.
//!
//! Besides latency and throughput, the script counts the wineserver requests the daemon makes per
//! call. To let it cut wine's `+server` trace at the exact edges of each measured phase, the
//! client creates (and at once drops) a named pipe called `csi-proxy-bench-mark-begin-<phase>` /
//! `...-end-<phase>` around the phase: creating a pipe is a wineserver request carrying its name,
//! so the marker lands in the trace in the order the server saw it, with no clock to line up.
//! A line `MARK begin <phase>` on stdout says the same for a reader.
//!
//! Results are printed as `RESULT <phase> calls=<n> p50_us=<..> p99_us=<..> max_us=<..> per_s=<..>` lines for
//! the script to parse.

use crate::stats::Samples;
use clap::Parser;
use csi_proxy_client::Connector;
use csi_proxy_client::filesystem::FilesystemClient;
use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::net::windows::named_pipe::ServerOptions;
use tonic::Status;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Measures a running csi-proxy daemon over its named pipes (run under wine by
/// scripts/bench-wine.sh); prints RESULT lines.
#[derive(Debug, Parser)]
#[command(name = "csi-proxy-bench")]
struct Args {
    /// The path PathExists asks about (inside the daemon's --kubelet-path, e.g. the kubelet
    /// directory itself).
    #[arg(long)]
    path: String,
    /// Sequential calls per one-client phase.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Unmeasured calls before each one-client phase (connection set-up, first-use caches).
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Concurrent clients of the throughput phase, each on its own pipe connection.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Calls each concurrent client makes (a fixed count, so a traced run cuts the same work).
    #[arg(long, default_value_t = 500)]
    calls_per_client: usize,
    /// How long to wait for the daemon's filesystem v1 endpoint to answer, seconds.
    #[arg(long, default_value_t = 60.0)]
    wait: f64,
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    crate::run_to_exit(run(&args), |()| {})
}

async fn run(a: &Args) -> Result<(), String> {
    let c = Connector::Pipes;
    wait_serving(&c, Duration::from_secs_f64(a.wait)).await?;

    // One client, one connection: PathExists.
    let mut fs = FilesystemClient::connect_version(&c, "v1")
        .await
        .map_err(|e| e.to_string())?;
    let path = a.path.clone();
    let exists = fs
        .path_exists(&path)
        .await
        .map_err(|e| format!("PathExists {path}: {e}"))?;
    if !exists {
        // Not an error for the measurement, but a missing path takes a different host branch;
        // say so rather than measure the wrong thing silently.
        eprintln!("csi-proxy-bench: note: {path} does not exist for the daemon");
    }
    let s = phase("PathExists", a, || {
        let (mut fs, path) = (fs.clone(), path.clone());
        async move { fs.path_exists(&path).await.map(drop) }
    })
    .await?;
    result("PathExists", &s);

    // The health check on the same endpoint: what the transport alone costs per call.
    let ch = c
        .channel("filesystem", "v1")
        .await
        .map_err(|e| e.to_string())?;
    let health = HealthClient::new(ch);
    let s = phase("Check", a, || {
        let mut h = health.clone();
        async move { h.check(HealthCheckRequest::default()).await.map(drop) }
    })
    .await?;
    result("Check", &s);

    // Throughput: `clients` connections at once, each making a fixed number of calls.
    let mut clients = Vec::with_capacity(a.clients);
    for _ in 0..a.clients {
        let mut fs = FilesystemClient::connect_version(&c, "v1")
            .await
            .map_err(|e| e.to_string())?;
        fs.path_exists(&path) // warm this connection up
            .await
            .map_err(|e| format!("PathExists: {e}"))?;
        clients.push(fs);
    }
    let name = format!("PathExists{}", a.clients);
    mark("begin", &name);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut fs in clients {
        let (path, n) = (path.clone(), a.calls_per_client);
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                loop {
                    match fs.path_exists(&path).await {
                        Ok(_) => break,
                        Err(s) if csi_proxy_client::retry::never_processed(&s) => {
                            RESENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(s) => return Err(s),
                    }
                }
                lat.push(t.elapsed());
            }
            Ok::<_, Status>(lat)
        });
    }
    let mut s = Samples::default();
    while let Some(r) = tasks.join_next().await {
        let lat = r
            .map_err(|e| format!("client task: {e}"))?
            .map_err(|e| format!("PathExists: {e}"))?;
        s.latencies.extend(lat);
    }
    s.wall = start.elapsed();
    mark("end", &name);
    result(&name, &s);
    println!(
        "RESENT {name} {}",
        RESENT.load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}

/// Calls sent again because the daemon never processed them
/// ([`csi_proxy_client::retry::never_processed`]: refused, or taken back by their connection
/// after a GOAWAY). grpc-go, the drivers' client, sends such a call again on a new connection
/// (gRPC's transparent retry), so the concurrent phase does too; any other error is a failed
/// call, which ends the run.
static RESENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Warm-up, then `a.calls` sequential calls between the phase's markers.
async fn phase<F, Fut>(name: &str, a: &Args, mut call: F) -> Result<Samples, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Status>>,
{
    for _ in 0..a.warmup {
        call().await.map_err(|e| format!("{name}: {e}"))?;
    }
    let mut s = Samples::default();
    mark("begin", name);
    let start = Instant::now();
    for _ in 0..a.calls {
        let t = Instant::now();
        call().await.map_err(|e| format!("{name}: {e}"))?;
        s.latencies.push(t.elapsed());
    }
    s.wall = start.elapsed();
    mark("end", name);
    Ok(s)
}

/// Puts a marker into the wineserver trace (see the module doc) and on stdout.
fn mark(edge: &str, phase: &str) {
    let pipe = format!(r"\\.\pipe\csi-proxy-bench-mark-{edge}-{phase}");
    // The pipe exists only for the request that creates it; a failure only loses the marker,
    // which the script reports as a missing window.
    if let Err(e) = ServerOptions::new().create(&pipe) {
        eprintln!("csi-proxy-bench: marker {pipe}: {e}");
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "MARK {edge} {phase}");
    let _ = out.flush();
}

fn result(phase: &str, s: &Samples) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "RESULT {phase} calls={} p50_us={:.1} p99_us={:.1} max_us={:.1} per_s={:.0}",
        s.latencies.len(),
        us(s.quantile(0.5)),
        us(s.quantile(0.99)),
        us(s.latencies.iter().copied().max().unwrap_or_default()),
        s.throughput()
    );
    let _ = out.flush();
}

/// Polls the filesystem v1 health check until SERVING (the daemon was just started).
async fn wait_serving(c: &Connector, limit: Duration) -> Result<(), String> {
    use csi_proxy_client::health::{self, ServingStatus};
    let t = Instant::now();
    loop {
        match health::check(c, "filesystem", "v1", "").await {
            Ok(ServingStatus::Serving) => return Ok(()),
            r if t.elapsed() > limit => {
                return Err(format!(
                    "filesystem v1 did not answer SERVING within {limit:?}: {r:?}"
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
