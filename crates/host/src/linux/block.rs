//! Block devices as the kernel describes them in sysfs, and the few ioctls the disk and volume
//! hosts need. No udev: everything comes from `/sys` and the device nodes devtmpfs creates.
//!
//! A disk's number is its `diskseq` (`/sys/block/<name>/diskseq`, Linux 5.15+): unique per boot
//! and never reused, so a number a driver holds can never name a disk attached later.

use super::mountinfo;
use csi_proxy_core::disk::DiskUsage;
use csi_proxy_core::{Error, Kind, Result};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
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
}

fn read_trimmed(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_string())
}

fn read_u64(path: &Path) -> io::Result<u64> {
    read_trimmed(path)?
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{}", path.display())))
}

/// `dev_t` of a sysfs block entry, from its `dev` file (`major:minor`).
pub fn dev_numbers(sys_entry: &Path) -> io::Result<(u32, u32)> {
    let s = read_trimmed(&sys_entry.join("dev"))?;
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
pub fn disks() -> Result<Vec<Disk>> {
    let op = "list disks";
    let entries = fs::read_dir(SYS_BLOCK).map_err(|e| Error::io(op, SYS_BLOCK, &e))?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(d) = disk_named(&name) {
            out.push(d);
        }
    }
    out.sort_by_key(|d| d.number);
    Ok(out)
}

fn disk_named(name: &str) -> Option<Disk> {
    let dir = sys_disk(name);
    let size = read_u64(&dir.join("size")).ok()? * 512;
    if size == 0 {
        return None;
    }
    let number = u32::try_from(read_u64(&dir.join("diskseq")).ok()?).ok()?;
    Some(Disk {
        name: name.to_string(),
        number,
        size,
    })
}

/// The disk with this number; NotFound naming it otherwise.
pub fn disk(op: &str, number: u32) -> Result<Disk> {
    disks()?
        .into_iter()
        .find(|d| d.number == number)
        .ok_or_else(|| {
            Error::new(
                Kind::NotFound,
                op,
                format!("disk {number}"),
                "no block device has this number (diskseq); was it detached?",
            )
        })
}

/// The partitions of a disk the kernel knows, by number.
pub fn partitions(disk: &Disk) -> Vec<Part> {
    let dir = sys_disk(&disk.name);
    let mut out: Vec<Part> = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let number = u32::try_from(read_u64(&p.join("partition")).ok()?).ok()?;
            Some(Part {
                name: e.file_name().to_string_lossy().into_owned(),
                number,
                size: read_u64(&p.join("size")).ok()? * 512,
            })
        })
        .collect();
    out.sort_by_key(|p| p.number);
    out
}

/// Logical sector size of a disk (512 or 4096).
pub fn sector_size(disk: &Disk) -> u64 {
    read_u64(&sys_disk(&disk.name).join("queue/logical_block_size"))
        .ok()
        .filter(|s| s.is_power_of_two() && *s >= 512)
        .unwrap_or(512)
}

/// Whether the kernel marks the disk read-only.
pub fn read_only(disk: &Disk) -> bool {
    read_trimmed(&sys_disk(&disk.name).join("ro")).is_ok_and(|s| s == "1")
}

/// What `major:minor` is: `(disk, partition number)` with 0 for the whole disk; `None` for a
/// device that is not a disk or partition with a diskseq (tmpfs, overlay, a dm device).
pub fn whose(major: u32, minor: u32) -> Option<(Disk, u32)> {
    let link = fs::canonicalize(Path::new(SYS_DEV_BLOCK).join(format!("{major}:{minor}"))).ok()?;
    let name = link.file_name()?.to_string_lossy().into_owned();
    if let Ok(number) = read_u64(&link.join("partition")) {
        let parent = link.parent()?.file_name()?.to_string_lossy().into_owned();
        Some((disk_named(&parent)?, u32::try_from(number).ok()?))
    } else {
        Some((disk_named(&name)?, 0))
    }
}

