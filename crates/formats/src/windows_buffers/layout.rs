//! Disk layouts: parsing and writing `DRIVE_LAYOUT_INFORMATION_EX`, and the partition planning
//! of PartitionDisk and ResizeVolume.
//!
//! Layout (winioctl.h, x64): `DRIVE_LAYOUT_INFORMATION_EX` is `PartitionStyle` u32 @0,
//! `PartitionCount` u32 @4, a union @8 of `DRIVE_LAYOUT_INFORMATION_MBR` (`Signature` u32,
//! `CheckSum` u32) and `DRIVE_LAYOUT_INFORMATION_GPT` (`DiskId` GUID @8, `StartingUsableOffset`
//! i64 @24, `UsableLength` i64 @32, `MaxPartitionCount` u32 @40), then `PartitionEntry` @48: an
//! array of 144-byte `PARTITION_INFORMATION_EX` (`PartitionStyle` u32 @0, `StartingOffset` i64
//! @8, `PartitionLength` i64 @16, `PartitionNumber` u32 @24, `RewritePartition` u8 @28,
//! `IsServicePartition` u8 @29, union @32: GPT `PartitionType` GUID @32, `PartitionId` GUID
//! @48, `Attributes` u64 @64, `Name` 36 UTF-16 units @72; MBR `PartitionType` u8 @32).

use super::bytes::Le;
use super::storage::ParseError;
use uuid::Uuid;

/// `PARTITION_STYLE_MBR`.
pub const STYLE_MBR: u32 = 0;
/// `PARTITION_STYLE_GPT`.
pub const STYLE_GPT: u32 = 1;
/// `PARTITION_STYLE_RAW`: the disk has no partition table.
pub const STYLE_RAW: u32 = 2;

/// GPT type of a Microsoft basic data partition.
pub use crate::gpt::BASIC_DATA;
/// GPT type of the Microsoft reserved partition (MSR), which never holds a volume.
pub use crate::gpt::MICROSOFT_RESERVED as MSR;

/// `GPT_BASIC_DATA_ATTRIBUTE_NO_DRIVE_LETTER`: the volume gets no drive letter automatically.
pub const NO_DRIVE_LETTER: u64 = 0x8000_0000_0000_0000;
/// `GPT_BASIC_DATA_ATTRIBUTE_HIDDEN`: "the partition is not detected by the mount manager", so
/// it gets no volume GUID path and is not enumerated (shadow-copy clones carry it).
pub const HIDDEN: u64 = 0x4000_0000_0000_0000;

/// Size of the `DRIVE_LAYOUT_INFORMATION_EX` header before the partition array.
pub const HEADER_SIZE: usize = 48;
/// Size of one `PARTITION_INFORMATION_EX`.
pub const ENTRY_SIZE: usize = 144;

/// Partition starts are aligned to 1 MiB, as Windows aligns new partitions.
pub const ALIGNMENT: u64 = 1 << 20;

/// One partition of a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Byte offset on the disk.
    pub start: u64,
    /// Length in bytes.
    pub length: u64,
    /// `PartitionNumber` (1-based; 0 for an unused MBR slot).
    pub number: u32,
    /// GPT partition type; `None` on MBR disks.
    pub gpt_type: Option<Uuid>,
    /// MBR partition type byte; 0 on GPT disks.
    pub mbr_type: u8,
    /// The entry's `PARTITION_INFORMATION_EX` bytes as read, so a layout written back keeps
    /// every field (GPT partition id, attributes, name) of the partitions it does not change.
    pub raw: Vec<u8>,
}

impl Partition {
    /// The GPT entry's attributes (`PARTITION_INFORMATION_GPT.Attributes`, at byte 64 of the
    /// `PARTITION_INFORMATION_EX` read); 0 on MBR disks or for an entry too short to hold them.
    pub fn gpt_attributes(&self) -> u64 {
        match (self.gpt_type, self.raw.get(64..72)) {
            (Some(_), Some(b)) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
            _ => 0,
        }
    }

