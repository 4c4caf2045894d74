//! What each driver sends for a step, in its own order (the replays in
//! `tests/common/*_driver.rs`): aws-ebs, gce-pd and azuredisk, over the daemon's services on the
//! simulated Windows; and what every OK answer must have done on the machine (a call that
//! answered OK without doing it is a violation, not an answer kubelet retries).

use super::workload::Step;
use super::world::Daemon;
use csi_proxy_host::windows::sim::SimWindows;

/// Whose node code a lane plays (the replays in `tests/common/*_driver.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// Finds its disk by serial; stages online, unstages by UnmountVolume, Rmdir and offline.
    AwsEbs,
    /// As aws-ebs, and grows the filesystem to its disk at every stage.
    GcePd,
    /// Finds its disk by LUN; never sets it online or offline; unstages by a flush and Rmdir
    /// of the mount point, without UnmountVolume.
    AzureDisk,
}

/// Where a driver's volume is, as kubelet knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Unstaged,
    Staged,
    Published,
}

/// One driver and its disk.
#[derive(Debug, Clone)]
pub struct Lane {
    pub driver: Driver,
    pub disk: u32,
    pub lun: u8,
    pub size: u64,
    pub phase: Phase,
    pub volume: Option<String>,
    /// The filesystem's serial number once the volume was first staged: never to change.
    pub serial: Option<u32>,
    pub staging: String,
    pub target: String,
}

/// Why an attempt did not go through: the daemon's answer (kubelet retries), or a call that
/// answered OK without having done what it answered (a violation).
#[derive(Debug)]
pub enum Failure {
    Answer(String),
    Broken(String),
}

impl From<csi_proxy_core::Error> for Failure {
    fn from(e: csi_proxy_core::Error) -> Failure {
        Failure::Answer(e.to_string())
    }
}

/// A call's postcondition: what it answered OK for is true on the machine right after.
fn holds(ok: bool, what: impl FnOnce() -> String) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(Failure::Broken(what()))
    }
}

pub fn mounted_at(sim: &SimWindows, path: &str) -> Option<String> {
    sim.mount_points()
        .into_iter()
        .find(|(at, _)| same_path(at, path))
        .map(|(_, v)| v)
}

/// Whether `volume` is what is mounted at `path`.
pub fn mounted_there(sim: &SimWindows, path: &str, volume: &str) -> bool {
    mounted_at(sim, path).is_some_and(|m| same_path(&m, volume))
}

pub fn same_path(a: &str, b: &str) -> bool {
    a.trim_end_matches('\\')
        .eq_ignore_ascii_case(b.trim_end_matches('\\'))
}

