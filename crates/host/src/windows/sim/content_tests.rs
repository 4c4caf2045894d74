//! PartitionDisk over a simulated Windows whose disks have contents: a RAW disk is not an empty
//! one.

use super::storage_tests::services;
use super::tests::machine;
use super::*;
use crate::windows::os::{self as seam};
use csi_proxy_core::Kind;

const GIB: u64 = 1 << 30;

/// What another OS left on a whole disk of `len` bytes: `(kind the probe names, offset, bytes)`.
fn foreign(len: u64) -> Vec<(&'static str, u64, Vec<u8>)> {
    let mut ext4 = vec![0u8; 2048];
    ext4[1080..1082].copy_from_slice(&0xEF53u16.to_le_bytes());
    ext4[1024 + 0x60] = 0x40; // INCOMPAT_EXTENTS
    let mut lvm = vec![0u8; 1024];
    lvm[512..520].copy_from_slice(b"LABELONE");
    lvm[536..544].copy_from_slice(b"LVM2 001");
    // An md 1.0 member keeps its superblock 8 KiB before the end (4 KiB aligned), naming its
    // own sector; its data (here blank) starts at sector 0.
    let md_at = ((len / 512 - 16) & !7) * 512;
    let mut md = vec![0u8; 512];
    md[0..4].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
    md[4..8].copy_from_slice(&1u32.to_le_bytes());
    // super_offset is at byte 144 of the 1.x superblock (128 is data_offset).
    md[144..152].copy_from_slice(&(md_at / 512).to_le_bytes());
    vec![
        ("ext4", 0, ext4),
        ("crypto_LUKS", 0, b"LUKS\xba\xbe\x00\x02".to_vec()),
        ("LVM2_member", 0, lvm),
        (
            "zfs_member",
            128 << 10,
            0x00ba_b10cu64.to_le_bytes().to_vec(),
        ),
        ("linux_raid_member", md_at, md),
    ]
}

#[test]
fn partition_disk_refuses_a_raw_disk_with_foreign_content_and_writes_nothing() {
    let m = machine();
    let (disk, _) = services(&m);
    for sector in [512u64, 4096] {
        for (kind, at, bytes) in foreign(GIB) {
            let n = m.sim.add_disk_with_sector(GIB, 3, sector);
            m.sim.write_disk(n, at, &bytes);
            let head = m.sim.disk_bytes(n, 0, 1 << 20);
            let tail = m.sim.disk_bytes(n, GIB - (1 << 20), 1 << 20);
            let e = disk.partition_disk(n).unwrap_err();
            assert_eq!(
                e.kind(),
                Kind::FailedPrecondition,
                "{kind}: {}",
                e.message()
            );
            assert!(
                e.message().contains(kind) && e.message().contains("RAW"),
                "{kind} on {sector}: {}",
                e.message()
            );
            assert!(m.sim.partitions(n).is_empty(), "{kind}");
            assert_eq!(
                m.sim.disk_bytes(n, 0, 1 << 20),
                head,
                "{kind}: head changed"
            );
            assert_eq!(
                m.sim.disk_bytes(n, GIB - (1 << 20), 1 << 20),
                tail,
                "{kind}: tail changed"
            );
        }
    }
}

#[test]
fn an_empty_raw_disk_is_initialised_on_512_byte_and_4kn_disks() {
    let m = machine();
    let (disk, vol) = services(&m);
    for sector in [512u64, 4096] {
        let n = m.sim.add_disk_with_sector(10 * GIB, 3, sector);
        disk.partition_disk(n).unwrap();
        assert_eq!(vol.list_volumes_on_disk(n, 0).unwrap().len(), 1);
        // IOCTL_DISK_CREATE_DISK wrote the protective MBR and the GPT headers.
        assert_eq!(m.sim.disk_bytes(n, 510, 2), [0x55, 0xAA]);
        assert_eq!(m.sim.disk_bytes(n, sector, 8), b"EFI PART");
        // Idempotent: now a GPT disk, it is neither probed nor written again.
        disk.partition_disk(n).unwrap();
    }
}