    /// This entry with its GPT attributes replaced by `attributes` (bytes 64 to 72 of its
    /// `PARTITION_INFORMATION_EX`), to be written back with [`gpt_layout_with`]; an MBR entry,
    /// or one too short, is returned as it is.
    pub fn with_gpt_attributes(&self, attributes: u64) -> Partition {
        let mut p = self.clone();
        if p.gpt_type.is_some()
            && let Some(b) = p.raw.get_mut(64..72)
        {
            b.copy_from_slice(&attributes.to_le_bytes());
        }
        p
    }

    /// The GPT entry's unique partition GUID (`PARTITION_INFORMATION_GPT.PartitionId`, at byte
    /// 48); `None` on MBR disks or for an entry too short to hold it.
    pub fn gpt_id(&self) -> Option<Uuid> {
        self.gpt_type?;
        let b: [u8; 16] = self.raw.get(48..64)?.try_into().ok()?;
        Some(Uuid::from_bytes_le(b))
    }

    /// Whether this is the Microsoft reserved partition, which the "no data partition yet"
    /// check ignores (upstream's rule), or an unused MBR slot.
    pub fn is_reserved(&self) -> bool {
        self.gpt_type == Some(MSR) || (self.gpt_type.is_none() && self.mbr_type == 0)
    }
}

/// A disk's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `PARTITION_STYLE_*`.
    pub style: u32,
    /// GPT: the disk GUID.
    pub disk_id: Uuid,
    /// MBR: the disk signature (`DRIVE_LAYOUT_INFORMATION_MBR.Signature`).
    pub signature: u32,
    /// GPT: first usable byte.
    pub usable_start: u64,
    /// GPT: usable bytes from `usable_start`.
    pub usable_length: u64,
    /// GPT: how many entries the partition array holds.
    pub max_partitions: u32,
    /// The partitions (MBR: the used slots only).
    pub partitions: Vec<Partition>,
}

fn nonneg(v: i64, what: &str) -> Result<u64, ParseError> {
    u64::try_from(v)
        .map_err(|_| ParseError(format!("DRIVE_LAYOUT_INFORMATION_EX: negative {what}")))
}

/// One `PARTITION_INFORMATION_EX` (`entry` is exactly [`ENTRY_SIZE`] bytes); `bad` names the
/// entry in the error when a field cannot be read.
fn parse_entry(entry: &[u8], bad: &dyn Fn() -> ParseError) -> Result<Partition, ParseError> {
    let entry = Le(entry);
    let pstyle = entry.u32(0).ok_or_else(bad)?;
    Ok(Partition {
        start: nonneg(entry.i64(8).ok_or_else(bad)?, "StartingOffset")?,
        length: nonneg(entry.i64(16).ok_or_else(bad)?, "PartitionLength")?,
        number: entry.u32(24).ok_or_else(bad)?,
        gpt_type: if pstyle == STYLE_GPT {
            entry.guid(32)
        } else {
            None
        },
        mbr_type: if pstyle == STYLE_MBR {
            entry.u8(32).ok_or_else(bad)?
        } else {
            0
        },
        raw: entry.0.to_vec(),
    })
}

/// Parses the output of `IOCTL_DISK_GET_PARTITION_INFO_EX` (one `PARTITION_INFORMATION_EX`),
/// as sent to a volume or partition device.
pub fn parse_partition_info(buf: &[u8]) -> Result<Partition, ParseError> {
    let bad = || ParseError("PARTITION_INFORMATION_EX: buffer too short".to_string());
    parse_entry(buf.get(..ENTRY_SIZE).ok_or_else(bad)?, &bad)
}

