//! What PartitionDisk and ResizeVolume may do with a disk's partition table, decided from the
//! disk's first and last bytes alone.
//!
//! Pure, so every refusal is tested on byte images, and so PartitionDisk can decide twice: once
//! from a read-only look (a disk already partitioned is never opened exclusively, so re-staging
//! while its partition is mounted works) and again from a fresh read under `O_EXCL`, right
//! before it writes.
//!
//! The one write that could destroy data is finishing a cut-off table write, because it puts a
//! table where the disk's content says there is none. [`Gpt::serialize`] orders a table's writes
//! so that every cut leaves the start of the disk blank or holding only table structures; so a
//! repair is allowed only when that is what the start holds (LBA 0 blank or a protective MBR,
//! LBA 1 blank or a GPT header, and nothing [`signatures::probe`] knows in the bytes it reads).
//! A whole-disk filesystem that still carries an old backup table at the end fails that test.

use crate::disk_layout::{self as layout, lba0_blank, lba0_protective, start_holds_only_a_table};
use crate::gpt::{self, Found, Gpt, GptError, Partition};
use crate::signatures;

/// What PartitionDisk does to a disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Partitioned already: the kernel is only told about these partitions
    /// (number, start and length in bytes). Nothing is written.
    Partitioned(Vec<(u32, u64, u64)>),
    /// The GPT is whole but LBA 0 is still blank (a table write cut off before its last
    /// write): only the protective MBR is written.
    ProtectiveMbr(Gpt),
    /// A blank disk: a new GPT with one maximum-size partition is written.
    New,
    /// This table is written whole, with one maximum-size partition added if it has no data
    /// partition: a GPT without data partitions (`restored` false), or a table whose primary
    /// copy a cut-off write left damaged, restored from its backup (`restored` true).
    Write {
        /// The table to write.
        table: Gpt,
        /// The table came from the backup copy at the end of the disk.
        restored: bool,
    },
}

/// Decides what PartitionDisk does to a disk whose first bytes are `head` (at least
/// [`gpt::head_len`], ideally [`signatures::PROBE_LEN`]) and last bytes `tail` (at least
/// [`gpt::tail_len`], ideally also [`signatures::TAIL_PROBE_LEN`]). `Err` says why the disk is
/// refused.
pub fn plan(head: &[u8], tail: &[u8], sector: u64, total: u64) -> Result<Plan, String> {
    let plan = plan_from_tables(head, tail, sector, total)?;
    // A write of a new or restored table also needs the end of the disk free of anything a
    // member of a RAID keeps there.
    if matches!(plan, Plan::New | Plan::Write { .. })
        && let Some(sig) = signatures::probe_tail(tail, total.saturating_mul(sector))
    {
        return Err(format!(
            "the disk holds {} metadata at its end; refusing to write a partition table to it",
            sig.kind
        ));
    }
    Ok(plan)
}

/// The data partitions a valid backup table lists that the primary `t` does not (the same
/// unique GUID starting at the same sector counts as listed: a grown partition is the same one).
fn backup_only(t: &Gpt, tail: &[u8], sector: u64, total: u64) -> (Option<Gpt>, Vec<Partition>) {
    let Ok(Some(backup)) = Gpt::parse_backup(tail, sector, total) else {
        return (None, Vec::new());
    };
    let primary = t.partitions();
    let extra = backup
        .data_partitions()
        .into_iter()
        .filter(|p| !lists(&primary, p))
        .collect();
    (Some(backup), extra)
}

/// Whether `partitions` hold `p`: the same unique GUID starting at the same sector (its end may
/// differ: a grown partition is the same one).
fn lists(partitions: &[Partition], p: &Partition) -> bool {
    partitions
        .iter()
        .any(|q| q.unique_guid == p.unique_guid && q.first_lba == p.first_lba)
}

/// How a partition a table lists is named in a refusal.
fn shown(p: &Partition) -> String {
    format!(
        "partition {} ({}, sectors {}..={})",
        p.number, p.unique_guid, p.first_lba, p.last_lba
    )
}

