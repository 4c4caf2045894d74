//! The second world: the Linux disk and volume hosts over the fake Linux (sparse disks with a
//! sysfs view, a mount table, filesystem tools that write real superblocks). The same drawn
//! steps; the weather here kills the daemon in the middle of a tool (mkfs, resize2fs, e2fsck,
//! sfdisk-free table writes are the host's own), after the tool did part of its work, which
//! the simulated Windows cannot model: Windows' own service finishes a format it started.
//! Publishing is the driver's own bind mount on Linux, so Publish and Unpublish are no-ops.

use super::workload::{Attempt, Stats, Step, Violation, retried};
use super::world::Rng;
use csi_proxy_core::disk::DiskHost;
use csi_proxy_core::volume::{ResizeTarget, VolumeHost};
use csi_proxy_host::linux::disk::LinuxDiskHost;
use csi_proxy_host::linux::fake::FakeLinux;
use csi_proxy_host::linux::volume::{FsType, LinuxVolumeHost};
use std::sync::Arc;

const GIB: u64 = 1 << 30;
/// The tools a kill can land in.
const TOOLS: [&str; 3] = ["mkfs.ext4", "mkfs.xfs", "resize2fs"];

struct Lane {
    name: String,
    disk: u32,
    size: u64,
    staged: bool,
    volume: Option<String>,
    /// mkfs runs on the volume's device once it was first staged: never more.
    mkfs_at_stage: Option<usize>,
    target: String,
}

struct Daemon {
    disks: LinuxDiskHost,
    volumes: LinuxVolumeHost,
}

fn start(fake: &Arc<FakeLinux>, state: &tempfile::TempDir, fs: FsType) -> Daemon {
    Daemon {
        disks: LinuxDiskHost::with_os(fake.clone()),
        volumes: LinuxVolumeHost::with_os(fake.clone(), state.path(), fs),
    }
}

/// A run of `steps` over the fake Linux for `seed`: the first violation, with its step.
pub fn run(seed: u64, lanes: usize, steps: &[Step], log: bool) -> Result<Stats, Violation> {
    let mut rng = Rng::new(seed ^ 0x11_4e_7a);
    let fs = if rng.chance(500) {
        FsType::Ext4
    } else {
        FsType::Xfs
    };
    let kill_per_mille = rng.below(300);
    let fake = FakeLinux::new();
    let state = tempfile::tempdir().unwrap();
    let mut daemon = start(&fake, &state, fs);
    let mut lanes: Vec<Lane> = (0..lanes)
        .map(|i| {
            let name = format!("sd{}", (b'b' + i as u8) as char);
            let size = (1 + rng.below(8)) * GIB;
            let target = format!("/csi-fake-root/plugins/driver/{i}/globalmount");
            fake.add_dir(&target);
            Lane {
                disk: fake.add_disk(&name, size),
                name,
                size,
                staged: false,
                volume: None,
                mkfs_at_stage: None,
                target,
            }
        })
        .collect();
    // Driver 0's disk is attached a second time (two SCSI paths without multipath): the
    // drivers never name that disk, and its facts must show the first path's use.
    let second_path = fake.add_disk_path(&lanes[0].name, "sdz");
    let mut stats = Stats::default();
    let tail: Vec<Step> = (0..lanes.len()).map(Step::Unstage).collect();
    for (i, step) in steps.iter().chain(tail.iter()).enumerate() {
        let clear = i >= steps.len();
        let at = |v: String| Violation(format!("after step {i} ({step:?}) on the fake Linux: {v}"));
        let l = match *step {
            Step::Stage(l) if !lanes[l].staged => l,
            Step::Unstage(l) | Step::Expand(l) | Step::Stats(l) if lanes[l].staged => l,
            _ => continue,
        };
        if let Step::Expand(_) = step {
            lanes[l].size += GIB;
            fake.resize_disk(&lanes[l].name, lanes[l].size);
        }
        let mut restarts = 0;
        retried(&mut stats, |n, last_try| {
            if !clear && !last_try && rng.chance(kill_per_mille) {
                // The daemon dies inside the next run of this tool, its work half done.
                fake.interrupt(TOOLS[rng.below(TOOLS.len() as u64) as usize]);
            }
            let answer = attempt_once(&daemon, &fake, &mut lanes[l], *step);
            // A kill that did not land (the tool did not run) must not carry over.
            let killed = fake.take_interrupts();
            if killed {
                daemon = start(&fake, &state, fs);
                restarts += 1;
            }
            if log {
                eprintln!("linux step {i} {step:?} attempt {n}: {answer:?}, killed: {killed}");
            }
            Ok(Attempt { answer, killed })
        })
        .map_err(|v| at(v.0))?;
        stats.restarts += restarts;
        check(&fake, &mut lanes).map_err(at)?;
        second_path_in_use(&daemon, &lanes[0], second_path).map_err(at)?;
        stats.steps += 1;
    }
    let left: Vec<String> = fake
        .mount_points()
        .into_iter()
        .filter(|m| m.starts_with("/csi-fake-root/"))
        .collect();
    if !left.is_empty() {
        return Err(Violation(format!(
            "mounts left after every volume was unstaged: {left:?}"
        )));
    }
    Ok(stats)
}