/// Parses the output of `IOCTL_DISK_GET_DRIVE_LAYOUT_EX`.
pub fn parse_drive_layout(buf: &[u8]) -> Result<Layout, ParseError> {
    const WHAT: &str = "DRIVE_LAYOUT_INFORMATION_EX";
    let le = Le(buf);
    let short = || ParseError(format!("{WHAT}: buffer too short"));
    let style = le.u32(0).ok_or_else(short)?;
    let count = le.u32(4).ok_or_else(short)?;
    let mut layout = Layout {
        style,
        disk_id: Uuid::nil(),
        signature: 0,
        usable_start: 0,
        usable_length: 0,
        max_partitions: 0,
        partitions: Vec::new(),
    };
    if style == STYLE_GPT {
        layout.disk_id = le.guid(8).ok_or_else(short)?;
        layout.usable_start = nonneg(le.i64(24).ok_or_else(short)?, "StartingUsableOffset")?;
        layout.usable_length = nonneg(le.i64(32).ok_or_else(short)?, "UsableLength")?;
        layout.max_partitions = le.u32(40).ok_or_else(short)?;
    }
    if style == STYLE_MBR {
        // DRIVE_LAYOUT_INFORMATION_MBR: Signature u32 @8.
        layout.signature = le.u32(8).ok_or_else(short)?;
    }
    for i in 0..count as usize {
        let at = HEADER_SIZE + i * ENTRY_SIZE;
        let bad = || {
            ParseError(format!(
                "{WHAT}: partition entry {i} of {count} is truncated"
            ))
        };
        let p = parse_entry(le.bytes(at, ENTRY_SIZE).ok_or_else(bad)?, &bad)?;
        // MBR layouts always list 4 (or a multiple of 4) slots; unused ones have type 0 and
        // length 0 and are not partitions.
        if p.gpt_type.is_none() && p.mbr_type == 0 && p.length == 0 {
            continue;
        }
        layout.partitions.push(p);
    }
    Ok(layout)
}

/// A new GPT partition to add to a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewPartition {
    /// Byte offset (1 MiB aligned).
    pub start: u64,
    /// Length in bytes (a whole number of sectors).
    pub length: u64,
}

/// What PartitionDisk has to do on a disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionPlan {
    /// A data partition exists already: nothing to do (idempotent success).
    Nothing,
    /// Add this basic-data partition to the (GPT) layout.
    Create(NewPartition),
}

/// Why a disk cannot be partitioned as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The disk is MBR (PartitionDisk only initialises RAW disks as GPT and never converts).
    NotGpt,
    /// No room for a partition.
    NoSpace,
    /// The layout or request does not make sense (message says why).
    Invalid(String),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::NotGpt => f.write_str("the disk has an MBR partition table with no data partition; refusing to convert it"),
            PlanError::NoSpace => f.write_str("no free space for a data partition"),
            PlanError::Invalid(m) => f.write_str(m),
        }
    }
}

/// The end of a GPT layout's usable area. Offsets are signed 64-bit in the structures written
/// back, so a usable area reaching past `i64::MAX` (a layout that lies) has no room for a
/// partition that can be described: `None`.
fn usable_end(layout: &Layout) -> Option<u64> {
    layout
        .usable_start
        .checked_add(layout.usable_length)
        .filter(|end| i64::try_from(*end).is_ok())
}

/// The largest free extent of a GPT layout: `(start, end)` in bytes, end exclusive, with start
/// aligned up to [`ALIGNMENT`] and end aligned down to `sector`.
fn largest_free(layout: &Layout, sector: u64) -> Option<(u64, u64)> {
    let usable_end = usable_end(layout)?;
    let mut used: Vec<(u64, u64)> = layout
        .partitions
        .iter()
        .filter(|p| p.length > 0)
        .map(|p| (p.start, p.start.saturating_add(p.length)))
        .collect();
    used.sort_unstable();
    let mut best: Option<(u64, u64)> = None;
    let mut cursor = layout.usable_start;
    for (s, e) in used.into_iter().chain([(usable_end, usable_end)]) {
        let start = cursor.div_ceil(ALIGNMENT) * ALIGNMENT;
        let end = s.min(usable_end) / sector * sector;
        if end > start && best.is_none_or(|(bs, be)| end - start > be - bs) {
            best = Some((start, end));
        }
        cursor = cursor.max(e);
    }
    best
}

