//! Disk content a tenant controls: the first byte picks the sector size (even: 512, odd: 4096),
//! the rest is the whole disk. The daemon's readers run on it exactly as PartitionDisk,
//! ResizeVolume and FormatVolume call them (the same head and tail lengths), and what they
//! decide must never overwrite data:
//! - a plan that writes a table (new, restored or completed) only ever does so over a start of
//!   the disk that holds no signature but a partition table's own, and an end that holds no
//!   RAID superblock;
//! - a table it writes, or grows, has its partitions inside the usable sectors and apart;
//! - nothing panics, and nothing allocates by a length read from the disk;
//! - the same bytes read as a device's identification page (VPD 0x83) are walked within them.

use csi_proxy_formats::gpt::{self, Gpt};
use csi_proxy_formats::partition_plan::{self, Plan};
use csi_proxy_formats::{scsi_vpd, signatures};

/// Checks that `t`'s partitions lie inside its usable sectors and do not share a sector.
fn sound(t: &Gpt, total: u64) {
    assert!(
        t.last_usable < total,
        "usable end {} on {total}",
        t.last_usable
    );
    let mut parts = t.partitions();
    parts.sort_by_key(|p| p.first_lba);
    for p in &parts {
        assert!(p.first_lba <= p.last_lba, "{p:?}");
        assert!(
            p.first_lba >= t.first_usable && p.last_lba <= t.last_usable,
            "{p:?} in {t:?}"
        );
    }
    for w in parts.windows(2) {
        assert!(w[1].first_lba > w[0].last_lba, "{w:?} overlap");
    }
}

/// One input; see the module doc.
pub fn run(data: &[u8]) {
    let Some((&pick, image)) = data.split_first() else {
        return;
    };
    let sector: u64 = if pick & 1 == 0 { 512 } else { 4096 };
    let total = image.len() as u64 / sector;
    let disk = &image[..(total * sector) as usize];
    // The lengths the Linux host reads (linux/disk.rs read_ends and read_tail).
    let head = &disk[..disk
        .len()
        .min(signatures::PROBE_LEN.max(gpt::head_len(sector)))];
    let tail_len = gpt::tail_len(sector)
        .max(signatures::TAIL_PROBE_LEN)
        .next_multiple_of(sector as usize);
    let tail = disk
        .len()
        .checked_sub(tail_len)
        .map_or(&[][..], |at| &disk[at..]);

    let found = signatures::probe(head);
    let at_end = signatures::probe_tail(tail, disk.len() as u64);
    let _ = signatures::superblock_usage(head);
    let _ = gpt::find(head, tail, sector, total);
    let _ = gpt::mbr_partitions(head);
    // A device's identification page is its own answer too (a tenant's iSCSI target): the walk
    // never reads past the bytes given.
    let walked: usize = scsi_vpd::page83(image).map(|d| 4 + d.id.len()).sum();
    assert!(
        walked + 4 <= image.len().max(4),
        "walked {walked} of {}",
        image.len()
    );

    let data_at_start = found
        .as_ref()
        .is_some_and(|s| !matches!(s.kind, "gpt" | "dos"));
    match partition_plan::plan(head, tail, sector, total) {
        Ok(Plan::New) => {
            assert!(
                found.is_none() && at_end.is_none(),
                "new table over {found:?} {at_end:?}"
            );
        }
        Ok(Plan::Write { table, restored }) => {
            assert!(
                !data_at_start && at_end.is_none(),
                "table written over {found:?} {at_end:?} (restored {restored})"
            );
            sound(&table, total);
        }
        Ok(Plan::ProtectiveMbr(table)) => {
            assert!(!data_at_start, "MBR written over {found:?}");
            sound(&table, total);
        }
        Ok(Plan::Partitioned(_)) | Err(_) => {}
    }
    if let Ok(table) = partition_plan::table_to_grow(head, tail, sector, total) {
        sound(&table, total);
    }
}
