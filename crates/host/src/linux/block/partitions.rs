//! The kernel's view of a disk's partitions, brought in line with (and checked against) the
//! disk's own table: BLKRRPART, BLKPG, stale partition devices.

use super::*;

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

/// The partitions the disk's own table lists ([`csi_proxy_formats::disk_layout::listed`]: GPT data partitions or
/// MBR entries, and nothing on the whole disk besides them), as (number, start, length) in
/// bytes. FAILED_PRECONDITION naming why when the table cannot be trusted.
pub fn table_partitions(os: &Os, op: &str, disk: &Disk, file: &Fd) -> Result<Vec<Extent>> {
    let e = crate::linux::disk::read_ends(os, op, disk, file)?;
    csi_proxy_formats::disk_layout::listed(&e.head, &e.tail, e.sector, e.total)
        .map_err(|why| crate::linux::disk::refused(op, disk, why))
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
/// volumes, not an error of the listing). Returns what the table lists. For a read (the
/// caller holds the disk): a disk the host uses is never changed ([`host_uses`]), and the disk
/// is opened checked to be the one numbered.
pub fn ensure_partitions(os: &Os, op: &str, disk: &Disk) -> Result<Vec<Extent>> {
    let file = open_disk(os, op, disk, Open::Read)?;
    let parts = table_partitions(os, op, disk, &file)?;
    let known = partitions(os, disk);
    if parts
        .iter()
        .all(|(n, _, _)| known.iter().any(|k| k.number == *n))
    {
        return Ok(parts);
    }
    match host_uses(os, disk) {
        Ok(None) => {
            if let Err(e) = sync_partitions(os, op, disk, &file, &parts) {
                tracing::debug!(disk = disk.number, error = %e, "partition table not synced");
            }
        }
        Ok(Some(why)) => {
            tracing::debug!(
                disk = disk.number,
                why,
                "the host uses the disk; its kernel partitions are left as they are"
            );
        }
        Err(e) => {
            tracing::debug!(disk = disk.number, error = %e, "the disk's use is unknown; its kernel partitions are left as they are");
        }
    }
    Ok(parts)
}

/// Why a read must leave the kernel's view of `disk` alone, if it must: the host uses it (it
/// holds the root filesystem, swap, a stacked device or a member of a multi-device filesystem)
/// or something of it is mounted. Such
/// a disk's partitions in use are known to the kernel already, and re-reading or editing its
/// partitions is the business of whoever uses it, never of a read RPC.
fn host_uses(os: &Os, disk: &Disk) -> Result<Option<String>> {
    let u = usage(os, disk)?;
    Ok(u.system_use
        .or_else(|| {
            (!u.stacked.is_empty()).then(|| format!("holds stacked device(s) {:?}", u.stacked))
        })
        .or_else(|| {
            (!u.other_members.is_empty())
                .then(|| format!("shares a filesystem with {:?}", u.other_members))
        })
        .or_else(|| {
            (!u.mount_points.is_empty()).then(|| format!("is mounted at {:?}", u.mount_points))
        }))
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
