//! The workload: several drivers, each with its own disk, sending their node sequences
//! (stage, publish, unpublish, unstage, expand, stats) in an order drawn from the seed,
//! each retried as kubelet retries; the operator restarts WMI now and then. Every step is
//! followed by the invariants.

use super::world::{Daemon, KUBELET, Rng, World};
use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

const GIB: u64 = 1 << 30;
/// Attempts of one CSI call under the weather before the weather clears.
const ATTEMPTS: u32 = 6;
/// The longest one attempt may take in simulated time (a CSI call's deadline is minutes).
const DEADLINE: Duration = Duration::from_secs(180);

/// One thing that happens on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Stage(usize),
    Publish(usize),
    Unpublish(usize),
    Unstage(usize),
    /// The operator grows the disk, then kubelet asks for NodeExpandVolume.
    Expand(usize),
    Stats(usize),
    RestartWmi,
}

/// Where a driver's volume is, as kubelet knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Unstaged,
    Staged,
    Published,
}

/// One driver and its disk.
#[derive(Debug)]
struct Lane {
    disk: u32,
    size: u64,
    phase: Phase,
    volume: Option<String>,
    /// The filesystem's serial number once the volume was first staged: never to change.
    serial: Option<u32>,
    staging: String,
    target: String,
}

/// What broke, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The steps of a run: `count` of them for `lanes` drivers, valid in the order drawn (a
/// shrunk list may hold steps no longer valid; those are skipped as kubelet would never send
/// them).
pub fn steps(seed: u64, lanes: usize, count: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed ^ 0x5eed_5eed);
    let mut phase = vec![Phase::Unstaged; lanes];
    let mut out = Vec::new();
    while out.len() < count {
        if rng.chance(30) {
            out.push(Step::RestartWmi);
            continue;
        }
        let l = rng.below(lanes as u64) as usize;
        let step = match (phase[l], rng.below(4)) {
            (Phase::Unstaged, _) => Step::Stage(l),
            (Phase::Staged, 0) => Step::Unstage(l),
            (Phase::Staged, 1) => Step::Expand(l),
            (Phase::Staged, 2) => Step::Stats(l),
            (Phase::Staged, _) => Step::Publish(l),
            (Phase::Published, 0) => Step::Unpublish(l),
            (Phase::Published, 1) => Step::Expand(l),
            (Phase::Published, _) => Step::Stats(l),
        };
        phase[l] = match step {
            Step::Stage(_) | Step::Unpublish(_) => Phase::Staged,
            Step::Publish(_) => Phase::Published,
            Step::Unstage(_) => Phase::Unstaged,
            _ => phase[l],
        };
        out.push(step);
    }
    out
}

/// A run of `steps` in the world of `seed`: the first violation, with the step it followed.
pub fn run(seed: u64, lanes: usize, steps: &[Step], log: bool) -> Result<Stats, Violation> {
    let mut w = World::new(seed);
    let system = format!("{:?}", w.sim.partitions(0));
    let mut lanes: Vec<Lane> = (0..lanes)
        .map(|i| {
            let size = (4 + w.rng.below(12)) * GIB;
            Lane {
                disk: w.sim.add_disk(size, i as u8 + 1),
                size,
                phase: Phase::Unstaged,
                volume: None,
                serial: None,
                staging: format!(
                    r"{KUBELET}\plugins\kubernetes.io\csi\ebs.csi.aws.com\{i:02x}\globalmount"
                ),
                target: format!(r"{KUBELET}\pods\pod-{i}\volumes\kubernetes.io~csi\pv-{i}\mount"),
            }
        })
        .collect();
    let mut stats = Stats::default();
    let final_steps: Vec<Step> = (0..lanes.len())
        .flat_map(|l| [Step::Unpublish(l), Step::Unstage(l)])
        .collect();
    for (i, step) in steps.iter().chain(final_steps.iter()).enumerate() {
        let tail = i >= steps.len();
        if !valid(&lanes, *step) {
            continue;
        }
        if log {
            eprintln!("step {i}: {step:?}");
        }
        let at = |v: Violation| Violation(format!("after step {i} ({step:?}): {v}"));
        // The tail takes every volume down with the weather clear: it must all converge.
        w.disturb(!tail);
        perform(&mut w, &mut lanes, *step, &mut stats, log).map_err(at)?;
        w.disturb(false);
        check(&w, &lanes, &system).map_err(at)?;
        stats.steps += 1;
    }
    let left: Vec<_> = w
        .sim
        .mount_points()
        .into_iter()
        .filter(|(at, _)| {
            at.to_ascii_lowercase()
                .starts_with(&KUBELET.to_ascii_lowercase())
        })
        .collect();
    if !left.is_empty() {
        return Err(Violation(format!(
            "mounts left after every volume was unstaged: {left:?}"
        )));
    }
    stats.restarts = w.restarts;
    Ok(stats)
}

