//! What the disk group does on Linux: disks by `diskseq`, IDs and locations from sysfs, GPT
//! written in-process, online state through the SCSI device state.

use super::blkid;
use super::block::{self, Disk};
use super::os::{self, Fd, Open, Os};
use csi_proxy_core::disk::{DiskHost, DiskIds, DiskLocation, DiskUsage, OpenElsewhere};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::gpt::{self, Gpt, random_guid};
use csi_proxy_formats::partition_plan::{self, Plan};
use csi_proxy_formats::signatures;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The Linux disk host.
#[derive(Clone)]
pub struct LinuxDiskHost {
    os: Os,
}

impl std::fmt::Debug for LinuxDiskHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinuxDiskHost")
    }
}

impl Default for LinuxDiskHost {
    fn default() -> Self {
        Self::new()
    }
}

impl LinuxDiskHost {
    /// A disk host over this machine's block devices.
    pub fn new() -> Self {
        Self::with_os(os::system())
    }

    /// A disk host acting through `os` (the real kernel, or the fake Linux in tests).
    pub fn with_os(os: Os) -> Self {
        Self { os }
    }
}

/// An OS error naming the operation, the disk and the step that failed.
pub(crate) fn io_err(op: &str, disk: &Disk, what: &str, e: &std::io::Error) -> Error {
    Error::new(
        csi_proxy_core::error::io_kind(e),
        op,
        format!("disk {} ({})", disk.number, disk.name),
        format!("{what}: {e}"),
    )
}

pub(crate) fn refused(op: &str, disk: &Disk, why: impl std::fmt::Display) -> Error {
    Error::new(
        Kind::FailedPrecondition,
        op,
        format!("disk {} ({})", disk.number, disk.name),
        why,
    )
}