/// One attempt of the step's CSI calls, in the order the lane's driver sends them (the
/// replays in `tests/common/*_driver.rs`), each OK answer checked against the machine.
pub fn attempt_once(
    d: &Daemon,
    sim: &SimWindows,
    lane: &mut Lane,
    step: Step,
) -> Result<(), Failure> {
    let answer = |e: String| Failure::Answer(e);
    match step {
        Step::Stage(_) => {
            let n = lane.disk;
            // azuredisk finds its disk by LUN; aws-ebs and gce-pd by its identifiers.
            let found = if lane.driver == Driver::AzureDisk {
                d.disk
                    .list_disk_locations()?
                    .get(&n)
                    .is_some_and(|at| at.lun_id == lane.lun.to_string())
            } else {
                d.disk.list_disk_ids()?.contains_key(&n)
            };
            if !found {
                return Err(answer(format!("disk {n} is not listed")));
            }
            d.disk.partition_disk(n)?;
            holds(!sim.partitions(n).is_empty(), || {
                format!("PartitionDisk({n}) answered OK but the disk has no partition")
            })?;
            if lane.driver != Driver::AzureDisk {
                d.disk.set_disk_state(n, true)?;
                holds(sim.disk_attributes(n).is_some_and(|(off, _)| !off), || {
                    format!("SetDiskState({n}, online) answered OK but the disk is offline")
                })?;
            }
            // The driver takes the first ID without a length check: an empty list panics it.
            let v = d
                .volume
                .list_volumes_on_disk(n, 0)?
                .first()
                .cloned()
                .ok_or_else(|| answer("no volume listed (the driver panics)".into()))?;
            // Everything after acts on this volume (a format): it must be on the driver's disk.
            holds(sim.volume_disk(&v) == Some(n), || {
                format!("ListVolumesOnDisk({n}) answered {v}, which is not on disk {n}")
            })?;
            if !d.fs.path_exists(&lane.staging)? {
                d.fs.mkdir(&lane.staging)?;
            }
            if !d.volume.is_volume_formatted(&v)? {
                d.volume.format_volume(&v)?;
                holds(sim.filesystem_of(&v).is_some(), || {
                    format!("FormatVolume({v}) answered OK but the volume has no filesystem")
                })?;
            }
            d.volume.mount_volume(&v, &lane.staging)?;
            holds(mounted_there(sim, &lane.staging, &v), || {
                format!(
                    "MountVolume({v}, {}) answered OK but it is not mounted there",
                    lane.staging
                )
            })?;
            // gce-pd grows the filesystem to its disk at every stage.
            if lane.driver == Driver::GcePd {
                d.volume.resize_volume(&v, 0)?;
            }
            if lane.serial.is_none() {
                lane.serial = sim.filesystem_serial(&v);
            }
            lane.volume = Some(v);
            lane.phase = Phase::Staged;
        }
        Step::Publish(_) => {
            if !d.fs.path_exists(&lane.target)? {
                let parent = lane.target.rsplit_once('\\').map_or("", |(p, _)| p);
                d.fs.mkdir(parent)?;
                d.fs.create_symlink(&lane.staging, &lane.target)?;
                holds(sim.entry_exists(&lane.target), || {
                    format!("CreateSymlink answered OK but {} is not there", lane.target)
                })?;
            }
            lane.phase = Phase::Published;
        }
        Step::Unpublish(_) => {
            if d.fs.path_exists(&lane.target)? {
                d.fs.rmdir(&lane.target, true)?;
                holds(!sim.entry_exists(&lane.target), || {
                    format!("Rmdir answered OK but {} is still there", lane.target)
                })?;
            }
            lane.phase = Phase::Staged;
        }
        Step::Unstage(_) => {
            let v = lane
                .volume
                .clone()
                .ok_or_else(|| answer("staged without a volume".into()))?;
            if lane.driver == Driver::AzureDisk {
                // azuredisk flushes (its error only logged) and removes the mount point.
                let _ = d.volume.write_volume_cache(&v);
                if d.fs.path_exists(&lane.staging)? {
                    d.fs.rmdir(&lane.staging, true)?;
                    holds(mounted_at(sim, &lane.staging).is_none(), || {
                        format!(
                            "Rmdir of the mount point {} answered OK but it is still mounted",
                            lane.staging
                        )
                    })?;
                }
            } else if d.fs.path_exists(&lane.staging)? {
                // Gone already: an earlier attempt got past Rmdir, nothing is mounted.
                if lane.driver == Driver::AwsEbs {
                    d.volume.write_volume_cache(&v)?;
                }
                d.volume.unmount_volume(&v, &lane.staging)?;
                holds(mounted_at(sim, &lane.staging).is_none(), || {
                    format!(
                        "UnmountVolume({v}) answered OK but {} is still mounted",
                        lane.staging
                    )
                })?;
                d.fs.rmdir(&lane.staging, true)?;
                let n = d.volume.get_disk_number_from_volume_id(&v)?;
                holds(n == lane.disk, || {
                    format!(
                        "GetDiskNumberFromVolumeID({v}) answered {n}, not {}",
                        lane.disk
                    )
                })?;
                d.disk.set_disk_state(n, false)?;
                holds(sim.disk_attributes(n).is_some_and(|(off, _)| off), || {
                    format!("SetDiskState({n}, offline) answered OK but the disk is online")
                })?;
            }
            lane.phase = Phase::Unstaged;
        }
        Step::Expand(_) => {
            let v = lane
                .volume
                .as_deref()
                .ok_or_else(|| answer("staged without a volume".into()))?;
            d.disk.rescan()?;
            d.volume.resize_volume(v, 0)?;
            let (_, fs_size) = sim
                .filesystem_of(v)
                .ok_or_else(|| answer("the volume has no filesystem".into()))?;
            // Grown to the disk's end, less the GPT, the reserved partition and alignment.
            holds(fs_size + 256 * (1 << 20) >= lane.size, || {
                format!(
                    "ResizeVolume answered OK but the filesystem has {fs_size} of {} bytes",
                    lane.size
                )
            })?;
        }
        Step::Stats(_) => {
            let v = lane
                .volume
                .as_deref()
                .ok_or_else(|| answer("staged without a volume".into()))?;
            let st = d.volume.get_volume_stats(v)?;
            holds(
                st.total_bytes != 0 && st.used_bytes <= st.total_bytes,
                || format!("impossible stats {st:?}"),
            )?;
        }
        Step::RestartWmi | Step::Reattach(_) => {}
    }
    Ok(())
}
