//! GUID Partition Table: parse, plan and serialise, as pure functions over bytes.
//!
//! Layout per UEFI 2.10 §5.3: a protective MBR at LBA 0, the primary header at LBA 1 followed by
//! the partition entry array, and a backup entry array plus backup header at the end of the disk.
//! Every field is little-endian; GUIDs use the mixed-endian on-disk encoding (first three groups
//! little-endian). The hosts do the I/O; everything here is unit-tested on byte fixtures.

use std::fmt;
use uuid::{Uuid, uuid};

/// Size of the header fields covered by the header CRC (UEFI: HeaderSize, 92 bytes).
const HEADER_SIZE: u32 = 92;
/// Number of entries we write (UEFI minimum array size is 16 KiB: 128 × 128 bytes).
const ENTRIES: u32 = 128;
/// Size of one entry we write.
const ENTRY_SIZE: u32 = 128;
/// Partitions start on a 1 MiB boundary, like every current partitioning tool.
const ALIGN_BYTES: u64 = 1 << 20;

/// "Linux filesystem data" partition type, `0FC63DAF-8483-4772-8E79-3D69D8477DE4`.
pub const LINUX_FILESYSTEM: Uuid = uuid!("0fc63daf-8483-4772-8e79-3d69d8477de4");
/// "Microsoft basic data" partition type, `EBD0A0A2-B9E5-4433-87C0-68B6B72699C7`.
pub const BASIC_DATA: Uuid = uuid!("ebd0a0a2-b9e5-4433-87c0-68b6b72699c7");
/// "Microsoft reserved" partition type, `E3C9E316-0B5C-4DB8-817D-F92DF00215AE`: not a data
/// partition (upstream ignores it when deciding whether a disk is partitioned).
pub const MICROSOFT_RESERVED: Uuid = uuid!("e3c9e316-0b5c-4db8-817d-f92df00215ae");

/// CRC-32 (IEEE 802.3, reflected, as UEFI requires for GPT headers and entry arrays).
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// A random (version 4) GUID from 16 bytes of the OS generator.
pub fn random_guid(bytes: [u8; 16]) -> Uuid {
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// One used partition entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// 1-based partition number (entry index + 1), as the kernel numbers GPT partitions.
    pub number: u32,
    /// Partition type.
    pub type_guid: Uuid,
    /// This partition's unique GUID (the `PARTUUID`).
    pub unique_guid: Uuid,
    /// First sector.
    pub first_lba: u64,
    /// Last sector, inclusive.
    pub last_lba: u64,
}

impl Partition {
    /// Size in sectors.
    pub fn sectors(&self) -> u64 {
        self.last_lba - self.first_lba + 1
    }
}

/// Why a partition table cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GptError {
    /// Not enough bytes were read to hold what the header describes.
    Short(&'static str),
    /// A checksum does not match: what a write cut off midway leaves (the backup, written
    /// first, is then the table to restore).
    Damaged(&'static str),
    /// A field is outside what UEFI allows or what this disk can hold.
    Invalid(String),
}

impl fmt::Display for GptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GptError::Short(what) => write!(f, "GPT truncated: {what}"),
            GptError::Damaged(what) => write!(f, "GPT damaged: {what}"),
            GptError::Invalid(why) => write!(f, "GPT invalid: {why}"),
        }
    }
}

/// A parsed GPT (from its primary header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpt {
    /// Logical sector size in bytes.
    pub sector: u64,
    /// The disk GUID.
    pub disk_guid: Uuid,
    /// First sector partitions may use.
    pub first_usable: u64,
    /// Last sector partitions may use (from the header; the disk may have grown since).
    pub last_usable: u64,
    /// Sector of the backup header, as the primary header records it.
    pub alternate_lba: u64,
    /// The raw entry array, `entry_count × entry_size` bytes.
    entries: Vec<u8>,
    entry_size: u32,
    entry_count: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn guid_at(b: &[u8], at: usize) -> Uuid {
    Uuid::from_bytes_le(b[at..at + 16].try_into().unwrap_or([0; 16]))
}

/// Bytes to read from the start of the disk to parse its primary GPT (LBA 0 to the end of a
/// 16 KiB entry array). Tables with larger arrays report [`GptError::Short`] with the size.
pub fn head_len(sector: u64) -> usize {
    (2 * sector + u64::from(ENTRIES * ENTRY_SIZE)) as usize
}