impl DiskHost for LinuxDiskHost {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        Ok(block::disks(&self.os)?
            .into_iter()
            .filter_map(|d| {
                let [h, c, t, l] = block::scsi_address(&self.os, &d)?;
                Some((
                    d.number,
                    DiskLocation {
                        adapter: h,
                        bus: c,
                        target: t,
                        lun_id: l,
                    },
                ))
            })
            .collect())
    }

    fn partition_disk(&self, number: u32) -> Result<()> {
        const OP: &str = "PartitionDisk";
        let disk = block::find_disk(&self.os, OP, number)?;
        if block::read_only(&self.os, &disk) {
            return Err(refused(OP, &disk, "the disk is read-only"));
        }
        // First a look without taking the disk: drivers call PartitionDisk on every stage, and
        // a partitioned disk whose partition is mounted must answer OK, not EBUSY. The handle
        // holds the disk checked to be the one numbered, as the volume RPCs do.
        let reader = block::open_disk(&self.os, OP, &disk, Open::Read)?;
        let ends = read_ends(&self.os, OP, &disk, &reader)?;
        // Partition devices the disk's table does not list (kept from an image the device held
        // before) go first, whatever is decided next: no tool may ever be pointed at one.
        if let Ok(listed) =
            csi_proxy_formats::disk_layout::listed(&ends.head, &ends.tail, ends.sector, ends.total)
        {
            block::drop_stale_partitions(&self.os, OP, &disk, &reader, &listed)?;
        }
        if let Plan::Partitioned(parts) = plan_for(OP, &disk, &ends)? {
            return block::sync_partitions(&self.os, OP, &disk, &reader, &parts);
        }
        drop(reader);
        // A write is due. O_EXCL: the kernel refuses while any partition is mounted or otherwise
        // held; and the decision is taken again from what the disk holds now.
        let file = block::open_disk(&self.os, OP, &disk, Open::Write { exclusive: true })?;
        let ends = read_ends(&self.os, OP, &disk, &file)?;
        let (sector, total) = (ends.sector, ends.total);
        let plan = plan_for(OP, &disk, &ends)?;
        if !matches!(plan, Plan::Partitioned(_)) {
            self.libblkid_agrees(OP, &disk, &plan)?;
            block::still_held(OP, &disk, &file)?;
        }
        let mut table = match plan {
            Plan::Partitioned(parts) => {
                return block::sync_partitions(&self.os, OP, &disk, &file, &parts);
            }
            Plan::ProtectiveMbr(t) => {
                let mbr = gpt::protective_mbr(sector as usize, total);
                write_ordered(&file, &[(0, mbr)])
                    .map_err(|e| io_err(OP, &disk, "write the protective MBR", &e))?;
                tracing::warn!(disk = %disk.name, "GPT without its protective MBR (an interrupted table write): MBR written");
                return block::sync_partitions(&self.os, OP, &disk, &file, &t.data_extents());
            }
            Plan::Write { table, restored } => {
                if restored {
                    tracing::warn!(disk = %disk.name, "primary GPT missing or damaged, backup valid and nothing else on the disk (an interrupted table write): restoring the primary from the backup");
                }
                table
            }
            Plan::New => {
                let guid = self
                    .os
                    .random16()
                    .map_err(|e| io_err(OP, &disk, "random", &e))?;
                Gpt::new(sector, total, random_guid(guid)).map_err(|e| refused(OP, &disk, e))?
            }
        };
        if table.data_partitions().is_empty() {
            let guid = self
                .os
                .random16()
                .map_err(|e| io_err(OP, &disk, "random", &e))?;
            let part = table
                .add_max_partition(gpt::LINUX_FILESYSTEM, random_guid(guid))
                .map_err(|e| refused(OP, &disk, e))?;
            tracing::info!(disk = number, name = %disk.name, partuuid = %part.unique_guid, "partition added");
        }
        write_gpt(OP, &disk, &file, &table, total)?;
        tracing::info!(disk = number, name = %disk.name, "GPT written");
        block::sync_partitions(&self.os, OP, &disk, &file, &table.data_extents())
    }

    fn rescan(&self) -> Result<()> {
        // Each step is best effort: one device failing to rescan must not hide the others.
        let class = |dir: &str| -> Vec<(String, PathBuf)> {
            let dir = Path::new(dir);
            let names = self.os.list_dir(dir).unwrap_or_default();
            names
                .into_iter()
                .map(|n| (n.clone(), dir.join(n)))
                .collect()
        };
        for (host, dir) in class("/sys/class/scsi_host") {
            if let Err(err) = self.os.write_file(&dir.join("scan"), "- - -") {
                tracing::warn!(host, error = %err, "SCSI host scan failed");
            }
        }
        for (ctrl, dir) in class("/sys/class/nvme") {
            if let Err(err) = self.os.write_file(&dir.join("rescan_controller"), "1") {
                tracing::warn!(ctrl, error = %err, "NVMe rescan failed");
            }
        }
        for d in block::disks(&self.os)? {
            let dir = block::sys_disk(&d.name);
            let rescan = dir.join("device/rescan");
            if self.os.exists(&rescan)
                && let Err(err) = self.os.write_file(&rescan, "1")
            {
                tracing::warn!(disk = d.number, error = %err, "SCSI device rescan failed");
            }
            if self.os.exists(&dir.join("loop")) {
                let r = Fd::open(&self.os, &block::node(&d.name), Open::Read)
                    .and_then(|f| self.os.loop_set_capacity(f.raw()));
                if let Err(err) = r {
                    tracing::warn!(disk = d.number, error = %err, "loop capacity update failed");
                }
            }
        }
        Ok(())
    }

    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        Ok(block::disks(&self.os)?
            .into_iter()
            .map(|d| {
                (
                    d.number,
                    DiskIds {
                        page83: block::page83(&self.os, &d),
                        serial_number: block::serial(&self.os, &d),
                    },
                )
            })
            .collect())
    }

    fn get_disk_size(&self, number: u32) -> Result<u64> {
        Ok(block::find_disk(&self.os, "GetDiskStats", number)?.size)
    }

    fn set_disk_online(&self, number: u32, online: bool) -> Result<()> {
        const OP: &str = "SetDiskState";
        let disk = block::find_disk(&self.os, OP, number)?;
        let Some(state) = block::scsi_state_file(&self.os, &disk) else {
            if online {
                return Ok(()); // a device without an offline state is always online
            }
            return Err(refused(
                OP,
                &disk,
                "the device has no offline state (only SCSI disks have one); it stays online",
            ));
        };
        let want = if online { "running" } else { "offline" };
        // The attribute is held open and read and written through that handle: an open sysfs
        // attribute belongs to the device it was opened on, and fails with ENODEV once that
        // device is gone, so a disk detached and another attached under the same name in the
        // meantime is never written. (The block device itself is not opened: an offline SCSI
        // disk refuses opens.)
        let attr = Fd::open(&self.os, &state, Open::Write { exclusive: false })
            .map_err(|e| io_err(OP, &disk, "open device/state", &e))?;
        // Checked once the attribute is open: the name still names the disk numbered (a
        // diskseq is never reused), so the attribute opened is that disk's.
        still_named(&self.os, OP, &disk)?;
        let gone = |e: std::io::Error, what: &str| match e.raw_os_error() {
            Some(19) => Error::new(
                Kind::NotFound,
                OP,
                format!("disk {} ({})", disk.number, disk.name),
                "the disk was detached while the request ran; nothing was changed",
            ),
            _ => io_err(OP, &disk, what, &e),
        };
        let now = attr
            .read_at(0, 64)
            .map_err(|e| gone(e, "read device/state"))?;
        if String::from_utf8_lossy(&now).trim() == want {
            return Ok(());
        }
        attr.write_at(0, want.as_bytes())
            .map_err(|e| gone(e, &format!("set device/state to {want}")))
    }

    fn is_disk_online(&self, number: u32) -> Result<bool> {
        const OP: &str = "GetDiskState";
        let disk = block::find_disk(&self.os, OP, number)?;
        let Some(state) = block::scsi_state_file(&self.os, &disk) else {
            return Ok(true);
        };
        let now = os::read_text(&*self.os, &state)
            .map_err(|e| io_err(OP, &disk, "read device/state", &e))?;
        Ok(!matches!(now.trim(), "offline" | "transport-offline"))
    }

    fn disk_usage(&self, number: u32) -> Result<DiskUsage> {
        block::in_use_facts(&self.os, &block::find_disk(&self.os, "disk usage", number)?)
    }

    /// None beyond [`Self::disk_usage`]: its facts already name every process holding the
    /// disk or a partition open and every exclusive claim.
    fn volumes_open_elsewhere(&self, _: u32) -> Result<Vec<OpenElsewhere>> {
        Ok(Vec::new())
    }
}

