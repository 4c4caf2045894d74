//! Prometheus metrics: the gRPC server series upstream exposes, process metrics and the SMB
//! mapping gauge, kept in the Prometheus project's Rust client (`prometheus-client`), encoded as
//! Prometheus text (format 0.0.4, what upstream's Go client serves) and served on `/metrics` by
//! `hyper` when `--metrics-bind-address` is set.
//!
//! Every RPC passes through [`crate::call::blocking`], which counts it here. The series and
//! histogram buckets are upstream's (go-grpc-middleware's server metrics): `grpc_server_started_total`,
//! `grpc_server_handled_total` (with `grpc_code`), `grpc_server_msg_received_total`,
//! `grpc_server_msg_sent_total` and `grpc_server_handling_seconds`, labelled `grpc_method`,
//! `grpc_service` (e.g. `v1.Disk`), `grpc_type` (`unary`) and, beyond upstream, the API `group`
//! and `version`.
//!
//! Counting stays cheap: the crate's `Family` takes a lock to find a label set's series, so each
//! RPC's label set is resolved once and its metric handles are kept in a [`Series`]; a request
//! then costs a read lock on the RPC table, a few atomic adds and one uncontended histogram lock.

use crate::call::RpcId;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;

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

/// The labels of one RPC's series, in the order they are written.
type RpcLabels = [(&'static str, Cow<'static, str>); 5];
/// `grpc_code` first, then the RPC's labels (`grpc_server_handled_total`).
type CodeLabels = ([(&'static str, &'static str); 1], RpcLabels);
type HistogramFamily = Family<RpcLabels, Histogram, fn() -> Histogram>;
/// An RPC as the table of resolved series keys it: group, version, method.
type RpcKey = (&'static str, &'static str, &'static str);

fn rpc_labels(rpc: RpcId) -> RpcLabels {
    [
        ("grpc_method", Cow::Borrowed(rpc.method)),
        (
            "grpc_service",
            Cow::Owned(service_name(rpc.group, rpc.version)),
        ),
        ("grpc_type", Cow::Borrowed("unary")),
        ("group", Cow::Borrowed(rpc.group)),
        ("version", Cow::Borrowed(rpc.version)),
    ]
}

/// The registry and the families every RPC's series live in.
struct Metrics {
    registry: Registry,
    started: Family<RpcLabels, Counter>,
    handled: Family<CodeLabels, Counter>,
    received: Family<RpcLabels, Counter>,
    sent: Family<RpcLabels, Counter>,
    seconds: HistogramFamily,
    /// Each RPC's resolved handles, so a request does not look its label set up again.
    by_rpc: RwLock<HashMap<RpcKey, Arc<Series>>>,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let started = Family::default();
        let handled = Family::default();
        let received = Family::default();
        let sent = Family::default();
        let seconds: HistogramFamily = Family::new_with_constructor(|| Histogram::new(BUCKETS));
        let mut registry = Registry::default();
        // The crate appends the final `.` of each help text and the `_total` of each counter.
        registry.register(
            "grpc_server_started",
            "Total number of RPCs started on the server",
            started.clone(),
        );
        registry.register(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure",
            handled.clone(),
        );
        registry.register(
            "grpc_server_msg_received",
            "Total number of RPC request messages received on the server",
            received.clone(),
        );
        registry.register(
            "grpc_server_msg_sent",
            "Total number of RPC response messages sent by the server",
            sent.clone(),
        );
        registry.register(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server",
            seconds.clone(),
        );
        registry.register_collector(Box::new(HostCollector));
        Metrics {
            registry,
            started,
            handled,
            received,
            sent,
            seconds,
            by_rpc: RwLock::default(),
        }
    })
}

/// The metric handles of one RPC of one group-version.
pub struct Series {
    labels: RpcLabels,
    started: Counter,
    received: Counter,
    sent: Counter,
    /// Per status code, resolved the first time the RPC ends with it: a code never seen has no
    /// series, as with upstream.
    handled: [OnceLock<Counter>; 17],
    seconds: Histogram,
}

