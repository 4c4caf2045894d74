//! The third world: csi-driver-smb's Windows node code (with its default
//! `--remove-smb-mapping-during-unmount`) over the SMB and filesystem services on the simulated
//! Windows. The lanes are volumes that are sub-directories of one or two shares, so one node-wide
//! mapping serves several of them. The same drawn steps (Expand aside, which SMB volumes do not
//! have), replayed in the driver's order (read from kubernetes-csi/csi-driver-smb
//! `pkg/smb/nodeserver.go`, `pkg/smb/smb_common_windows.go`, `pkg/mounter/safe_mounter_windows.go`;
//! not copied), under the same kind of weather as the disk world, while the operator takes a
//! server away for a while, the server drops its sessions, and the driver's container restarts
//! (losing its reference counts, kept in the container's own `c:\csi\smbmounts`).
//!
//! After every step, with the weather cleared: no mapping was removed while a link of another
//! volume led through it and answered; every staged volume's staging link leads to its
//! share's sub-directory and every published target to its staging path, and both answer while
//! the server is up. Once every volume is unstaged (server up, weather clear), no mapping and
//! no link is left.
//!
//! Servers never hang here (`set_share_hangs`): the daemon's health probe waits out a dead
//! server in real time (10 s), which a budget of seeds cannot afford.

use super::drivers::Phase;
use super::workload::{Attempt, Stats, Step, Violation, retried};
use super::world::{KUBELET, Rng, Weather, weather_hook};
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::smb::{
    MappingState, NewSmbGlobalMappingRequest, SmbHost, SmbMapping, SmbService, SmbUsers,
};
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::os::Win32;
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::smb::WindowsSmbHost;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Transient failures of SMB and file calls (System Error Codes): the network name gone for a
/// moment, an unexpected network error, the network unreachable, a sharing violation.
const TRANSIENT: [(u32, &str); 4] = [
    (64, "The specified network name is no longer available."),
    (59, "An unexpected network error occurred."),
    (1231, "The network location cannot be reached."),
    (
        32,
        "The process cannot access the file because it is being used by another process.",
    ),
];

/// One volume: a sub-directory of its share.
struct Lane {
    id: String,
    share: usize,
    /// `\\server\share\pvc-N`, as the driver joins source and `subDir`.
    remote: String,
    staging: String,
    target: String,
    phase: Phase,
}

/// One share and the secret its volumes' Kubernetes secret holds.
struct Share {
    root: String,
    user: String,
    password: String,
    /// Steps left until the server answers again; 0 while it is up.
    down_for: u32,
}

/// The SMB host as the daemon's, recording each mapping it removed (the share root).
struct Watched {
    host: WindowsSmbHost,
    removed: Arc<Mutex<Vec<String>>>,
}

impl SmbHost for Watched {
    fn new_smb_global_mapping(&self, m: &SmbMapping) -> csi_proxy_core::Result<()> {
        self.host.new_smb_global_mapping(m)
    }
    fn new_smb_link(
        &self,
        m: &SmbMapping,
        remote: &str,
        local: &str,
    ) -> csi_proxy_core::Result<()> {
        self.host.new_smb_link(m, remote, local)
    }
    fn remove_smb_global_mapping(&self, root: &str) -> csi_proxy_core::Result<()> {
        self.host.remove_smb_global_mapping(root)?;
        self.removed.lock().unwrap().push(root.to_string());
        Ok(())
    }
    fn remove_credential_mapping(&self, m: &SmbMapping) -> csi_proxy_core::Result<()> {
        self.remove_smb_global_mapping(&m.root)
    }
    fn smb_global_mapping(&self, root: &str) -> csi_proxy_core::Result<MappingState> {
        self.host.smb_global_mapping(root)
    }
    fn credential_mapping(&self, m: &SmbMapping) -> csi_proxy_core::Result<Option<MappingState>> {
        self.host.credential_mapping(m)
    }
    fn smb_global_mappings(&self) -> csi_proxy_core::Result<Vec<String>> {
        self.host.smb_global_mappings()
    }
    fn smb_mapping_users(
        &self,
        root: &str,
        scan_roots: &[String],
    ) -> csi_proxy_core::Result<SmbUsers> {
        self.host.smb_mapping_users(root, scan_roots)
    }
}

/// The daemon's services over the machine.
struct Daemon {
    fs: FilesystemService,
    smb: SmbService,
}