/// Checks that `disk`'s kernel name still names the disk with its number (its sysfs `diskseq`):
/// what was opened by that name since it was found is then the disk's. NOT_FOUND otherwise.
fn still_named(os: &Os, op: &str, disk: &Disk) -> Result<()> {
    let seq = os::read_u64(&**os, &block::sys_disk(&disk.name).join("diskseq")).ok();
    if seq == Some(u64::from(disk.number)) {
        return Ok(());
    }
    Err(Error::new(
        Kind::NotFound,
        op,
        format!("disk {} ({})", disk.number, disk.name),
        format!(
            "the disk was detached or replaced while the request ran ({} now has diskseq {seq:?}); nothing was changed",
            disk.name
        ),
    ))
}

/// The bytes a table decision is taken from: the disk's first [`signatures::PROBE_LEN`] bytes
/// (enough for the primary GPT and every signature the probe knows) and its last
/// [`gpt::tail_len`] (the backup GPT).
pub(super) struct Ends {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    pub sector: u64,
    pub total: u64,
}

/// Reads [`Ends`] of `disk` through `file`.
pub(super) fn read_ends(os: &Os, op: &str, disk: &Disk, file: &Fd) -> Result<Ends> {
    let sector = block::sector_size(os, disk);
    let total = disk.size / sector;
    let head = file
        .read_at(0, signatures::PROBE_LEN.max(gpt::head_len(sector)))
        .map_err(|e| io_err(op, disk, "read", &e))?;
    let tail = read_tail(op, disk, sector, file)?;
    Ok(Ends {
        head,
        tail,
        sector,
        total,
    })
}

/// The disk's last bytes, whole sectors: its backup GPT ([`gpt::tail_len`]) and whatever
/// [`signatures::probe_tail`] looks for (empty on a disk smaller than that); `sector` is the
/// disk's logical sector size.
pub(super) fn read_tail(op: &str, disk: &Disk, sector: u64, file: &Fd) -> Result<Vec<u8>> {
    let len = gpt::tail_len(sector)
        .max(signatures::TAIL_PROBE_LEN)
        .next_multiple_of(sector as usize);
    match (disk.size / sector * sector).checked_sub(len as u64) {
        Some(at) => file
            .read_at(at, len)
            .map_err(|e| io_err(op, disk, "read", &e)),
        None => Ok(Vec::new()),
    }
}