/// Devices stacked on `name` (dm, md), recursively, by kernel name.
fn holders(sys_entry: &Path, out: &mut Vec<String>) {
    for e in fs::read_dir(sys_entry.join("holders"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if !out.contains(&name) {
            out.push(name.clone());
            holders(&sys_disk(&name), out);
        }
    }
}

/// What the host uses the disk for: every mount of it, its partitions and the devices stacked on
/// them, plus whether it holds `/`, `/boot`, active swap, or is part of a stacked device.
pub fn usage(disk: &Disk) -> Result<DiskUsage> {
    let op = "disk usage";
    let mut members: Vec<(String, PathBuf)> = vec![(disk.name.clone(), sys_disk(&disk.name))];
    for p in partitions(disk) {
        let dir = sys_disk(&disk.name).join(&p.name);
        members.push((p.name, dir));
    }
    let mut stacked = Vec::new();
    for (_, dir) in &members {
        holders(dir, &mut stacked);
    }
    let mut devs = Vec::new();
    let mut nodes = Vec::new();
    for (name, dir) in members
        .iter()
        .cloned()
        .chain(stacked.iter().map(|h| (h.clone(), sys_disk(h))))
    {
        if let Ok(d) = dev_numbers(&dir) {
            devs.push(d);
        }
        nodes.push(node(&name).to_string_lossy().into_owned());
    }
    let table = mountinfo::read().map_err(|e| Error::io(op, "/proc/self/mountinfo", &e))?;
    let mut mount_points: Vec<String> = table
        .iter()
        .filter(|m| devs.contains(&(m.major, m.minor)) || nodes.contains(&m.source))
        .map(|m| m.mount_point.to_string_lossy().into_owned())
        .collect();
    mount_points.sort();
    mount_points.dedup();
    let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
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
/// mounted, it backs swap or a stacked device, or something holds it open exclusively (an
/// `O_EXCL` open of the whole disk fails with EBUSY while any of its partitions is claimed).
pub fn in_use(disk: &Disk) -> Result<Option<String>> {
    let usage = usage(disk)?;
    if let Some(why) = usage.system_use {
        return Ok(Some(why));
    }
    if !usage.mount_points.is_empty() {
        return Ok(Some(format!("is mounted at {:?}", usage.mount_points)));
    }
    match open_write(&node(&disk.name), true) {
        Err(e) if e.raw_os_error() == Some(16) => Ok(Some(
            "is held open exclusively (by a mount in another namespace, a stacked device or a process)"
                .into(),
        )),
        _ => Ok(None),
    }
}

/// SCSI `H:C:T:L` of a disk, from the name of its `device` link target.
pub fn scsi_address(disk: &Disk) -> Option<[String; 4]> {
    let dev = fs::canonicalize(sys_disk(&disk.name).join("device")).ok()?;
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
pub fn serial(disk: &Disk) -> String {
    let dir = sys_disk(&disk.name);
    if let Ok(backing) = fs::read_to_string(dir.join("loop/backing_file")) {
        return backing.trim_end_matches('\n').to_string();
    }
    for f in ["serial", "device/serial"] {
        if let Ok(s) = fs::read_to_string(dir.join(f)) {
            return s.trim_end_matches('\n').to_string();
        }
    }
    fs::read(dir.join("device/vpd_pg80"))
        .ok()
        .and_then(|b| parse_vpd_pg80(&b))
        .unwrap_or_default()
}

/// The page 0x83 identifier (upstream's rule, see [`parse_vpd_pg83`]); NVMe namespaces, which
/// have no VPD pages, report their `wwid` (`eui.…`, `nvme.…`).
pub fn page83(disk: &Disk) -> String {
    let dir = sys_disk(&disk.name);
    if let Some(id) = fs::read(dir.join("device/vpd_pg83"))
        .ok()
        .and_then(|b| parse_vpd_pg83(&b))
    {
        return id;
    }
    fs::read_to_string(dir.join("wwid"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
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
pub fn scsi_state_file(disk: &Disk) -> Option<PathBuf> {
    let f = sys_disk(&disk.name).join("device/state");
    f.exists().then_some(f)
}

/// Reads `len` bytes at `offset` (short at the end of the device).
pub fn read_at(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(done);
    Ok(buf)
}

/// The length in bytes of the device `file` is open on (lseek(2) to `SEEK_END`, which block
/// devices answer with their size; reads here use pread, so the moved offset is never used).
pub fn len(file: &File) -> io::Result<u64> {
    Ok(rustix::fs::seek(file, rustix::fs::SeekFrom::End(0))?)
}

/// Opens a device node for reading.
pub fn open_read(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// Opens a device node for writing. With `exclusive`, `O_EXCL` makes the kernel refuse (EBUSY)
/// while anything has the device or one of its partitions open exclusively: mounted, swap, a
/// stacked device (open(2): "on Linux 2.6 and later, O_EXCL can be used without O_CREAT" for
/// block devices).
pub fn open_write(path: &Path, exclusive: bool) -> io::Result<File> {
    let mut o = fs::OpenOptions::new();
    o.read(true).write(true);
    if exclusive {
        o.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32);
    }
    o.open(path)
}

/// 16 random bytes from the kernel's generator.
pub fn random16() -> io::Result<[u8; 16]> {
    let mut b = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// `BLKRRPART`: the kernel re-reads the partition table (fails with EBUSY while a partition is
/// open).
pub fn reread_partitions(disk: &File) -> io::Result<()> {
    const BLKRRPART: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(0x12, 95);
    // SAFETY: BLKRRPART takes no argument (include/uapi/linux/fs.h: `_IO(0x12,95)`).
    unsafe { rustix::ioctl::ioctl(disk, rustix::ioctl::NoArg::<BLKRRPART>::new()) }
        .map_err(io::Error::from)
}

/// `struct blkpg_partition` (include/uapi/linux/blkpg.h); offsets and lengths in bytes.
#[repr(C)]
struct BlkpgPartition {
    start: i64,
    length: i64,
    pno: i32,
    devname: [u8; 64],
    volname: [u8; 64],
}

/// `struct blkpg_ioctl_arg`.
#[repr(C)]
struct BlkpgIoctlArg {
    op: i32,
    flags: i32,
    datalen: i32,
    data: *mut BlkpgPartition,
}

/// `BLKPG_ADD_PARTITION` and `BLKPG_RESIZE_PARTITION`.
#[derive(Debug, Clone, Copy)]
pub enum Blkpg {
    /// Tell the kernel about a new partition.
    Add = 1,
    /// Tell the kernel a partition's length changed (its start must not); works while the
    /// partition is mounted, unlike BLKRRPART.
    Resize = 3,
}

/// `BLKPG`: tells the kernel about partition `number` at `start` with `length` (bytes).
pub fn blkpg(disk: &File, op: Blkpg, number: u32, start: u64, length: u64) -> io::Result<()> {
    const BLKPG: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(0x12, 105);
    let invalid = |_| io::Error::from(io::ErrorKind::InvalidInput);
    let mut part = BlkpgPartition {
        start: i64::try_from(start).map_err(invalid)?,
        length: i64::try_from(length).map_err(invalid)?,
        pno: i32::try_from(number).map_err(invalid)?,
        devname: [0; 64],
        volname: [0; 64],
    };
    let arg = BlkpgIoctlArg {
        op: op as i32,
        flags: 0,
        datalen: size_of::<BlkpgPartition>() as i32,
        data: &mut part,
    };
    // SAFETY: BLKPG is `_IO(0x12,105)` taking a pointer to `struct blkpg_ioctl_arg`, whose
    // `data` points at a `struct blkpg_partition`; both are repr(C) copies of the uapi structs,
    // and `part` outlives the call.
    unsafe {
        rustix::ioctl::ioctl(
            disk,
            rustix::ioctl::Setter::<BLKPG, BlkpgIoctlArg>::new(arg),
        )
    }
    .map_err(io::Error::from)
}

/// `BLKGETDISKSEQ`: the diskseq of the disk an open block device (a disk or one of its
/// partitions) belongs to. A handle keeps naming the device it was opened on, but a loop device
/// detached and attached again, or a disk number reused by a new disk, gets a new diskseq: this
/// is how a request notices that the device it resolved is no longer the disk it was asked about.
pub fn diskseq(dev: &File) -> io::Result<u64> {
    const BLKGETDISKSEQ: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<u64>(0x12, 128);
    // SAFETY: BLKGETDISKSEQ is `_IOR(0x12, 128, __u64)` (include/uapi/linux/fs.h): the kernel
    // writes one u64, which the Getter provides.
    unsafe { rustix::ioctl::ioctl(dev, rustix::ioctl::Getter::<BLKGETDISKSEQ, u64>::new()) }
        .map_err(io::Error::from)
}

/// `LOOP_SET_CAPACITY`: a loop device picks up a new size of its backing file.
pub fn loop_set_capacity(dev: &File) -> io::Result<()> {
    const LOOP_SET_CAPACITY: rustix::ioctl::Opcode = 0x4C07;
    // SAFETY: LOOP_SET_CAPACITY takes no argument (include/uapi/linux/loop.h).
    unsafe { rustix::ioctl::ioctl(dev, rustix::ioctl::NoArg::<LOOP_SET_CAPACITY>::new()) }
        .map_err(io::Error::from)
}

/// Brings the kernel's partitions of `disk` in line with `parts` (number, start, length in
/// bytes) from the table on disk: BLKRRPART first, then BLKPG for what the kernel still lacks.
/// The second step matters on kernels built without partition-table parsers (this VM's has
/// neither GPT nor MBR support: BLKRRPART succeeds and finds nothing) and after a crash
/// between writing a table and the re-read.
pub fn sync_partitions(
    op: &str,
    disk: &Disk,
    file: &File,
    parts: &[(u32, u64, u64)],
) -> Result<()> {
    let missing = |known: &[Part]| -> Vec<(u32, u64, u64)> {
        parts
            .iter()
            .filter(|(n, _, _)| !known.iter().any(|k| k.number == *n))
            .copied()
            .collect()
    };
    if missing(&partitions(disk)).is_empty() {
        return Ok(());
    }
    if let Err(e) = reread_partitions(file) {
        tracing::debug!(disk = disk.number, error = %e, "BLKRRPART failed; adding partitions with BLKPG");
    }
    for (n, start, len) in missing(&partitions(disk)) {
        // EBUSY when it appeared meanwhile (another reader of the same table): fine.
        if let Err(e) = blkpg(file, Blkpg::Add, n, start, len)
            && !partitions(disk).iter().any(|k| k.number == n)
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
        if wait_for_partition(disk, *n, Duration::from_secs(5)).is_none() {
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

/// The partitions recorded in the disk's own table (GPT data partitions, or MBR entries) as
/// (number, start, length) in bytes; empty when it has none or the table is unreadable.
pub fn table_partitions(disk: &Disk, file: &File) -> Vec<(u32, u64, u64)> {
    let sector = sector_size(disk);
    let Ok(head) = read_at(file, 0, crate::gpt::head_len(sector)) else {
        return Vec::new();
    };
    match crate::gpt::Gpt::parse(&head, sector, disk.size / sector) {
        Ok(Some(t)) => t.data_extents(),
        Ok(None) => crate::gpt::mbr_data_extents(&head, sector),
        Err(_) => Vec::new(),
    }
}

/// Makes sure the kernel knows every partition in the disk's table (see [`sync_partitions`]),
/// so volumes are found on disks attached after the daemon or on kernels that do not parse
/// tables themselves.
pub fn ensure_partitions(op: &str, disk: &Disk) -> Result<()> {
    let file = open_read(&node(&disk.name)).map_err(|e| {
        Error::new(
            io_kind(&e),
            op,
            format!("disk {} ({})", disk.number, disk.name),
            format!("open: {e}"),
        )
    })?;
    let parts = table_partitions(disk, &file);
    sync_partitions(op, disk, &file, &parts)
}

use csi_proxy_core::error::io_kind;

/// Waits (bounded) until the kernel lists partition `number` of `disk` and its device node
/// exists; devtmpfs creates nodes asynchronously.
pub fn wait_for_partition(disk: &Disk, number: u32, timeout: Duration) -> Option<Part> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(p) = partitions(disk).into_iter().find(|p| p.number == number)
            && node(&p.name).exists()
        {
            return Some(p);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
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
