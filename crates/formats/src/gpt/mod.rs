//! GUID Partition Table: parse, plan and serialise, as pure functions over bytes.
//!
//! Layout per UEFI 2.10 §5.3: a protective MBR at LBA 0, the primary header at LBA 1 followed by
//! the partition entry array, and a backup entry array plus backup header at the end of the disk.
//! Every field is little-endian; GUIDs use the mixed-endian on-disk encoding (first three groups
//! little-endian). The hosts do the I/O; everything here is unit-tested on byte fixtures.

mod mbr;
#[cfg(test)]
mod tests;

pub use mbr::{
    MbrPartition, mbr_data_extents, mbr_disk_signature, mbr_max_sectors, mbr_not_growable,
    mbr_partitions, mbr_problem, mbr_with_length, protective_mbr,
};

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

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
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
        let array_len = u64::from(entry_count) * u64::from(entry_size);
        check_geometry(
            my_lba,
            alternate_lba,
            entries_lba,
            array_len.div_ceil(sector),
            (first_usable, last_usable),
            total_sectors,
        )?;
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
        let backup_array_lba = backup_lba.saturating_sub(array_sectors);
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

/// Checks that a header's places agree with each other and with a disk of `total_sectors`:
/// the header at `my_lba`, its entry array (`array_sectors` from `entries_lba`) between the
/// header and the usable sectors on its side, the backup header (`alternate_lba`, as seen from
/// the primary) on the disk and after the usable sectors and the backup array. A header that
/// lies about any of them would have a table write put the backup over data (mid-disk, or
/// inside a partition) or past the disk.
fn check_geometry(
    my_lba: u64,
    alternate_lba: u64,
    entries_lba: u64,
    array_sectors: u64,
    (first_usable, last_usable): (u64, u64),
    total_sectors: u64,
) -> Result<(), GptError> {
    let invalid = |why: String| Err(GptError::Invalid(why));
    if first_usable > last_usable {
        return invalid(format!("usable sectors {first_usable}..={last_usable}"));
    }
    if alternate_lba >= total_sectors || alternate_lba <= 1 {
        return invalid(format!(
            "backup header at LBA {alternate_lba} on a disk of {total_sectors} sectors"
        ));
    }
    // The backup array lies right before the backup header, after every usable sector.
    if last_usable.saturating_add(array_sectors) >= alternate_lba {
        return invalid(format!(
            "usable sectors {first_usable}..={last_usable} reach the backup table (header at \
             LBA {alternate_lba}, {array_sectors} sectors of entries before it)"
        ));
    }
    // The primary array (at LBA 2 when written by anyone following UEFI) fits before them.
    if first_usable < 2 + array_sectors {
        return invalid(format!(
            "usable sectors start at {first_usable}, inside the primary table \
             ({array_sectors} sectors of entries after LBA 1)"
        ));
    }
    let array_end = entries_lba.saturating_add(array_sectors);
    let array_fits = if my_lba == 1 {
        entries_lba >= 2 && array_end <= first_usable
    } else {
        entries_lba > last_usable && array_end <= my_lba
    };
    if !array_fits {
        return invalid(format!(
            "the entry array of the header at LBA {my_lba} is at LBA {entries_lba} \
             ({array_sectors} sectors), outside its place"
        ));
    }
    Ok(())
}

/// The last usable sector of a disk of `total_sectors` with an entry array of `array_bytes`
/// mirrored at its end (backup array, then backup header in the last sector).
fn last_usable(sector: u64, total_sectors: u64, array_bytes: u32) -> Result<u64, GptError> {
    let array_sectors = u64::from(array_bytes).div_ceil(sector);
    total_sectors
        .checked_sub(2 + array_sectors)
        .ok_or_else(|| GptError::Invalid(format!("a disk of {total_sectors} sectors is too small")))
}
