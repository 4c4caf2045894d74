//! Waiting for Windows to surface a disk's volumes: Plug and Play creates them asynchronously
//! after a layout write, after a disk comes online and after a disk is attached, and drivers
//! list the disk's volumes right after PartitionDisk or SetDiskState return and take the first
//! with no length check (aws-ebs, azuredisk, vSphere).

use super::{os, query_extents, volume_device};
use crate::windows::os::Win32;
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::windows_buffers::layout::{self, Layout};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long PartitionDisk and SetDiskState wait for the disk's volumes to appear: the volume
/// manager creates them asynchronously, usually within a second.
pub const VOLUME_ARRIVAL_LIMIT: Duration = Duration::from_secs(30);
/// The pause between two looks.
const VOLUME_ARRIVAL_POLL: Duration = Duration::from_millis(100);

/// Waits until every partition of `layout` that Windows surfaces a volume for
/// ([`layout::volume_offsets`]) has one on `disk` whose GUID path resolves; returns the volumes
/// by partition offset. Bounded by [`VOLUME_ARRIVAL_LIMIT`] (UNAVAILABLE, "call again") and by
/// the caller's deadline (DEADLINE_EXCEEDED): a call whose caller stopped waiting gives its
/// thread back.
pub(super) fn wait_for_volumes(
    os: &dyn Win32,
    op: &str,
    disk: u32,
    layout: &Layout,
) -> Result<BTreeMap<u64, String>> {
    let wanted = layout::volume_offsets(layout);
    wait(os, op, disk, APPEAR, || {
        let found = volumes_on(os, disk);
        let missing = wanted.iter().filter(|o| !found.contains_key(o)).count();
        if missing == 0 {
            Ok(found)
        } else {
            Err(format!("{missing} of the disk's volumes"))
        }
    })
}

/// Waits (as [`wait_for_volumes`]) until partition `number` of `disk` has arrived: its
/// partition device `\\.\HarddiskNPartitionM` opens. After `IOCTL_DISK_CREATE_DISK` made the
/// MSR, "an application should wait for the MSR partition arrival before sending the
/// IOCTL_DISK_SET_DRIVE_LAYOUT_EX control code".
pub(super) fn wait_for_partition(os: &dyn Win32, op: &str, disk: u32, number: u32) -> Result<()> {
    let device = format!(r"\\.\Harddisk{disk}Partition{number}");
    wait(os, op, disk, APPEAR, || {
        os::open_query(os, &device)
            .map(drop)
            .map_err(|_| format!("partition {number}"))
    })
}

/// Waits (as [`wait_for_volumes`]) until no volume of `disk` is surfaced any more: taken
/// offline, a disk's volume devices are removed by Plug and Play as asynchronously as they were
/// created, and a driver that detaches the disk or lists its volumes right after SetDiskState
/// must not find them.
pub(super) fn wait_for_departure(os: &dyn Win32, op: &str, disk: u32) -> Result<()> {
    wait(os, op, disk, GO, || match volumes_on(os, disk).len() {
        0 => Ok(()),
        n => Err(format!("{n} of the disk's volumes")),
    })
}

/// How a wait words what it is waiting for: while waiting, and once the limit passed.
type Wording = (&'static str, &'static str);
const APPEAR: Wording = ("had not appeared", "did not appear");
const GO: Wording = ("were still surfaced", "did not go");

/// Polls `look` until it answers `Ok`, for at most [`VOLUME_ARRIVAL_LIMIT`] and never past the
/// caller's deadline; `Err` names what has not appeared (or gone) yet.
fn wait<T>(
    os: &dyn Win32,
    op: &str,
    disk: u32,
    (during, after): Wording,
    mut look: impl FnMut() -> std::result::Result<T, String>,
) -> Result<T> {
    let until = os.now() + VOLUME_ARRIVAL_LIMIT;
    loop {
        let missing = match look() {
            Ok(found) => return Ok(found),
            Err(what) => what,
        };
        if csi_proxy_core::deadline::current().is_some_and(|d| Instant::now() >= d) {
            return Err(Error::new(
                Kind::DeadlineExceeded,
                op,
                format!("disk {disk}"),
                format!("the caller's deadline passed while {missing} {during}; call again"),
            ));
        }
        if os.now() >= until {
            return Err(Error::new(
                Kind::Unavailable,
                op,
                format!("disk {disk}"),
                format!(
                    "{missing} {after} within {} s; call again",
                    VOLUME_ARRIVAL_LIMIT.as_secs()
                ),
            ));
        }
        os.sleep(VOLUME_ARRIVAL_POLL);
    }
}

/// The volumes with an extent on `disk` whose GUID path resolves, by the extent's starting
/// offset. Volumes that cannot be read are left out: this only decides whether to keep
/// waiting.
fn volumes_on(os: &dyn Win32, disk: u32) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    for volume in os.volumes().unwrap_or_default() {
        let Ok(h) = os::open_query(os, &volume_device(&volume)) else {
            continue;
        };
        let Some(extents) = query_extents(&h).ok().and_then(std::result::Result::ok) else {
            continue;
        };
        for e in extents.iter().filter(|e| e.disk_number == disk) {
            if os.volume_name_for_mount_point(&volume).is_ok() {
                out.insert(e.starting_offset, volume.clone());
            }
        }
    }
    out
}