fn start(sim: &Arc<SimWindows>, removed: &Arc<Mutex<Vec<String>>>) -> Daemon {
    let policy = Arc::new(PathPolicy::new(PathStyle::Windows, KUBELET, &[]).unwrap());
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
        policy,
    );
    let host = Watched {
        host: WindowsSmbHost::with_os(sim.clone()),
        removed: removed.clone(),
    };
    Daemon {
        smb: SmbService::new(Arc::new(host), fs.clone(), true),
        fs,
    }
}

/// The machine, its daemon, the driver's own state and the weather.
struct SmbWorld {
    sim: Arc<SimWindows>,
    daemon: Daemon,
    removed: Arc<Mutex<Vec<String>>>,
    shares: Vec<Share>,
    lanes: Vec<Lane>,
    /// csi-driver-smb's reference counts: volume IDs per lower-cased share root.
    refs: BTreeMap<String, BTreeSet<String>>,
    /// Calls that failed while their server was away: kubelet keeps retrying them.
    pending: Vec<(usize, Step)>,
    /// How often seam calls fail, answer late, find the daemon killed (none hang here).
    weather: Weather,
    chaos_rng: Arc<Mutex<Rng>>,
    restarts: u32,
}

impl SmbWorld {
    fn new(seed: u64, lanes: usize) -> SmbWorld {
        let mut rng = Rng::new(seed ^ 0x0053_b0a7);
        let weather = Weather {
            fail: rng.below(40),
            late: rng.below(40),
            crash: rng.below(6),
            hang: 0,
        };
        let sim = Arc::new(SimWindows::new());
        sim.mkdir(KUBELET);
        // One share for every volume, or two (each on its own server).
        let count = 1 + rng.below(2) as usize;
        let shares: Vec<Share> = (0..count)
            .map(|s| {
                let root = format!(r"\\fs{s:02}.example\vols");
                let (user, password) = (format!(r"AZURE\svc{s}"), format!("s3cret-{s}"));
                sim.add_share(&root, Some((&user, &password)));
                Share {
                    root,
                    user,
                    password,
                    down_for: 0,
                }
            })
            .collect();
        let lanes = (0..lanes)
            .map(|i| {
                let share = i % count;
                let target_dir =
                    format!(r"{KUBELET}\pods\pod-{i}\volumes\kubernetes.io~csi\pv-{i}");
                // kubelet makes the publish path's parent.
                sim.mkdir(&target_dir);
                Lane {
                    id: format!("pv-{i}"),
                    share,
                    remote: format!(r"{}\pv-{i}", shares[share].root),
                    staging: format!(
                        r"{KUBELET}\plugins\kubernetes.io\csi\smb.csi.k8s.io\{i:02x}\globalmount"
                    ),
                    target: format!(r"{target_dir}\mount"),
                    phase: Phase::Unstaged,
                }
            })
            .collect();
        let removed = Arc::default();
        SmbWorld {
            daemon: start(&sim, &removed),
            sim,
            removed,
            shares,
            lanes,
            refs: BTreeMap::new(),
            pending: Vec::new(),
            weather,
            chaos_rng: Arc::new(Mutex::new(Rng::new(rng.next()))),
            restarts: 0,
        }
    }

    /// Lets the weather disturb every seam call (or, with `false`, none).
    fn disturb(&self, on: bool) {
        self.sim.set_chaos(on.then(|| {
            weather_hook(
                self.weather,
                &TRANSIENT,
                self.chaos_rng.clone(),
                Arc::default(),
                Arc::default(),
            )
        }));
    }

    /// The daemon was killed: a new one over the same machine (its memory of credentials lost).
    fn restart_if_dead(&mut self) -> bool {
        if !self.sim.is_dead() {
            return false;
        }
        self.sim.revive();
        self.daemon = start(&self.sim, &self.removed);
        self.restarts += 1;
        true
    }

    /// Every link under the kubelet directory: lower-cased link path to its target as stored.
    fn links(&self) -> BTreeMap<String, String> {
        self.sim
            .links_below(&[KUBELET.to_string()])
            .0
            .into_iter()
            .map(|(l, t)| (norm(&l), t))
            .collect()
    }

    /// The driver's own `os.Readlink` in its container.
    fn readlink(&self, path: &str) -> Option<String> {
        self.links().get(&norm(path)).cloned()
    }

    /// The driver's own `os.Open(path).ReadDir(1)`, through every link on the way: whether the
    /// volume answers there.
    fn reads(&self, path: &str) -> bool {
        let links = self.links();
        let mut p = path.to_string();
        for _ in 0..8 {
            match links.get(&norm(&p)) {
                Some(t) => p = t.clone(),
                None => break,
            }
        }
        self.sim.entry_exists(&p)
    }

