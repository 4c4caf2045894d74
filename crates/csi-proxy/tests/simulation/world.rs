//! The seeded world: the daemon's services over one simulated Windows machine, one random
//! source for everything that varies, and a daemon that can be killed between any two seam
//! calls and started again over the same machine and state directory.

use super::workload::Violation;
use csi_proxy_core::disk::DiskService;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::volume::VolumeService;
use csi_proxy_host::windows::disk::WindowsDiskHost;
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::os::OsError;
use csi_proxy_host::windows::sim::{Disturbance, SimWindows};
use csi_proxy_host::windows::volume::WindowsVolumeHost;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const KUBELET: &str = r"C:\var\lib\kubelet";

/// SplitMix64: small, fast, and the same sequence on every platform for a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True `per_mille` times in a thousand.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// How disturbed a run is, drawn from its seed.
#[derive(Debug, Clone, Copy)]
pub struct Weather {
    /// Per mille of seam calls that fail with a transient error.
    pub fail: u64,
    /// Per mille of seam calls that answer late.
    pub late: u64,
    /// Per mille of seam calls before which the daemon is killed.
    pub crash: u64,
    /// Per mille of seam calls that hang past the caller's deadline (in most runs none).
    pub hang: u64,
}

/// Transient errors any device or WMI call may answer (System Error Codes): the device not
/// ready, an I/O error, another process holding the file, a general failure, a device gone
/// for a moment.
const TRANSIENT: [(u32, &str); 5] = [
    (21, "The device is not ready."),
    (
        1117,
        "The request could not be performed because of an I/O device error.",
    ),
    (
        32,
        "The process cannot access the file because it is being used by another process.",
    ),
    (31, "A device attached to the system is not functioning."),
    (1167, "The device is not connected."),
];

/// The services a daemon runs, over the machine (shared with the threads of calls that hang).
pub struct Daemon {
    pub disk: DiskService,
    pub volume: VolumeService,
    pub fs: FilesystemService,
}

/// One machine, its daemon, and the run's random source.
pub struct World {
    pub sim: Arc<SimWindows>,
    pub daemon: Arc<Daemon>,
    pub rng: Rng,
    /// When hung calls are let go: its own stream, so runs without hangs draw as before.
    pub hang_rng: Rng,
    /// A call hangs now: no other call is hung until it ended, so hung calls finish one at a
    /// time, alone, and the run stays the same for its seed.
    hanging: Arc<AtomicBool>,
    /// The threads of calls kubelet stopped waiting for, still running in the daemon; each
    /// ends with what it broke, if anything.
    pub hung: Vec<JoinHandle<Option<Violation>>>,
    pub weather: Weather,
    /// The source the chaos hook draws from: its own stream, so the workload's draws do not
    /// shift when a host makes one more call.
    chaos_rng: Arc<Mutex<Rng>>,
    /// Simulated milliseconds the weather added to calls (slow devices): time the daemon
    /// cannot help, left out of its deadline.
    pub late_ms: Arc<AtomicU64>,
    state: tempfile::TempDir,
    pub restarts: u32,
}

impl World {
    pub fn new(seed: u64) -> World {
        let mut rng = Rng::new(seed);
        let mut hang_rng = Rng::new(seed ^ 0x4a46_6a46);
        let weather = Weather {
            fail: rng.below(40),
            late: rng.below(40),
            crash: rng.below(6),
            hang: if hang_rng.chance(400) {
                1 + hang_rng.below(10)
            } else {
                0
            },
        };
        let sim = Arc::new(SimWindows::new());
        sim.set_arrival_delay(Duration::from_millis(rng.below(5000)));
        sim.mkdir(KUBELET);
        let state = tempfile::tempdir().unwrap();
        let daemon = start(&sim, &state);
        let chaos_rng = Arc::new(Mutex::new(Rng::new(rng.next())));
        World {
            sim,
            daemon,
            rng,
            hang_rng,
            hung: Vec::new(),
            hanging: Arc::default(),
            weather,
            chaos_rng,
            late_ms: Arc::default(),
            state,
            restarts: 0,
        }
    }

    /// Lets the weather disturb every seam call (or, with `false`, none).
    pub fn disturb(&self, on: bool) {
        self.sim.set_chaos(on.then(|| {
            weather_hook(
                self.weather,
                &TRANSIENT,
                self.chaos_rng.clone(),
                self.late_ms.clone(),
                self.hanging.clone(),
            )
        }));
    }

    /// Lets every hung call go on, and waits until each has ended: the first thing one broke.
    pub fn join_hung(&mut self) -> Result<(), Violation> {
        self.sim.release_hung();
        let broke: Vec<Violation> = self
            .hung
            .drain(..)
            .filter_map(|t| t.join().expect("a hung call's thread panicked"))
            .collect();
        self.hanging.store(false, Ordering::SeqCst);
        broke.into_iter().next().map_or(Ok(()), Err)
    }

    /// When the daemon was killed: a new one over the same machine and state directory, as
    /// the service manager restarts it. The dead daemon's hung calls die with it.
    pub fn restart_if_dead(&mut self) -> Result<bool, Violation> {
        if !self.sim.is_dead() {
            return Ok(false);
        }
        self.join_hung()?;
        self.sim.revive();
        self.daemon = start(&self.sim, &self.state);
        self.restarts += 1;
        Ok(true)
    }
}

/// The weather over a machine's seam calls, drawn from `rng`: the daemon killed, a failure
/// from `transient`, an answer late (its time added to `late_ms`), or (while no other call
/// hangs, `hanging`) a call hung. Shared by the worlds on the simulated Windows.
pub fn weather_hook(
    w: Weather,
    transient: &'static [(u32, &'static str)],
    rng: Arc<Mutex<Rng>>,
    late_ms: Arc<AtomicU64>,
    hanging: Arc<AtomicBool>,
) -> Box<dyn FnMut(&'static str) -> Disturbance + Send> {
    Box::new(move |_call| {
        let mut r = rng.lock().unwrap();
        if r.chance(w.crash) {
            Disturbance::Crash
        } else if r.chance(w.fail) {
            let (code, message) = transient[r.below(transient.len() as u64) as usize];
            Disturbance::Fail(OsError::with_message(code, message))
        } else if r.chance(w.late) {
            let ms = r.below(20_000);
            late_ms.fetch_add(ms, Ordering::Relaxed);
            Disturbance::Late(Duration::from_millis(ms))
        } else if w.hang > 0 && !hanging.load(Ordering::SeqCst) && r.chance(w.hang) {
            hanging.store(true, Ordering::SeqCst);
            Disturbance::Hang
        } else {
            Disturbance::None
        }
    })
}

fn start(sim: &Arc<SimWindows>, state: &tempfile::TempDir) -> Arc<Daemon> {
    let policy = Arc::new(PathPolicy::new(PathStyle::Windows, KUBELET, &[]).unwrap());
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
        policy.clone(),
    );
    Arc::new(Daemon {
        disk: DiskService::new(Arc::new(WindowsDiskHost::with_os(sim.clone())), policy),
        volume: VolumeService::new(
            Arc::new(WindowsVolumeHost::with_os(sim.clone(), state.path())),
            fs.clone(),
        ),
        fs,
    })
}