/// Whether LBA 1 carries the GPT signature.
pub fn has_signature(head: &[u8], sector: u64) -> bool {
    let s = sector as usize;
    head.len() >= s + 8 && &head[s..s + 8] == b"EFI PART"
}

/// Bytes to read from the end of the disk to parse its backup GPT (a 16 KiB entry array and
/// the header in the last sector); they start at LBA `total_sectors - tail_len / sector`.
pub fn tail_len(sector: u64) -> usize {
    (sector + u64::from(ENTRIES * ENTRY_SIZE).div_ceil(sector) * sector) as usize
}

/// The table a disk holds, and where it was read.
#[derive(Debug, Clone)]
pub enum Found {
    /// The primary table (LBA 1) is valid.
    Primary(Gpt),
    /// The primary table is missing or damaged but the backup at the end of the disk is valid:
    /// what a write of the table that was cut off leaves ([`Gpt::serialize`] writes the backup
    /// first). Writing this table's [`Gpt::serialize`] restores the primary.
    Backup(Gpt),
    /// No GPT at either end.
    None,
}

/// Finds the disk's GPT: the primary from `head` ([`head_len`] bytes from LBA 0), else the
/// backup from `tail` ([`tail_len`] bytes ending at the disk's end). When neither is valid, the
/// primary's answer is returned (`Found::None`, or its error).
pub fn find(head: &[u8], tail: &[u8], sector: u64, total_sectors: u64) -> Result<Found, GptError> {
    let primary = match Gpt::parse(head, sector, total_sectors) {
        Ok(Some(t)) => return Ok(Found::Primary(t)),
        // Absent, or its checksums broken as a cut-off write leaves it: the backup may stand in.
        Ok(None) => Ok(()),
        Err(GptError::Damaged(why)) => Err(GptError::Damaged(why)),
        // A primary whose checksums hold but whose content lies (entries overlapping or past the
        // disk, sizes out of range) was written that way: it is refused, never replaced by
        // whatever the backup says.
        Err(e) => return Err(e),
    };
    match Gpt::parse_backup(tail, sector, total_sectors) {
        Ok(Some(t)) => Ok(Found::Backup(t)),
        _ => primary.map(|()| Found::None),
    }
}

impl Gpt {
    /// Parses the primary GPT from `head` (the disk's first bytes, see [`head_len`]);
    /// `Ok(None)` when LBA 1 has no GPT signature. Checks both CRCs and that every field fits a
    /// disk of `total_sectors`.
    pub fn parse(head: &[u8], sector: u64, total_sectors: u64) -> Result<Option<Gpt>, GptError> {
        if !has_signature(head, sector) {
            return Ok(None);
        }
        Gpt::from_header(head, 0, 1, sector, total_sectors).map(Some)
    }

    /// Parses the backup GPT from `tail` (the disk's last [`tail_len`] bytes), as [`Gpt::parse`]
    /// does the primary. The table returned describes the disk as a primary would (its
    /// alternate LBA is the backup's own), so that [`Gpt::serialize`] writes both copies.
    pub fn parse_backup(
        tail: &[u8],
        sector: u64,
        total_sectors: u64,
    ) -> Result<Option<Gpt>, GptError> {
        if tail.len() < sector as usize || !tail.len().is_multiple_of(sector as usize) {
            return Ok(None);
        }
        let Some(first_lba) = total_sectors.checked_sub(tail.len() as u64 / sector) else {
            return Ok(None); // a disk smaller than the bytes read holds no backup there
        };
        let last = tail.len() - sector as usize;
        if &tail[last..last + 8] != b"EFI PART" {
            return Ok(None);
        }
        Gpt::from_header(tail, first_lba, total_sectors - 1, sector, total_sectors).map(Some)
    }