/// What a run went through.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub steps: u32,
    pub attempts: u32,
    pub failed_attempts: u32,
    pub restarts: u32,
}

impl Stats {
    /// Counts `other`'s run in too.
    pub fn add(&mut self, other: Stats) {
        self.steps += other.steps;
        self.attempts += other.attempts;
        self.failed_attempts += other.failed_attempts;
        self.restarts += other.restarts;
    }
}

fn valid(lanes: &[Lane], step: Step) -> bool {
    let phase = |l: usize| lanes[l].phase;
    match step {
        Step::Stage(l) => phase(l) == Phase::Unstaged,
        Step::Publish(l) | Step::Unstage(l) => phase(l) == Phase::Staged,
        Step::Unpublish(l) => phase(l) == Phase::Published,
        Step::Expand(l) | Step::Stats(l) => phase(l) != Phase::Unstaged,
        Step::RestartWmi => true,
    }
}

/// Sends the step's CSI call, retried as kubelet retries it: a few attempts under the
/// weather, then with the weather cleared it must succeed (every retried request converges).
fn perform(
    w: &mut World,
    lanes: &mut [Lane],
    step: Step,
    stats: &mut Stats,
    log: bool,
) -> Result<(), Violation> {
    match step {
        Step::RestartWmi => {
            w.sim.restart_wmi();
            return Ok(());
        }
        Step::Expand(l) => {
            let lane = &mut lanes[l];
            lane.size += GIB;
            w.sim.grow_disk(lane.disk, lane.size);
        }
        _ => {}
    }
    retried(stats, |n, clear| {
        if clear {
            w.disturb(false);
        }
        let (t0, late0) = (w.sim.clock(), w.late_ms.load(Ordering::Relaxed));
        let answer = attempt_once(&w.daemon, &w.sim, &mut lanes[..], step);
        let late = Duration::from_millis(w.late_ms.load(Ordering::Relaxed) - late0);
        let took = w.sim.clock().saturating_sub(t0).saturating_sub(late);
        if took > DEADLINE {
            return Err(Violation(format!(
                "one attempt took {took:?} of simulated time besides {late:?} of slow calls \
                 (deadline {DEADLINE:?})"
            )));
        }
        let killed = w.restart_if_dead();
        if log {
            eprintln!("  attempt {n}: {answer:?}, killed: {killed}");
        }
        Ok(Attempt { answer, killed })
    })
}

/// One attempt of a CSI call: what it answered, and whether the daemon was killed during it.
pub struct Attempt {
    pub answer: Result<(), String>,
    pub killed: bool,
}

/// A CSI call retried as kubelet retries it: `attempt(n, clear)` runs attempt `n`, [`ATTEMPTS`]
/// times under the weather and once more with it cleared (`clear`), until one answers OK with
/// the daemon alive. Every retried request converges; one that does not is a violation.
pub fn retried(
    stats: &mut Stats,
    mut attempt: impl FnMut(u32, bool) -> Result<Attempt, Violation>,
) -> Result<(), Violation> {
    let mut last = String::new();
    for n in 0..=ATTEMPTS {
        stats.attempts += 1;
        let a = attempt(n, n == ATTEMPTS)?;
        match a.answer {
            Ok(()) if !a.killed => return Ok(()),
            Ok(()) => last = "answered OK, but the daemon was killed during the call".into(),
            Err(e) => last = e,
        }
        stats.failed_attempts += 1;
    }
    Err(Violation(format!(
        "did not converge: with the weather cleared the call still failed: {last}"
    )))
}

