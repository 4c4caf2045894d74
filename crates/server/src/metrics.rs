//! Prometheus metrics: the gRPC server series upstream exposes, process metrics and the SMB
//! mapping gauge, rendered as Prometheus text (format 0.0.4) and served on `/metrics` by a small
//! HTTP/1.1 handler when `--metrics-bind-address` is set.
//!
//! Every RPC passes through [`crate::call::blocking`], which counts it here. The series and
//! histogram buckets are upstream's (go-grpc-middleware's server metrics): `grpc_server_started_total`,
//! `grpc_server_handled_total` (with `grpc_code`), `grpc_server_msg_received_total`,
//! `grpc_server_msg_sent_total` and `grpc_server_handling_seconds`, labelled `grpc_method`,
//! `grpc_service` (e.g. `v1.Disk`), `grpc_type` (`unary`) and, beyond upstream, the API `group`
//! and `version`. Counting costs a few relaxed atomic adds per request; a read lock is taken to
//! find the series and a write lock only the first time an RPC is seen.

use crate::call::RpcId;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Upper bounds (seconds) of the `grpc_server_handling_seconds` buckets, as upstream has them.
pub const BUCKETS: [f64; 14] = [
    0.001, 0.01, 0.1, 0.3, 0.6, 1.0, 3.0, 6.0, 9.0, 20.0, 30.0, 60.0, 90.0, 120.0,
];

