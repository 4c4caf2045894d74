//! The layer table: what one server costs on its filesystem v1 endpoint, for the daemon and
//! for each bench-only server (bare tonic with none, one or all of the daemon's layers).

use super::*;

/// What one server (the daemon, or a bench-only server) costs on its filesystem v1 endpoint.
pub(super) struct EndpointCosts {
    /// PathExists, 1 client, alternating with `health`.
    pub(super) path_exists: Samples,
    /// The gRPC health check, same client, same endpoint.
    pub(super) health: Samples,
    /// Server CPU time per PathExists and per health check (1 client, sequential).
    pub(super) cpu: (Duration, Duration),
    /// PathExists from `--clients` clients, each on its own connection, and the server meanwhile.
    pub(super) many: (Samples, Peak),
    /// The same load from the lean raw HTTP/2 client (`lean.rs`), which leaves more of the
    /// shared cores to the server.
    pub(super) lean: (Samples, Peak),
    /// System calls of the server per PathExists and per health check, or why not counted.
    pub(super) syscalls: Result<(syscalls::PerCall, syscalls::PerCall), String>,
    /// The server's threads: idle, after the 1-client calls, just after the `many` load.
    pub(super) threads: [u64; 3],
}

/// The per-request costs of the server `pid` behind `c`: 1-client PathExists against the health
/// check (alternating), system calls of each, the N-client load, thread counts.
pub(super) async fn endpoint_costs(
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
    let dur = Duration::from_secs_f64(a.seconds);
    let many = concurrent(
        clients,
        dur,
        move |mut fs: FilesystemClient| {
            let p = p.clone();
            async move { fs.path_exists(&p).await.map(drop) }
        },
        pid,
    )
    .await
    .map_err(|e| format!("PathExists: {e}"))?;
    let lean = lean_load(a, c, pid, probe, dur).await?;
    threads[2] = threads_of(pid);
    Ok(EndpointCosts {
        path_exists,
        health,
        cpu,
        many,
        lean,
        syscalls,
        threads,
    })
}

impl EndpointCosts {
    /// The server's largest resident size and thread count over both loads.
    pub(super) fn peak(&self) -> (u64, u64) {
        let (many, lean) = (&self.many.1, &self.lean.1);
        (many.rss.max(lean.rss), many.threads.max(lean.threads))
    }
}

/// PathExists from `--clients` lean raw HTTP/2 connections for `dur`, and the server meanwhile.
async fn lean_load(
    a: &Args,
    c: &Connector,
    pid: u32,
    probe: &str,
    dur: Duration,
) -> Result<(Samples, Peak), String> {
    use csi_proxy_api::filesystem::v1::{PathExistsRequest, PathExistsResponse};
    use prost::Message;
    let call = lean::UnaryCall::new(
        "/v1.Filesystem/PathExists",
        &PathExistsRequest {
            path: probe.to_string(),
        }
        .encode_to_vec(),
        &PathExistsResponse { exists: true }.encode_to_vec(),
    );
    let socket = PathBuf::from(c.endpoint_name("filesystem", "v1"));
    let mut conns = Vec::new();
    for _ in 0..a.clients {
        let conn = lean::LeanConn::connect(&socket, call.clone()).await?;
        conns.push(Arc::new(tokio::sync::Mutex::new(conn)));
    }
    concurrent(
        conns,
        dur,
        |conn: Arc<tokio::sync::Mutex<lean::LeanConn>>| async move {
            conn.lock().await.call().await.map_err(Status::internal)
        },
        pid,
    )
    .await
    .map_err(|e| format!("PathExists (lean client): {}", e.message()))
}

/// The columns of the layer table.
pub(super) const LAYER_HEAD: [&str; 10] = [
    "server (same run, same client)",
    "health p50",
    "PathExists p50",
    "PathExists ÷ health",
    "PathExists p50 − bare's",
    "server CPU per PathExists / health",
    "PathExists, N clients: tonic / lean client",
    "server CPU per call under N tonic / lean clients",
    "syscalls per PathExists / health",
    "threads idle / peak",
];

/// One row of the layer table.
pub(super) fn layer_row(what: &str, c: &EndpointCosts, bare_p50: Duration) -> Vec<String> {
    let (h, p) = (c.health.quantile(0.5), c.path_exists.quantile(0.5));
    let extra = p.as_secs_f64() - bare_p50.as_secs_f64();
    vec![
        what.to_string(),
        fmt_d(h),
        fmt_d(p),
        format!("{:.2}×", p.as_secs_f64() / h.as_secs_f64().max(1e-9)),
        format!("{:+.1} µs", extra * 1e6),
        format!("{} / {}", fmt_d(c.cpu.0), fmt_d(c.cpu.1)),
        format!(
            "{:.0} / {:.0}/s",
            c.many.0.throughput(),
            c.lean.0.throughput()
        ),
        format!(
            "{} / {}",
            fmt_d(c.many.1.cpu_per_call),
            fmt_d(c.lean.1.cpu_per_call)
        ),
        match &c.syscalls {
            Ok((pe, hc)) => format!("{:.1} / {:.1}", pe.total, hc.total),
            Err(_) => "n/a".into(),
        },
        format!("{} / {}", c.threads[0], c.peak().1),
    ]
}

/// Starts the bench-only server `bin --layers <layers>` and measures it as the daemon is.
pub(super) async fn baseline_costs(
    a: &Args,
    bin: &Path,
    layers: &str,
) -> Result<EndpointCosts, String> {
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