    /// Parses the header at LBA `my_lba` and its entry array, both inside `buf`, which holds the
    /// disk's bytes from LBA `buf_lba` on.
    fn from_header(
        buf: &[u8],
        buf_lba: u64,
        my_lba: u64,
        sector: u64,
        total_sectors: u64,
    ) -> Result<Gpt, GptError> {
        let h = &buf[((my_lba - buf_lba) * sector) as usize..];
        let size = u32_at(h, 12);
        if !(HEADER_SIZE..=sector as u32).contains(&size) {
            return Err(GptError::Invalid(format!("header size {size}")));
        }
        let mut hdr = h[..size as usize].to_vec();
        hdr[16..20].fill(0);
        if crc32(&hdr) != u32_at(h, 16) {
            return Err(GptError::Damaged("header CRC mismatch"));
        }
        let claimed = u64_at(h, 24);
        let other = u64_at(h, 32);
        let first_usable = u64_at(h, 40);
        let last_usable = u64_at(h, 48);
        let entries_lba = u64_at(h, 72);
        let entry_count = u32_at(h, 80);
        let entry_size = u32_at(h, 84);
        if claimed != my_lba {
            return Err(GptError::Invalid(format!(
                "header at LBA {my_lba} claims LBA {claimed}"
            )));
        }
        // A backup header points back at the primary (LBA 1); the table as a whole is
        // described from the primary's side.
        let alternate_lba = if my_lba == 1 {
            other
        } else if other == 1 {
            my_lba
        } else {
            return Err(GptError::Invalid(format!(
                "backup header names LBA {other} as the primary"
            )));
        };
        if entry_size < 128 || !entry_size.is_power_of_two() || entry_count == 0 {
            return Err(GptError::Invalid(format!(
                "{entry_count} entries of {entry_size} bytes"
            )));
        }
        if first_usable > last_usable || last_usable >= total_sectors {
            return Err(GptError::Invalid(format!(
                "usable sectors {first_usable}..={last_usable} on a disk of {total_sectors}"
            )));
        }
        let array_len = u64::from(entry_count) * u64::from(entry_size);
        let start = entries_lba
            .checked_sub(buf_lba)
            .and_then(|l| l.checked_mul(sector))
            .ok_or(GptError::Invalid("entry array offset".into()))?;
        let end = start
            .checked_add(array_len)
            .ok_or(GptError::Invalid("entry array size".into()))?;
        if end > buf.len() as u64 {
            return Err(GptError::Short("entry array beyond the bytes read"));
        }
        let entries = buf[start as usize..end as usize].to_vec();
        if crc32(&entries) != u32_at(h, 88) {
            return Err(GptError::Damaged("entry array CRC mismatch"));
        }
        let gpt = Gpt {
            sector,
            disk_guid: guid_at(h, 56),
            first_usable,
            last_usable,
            alternate_lba,
            entries,
            entry_size,
            entry_count,
        };
        let mut parts = gpt.partitions();
        for p in &parts {
            if p.first_lba < first_usable || p.last_lba > last_usable || p.first_lba > p.last_lba {
                return Err(GptError::Invalid(format!(
                    "partition {} spans {}..={} outside {first_usable}..={last_usable}",
                    p.number, p.first_lba, p.last_lba
                )));
            }
        }
        // Overlapping entries would give two partitions the same sectors: a format of one
        // destroys the other.
        parts.sort_by_key(|p| p.first_lba);
        if let Some(w) = parts.windows(2).find(|w| w[1].first_lba <= w[0].last_lba) {
            return Err(GptError::Invalid(format!(
                "partitions {} ({}..={}) and {} ({}..={}) overlap",
                w[0].number,
                w[0].first_lba,
                w[0].last_lba,
                w[1].number,
                w[1].first_lba,
                w[1].last_lba
            )));
        }
        Ok(gpt)
    }

    /// An empty table for a disk of `total_sectors`.
    pub fn new(sector: u64, total_sectors: u64, disk_guid: Uuid) -> Result<Gpt, GptError> {
        let array_sectors = u64::from(ENTRIES * ENTRY_SIZE).div_ceil(sector);
        let first_usable = 2 + array_sectors;
        let last_usable = last_usable(sector, total_sectors, ENTRIES * ENTRY_SIZE)?;
        if first_usable > last_usable {
            return Err(GptError::Invalid(format!(
                "a disk of {total_sectors} sectors is too small for a GPT"
            )));
        }
        Ok(Gpt {
            sector,
            disk_guid,
            first_usable,
            last_usable,
            alternate_lba: total_sectors - 1,
            entries: vec![0; (ENTRIES * ENTRY_SIZE) as usize],
            entry_size: ENTRY_SIZE,
            entry_count: ENTRIES,
        })
    }