/// gRPC status code names as Prometheus clients of grpc-go label them, indexed by code number.
const CODE_NAMES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// Counters of one RPC of one group-version.
#[derive(Default)]
pub struct Series {
    started: AtomicU64,
    handled: [AtomicU64; 17],
    /// Non-cumulative bucket counts; the last slot is `+Inf` only.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Series {
    /// Records the end of one request: its status code and how long it took.
    pub fn handled(&self, code: tonic::Code, elapsed: Duration) {
        let idx = (code as usize).min(CODE_NAMES.len() - 1);
        self.handled[idx].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let b = BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(BUCKETS.len());
        self.buckets[b].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

type Key = (&'static str, &'static str, &'static str);

fn registry() -> &'static RwLock<BTreeMap<Key, Arc<Series>>> {
    static REGISTRY: OnceLock<RwLock<BTreeMap<Key, Arc<Series>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

static SMB_MAPPINGS: AtomicI64 = AtomicI64::new(0);

/// One request being handled: counted as started; its outcome is recorded by [`InFlight::finish`],
/// or as `Canceled` if it is dropped first (the client went away and tonic dropped the future).
pub struct InFlight {
    series: Arc<Series>,
    started: std::time::Instant,
    done: bool,
}

impl InFlight {
    /// Counts the start of one request of `rpc`.
    pub fn start(rpc: RpcId) -> Self {
        InFlight {
            series: started(rpc),
            started: std::time::Instant::now(),
            done: false,
        }
    }

    /// Records the request's status code and its duration since [`InFlight::start`].
    pub fn finish(mut self, code: tonic::Code) {
        self.done = true;
        self.series.handled(code, self.started.elapsed());
    }
}

thread_local! {
    /// Set while a request's handler is dropped because the client's deadline passed.
    static DEADLINE_PASSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `drop_handler`, which drops request handlers whose client deadline passed: their
/// [`InFlight`] counts them as DEADLINE_EXCEEDED.
pub fn ending_for_deadline(drop_handler: impl FnOnce()) {
    DEADLINE_PASSED.with(|d| d.set(true));
    drop_handler();
    DEADLINE_PASSED.with(|d| d.set(false));
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.done {
            // Unfinished: the client went away, or its deadline passed (spec_status.rs).
            let code = if DEADLINE_PASSED.with(std::cell::Cell::get) {
                tonic::Code::DeadlineExceeded
            } else {
                tonic::Code::Cancelled
            };
            self.series.handled(code, self.started.elapsed());
        }
    }
}

/// Counts the start of one request of `rpc` and hands back its series, on which the caller
/// records the outcome with [`Series::handled`].
pub fn started(rpc: RpcId) -> Arc<Series> {
    let key = (rpc.group, rpc.version, rpc.method);
    let found = registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let series = match found {
        Some(s) => s,
        None => registry()
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .clone(),
    };
    series.started.fetch_add(1, Ordering::Relaxed);
    series
}

/// Sets the `csi_proxy_smb_global_mappings` gauge: the number of SMB global mappings this host
/// currently has. The SMB host calls it after it creates or removes a mapping (and may call it
/// at start-up once it has counted the existing ones).
pub fn set_smb_mappings(n: u64) {
    SMB_MAPPINGS.store(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed);
}

/// Counts the SMB global mappings on the host, asked at every scrape.
type SmbCounter = Box<dyn Fn() -> Option<u64> + Send + Sync>;

fn smb_counter() -> &'static OnceLock<SmbCounter> {
    static COUNTER: OnceLock<SmbCounter> = OnceLock::new();
    &COUNTER
}

/// Registers a function that counts the host's SMB global mappings; each scrape calls it (so keep
/// it cheap) and, when it answers `Some(n)`, the gauge shows `n`. This is the way to feed the gauge
/// from code that cannot depend on this crate (the SMB host in `csi-proxy-host`): the binary wires
/// it up where it builds the hosts. Only the first registration counts.
pub fn register_smb_mappings_counter(count: impl Fn() -> Option<u64> + Send + Sync + 'static) {
    let _ = smb_counter().set(Box::new(count));
}

/// The current value of the SMB mapping gauge: the registered counter's answer, else the last
/// value given to [`set_smb_mappings`].
pub fn smb_mappings() -> u64 {
    if let Some(n) = smb_counter().get().and_then(|count| count()) {
        return n;
    }
    u64::try_from(SMB_MAPPINGS.load(Ordering::Relaxed)).unwrap_or(0)
}

pub use csi_proxy_api::service_name;

/// Renders every metric in the Prometheus text exposition format 0.0.4.
pub fn render() -> String {
    let snapshot: Vec<(Key, Arc<Series>)> = registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let mut out = String::with_capacity(4096 + snapshot.len() * 2048);
    let labels = |k: &Key| {
        format!(
            "grpc_method=\"{}\",grpc_service=\"{}\",grpc_type=\"unary\",group=\"{}\",version=\"{}\"",
            k.2,
            service_name(k.0, k.1),
            k.0,
            k.1
        )
    };
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);

    header(
        &mut out,
        "grpc_server_started_total",
        "counter",
        "Total number of RPCs started on the server.",
    );
    for (k, s) in &snapshot {
        let _ = writeln!(
            out,
            "grpc_server_started_total{{{}}} {}",
            labels(k),
            load(&s.started)
        );
    }
    header(
        &mut out,
        "grpc_server_handled_total",
        "counter",
        "Total number of RPCs completed on the server, regardless of success or failure.",
    );
    for (k, s) in &snapshot {
        for (code, n) in CODE_NAMES.iter().zip(&s.handled) {
            let n = load(n);
            if n > 0 {
                let _ = writeln!(
                    out,
                    "grpc_server_handled_total{{grpc_code=\"{code}\",{}}} {n}",
                    labels(k)
                );
            }
        }
    }
    header(
        &mut out,
        "grpc_server_msg_received_total",
        "counter",
        "Total number of RPC request messages received on the server.",
    );
    for (k, s) in &snapshot {
        let _ = writeln!(
            out,
            "grpc_server_msg_received_total{{{}}} {}",
            labels(k),
            load(&s.started)
        );
    }
    header(
        &mut out,
        "grpc_server_msg_sent_total",
        "counter",
        "Total number of RPC response messages sent by the server.",
    );
    for (k, s) in &snapshot {
        // A unary RPC sends its one response message only when it succeeds.
        let _ = writeln!(
            out,
            "grpc_server_msg_sent_total{{{}}} {}",
            labels(k),
            load(&s.handled[0])
        );
    }
    header(
        &mut out,
        "grpc_server_handling_seconds",
        "histogram",
        "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
    );
    for (k, s) in &snapshot {
        let l = labels(k);
        let mut cumulative = 0;
        for (le, n) in BUCKETS.iter().zip(&s.buckets) {
            cumulative += load(n);
            let _ = writeln!(
                out,
                "grpc_server_handling_seconds_bucket{{{l},le=\"{le}\"}} {cumulative}"
            );
        }
        cumulative += load(&s.buckets[BUCKETS.len()]);
        let _ = writeln!(
            out,
            "grpc_server_handling_seconds_bucket{{{l},le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(
            out,
            "grpc_server_handling_seconds_sum{{{l}}} {}",
            load(&s.sum_nanos) as f64 / 1e9
        );
        let _ = writeln!(
            out,
            "grpc_server_handling_seconds_count{{{l}}} {cumulative}"
        );
    }

    header(
        &mut out,
        "csi_proxy_smb_global_mappings",
        "gauge",
        "Number of SMB global mappings on this host.",
    );
    let _ = writeln!(out, "csi_proxy_smb_global_mappings {}", smb_mappings());
    header(
        &mut out,
        "csi_proxy_build_info",
        "gauge",
        "Build of the running csi-proxy; the value is always 1.",
    );
    let _ = writeln!(
        out,
        "csi_proxy_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    process::render(&mut out);
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Process metrics with the names Prometheus client libraries use (`process_*`).
mod process {
    use super::header;
    use std::fmt::Write as _;

    /// What could be read about this process; a field the platform could not supply is left out.
    #[derive(Debug, Default)]
    pub(super) struct Stats {
        pub cpu_seconds: Option<f64>,
        pub resident_bytes: Option<u64>,
        pub virtual_bytes: Option<u64>,
        pub open_fds: Option<u64>,
        pub start_time_seconds: Option<f64>,
    }

    pub(super) fn render(out: &mut String) {
        let s = read();
        let mut one = |name: &str, kind: &str, help: &str, v: Option<String>| {
            if let Some(v) = v {
                header(out, name, kind, help);
                let _ = writeln!(out, "{name} {v}");
            }
        };
        one(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            s.cpu_seconds.map(|v| v.to_string()),
        );
        one(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes (working set on Windows).",
            s.resident_bytes.map(|v| v.to_string()),
        );
        one(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes (private bytes on Windows).",
            s.virtual_bytes.map(|v| v.to_string()),
        );
        one(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors (handles on Windows).",
            s.open_fds.map(|v| v.to_string()),
        );
        one(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds.map(|v| v.to_string()),
        );
    }

    /// Linux: `/proc/self/stat` (CPU ticks, start ticks, virtual size), `/proc/self/status`
    /// (VmRSS), `/proc/stat` (boot time) and `/proc/self/fd`.
    #[cfg(target_os = "linux")]
    pub(super) fn read() -> Stats {
        // USER_HZ: the unit of /proc tick counts is fixed at 100 by the kernel's user-space ABI,
        // whatever the kernel's internal HZ (Prometheus' own procfs reader assumes the same).
        const USER_HZ: f64 = 100.0;
        let mut s = Stats::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // The command name may contain spaces and ')': fields start after the last ')'.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                // rest[0] is field 3 (state); field n is rest[n - 3].
                let f: Vec<&str> = rest.split_whitespace().collect();
                let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
                if let (Some(u), Some(k)) = (num(14), num(15)) {
                    s.cpu_seconds = Some((u + k) as f64 / USER_HZ);
                }
                s.virtual_bytes = num(23);
                if let (Some(start), Some(btime)) = (num(22), boot_time()) {
                    s.start_time_seconds = Some(btime as f64 + start as f64 / USER_HZ);
                }
            }
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            s.resident_bytes = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kb| kb * 1024);
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // Minus one: the directory handle read_dir itself holds.
            s.open_fds = Some((dir.count() as u64).saturating_sub(1));
        }
        s
    }

