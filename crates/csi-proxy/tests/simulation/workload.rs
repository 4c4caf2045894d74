//! The workload: several drivers, each with its own disk, sending their node sequences
//! (stage, publish, unpublish, unstage, expand, stats; `drivers.rs`) in an order drawn from
//! the seed, each retried as kubelet retries, calls that hang given up and let go later; the
//! operator restarts WMI, grows disks and reattaches unstaged ones. Every step is followed by
//! the invariants.

use super::drivers::{Driver, Failure, Lane, Phase, attempt_once, mounted_at, mounted_there};
use super::world::{KUBELET, Rng, World};
use csi_proxy_host::windows::sim::SimWindows;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
    /// The operator detaches an unstaged volume's disk and attaches it again (the cloud moved
    /// it back to this node): it comes back with the attributes it persisted.
    Reattach(usize),
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
            (Phase::Unstaged, 0) => Step::Reattach(l),
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
    let system = system_disk(&w.sim);
    let mut drivers = Rng::new(seed ^ 0xd21e_d21e);
    let mut lanes: Vec<Lane> = (0..lanes)
        .map(|i| {
            let size = (4 + w.rng.below(12)) * GIB;
            let lun = i as u8 + 1;
            Lane {
                driver: [Driver::AwsEbs, Driver::GcePd, Driver::AzureDisk]
                    [drivers.below(3) as usize],
                disk: w.sim.add_disk(size, lun),
                lun,
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
    // Driver 0's LUN is surfaced a second time (two paths without MPIO): the drivers never
    // name that disk, and the daemon must refuse it while the LUN is staged.
    let second_path = w.sim.add_disk_path(lanes[0].disk, 0x40);
    let second_bytes = w.sim.disk_bytes(second_path, 0, 64 << 10);
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
        // The tail takes every volume down with the weather clear: it must all converge. A
        // call still hung from the run goes on first.
        if tail {
            finish_hung(&mut w).map_err(at)?;
        }
        w.disturb(!tail);
        perform(&mut w, &mut lanes, *step, &mut stats, log).map_err(at)?;
        w.disturb(false);
        check(&w, &lanes, &system).map_err(at)?;
        second_path_refused(&w, &lanes[0], second_path, &second_bytes).map_err(at)?;
        stats.steps += 1;
    }
    finish_hung(&mut w)?;
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
    /// Attempts kubelet gave up on while their call hung in the daemon.
    pub hangs: u32,
}

impl Stats {
    /// Counts `other`'s run in too.
    pub fn add(&mut self, other: Stats) {
        self.steps += other.steps;
        self.attempts += other.attempts;
        self.failed_attempts += other.failed_attempts;
        self.restarts += other.restarts;
        self.hangs += other.hangs;
    }
}

fn valid(lanes: &[Lane], step: Step) -> bool {
    let phase = |l: usize| lanes[l].phase;
    match step {
        Step::Stage(l) => phase(l) == Phase::Unstaged,
        Step::Publish(l) | Step::Unstage(l) => phase(l) == Phase::Staged,
        Step::Unpublish(l) => phase(l) == Phase::Published,
        Step::Expand(l) | Step::Stats(l) => phase(l) != Phase::Unstaged,
        // azuredisk never sets its disk online: its disks stay attached.
        Step::Reattach(l) => phase(l) == Phase::Unstaged && lanes[l].driver != Driver::AzureDisk,
        Step::RestartWmi => true,
    }
}

/// The caller's deadline (real time) of a call: kubelet's for the CSI call, which the server
/// gives the daemon's work (`csi_proxy_core::deadline`). Long, as kubelet's minutes are, for a
/// call nothing stands in the way of; short for a call sent while another hangs, since it may
/// wait for a disk the hung one holds until its deadline. A hung call's own deadline passes
/// when it is let go (the simulated Windows expires it): it hung past it.
const ATTEMPT_DEADLINE: Duration = Duration::from_secs(20);
const BEHIND_A_HANG: Duration = Duration::from_millis(100);
/// An attempt still running this long (real time) is stuck past any deadline.
const STUCK: Duration = Duration::from_secs(30);

/// Sends the step's CSI call, retried as kubelet retries it: a few attempts under the
/// weather, then with the weather cleared it must succeed (every retried request converges).
/// An attempt whose call hangs is given up (kubelet's deadline), and the call goes on in the
/// daemon while kubelet retries; it is let go after a later attempt or at the step's end.
fn perform(
    w: &mut World,
    lanes: &mut [Lane],
    step: Step,
    stats: &mut Stats,
    log: bool,
) -> Result<(), Violation> {
    let l = match step {
        Step::RestartWmi => {
            w.sim.restart_wmi();
            return Ok(());
        }
        Step::Reattach(l) => {
            w.sim.reattach_disk(lanes[l].disk);
            return Ok(());
        }
        Step::Expand(l) => {
            let lane = &mut lanes[l];
            lane.size += GIB;
            w.sim.grow_disk(lane.disk, lane.size);
            l
        }
        Step::Stage(l)
        | Step::Publish(l)
        | Step::Unpublish(l)
        | Step::Unstage(l)
        | Step::Stats(l) => l,
    };
    let mut hangs = 0;
    let done = retried(stats, |n, clear| {
        if clear {
            w.disturb(false);
            finish_hung(w)?;
        }
        let (t0, late0) = (w.sim.clock(), w.late_ms.load(Ordering::Relaxed));
        let hung_before = w.hung.len();
        let answer = attempt_on_thread(w, lanes[l].clone(), step)?;
        hangs += u32::from(w.hung.len() > hung_before);
        let late = Duration::from_millis(w.late_ms.load(Ordering::Relaxed) - late0);
        let took = w.sim.clock().saturating_sub(t0).saturating_sub(late);
        if took > DEADLINE {
            return Err(Violation(format!(
                "one attempt took {took:?} of simulated time besides {late:?} of slow calls \
                 (deadline {DEADLINE:?})"
            )));
        }
        let killed = w.restart_if_dead()?;
        if !w.hung.is_empty() && w.hang_rng.chance(250) {
            finish_hung(w)?;
        }
        if log {
            eprintln!("  attempt {n}: {answer:?}, killed: {killed}");
        }
        let answer = answer.map(|lane| {
            if !killed {
                lanes[l] = lane;
            }
        });
        Ok(Attempt { answer, killed })
    });
    stats.hangs += hangs;
    done
}

/// Lets the hung call go on to its end; when the weather killed the daemon meanwhile, it is
/// restarted (the answer kubelet already has stands).
fn finish_hung(w: &mut World) -> Result<(), Violation> {
    w.join_hung()?;
    w.restart_if_dead()?;
    Ok(())
}

/// One attempt on its own thread, as the daemon serves each call on one: its answer, or an
/// error when its call hung (kubelet stops waiting; the thread is kept in `w.hung`).
fn attempt_on_thread(
    w: &mut World,
    mut lane: Lane,
    step: Step,
) -> Result<Result<Lane, String>, Violation> {
    let (daemon, sim) = (w.daemon.clone(), w.sim.clone());
    let deadline = Some(
        Instant::now()
            + if w.hung.is_empty() {
                ATTEMPT_DEADLINE
            } else {
                BEHIND_A_HANG
            },
    );
    let hung_before = w.sim.hung_calls();
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let r = csi_proxy_core::deadline::within(deadline, || {
            attempt_once(&daemon, &sim, &mut lane, step)
        });
        let broke = match &r {
            Err(Failure::Broken(v)) => Some(Violation(v.clone())),
            _ => None,
        };
        let _ = tx.send(r.map(|()| lane));
        broke
    });
    let started = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_micros(200)) {
            Ok(r) => {
                thread.join().expect("the attempt's thread ended");
                return match r {
                    Ok(lane) => Ok(Ok(lane)),
                    Err(Failure::Answer(e)) => Ok(Err(e)),
                    Err(Failure::Broken(v)) => Err(Violation(v)),
                };
            }
            Err(mpsc::RecvTimeoutError::Timeout) if w.sim.hung_calls() > hung_before => {
                w.hung.push(thread);
                return Ok(Err(
                    "DEADLINE_EXCEEDED: the call hangs in the daemon; kubelet retries".into(),
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) if started.elapsed() > STUCK => {
                return Err(Violation(format!(
                    "an attempt of {step:?} still runs {STUCK:?} after it started, past its \
                     deadline"
                )));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let panic = thread.join().expect_err("ended without answering");
                std::panic::resume_unwind(panic);
            }
        }
    }
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

/// What the system disk holds: its partitions, and a hash of its first 64 KiB (the
/// protective MBR and the GPT).
fn system_disk(sim: &SimWindows) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    sim.disk_bytes(0, 0, 64 << 10).hash(&mut h);
    format!("{:?} {:016x}", sim.partitions(0), h.finish())
}