impl Series {
    fn new(rpc: RpcId) -> Self {
        let m = metrics();
        let labels = rpc_labels(rpc);
        Series {
            started: m.started.get_or_create(&labels).clone(),
            received: m.received.get_or_create(&labels).clone(),
            sent: m.sent.get_or_create(&labels).clone(),
            seconds: m.seconds.get_or_create(&labels).clone(),
            handled: Default::default(),
            labels,
        }
    }

    /// Records the end of one request: its status code and how long it took.
    pub fn handled(&self, code: tonic::Code, elapsed: Duration) {
        let idx = (code as usize).min(CODE_NAMES.len() - 1);
        let counter = self.handled[idx].get_or_init(|| {
            let labels = ([("grpc_code", CODE_NAMES[idx])], self.labels.clone());
            metrics().handled.get_or_create(&labels).clone()
        });
        counter.inc();
        if code == tonic::Code::Ok {
            // A unary RPC sends its one response message only when it succeeds.
            self.sent.inc();
        }
        self.seconds.observe(elapsed.as_secs_f64());
    }
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
    let key: RpcKey = (rpc.group, rpc.version, rpc.method);
    let by_rpc = &metrics().by_rpc;
    let found = by_rpc
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let series = match found {
        Some(s) => s,
        None => by_rpc
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_insert_with(|| Arc::new(Series::new(rpc)))
            .clone(),
    };
    series.started.inc();
    // A unary RPC receives its one request message as it starts.
    series.received.inc();
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

/// The series whose values are read at scrape time: the SMB mapping gauge, the build and the
/// process metrics (the crate has no process collector for Windows, so they stay ours).
#[derive(Debug)]
struct HostCollector;

impl Collector for HostCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        ConstGauge::new(smb_mappings()).encode(encoder.encode_descriptor(
            "csi_proxy_smb_global_mappings",
            "Number of SMB global mappings on this host.",
            None,
            MetricType::Gauge,
        )?)?;
        let mut build = encoder.encode_descriptor(
            "csi_proxy_build_info",
            "Build of the running csi-proxy; the value is always 1.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1u64)
            .encode(build.encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?)?;
        process::encode(&mut encoder)
    }
}

/// Renders every metric in the Prometheus text exposition format 0.0.4.
pub fn render() -> String {
    let mut out = String::with_capacity(16 * 1024);
    // Writing into a String cannot fail, and no metric of ours returns an error.
    if let Err(e) = prometheus_text::encode(&mut out, &metrics().registry) {
        tracing::warn!("encoding metrics: {e}");
    }
    out
}

/// Process metrics with the names Prometheus client libraries use (`process_*`).
mod process {
    use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
    use prometheus_client::metrics::MetricType;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use std::fmt;

    /// What could be read about this process; a field the platform could not supply is left out.
    #[derive(Debug, Default)]
    pub(super) struct Stats {
        pub cpu_seconds: Option<f64>,
        pub resident_bytes: Option<u64>,
        pub virtual_bytes: Option<u64>,
        pub open_fds: Option<u64>,
        pub start_time_seconds: Option<f64>,
    }

    /// Encodes the process series this platform could read; each one has its own collector
    /// descriptor because the values are read at scrape time, not kept in counters.
    pub(super) fn encode(encoder: &mut DescriptorEncoder) -> fmt::Result {
        let s = read();
        if let Some(v) = s.cpu_seconds {
            // A counter: the encoder adds `_total` to the name.
            ConstCounter::new(v).encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                MetricType::Counter,
            )?)?;
        }
        gauge(
            encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes (working set on Windows).",
            s.resident_bytes,
        )?;
        gauge(
            encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes (private bytes on Windows).",
            s.virtual_bytes,
        )?;
        gauge(
            encoder,
            "process_open_fds",
            "Number of open file descriptors (handles on Windows).",
            s.open_fds,
        )?;
        gauge(
            encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds,
        )?;
        Ok(())
    }

    /// One gauge family with its single sample, left out when the value could not be read.
    fn gauge<N: EncodeGaugeValue>(
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: Option<N>,
    ) -> fmt::Result {
        match value {
            Some(v) => ConstGauge::new(v).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?),
            None => Ok(()),
        }
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
    #[allow(
        unsafe_code,
        reason = "three Win32 queries into local out-parameters; each block says why"
    )]
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