    #[cfg(target_os = "linux")]
    fn boot_time() -> Option<u64> {
        std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Windows: `GetProcessMemoryInfo`, `GetProcessTimes` and `GetProcessHandleCount` on the
    /// current-process pseudo handle.
    #[cfg(windows)]
    #[allow(unsafe_code)] // three Win32 queries into local out-parameters; each block says why.
    pub(super) fn read() -> Stats {
        use windows::Win32::Foundation::FILETIME;
        use windows::Win32::System::ProcessStatus::{
            GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS_EX,
        };
        use windows::Win32::System::Threading::{
            GetCurrentProcess, GetProcessHandleCount, GetProcessTimes,
        };
        // FILETIME counts 100 ns units; the Unix epoch is 11644473600 s after 1601-01-01.
        fn ticks(t: FILETIME) -> u64 {
            (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)
        }
        const EPOCH_DIFF_S: f64 = 11_644_473_600.0;
        let mut s = Stats::default();
        // SAFETY: GetCurrentProcess returns a pseudo handle that needs no closing and is valid
        // for the calls below.
        let me = unsafe { GetCurrentProcess() };
        let mut mem = PROCESS_MEMORY_COUNTERS_EX::default();
        let cb = std::mem::size_of::<PROCESS_MEMORY_COUNTERS_EX>() as u32;
        // SAFETY: `mem` is a live, writable PROCESS_MEMORY_COUNTERS_EX and `cb` is its size; the
        // EX layout starts with PROCESS_MEMORY_COUNTERS, so the pointer cast is what the API
        // documents for the extended structure.
        if unsafe { GetProcessMemoryInfo(me, (&raw mut mem).cast(), cb) }.is_ok() {
            s.resident_bytes = Some(mem.WorkingSetSize as u64);
            s.virtual_bytes = Some(mem.PrivateUsage as u64);
        }
        let (mut created, mut exited, mut kernel, mut user) = Default::default();
        // SAFETY: the four FILETIMEs are live locals the call writes into.
        if unsafe { GetProcessTimes(me, &mut created, &mut exited, &mut kernel, &mut user) }.is_ok()
        {
            s.cpu_seconds = Some((ticks(kernel) + ticks(user)) as f64 / 1e7);
            s.start_time_seconds = Some(ticks(created) as f64 / 1e7 - EPOCH_DIFF_S);
        }
        let mut handles = 0u32;
        // SAFETY: `handles` is a live local the call writes into.
        if unsafe { GetProcessHandleCount(me, &mut handles) }.is_ok() {
            s.open_fds = Some(u64::from(handles));
        }
        s
    }

    #[cfg(not(any(target_os = "linux", windows)))]
    pub(super) fn read() -> Stats {
        Stats::default()
    }
}

/// Binds the metrics listener. `addr` is `host:port` as upstream takes it; a bare `:port`
/// (Go's spelling for every interface) listens on all IPv4 interfaces.
pub async fn bind(addr: &str) -> io::Result<TcpListener> {
    let addr = if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    };
    TcpListener::bind(&addr)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}