/// While driver 0's volume is staged, the second path to its disk is in use through the
/// first: every guarded RPC on it would be refused, naming the first path.
fn second_path_in_use(d: &Daemon, lane: &Lane, second: u32) -> Result<(), String> {
    use csi_proxy_core::disk::{OwnUse, refuse_in_use};
    let usage = d.disks.disk_usage(second).map_err(|e| e.to_string())?;
    let refused = refuse_in_use("PartitionDisk", "the second path", &usage, OwnUse::Nothing);
    let named = format!("another path, as disk {} ({})", lane.disk, lane.name);
    match (lane.staged, refused) {
        (false, _) => Ok(()),
        (true, Err(e)) if e.message().contains(&named) => Ok(()),
        (true, r) => Err(format!(
            "the second path (disk {second}) to staged disk {} is not refused naming it: {r:?} \
             ({usage:?})",
            lane.disk
        )),
    }
}

fn attempt_once(d: &Daemon, fake: &FakeLinux, lane: &mut Lane, step: Step) -> Result<(), String> {
    let s = |e: csi_proxy_core::Error| e.to_string();
    match step {
        Step::Stage(_) => {
            d.disks.partition_disk(lane.disk).map_err(s)?;
            let vols = d.volumes.list_volumes_on_disk(lane.disk, None).map_err(s)?;
            let v = vols
                .first()
                .ok_or("no volume listed (the driver panics)")?
                .clone();
            if !d.volumes.is_volume_formatted(&v).map_err(s)? {
                d.volumes.format_volume(&v).map_err(s)?;
            }
            d.volumes.mount_volume(&v, &lane.target).map_err(s)?;
            lane.volume = Some(v);
            lane.staged = true;
            if lane.mkfs_at_stage.is_none() {
                lane.mkfs_at_stage = Some(mkfs_runs(fake, &lane.name));
            }
        }
        Step::Unstage(_) => {
            let v = lane.volume.clone().ok_or("staged without a volume")?;
            d.volumes.unmount_volume(&v, &lane.target).map_err(s)?;
            lane.staged = false;
        }
        Step::Expand(_) => {
            let v = lane.volume.clone().ok_or("staged without a volume")?;
            d.disks.rescan().map_err(s)?;
            d.volumes
                .resize_volume(&v, ResizeTarget::Maximum)
                .map_err(s)?;
            let total = d.volumes.get_volume_stats(&v).map_err(s)?.total_bytes;
            // The filesystem fills the grown disk, less the GPT, alignment and its own log.
            if total + 512 * (1 << 20) < lane.size {
                return Err(format!(
                    "ResizeVolume answered OK but the filesystem has {total} of {} bytes",
                    lane.size
                ));
            }
        }
        Step::Stats(_) => {
            let v = lane.volume.clone().ok_or("staged without a volume")?;
            let st = d.volumes.get_volume_stats(&v).map_err(s)?;
            if st.total_bytes == 0 || st.used_bytes > st.total_bytes {
                return Err(format!("impossible stats {st:?}"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// How many mkfs runs the fake saw on `disk`'s devices.
fn mkfs_runs(fake: &FakeLinux, disk: &str) -> usize {
    fake.calls()
        .iter()
        .filter(|c| c.starts_with("run mkfs.") && c.contains(&format!("/dev/{disk}")))
        .count()
}

fn check(fake: &FakeLinux, lanes: &mut [Lane]) -> Result<(), String> {
    let mounts = fake.mount_points();
    for lane in lanes.iter() {
        if let Some(at_stage) = lane.mkfs_at_stage
            && mkfs_runs(fake, &lane.name) != at_stage
        {
            return Err(format!(
                "{}'s volume was formatted again after it was staged",
                lane.name
            ));
        }
        if lane.staged && !mounts.contains(&lane.target) {
            return Err(format!(
                "{}'s volume is not mounted at {} (mounts: {mounts:?})",
                lane.name, lane.target
            ));
        }
    }
    Ok(())
}
