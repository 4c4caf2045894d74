//! Latency samples and the result table.

#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::time::Duration;

/// Latencies of one measured run.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// One entry per completed call.
    pub latencies: Vec<Duration>,
    /// Wall time of the whole run.
    pub wall: Duration,
}

impl Samples {
    /// The `q`-quantile (0..=1) latency, nearest rank.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let mut v = self.latencies.clone();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// Calls per second over the wall time.
    pub fn throughput(&self) -> f64 {
        if self.wall.is_zero() {
            return 0.0;
        }
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// One line of the result table.
pub struct Row {
    /// What was measured.
    pub what: String,
    /// Through the daemon.
    pub daemon: String,
    /// The floor: the same host call in-process.
    pub direct: String,
    /// daemon / direct, where both exist.
    pub ratio: String,
}

impl Row {
    /// A row without a floor.
    pub fn single(what: impl Into<String>, daemon: impl Into<String>) -> Row {
        Row {
            what: what.into(),
            daemon: daemon.into(),
            direct: "-".into(),
            ratio: "-".into(),
        }
    }
}

/// Formats a duration in µs or ms.
pub fn fmt_d(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// Formats bytes in MiB.
pub fn fmt_mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

/// `a / b` as `N.N×`.
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}×", a / b)
    } else {
        "-".into()
    }
}

/// Prints the rows as a Markdown table (readable in a terminal and pasteable into BENCHMARKS.md).
pub fn print_table(rows: &[Row]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.what.clone(),
                r.daemon.clone(),
                r.direct.clone(),
                r.ratio.clone(),
            ]
        })
        .collect();
    print_markdown(
        &[
            "measurement",
            "through daemon",
            "direct in-process",
            "ratio",
        ],
        &rows,
    );
}

/// Prints a Markdown table with columns padded to their widest cell.
pub fn print_markdown(head: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(w.len()) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::from("|");
        for (c, w) in cells.zip(&w) {
            let pad = w - c.chars().count();
            s.push_str(&format!(" {c}{} |", " ".repeat(pad)));
        }
        println!("{s}");
    };
    line(&mut head.iter().copied());
    let dashes: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
    line(&mut dashes.iter().map(String::as_str));
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let s = Samples {
            latencies: (1..=100).map(Duration::from_millis).collect(),
            wall: Duration::from_secs(2),
        };
        assert_eq!(s.quantile(0.5), Duration::from_millis(50));
        assert_eq!(s.quantile(0.99), Duration::from_millis(99));
        assert_eq!(s.throughput(), 50.0);
        assert_eq!(Samples::default().quantile(0.5), Duration::ZERO);
    }
}