/// The starting offsets of the partitions Windows surfaces a volume for: GPT basic-data
/// partitions without [`HIDDEN`], and MBR partitions of the types `IsRecognizedPartition`
/// accepts (FAT12, FAT16, huge FAT16, IFS/NTFS, FAT32, FAT32 and FAT16 with INT13 extensions).
/// Extended containers, the MSR, hidden and foreign partitions get none, so nothing waits for
/// them.
pub fn volume_offsets(layout: &Layout) -> Vec<u64> {
    layout
        .partitions
        .iter()
        .filter(|p| match p.gpt_type {
            Some(t) => t == BASIC_DATA && p.gpt_attributes() & HIDDEN == 0,
            None => matches!(p.mbr_type, 0x01 | 0x04 | 0x06 | 0x07 | 0x0B | 0x0C | 0x0E),
        })
        .map(|p| p.start)
        .collect()
}

/// PartitionDisk's plan for a disk whose layout is `layout` (read after any GPT initialisation)
/// and whose logical sector size is `sector`: nothing when a non-reserved partition exists,
/// else one basic-data partition over the largest free extent.
pub fn plan_data_partition(layout: &Layout, sector: u64) -> Result<PartitionPlan, PlanError> {
    if sector == 0 || !sector.is_power_of_two() {
        return Err(PlanError::Invalid(format!("bad sector size {sector}")));
    }
    if layout.partitions.iter().any(|p| !p.is_reserved()) {
        return Ok(PartitionPlan::Nothing);
    }
    if layout.style != STYLE_GPT {
        return Err(PlanError::NotGpt);
    }
    let (start, end) = largest_free(layout, sector).ok_or(PlanError::NoSpace)?;
    Ok(PartitionPlan::Create(NewPartition {
        start,
        length: end - start,
    }))
}

/// The largest size partition `number` can grow to in place: up to the next partition or the
/// end of the usable area (GPT) / the disk (`disk_length`, MBR), in whole sectors.
pub fn max_partition_size(
    layout: &Layout,
    number: u32,
    disk_length: u64,
    sector: u64,
) -> Result<u64, PlanError> {
    let p = layout
        .partitions
        .iter()
        .find(|p| p.number == number)
        .ok_or_else(|| PlanError::Invalid(format!("no partition {number} on the disk")))?;
    let limit = if layout.style == STYLE_GPT {
        // The disk's end less the backup GPT (entries, then the header in the last sector),
        // not the usable area the table records: after the disk grew, that is the old end,
        // and IOCTL_DISK_GROW_PARTITION is the documented way into the new space (it refuses
        // what it cannot do, so nothing is taken for grown that was not).
        let entries = (u64::from(layout.max_partitions.max(128)) * 128)
            .div_ceil(sector.max(1))
            .saturating_mul(sector.max(1));
        disk_length
            .saturating_sub(entries + sector.max(1))
            .max(layout.usable_start.saturating_add(layout.usable_length))
    } else {
        disk_length
    };
    let next = layout
        .partitions
        .iter()
        .filter(|q| q.start > p.start)
        .map(|q| q.start)
        .min()
        .unwrap_or(limit)
        .min(limit);
    let end = next / sector.max(1) * sector.max(1);
    Ok(end.saturating_sub(p.start).max(p.length))
}

/// The size of the Microsoft Reserved partition Windows creates on a GPT disk it initialises
/// (16 MiB since Windows 10 / Server 2016; "Windows and GPT FAQ").
pub const MSR_SIZE: u64 = 16 << 20;

/// A GPT partition to add to a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewEntry {
    /// Byte offset on the disk.
    pub start: u64,
    /// Length in bytes.
    pub length: u64,
    /// Partition type.
    pub gpt_type: Uuid,
    /// Unique partition id.
    pub id: Uuid,
    /// GPT attributes.
    pub attributes: u64,
}

impl NewEntry {
    /// A basic-data partition over `at`, hidden from automount's drive letters
    /// (GPT_BASIC_DATA_ATTRIBUTE_NO_DRIVE_LETTER, as upstream's `AssignDriveLetter=false`).
    pub fn data(at: NewPartition, id: Uuid) -> Self {
        Self {
            start: at.start,
            length: at.length,
            gpt_type: BASIC_DATA,
            id,
            attributes: NO_DRIVE_LETTER,
        }
    }

