//! GPT and MBR disks, as a disk initialised elsewhere arrives (restored from an image, prepared by
//! another tool): `IOCTL_DISK_GET_DRIVE_LAYOUT_EX` reports `PARTITION_STYLE_MBR` and each entry
//! a `PARTITION_INFORMATION_MBR` (`PartitionType` u8 @32, `BootIndicator` @33,
//! `RecognizedPartition` @34, `HiddenSectors` u32 @36; winioctl.h,
//! learn.microsoft.com/windows/win32/api/winioctl/ns-winioctl-partition_information_mbr), and
//! `IOCTL_DISK_GROW_PARTITION` grows a partition up to the next one or the end of the disk
//! (learn.microsoft.com/windows/win32/api/winioctl/ni-winioctl-ioctl_disk_grow_partition,
//! which documents no partition-style limit).

use super::{MIB, Part, ReturnValue, SECTOR, SimWindows, Win32, part};
use csi_proxy_formats::windows_buffers::layout::{
    BASIC_DATA, ENTRY_SIZE, NO_DRIVE_LETTER, NewEntry, STYLE_GPT, STYLE_MBR,
};
use uuid::Uuid;

/// `PARTITION_IFS`: the MBR type of an NTFS (or exFAT) partition.
pub const PARTITION_IFS: u8 = 0x07;

/// The `PARTITION_INFORMATION_EX` of `p` on an MBR disk: every simulated MBR partition is a
/// recognised primary IFS partition.
pub(super) fn entry(p: &Part) -> [u8; ENTRY_SIZE] {
    let mut e = NewEntry {
        start: p.start,
        length: p.length,
        gpt_type: Uuid::nil(),
        id: Uuid::nil(),
        attributes: 0,
    }
    .bytes();
    e[0..4].copy_from_slice(&STYLE_MBR.to_le_bytes());
    e[24..28].copy_from_slice(&p.number.to_le_bytes());
    e[28] = 0;
    e[32..].fill(0);
    e[32] = PARTITION_IFS;
    e[34] = 1;
    e[36..40].copy_from_slice(&((p.start / SECTOR) as u32).to_le_bytes());
    e
}

impl SimWindows {
    /// A disk of `size` bytes at `lun` initialised GPT elsewhere (another OS, an image), its
    /// partitions `(type, start, length)` in GPT entry order and numbered so, as partmgr
    /// numbers them: the first entry is partition 1 whatever its offset, and there need be no
    /// MSR. Each basic-data partition has an NTFS volume (no drive letter). Returns the disk
    /// number and the volumes' GUID paths in entry order.
    pub fn add_gpt_disk(
        &self,
        size: u64,
        lun: u8,
        parts: &[(Uuid, u64, u64)],
    ) -> (u32, Vec<String>) {
        let n = self.add_disk(size, lun);
        let mut s = self.lock();
        let ids: Vec<Uuid> = (0..=parts.len()).map(|_| s.guid()).collect();
        let Some(d) = s.disks.get_mut(&n) else {
            return (n, Vec::new());
        };
        d.style = STYLE_GPT;
        d.disk_id = ids[parts.len()];
        let (start, end) = d.gpt_usable();
        (d.usable_start, d.usable_length) = (start, end - start);
        d.write_gpt_headers();
        d.parts = parts
            .iter()
            .zip(&ids)
            .enumerate()
            .map(|(i, (&(t, start, length), &id))| {
                part(i as u32 + 1, start, length, t, id, NO_DRIVE_LETTER)
            })
            .collect();
        let numbers: Vec<u32> = d
            .parts
            .iter()
            .filter(|p| p.gpt_type == BASIC_DATA)
            .map(|p| p.number)
            .collect();
        let mut names = Vec::new();
        for number in numbers {
            if let Some(v) = s.create_volume(n, number) {
                names.push(s.volumes[v].names[0].clone());
            }
        }
        drop(s);
        for name in &names {
            let formatted = self.format_ntfs(name);
            assert!(
                matches!(formatted, Ok(ReturnValue::Code(0))),
                "{formatted:?}"
            );
        }
        (n, names)
    }

    /// A disk of `size` bytes at `lun`, initialised MBR elsewhere, with one primary partition
    /// of `partition` bytes at 1 MiB holding an NTFS volume that fills it; automount letters
    /// it. Returns the disk number and the volume's GUID path.
    pub fn add_mbr_disk(&self, size: u64, lun: u8, partition: u64) -> (u32, String) {
        let n = self.add_disk(size, lun);
        let mut s = self.lock();
        let id = s.guid();
        if let Some(d) = s.disks.get_mut(&n) {
            d.style = STYLE_MBR;
            // Its signature (the ID's first four bytes), which no other disk has.
            d.disk_id = id;
            // Kept as basic data, the simulator's mark of a partition a volume lives on.
            d.parts = vec![part(1, MIB, partition, BASIC_DATA, Uuid::nil(), 0)];
        }
        let v = s
            .create_volume(n, 1)
            .expect("a basic partition has a volume");
        let name = s.volumes[v].names[0].clone();
        drop(s);
        // Formatted the way Windows formats it (the WMI call the simulator models).
        let formatted = self.format_ntfs(&name);
        assert!(
            matches!(formatted, Ok(ReturnValue::Code(0))),
            "{formatted:?}"
        );
        (n, name)
    }
}
