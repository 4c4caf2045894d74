//! The MBR side of LBA 0: the protective MBR a GPT disk carries, and reading a classic MBR
//! partition table (four 16-byte entries at offset 446, signature 0x55AA at 510).

use super::u32_at;

/// LBA 0 of a GPT disk: one partition of type 0xEE covering the disk (capped at 2³²−1 sectors).
pub fn protective_mbr(sector: usize, total_sectors: u64) -> Vec<u8> {
    let mut m = vec![0u8; sector];
    let e = &mut m[446..462];
    e[1..4].copy_from_slice(&[0x00, 0x02, 0x00]); // CHS of LBA 1
    e[4] = 0xEE;
    e[5..8].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
    e[8..12].copy_from_slice(&1u32.to_le_bytes());
    let size = (total_sectors - 1).min(u64::from(u32::MAX)) as u32;
    e[12..16].copy_from_slice(&size.to_le_bytes());
    m[510] = 0x55;
    m[511] = 0xAA;
    m
}

/// One used entry of an MBR partition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MbrPartition {
    /// 1-based slot (1–4).
    pub number: u32,
    /// Partition type byte.
    pub kind: u8,
    /// First sector.
    pub first_lba: u32,
    /// Sectors.
    pub sectors: u32,
}

/// The used primary entries of an MBR in `lba0` (empty without the 0x55AA signature). A single
/// entry of type 0xEE is the protective MBR of a GPT disk.
pub fn mbr_partitions(lba0: &[u8]) -> Vec<MbrPartition> {
    if lba0.len() < 512 || lba0[510..512] != [0x55, 0xAA] {
        return Vec::new();
    }
    (0..4)
        .filter_map(|i| {
            let e = &lba0[446 + 16 * i..][..16];
            let p = MbrPartition {
                number: i as u32 + 1,
                kind: e[4],
                first_lba: u32_at(e, 8),
                sectors: u32_at(e, 12),
            };
            // Boot status must be 0x00 or 0x80; anything else is a boot sector's code, not a table.
            (p.kind != 0 && p.sectors != 0 && (e[0] == 0 || e[0] == 0x80)).then_some(p)
        })
        .collect()
}

/// Extended-partition containers (DOS 0x05, Windows LBA 0x0F, Linux 0x85): they hold the
/// chain of logical partitions' boot records, never a filesystem of their own.
const EXTENDED: [u8; 3] = [0x05, 0x0F, 0x85];

/// Why the primary entries `parts` of an MBR on a disk of `total_sectors` cannot be trusted,
/// if they cannot: an entry starting in LBA 0 (over the table itself), one ending past the
/// disk, two sharing sectors. A format of one such partition would destroy the table or
/// another partition.
pub fn mbr_problem(parts: &[MbrPartition], total_sectors: u64) -> Option<String> {
    let end = |p: &MbrPartition| u64::from(p.first_lba) + u64::from(p.sectors);
    if let Some(p) = parts.iter().find(|p| p.first_lba == 0) {
        return Some(format!(
            "MBR partition {} starts in LBA 0, over the partition table itself",
            p.number
        ));
    }
    if let Some(p) = parts.iter().find(|p| end(p) > total_sectors) {
        return Some(format!(
            "MBR partition {} spans sectors {}..{} past the end of the disk ({total_sectors} sectors)",
            p.number,
            p.first_lba,
            end(p)
        ));
    }
    let mut sorted = parts.to_vec();
    sorted.sort_by_key(|p| p.first_lba);
    sorted
        .windows(2)
        .find(|w| end(&w[0]) > u64::from(w[1].first_lba))
        .map(|w| {
            format!(
                "MBR partitions {} and {} overlap (sectors {}..{} and {}..{})",
                w[0].number,
                w[1].number,
                w[0].first_lba,
                end(&w[0]),
                w[1].first_lba,
                end(&w[1])
            )
        })
}

/// The primary MBR partitions of `lba0` that hold data, as (number, start, length) in bytes:
/// the GPT's protective entry and extended-partition containers ([`EXTENDED`]) are left out.
pub fn mbr_data_extents(lba0: &[u8], sector: u64) -> Vec<(u32, u64, u64)> {
    mbr_partitions(lba0)
        .iter()
        .filter(|p| p.kind != 0xEE && !EXTENDED.contains(&p.kind))
        .map(|p| {
            (
                p.number,
                u64::from(p.first_lba) * sector,
                u64::from(p.sectors) * sector,
            )
        })
        .collect()
}

