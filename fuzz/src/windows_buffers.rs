//! Buffers the Windows hosts receive from drivers and firmware, which a tenant can shape (a disk's
//! partition table and identity strings come from the disk; the SMBIOS table from the VM's
//! firmware): `DRIVE_LAYOUT_INFORMATION_EX`, `PARTITION_INFORMATION_EX`,
//! `STORAGE_DEVICE_ID_DESCRIPTOR`, `STORAGE_DEVICE_DESCRIPTOR`, `SCSI_ADDRESS`,
//! `STORAGE_DEVICE_NUMBER`, `VOLUME_DISK_EXTENTS`, the raw SMBIOS table and the initiator's
//! MULTI_SZ lists. The first byte picks the parser; the rest is its input.
//! - nothing panics, and nothing allocates by a count the buffer states (every parser reads
//!   only what the buffer holds);
//! - a partition PartitionDisk would add to a parsed layout (with the reserved partition first
//!   on an empty GPT) lies inside the usable area, overlaps no partition the layout lists, and
//!   the layout written with it parses back with every old entry unchanged.

use csi_proxy_formats::uuid::Uuid;
use csi_proxy_formats::windows_buffers::layout::{
    self, NewEntry, PartitionPlan, gpt_layout_with, msr_entry, parse_drive_layout,
};
use csi_proxy_formats::windows_buffers::{iscsi, smbios, storage};

/// One input; see the module doc.
pub fn run(data: &[u8]) {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    match pick % 6 {
        0 => layout_plan(input, if pick & 0x80 != 0 { 4096 } else { 512 }),
        1 => {
            let _ = layout::parse_partition_info(input);
        }
        2 => {
            if let Ok(ids) = storage::parse_device_id_descriptor(input) {
                let _ = storage::page83(&ids);
            }
            let _ = storage::device_descriptor_serial(input);
        }
        3 => {
            let _ = storage::parse_scsi_address(input);
            let _ = storage::parse_device_number(input);
            if let Ok(extents) = storage::parse_volume_disk_extents(input) {
                // Every extent came from the buffer: 24 bytes each after the 8-byte header.
                assert!(
                    8 + extents.len() * 24 <= input.len().max(8),
                    "{}",
                    extents.len()
                );
            }
        }
        4 => {
            if let Ok(Some(serial)) = smbios::system_serial(input) {
                // Taken from the table's own bytes: at most one character per byte (a byte that
                // is not text becomes one replacement character).
                assert!(serial.chars().count() <= input.len(), "{serial:?}");
            }
        }
        _ => {
            let units: Vec<u16> = input
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            for s in iscsi::parse_multi_sz(&units) {
                assert!(!s.is_empty() && !s.contains('\0'), "{s:?}");
                let _ = iscsi::send_targets_portal(&s);
            }
        }
    }
}

/// PartitionDisk's reading and planning of a layout, with the properties in the module doc.
fn layout_plan(input: &[u8], sector: u64) {
    let Ok(l) = parse_drive_layout(input) else {
        return;
    };
    let msr = msr_entry(&l, sector, Uuid::nil());
    let planned = msr.as_ref().map_or_else(|| l.clone(), |m| l.with(m));
    let Ok(PartitionPlan::Create(new)) = layout::plan_data_partition(&planned, sector) else {
        return;
    };
    let end = l.usable_start.saturating_add(l.usable_length);
    let mut entries: Vec<NewEntry> = msr.into_iter().collect();
    entries.push(NewEntry::data(new, Uuid::nil()));
    for e in &entries {
        assert!(
            e.start >= l.usable_start && e.start.saturating_add(e.length) <= end && e.length > 0,
            "{e:?} outside the usable area {}..{end}",
            l.usable_start
        );
        for p in l.partitions.iter().filter(|p| p.length > 0) {
            let overlap =
                e.start < p.start.saturating_add(p.length) && p.start < e.start + e.length;
            assert!(!overlap, "{e:?} overlaps {p:?}");
        }
    }
    if let [msr, data] = entries.as_slice() {
        assert!(
            data.start >= msr.start + msr.length,
            "{data:?} overlaps {msr:?}"
        );
    }
    let written = gpt_layout_with(&l, &entries);
    let back = parse_drive_layout(&written).expect("a written layout parses");
    assert_eq!(back.partitions.len(), l.partitions.len() + entries.len());
    for (old, new) in l.partitions.iter().zip(&back.partitions) {
        assert_eq!(
            (old.start, old.length, old.gpt_type),
            (new.start, new.length, new.gpt_type)
        );
    }
}
