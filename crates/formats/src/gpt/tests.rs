//! The table on byte fixtures: round trips, corruption, the backup copy, MBR tables.

use super::*;

/// A disk image in memory with the writes of [`Gpt::serialize`] applied.
fn image(total: u64, sector: u64, gpt: &Gpt) -> Vec<u8> {
    let mut disk = vec![0u8; (total * sector) as usize];
    for (off, bytes) in gpt.serialize(total) {
        disk[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
    }
    disk
}

/// What [`find`] sees on `disk` (an image of `total` sectors).
fn found(disk: &[u8], sector: u64, total: u64) -> Found {
    let tail = &disk[disk.len() - tail_len(sector)..];
    find(&disk[..head_len(sector)], tail, sector, total).unwrap()
}

#[test]
fn a_table_write_cut_off_after_any_write_leaves_a_table_the_retry_recognises() {
    for sector in [512u64, 4096] {
        let total = (64 << 20) / sector;
        let mut gpt = Gpt::new(sector, total, Uuid::from_bytes([1; 16])).unwrap();
        gpt.add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
            .unwrap();
        let writes = gpt.serialize(total);
        assert_eq!(writes.len(), 4);
        assert_eq!(writes.last().unwrap().0, 0, "LBA 0 is written last");
        // A fresh disk, cut off after each write.
        for done in 0..=writes.len() {
            let mut disk = vec![0u8; (total * sector) as usize];
            for (off, bytes) in &writes[..done] {
                disk[*off as usize..][..bytes.len()].copy_from_slice(bytes);
            }
            let f = found(&disk, sector, total);
            match done {
                0 => assert!(matches!(f, Found::None), "{sector}: {f:?}"),
                1 | 2 => assert!(
                    matches!(&f, Found::Backup(t) if *t == gpt),
                    "{sector} after {done} writes: {f:?}"
                ),
                _ => assert!(
                    matches!(&f, Found::Primary(t) if *t == gpt),
                    "{sector} after {done} writes: {f:?}"
                ),
            }
            assert_eq!(
                mbr_partitions(&disk[..sector as usize]).len(),
                usize::from(done == 4),
                "the protective MBR comes with the last write"
            );
            // Restoring from what was found gives the whole table.
            if let Found::Backup(t) | Found::Primary(t) = f {
                for (off, bytes) in t.serialize(total) {
                    disk[off as usize..][..bytes.len()].copy_from_slice(&bytes);
                }
                assert!(matches!(found(&disk, sector, total), Found::Primary(t) if t == gpt));
            }
        }

        // A grow of the disk and the partition, cut off after each write.
        let old = image(total, sector, &gpt);
        let bigger = total * 2;
        let mut grown = gpt.clone();
        grown.relocate_end(bigger).unwrap();
        let last = grown.max_last_lba(1).unwrap();
        grown.grow_partition(1, last).unwrap();
        let writes = grown.serialize(bigger);
        for done in 0..=writes.len() {
            let mut disk = old.clone();
            disk.resize((bigger * sector) as usize, 0);
            for (off, bytes) in &writes[..done] {
                disk[*off as usize..][..bytes.len()].copy_from_slice(bytes);
            }
            let f = found(&disk, sector, bigger);
            match done {
                // The old primary still stands; the retry grows again.
                0 | 1 => assert!(
                    matches!(&f, Found::Primary(t) if *t == gpt),
                    "{sector} grow after {done}: {f:?}"
                ),
                // New array under the old header: the new backup is the table.
                2 => assert!(
                    matches!(&f, Found::Backup(t) if *t == grown),
                    "{sector} grow after {done}: {f:?}"
                ),
                _ => assert!(
                    matches!(&f, Found::Primary(t) if *t == grown),
                    "{sector} grow after {done}: {f:?}"
                ),
            }
        }
    }
}

#[test]
fn a_damaged_backup_or_foreign_bytes_are_not_taken_for_a_table() {
    let (sector, total) = (512u64, (64u64 << 20) / 512);
    let mut gpt = Gpt::new(sector, total, Uuid::from_bytes([1; 16])).unwrap();
    gpt.add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
        .unwrap();
    let writes = gpt.serialize(total);
    let mut disk = vec![0u8; (total * sector) as usize];
    let (off, bytes) = &writes[0];
    disk[*off as usize..][..bytes.len()].copy_from_slice(bytes);
    // One flipped bit in the backup array: nothing is found.
    disk[*off as usize + 40] ^= 1;
    assert!(matches!(found(&disk, sector, total), Found::None));
    // A damaged primary and no backup: the primary's error.
    let mut disk = image(total, sector, &gpt);
    disk[sector as usize + 20] ^= 1;
    let n = disk.len();
    disk[n - tail_len(sector)..].fill(0);
    let tail = &disk[n - tail_len(sector)..];
    assert!(find(&disk[..head_len(sector)], tail, sector, total).is_err());
}

#[test]
fn crc32_matches_the_ieee_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn guids_round_trip_in_mixed_endian() {
    let g = BASIC_DATA;
    assert_eq!(
        g.to_bytes_le(),
        [
            0xa2, 0xa0, 0xd0, 0xeb, 0xe5, 0xb9, 0x33, 0x44, 0x87, 0xc0, 0x68, 0xb6, 0xb7, 0x26,
            0x99, 0xc7
        ]
    );
    assert_eq!(g.to_string(), "ebd0a0a2-b9e5-4433-87c0-68b6b72699c7");
    let r = random_guid([0xFF; 16]).to_string();
    assert_eq!(&r[14..15], "4", "{r}");
    assert!(matches!(&r[19..20], "8" | "9" | "a" | "b"), "{r}");
}

#[test]
fn a_new_table_with_one_max_partition_parses_back() {
    for sector in [512u64, 4096] {
        let total = (64 << 20) / sector; // 64 MiB
        let mut gpt = Gpt::new(sector, total, Uuid::from_bytes([1; 16])).unwrap();
        let p = gpt
            .add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
            .unwrap();
        assert_eq!(p.number, 1);
        assert_eq!(p.first_lba * sector, 1 << 20, "1 MiB aligned");
        let array = (128 * 128u64).div_ceil(sector);
        assert_eq!(
            p.last_lba,
            total - 2 - array,
            "runs to the last usable sector"
        );
        let disk = image(total, sector, &gpt);
        let back = Gpt::parse(&disk[..head_len(sector)], sector, total)
            .unwrap()
            .unwrap();
        assert_eq!(back.partitions(), vec![p.clone()]);
        assert_eq!(back.disk_guid, Uuid::from_bytes([1; 16]));
        assert_eq!(back.alternate_lba, total - 1);
        // Protective MBR.
        let mbr = mbr_partitions(&disk[..512]);
        assert_eq!(mbr.len(), 1);
        assert_eq!(mbr[0].kind, 0xEE);
        // Backup header at the last sector, pointing back at LBA 1 and its own array.
        let b = &disk[((total - 1) * sector) as usize..];
        assert_eq!(&b[..8], b"EFI PART");
        assert_eq!(u64_at(b, 24), total - 1);
        assert_eq!(u64_at(b, 32), 1);
        assert_eq!(u64_at(b, 72), total - 1 - array);
        let mut h = b[..92].to_vec();
        h[16..20].fill(0);
        assert_eq!(crc32(&h), u32_at(b, 16));
    }
}

#[test]
fn corruption_is_reported_not_trusted() {
    let total = 131072;
    let mut gpt = Gpt::new(512, total, Uuid::from_bytes([1; 16])).unwrap();
    gpt.add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
        .unwrap();
    let disk = image(total, 512, &gpt);
    let head = &disk[..head_len(512)];
    let mut bad = head.to_vec();
    bad[512 + 48] ^= 1; // last usable
    assert!(matches!(
        Gpt::parse(&bad, 512, total),
        Err(GptError::Damaged(m)) if m.contains("header CRC")
    ));
    let mut bad = head.to_vec();
    bad[1024 + 40] ^= 1; // entry 1 last LBA
    assert!(matches!(
        Gpt::parse(&bad, 512, total),
        Err(GptError::Damaged(m)) if m.contains("entry array CRC")
    ));
    assert!(matches!(
        Gpt::parse(&head[..2000], 512, total),
        Err(GptError::Short(_))
    ));
    // A table claiming more sectors than the disk has.
    assert!(Gpt::parse(head, 512, 1000).is_err());
    assert_eq!(Gpt::parse(&vec![0; 4096], 512, total), Ok(None));
}

/// Two entries sharing sectors: a format of one would destroy the other, so the table is
/// refused, not trusted (before, it parsed and a restore could write it back).
#[test]
fn overlapping_partitions_are_refused() {
    let total = 131072;
    let mut gpt = Gpt::new(512, total, Uuid::from_bytes([1; 16])).unwrap();
    let p = gpt
        .add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
        .unwrap();
    let disk = image(total, 512, &gpt);
    let mut head = disk[..head_len(512)].to_vec();
    // Entry 2: another partition inside the first one.
    let e2 = 1024 + 128;
    head[e2..e2 + 16].copy_from_slice(&LINUX_FILESYSTEM.to_bytes_le());
    head[e2 + 16..e2 + 32].copy_from_slice(&[3; 16]);
    head[e2 + 32..e2 + 40].copy_from_slice(&(p.first_lba + 8).to_le_bytes());
    head[e2 + 40..e2 + 48].copy_from_slice(&(p.first_lba + 100).to_le_bytes());
    let array = crc32(&head[1024..1024 + 128 * 128]);
    head[512 + 88..512 + 92].copy_from_slice(&array.to_le_bytes());
    head[512 + 16..512 + 20].fill(0);
    let header = crc32(&head[512..512 + 92]);
    head[512 + 16..512 + 20].copy_from_slice(&header.to_le_bytes());
    match Gpt::parse(&head, 512, total) {
        Err(GptError::Invalid(m)) => assert!(m.contains("overlap"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn growing_moves_the_backup_and_extends_the_last_partition() {
    let small = 131072; // 64 MiB of 512-byte sectors
    let mut gpt = Gpt::new(512, small, Uuid::from_bytes([1; 16])).unwrap();
    let p = gpt
        .add_max_partition(LINUX_FILESYSTEM, Uuid::from_bytes([2; 16]))
        .unwrap();
    let big = small * 2;
    gpt.relocate_end(big).unwrap();
    let max = gpt.max_last_lba(1).unwrap();
    assert_eq!(max, big - 34);
    gpt.grow_partition(1, max).unwrap();
    let disk = image(big, 512, &gpt);
    let back = Gpt::parse(&disk[..head_len(512)], 512, big)
        .unwrap()
        .unwrap();
    let q = &back.partitions()[0];
    assert_eq!(q.first_lba, p.first_lba, "start never moves");
    assert_eq!(q.last_lba, big - 34);
    // Shrinking, or growing into the next partition, is refused.
    assert!(gpt.grow_partition(1, p.last_lba).is_err());
    assert!(gpt.grow_partition(1, max + 1).is_err());
    assert!(gpt.relocate_end(small / 2).is_err());
}

#[test]
fn max_partition_takes_the_largest_gap_and_next_partition_bounds_growth() {
    let total = 262144;
    let mut gpt = Gpt::new(512, total, Uuid::from_bytes([1; 16])).unwrap();
    // Hand-place a small partition near the end.
    let e = &mut gpt.entries[128..256];
    e[0..16].copy_from_slice(&MICROSOFT_RESERVED.to_bytes_le());
    e[32..40].copy_from_slice(&200000u64.to_le_bytes());
    e[40..48].copy_from_slice(&200999u64.to_le_bytes());
    assert!(gpt.data_partitions().is_empty(), "MSR is not data");
    let p = gpt
        .add_max_partition(BASIC_DATA, Uuid::from_bytes([3; 16]))
        .unwrap();
    assert_eq!(p.number, 1, "first free entry");
    assert_eq!((p.first_lba, p.last_lba), (2048, 199999));
    assert_eq!(gpt.max_last_lba(1).unwrap(), 199999);
    assert_eq!(gpt.max_last_lba(2).unwrap(), total - 34);
}

#[test]
fn mbr_tables_and_boot_sectors_are_told_apart() {
    let mut lba0 = vec![0u8; 512];
    assert!(mbr_partitions(&lba0).is_empty());
    lba0[510] = 0x55;
    lba0[511] = 0xAA;
    assert!(mbr_partitions(&lba0).is_empty(), "signature alone");
    lba0[446 + 16 + 4] = 0x83;
    lba0[446 + 16 + 8..446 + 16 + 12].copy_from_slice(&2048u32.to_le_bytes());
    lba0[446 + 16 + 12..446 + 16 + 16].copy_from_slice(&4096u32.to_le_bytes());
    lba0[440..444].copy_from_slice(&0xDEADBEEFu32.to_le_bytes());
    assert_eq!(
        mbr_partitions(&lba0),
        vec![MbrPartition {
            number: 2,
            kind: 0x83,
            first_lba: 2048,
            sectors: 4096
        }]
    );
    assert_eq!(mbr_disk_signature(&lba0), 0xDEADBEEF);
    lba0[446 + 16] = 0x33; // not a boot flag: code, not a table
    assert!(mbr_partitions(&lba0).is_empty());
}

/// Header fields a table write trusts: a backup LBA past the disk or with usable sectors
/// reaching it, usable sectors inside the primary array, an array outside its place.
#[test]
fn header_geometry_that_does_not_fit_the_disk_is_refused() {
    let total = 131_072u64;
    let ok = |alt, entries, first, last| check_geometry(1, alt, entries, 32, (first, last), total);
    assert!(ok(total - 1, 2, 34, total - 34).is_ok());
    // A disk that grew: the backup where the old end was, usable sectors before it.
    assert!(ok(total / 2, 2, 34, total / 2 - 33).is_ok());
    for (alt, entries, first, last) in [
        (total, 2, 34, total - 34),      // backup past the disk
        (total / 2, 2, 34, total - 34),  // usable sectors over the backup
        (1, 2, 34, 40),                  // backup over the primary
        (total - 1, 2, 2, total - 34),   // usable sectors inside the primary array
        (total - 1, 1, 34, total - 34),  // array over the primary header
        (total - 1, 40, 34, total - 34), // array inside the usable sectors
        (total - 1, 2, 100, 50),         // empty usable range
    ] {
        assert!(
            ok(alt, entries, first, last).is_err(),
            "{alt} {entries} {first} {last}"
        );
    }
    // The backup header's array lies between the usable sectors and itself.
    assert!(
        check_geometry(
            total - 1,
            total - 1,
            total - 33,
            32,
            (34, total - 34),
            total
        )
        .is_ok()
    );
    assert!(check_geometry(total - 1, total - 1, 2, 32, (34, total - 34), total).is_err());
}

#[test]
fn mbr_entries_are_checked_against_each_other_and_the_disk() {
    let p = |number, first_lba, sectors| MbrPartition {
        number,
        kind: 0x83,
        first_lba,
        sectors,
    };
    assert_eq!(
        mbr_problem(&[p(1, 2048, 1000), p(2, 3048, 1000)], 10_000),
        None
    );
    for (parts, says) in [
        (vec![p(1, 0, 100)], "LBA 0"),
        (vec![p(1, 2048, 9000)], "past the end"),
        (vec![p(2, 5000, 100), p(1, 2048, 3000)], "overlap"),
    ] {
        let why = mbr_problem(&parts, 10_000).unwrap();
        assert!(why.contains(says), "{why}");
    }
    // Extended containers (0x05, 0x0F, 0x85) are never data.
    let mut lba0 = vec![0u8; 512];
    for (i, kind) in [0x05u8, 0x0F, 0x85, 0x83].into_iter().enumerate() {
        let e = &mut lba0[446 + 16 * i..462 + 16 * i];
        e[4] = kind;
        e[8..12].copy_from_slice(&(2048 + 1000 * i as u32).to_le_bytes());
        e[12..16].copy_from_slice(&1000u32.to_le_bytes());
    }
    lba0[510..].copy_from_slice(&[0x55, 0xAA]);
    assert_eq!(
        mbr_data_extents(&lba0, 512),
        vec![(4, 5048 * 512, 1000 * 512)]
    );
}