/// One attempt of the step's CSI call, as the driver sends it.
fn attempt_once(
    d: &Daemon,
    sim: &csi_proxy_host::windows::sim::SimWindows,
    lanes: &mut [Lane],
    step: Step,
) -> Result<(), String> {
    let s = |e: csi_proxy_core::Error| e.to_string();
    match step {
        Step::Stage(l) => {
            let lane = &mut lanes[l];
            let n = lane.disk;
            if !d.disk.list_disk_ids().map_err(s)?.contains_key(&n) {
                return Err(format!("disk {n} is not listed"));
            }
            d.disk.partition_disk(n).map_err(s)?;
            d.disk.set_disk_state(n, true).map_err(s)?;
            let vols = d.volume.list_volumes_on_disk(n, 0).map_err(s)?;
            // The driver takes the first ID without a length check: an empty list panics it.
            let v = vols
                .first()
                .ok_or("no volume listed (the driver panics)")?
                .clone();
            if !d.volume.is_volume_formatted(&v).map_err(s)? {
                d.volume.format_volume(&v).map_err(s)?;
            }
            if !d.fs.path_exists(&lane.staging).map_err(s)? {
                d.fs.mkdir(&lane.staging).map_err(s)?;
            }
            d.volume.mount_volume(&v, &lane.staging).map_err(s)?;
            if lane.serial.is_none() {
                lane.serial = sim.filesystem_serial(&v);
            }
            lane.volume = Some(v);
            lane.phase = Phase::Staged;
        }
        Step::Publish(l) => {
            let lane = &mut lanes[l];
            if !d.fs.path_exists(&lane.target).map_err(s)? {
                let parent = lane.target.rsplit_once('\\').map_or("", |(p, _)| p);
                d.fs.mkdir(parent).map_err(s)?;
                d.fs.create_symlink(&lane.staging, &lane.target)
                    .map_err(s)?;
            }
            lane.phase = Phase::Published;
        }
        Step::Unpublish(l) => {
            let lane = &mut lanes[l];
            if d.fs.path_exists(&lane.target).map_err(s)? {
                d.fs.rmdir(&lane.target, true).map_err(s)?;
            }
            lane.phase = Phase::Staged;
        }
        Step::Unstage(l) => {
            let lane = &mut lanes[l];
            let v = lane.volume.clone().ok_or("staged without a volume")?;
            d.volume.unmount_volume(&v, &lane.staging).map_err(s)?;
            if d.fs.path_exists(&lane.staging).map_err(s)? {
                d.fs.rmdir(&lane.staging, true).map_err(s)?;
            }
            lane.phase = Phase::Unstaged;
        }
        Step::Expand(l) => {
            let lane = &lanes[l];
            let v = lane.volume.as_deref().ok_or("staged without a volume")?;
            d.disk.rescan().map_err(s)?;
            d.volume.resize_volume(v, 0).map_err(s)?;
            let (_, fs_size) = sim.filesystem_of(v).ok_or("the volume has no filesystem")?;
            // Grown to the disk's end, less the GPT, the reserved partition and alignment.
            if fs_size + 256 * (1 << 20) < lane.size {
                return Err(format!(
                    "ResizeVolume answered OK but the filesystem has {fs_size} of {} bytes",
                    lane.size
                ));
            }
        }
        Step::Stats(l) => {
            let v = lanes[l]
                .volume
                .as_deref()
                .ok_or("staged without a volume")?;
            let st = d.volume.get_volume_stats(v).map_err(s)?;
            if st.total_bytes == 0 || st.used_bytes > st.total_bytes {
                return Err(format!("impossible stats {st:?}"));
            }
        }
        Step::RestartWmi => {}
    }
    Ok(())
}

/// The invariants, with the weather cleared: no volume formatted twice, every staged volume
/// mounted where it was staged, every published target leading there, the system disk
/// untouched.
fn check(w: &World, lanes: &[Lane], system: &str) -> Result<(), Violation> {
    let bad = |s: String| Err(Violation(s));
    if format!("{:?}", w.sim.partitions(0)) != system {
        return bad("the system disk's partitions changed".into());
    }
    let mounts = w.sim.mount_points();
    let same = |a: &str, b: &str| {
        a.trim_end_matches('\\')
            .eq_ignore_ascii_case(b.trim_end_matches('\\'))
    };
    for (i, lane) in lanes.iter().enumerate() {
        let Some(v) = lane.volume.as_deref() else {
            continue;
        };
        let serial = w.sim.filesystem_serial(v);
        if let Some(first) = lane.serial
            && serial != Some(first)
        {
            return bad(format!(
                "driver {i}'s volume {v} was formatted again (serial {first:08x} -> {serial:?})"
            ));
        }
        if lane.phase != Phase::Unstaged
            && !mounts
                .iter()
                .any(|(at, vol)| same(at, &lane.staging) && same(vol, v))
        {
            return bad(format!(
                "driver {i}'s volume {v} is not mounted at its staging path {} (mounts: {mounts:?})",
                lane.staging
            ));
        }
        if lane.phase == Phase::Published && !w.daemon.fs.path_exists(&lane.target).unwrap_or(false)
        {
            return bad(format!("driver {i}'s target {} leads nowhere", lane.target));
        }
    }
    Ok(())
}
