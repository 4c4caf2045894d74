//! How calls are made and timed: alternating pairs, sequential calls, N concurrent clients,
//! the same on OS threads for the floor, and their rows in the table.

use super::*;

/// `n` calls of `a` and `n` of `b`, alternating, so both see the same moments of a noisy
/// machine.
pub(super) async fn paired<A, AF, B, BF>(
    n: usize,
    mut a: A,
    mut b: B,
) -> Result<(Samples, Samples), Status>
where
    A: FnMut() -> AF,
    AF: Future<Output = Result<(), Status>>,
    B: FnMut() -> BF,
    BF: Future<Output = Result<(), Status>>,
{
    for _ in 0..(n / 10).max(10) {
        a().await?; // warm-up: connections, caches
        b().await?;
    }
    let (mut sa, mut sb) = (Samples::default(), Samples::default());
    for _ in 0..n {
        let t = Instant::now();
        a().await?;
        let u = Instant::now();
        b().await?;
        sb.latencies.push(u.elapsed());
        sa.latencies.push(u - t);
    }
    // Each alone would have taken its own calls' time.
    sa.wall = sa.latencies.iter().sum();
    sb.wall = sb.latencies.iter().sum();
    Ok((sa, sb))
}

/// `n` calls one after another.
pub(super) async fn sequential<F, Fut>(n: usize, mut call: F) -> Result<Samples, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Status>>,
{
    for _ in 0..(n / 10).max(10) {
        call().await?; // warm-up: connections, caches
    }
    let mut s = Samples::default();
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        call().await?;
        s.latencies.push(t.elapsed());
    }
    s.wall = start.elapsed();
    Ok(s)
}

/// What a server did during a load: its largest resident size and thread count (sampled), and
/// its CPU time per call.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Peak {
    pub(super) rss: u64,
    pub(super) threads: u64,
    pub(super) cpu_per_call: Duration,
}

/// One task per client, each calling in a loop for `dur`; the server's (`pid`) RSS and thread
/// count are sampled every 50 ms meanwhile, and its CPU time is read before and after.
pub(super) async fn concurrent<C, F, Fut>(
    clients: Vec<C>,
    dur: Duration,
    call: F,
    pid: u32,
) -> Result<(Samples, Peak), Status>
where
    C: Clone + Send + 'static,
    F: Fn(C) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), Status>> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak[0].fetch_max(rss_of(pid), Ordering::Relaxed);
                peak[1].fetch_max(threads_of(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let cpu_before = cpu_of(pid);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in clients {
        let (call, stop) = (call.clone(), stop.clone());
        tasks.spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                call(c.clone()).await?;
                lat.push(t.elapsed());
            }
            Ok::<_, Status>(lat)
        });
    }
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut s = Samples::default();
    let mut first_err = None;
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(Ok(lat)) => s.latencies.extend(lat),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(Status::internal(e.to_string()));
            }
        }
    }
    s.wall = start.elapsed();
    let cpu_per_call = per_call(cpu_of(pid).saturating_sub(cpu_before), s.latencies.len());
    let _ = sampler.await;
    match first_err {
        Some(e) => Err(e),
        None => Ok((
            s,
            Peak {
                rss: peak[0].load(Ordering::Relaxed),
                threads: peak[1].load(Ordering::Relaxed),
                cpu_per_call,
            },
        )),
    }
}

/// The floor, one thread: `n` direct calls.
pub(super) fn direct_sequential<F>(n: usize, call: F) -> Samples
where
    F: Fn(),
{
    for _ in 0..(n / 10).max(10) {
        call();
    }
    let mut s = Samples::default();
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        call();
        s.latencies.push(t.elapsed());
    }
    s.wall = start.elapsed();
    s
}

/// The floor, `threads` OS threads calling for `dur`.
pub(super) fn direct_concurrent<F>(threads: usize, dur: Duration, call: F) -> Samples
where
    F: Fn() + Sync,
{
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let lat: Vec<Vec<Duration>> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut lat = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        call();
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    Samples {
        latencies: lat.into_iter().flatten().collect(),
        wall: start.elapsed(),
    }
}

/// Rows for one RPC: single-client and n-client p50/p99/throughput, each against the floor when
/// there is one.
pub(super) fn rpc_rows(
    rows: &mut Vec<Row>,
    name: &str,
    clients: usize,
    seq: &Samples,
    par: &Samples,
    direct: Option<(&Samples, &Samples)>,
) {
    let (ds, dp) = (direct.map(|x| x.0), direct.map(|x| x.1));
    load_rows(rows, &format!("{name} 1 client"), seq, ds);
    load_rows(rows, &format!("{name} {clients} clients"), par, dp);
}

/// The p50, p99 and throughput rows of one load (`what`: the RPC and its clients).
pub(super) fn load_rows(
    rows: &mut Vec<Row>,
    what: &str,
    daemon: &Samples,
    direct: Option<&Samples>,
) {
    for q in [0.5, 0.99] {
        let secs = |s: &Samples| s.quantile(q).as_secs_f64();
        rows.push(Row {
            what: format!("{what} p{}", (q * 100.0).round()),
            daemon: fmt_d(daemon.quantile(q)),
            direct: direct.map_or("n/a".into(), |s| fmt_d(s.quantile(q))),
            ratio: direct.map_or("-".into(), |s| ratio(secs(daemon), secs(s))),
        });
    }
    rows.push(Row {
        what: format!("{what} throughput"),
        daemon: format!("{:.0}/s", daemon.throughput()),
        direct: direct.map_or("n/a".into(), |s| format!("{:.0}/s", s.throughput())),
        // Inverted so that, as elsewhere, >1 means the daemon costs more than the floor.
        ratio: direct.map_or("-".into(), |s| ratio(s.throughput(), daemon.throughput())),
    });
}

pub(super) fn na(rows: &mut Vec<Row>, what: &str, why: &str) {
    rows.push(Row::single(what, format!("n/a: {why}")));
}