    fn server_up(&self, share: usize) -> bool {
        self.shares[share].down_for == 0
    }
}

/// A path as compared: lower-cased, without a trailing separator.
fn norm(p: &str) -> String {
    p.trim_end_matches('\\').to_ascii_lowercase()
}

/// A run of `steps` in the SMB world of `seed`: the first violation, with the step it followed.
pub fn run(seed: u64, lanes: usize, steps: &[Step], log: bool) -> Result<Stats, Violation> {
    let mut w = SmbWorld::new(seed, lanes);
    // The operator's own source, so the steps and the weather do not shift it.
    let mut operator = Rng::new(seed ^ 0x09e2_a70e);
    let mut stats = Stats::default();
    let tail: Vec<Step> = (0..lanes)
        .flat_map(|l| [Step::Unpublish(l), Step::Unstage(l)])
        .collect();
    for (i, step) in steps.iter().chain(tail.iter()).enumerate() {
        let clear = i >= steps.len();
        let at =
            |v: Violation| Violation(format!("after step {i} ({step:?}) in the SMB world: {v}"));
        if clear {
            for s in 0..w.shares.len() {
                bring_up(&mut w, s);
            }
        } else {
            operate(&mut w, &mut operator, log);
        }
        // kubelet's retries of calls that failed while their server was away: they must
        // converge now it answers.
        let (ready, waiting) = std::mem::take(&mut w.pending)
            .into_iter()
            .partition::<Vec<_>, _>(|&(l, _)| w.server_up(w.lanes[l].share));
        w.pending = waiting;
        for (l, retry) in ready {
            if lane_of(&w, retry) != Some(l) {
                continue;
            }
            if log {
                eprintln!("smb step {i}: kubelet retries {retry:?}");
            }
            perform(&mut w, l, retry, clear, &mut stats, log).map_err(at)?;
        }
        let Some(l) = lane_of(&w, *step) else {
            continue;
        };
        if log {
            eprintln!("smb step {i}: {step:?}");
        }
        perform(&mut w, l, *step, clear, &mut stats, log).map_err(at)?;
        check(&w).map_err(at)?;
        stats.steps += 1;
    }
    let left = w.sim.smb_roots();
    let links = w.links();
    if !left.is_empty() || !links.is_empty() {
        return Err(Violation(format!(
            "left after every volume was unstaged in the SMB world: mappings {left:?}, links {links:?}"
        )));
    }
    stats.restarts += w.restarts;
    Ok(stats)
}

/// The lane a step is for, when kubelet would send it now (Expand has no SMB counterpart).
fn lane_of(w: &SmbWorld, step: Step) -> Option<usize> {
    let (l, wanted) = match step {
        Step::Stage(l) => (l, Phase::Unstaged),
        Step::Publish(l) | Step::Unstage(l) => (l, Phase::Staged),
        Step::Unpublish(l) => (l, Phase::Published),
        Step::Stats(l) => return (w.lanes[l].phase != Phase::Unstaged).then_some(l),
        Step::Expand(_) | Step::RestartWmi | Step::Reattach(_) => return None,
    };
    (w.lanes[l].phase == wanted).then_some(l)
}

fn bring_up(w: &mut SmbWorld, s: usize) {
    if w.shares[s].down_for > 0 {
        w.shares[s].down_for = 0;
        w.sim.set_share_up(&w.shares[s].root, true);
    }
}

/// The operator, before a step: a server that was away comes back when its time is up; now and
/// then one goes away for a few steps, drops its sessions, or the driver's container restarts.
fn operate(w: &mut SmbWorld, r: &mut Rng, log: bool) {
    for s in 0..w.shares.len() {
        if w.shares[s].down_for == 1 {
            bring_up(w, s);
        } else if w.shares[s].down_for > 1 {
            w.shares[s].down_for -= 1;
        }
    }
    let s = r.below(w.shares.len() as u64) as usize;
    let root = w.shares[s].root.clone();
    if r.chance(40) && w.server_up(s) {
        w.shares[s].down_for = 1 + r.below(6) as u32;
        w.sim.set_share_up(&root, false);
        if log {
            eprintln!(
                "smb operator: {root} away for {} steps",
                w.shares[s].down_for
            );
        }
    }
    if r.chance(30) {
        w.sim.drop_smb_sessions(&root);
        if log {
            eprintln!("smb operator: {root} drops its sessions");
        }
    }
    if r.chance(20) {
        w.refs.clear();
        if log {
            eprintln!("smb operator: the driver's container restarts, its counts lost");
        }
    }
}