/// The second path to driver 0's LUN, with the weather cleared: nothing wrote through it, and
/// while the LUN is staged through the first path a PartitionDisk through it is refused,
/// naming the first.
fn second_path_refused(w: &World, lane: &Lane, second: u32, bytes: &[u8]) -> Result<(), Violation> {
    if w.sim.disk_bytes(second, 0, 64 << 10) != bytes {
        return Err(Violation(format!(
            "the second path (disk {second}) to driver 0's disk was written"
        )));
    }
    if lane.phase == Phase::Unstaged {
        return Ok(());
    }
    match w.daemon.disk.partition_disk(second) {
        Err(e)
            if e.message()
                .contains(&format!("another path, as disk {}", lane.disk)) =>
        {
            Ok(())
        }
        r => Err(Violation(format!(
            "PartitionDisk of the second path (disk {second}) to driver 0's staged disk {} \
             answered {r:?}, not a refusal naming it",
            lane.disk
        ))),
    }
}

/// The invariants, with the weather cleared: no volume formatted twice, every staged volume
/// mounted where it was staged, every published target leading there, the system disk
/// untouched.
fn check(w: &World, lanes: &[Lane], system: &str) -> Result<(), Violation> {
    let bad = |s: String| Err(Violation(s));
    if system_disk(&w.sim) != system {
        return bad("the system disk (the host's own) was written".into());
    }
    for (i, lane) in lanes.iter().enumerate() {
        if lane.phase == Phase::Unstaged
            && let Some(v) = mounted_at(&w.sim, &lane.staging)
        {
            return bad(format!(
                "driver {i}'s staging path {} still has {v} mounted after NodeUnstage",
                lane.staging
            ));
        }
        let Some(v) = lane.volume.as_deref() else {
            continue;
        };
        // None while its disk is offline (unstaged): nothing can format it then.
        if let (Some(first), Some(now)) = (lane.serial, w.sim.filesystem_serial(v))
            && now != first
        {
            return bad(format!(
                "driver {i}'s volume {v} was formatted again (serial {first:08x} -> {now:08x})"
            ));
        }
        if lane.phase != Phase::Unstaged && !mounted_there(&w.sim, &lane.staging, v) {
            return bad(format!(
                "driver {i}'s volume {v} is not mounted at its staging path {} (mounts: {:?})",
                lane.staging,
                w.sim.mount_points()
            ));
        }
        if lane.phase == Phase::Published && !w.daemon.fs.path_exists(&lane.target).unwrap_or(false)
        {
            return bad(format!("driver {i}'s target {} leads nowhere", lane.target));
        }
    }
    Ok(())
}