#[test]
fn disk_reads_must_be_whole_sectors() {
    let m = machine();
    let n = m.sim.add_disk_with_sector(GIB, 3, 4096);
    let h = seam::open(&*m.sim, &format!(r"\\.\PhysicalDrive{n}"), false).unwrap();
    for (offset, len) in [(0, 100), (512, 4096), (0, 512)] {
        let e = m.sim.read_at(h.raw(), offset, len).unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMETER, "{offset}+{len}");
    }
    assert_eq!(m.sim.read_at(h.raw(), 4096, 8192).unwrap().len(), 8192);
    // A query handle cannot read at all.
    let q = seam::open_query(&*m.sim, &format!(r"\\.\PhysicalDrive{n}")).unwrap();
    assert_eq!(
        m.sim.read_at(q.raw(), 0, 4096).unwrap_err().code,
        code::ACCESS_DENIED
    );
}

#[test]
fn resize_after_the_disk_grew_never_succeeds_without_growing() {
    let m = machine();
    let (disk, vol) = services(&m);
    for sector in [512u64, 4096] {
        let n = m.sim.add_disk_with_sector(10 * GIB, 3, sector);
        disk.partition_disk(n).unwrap();
        let id = vol.list_volumes_on_disk(n, 0).unwrap().remove(0);
        vol.format_volume(&id).unwrap();
        let before = vol.get_volume_stats(&id).unwrap().total_bytes;
        // The disk grows; Windows re-reads its size but its GPT still records the old usable
        // area (nothing documents the backup GPT moving).
        m.sim.grow_disk(n, 20 * GIB);
        vol.resize_volume(&id, 0).unwrap();
        let after = vol.get_volume_stats(&id).unwrap().total_bytes;
        assert!(after > before + 9 * GIB, "{sector}: {before} -> {after}");
    }
    // Where the partition manager will not grow past the recorded usable area, the resize
    // fails, naming the grow: never OK with nothing grown.
    let n = m.sim.add_disk(10 * GIB, 3);
    disk.partition_disk(n).unwrap();
    let id = vol.list_volumes_on_disk(n, 0).unwrap().remove(0);
    vol.format_volume(&id).unwrap();
    m.sim.keep_usable_area(n);
    m.sim.grow_disk(n, 20 * GIB);
    let e = vol.resize_volume(&id, 0).unwrap_err();
    assert!(e.message().contains("partition"), "{}", e.message());
}

#[test]
fn state_changing_controls_are_sent_once_with_no_output_buffer() {
    let m = machine();
    let (disk, vol) = services(&m);
    let n = m.sim.add_disk(10 * GIB, 3);
    disk.partition_disk(n).unwrap();
    // One data volume for the one data partition (a layout write applied twice would queue two).
    assert_eq!(vol.list_volumes_on_disk(n, 0).unwrap().len(), 1);
    let id = vol.list_volumes_on_disk(n, 0).unwrap().remove(0);
    vol.format_volume(&id).unwrap();
    m.sim.grow_disk(n, 12 * GIB);
    vol.resize_volume(&id, 0).unwrap();
    // Grown once, to the disk's end less the backup GPT: not twice, and not refused.
    let (_, start, length, _) = m.sim.partitions(n)[1];
    assert_eq!(start + length, 12 * GIB - 33 * 512, "{start} + {length}");
}

#[test]
fn the_layout_is_written_once_the_msr_create_disk_made_has_arrived() {
    let m = machine();
    let (disk, vol) = services(&m);
    m.sim.set_arrival_delay(Duration::from_secs(2));
    m.sim.set_create_disk_makes_msr(true);
    let n = m.sim.add_disk(10 * GIB, 3);
    disk.partition_disk(n).unwrap();
    // One MSR (the one CREATE_DISK made), then the data partition, number 2.
    let parts = m.sim.partitions(n);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[1].0, 2);
    assert_eq!(vol.list_volumes_on_disk(n, 2).unwrap().len(), 1);
}