fn plan_from_tables(head: &[u8], tail: &[u8], sector: u64, total: u64) -> Result<Plan, String> {
    match gpt::find(head, tail, sector, total) {
        Ok(Found::Primary(t)) => {
            let unpartitioned = t.data_partitions().is_empty();
            let blank_lba0 = lba0_blank(head, sector);
            if unpartitioned || blank_lba0 {
                start_holds_only_a_table(head, sector)?;
            }
            if unpartitioned {
                // A valid backup listing partitions the primary lacks: either a write of ours
                // cut off after the backup (the backup is the newer table, holding everything
                // the primary does), which is finished by writing the backup's table; or a
                // table that lies, which is refused rather than partitioned over.
                let (backup, extra) = backup_only(&t, tail, sector, total);
                if let (Some(backup), Some(p)) = (backup, extra.first()) {
                    let in_backup = backup.partitions();
                    let newer = t.partitions().iter().all(|q| lists(&in_backup, q));
                    if !newer {
                        return Err(format!(
                            "the backup GPT lists {} that the primary does not, and they disagree \
                             on the rest; refusing to write a partition table over it",
                            shown(p)
                        ));
                    }
                    return Ok(Plan::Write {
                        table: backup,
                        restored: true,
                    });
                }
                return Ok(Plan::Write {
                    table: t,
                    restored: false,
                });
            }
            if blank_lba0 {
                return Ok(Plan::ProtectiveMbr(t));
            }
            if let Some(sig) = layout::outside(head, tail, sector, total, &layout::gpt_extents(&t))
            {
                return Err(layout::conflict("a GPT", &sig));
            }
            Ok(Plan::Partitioned(t.data_extents()))
        }
        Ok(Found::Backup(t)) => {
            start_holds_only_a_table(head, sector).map_err(|why| {
                format!(
                    "the primary GPT is missing or damaged and a backup GPT is at the end of the disk, \
                     but {why}; the backup is stale, so the table is not restored over it"
                )
            })?;
            Ok(Plan::Write {
                table: t,
                restored: true,
            })
        }
        Ok(Found::None) => {
            let mbr = gpt::mbr_partitions(head);
            if mbr.iter().any(|p| p.kind == 0xEE) {
                return Err(
                    "a protective MBR but no readable GPT header; not rewriting a damaged table"
                        .into(),
                );
            }
            if !mbr.is_empty() {
                // Whole-disk content first: mke2fs and mkfs.xfs leave an old MBR in sector 0,
                // and syncing its partition would let the stage format over the filesystem.
                return layout::listed(head, tail, sector, total).map(Plan::Partitioned);
            }
            if let Some(sig) = signatures::probe(head) {
                return Err(format!(
                    "the disk holds {} directly, without a partition table; refusing to partition over it",
                    sig.kind
                ));
            }
            Ok(Plan::New)
        }
        Err(GptError::Short(why)) => Err(format!("GPT {why}; not rewriting it")),
        Err(e) => Err(format!("{e}; not rewriting it")),
    }
}

/// The table ResizeVolume grows: the valid primary GPT, never a repair. A damaged primary is
/// left for PartitionDisk, which restores it only where that cannot overwrite data. `Err` says
/// why the disk is refused.
pub fn table_to_grow(head: &[u8], tail: &[u8], sector: u64, total: u64) -> Result<Gpt, String> {
    match gpt::find(head, tail, sector, total) {
        Ok(Found::Primary(t)) => {
            if !lba0_blank(head, sector) && !lba0_protective(head) {
                return Err(
                    "LBA 0 holds an MBR with partitions besides the GPT's (a hybrid MBR); not rewriting it"
                        .into(),
                );
            }
            // Growing rewrites the backup from the primary: a partition only the backup lists
            // would be lost, and grown over.
            if let (_, extra) = backup_only(&t, tail, sector, total)
                && let Some(p) = extra.first()
            {
                return Err(format!(
                    "the backup GPT at the end of the disk lists {} that the primary does not; \
                     not rewriting the table",
                    shown(p)
                ));
            }
            Ok(t)
        }
        Ok(Found::Backup(_)) => Err(
            "the primary GPT is missing or damaged (only the backup at the end of the disk is valid); \
             ResizeVolume never repairs a table: call PartitionDisk, which restores it when nothing \
             else is on the disk"
                .into(),
        ),
        Ok(Found::None) => Err("not a GPT disk; only GPT partitions are resized".into()),
        Err(e) => Err(format!("{e}; not rewriting it")),
    }
}