    /// The used entries, in entry order.
    pub fn partitions(&self) -> Vec<Partition> {
        (0..self.entry_count)
            .filter_map(|i| {
                let e = &self.entries[(i * self.entry_size) as usize..][..128];
                let type_guid = guid_at(e, 0);
                (type_guid != Uuid::nil()).then(|| Partition {
                    number: i + 1,
                    type_guid,
                    unique_guid: guid_at(e, 16),
                    first_lba: u64_at(e, 32),
                    last_lba: u64_at(e, 40),
                })
            })
            .collect()
    }

    /// The used entries that hold data: everything but Microsoft reserved partitions.
    pub fn data_partitions(&self) -> Vec<Partition> {
        self.partitions()
            .into_iter()
            .filter(|p| p.type_guid != MICROSOFT_RESERVED)
            .collect()
    }

    /// The data partitions as (number, start, length), in bytes: what the kernel is told.
    pub fn data_extents(&self) -> Vec<(u32, u64, u64)> {
        self.data_partitions()
            .iter()
            .map(|p| {
                (
                    p.number,
                    p.first_lba * self.sector,
                    p.sectors() * self.sector,
                )
            })
            .collect()
    }

    /// Adds one partition of `type_guid` spanning the largest free extent, starting on a 1 MiB
    /// boundary, in the first unused entry. Returns it.
    pub fn add_max_partition(
        &mut self,
        type_guid: Uuid,
        unique_guid: Uuid,
    ) -> Result<Partition, GptError> {
        let align = (ALIGN_BYTES / self.sector).max(1);
        let mut used: Vec<(u64, u64)> = self
            .partitions()
            .iter()
            .map(|p| (p.first_lba, p.last_lba))
            .collect();
        used.sort_unstable();
        let mut best: Option<(u64, u64)> = None;
        let mut cursor = self.first_usable;
        for (first, last) in used.iter().copied().chain([(self.last_usable + 1, 0)]) {
            let start = cursor.div_ceil(align) * align;
            if first > start {
                let end = first - 1;
                if best.is_none_or(|(s, e)| end - start > e - s) {
                    best = Some((start, end));
                }
            }
            cursor = cursor.max(last + 1);
        }
        let Some((first_lba, last_lba)) = best else {
            return Err(GptError::Invalid("no free space for a partition".into()));
        };
        let index = (0..self.entry_count)
            .find(|&i| guid_at(&self.entries, (i * self.entry_size) as usize) == Uuid::nil())
            .ok_or(GptError::Invalid("every partition entry is used".into()))?;
        let e = &mut self.entries[(index * self.entry_size) as usize..][..128];
        e.fill(0);
        e[0..16].copy_from_slice(&type_guid.to_bytes_le());
        e[16..32].copy_from_slice(&unique_guid.to_bytes_le());
        e[32..40].copy_from_slice(&first_lba.to_le_bytes());
        e[40..48].copy_from_slice(&last_lba.to_le_bytes());
        Ok(Partition {
            number: index + 1,
            type_guid,
            unique_guid,
            first_lba,
            last_lba,
        })
    }

    /// Moves the table's end to a disk now `total_sectors` long (the backup header goes to the
    /// new last sector and the usable range grows with it). Never shrinks below a partition.
    pub fn relocate_end(&mut self, total_sectors: u64) -> Result<(), GptError> {
        let last = last_usable(
            self.sector,
            total_sectors,
            self.entry_count * self.entry_size,
        )?;
        if let Some(p) = self.partitions().iter().find(|p| p.last_lba > last) {
            return Err(GptError::Invalid(format!(
                "partition {} ends at sector {} beyond the disk's last usable sector {last}",
                p.number, p.last_lba
            )));
        }
        self.last_usable = last;
        self.alternate_lba = total_sectors - 1;
        Ok(())
    }

    /// The last sector partition `number` could end at: the sector before the next partition,
    /// or the last usable sector.
    pub fn max_last_lba(&self, number: u32) -> Result<u64, GptError> {
        let parts = self.partitions();
        let p = parts
            .iter()
            .find(|p| p.number == number)
            .ok_or_else(|| GptError::Invalid(format!("no partition {number}")))?;
        Ok(parts
            .iter()
            .filter(|q| q.first_lba > p.last_lba)
            .map(|q| q.first_lba - 1)
            .min()
            .unwrap_or(self.last_usable))
    }

