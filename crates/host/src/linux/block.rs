//! Block devices as the kernel describes them in sysfs, and the few ioctls the disk and volume
//! hosts need. No udev: everything comes from `/sys` and the device nodes devtmpfs creates.
//!
//! A disk's number is its `diskseq` (`/sys/block/<name>/diskseq`, Linux 5.15+): unique per boot
//! and never reused, so a number a driver holds can never name a disk attached later.

use super::block_users;
use super::mountinfo;
use super::os::{self, Blkpg, Fd, Open, Os};
use crate::layout::Extent;
use csi_proxy_core::disk::DiskUsage;
use csi_proxy_core::error::io_kind;
use csi_proxy_core::{Error, Kind, Result};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// Devices stacked on `name` (dm, md), recursively, by kernel name. Fails closed: a
/// `holders` directory that exists but cannot be listed is an error, never "none".
fn holders(os: &Os, sys_entry: &Path, out: &mut Vec<String>) -> io::Result<()> {
    let names = match os.list_dir(&sys_entry.join("holders")) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names {
        if !out.contains(&name) {
            out.push(name.clone());
            holders(os, &sys_disk(&name), out)?;
        }
    }
    Ok(())
}

/// What the host uses the disk for: every mount of it, its partitions and the devices stacked on
/// them, plus whether it holds `/`, `/boot`, active swap, or is part of a stacked device.
pub fn usage(os: &Os, disk: &Disk) -> Result<DiskUsage> {
    let op = "disk usage";
    let mut members: Vec<(String, PathBuf)> = vec![(disk.name.clone(), sys_disk(&disk.name))];
    for p in partitions(os, disk) {
        let dir = sys_disk(&disk.name).join(&p.name);
        members.push((p.name, dir));
    }
    let mut stacked = Vec::new();
    for (_, dir) in &members {
        holders(os, dir, &mut stacked)
            .map_err(|e| Error::io(op, format!("holders of {}", dir.display()), &e))?;
    }
    let mut devs = Vec::new();
    let mut nodes = Vec::new();
    for (name, dir) in members
        .iter()
        .cloned()
        .chain(stacked.iter().map(|h| (h.clone(), sys_disk(h))))
    {
        if let Ok(d) = dev_numbers(os, &dir) {
            devs.push(d);
        }
        nodes.push(node(&name).to_string_lossy().into_owned());
    }
    let table =
        mountinfo::read_from(&**os).map_err(|e| Error::io(op, "/proc/self/mountinfo", &e))?;
    let mut mount_points: Vec<String> = table
        .iter()
        .filter(|m| devs.contains(&(m.major, m.minor)) || nodes.contains(&m.source))
        .map(|m| m.mount_point.to_string_lossy().into_owned())
        .collect();
    mount_points.sort();
    mount_points.dedup();
    let swaps = os
        .read_file(Path::new("/proc/swaps"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let swap = swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .find(|dev| nodes.iter().any(|n| n == dev));
    let system_use = if let Some(mp) = mount_points
        .iter()
        .find(|mp| ["/", "/boot", "/boot/efi", "/usr", "/var"].contains(&mp.as_str()))
    {
        Some(format!("holds the host's {mp} filesystem"))
    } else if let Some(dev) = swap {
        Some(format!("holds active swap {dev}"))
    } else if !stacked.is_empty() {
        Some(format!(
            "is in use by the stacked device(s) {} (LVM, RAID or dm-crypt)",
            stacked.join(", ")
        ))
    } else {
        None
    };
    Ok(DiskUsage {
        mount_points,
        system_use,
    })
}

/// Why `disk` is in use, or `None`: a filesystem on it (or on a device stacked on it) is
/// mounted, it backs swap or a stacked device, a loop device is backed by it or one of its
/// partitions (kubelet maps raw block volumes so), a process holds one of them open, or
/// something claims it exclusively (an `O_EXCL` open of the whole disk fails with EBUSY while
/// any of its partitions is claimed). Fails closed: what cannot be read is an error.
pub fn disk_in_use(os: &Os, disk: &Disk) -> Result<Option<String>> {
    const OP: &str = "DisconnectTarget";
    let object = format!("disk {} ({})", disk.number, disk.name);
    let usage = usage(os, disk)?;
    if let Some(why) = usage.system_use {
        return Ok(Some(why));
    }
    if !usage.mount_points.is_empty() {
        return Ok(Some(format!("is mounted at {:?}", usage.mount_points)));
    }
    let mut devs = Vec::new();
    for dir in std::iter::once(sys_disk(&disk.name)).chain(
        partitions(os, disk)
            .into_iter()
            .map(|p| sys_disk(&disk.name).join(p.name)),
    ) {
        devs.push(dev_numbers(os, &dir).map_err(|e| Error::io(OP, &object, &e))?);
    }
    let err = |e: io::Error| Error::io(OP, &object, &e);
    let loops = block_users::loops_backed_by(Path::new("/sys/block"), &devs).map_err(err)?;
    if !loops.is_empty() {
        return Ok(Some(format!(
            "backs loop device(s) {} (a raw block volume, or a mapping of it)",
            loops.join(", ")
        )));
    }
    let open = Fd::open(os, &node(&disk.name), Open::Write { exclusive: true }).map(drop);
    if block_users::exclusively_held(open).map_err(err)? {
        return Ok(Some(
            "is held open exclusively (by a mount in another namespace, a stacked device or a process)"
                .into(),
        ));
    }
    let holders = block_users::processes_holding(Path::new("/proc"), &devs).map_err(err)?;
    if !holders.is_empty() {
        return Ok(Some(format!(
            "is held open by process(es) {}",
            holders.join(", ")
        )));
    }
    Ok(None)
}

/// [`disk_in_use`] on this machine.
pub fn in_use(disk: &Disk) -> Result<Option<String>> {
    disk_in_use(&os::system(), disk)
}

/// SCSI `H:C:T:L` of a disk, from the name of its `device` link target.
pub fn scsi_address(os: &Os, disk: &Disk) -> Option<[String; 4]> {
    let dev = os.canonicalize(&sys_disk(&disk.name).join("device")).ok()?;
    parse_hctl(&dev.file_name()?.to_string_lossy())
}

/// Parses `H:C:T:L` (four decimal numbers).
pub fn parse_hctl(s: &str) -> Option<[String; 4]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 4
        || !parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some([0, 1, 2, 3].map(|i| parts[i].to_string()))
}

/// The disk's serial number: a loop device's backing file, else what the driver exposes
/// (virtio `serial`, NVMe `device/serial`, SCSI VPD page 0x80).
pub fn serial(os: &Os, disk: &Disk) -> String {
    let dir = sys_disk(&disk.name);
    let line = |f: &str| {
        os.read_file(&dir.join(f)).map(|b| {
            String::from_utf8_lossy(&b)
                .trim_end_matches('\n')
                .to_string()
        })
    };
    if let Ok(backing) = line("loop/backing_file") {
        return backing;
    }
    for f in ["serial", "device/serial"] {
        if let Ok(s) = line(f) {
            return s;
        }
    }
    os.read_file(&dir.join("device/vpd_pg80"))
        .ok()
        .and_then(|b| parse_vpd_pg80(&b))
        .unwrap_or_default()
}

/// The page 0x83 identifier (upstream's rule, see [`parse_vpd_pg83`]); NVMe namespaces, which
/// have no VPD pages, report their `wwid` (`eui.…`, `nvme.…`).
pub fn page83(os: &Os, disk: &Disk) -> String {
    let dir = sys_disk(&disk.name);
    if let Some(id) = os
        .read_file(&dir.join("device/vpd_pg83"))
        .ok()
        .and_then(|b| parse_vpd_pg83(&b))
    {
        return id;
    }
    os::read_text(&**os, &dir.join("wwid")).unwrap_or_default()
}

/// The unit serial number from VPD page 0x80 (SPC-4 §7.8.19): header, then ASCII.
pub fn parse_vpd_pg80(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x80 {
        return None;
    }
    let len = u16::from_be_bytes([page[2], page[3]]) as usize;
    let body = page.get(4..4 + len).unwrap_or(&page[4..]);
    Some(String::from_utf8_lossy(body).into_owned())
}

/// The identifier drivers match disks by, from VPD page 0x83 (SPC-4 §7.8.6): the first
/// designation descriptor whose association is the logical unit (0) and whose code set is
/// binary (1) or ASCII (2); ASCII verbatim, binary as lowercase hex. This is upstream's rule over
/// `STORAGE_DEVICE_ID_DESCRIPTOR`, applied to the same SCSI data.
pub fn parse_vpd_pg83(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x83 {
        return None;
    }
    let end = (4 + u16::from_be_bytes([page[2], page[3]]) as usize).min(page.len());
    let mut at = 4;
    while at + 4 <= end {
        let code_set = page[at] & 0x0F;
        let association = (page[at + 1] >> 4) & 0x03;
        let len = page[at + 3] as usize;
        let Some(id) = page
            .get(at + 4..at + 4 + len)
            .filter(|_| at + 4 + len <= end)
        else {
            break;
        };
        if association == 0 {
            match code_set {
                2 => return Some(String::from_utf8_lossy(id).into_owned()),
                1 => return Some(id.iter().map(|b| format!("{b:02x}")).collect()),
                _ => {}
            }
        }
        at += 4 + len;
    }
    None
}

/// The SCSI device state file (`running`, `offline`, …), where the disk has one.
pub fn scsi_state_file(os: &Os, disk: &Disk) -> Option<PathBuf> {
    let f = sys_disk(&disk.name).join("device/state");
    os.exists(&f).then_some(f)
}

/// Brings the kernel's partitions of `disk` in line with `parts` (number, start, length in
/// bytes) from the table on disk: BLKRRPART first, then BLKPG for what the kernel still lacks.
/// The second step matters on kernels built without partition-table parsers (this VM's has
/// neither GPT nor MBR support: BLKRRPART succeeds and finds nothing) and after a crash
/// between writing a table and the re-read.
pub fn sync_partitions(
    os: &Os,
    op: &str,
    disk: &Disk,
    file: &Fd,
    parts: &[(u32, u64, u64)],
) -> Result<()> {
    let missing = |known: &[Part]| -> Vec<(u32, u64, u64)> {
        parts
            .iter()
            .filter(|(n, _, _)| !known.iter().any(|k| k.number == *n))
            .copied()
            .collect()
    };
    if missing(&partitions(os, disk)).is_empty() {
        return Ok(());
    }
    if let Err(e) = file.reread_partitions() {
        tracing::debug!(disk = disk.number, error = %e, "BLKRRPART failed; adding partitions with BLKPG");
    }
    for (n, start, len) in missing(&partitions(os, disk)) {
        // EBUSY when it appeared meanwhile (another reader of the same table): fine.
        if let Err(e) = file.blkpg(Blkpg::Add, n, start, len)
            && !partitions(os, disk).iter().any(|k| k.number == n)
        {
            return Err(Error::new(
                io_kind(&e),
                op,
                format!("disk {} ({})", disk.number, disk.name),
                format!("telling the kernel about partition {n}: {e}"),
            ));
        }
    }
    for (n, _, _) in parts {
        if wait_for_partition(os, disk, *n, Duration::from_secs(5)).is_none() {
            return Err(Error::new(
                Kind::Unavailable,
                op,
                format!("disk {} ({})", disk.number, disk.name),
                format!(
                    "partition {n} is in the table but the kernel has not created its device node within 5 s"
                ),
            ));
        }
    }
    Ok(())
}

/// The partitions the disk's own table lists ([`crate::layout::listed`]: GPT data partitions or
/// MBR entries, and nothing on the whole disk besides them), as (number, start, length) in
/// bytes. FAILED_PRECONDITION naming why when the table cannot be trusted.
pub fn table_partitions(os: &Os, op: &str, disk: &Disk, file: &Fd) -> Result<Vec<Extent>> {
    let e = super::disk::read_ends(os, op, disk, file)?;
    crate::layout::listed(&e.head, &e.tail, e.sector, e.total)
        .map_err(|why| super::disk::refused(op, disk, why))
}

/// The kernel's partitions of `disk` that are volumes of it: those its own table lists, at the
/// start the table gives. Any other partition device is stale (left by an image the device
/// held before, or by a table since rewritten) and is never acted on.
pub fn volume_partitions(os: &Os, listed: &[Extent], disk: &Disk) -> Vec<Part> {
    partitions(os, disk)
        .into_iter()
        .filter(|p| is_listed(listed, p))
        .collect()
}

fn is_listed(listed: &[Extent], p: &Part) -> bool {
    listed
        .iter()
        .any(|&(n, start, _)| n == p.number && start == p.start)
}

/// Makes the kernel forget the partitions of `disk` that its table (`listed`) does not list, so
/// no tool is ever pointed at one. One still open (mounted, held) is left and reported.
pub fn drop_stale_partitions(
    os: &Os,
    op: &str,
    disk: &Disk,
    file: &Fd,
    listed: &[Extent],
) -> Result<()> {
    for p in partitions(os, disk) {
        if is_listed(listed, &p) {
            continue;
        }
        match file.blkpg(Blkpg::Delete, p.number, 0, 0) {
            Ok(()) => {
                tracing::warn!(disk = disk.number, partition = %p.name, "dropped a partition device the disk's table does not list (stale)");
            }
            Err(e) => {
                return Err(Error::new(
                    io_kind(&e),
                    op,
                    format!("disk {} ({})", disk.number, disk.name),
                    format!(
                        "the kernel's partition {} is not in the disk's table (a stale device) and cannot be dropped: {e}",
                        p.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Makes sure the kernel knows every partition in the disk's table (see [`sync_partitions`]),
/// so volumes are found on disks attached after the daemon or on kernels that do not parse
/// tables themselves (best effort: a partition the kernel refuses is missing from the
/// volumes, not an error of the listing). Returns what the table lists.
pub fn ensure_partitions(os: &Os, op: &str, disk: &Disk) -> Result<Vec<Extent>> {
    let file = Fd::open(os, &node(&disk.name), Open::Read).map_err(|e| {
        Error::new(
            io_kind(&e),
            op,
            format!("disk {} ({})", disk.number, disk.name),
            format!("open: {e}"),
        )
    })?;
    let parts = table_partitions(os, op, disk, &file)?;
    if let Err(e) = sync_partitions(os, op, disk, &file, &parts) {
        tracing::debug!(disk = disk.number, error = %e, "partition table not synced");
    }
    Ok(parts)
}

/// Waits (bounded) until the kernel lists partition `number` of `disk` and its device node
/// exists; devtmpfs creates nodes asynchronously.
pub fn wait_for_partition(os: &Os, disk: &Disk, number: u32, timeout: Duration) -> Option<Part> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(p) = partitions(os, disk)
            .into_iter()
            .find(|p| p.number == number)
            && os.exists(&node(&p.name))
        {
            return Some(p);
        }
        if Instant::now() >= deadline {
            return None;
        }
        os.sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpd_83_takes_the_first_lun_ascii_or_binary_designator() {
        // Page header, then: a target-port (association 1) ASCII id to skip, a LUN NAA binary
        // id (code set 1), then a LUN ASCII id that comes too late.
        let mut page = vec![0x00, 0x83, 0x00, 0x00];
        page.extend([0x02, 0x10 | 0x08, 0x00, 0x03]);
        page.extend(b"TPx");
        page.extend([0x01, 0x03, 0x00, 0x04, 0x60, 0x0A, 0xBC, 0xFF]);
        page.extend([0x02, 0x01, 0x00, 0x04]);
        page.extend(b"late");
        let len = (page.len() - 4) as u16;
        page[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(parse_vpd_pg83(&page).as_deref(), Some("600abcff"));

        let mut ascii = vec![0x00, 0x83, 0x00, 25, 0x02, 0x01, 0x00, 21];
        ascii.extend(b"Google  persistent-d0");
        assert_eq!(
            parse_vpd_pg83(&ascii).as_deref(),
            Some("Google  persistent-d0")
        );
        // UTF-8 code set (3) is not taken; a truncated descriptor ends the walk.
        assert_eq!(
            parse_vpd_pg83(&[0, 0x83, 0, 6, 0x03, 0, 0, 2, b'a', b'b']),
            None
        );
        assert_eq!(
            parse_vpd_pg83(&[0, 0x83, 0, 8, 0x02, 0, 0, 200, b'a']),
            None
        );
        assert_eq!(parse_vpd_pg83(&[0, 0x80, 0, 0]), None);
        assert_eq!(parse_vpd_pg83(&[]), None);
    }

    #[test]
    fn vpd_80_and_hctl() {
        assert_eq!(
            parse_vpd_pg80(&[0, 0x80, 0, 4, b'S', b'N', b'1', b' ']).as_deref(),
            Some("SN1 ")
        );
        assert_eq!(parse_vpd_pg80(&[0, 0x83, 0, 0]), None);
        assert_eq!(
            parse_hctl("2:0:1:7"),
            Some(["2".into(), "0".into(), "1".into(), "7".into()])
        );
        for bad in ["virtio3", "1:2:3", "1:2:3:x", "1::3:4", "0:0:0:0:0"] {
            assert_eq!(parse_hctl(bad), None, "{bad}");
        }
    }
}
