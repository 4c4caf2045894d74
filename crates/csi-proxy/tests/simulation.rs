//! Deterministic simulation: many seeded node lifetimes over the simulated Windows, each a
//! few drivers staging, publishing, expanding and unstaging their volumes in an order drawn
//! from the seed, while seam calls fail, answer late, or find the daemon killed (then started
//! again over the same machine and state directory). After every step the invariants are
//! checked (see `simulation/workload.rs`), and around each seed the process's threads and
//! heap (`simulation/resources.rs`); a failure prints its seed (and, for a failed step, the
//! shortest step list that still fails), and replays exactly. A second world
//! (`simulation/profiles.rs`) gives each driver its own profile and checks, over the seeds,
//! that no driver's call touches another's staged volume or disk:
//!
//! ```text
//! DST_SEED=<seed> cargo test -p csi-proxy --test simulation -- --nocapture   # one seed, logged
//! DST_SEEDS=100000 cargo test -p csi-proxy --release --test simulation       # many seeds
//! ```
#![cfg(unix)]

mod simulation {
    pub mod drivers;
    #[cfg(target_os = "linux")]
    pub mod linux;
    pub mod profiles;
    pub mod resources;
    pub mod smb;
    pub mod workload;
    pub mod world;
}

// The services over one simulated Windows, as the other simulated-Windows tests build them.
#[path = "common/sim_services.rs"]
mod sim_services;

use simulation::resources::{self, Figures, Tally, Watch};
use simulation::workload::{self, Step, Violation};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// Seeds a plain `cargo test` runs (CI's budget: a few seconds).
const CI_SEEDS: u64 = 150;
/// Seeds of the profiles world a plain `cargo test` runs.
const PROFILE_SEEDS: u64 = 60;
/// Drivers (each with its disk) on the node, and steps of a run.
const LANES: usize = 3;
const STEPS: usize = 40;
/// Seeds that once failed, kept so their bugs stay fixed: 18, 46, 107 and 137 found
/// IsVolumeFormatted answering true for an interrupted format of ours (drivers then never
/// called FormatVolume and MountVolume refused forever); 289 a deadline counting slow calls;
/// 6 UnmountVolume answering OK with the volume still mounted when GetFileAttributesW failed
/// for another cause than "not found"; 30 ResizeVolume growing the partition alone and
/// answering OK when GetDiskFreeSpaceExW failed; 62 a stale UnmountVolume (hung past its
/// caller's deadline) taking away the volume staged again since. In the SMB world: 9
/// RemoveSmbGlobalMapping answering NOT_FOUND to csi-driver-smb's retried unstage forever (its
/// removal had gone through, its Rmdir had not); 115 a working mapping removed under another
/// volume's link after one lost answer of the share-root probe. 511119644 (from a sweep of
/// fresh seeds) azuredisk's unstage Rmdir hung inside its removal of the mount point, let go
/// after kubelet's retry and the next stage: it removed the new mount point. (The workload has
/// changed since the first five were found; their bugs are also pinned by unit tests of the
/// hosts.)
const REGRESSIONS: [u64; 11] = [6, 9, 18, 30, 46, 62, 107, 115, 137, 289, 511_119_644];

/// The tests run one at a time: the resource checks count the whole process's heap and
/// threads.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Takes [`ONE_AT_A_TIME`], the calling thread named as the harness's (not the daemon's).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    resources::harness_thread();
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// Removes steps one at a time while the run still fails: the shortest list found, and its
/// violation.
fn shrink(seed: u64, mut steps: Vec<Step>, mut why: Violation) -> (Vec<Step>, Violation) {
    let mut i = 0;
    while i < steps.len() {
        let mut fewer = steps.clone();
        fewer.remove(i);
        match run_both(seed, &fewer, false) {
            Err(v) => {
                steps = fewer;
                why = v;
            }
            Ok(_) => i += 1,
        }
    }
    (steps, why)
}

/// One seed's lifetime in both worlds: the simulated Windows, then (on Linux) the fake Linux.
fn run_both(seed: u64, steps: &[Step], log: bool) -> Result<workload::Stats, Violation> {
    let mut stats = workload::run(seed, LANES, steps, log)?;
    #[cfg(target_os = "linux")]
    stats.add(simulation::linux::run(seed, LANES, steps, log)?);
    stats.add(simulation::smb::run(seed, LANES, steps, log)?);
    Ok(stats)
}