/// Longest request head accepted (hyper answers 431 past it); a scrape request is a few hundred
/// bytes.
const MAX_HEAD: usize = 16 * 1024;

/// Longest a scrape connection may last, request and response together: a client that stalls
/// does not keep its task and socket forever.
const CONNECTION_LIMIT: Duration = Duration::from_secs(60);

/// Serves `GET /metrics` (and `HEAD`) over HTTP/1.1 on `listener` forever; other methods on
/// `/metrics` answer 405, other paths 404. One request per connection, as a scraper needs.
pub async fn serve(listener: TcpListener) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(false)
        .title_case_headers(true)
        .max_header_size(MAX_HEAD)
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                let conn = http.serve_connection(
                    TokioIo::new(conn),
                    hyper::service::service_fn(
                        |req| async move { Ok::<_, Infallible>(respond(&req)) },
                    ),
                );
                tokio::spawn(async move {
                    match tokio::time::timeout(CONNECTION_LIMIT, conn).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!("metrics request failed: {e}"),
                        Err(_) => tracing::debug!("metrics connection timed out"),
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

/// The answer to one request. For `HEAD`, hyper sends the head (with the length the body would
/// have) and leaves the body out.
fn respond(req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = route(req.method(), req.uri().path());
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}

/// Status, content type and body for one method and path.
fn route(method: &Method, path: &str) -> (StatusCode, &'static str, String) {
    const PLAIN: &str = "text/plain; charset=utf-8";
    match (method, path) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            (StatusCode::OK, prometheus_text::CONTENT_TYPE, render())
        }
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "only GET and HEAD are served on /metrics\n".into(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            PLAIN,
            "only /metrics is served here\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

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

    /// One raw HTTP/1.1 request to a running `serve`; the whole answer, read until it closes.
    async fn ask(addr: std::net::SocketAddr, request: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut answer))
            .await
            .expect("the server closes the connection after one answer")
            .unwrap();
        answer
    }

    #[tokio::test]
    async fn serves_get_and_head_on_metrics_only() {
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener));

        let get = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let (head, body) = get.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{head}"
        );
        assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
        assert!(body.contains("# TYPE csi_proxy_smb_global_mappings gauge\n"));

        // HEAD: the head of the GET answer, no body.
        let head_only = ask(addr, "HEAD /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(head_only.starts_with("HTTP/1.1 200 OK\r\n"), "{head_only}");
        assert!(head_only.ends_with("\r\n\r\n"), "{head_only}");
        assert!(head_only.contains("\r\nContent-Length: "), "{head_only}");

        let post = ask(
            addr,
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(
            post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{post}"
        );
        let other = ask(addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404 Not Found\r\n"), "{other}");
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        assert!(ask(addr, &huge).await.starts_with("HTTP/1.1 431 "));
        let garbage = ask(addr, "NOT HTTP\r\n\r\n").await;
        assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
        server.abort();
    }

    #[test]
    fn label_values_are_escaped() {
        // Our label values are identifiers, but the encoder must still escape what it is given.
        let rpc = RpcId {
            group: "system",
            version: "v1alpha1",
            method: "Metrics\"Escape\\Test\n",
        };
        InFlight::start(rpc).finish(tonic::Code::Ok);
        let text = render();
        assert!(
            text.contains(r#"grpc_method="Metrics\"Escape\\Test\n""#),
            "{text}"
        );
    }
}
