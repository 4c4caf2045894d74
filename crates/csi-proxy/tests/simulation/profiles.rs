//! The profiles world: one simulated Windows, each driver (lane) under its own profile
//! `lane<i>.csi`, with its own disk. In an order drawn from the seed, a driver stages,
//! unstages or expands its own volume, or tries one of the cross-driver actions on another
//! driver's staged volume (its staging path removed, unmounted or linked from; its volume
//! formatted, resized or mounted elsewhere; its disk partitioned or taken offline). The
//! invariant after every step: a cross-driver action is PERMISSION_DENIED naming both
//! profiles, and no call of one profile touched another's objects (every staged volume still
//! mounted at its staging path, never formatted again, its disk online). No weather: the rules,
//! not the retries, are under test here.

use super::workload::Violation;
use super::world::{KUBELET, Rng};
use crate::sim_services::{sim_scopes, sim_services};
use csi_proxy_core::Error;
use csi_proxy_core::error::Kind;
use csi_proxy_core::profiles::{Group, Profile};
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_server::registry::Services;
use std::sync::Arc;
use std::time::Duration;

const GIB: u64 = 1 << 30;

fn name(i: usize) -> String {
    format!("lane{i}.csi")
}

/// In driver `i`'s plugin directory.
fn plugin(i: usize, rel: &str) -> String {
    format!(r"{KUBELET}\plugins\kubernetes.io\csi\{}\{rel}", name(i))
}

struct Lane {
    disk: u32,
    /// Its services, scoped to its profile.
    s: Services,
    /// The staged volume, its staging path and its filesystem's serial.
    staged: Option<(String, String, Option<u32>)>,
    /// Stagings made so far (each at a new path).
    generation: u32,
}

/// What a call answered, as a violation when it failed.
fn ok(what: &str, r: Result<(), Error>) -> Result<(), Violation> {
    r.map_err(|e| Violation(format!("{what} failed: {e}")))
}

/// A run of `steps` steps for `lanes` drivers in the world of `seed`: how many cross-driver
/// actions were tried (and refused). `scoped`: each driver's services under its profile
/// (false: every driver with all rights, the model without profiles, which must fail).
pub fn run(seed: u64, lanes: usize, steps: usize, scoped: bool) -> Result<u32, Violation> {
    let mut rng = Rng::new(seed ^ 0x9f0f_11e5);
    let sim = Arc::new(SimWindows::new());
    sim.set_arrival_delay(Duration::from_millis(rng.below(3000)));
    sim.mkdir(&format!(r"{KUBELET}\plugins\kubernetes.io\csi"));
    let state = tempfile::tempdir().unwrap();
    let all = sim_services(&sim, KUBELET, state.path());
    let scopes = sim_scopes(
        &all,
        KUBELET,
        (0..lanes)
            .map(|i| Profile {
                driver: name(i),
                groups: Group::ALL.to_vec(),
                paths: vec![],
            })
            .collect(),
    );
    let mut lanes: Vec<Lane> = (0..lanes)
        .map(|i| Lane {
            disk: sim.add_disk((4 + rng.below(8)) * GIB, i as u8 + 1),
            s: if scoped {
                all.scoped(scopes[i].clone())
            } else {
                all.clone()
            },
            staged: None,
            generation: 0,
        })
        .collect();
    let mut refused = 0;
    for n in 0..steps {
        let at = |v: Violation| Violation(format!("seed {seed}, step {n}: {v}"));
        let i = rng.below(lanes.len() as u64) as usize;
        let others: Vec<usize> = (0..lanes.len())
            .filter(|&j| j != i && lanes[j].staged.is_some())
            .collect();
        if !others.is_empty() && rng.chance(500) {
            let j = others[rng.below(others.len() as u64) as usize];
            cross(&mut lanes, i, j, rng.below(8)).map_err(at)?;
            refused += 1;
        } else {
            own(&sim, &mut lanes[i], i, rng.below(3)).map_err(at)?;
        }
        check(&sim, &lanes, &all).map_err(at)?;
    }
    Ok(refused)
}

