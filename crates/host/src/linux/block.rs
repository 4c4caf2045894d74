//! Block devices as the kernel describes them in sysfs, and the few ioctls the disk and volume
//! hosts need. No udev: everything comes from `/sys` and the device nodes devtmpfs creates.
//!
//! A disk's number is its `diskseq` (`/sys/block/<name>/diskseq`, Linux 5.15+): unique per boot
//! and never reused, so a number a driver holds can never name a disk attached later.

use super::os::{self, Blkpg, Fd, Open, Os};
use csi_proxy_core::disk::{DiskUsage, OtherPath, storage_group};
use csi_proxy_core::error::io_kind;
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::disk_layout::Extent;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod ids;
mod partitions;
mod storage;
mod usage;

pub use ids::*;
pub use partitions::*;
pub use storage::storage_of;
pub use usage::*;

/// Where sysfs and the device nodes are.
const SYS_BLOCK: &str = "/sys/block";
const SYS_DEV_BLOCK: &str = "/sys/dev/block";
const DEV: &str = "/dev";

/// One whole-disk block device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Kernel name (`sda`, `vdb`, `loop3`, `nvme0n1`).
    pub name: String,
    /// The disk number the API uses: the kernel's `diskseq`.
    pub number: u32,
    /// Size in bytes.
    pub size: u64,
}

/// One partition of a disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Kernel name (`sda1`, `loop3p1`).
    pub name: String,
    /// Partition number (1-based).
    pub number: u32,
    /// Size in bytes.
    pub size: u64,
    /// Where it starts on the disk, in bytes.
    pub start: u64,
}

/// `dev_t` of a sysfs block entry, from its `dev` file (`major:minor`).
pub fn dev_numbers(os: &Os, sys_entry: &Path) -> io::Result<(u32, u32)> {
    let s = os::read_text(&**os, &sys_entry.join("dev"))?;
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, s.clone()))?;
    let num = |x: &str| {
        x.parse::<u32>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, s.clone()))
    };
    Ok((num(a)?, num(b)?))
}

/// The device node of a kernel block device name.
pub fn node(name: &str) -> PathBuf {
    Path::new(DEV).join(name)
}

/// The sysfs directory of a disk.
pub fn sys_disk(name: &str) -> PathBuf {
    Path::new(SYS_BLOCK).join(name)
}

/// Every disk with media (size > 0) and a `diskseq`, ordered by number. Detached loop devices
/// (size 0) are not disks.
pub fn disks(os: &Os) -> Result<Vec<Disk>> {
    let mut out: Vec<Disk> = block_names(os)?
        .iter()
        .filter_map(|n| disk_named(os, n))
        .collect();
    out.sort_by_key(|d| d.number);
    Ok(out)
}

/// The kernel names of the block devices.
fn block_names(os: &Os) -> Result<Vec<String>> {
    os.list_dir(Path::new(SYS_BLOCK))
        .map_err(|e| Error::io("list disks", SYS_BLOCK, &e))
}

fn disk_named(os: &Os, name: &str) -> Option<Disk> {
    let dir = sys_disk(name);
    let size = os::read_u64(&**os, &dir.join("size")).ok()? * 512;
    if size == 0 {
        return None;
    }
    let number = u32::try_from(os::read_u64(&**os, &dir.join("diskseq")).ok()?).ok()?;
    Some(Disk {
        name: name.to_string(),
        number,
        size,
    })
}

/// The disk with this number; NotFound naming it otherwise. Only each disk's diskseq is read
/// to find it, and only its own other attributes.
pub fn find_disk(os: &Os, op: &str, number: u32) -> Result<Disk> {
    let names = block_names(os)?;
    let seq = |name: &str| os::read_u64(&**os, &sys_disk(name).join("diskseq")).ok();
    names
        .iter()
        .find(|name| seq(name) == Some(u64::from(number)))
        .and_then(|name| disk_named(os, name))
        .ok_or_else(|| {
            Error::new(
                Kind::NotFound,
                op,
                format!("disk {number}"),
                "no block device has this number (diskseq); was it detached?",
            )
        })
}

/// [`find_disk`] on this machine.
pub fn disk(op: &str, number: u32) -> Result<Disk> {
    find_disk(&os::system(), op, number)
}

