//! Which partitions a disk's own bytes list, and whether anything lies on the whole disk
//! besides them. Pure; the hosts read the bytes, and [`crate::partition_plan`] decides from them.
//!
//! The kernel's list of partitions is not the disk's: a partition added with BLKPG stays after
//! the image it belonged to is detached from a loop device, and a stale MBR stays in sector 0
//! when a filesystem is later made on the whole disk (mke2fs and mkfs.xfs leave it without
//! discard). A partition is a volume of a disk only when the disk's table lists it, and a table
//! counts only when nothing else sits on the whole disk outside the partitions it lists.

use crate::gpt::{self, Found};
use crate::signatures::{self, Signature};

/// A partition as the disk's table lists it: number, start and length in bytes.
pub type Extent = (u32, u64, u64);

/// What lies on the whole disk outside the byte ranges `covered` lists (start, length), beside
/// a partition table's own structures: the disk's first bytes `head` and last bytes `tail`
/// (of a disk of `total` sectors of `sector` bytes) with every byte a partition covers blanked,
/// probed as a whole disk ([`signatures::probe`] and [`signatures::probe_tail`]). A filesystem
/// inside a partition is therefore never taken for one on the whole disk.
pub fn outside(
    head: &[u8],
    tail: &[u8],
    sector: u64,
    total: u64,
    covered: &[(u64, u64)],
) -> Option<Signature> {
    let len = total.saturating_mul(sector);
    let blank = |buf: &[u8], at: u64| -> Vec<u8> {
        let mut b = buf.to_vec();
        let end = at.saturating_add(b.len() as u64);
        for &(start, n) in covered {
            let (from, to) = (start.max(at), start.saturating_add(n).min(end));
            if from < to {
                b[(from - at) as usize..(to - at) as usize].fill(0);
            }
        }
        b
    };
    let head = blank(head, 0);
    if let Some(sig) = signatures::probe(&head).filter(|s| !matches!(s.kind, "gpt" | "dos")) {
        return Some(sig);
    }
    let tail_at = len.checked_sub(tail.len() as u64)?;
    signatures::probe_tail(&blank(tail, tail_at), len)
}

/// The partitions the disk's own table lists (GPT data partitions of the valid primary, or of
/// the backup where a cut-off write left the primary damaged and the start holds nothing else;
/// MBR data entries), empty when it has no table. `Err` says why the disk's partitions cannot
/// be trusted: a damaged or lying table, or a table with content on the whole disk outside its
/// partitions (a whole-disk filesystem over a stale table, or a table written over a RAID
/// member).
pub fn listed(head: &[u8], tail: &[u8], sector: u64, total: u64) -> Result<Vec<Extent>, String> {
    let found = match gpt::find(head, tail, sector, total) {
        // A backup at the end of a disk whose start holds something else is a stale copy
        // (a whole-disk filesystem made over an old GPT), not the disk's table.
        Ok(Found::Backup(_)) if start_holds_only_a_table(head, sector).is_err() => Ok(Found::None),
        found => found,
    };
    let (kind, parts, covered) = match found {
        Ok(Found::Primary(t)) => ("a GPT", t.data_extents(), gpt_extents(&t)),
        Ok(Found::Backup(t)) => ("a GPT (its backup)", t.data_extents(), gpt_extents(&t)),
        Ok(Found::None) => {
            let mbr = gpt::mbr_partitions(head);
            if mbr.iter().any(|p| p.kind == 0xEE) {
                return Err("a protective MBR but no readable GPT header".into());
            }
            if mbr.is_empty() {
                return Ok(Vec::new());
            }
            if let Some(why) = gpt::mbr_problem(&mbr, total) {
                return Err(format!("{why}; the table is not trusted"));
            }
            let covered = mbr
                .iter()
                .map(|p| {
                    (
                        u64::from(p.first_lba) * sector,
                        u64::from(p.sectors) * sector,
                    )
                })
                .collect();
            (
                "an MBR partition table",
                gpt::mbr_data_extents(head, sector),
                covered,
            )
        }
        Err(e) => return Err(e.to_string()),
    };
    if let Some(sig) = outside(head, tail, sector, total, &covered) {
        return Err(conflict(kind, &sig));
    }
    Ok(parts)
}

/// Why a table and a whole-disk signature together are refused.
pub fn conflict(table: &str, sig: &Signature) -> String {
    format!(
        "the disk holds {table} and also {}{} on the whole disk, outside its partitions \
         (a stale table over a whole-disk volume, or a table written over one); \
         neither is trusted",
        sig.kind,
        sig.uuid
            .map(|u| format!(" (UUID {})", signatures::uuid_string(&u)))
            .unwrap_or_default()
    )
}

/// Every partition of `t` (data or not) as (start, length) in bytes.
pub fn gpt_extents(t: &gpt::Gpt) -> Vec<(u64, u64)> {
    let sector = t.sector;
    t.partitions()
        .iter()
        .map(|p| (p.first_lba * sector, p.sectors() * sector))
        .collect()
}