/// Sends the step's CSI call as kubelet retries it. While the lane's server is away a call
/// may keep failing: it stays pending (the volume where it was), and kubelet's retry once the
/// server answers again must converge.
fn perform(
    w: &mut SmbWorld,
    l: usize,
    step: Step,
    clear: bool,
    stats: &mut Stats,
    log: bool,
) -> Result<(), Violation> {
    let up = w.server_up(w.lanes[l].share);
    let outcome = retried(stats, |n, last| {
        w.disturb(!clear && !last);
        // The links of other volumes that answer now: no mapping under them may go.
        let live = live_links(w, l, step);
        w.removed.lock().unwrap().clear();
        let answer = attempt_once(w, l, step);
        w.disturb(false);
        let removed = std::mem::take(&mut *w.removed.lock().unwrap());
        for root in removed {
            if let Some(link) = live.iter().find(|(r, _)| *r == root) {
                return Err(Violation(format!(
                    "the mapping of {root} was removed while {} led through it and answered",
                    link.1
                )));
            }
        }
        let killed = w.restart_if_dead();
        if log {
            eprintln!("  attempt {n}: {answer:?}, killed: {killed}");
        }
        Ok(Attempt { answer, killed })
    });
    match outcome {
        Err(v) if up || v.0.starts_with("the mapping") => Err(v),
        Err(v) => {
            if log {
                eprintln!("  pending while the server is away: {v}");
            }
            if !w.pending.contains(&(l, step)) {
                w.pending.push((l, step));
            }
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// The links that answer before an attempt of `step` on lane `l`, with their share root: every
/// volume's staging link and published target, but the staging link of the volume being
/// unstaged (the driver removes the mapping before its own link).
fn live_links(w: &SmbWorld, l: usize, step: Step) -> Vec<(String, String)> {
    let answers = |path: &str| w.readlink(path).is_some() && w.reads(path);
    let mut live = Vec::new();
    for (k, lane) in w.lanes.iter().enumerate() {
        let root = norm(&w.shares[lane.share].root);
        if !(k == l && matches!(step, Step::Unstage(_))) && answers(&lane.staging) {
            live.push((root.clone(), lane.staging.clone()));
        }
        if answers(&lane.target) {
            live.push((root, lane.target.clone()));
        }
    }
    live
}

/// One attempt of the step's CSI call, as csi-driver-smb makes it.
fn attempt_once(w: &mut SmbWorld, l: usize, step: Step) -> Result<(), String> {
    let s = |e: csi_proxy_core::Error| e.to_string();
    let (staging, target) = (w.lanes[l].staging.clone(), w.lanes[l].target.clone());
    match step {
        Step::Stage(_) => {
            if !ensure_mount_point(w, &staging)? {
                // prepareStagePath: the directory just made goes again, for the link.
                if w.daemon.fs.path_exists(&staging).map_err(s)? {
                    w.daemon.fs.rmdir(&staging, true).map_err(s)?;
                }
                // SMBMount.
                let parent = staging.rsplit_once('\\').map_or("", |(p, _)| p);
                if !w.daemon.fs.path_exists(parent).map_err(s)? {
                    w.daemon.fs.mkdir(parent).map_err(s)?;
                }
                let share = &w.shares[w.lanes[l].share];
                let req = NewSmbGlobalMappingRequest {
                    remote_path: w.lanes[l].remote.clone(),
                    local_path: staging,
                    username: share.user.clone(),
                    password: share.password.as_str().into(),
                };
                w.daemon.smb.new_smb_global_mapping(&req).map_err(s)?;
                let root = norm(&share.root);
                w.refs
                    .entry(root)
                    .or_default()
                    .insert(w.lanes[l].id.clone());
            }
            w.lanes[l].phase = Phase::Staged;
        }
        Step::Publish(_) => {
            if !ensure_mount_point(w, &target)? {
                // preparePublishPath, then Mount: the link from the target to the staging path.
                if w.daemon.fs.path_exists(&target).map_err(s)? {
                    w.daemon.fs.rmdir(&target, true).map_err(s)?;
                }
                w.daemon.fs.create_symlink(&staging, &target).map_err(s)?;
            }
            w.lanes[l].phase = Phase::Published;
        }
        Step::Unpublish(_) => {
            w.daemon.fs.rmdir(&target, true).map_err(s)?;
            w.lanes[l].phase = Phase::Staged;
        }
        Step::Unstage(_) => {
            // SMBUnmount: the remote path read from the staging link; the count of the share's
            // volumes drops by this one, and at zero the mapping is removed, before the link.
            if let Some(remote) = w.readlink(&staging) {
                let remote = remote.trim_end_matches('\\').to_string();
                let root = root_of(&remote);
                // The driver's decrement fails when this volume's count file is gone already
                // (an earlier attempt took it): a bug of the driver's own, which would fail
                // every retry whatever the daemon does; replayed as the conformance replay
                // does, as if the file were removed once the unstage succeeded.
                let refs = w.refs.entry(root).or_default();
                refs.remove(&w.lanes[l].id);
                if refs.is_empty() {
                    w.daemon.smb.remove_smb_global_mapping(&remote).map_err(s)?;
                }
            }
            w.daemon.fs.rmdir(&staging, true).map_err(s)?;
            w.lanes[l].phase = Phase::Unstaged;
        }
        Step::Stats(_) => {
            // NodeGetVolumeStats is the driver's own (os.Lstat and a statfs in its container):
            // nothing reaches the daemon.
        }
        Step::Expand(_) | Step::RestartWmi | Step::Reattach(_) => {}
    }
    Ok(())
}

/// csi-driver-smb's `getRootMappingPath`: the lower-cased `\\server\share`.
fn root_of(remote: &str) -> String {
    let parts: Vec<&str> = remote.split('\\').filter(|p| !p.is_empty()).collect();
    norm(&format!(r"\\{}\{}", parts[0], parts.get(1).unwrap_or(&"")))
}

/// The driver's `ensureMountPoint` on Windows: `Ok(true)` when `path` is a link it reads
/// through (already there). A link it cannot read through, which IsSymlink answers true for or
/// fails on, is removed (its `Unmount`, an Rmdir) and the call fails, for kubelet to retry. Else
/// the driver makes the directory itself (`os.MkdirAll`), which fails on a dead link that
/// IsSymlink called no link.
fn ensure_mount_point(w: &SmbWorld, path: &str) -> Result<bool, String> {
    let s = |e: csi_proxy_core::Error| e.to_string();
    let d = &w.daemon;
    if d.fs.path_exists(path).map_err(s)? {
        let link = match d.fs.is_symlink(path) {
            Ok(link) => link,
            Err(_) if !w.reads(path) => true,
            Err(e) => return Err(e.to_string()),
        };
        if link {
            if w.reads(path) {
                return Ok(true);
            }
            d.fs.rmdir(path, true).map_err(s)?;
            return Err(format!("ReadDir {path} failed; the link was removed"));
        }
        if !w.reads(path) && w.readlink(path).is_some() {
            return Err(format!(
                "MkdirAll {path}: IsSymlink answered false for a dead link"
            ));
        }
    }
    w.sim.mkdir(path);
    Ok(false)
}

/// The invariants, with the weather cleared: every staged volume's staging link leads to its
/// share's sub-directory and every published target to its staging path, both answering
/// while the server is up (so their mapping is there).
fn check(w: &SmbWorld) -> Result<(), Violation> {
    let bad = |s: String| Err(Violation(s));
    for lane in &w.lanes {
        if lane.phase == Phase::Unstaged {
            continue;
        }
        let up = w.server_up(lane.share);
        match w.readlink(&lane.staging) {
            Some(t) if norm(&t) == norm(&lane.remote) => {}
            t => {
                return bad(format!(
                    "{}'s staging path {} leads to {t:?}, not {}",
                    lane.id, lane.staging, lane.remote
                ));
            }
        }
        if up && !w.reads(&lane.staging) {
            return bad(format!(
                "{}'s staging path {} does not answer with its server up (mappings: {:?})",
                lane.id,
                lane.staging,
                w.sim.smb_roots()
            ));
        }
        if lane.phase == Phase::Published {
            match w.readlink(&lane.target) {
                Some(t) if norm(&t) == norm(&lane.staging) => {}
                t => {
                    return bad(format!(
                        "{}'s target {} leads to {t:?}, not its staging path",
                        lane.id, lane.target
                    ));
                }
            }
            if up && !w.reads(&lane.target) {
                return bad(format!(
                    "{}'s target {} does not answer with its server up",
                    lane.id, lane.target
                ));
            }
        }
    }
    Ok(())
}
