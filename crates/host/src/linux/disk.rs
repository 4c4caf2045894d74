//! What the disk group does on Linux: disks by `diskseq`, IDs and locations from sysfs, GPT
//! written in-process, online state through the SCSI device state.

use super::block::{self, Disk};
use crate::gpt::{self, Gpt, GptError, Guid};
use crate::signatures;
use csi_proxy_core::disk::{DiskHost, DiskIds, DiskLocation, DiskUsage};
use csi_proxy_core::{Error, Kind, Result};
use std::collections::BTreeMap;
use std::fs;

/// The Linux disk host.
#[derive(Debug, Default, Clone, Copy)]
pub struct LinuxDiskHost;

impl LinuxDiskHost {
    /// A disk host over this machine's block devices.
    pub fn new() -> Self {
        Self
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
        Ok(block::disks()?
            .into_iter()
            .filter_map(|d| {
                let [h, c, t, l] = block::scsi_address(&d)?;
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
        let disk = block::disk(OP, number)?;
        if block::read_only(&disk) {
            return Err(refused(OP, &disk, "the disk is read-only"));
        }
        let path = block::node(&disk.name);
        // O_EXCL: the kernel refuses while any partition is mounted or otherwise held.
        let file = block::open_write(&path, true).map_err(|e| match e.raw_os_error() {
            Some(16) => refused(
                OP,
                &disk,
                "the disk or one of its partitions is in use (EBUSY)",
            ),
            _ => io_err(OP, &disk, &format!("open {}", path.display()), &e),
        })?;
        let sector = block::sector_size(&disk);
        let total = disk.size / sector;
        let head = block::read_at(&file, 0, signatures::PROBE_LEN.max(gpt::head_len(sector)))
            .map_err(|e| io_err(OP, &disk, "read", &e))?;

        let mut table = match read_gpt(OP, &disk, &file, &head, sector, total)? {
            Ok(Some(t)) => t,
            Ok(None) => {
                let mbr = gpt::mbr_partitions(&head);
                if mbr.iter().any(|p| p.kind == 0xEE) {
                    return Err(refused(
                        OP,
                        &disk,
                        "a protective MBR but no readable GPT header; not rewriting a damaged table",
                    ));
                }
                if !mbr.is_empty() {
                    // Partitioned already (MBR): nothing to do, as for a GPT with data partitions.
                    let parts: Vec<_> = mbr
                        .iter()
                        .map(|p| {
                            (
                                p.number,
                                u64::from(p.first_lba) * sector,
                                u64::from(p.sectors) * sector,
                            )
                        })
                        .collect();
                    return block::sync_partitions(OP, &disk, &file, &parts);
                }
                if let Some(sig) = signatures::probe(&head) {
                    return Err(refused(
                        OP,
                        &disk,
                        format!(
                            "the disk holds {} directly, without a partition table; refusing to partition over it",
                            sig.kind
                        ),
                    ));
                }
                let guid = block::random16().map_err(|e| io_err(OP, &disk, "random", &e))?;
                Gpt::new(sector, total, Guid::from_random(guid))
                    .map_err(|e| refused(OP, &disk, e))?
            }
            Err(GptError::Short(why)) => {
                return Err(refused(OP, &disk, format!("GPT {why}; not rewriting it")));
            }
            Err(e) => return Err(refused(OP, &disk, format!("{e}; not rewriting it"))),
        };
        let existing = table.data_partitions();
        if !existing.is_empty() {
            let parts: Vec<_> = existing
                .iter()
                .map(|p| (p.number, p.first_lba * sector, p.sectors() * sector))
                .collect();
            return block::sync_partitions(OP, &disk, &file, &parts);
        }
        let guid = block::random16().map_err(|e| io_err(OP, &disk, "random", &e))?;
        let part = table
            .add_max_partition(gpt::LINUX_FILESYSTEM, Guid::from_random(guid))
            .map_err(|e| refused(OP, &disk, e))?;
        write_gpt(OP, &disk, &file, &table, total)?;
        tracing::info!(disk = number, name = %disk.name, partuuid = %part.unique_guid, "GPT written");
        block::sync_partitions(
            OP,
            &disk,
            &file,
            &[(
                part.number,
                part.first_lba * sector,
                part.sectors() * sector,
            )],
        )
    }

    fn rescan(&self) -> Result<()> {
        // Each step is best effort: one device failing to rescan must not hide the others.
        for e in fs::read_dir("/sys/class/scsi_host")
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Err(err) = fs::write(e.path().join("scan"), "- - -") {
                tracing::warn!(host = ?e.file_name(), error = %err, "SCSI host scan failed");
            }
        }
        for e in fs::read_dir("/sys/class/nvme")
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Err(err) = fs::write(e.path().join("rescan_controller"), "1") {
                tracing::warn!(ctrl = ?e.file_name(), error = %err, "NVMe rescan failed");
            }
        }
        for d in block::disks()? {
            let dir = block::sys_disk(&d.name);
            let rescan = dir.join("device/rescan");
            if rescan.exists()
                && let Err(err) = fs::write(&rescan, "1")
            {
                tracing::warn!(disk = d.number, error = %err, "SCSI device rescan failed");
            }
            if dir.join("loop").exists() {
                let r = block::open_read(&block::node(&d.name))
                    .and_then(|f| block::loop_set_capacity(&f));
                if let Err(err) = r {
                    tracing::warn!(disk = d.number, error = %err, "loop capacity update failed");
                }
            }
        }
        Ok(())
    }

    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        Ok(block::disks()?
            .into_iter()
            .map(|d| {
                (
                    d.number,
                    DiskIds {
                        page83: block::page83(&d),
                        serial_number: block::serial(&d),
                    },
                )
            })
            .collect())
    }

