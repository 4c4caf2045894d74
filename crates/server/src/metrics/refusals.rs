//! `csi_proxy_refused_total{limit}`: what each of the daemon's limits refused (crate::limits,
//! the admission caps of crate::admission,
//! the per-disk lock waits of `csi_proxy_core::locks` and the iSCSI portal cap).

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A limit that refuses work, named by its `limit` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A connection past an endpoint's connection cap was closed.
    ConnectionsPerEndpoint,
    /// A connection past the daemon-wide connection cap was closed.
    ConnectionsTotal,
    /// A request message over its group's size limit.
    MessageSize,
    /// A request whose message did not arrive in time.
    BodyTimeout,
    /// A request refused because too many were receiving their message at once.
    ReceivingRequests,
    /// A request refused because too many of its connection's were receiving their message.
    ReceivingPerConnection,
    /// A connection to the metrics listener past its cap was closed.
    MetricsConnections,
    /// An iSCSI discovery or login call found no place under its caps (crate::admission).
    AdmissionNetwork,
    /// A filesystem tool call found no place under its caps.
    AdmissionTools,
    /// An SMB mount or probe call found no place under its caps.
    AdmissionSmb,
    /// A disk or volume I/O call found no place under its caps.
    AdmissionDeviceIo,
}

const LIMITS: [(Limit, &str); 11] = [
    (Limit::ConnectionsPerEndpoint, "connections_per_endpoint"),
    (Limit::ConnectionsTotal, "connections_total"),
    (Limit::MessageSize, "message_size"),
    (Limit::BodyTimeout, "body_timeout"),
    (Limit::ReceivingRequests, "receiving_requests"),
    (Limit::ReceivingPerConnection, "receiving_per_connection"),
    (Limit::MetricsConnections, "metrics_connections"),
    (Limit::AdmissionNetwork, crate::admission::CAPS[0].label),
    (Limit::AdmissionTools, crate::admission::CAPS[1].label),
    (Limit::AdmissionSmb, crate::admission::CAPS[2].label),
    (Limit::AdmissionDeviceIo, crate::admission::CAPS[3].label),
];

static COUNTS: [AtomicU64; LIMITS.len()] = [const { AtomicU64::new(0) }; LIMITS.len()];

/// Counts one refusal by `limit`.
pub fn refused(limit: Limit) {
    COUNTS[limit as usize].fetch_add(1, Ordering::Relaxed);
}

/// How many times `limit` refused since start.
pub fn refusals(limit: Limit) -> u64 {
    COUNTS[limit as usize].load(Ordering::Relaxed)
}

/// Encodes the family, the core's lock-wait limits included.
pub(super) fn encode(encoder: &mut DescriptorEncoder) -> fmt::Result {
    let mut family = encoder.encode_descriptor(
        "csi_proxy_refused",
        "Requests and connections refused by each of the daemon's limits.",
        None,
        MetricType::Counter,
    )?;
    let waits = csi_proxy_core::locks::refusals();
    let core = [
        ("disk_waiters", waits.too_many_waiters),
        ("disk_wait_timeout", waits.default_wait_passed),
        ("target_portals", csi_proxy_core::iscsi::portal_refusals()),
    ];
    let ours = LIMITS.iter().map(|(l, name)| (*name, refusals(*l)));
    for (name, n) in ours.chain(core) {
        ConstCounter::new(n).encode(family.encode_family(&[("limit", name)])?)?;
    }
    Ok(())
}