/// Serves `GET /metrics` (and `HEAD`) on `listener` forever; every other path answers 404.
///
/// A hand-written HTTP/1.1 responder: one route, one small request per connection, the response
/// closes the connection. That is all a Prometheus scraper needs, and it keeps an HTTP server
/// stack out of the daemon.
pub async fn serve(listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                tokio::spawn(async move {
                    if let Err(e) = answer(conn).await {
                        tracing::debug!("metrics request failed: {e}");
                    }
                });
            }
            Err(e) => {
                // Out of fds and the like: back off instead of spinning.
                tracing::warn!("metrics listener: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Longest request head accepted; a scrape request is a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;

async fn answer(mut conn: TcpStream) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let mut chunk = [0u8; 1024];
            let n = conn.read(&mut chunk).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the request head ended",
                ));
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(());
            }
            if buf.len() > MAX_HEAD {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "request head too long",
                ));
            }
        }
    })
    .await;
    let (status, body, head_only) = match head {
        Err(_) => return Ok(()), // idle client: just close
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
            ("431 Request Header Fields Too Large", String::new(), false)
        }
        Ok(Err(e)) => return Err(e),
        Ok(Ok(())) => route(&buf),
    };
    let content_type = if status.starts_with("200") {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        resp.extend_from_slice(body.as_bytes());
    }
    conn.write_all(&resp).await?;
    conn.shutdown().await
}