/// Whether LBA 0 (the first `sector` bytes of `head`) is all zeros.
pub fn lba0_blank(head: &[u8], sector: u64) -> bool {
    head.get(..sector as usize)
        .is_some_and(|b| b.iter().all(|&x| x == 0))
}

/// Whether LBA 0 is a protective MBR: one partition entry, of type 0xEE.
pub fn lba0_protective(head: &[u8]) -> bool {
    matches!(gpt::mbr_partitions(head).as_slice(), [p] if p.kind == 0xEE)
}

/// `Ok` when the start of the disk holds nothing a table write could destroy: LBA 0 blank or a
/// protective MBR, LBA 1 blank or a GPT header, and no signature [`signatures::probe`] knows
/// other than a partition table's own. `Err` names what was found.
pub fn start_holds_only_a_table(head: &[u8], sector: u64) -> Result<(), String> {
    if !lba0_blank(head, sector) && !lba0_protective(head) {
        return Err(if gpt::mbr_partitions(head).is_empty() {
            "LBA 0 holds data (not a protective MBR)".to_string()
        } else {
            "LBA 0 holds an MBR partition table".to_string()
        });
    }
    let s = sector as usize;
    let lba1 = head.get(s..2 * s).unwrap_or_default();
    if !lba1.iter().all(|&b| b == 0) && !gpt::has_signature(head, sector) {
        return Err("LBA 1 holds data (not a GPT header)".into());
    }
    match signatures::probe(head) {
        Some(sig) if !matches!(sig.kind, "gpt" | "dos") => Err(format!(
            "the disk holds {} at its start{}",
            sig.kind,
            sig.uuid
                .map(|u| format!(" (UUID {})", signatures::uuid_string(&u)))
                .unwrap_or_default()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpt::{Gpt, LINUX_FILESYSTEM};
    use uuid::Uuid;

    const SECTOR: u64 = 512;
    const TOTAL: u64 = (64 << 20) / SECTOR;

    fn ends(disk: &[u8]) -> (&[u8], &[u8]) {
        let tail = signatures::TAIL_PROBE_LEN.max(gpt::tail_len(SECTOR));
        (&disk[..signatures::PROBE_LEN], &disk[disk.len() - tail..])
    }

    fn listed_on(disk: &[u8]) -> Result<Vec<Extent>, String> {
        let (h, t) = ends(disk);
        listed(h, t, SECTOR, TOTAL)
    }

    fn mbr(disk: &mut [u8], first: u32, sectors: u32) {
        let e = &mut disk[446..462];
        e[4] = 0x83;
        e[8..12].copy_from_slice(&first.to_le_bytes());
        e[12..16].copy_from_slice(&sectors.to_le_bytes());
        disk[510] = 0x55;
        disk[511] = 0xAA;
    }

    fn ext4_at(disk: &mut [u8], at: usize) {
        disk[at + 1024 + 56..at + 1024 + 58].copy_from_slice(&[0x53, 0xEF]);
    }

    #[test]
    fn a_disk_without_a_table_lists_nothing() {
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        assert_eq!(listed_on(&disk), Ok(vec![]));
        disk[..6].copy_from_slice(b"LUKS\xba\xbe");
        assert_eq!(listed_on(&disk), Ok(vec![]));
    }

    #[test]
    fn an_mbr_over_a_whole_disk_filesystem_is_not_trusted() {
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        mbr(&mut disk, 2048, 4096);
        // A filesystem inside the partition is the partition's.
        ext4_at(&mut disk, 2048 * 512);
        assert_eq!(listed_on(&disk), Ok(vec![(1, 2048 * 512, 4096 * 512)]));
        // One at the start of the whole disk is not.
        ext4_at(&mut disk, 0);
        let why = listed_on(&disk).unwrap_err();
        assert!(why.contains("MBR") && why.contains("ext2"), "{why}");
    }

    #[test]
    fn a_raid_superblock_at_the_end_outside_the_partitions_is_found() {
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        mbr(&mut disk, 2048, 4096);
        let at = ((disk.len() as u64 & !0xFFFF) - 0x1_0000) as usize;
        disk[at..at + 4].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
        assert!(listed_on(&disk).unwrap_err().contains("linux_raid_member"));
        // Inside a partition that reaches the end, it is the partition's.
        mbr(&mut disk, 2048, (TOTAL - 2048) as u32);
        assert_eq!(
            listed_on(&disk),
            Ok(vec![(1, 2048 * 512, (TOTAL - 2048) * 512)])
        );
    }

    #[test]
    fn a_gpt_lists_its_data_partitions() {
        let mut t = Gpt::new(SECTOR, TOTAL, Uuid::from_bytes([1; 16])).unwrap();
        t.add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
            .unwrap();
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        for (off, bytes) in t.serialize(TOTAL) {
            disk[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
        }
        ext4_at(&mut disk, 2048 * 512);
        assert_eq!(listed_on(&disk), Ok(t.data_extents()));
    }
}