/// Opens the device node `name` of `disk` as `how` and checks that it is the device sysfs
/// described (`dev`) on the disk asked for: a node can be replaced, and a disk detached and
/// another attached under its name, between the sysfs read and the open. The handle holds the
/// disk from then on: the kernel does not give a loop device held open to another image.
pub fn open_checked(
    os: &Os,
    op: &str,
    disk: &Disk,
    name: &str,
    dev: (u32, u32),
    how: Open,
) -> Result<Fd> {
    let at = || format!("disk {} ({})", disk.number, disk.name);
    let path = node(name);
    let f = Fd::open(os, &path, how).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(16) => "the disk or one of its partitions is in use (EBUSY)".to_string(),
            _ => format!("open {}: {e}", path.display()),
        };
        let kind = if e.raw_os_error() == Some(16) {
            Kind::FailedPrecondition
        } else {
            io_kind(&e)
        };
        Error::new(kind, op, at(), why)
    })?;
    let rdev = f
        .device_number()
        .map_err(|e| Error::new(io_kind(&e), op, at(), format!("fstat: {e}")))?;
    let seq = f
        .diskseq()
        .map_err(|e| Error::new(io_kind(&e), op, at(), format!("read the diskseq: {e}")))?;
    if rdev != dev || seq != u64::from(disk.number) {
        return Err(Error::new(
            Kind::NotFound,
            op,
            at(),
            format!(
                "{} is now device {}:{} of diskseq {seq}, not the device {}:{} the disk had; it was detached or replaced",
                path.display(),
                rdev.0,
                rdev.1,
                dev.0,
                dev.1
            ),
        ));
    }
    Ok(f)
}

/// [`open_checked`] of the whole disk.
pub fn open_disk(os: &Os, op: &str, disk: &Disk, how: Open) -> Result<Fd> {
    let dev = dev_numbers(os, &sys_disk(&disk.name)).map_err(|e| {
        Error::new(
            io_kind(&e),
            op,
            format!("disk {} ({})", disk.number, disk.name),
            format!("read dev: {e}"),
        )
    })?;
    open_checked(os, op, disk, &disk.name, dev, how)
}

/// Checks that the disk held open as `file` is still `disk` (its diskseq is unchanged), right
/// after acting on it by name.
pub fn still_held(op: &str, disk: &Disk, file: &Fd) -> Result<()> {
    match file.diskseq() {
        Ok(seq) if seq == u64::from(disk.number) => Ok(()),
        r => Err(Error::new(
            Kind::NotFound,
            op,
            format!("disk {} ({})", disk.number, disk.name),
            format!(
                "the disk was detached or replaced while the request ran (its device now reports {r:?})"
            ),
        )),
    }
}

/// The partitions of a disk the kernel knows, by number.
pub fn partitions(os: &Os, disk: &Disk) -> Vec<Part> {
    let dir = sys_disk(&disk.name);
    let mut out: Vec<Part> = os
        .list_dir(&dir)
        .into_iter()
        .flatten()
        // A partition's kernel name is its disk's name and number (`sda1`, `loop3p1`): the
        // disk's attributes (two dozen in sysfs) are not asked whether they are partitions.
        .filter(|name| name.starts_with(&disk.name) && name.len() > disk.name.len())
        .filter_map(|name| {
            let p = dir.join(&name);
            let number = u32::try_from(os::read_u64(&**os, &p.join("partition")).ok()?).ok()?;
            Some(Part {
                name,
                number,
                size: os::read_u64(&**os, &p.join("size")).ok()? * 512,
                start: os::read_u64(&**os, &p.join("start")).ok()? * 512,
            })
        })
        .collect();
    out.sort_by_key(|p| p.number);
    out
}

/// Logical sector size of a disk (512 or 4096).
pub fn sector_size(os: &Os, disk: &Disk) -> u64 {
    os::read_u64(
        &**os,
        &sys_disk(&disk.name).join("queue/logical_block_size"),
    )
    .ok()
    .filter(|s| s.is_power_of_two() && *s >= 512)
    .unwrap_or(512)
}

/// Whether the kernel marks the disk read-only.
pub fn read_only(os: &Os, disk: &Disk) -> bool {
    os::read_text(&**os, &sys_disk(&disk.name).join("ro")).is_ok_and(|s| s == "1")
}

/// What `major:minor` is: `(disk, partition number)` with 0 for the whole disk; `None` for a
/// device that is not a disk or partition with a diskseq (tmpfs, overlay, a dm device).
pub fn whose(os: &Os, major: u32, minor: u32) -> Option<(Disk, u32)> {
    let link = os
        .canonicalize(&Path::new(SYS_DEV_BLOCK).join(format!("{major}:{minor}")))
        .ok()?;
    let name = link.file_name()?.to_string_lossy().into_owned();
    if let Ok(number) = os::read_u64(&**os, &link.join("partition")) {
        let parent = link.parent()?.file_name()?.to_string_lossy().into_owned();
        Some((disk_named(os, &parent)?, u32::try_from(number).ok()?))
    } else {
        Some((disk_named(os, &name)?, 0))
    }
}

/// Whether `major:minor` is a block device the kernel has.
pub fn dev_exists(os: &Os, major: u32, minor: u32) -> bool {
    os.exists(&Path::new(SYS_DEV_BLOCK).join(format!("{major}:{minor}")))
}