/// Status line, body and whether only the head is sent, for one request head.
fn route(head: &[u8]) -> (&'static str, String, bool) {
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => ("200 OK", render(), false),
        ("HEAD", "/metrics") => ("200 OK", render(), true),
        (_, "/metrics") => (
            "405 Method Not Allowed",
            "only GET and HEAD are served on /metrics\n".into(),
            false,
        ),
        _ => (
            "404 Not Found",
            "only /metrics is served here\n".into(),
            false,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_are_upstream_wire_names() {
        assert_eq!(service_name("disk", "v1"), "v1.Disk");
        assert_eq!(service_name("iscsi", "v1alpha2"), "v1alpha2.Iscsi");
        assert_eq!(service_name("smb", "v1beta1"), "v1beta1.Smb");
    }

    #[test]
    fn a_request_lands_in_its_bucket_and_code() {
        let rpc = RpcId {
            group: "system",
            version: "v1alpha1",
            method: "MetricsUnitTest",
        };
        let s = started(rpc);
        s.handled(tonic::Code::NotFound, Duration::from_millis(50));
        let text = render();
        let l = "grpc_method=\"MetricsUnitTest\",grpc_service=\"v1alpha1.System\",grpc_type=\"unary\",group=\"system\",version=\"v1alpha1\"";
        assert!(text.contains(&format!("grpc_server_started_total{{{l}}} 1")));
        assert!(text.contains(&format!(
            "grpc_server_handled_total{{grpc_code=\"NotFound\",{l}}} 1"
        )));
        assert!(text.contains(&format!(
            "grpc_server_handling_seconds_bucket{{{l},le=\"0.01\"}} 0"
        )));
        assert!(text.contains(&format!(
            "grpc_server_handling_seconds_bucket{{{l},le=\"0.1\"}} 1"
        )));
        assert!(text.contains(&format!(
            "grpc_server_handling_seconds_bucket{{{l},le=\"+Inf\"}} 1"
        )));
        assert!(text.contains(&format!("grpc_server_msg_sent_total{{{l}}} 0")));
    }

    #[test]
    fn a_dropped_request_counts_as_canceled() {
        let rpc = RpcId {
            group: "system",
            version: "v1alpha1",
            method: "MetricsDropTest",
        };
        drop(InFlight::start(rpc));
        InFlight::start(rpc).finish(tonic::Code::Ok);
        let text = render();
        assert!(text.contains(
            "grpc_server_handled_total{grpc_code=\"Canceled\",grpc_method=\"MetricsDropTest\""
        ));
        assert!(text.contains(
            "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"MetricsDropTest\""
        ));
    }

    #[test]
    fn a_request_dropped_for_its_deadline_counts_as_deadline_exceeded() {
        let rpc = RpcId {
            group: "system",
            version: "v1alpha1",
            method: "MetricsDeadlineTest",
        };
        let running = InFlight::start(rpc);
        ending_for_deadline(|| drop(running));
        drop(InFlight::start(rpc)); // and afterwards a plain drop is a cancel again
        let text = render();
        assert!(text.contains(
            "grpc_server_handled_total{grpc_code=\"DeadlineExceeded\",grpc_method=\"MetricsDeadlineTest\""
        ), "{text}");
        assert!(text.contains(
            "grpc_server_handled_total{grpc_code=\"Canceled\",grpc_method=\"MetricsDeadlineTest\""
        ));
    }

    #[test]
    fn smb_gauge_is_exported_pushed_or_counted() {
        set_smb_mappings(3);
        assert!(render().contains("\ncsi_proxy_smb_global_mappings 3\n"));
        // A registered counter wins when it has an answer.
        static COUNT: AtomicU64 = AtomicU64::new(u64::MAX);
        register_smb_mappings_counter(|| {
            let n = COUNT.load(Ordering::Relaxed);
            (n != u64::MAX).then_some(n)
        });
        assert_eq!(smb_mappings(), 3);
        COUNT.store(5, Ordering::Relaxed);
        assert!(render().contains("\ncsi_proxy_smb_global_mappings 5\n"));
        COUNT.store(u64::MAX, Ordering::Relaxed);
        set_smb_mappings(0);
    }

    #[cfg(any(target_os = "linux", windows))]
    #[test]
    fn process_metrics_are_read() {
        let s = process::read();
        assert!(s.resident_bytes.unwrap() > 0, "{s:?}");
        // Wine 8 (where the Windows-target tests run) answers GetProcessHandleCount with 0;
        // real Windows counts this process's handles.
        let fds = s.open_fds.unwrap();
        assert!(fds > 0 || cfg!(windows), "{s:?}");
        assert!(s.cpu_seconds.is_some(), "{s:?}");
        let start = s.start_time_seconds.unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} vs {now}"
        );
    }

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n").0, "200 OK");
        assert!(route(b"HEAD /metrics?x=1 HTTP/1.1\r\n\r\n").2);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n").0, "404 Not Found");
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n").0,
            "405 Method Not Allowed"
        );
        assert_eq!(route(b"").0, "404 Not Found");
    }
}
