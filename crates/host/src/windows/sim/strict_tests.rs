//! The places where the simulated Windows was kinder than the documentation, each now modelled with
//! its failure (ledger rows 21, 23, 30, 70, 71), and the host paths they guard.

use super::storage_tests::{services, stage};
use super::tests::{machine, partitioned};
use super::*;
use crate::windows::os::{self as seam};
use csi_proxy_core::Kind;
use csi_proxy_core::disk::DiskHost;
use csi_proxy_core::volume::VolumeHost;
use csi_proxy_formats::windows_buffers::ioctl as io;

const GIB: u64 = 1 << 30;

fn disk_handle(m: &super::tests::Machine, n: u32) -> seam::Handle<'_> {
    seam::open(&*m.sim, &format!(r"\\.\PhysicalDrive{n}"), true).unwrap()
}

fn volume_handle<'a>(m: &'a super::tests::Machine, id: &str) -> seam::Handle<'a> {
    seam::open(&*m.sim, &crate::windows::disk::volume_device(id), true).unwrap()
}

#[test]
fn set_disk_attributes_takes_only_the_documented_structure() {
    let m = machine();
    let n = m.sim.add_san_disk(GIB, 3);
    let h = disk_handle(&m, n);
    let good = io::set_offline(false);
    let mut bad: Vec<Vec<u8>> = Vec::new();
    // Version is the structure's size, not anything else.
    let mut v = good.to_vec();
    v[0..4].copy_from_slice(&16u32.to_le_bytes());
    bad.push(v);
    // "Reserved1[3]: Reserved. Must be set to FALSE (0)."
    let mut v = good.to_vec();
    v[6] = 1;
    bad.push(v);
    // "Reserved2[4]: Reserved. Must be set to 0."
    let mut v = good.to_vec();
    v[36] = 1;
    bad.push(v);
    // A short structure.
    bad.push(good[..24].to_vec());
    for input in &bad {
        let e = seam::ioctl(&h, io::DISK_SET_DISK_ATTRIBUTES, input, 0).unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMETER, "{input:?}");
    }
    assert_eq!(
        m.sim.disk_attributes(n),
        Some((true, true)),
        "nothing changed"
    );
    // What the host sends is taken, and SetDiskState brings the disk online through it.
    drop(h);
    m.disk.set_disk_online(n, true).unwrap();
    assert_eq!(m.sim.disk_attributes(n), Some((false, false)));
}

#[test]
fn volume_reads_on_a_4kn_disk_are_whole_4k_sectors() {
    let m = machine();
    let n = m.sim.add_disk_with_sector(10 * GIB, 3, 4096);
    m.disk.partition_disk(n).unwrap();
    let id = m.volume.list_volumes_on_disk(n, None).unwrap().remove(0);
    let h = volume_handle(&m, &id);
    for (offset, len) in [(0, 512), (512, 4096), (4096, 1024)] {
        let e = m.sim.read_at(h.raw(), offset, len).unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMETER, "{offset}+{len}");
    }
    assert_eq!(m.sim.read_at(h.raw(), 4096, 8192).unwrap().len(), 8192);
    drop(h);
    // FormatVolume's signature probe reads the volume's head in whole sectors of the disk.
    m.volume.format_volume(&id).unwrap();
    assert_eq!(m.sim.filesystem_of(&id).unwrap().0, "NTFS");
}

#[test]
fn a_read_only_disk_refuses_extend_and_format_and_the_host_names_the_attribute() {
    let m = machine();
    // Format: the volume of a read-only disk is never reported formatted.
    let (n, id) = partitioned(&m);
    m.sim.set_disk_read_only(n, true);
    let e = m.volume.format_volume(&id).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    // The documented meaning of Format's 43006, not a bare "return value".
    assert!(
        e.message().contains("drive is read only"),
        "{}",
        e.message()
    );
    assert!(e.message().contains("43006"), "{}", e.message());
    assert_eq!(m.sim.filesystem_of(&id), None);
    assert!(!m.volume.is_volume_formatted(&id).unwrap());

    // Extend: the simulated Windows refuses the filesystem write itself.
    m.sim.set_disk_read_only(n, false);
    m.volume.format_volume(&id).unwrap();
    let size = m.sim.filesystem_of(&id).unwrap().1;
    m.sim.set_disk_read_only(n, true);
    let vh = volume_handle(&m, &id);
    let sectors = ((size + (1 << 20)) / SECTOR) as i64;
    let e = seam::ioctl(&vh, io::FSCTL_EXTEND_VOLUME, &sectors.to_le_bytes(), 0).unwrap_err();
    assert_eq!(e.code, code::WRITE_PROTECT);
    drop(vh);

    // The partition grew while the disk was writable, the filesystem did not: ResizeVolume has
    // only the filesystem left to extend, and refuses it naming the attribute.
    m.sim.set_disk_read_only(n, false);
    m.sim.grow_disk(n, 20 * GIB);
    let dh = disk_handle(&m, n);
    seam::ioctl(&dh, io::DISK_UPDATE_DRIVE_SIZE, &[], 64).unwrap();
    let (number, _, length, _) = m.sim.partitions(n)[1];
    seam::ioctl(
        &dh,
        io::DISK_GROW_PARTITION,
        &io::grow_partition(number, 5 * GIB),
        0,
    )
    .unwrap();
    drop(dh);
    m.sim.set_disk_read_only(n, true);
    let e = m
        .volume
        .resize_volume(&id, csi_proxy_core::volume::ResizeTarget::Maximum)
        .unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message().contains("DISK_ATTRIBUTE_READ_ONLY"),
        "{}",
        e.message()
    );
    assert_eq!(m.sim.filesystem_of(&id).unwrap().1, size);
    assert_eq!(m.sim.partitions(n)[1].2, length + 5 * GIB);
}

