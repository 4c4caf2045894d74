//! Process metrics with the names Prometheus client libraries use (`process_*`).

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
    use windows::Win32::System::ProcessStatus::{GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS_EX};
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
    if unsafe { GetProcessTimes(me, &mut created, &mut exited, &mut kernel, &mut user) }.is_ok() {
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