    /// Sets partition `number`'s last sector; it may only grow, up to [`Gpt::max_last_lba`].
    pub fn grow_partition(&mut self, number: u32, last_lba: u64) -> Result<(), GptError> {
        let max = self.max_last_lba(number)?;
        let i = number - 1;
        let e = &mut self.entries[(i * self.entry_size) as usize..][..128];
        let current = u64_at(e, 40);
        if last_lba < current || last_lba > max {
            return Err(GptError::Invalid(format!(
                "partition {number} cannot end at sector {last_lba} (now {current}, at most {max})"
            )));
        }
        e[40..48].copy_from_slice(&last_lba.to_le_bytes());
        Ok(())
    }

    /// The writes, in order: `(byte offset, bytes)`. The backup array and header at the end of
    /// the disk come first, then the primary array, the primary header and last the protective
    /// MBR. Whatever write a crash cuts off, the disk is left in a state [`find`] recognises: the
    /// backup is complete before the primary changes, the primary array is complete before a
    /// header vouches for it, and LBA 0 announces a GPT only once the primary is whole.
    pub fn serialize(&self, total_sectors: u64) -> Vec<(u64, Vec<u8>)> {
        let s = self.sector as usize;
        let array = &self.entries;
        let array_sectors = (array.len() as u64).div_ceil(self.sector);
        let backup_lba = self.alternate_lba;
        let backup_array_lba = backup_lba - array_sectors;
        let header = |my: u64, alt: u64, array_lba: u64| {
            let mut h = vec![0u8; s];
            h[0..8].copy_from_slice(b"EFI PART");
            h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
            h[12..16].copy_from_slice(&HEADER_SIZE.to_le_bytes());
            h[24..32].copy_from_slice(&my.to_le_bytes());
            h[32..40].copy_from_slice(&alt.to_le_bytes());
            h[40..48].copy_from_slice(&self.first_usable.to_le_bytes());
            h[48..56].copy_from_slice(&self.last_usable.to_le_bytes());
            h[56..72].copy_from_slice(&self.disk_guid.to_bytes_le());
            h[72..80].copy_from_slice(&array_lba.to_le_bytes());
            h[80..84].copy_from_slice(&self.entry_count.to_le_bytes());
            h[84..88].copy_from_slice(&self.entry_size.to_le_bytes());
            h[88..92].copy_from_slice(&crc32(array).to_le_bytes());
            let crc = crc32(&h[..HEADER_SIZE as usize]);
            h[16..20].copy_from_slice(&crc.to_le_bytes());
            h
        };
        let mut padded = array.clone();
        padded.resize((array_sectors * self.sector) as usize, 0);

        let mut backup = padded.clone();
        backup.extend(header(backup_lba, 1, backup_array_lba));

        vec![
            (backup_array_lba * self.sector, backup),
            (2 * self.sector, padded),
            (self.sector, header(1, backup_lba, 2)),
            (0, protective_mbr(s, total_sectors)),
        ]
    }
}

/// The last usable sector of a disk of `total_sectors` with an entry array of `array_bytes`
/// mirrored at its end (backup array, then backup header in the last sector).
fn last_usable(sector: u64, total_sectors: u64, array_bytes: u32) -> Result<u64, GptError> {
    let array_sectors = u64::from(array_bytes).div_ceil(sector);
    total_sectors
        .checked_sub(2 + array_sectors)
        .ok_or_else(|| GptError::Invalid(format!("a disk of {total_sectors} sectors is too small")))
}

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

/// The primary MBR partitions of `lba0` that hold data, as (number, start, length) in bytes:
/// the GPT's protective entry and extended-partition containers (0x05, 0x0F) are left out.
pub fn mbr_data_extents(lba0: &[u8], sector: u64) -> Vec<(u32, u64, u64)> {
    mbr_partitions(lba0)
        .iter()
        .filter(|p| !matches!(p.kind, 0xEE | 0x05 | 0x0F))
        .map(|p| {
            (
                p.number,
                u64::from(p.first_lba) * sector,
                u64::from(p.sectors) * sector,
            )
        })
        .collect()
}

/// The MBR disk signature (offset 440), which `PARTUUID`s of MBR partitions are built from.
pub fn mbr_disk_signature(lba0: &[u8]) -> u32 {
    if lba0.len() < 444 {
        return 0;
    }
    u32_at(lba0, 440)
}

#[cfg(test)]
mod tests {
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
}