/// One seed's run, its resources checked once its worlds are gone.
fn run_seed(seed: u64, log: bool) -> Result<(workload::Stats, Figures), String> {
    let replay =
        format!("replay: DST_SEED={seed} cargo test -p csi-proxy --test simulation -- --nocapture");
    let steps = workload::steps(seed, LANES, STEPS);
    // A logged run's output is kept by the test harness (unless --nocapture): that heap is
    // not the daemon's, so only unlogged runs are held to the resource checks.
    let watch = (!log).then(Watch::start);
    match run_both(seed, &steps, log) {
        Ok(stats) => watch
            .map_or(Ok(Figures::default()), Watch::check)
            .map(|figures| (stats, figures))
            .map_err(|e| format!("seed {seed} failed: {e}\n  {replay}")),
        Err(v) => {
            let (short, why) = shrink(seed, steps, v.clone());
            Err(format!(
                "seed {seed} failed: {v}\n  shortest failing step list ({} steps): {short:?}\n  \
                 its violation: {why}\n  {replay}",
                short.len()
            ))
        }
    }
}

#[test]
fn seeded_node_lifetimes_keep_every_invariant() {
    let _one = one_at_a_time();
    if let Some(seed) = env_u64("DST_SEED") {
        let (stats, figures) = run_seed(seed, true).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("seed {seed}: {stats:?}\n  {figures:?}");
        return;
    }
    let count = env_u64("DST_SEEDS").unwrap_or(CI_SEEDS);
    let first = env_u64("DST_FIRST_SEED").unwrap_or(1);
    let max_failures = env_u64("DST_MAX_FAILURES").unwrap_or(5);
    let started = Instant::now();
    let mut total = workload::Stats::default();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for seed in first..first + count {
        match run_seed(seed, false) {
            Ok((s, figures)) => {
                total.add(s);
                if let Err(e) = tally.add(seed, figures) {
                    eprintln!("{e}");
                    failures.push(seed);
                    break;
                }
            }
            Err(e) => {
                eprintln!("{e}");
                failures.push(seed);
                if failures.len() as u64 >= max_failures {
                    break;
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{count} seeds in {secs:.1} s ({:.0} seeds/s): {} steps, {} attempts ({} failed, {} hung), {} daemon restarts",
        count as f64 / secs,
        total.steps,
        total.attempts,
        total.failed_attempts,
        total.hangs,
        total.restarts
    );
    eprintln!("resources: {tally}");
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
    // The weather must bite: a run where nothing failed tests nothing.
    assert!(
        total.failed_attempts > 0 && total.restarts > 0 && total.hangs > 0,
        "{total:?}"
    );
}

#[test]
fn seeds_that_once_failed_keep_passing() {
    let _one = one_at_a_time();
    for seed in REGRESSIONS {
        run_seed(seed, false).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The same seed gives the same run: the replay a failure prints is exact.
#[test]
fn a_seed_replays_exactly() {
    let _one = one_at_a_time();
    let steps = workload::steps(7, LANES, STEPS);
    let a = run_both(7, &steps, false);
    let b = run_both(7, &steps, false);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

/// The profiles world (`simulation/profiles.rs`): over many seeds, no driver's call under its
/// profile touches another driver's staged volume or disk, and each such try is refused naming
/// both; the same runs with every driver given all rights (no profiles) break it.
#[test]
fn profiles_keep_each_driver_to_its_own_objects() {
    let _one = one_at_a_time();
    let count = env_u64("DST_SEEDS").unwrap_or(PROFILE_SEEDS);
    let first = env_u64("DST_FIRST_SEED").unwrap_or(1);
    let mut refused = 0;
    for seed in first..first + count {
        refused +=
            simulation::profiles::run(seed, LANES, STEPS, true).unwrap_or_else(|v| panic!("{v}"));
    }
    eprintln!("profiles: {count} seeds, {refused} cross-driver actions refused");
    assert!(refused > 0, "no run tried a cross-driver action");
    let broken: Vec<Violation> = (first..first + 10)
        .filter_map(|seed| simulation::profiles::run(seed, LANES, STEPS, false).err())
        .collect();
    eprintln!(
        "without profiles: {} of 10 runs broke; the first: {:?}",
        broken.len(),
        broken.first()
    );
    assert!(
        !broken.is_empty(),
        "without profiles a driver reached another's objects in no run"
    );
}
