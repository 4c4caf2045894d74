//! Prometheus metrics: the gRPC server series upstream exposes, process metrics and the SMB
//! mapping gauge, kept in the Prometheus project's Rust client (`prometheus-client`), encoded as
//! Prometheus text (format 0.0.4, what upstream's Go client serves) and served on `/metrics` by
//! `hyper` when `--metrics-bind-address` is set.
//!
//! Every RPC passes through [`crate::call::blocking`], which counts it here. The series and
//! histogram buckets are upstream's (go-grpc-middleware's server metrics): `grpc_server_started_total`,
//! `grpc_server_handled_total` (with `grpc_code`), `grpc_server_msg_received_total`,
//! `grpc_server_msg_sent_total` and `grpc_server_handling_seconds`, labelled `grpc_method`,
//! `grpc_service` (e.g. `v1.Disk`), `grpc_type` (`unary`) and, beyond upstream, the API `group`,
//! `version` and `profile` (the driver name of the profile whose endpoint took the call, empty
//! without `--profiles`).
//!
//! Counting stays cheap: the crate's `Family` takes a lock to find a label set's series, so each
//! RPC's label set is resolved once and its metric handles are kept in a [`Series`]; a request
//! then costs a read lock on the RPC table, a few atomic adds and one uncontended histogram lock.

mod http;
mod process;
mod refusals;

pub use http::{bind, serve};
pub use refusals::{Limit, refusals, refused};

use crate::call::RpcId;
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
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

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
type RpcLabels = [(&'static str, Cow<'static, str>); 6];
/// `grpc_code` first, then the RPC's labels (`grpc_server_handled_total`).
type CodeLabels = ([(&'static str, &'static str); 1], RpcLabels);
type HistogramFamily = Family<RpcLabels, Histogram, fn() -> Histogram>;
/// An RPC as the table of resolved series keys it: group, version, method, profile.
type RpcKey = (&'static str, &'static str, &'static str, &'static str);

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
        ("profile", Cow::Borrowed(rpc.profile)),
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
    let key: RpcKey = (rpc.group, rpc.version, rpc.method, rpc.profile);
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
        refusals::encode(&mut encoder)?;
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

#[cfg(test)]
mod tests;