/// Whether the disk's first `sector` bytes are all zero.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpt::LINUX_FILESYSTEM;
    use uuid::Uuid;

    const SECTOR: u64 = 512;
    const TOTAL: u64 = (64 << 20) / SECTOR;

    fn table() -> Gpt {
        let mut t = Gpt::new(SECTOR, TOTAL, Uuid::from_bytes([1; 16])).unwrap();
        t.add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
            .unwrap();
        t
    }

    /// A disk image with the first `writes` of `t`'s ordered writes applied.
    fn disk_with(t: &Gpt, writes: usize) -> Vec<u8> {
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        for (off, bytes) in t.serialize(TOTAL).into_iter().take(writes) {
            disk[off as usize..][..bytes.len()].copy_from_slice(&bytes);
        }
        disk
    }

    fn plan_of(disk: &[u8]) -> Result<Plan, String> {
        let head = &disk[..signatures::PROBE_LEN];
        let tail = &disk[disk.len() - signatures::TAIL_PROBE_LEN..];
        plan(head, tail, SECTOR, TOTAL)
    }

    fn grow_of(disk: &[u8]) -> Result<Gpt, String> {
        let head = &disk[..signatures::PROBE_LEN];
        let tail = &disk[disk.len() - gpt::tail_len(SECTOR)..];
        table_to_grow(head, tail, SECTOR, TOTAL)
    }

    /// An ext4 superblock magic where mkfs.ext4 puts it on a whole disk.
    fn put_ext4(disk: &mut [u8]) {
        disk[1024 + 56..1024 + 58].copy_from_slice(&0xEF53u16.to_le_bytes());
    }

    #[test]
    fn a_raid_member_with_its_superblock_at_the_end_is_never_partitioned() {
        // md 0.90: blank start, superblock 64 KiB-aligned 64 KiB before the end.
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        let at = (disk.len() & !0xFFFF) - 0x10000;
        disk[at..at + 4].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
        let why = plan_of(&disk).unwrap_err();
        assert!(
            why.contains("linux_raid_member metadata at its end"),
            "{why}"
        );
        // The same disk without it gets a table.
        disk[at..at + 4].fill(0);
        assert_eq!(plan_of(&disk), Ok(Plan::New));
    }

    #[test]
    fn a_partitioned_disk_is_only_synced() {
        let disk = disk_with(&table(), 4);
        let p = &table().data_partitions()[0];
        assert_eq!(
            plan_of(&disk),
            Ok(Plan::Partitioned(vec![(
                1,
                p.first_lba * SECTOR,
                p.sectors() * SECTOR
            )]))
        );
    }

    #[test]
    fn every_cut_of_a_table_write_on_a_blank_disk_is_finished() {
        let t = table();
        assert_eq!(plan_of(&disk_with(&t, 0)), Ok(Plan::New));
        for cut in [1, 2] {
            assert_eq!(
                plan_of(&disk_with(&t, cut)),
                Ok(Plan::Write {
                    table: t.clone(),
                    restored: true
                }),
                "cut after {cut}"
            );
        }
        assert_eq!(plan_of(&disk_with(&t, 3)), Ok(Plan::ProtectiveMbr(t)));
    }

    #[test]
    fn a_whole_disk_filesystem_with_a_stale_backup_is_refused() {
        // Regression case: mkfs.ext4 on the whole disk of a disk once partitioned; the backup GPT
        // at the end survived.
        let mut disk = disk_with(&table(), 4);
        disk[..SECTOR as usize * 34].fill(0);
        put_ext4(&mut disk);
        let why = plan_of(&disk).unwrap_err();
        assert!(
            why.contains("ext2") && why.contains("backup is stale"),
            "{why}"
        );
        // xfs puts its magic at byte 0: LBA 0 is not blank.
        let mut disk = disk_with(&table(), 4);
        disk[..SECTOR as usize * 34].fill(0);
        disk[..4].copy_from_slice(b"XFSB");
        let why = plan_of(&disk).unwrap_err();
        assert!(why.contains("LBA 0 holds data"), "{why}");
        // Anything in LBA 1 but a GPT header.
        let mut disk = disk_with(&table(), 4);
        disk[..SECTOR as usize * 34].fill(0);
        disk[SECTOR as usize + 7] = 1;
        assert!(plan_of(&disk).unwrap_err().contains("LBA 1 holds data"));
        // A signature deeper in the probed bytes (md 1.2 superblock at 4 KiB).
        let mut disk = disk_with(&table(), 1);
        disk[4096..4100].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
        assert!(plan_of(&disk).unwrap_err().contains("linux_raid_member"));
    }

    #[test]
    fn a_valid_primary_without_its_mbr_is_finished_only_over_nothing_else() {
        let mut disk = disk_with(&table(), 3);
        assert!(matches!(plan_of(&disk), Ok(Plan::ProtectiveMbr(_))));
        disk[4096..4100].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
        // The array's CRC now fails: the backup is found, and refused for the signature.
        assert!(plan_of(&disk).unwrap_err().contains("linux_raid_member"));
    }

    #[test]
    fn a_table_without_data_partitions_gets_one() {
        let empty = Gpt::new(SECTOR, TOTAL, Uuid::from_bytes([1; 16])).unwrap();
        for writes in [3, 4] {
            assert_eq!(
                plan_of(&disk_with(&empty, writes)),
                Ok(Plan::Write {
                    table: empty.clone(),
                    restored: false
                })
            );
        }
    }

    #[test]
    fn damaged_tables_are_refused() {
        let mut disk = disk_with(&table(), 4);
        let n = disk.len();
        disk[n - gpt::tail_len(SECTOR)..].fill(0);
        disk[SECTOR as usize + 20] ^= 1; // header CRC
        assert!(plan_of(&disk).unwrap_err().contains("not rewriting"));
        // A protective MBR alone.
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        disk[..SECTOR as usize].copy_from_slice(&gpt::protective_mbr(SECTOR as usize, TOTAL));
        assert!(plan_of(&disk).unwrap_err().contains("protective MBR"));
    }

    #[test]
    fn raw_filesystems_are_refused_and_mbr_disks_are_partitioned() {
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        put_ext4(&mut disk);
        assert!(plan_of(&disk).unwrap_err().contains("directly"));
        let mut disk = vec![0u8; (TOTAL * SECTOR) as usize];
        let e = &mut disk[446..462];
        e[4] = 0x83;
        e[8..12].copy_from_slice(&2048u32.to_le_bytes());
        e[12..16].copy_from_slice(&4096u32.to_le_bytes());
        disk[510] = 0x55;
        disk[511] = 0xAA;
        assert_eq!(
            plan_of(&disk),
            Ok(Plan::Partitioned(vec![(1, 2048 * SECTOR, 4096 * SECTOR)]))
        );
    }

    #[test]
    fn resize_grows_only_a_whole_primary_and_never_repairs() {
        let t = table();
        assert_eq!(grow_of(&disk_with(&t, 4)), Ok(t.clone()));
        // LBA 0 still blank: the primary is whole; writing the grown table adds the MBR.
        assert_eq!(grow_of(&disk_with(&t, 3)), Ok(t.clone()));
        for cut in [1, 2] {
            let why = grow_of(&disk_with(&t, cut)).unwrap_err();
            assert!(why.contains("never repairs"), "{why}");
        }
        assert!(
            grow_of(&disk_with(&t, 0))
                .unwrap_err()
                .contains("not a GPT")
        );
        // A hybrid MBR: partitions besides the 0xEE entry.
        let mut disk = disk_with(&t, 4);
        let e = &mut disk[462..478];
        e[4] = 0x83;
        e[8..12].copy_from_slice(&2048u32.to_le_bytes());
        e[12..16].copy_from_slice(&4096u32.to_le_bytes());
        assert!(grow_of(&disk).unwrap_err().contains("hybrid"));
    }

    /// A table write cut off after the backup, over an older valid table without data
    /// partitions: the backup is the newer table and is written whole (the partition keeps its
    /// identity); a backup that drops what the primary lists is refused.
    #[test]
    fn a_newer_backup_over_an_empty_primary_is_finished_and_a_disagreeing_one_refused() {
        let empty = Gpt::new(SECTOR, TOTAL, Uuid::from_bytes([1; 16])).unwrap();
        let mut disk = disk_with(&empty, 4);
        let newer = table();
        let writes = newer.serialize(TOTAL);
        let (off, bytes) = &writes[0];
        disk[*off as usize..][..bytes.len()].copy_from_slice(bytes);
        assert_eq!(
            plan_of(&disk),
            Ok(Plan::Write {
                table: newer.clone(),
                restored: true,
            })
        );
        // The primary lists a reserved partition the backup does not have: they disagree.
        let mut reserved = Gpt::new(SECTOR, TOTAL, Uuid::from_bytes([1; 16])).unwrap();
        reserved
            .add_max_partition(gpt::MICROSOFT_RESERVED, Uuid::from_bytes([9; 16]))
            .unwrap();
        let mut disk = disk_with(&reserved, 4);
        disk[*off as usize..][..bytes.len()].copy_from_slice(bytes);
        let why = plan_of(&disk).unwrap_err();
        assert!(why.contains("the backup GPT lists partition 1"), "{why}");
    }

    /// ResizeVolume rewrites both copies: a backup listing a partition the primary lacks stops
    /// it; a backup that only grew the same partition (a cut-off resize) does not.
    #[test]
    fn resize_refuses_a_backup_listing_another_partition() {
        let t = table();
        let mut disk = disk_with(&t, 4);
        let mut other = Gpt::new(SECTOR, TOTAL, Uuid::from_bytes([1; 16])).unwrap();
        other
            .add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([7; 16]))
            .unwrap();
        let (off, bytes) = &other.serialize(TOTAL)[0];
        disk[*off as usize..][..bytes.len()].copy_from_slice(bytes);
        let why = grow_of(&disk).unwrap_err();
        assert!(why.contains("lists partition 1"), "{why}");
        assert_eq!(grow_of(&disk_with(&t, 4)), Ok(t));
    }
}