/// What PartitionDisk does to `disk` as its ends `e` are ([`partition_plan::plan`]); a
/// refusal is FAILED_PRECONDITION naming what was found.
fn plan_for(op: &str, disk: &Disk, e: &Ends) -> Result<Plan> {
    partition_plan::plan(&e.head, &e.tail, e.sector, e.total).map_err(|why| refused(op, disk, why))
}

impl LinuxDiskHost {
    /// libblkid's full probe of the whole disk, the probe of record before a table write: it
    /// must find nothing (a blank disk) or only the GPT being finished. Our own probe decided
    /// `plan` already; this catches what only libblkid knows.
    fn libblkid_agrees(&self, op: &str, disk: &Disk, plan: &Plan) -> Result<()> {
        let object = format!("disk {} ({})", disk.number, disk.name);
        let node = block::node(&disk.name);
        let found = blkid::probe(&*self.os, op, &object, &node.to_string_lossy())?;
        let ours = |t: &Option<String>| {
            !matches!(plan, Plan::New) && matches!(t.as_deref(), Some("gpt" | "PMBR"))
        };
        match found {
            None => Ok(()),
            Some(blkid::Found::One {
                kind: None, table, ..
            }) if ours(&table) => Ok(()),
            Some(f) => Err(refused(
                op,
                disk,
                format!(
                    "the disk holds {}; refusing to write a partition table to it",
                    f.shown()
                ),
            )),
        }
    }
}

/// Where a partition table is written: a disk's device node, or a recorder in tests.
pub(super) trait TableDevice {
    /// Writes all of `bytes` at byte `offset`.
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()>;
    /// Makes every write so far durable: on a block device, fsync writes the dirty pages and
    /// then flushes the device's volatile cache (fsync(2)).
    fn flush(&self) -> std::io::Result<()>;
}

impl TableDevice for Fd {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        self.write_at(offset, bytes)
    }

    fn flush(&self) -> std::io::Result<()> {
        self.fsync()
    }
}

/// Writes `writes` in their order, each made durable before the next starts: the crash safety of
/// [`Gpt::serialize`]'s order holds only if the device cannot reorder them, and a page cache
/// and a volatile disk cache both may.
pub(super) fn write_ordered(
    dev: &impl TableDevice,
    writes: &[(u64, Vec<u8>)],
) -> std::io::Result<()> {
    for (offset, bytes) in writes {
        dev.write_all_at(bytes, *offset)?;
        dev.flush()?;
    }
    Ok(())
}

/// Writes `table` to `disk` in [`Gpt::serialize`]'s crash-safe order, each write durable before
/// the next. The header's end is rebuilt from the disk's geometry first (backup header in the
/// last sector, usable sectors up to the backup array), never taken from what a header read
/// from the disk said.
pub(super) fn write_gpt(op: &str, disk: &Disk, file: &Fd, table: &Gpt, total: u64) -> Result<()> {
    let mut table = table.clone();
    table
        .relocate_end(total)
        .map_err(|e| refused(op, disk, e))?;
    write_ordered(file, &table.serialize(total))
        .map_err(|e| io_err(op, disk, "write the partition table", &e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use uuid::Uuid;

    /// Records the calls a table write makes.
    #[derive(Default)]
    struct Recorder(RefCell<Vec<String>>);

    impl TableDevice for Recorder {
        fn write_all_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
            self.0
                .borrow_mut()
                .push(format!("write {} at {offset}", bytes.len()));
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            self.0.borrow_mut().push("flush".into());
            Ok(())
        }
    }

    #[test]
    fn every_table_write_is_durable_before_the_next_starts() {
        let (sector, total) = (512, 131072);
        let mut t = Gpt::new(sector, total, Uuid::from_bytes([1; 16])).unwrap();
        t.add_max_partition(gpt::LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
            .unwrap();
        let rec = Recorder::default();
        write_ordered(&rec, &t.serialize(total)).unwrap();
        let backup_at = (total - 33) * sector;
        assert_eq!(
            *rec.0.borrow(),
            [
                format!("write {} at {backup_at}", 33 * 512),
                "flush".into(),
                format!("write {} at 1024", 32 * 512),
                "flush".into(),
                "write 512 at 512".into(),
                "flush".into(),
                "write 512 at 0".into(),
                "flush".into(),
            ]
        );
    }
}