    /// The entry as a `PARTITION_INFORMATION_EX` with `RewritePartition` set, so the driver
    /// writes it; `PartitionNumber` is left for the driver to assign.
    pub fn bytes(&self) -> [u8; ENTRY_SIZE] {
        let mut e = [0u8; ENTRY_SIZE];
        e[0..4].copy_from_slice(&STYLE_GPT.to_le_bytes());
        e[8..16].copy_from_slice(&(self.start as i64).to_le_bytes());
        e[16..24].copy_from_slice(&(self.length as i64).to_le_bytes());
        e[28] = 1;
        e[32..48].copy_from_slice(&self.gpt_type.to_bytes_le());
        e[48..64].copy_from_slice(&self.id.to_bytes_le());
        e[64..72].copy_from_slice(&self.attributes.to_le_bytes());
        e
    }
}

/// The Microsoft Reserved partition to create first on a GPT disk with no partition at all, as
/// Windows' disk initialisation does (Windows expects one on every GPT data disk, and upstream's
/// data partition is then number 2): 16 MiB at the start of the usable area. `None` when the
/// disk already has partitions or is not GPT.
pub fn msr_entry(layout: &Layout, sector: u64, id: Uuid) -> Option<NewEntry> {
    if layout.style != STYLE_GPT || !layout.partitions.is_empty() {
        return None;
    }
    let sector = sector.max(1);
    let start = layout.usable_start.div_ceil(sector) * sector;
    (start.checked_add(MSR_SIZE)? <= usable_end(layout)?).then_some(NewEntry {
        start,
        length: MSR_SIZE,
        gpt_type: MSR,
        id,
        attributes: 0,
    })
}

impl Layout {
    /// This layout as it will be with `entry` added (numbered after the existing partitions),
    /// for planning the next partition around it.
    pub fn with(&self, entry: &NewEntry) -> Layout {
        let mut l = self.clone();
        let bytes = entry.bytes();
        if let Ok(mut p) = parse_entry(&bytes, &|| ParseError(String::new())) {
            p.number = self.partitions.iter().map(|p| p.number).max().unwrap_or(0) + 1;
            l.partitions.push(p);
        }
        l
    }
}

