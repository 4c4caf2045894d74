//! What the in-use rule costs as the node grows: a repeated PartitionDisk of a loop disk
//! (every guarded call reads every process's descriptors and memory mappings), with 0, 1,000
//! and 3,000 extra processes holding 50 descriptors each (regular files, character devices)
//! and mapping their libraries, through this build's daemon and, in the same run, another
//! (`--before-daemon`, the build before a change). This build is measured twice: reading `/proc`
//! (`--in-use-scan=proc`, the fallback) and as it starts by default (the kernel's task
//! iterators where the node offers them).

use super::*;

/// Extra processes: each a `sleep` that inherited 50 open descriptors from the shell that
/// made them; killed when dropped.
struct Crowd(Vec<Child>);

impl Crowd {
    /// Grows the crowd to `n` processes.
    fn grow_to(&mut self, n: usize) -> Result<(), String> {
        // Descriptors 3..=52: regular files and character devices (no process of its own
        // behind any, so killing the sleep leaves nothing behind).
        const SCRIPT: &str = "exec 3</dev/null 4</etc/passwd 5</etc/hostname; \
             for i in $(seq 6 50); do eval \"exec $i</etc/passwd\"; done; \
             exec 51</dev/zero 52>/dev/null; exec sleep 3600";
        while self.0.len() < n {
            let child = Command::new("bash")
                .args(["-c", SCRIPT])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("bash: {e} (after {} processes)", self.0.len()))?;
            self.0.push(child);
        }
        // Every one has exec'd its sleep (its descriptors are open) once its comm says so.
        let settle = Instant::now() + Duration::from_secs(60);
        for c in &self.0 {
            let comm = format!("/proc/{}/comm", c.id());
            while std::fs::read_to_string(&comm).is_ok_and(|s| s.trim() != "sleep") {
                if Instant::now() > settle {
                    return Err("the extra processes did not start in 60 s".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// PartitionDisk latencies (median, p90) of `calls` calls through the daemon `bin`, on a loop
/// disk of its own.
async fn partition_latency(
    bin: &Path,
    calls: usize,
    extra: Option<&str>,
) -> Result<(Duration, Duration), String> {
    // A sandbox's init may hold capabilities root lacks: its descriptors cannot be read, and
    // the daemon would refuse every disk (fail closed) without the flag.
    let d = Daemon::spawn_with(bin, |dir| {
        let mut args = vec![
            format!("--state-dir={}", dir.join("state").display()),
            "--skip-unreadable-processes".into(),
        ];
        args.extend(extra.map(String::from));
        args
    })?;
    let c = d.connector();
    wait_all_serving(&c, Duration::from_secs(30)).await?;
    let lo = LoopDisk::attach(d.dir.path(), "in-use.img", 64)?;
    let mut disk = DiskClient::connect(&c).await.map_err(|e| e.to_string())?;
    let ids = disk.list_disk_ids().await.map_err(|s| s.to_string())?;
    let serials = ids
        .into_iter()
        .map(|(n, id)| (n, id.serial_number))
        .collect();
    let n = loop_disk_number(&serials, &lo)?;
    // The first call writes the table; the rest find it and only check the disk's use.
    disk.partition_disk(n)
        .await
        .map_err(|s| format!("PartitionDisk: {s}"))?;
    let samples = sequential(calls, || {
        let mut disk = disk.clone();
        async move { disk.partition_disk(n).await }
    })
    .await
    .map_err(|s| format!("PartitionDisk: {s}"))?;
    Ok((samples.quantile(0.5), samples.quantile(0.9)))
}

/// The in-use cost table: one row per crowd size, a column per daemon.
pub(super) async fn in_use_costs(
    after: &Path,
    before: Option<&Path>,
    calls: usize,
) -> Result<Vec<Vec<String>>, String> {
    if !is_root() {
        return Err("the in-use costs need root (loop devices)".into());
    }
    let mut crowd = Crowd(Vec::new());
    let mut rows = Vec::new();
    for n in [0usize, 1000, 3000] {
        crowd.grow_to(n)?;
        let mut row = vec![format!("{n} extra processes (50 descriptors each)")];
        // This build twice: reading /proc as the fallback does, and as it starts by default.
        let runs = before
            .map(|b| (b, None))
            .into_iter()
            .chain([(after, Some("--in-use-scan=proc")), (after, None)]);
        for (bin, extra) in runs {
            let (p50, p90) = partition_latency(bin, calls, extra).await?;
            row.push(format!("{} (p90 {})", fmt_d(p50), fmt_d(p90)));
        }
        rows.push(row);
    }
    Ok(rows)
}