#[test]
fn extend_volume_is_accepted_on_a_raw_volume_within_its_partition() {
    let m = machine();
    let (n, id) = partitioned(&m);
    let length = m.sim.partitions(n)[1].2;
    let vh = volume_handle(&m, &id);
    // "This control code is supported on NTFS, RAW, and ReFS file systems."
    let within = (length / SECTOR) as i64;
    seam::ioctl(&vh, io::FSCTL_EXTEND_VOLUME, &within.to_le_bytes(), 0).unwrap();
    let past = within + 8;
    let e = seam::ioctl(&vh, io::FSCTL_EXTEND_VOLUME, &past.to_le_bytes(), 0).unwrap_err();
    assert_eq!(e.code, code::INVALID_PARAMETER);
    assert_eq!(m.sim.filesystem_of(&id), None, "still RAW");
}

/// A snapshot or clone of a staged disk, restored on the same node, arrives beside it.
#[test]
fn a_disk_copy_beside_its_source_is_never_brought_online() {
    let m = machine();
    let (disk, vol) = services(&m);
    let (source, _) = stage(&m, &disk, &vol);
    let copy = m.sim.add_disk_copy(source, 5);
    // Windows keeps the copy offline for the collision.
    assert_eq!(m.sim.disk_attributes(copy).map(|a| a.0), Some(true));
    let e = disk.set_disk_state(copy, true).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message().contains("GPT disk GUID") && e.message().contains(&format!("disk {source}")),
        "{}",
        e.message()
    );
    assert_eq!(m.sim.online_id_collisions(), vec![]);
    assert_eq!(m.sim.disk_attributes(copy).map(|a| a.0), Some(true));
    assert!(vol.list_volumes_on_disk(copy, 0).unwrap().is_empty());
    // With the source offline the copy is the only disk with its IDs: it comes online (a
    // driver's restore onto a node the source left), and then the source is refused.
    disk.set_disk_state(source, false).unwrap();
    disk.set_disk_state(copy, true).unwrap();
    assert_eq!(vol.list_volumes_on_disk(copy, 0).unwrap().len(), 1);
    let e = disk.set_disk_state(source, true).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert_eq!(m.sim.online_id_collisions(), vec![]);
}

#[test]
fn an_mbr_disk_copy_collides_on_its_signature() {
    let m = machine();
    let (source, _) = m.sim.add_mbr_disk(10 * GIB, 3, 4 * GIB);
    let copy = m.sim.add_disk_copy(source, 4);
    assert_eq!(m.sim.disk_attributes(copy).map(|a| a.0), Some(true));
    let e = m.disk.set_disk_online(copy, true).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(
        e.message().contains("MBR disk signature"),
        "{}",
        e.message()
    );
    assert_eq!(m.sim.online_id_collisions(), vec![]);
}

/// Two SetDiskState(online) at once, on a disk and its copy, both offline: the collision check
/// and the write that brings a disk online are one step across disks, so exactly one comes
/// online and the other is refused naming the first. Mutation check: without the disk host's
/// `onlining` lock the copy's call checks while the source's write is held (both offline),
/// both come online and `online_id_collisions` names them.
#[test]
fn a_disk_and_its_copy_brought_online_at_once_never_both_come_online() {
    let m = machine();
    let (source, _) = m.sim.add_mbr_disk(10 * GIB, 3, 4 * GIB);
    let copy = m.sim.add_disk_copy(source, 4);
    m.disk.set_disk_online(source, false).unwrap();
    // The source's call stops at its attribute write, after its own collision check.
    m.sim.hang_next_ioctl(io::DISK_SET_DISK_ATTRIBUTES);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| m.disk.set_disk_online(source, true));
        for _ in 0..10_000 {
            if m.sim.hung_calls() == 1 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(m.sim.hung_calls(), 1, "the source's write never came");
        let second = scope.spawn(|| m.disk.set_disk_online(copy, true));
        // Give the copy's call every chance to get through while the source's is held (it
        // does when the two are not one step); then let the source's go on.
        for _ in 0..500 {
            if second.is_finished() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        m.sim.release_hung();
        let first = first.join().unwrap();
        let second = second.join().unwrap();
        assert_eq!(m.sim.online_id_collisions(), vec![]);
        first.unwrap();
        let e = second.unwrap_err();
        assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
        assert!(
            e.message().contains(&format!("disk {source}")),
            "{}",
            e.message()
        );
    });
}

/// DeleteVolumeMountPointW: "The string must end with a trailing backslash ('\')". The
/// simulated Windows refuses a path without it and keeps the mount point (it once accepted
/// one, which let a caller passing the bare folder pass here and fail on a node).
#[test]
fn delete_volume_mount_point_needs_the_trailing_backslash() {
    let m = machine();
    let (_, id) = partitioned(&m);
    let target = r"C:\mnt\strict";
    m.sim.mkdir(target);
    m.volume.format_volume(&id).unwrap();
    let before = m.sim.mount_points().len();
    m.volume.mount_volume(&id, target).unwrap();
    assert_eq!(m.sim.mount_points().len(), before + 1);
    let e = m.sim.delete_volume_mount_point(target).unwrap_err();
    assert_eq!(e.code, code::INVALID_PARAMETER);
    assert_eq!(
        m.sim.mount_points().len(),
        before + 1,
        "removed without the backslash"
    );
    m.sim
        .delete_volume_mount_point(&format!(r"{target}\"))
        .unwrap();
    assert_eq!(m.sim.mount_points().len(), before);
}