/// Driver `i`'s own step: stage when unstaged; else unstage or expand.
fn own(sim: &SimWindows, lane: &mut Lane, i: usize, pick: u64) -> Result<(), Violation> {
    let s = &lane.s;
    match lane.staged.clone() {
        None => {
            lane.generation += 1;
            let staging = plugin(i, &format!(r"{:02x}\globalmount", lane.generation));
            ok("SetDiskState", s.disk.set_disk_state(lane.disk, true))?;
            ok("PartitionDisk", s.disk.partition_disk(lane.disk))?;
            let id = s
                .volume
                .list_volumes_on_disk(lane.disk, 0)
                .map_err(|e| Violation(format!("ListVolumesOnDisk failed: {e}")))?
                .into_iter()
                .next()
                .ok_or_else(|| Violation("no volume after PartitionDisk".into()))?;
            if !s.volume.is_volume_formatted(&id).unwrap_or(false) {
                ok("FormatVolume", s.volume.format_volume(&id))?;
            }
            ok("Mkdir", s.filesystem.mkdir(&staging))?;
            ok("MountVolume", s.volume.mount_volume(&id, &staging))?;
            let serial = sim.filesystem_serial(&id);
            lane.staged = Some((id, staging, serial));
        }
        Some((id, staging, _)) if pick == 0 => {
            ok("UnmountVolume", s.volume.unmount_volume(&id, &staging))?;
            ok("Rmdir", s.filesystem.rmdir(&staging, true))?;
            ok("SetDiskState", s.disk.set_disk_state(lane.disk, false))?;
            lane.staged = None;
        }
        Some((id, _, _)) => ok("ResizeVolume", s.volume.resize_volume(&id, 0))?,
    }
    Ok(())
}

/// Driver `i` tries action `pick` on driver `j`'s staged volume: refused, naming both.
fn cross(lanes: &mut [Lane], i: usize, j: usize, pick: u64) -> Result<(), Violation> {
    let (id, staging, _) = lanes[j].staged.clone().expect("staged");
    let disk = lanes[j].disk;
    let s = &lanes[i].s;
    let mine = plugin(i, r"x\mnt");
    ok("Mkdir of its own directory", s.filesystem.mkdir(&mine))?;
    let (what, r) = match pick {
        0 => (
            "Rmdir of the staging path",
            s.filesystem.rmdir(&staging, true),
        ),
        1 => (
            "UnmountVolume at the staging path",
            s.volume.unmount_volume(&id, &staging),
        ),
        2 => ("FormatVolume", s.volume.format_volume(&id)),
        3 => ("ResizeVolume", s.volume.resize_volume(&id, 0)),
        4 => (
            "MountVolume into its own directory",
            s.volume.mount_volume(&id, &mine),
        ),
        5 => ("PartitionDisk", s.disk.partition_disk(disk)),
        6 => ("SetDiskState(offline)", s.disk.set_disk_state(disk, false)),
        _ => (
            "CreateSymlink from the staging path",
            s.filesystem.create_symlink(&staging, &plugin(i, r"x\link")),
        ),
    };
    let (me, owner) = (name(i), name(j));
    let e = match r {
        Ok(()) => {
            return Err(Violation(format!(
                "{me}'s {what} of {owner}'s volume {id} went through"
            )));
        }
        Err(e) => e,
    };
    let text = e.to_string();
    if e.kind() != Kind::PermissionDenied
        || !text.contains(&format!("{me:?}"))
        || !text.contains(&format!("{owner:?}"))
    {
        return Err(Violation(format!(
            "{me}'s {what} of {owner}'s volume {id}: not PERMISSION_DENIED naming both \
             profiles: {:?}: {text}",
            e.kind()
        )));
    }
    Ok(())
}

/// No profile's call touched another's objects: every staged volume still mounted at its
/// staging path, formatted once, its disk online.
fn check(sim: &SimWindows, lanes: &[Lane], all: &Services) -> Result<(), Violation> {
    for (i, lane) in lanes.iter().enumerate() {
        let Some((id, staging, serial)) = &lane.staged else {
            continue;
        };
        let mounted = sim.mount_points().into_iter().any(|(m, v)| {
            m.trim_end_matches('\\')
                .eq_ignore_ascii_case(staging.trim_end_matches('\\'))
                && v == *id
        });
        if !mounted {
            return Err(Violation(format!(
                "{}'s volume {id} is not mounted at its staging path {staging}: {:?}",
                name(i),
                sim.mount_points()
            )));
        }
        let now = sim.filesystem_serial(id);
        if serial.is_some() && now != *serial {
            return Err(Violation(format!(
                "{}'s volume {id} was formatted again",
                name(i)
            )));
        }
        if !all.disk.get_disk_state(lane.disk).unwrap_or(false) {
            return Err(Violation(format!(
                "{}'s disk {} was taken offline",
                name(i),
                lane.disk
            )));
        }
    }
    Ok(())
}
