//! System calls the daemon makes per request: `strace -c -f` attached to the daemon (all its
//! threads) while one client makes sequential calls. A count, not a time: it does not depend on
//! the machine's load, so before/after comparisons hold on a busy machine too.

use std::future::Future;
use std::process::{Command, Stdio};
use std::time::Duration;
use tonic::Status;

/// System calls per request, in total and by name (most frequent first).
#[derive(Debug, Clone)]
pub struct PerCall {
    pub total: f64,
    pub by_name: Vec<(String, f64)>,
}

impl PerCall {
    /// `12.0 (futex 5.0, epoll_wait 3.0, …)`: the total and the calls made at least 0.05 times
    /// per request.
    pub fn shown(&self) -> String {
        let parts: Vec<String> = self
            .by_name
            .iter()
            .filter(|(_, n)| *n >= 0.05)
            .map(|(name, n)| format!("{name} {n:.1}"))
            .collect();
        format!("{:.1} ({})", self.total, parts.join(", "))
    }
}

/// Whether strace can be used here, or why not.
pub fn available() -> Result<(), String> {
    match Command::new("strace").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(_) => Err("strace -V failed".into()),
        Err(e) => Err(format!("no strace ({e})")),
    }
}

/// Counts the system calls of process `pid` over `n` sequential `call`s.
pub async fn count<F, Fut>(pid: u32, n: usize, mut call: F) -> Result<PerCall, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Status>>,
{
    let out = tempfile::NamedTempFile::new().map_err(|e| format!("temp file: {e}"))?;
    let mut strace = Command::new("strace")
        .args(["-c", "-f", "-q", "-o"])
        .arg(out.path())
        .args(["-p", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting strace: {e}"))?;
    // strace attaches to every thread before counting; the daemon is idle meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut result = Ok(());
    for _ in 0..n {
        if let Err(e) = call().await {
            result = Err(format!("call under strace: {e}"));
            break;
        }
    }
    // SIGINT detaches strace, which then writes its summary.
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let _ = strace.wait();
    result?;
    let text = std::fs::read_to_string(out.path()).map_err(|e| format!("strace output: {e}"))?;
    parse(&text, n)
}

/// The per-call figures from strace's summary table (`% time seconds usecs/call calls [errors]
/// syscall`).
fn parse(summary: &str, n: usize) -> Result<PerCall, String> {
    let mut by_name = Vec::new();
    let mut total = None;
    for line in summary.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 5 || cols[0].starts_with('-') || cols[0] == "%" {
            continue;
        }
        let (Ok(calls), Some(name)) = (cols[3].parse::<u64>(), cols.last()) else {
            continue;
        };
        let per = calls as f64 / n.max(1) as f64;
        if *name == "total" {
            total = Some(per);
        } else {
            by_name.push((name.to_string(), per));
        }
    }
    by_name.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total = total.ok_or_else(|| format!("no total in strace's summary: {summary:?}"))?;
    Ok(PerCall { total, by_name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_strace_summaries() {
        let s = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.000600           0      1000           futex
 30.00    0.000300           0       500       100 epoll_wait
 10.00    0.000100           0        10           statx
------ ----------- ----------- --------- --------- ----------------
100.00    0.001000           0      1510       100 total
";
        let p = parse(s, 100).unwrap();
        assert!((p.total - 15.1).abs() < 1e-9);
        assert_eq!(p.by_name[0].0, "futex");
        assert!((p.by_name[1].1 - 5.0).abs() < 1e-9);
        assert_eq!(p.shown(), "15.1 (futex 10.0, epoll_wait 5.0, statx 0.1)");
        assert!(parse("garbage", 1).is_err());
    }
}