    fn get_disk_size(&self, number: u32) -> Result<u64> {
        Ok(block::disk("GetDiskStats", number)?.size)
    }

    fn set_disk_online(&self, number: u32, online: bool) -> Result<()> {
        const OP: &str = "SetDiskState";
        let disk = block::disk(OP, number)?;
        let Some(state) = block::scsi_state_file(&disk) else {
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
        let now =
            fs::read_to_string(&state).map_err(|e| io_err(OP, &disk, "read device/state", &e))?;
        if now.trim() == want {
            return Ok(());
        }
        fs::write(&state, want)
            .map_err(|e| io_err(OP, &disk, &format!("set device/state to {want}"), &e))
    }

    fn is_disk_online(&self, number: u32) -> Result<bool> {
        const OP: &str = "GetDiskState";
        let disk = block::disk(OP, number)?;
        let Some(state) = block::scsi_state_file(&disk) else {
            return Ok(true);
        };
        let now =
            fs::read_to_string(&state).map_err(|e| io_err(OP, &disk, "read device/state", &e))?;
        Ok(!matches!(now.trim(), "offline" | "transport-offline"))
    }

    fn disk_usage(&self, number: u32) -> Result<DiskUsage> {
        block::usage(&block::disk("disk usage", number)?)
    }
}

/// Reads the GPT of `disk` (`head`: its first [`gpt::head_len`] bytes), finishing a table write
/// a crash cut off ([`Gpt::serialize`] orders its writes so that every cut leaves one of these):
/// a valid backup under a missing or damaged primary is written back as the whole table, and a
/// valid primary without a protective MBR (LBA 0 still blank) gets one. Answers as
/// [`Gpt::parse`] does for the table now on disk.
pub(super) fn read_gpt(
    op: &str,
    disk: &Disk,
    file: &fs::File,
    head: &[u8],
    sector: u64,
    total: u64,
) -> Result<std::result::Result<Option<Gpt>, GptError>> {
    let tail_len = gpt::tail_len(sector);
    let tail = match (total * sector).checked_sub(tail_len as u64) {
        Some(at) => block::read_at(file, at, tail_len).map_err(|e| io_err(op, disk, "read", &e))?,
        None => Vec::new(),
    };
    match gpt::find(head, &tail, sector, total) {
        Ok(gpt::Found::Primary(t)) => {
            if head.len() >= sector as usize && head[..sector as usize].iter().all(|&b| b == 0) {
                let pmbr = gpt::protective_mbr(sector as usize, total);
                std::os::unix::fs::FileExt::write_all_at(file, &pmbr, 0)
                    .map_err(|e| io_err(op, disk, "write the protective MBR", &e))?;
                file.sync_all()
                    .map_err(|e| io_err(op, disk, "flush the protective MBR", &e))?;
                tracing::warn!(disk = %disk.name, "GPT without its protective MBR (an interrupted table write): MBR written");
            }
            Ok(Ok(Some(t)))
        }
        Ok(gpt::Found::Backup(t)) => {
            tracing::warn!(disk = %disk.name, "primary GPT missing or damaged, backup valid (an interrupted table write): restoring the primary from the backup");
            write_gpt(op, disk, file, &t, total)?;
            Ok(Ok(Some(t)))
        }
        Ok(gpt::Found::None) => Ok(Ok(None)),
        Err(e) => Ok(Err(e)),
    }
}

/// Writes `table` to `disk` in [`Gpt::serialize`]'s crash-safe order and flushes it.
pub(super) fn write_gpt(
    op: &str,
    disk: &Disk,
    file: &fs::File,
    table: &Gpt,
    total: u64,
) -> Result<()> {
    for (offset, bytes) in table.serialize(total) {
        std::os::unix::fs::FileExt::write_all_at(file, &bytes, offset)
            .map_err(|e| io_err(op, disk, "write the partition table", &e))?;
    }
    file.sync_all()
        .map_err(|e| io_err(op, disk, "flush the partition table", &e))
}