/// Writes `layout` plus the `new` entries as the input of `IOCTL_DISK_SET_DRIVE_LAYOUT_EX`:
/// every existing entry is kept byte for byte as read (not rewritten), the new ones have
/// `RewritePartition` set so the driver writes them.
pub fn gpt_layout_with(layout: &Layout, new: &[NewEntry]) -> Vec<u8> {
    let count = layout.partitions.len() + new.len();
    let mut out = vec![0u8; HEADER_SIZE + count * ENTRY_SIZE];
    out[0..4].copy_from_slice(&STYLE_GPT.to_le_bytes());
    out[4..8].copy_from_slice(&(count as u32).to_le_bytes());
    out[8..24].copy_from_slice(&layout.disk_id.to_bytes_le());
    out[24..32].copy_from_slice(&(layout.usable_start as i64).to_le_bytes());
    out[32..40].copy_from_slice(&(layout.usable_length as i64).to_le_bytes());
    out[40..44].copy_from_slice(&layout.max_partitions.to_le_bytes());
    for (i, p) in layout.partitions.iter().enumerate() {
        // Existing entries are written back as read, with RewritePartition TRUE: "The value of
        // this parameter should be set to TRUE" (PARTITION_INFORMATION_EX), and the system uses
        // it to tell which entries to write; one left FALSE could be dropped from the table.
        let e = &mut out[HEADER_SIZE + i * ENTRY_SIZE..][..ENTRY_SIZE];
        e.copy_from_slice(&p.raw);
        e[28] = 1;
    }
    for (i, n) in new.iter().enumerate() {
        let at = HEADER_SIZE + (layout.partitions.len() + i) * ENTRY_SIZE;
        out[at..at + ENTRY_SIZE].copy_from_slice(&n.bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// A GPT layout as Windows reports a freshly initialised 10 GiB disk (usable area from
    /// LBA 34 to 33 sectors before the end, 512-byte sectors), with `parts`.
    fn gpt(parts: &[(u64, u64, u32, Uuid)]) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_SIZE + parts.len() * ENTRY_SIZE];
        out[0..4].copy_from_slice(&STYLE_GPT.to_le_bytes());
        out[4..8].copy_from_slice(&(parts.len() as u32).to_le_bytes());
        out[8..24]
            .copy_from_slice(&uuid::uuid!("11111111-2222-3333-4444-555555555555").to_bytes_le());
        out[24..32].copy_from_slice(&(34i64 * 512).to_le_bytes());
        out[32..40].copy_from_slice(&((10 * GIB - 67 * 512) as i64).to_le_bytes());
        out[40..44].copy_from_slice(&128u32.to_le_bytes());
        for (i, (start, len, num, ty)) in parts.iter().enumerate() {
            let e = &mut out[HEADER_SIZE + i * ENTRY_SIZE..][..ENTRY_SIZE];
            e[0..4].copy_from_slice(&STYLE_GPT.to_le_bytes());
            e[8..16].copy_from_slice(&(*start as i64).to_le_bytes());
            e[16..24].copy_from_slice(&(*len as i64).to_le_bytes());
            e[24..28].copy_from_slice(&num.to_le_bytes());
            e[32..48].copy_from_slice(&ty.to_bytes_le());
        }
        out
    }

    #[test]
    fn parses_a_gpt_layout() {
        let l = parse_drive_layout(&gpt(&[(17408, 16 * MIB, 1, MSR)])).unwrap();
        assert_eq!(l.style, STYLE_GPT);
        assert_eq!(l.usable_start, 17408);
        assert_eq!(l.max_partitions, 128);
        assert_eq!(l.partitions.len(), 1);
        assert!(l.partitions[0].is_reserved());
        assert_eq!(
            l.disk_id.to_string(),
            "11111111-2222-3333-4444-555555555555"
        );
    }

    #[test]
    fn gpt_attributes_are_replaced_in_the_entry_written_back() {
        let l = parse_drive_layout(&gpt(&[
            (17408, 16 * MIB, 1, MSR),
            (17 * MIB, GIB, 2, BASIC_DATA),
        ]))
        .unwrap();
        let hidden = l.partitions[1].with_gpt_attributes(NO_DRIVE_LETTER | HIDDEN);
        assert_eq!(hidden.gpt_attributes(), NO_DRIVE_LETTER | HIDDEN);
        assert_eq!(
            (hidden.start, hidden.length, hidden.gpt_type),
            (17 * MIB, GIB, Some(BASIC_DATA))
        );
        let mut with = l.clone();
        with.partitions[1] = hidden;
        let back = parse_drive_layout(&gpt_layout_with(&with, &[])).unwrap();
        assert_eq!(
            back.partitions[1].gpt_attributes(),
            NO_DRIVE_LETTER | HIDDEN
        );
        assert_eq!(back.partitions[0].gpt_attributes(), 0);
        // Written back unchanged, it says the same.
        let same = parse_drive_layout(&gpt_layout_with(&l, &[])).unwrap();
        assert_eq!(same.partitions[1].gpt_attributes(), 0);
    }

    #[test]
    fn parses_mbr_and_skips_empty_slots() {
        let mut buf = vec![0u8; HEADER_SIZE + 4 * ENTRY_SIZE];
        buf[4..8].copy_from_slice(&4u32.to_le_bytes());
        let e = &mut buf[HEADER_SIZE..][..ENTRY_SIZE];
        e[8..16].copy_from_slice(&(MIB as i64).to_le_bytes());
        e[16..24].copy_from_slice(&(GIB as i64).to_le_bytes());
        e[24..28].copy_from_slice(&1u32.to_le_bytes());
        e[32] = 0x07; // NTFS
        let l = parse_drive_layout(&buf).unwrap();
        assert_eq!(l.style, STYLE_MBR);
        assert_eq!(l.partitions.len(), 1);
        assert!(!l.partitions[0].is_reserved());
        assert_eq!(plan_data_partition(&l, 512), Ok(PartitionPlan::Nothing));
    }

    #[test]
    fn truncated_layouts_are_errors_never_panics() {
        let buf = gpt(&[(17408, 16 * MIB, 1, MSR), (17 * MIB, GIB, 2, BASIC_DATA)]);
        for n in 0..buf.len() {
            let _ = parse_drive_layout(&buf[..n]);
        }
        assert!(parse_drive_layout(&buf[..HEADER_SIZE + ENTRY_SIZE]).is_err());
        let mut neg = buf;
        neg[HEADER_SIZE + 16..HEADER_SIZE + 24].copy_from_slice(&(-1i64).to_le_bytes());
        assert!(parse_drive_layout(&neg).is_err());
    }

    #[test]
    fn empty_gpt_gets_one_aligned_maximum_partition() {
        let l = parse_drive_layout(&gpt(&[])).unwrap();
        let PartitionPlan::Create(p) = plan_data_partition(&l, 512).unwrap() else {
            panic!("expected a partition")
        };
        assert_eq!(p.start, MIB);
        assert_eq!(p.start + p.length, 10 * GIB - 33 * 512);
        assert_eq!(p.length % 512, 0);
    }

    #[test]
    fn msr_only_disk_gets_a_partition_after_the_msr() {
        let l = parse_drive_layout(&gpt(&[(17408, 16 * MIB, 1, MSR)])).unwrap();
        let PartitionPlan::Create(p) = plan_data_partition(&l, 4096).unwrap() else {
            panic!("expected a partition")
        };
        assert_eq!(p.start, 17 * MIB);
        assert_eq!((p.start + p.length) % 4096, 0);
        assert!(p.start + p.length <= 10 * GIB - 33 * 512);
    }

    #[test]
    fn partition_info_is_one_layout_entry() {
        // IOCTL_DISK_GET_PARTITION_INFO_EX answers one PARTITION_INFORMATION_EX: the same bytes
        // as an entry of the drive layout.
        let buf = gpt(&[(17 * MIB, GIB, 2, BASIC_DATA)]);
        let p = parse_partition_info(&buf[HEADER_SIZE..]).unwrap();
        assert_eq!((p.start, p.length, p.number), (17 * MIB, GIB, 2));
        assert_eq!(p.gpt_type, Some(BASIC_DATA));
        assert!(parse_partition_info(&buf[HEADER_SIZE..HEADER_SIZE + 100]).is_err());
        let mut neg = buf[HEADER_SIZE..].to_vec();
        neg[16..24].copy_from_slice(&(-1i64).to_le_bytes());
        assert!(parse_partition_info(&neg).is_err());
    }

    #[test]
    fn a_data_partition_means_nothing_to_do() {
        let l = parse_drive_layout(&gpt(&[
            (17408, 16 * MIB, 1, MSR),
            (17 * MIB, GIB, 2, BASIC_DATA),
        ]))
        .unwrap();
        assert_eq!(plan_data_partition(&l, 512), Ok(PartitionPlan::Nothing));
        // Any other type counts as data too (e.g. a Linux filesystem partition).
        let linux = crate::gpt::LINUX_FILESYSTEM;
        let l = parse_drive_layout(&gpt(&[(MIB, GIB, 1, linux)])).unwrap();
        assert_eq!(plan_data_partition(&l, 512), Ok(PartitionPlan::Nothing));
    }

    #[test]
    fn plan_errors() {
        let mut l = parse_drive_layout(&gpt(&[])).unwrap();
        assert!(matches!(
            plan_data_partition(&l, 0),
            Err(PlanError::Invalid(_))
        ));
        l.usable_length = 1000;
        assert_eq!(plan_data_partition(&l, 512), Err(PlanError::NoSpace));
        l.style = STYLE_MBR;
        assert_eq!(plan_data_partition(&l, 512), Err(PlanError::NotGpt));
    }

    #[test]
    fn resize_maximum_stops_at_the_next_partition_or_the_usable_end() {
        let l = parse_drive_layout(&gpt(&[
            (17408, 16 * MIB, 1, MSR),
            (17 * MIB, GIB, 2, BASIC_DATA),
        ]))
        .unwrap();
        let max = max_partition_size(&l, 2, 10 * GIB, 512).unwrap();
        assert_eq!(17 * MIB + max, 10 * GIB - 33 * 512);
        // A partition followed by another can grow only up to it.
        let l = parse_drive_layout(&gpt(&[
            (MIB, GIB, 1, BASIC_DATA),
            (3 * GIB, GIB, 2, BASIC_DATA),
        ]))
        .unwrap();
        assert_eq!(
            max_partition_size(&l, 1, 10 * GIB, 512).unwrap(),
            3 * GIB - MIB
        );
        assert!(max_partition_size(&l, 9, 10 * GIB, 512).is_err());
    }

    #[test]
    fn written_layout_round_trips() {
        let l = parse_drive_layout(&gpt(&[(17408, 16 * MIB, 1, MSR)])).unwrap();
        let PartitionPlan::Create(p) = plan_data_partition(&l, 512).unwrap() else {
            panic!("expected a partition")
        };
        let id = uuid::uuid!("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
        let buf = gpt_layout_with(&l, &[NewEntry::data(p, id)]);
        assert_eq!(buf.len(), HEADER_SIZE + 2 * ENTRY_SIZE);
        let back = parse_drive_layout(&buf).unwrap();
        assert_eq!(back.partitions.len(), 2);
        let (kept, was) = (&back.partitions[0], &l.partitions[0]);
        assert_eq!(
            (kept.start, kept.length, kept.gpt_type),
            (was.start, was.length, was.gpt_type)
        );
        assert_eq!(kept.raw[..28], was.raw[..28]);
        assert_eq!(kept.raw[29..], was.raw[29..]);
        assert_eq!(back.partitions[1].gpt_type, Some(BASIC_DATA));
        assert_eq!(back.partitions[1].start, p.start);
        assert_eq!(back.usable_length, l.usable_length);
        let e = &buf[HEADER_SIZE + ENTRY_SIZE..];
        assert_eq!(e[28], 1, "RewritePartition set on the new entry");
        assert_eq!(buf[HEADER_SIZE + 28], 1, "and on the kept one");
        assert_eq!(e[48..64], id.to_bytes_le());
        assert_eq!(e[64..72], NO_DRIVE_LETTER.to_le_bytes());
    }

    #[test]
    fn an_empty_gpt_gets_a_reserved_partition_first_and_data_second() {
        let l = parse_drive_layout(&gpt(&[])).unwrap();
        let msr = msr_entry(&l, 512, Uuid::nil()).expect("an MSR on an empty GPT");
        assert_eq!(
            (msr.start, msr.length, msr.gpt_type),
            (17408, MSR_SIZE, MSR)
        );
        let planned = l.with(&msr);
        assert_eq!(planned.partitions[0].number, 1);
        let PartitionPlan::Create(p) = plan_data_partition(&planned, 512).unwrap() else {
            panic!("expected a partition")
        };
        assert!(
            p.start >= msr.start + MSR_SIZE && p.start % MIB == 0,
            "{p:?}"
        );
        let buf = gpt_layout_with(&l, &[msr, NewEntry::data(p, Uuid::nil())]);
        let back = parse_drive_layout(&buf).unwrap();
        assert_eq!(back.partitions[0].gpt_type, Some(MSR));
        assert_eq!(back.partitions[1].gpt_type, Some(BASIC_DATA));
        // A disk with partitions, or an MBR one, gets none.
        assert_eq!(msr_entry(&planned, 512, Uuid::nil()), None);
    }

    /// Found by the `windows_buffers` fuzz target: a usable area ending past `i64::MAX` made
    /// PartitionDisk plan a partition whose offset could not be written (negative once signed).
    #[test]
    fn a_usable_area_past_the_signed_range_gets_no_partition() {
        let mut l = parse_drive_layout(&gpt(&[])).unwrap();
        l.usable_start = i64::MAX as u64 - 4096;
        l.usable_length = 10 * GIB;
        assert_eq!(msr_entry(&l, 512, Uuid::nil()), None);
        assert_eq!(plan_data_partition(&l, 512), Err(PlanError::NoSpace));
    }
}

#[cfg(test)]
#[path = "layout_volume_tests.rs"]
mod volume_tests;