/// Why primary entry `p` is no basic volume ResizeVolume may grow, if it is not: an
/// extended-partition container ([`EXTENDED`]) or a dynamic disk's LDM partition (0x42), whose
/// lengths their own metadata also records.
pub fn mbr_not_growable(p: &MbrPartition) -> Option<String> {
    (EXTENDED.contains(&p.kind) || p.kind == 0x42).then(|| {
        format!(
            "its MBR partition type {:#04x} is not a basic volume's",
            p.kind
        )
    })
}

/// The most sectors primary entry `number` of `parts` can span in place: up to the next
/// entry's start or the disk's end, and at most 2³²−1 (an entry's length is 32 bits); never
/// less than it spans now. `None` when the MBR has no such entry.
pub fn mbr_max_sectors(parts: &[MbrPartition], number: u32, total_sectors: u64) -> Option<u64> {
    let p = parts.iter().find(|p| p.number == number)?;
    let first = u64::from(p.first_lba);
    let next = parts
        .iter()
        .map(|q| u64::from(q.first_lba))
        .filter(|&s| s > first)
        .min()
        .unwrap_or(total_sectors)
        .min(total_sectors);
    Some(
        next.saturating_sub(first)
            .min(u64::from(u32::MAX))
            .max(u64::from(p.sectors)),
    )
}

/// LBA 0 (`lba0`, one sector) with primary entry `number` (1–4) spanning `sectors`; its CHS end
/// is brought along (or says "beyond CHS", 1023/254/63, as partitioning tools write it), its
/// start and type untouched.
pub fn mbr_with_length(lba0: &[u8], number: u32, sectors: u32) -> Vec<u8> {
    let mut m = lba0.to_vec();
    let e = &mut m[446 + 16 * (number as usize - 1)..][..16];
    e[12..16].copy_from_slice(&sectors.to_le_bytes());
    let last = u64::from(u32_at(e, 8)) + u64::from(sectors) - 1;
    // The conventional geometry of 255 heads and 63 sectors per track.
    let (c, h, s) = (last / (255 * 63), (last / 63) % 255, last % 63 + 1);
    let chs = if c > 1023 {
        [0xFE, 0xFF, 0xFF]
    } else {
        [h as u8, (s as u8) | ((c >> 2) as u8 & 0xC0), c as u8]
    };
    e[5..8].copy_from_slice(&chs);
    m
}

/// The MBR disk signature (offset 440), which `PARTUUID`s of MBR partitions are built from.
pub fn mbr_disk_signature(lba0: &[u8]) -> u32 {
    if lba0.len() < 444 {
        return 0;
    }
    u32_at(lba0, 440)
}

#[cfg(test)]
mod growth_tests {
    use super::*;

    fn lba0(entries: &[(u8, u32, u32)]) -> Vec<u8> {
        let mut m = vec![0u8; 512];
        for (i, (kind, first, sectors)) in entries.iter().enumerate() {
            let e = &mut m[446 + 16 * i..][..16];
            e[4] = *kind;
            e[8..12].copy_from_slice(&first.to_le_bytes());
            e[12..16].copy_from_slice(&sectors.to_le_bytes());
        }
        m[510] = 0x55;
        m[511] = 0xAA;
        m
    }

    #[test]
    fn a_primary_grows_to_the_next_entry_or_the_disk_end_within_32_bits() {
        let m = lba0(&[(0x83, 2048, 4096), (0x05, 100_000, 50_000)]);
        let parts = mbr_partitions(&m);
        assert_eq!(mbr_max_sectors(&parts, 1, 200_000), Some(100_000 - 2048));
        assert_eq!(mbr_max_sectors(&parts, 2, 200_000), Some(100_000));
        assert_eq!(mbr_max_sectors(&parts, 3, 200_000), None);
        let big = lba0(&[(0x07, 2048, 4096)]);
        assert_eq!(
            mbr_max_sectors(&mbr_partitions(&big), 1, 1 << 40),
            Some(u64::from(u32::MAX))
        );
        assert!(mbr_not_growable(&parts[1]).is_some());
        assert!(mbr_not_growable(&parts[0]).is_none());
    }

    #[test]
    fn only_the_entry_s_length_and_chs_end_change() {
        let m = lba0(&[(0x83, 2048, 4096), (0x83, 10_000, 100)]);
        let g = mbr_with_length(&m, 1, 6000);
        let parts = mbr_partitions(&g);
        assert_eq!((parts[0].first_lba, parts[0].sectors), (2048, 6000));
        assert_eq!(parts[1], mbr_partitions(&m)[1]);
        let differ: Vec<usize> = (0..512).filter(|&i| m[i] != g[i]).collect();
        assert!(
            differ
                .iter()
                .all(|i| (451..454).contains(i) || (458..462).contains(i)),
            "{differ:?}"
        );
        let far = mbr_with_length(&m, 1, 100_000_000);
        assert_eq!(far[451..454], [0xFE, 0xFF, 0xFF]);
    }
}
