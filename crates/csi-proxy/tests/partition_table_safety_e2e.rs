//! Partition tables that lie or are stale, through the daemon's endpoints on real loop disks:
//! PartitionDisk never restores a stale backup table over a whole-disk filesystem, a re-stage
//! while the partition is mounted answers OK, and ResizeVolume never repairs a table, never
//! grows a partition under a filesystem it cannot grow, and never shrinks a partition. Needs
//! root (loop devices, mount); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, DiskClient, LoopDisk, VolumeClient, can_use_loop_devices, v1_clients};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::os::unix::fs::FileExt;
use std::path::Path;
use tonic::Code;

const SECTOR: u64 = 512;
/// Sectors of a GPT copy as the daemon writes it: a 16 KiB entry array plus its header.
const GPT_SECTORS: u64 = 33;

fn refusal<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> String {
    let s = r.expect_err("expected a refusal");
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    s.message().to_string()
}

fn read(dev: &Path, at: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    std::fs::File::open(dev)
        .unwrap()
        .read_exact_at(&mut buf, at)
        .unwrap();
    buf
}

fn write(dev: &Path, at: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
    f.write_all_at(bytes, at).unwrap();
    f.sync_all().unwrap();
}

fn size_of(dev: &Path) -> u64 {
    let name = dev.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_to_string(format!("/sys/class/block/{name}/size"))
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap()
        * 512
}

async fn partition(dc: &mut DiskClient, n: u32) -> Result<(), tonic::Status> {
    dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .map(drop)
}

async fn resize(vc: &mut VolumeClient, id: &str, size_bytes: i64) -> Result<(), tonic::Status> {
    vc.resize_volume(v1::ResizeVolumeRequest {
        volume_id: id.into(),
        size_bytes,
    })
    .await
    .map(drop)
}

/// Regression case: an ext4 made on the whole disk of a disk that once had a GPT keeps the old
/// backup table at its end. Before, PartitionDisk "repaired" the primary from it over the
/// filesystem's first sectors and answered OK.
#[tokio::test(flavor = "multi_thread")]
async fn a_whole_disk_filesystem_with_a_stale_backup_table_is_never_partitioned_over() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "stale", 64).unwrap();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let n = l.disk_number();
    common::partition_one(&mut dc, &mut vc, n).await;
    let end = size_of(&l.dev);
    let backup_at = end - GPT_SECTORS * SECTOR;
    let backup = read(&l.dev, backup_at, (GPT_SECTORS * SECTOR) as usize);
    assert_eq!(&backup[backup.len() - 512..][..8], b"EFI PART");

    // The kernel forgets the partition; ext4 goes on the whole disk; whatever mkfs did to the
    // last sectors, the old backup table is put back there (as a disk image would carry it).
    l.run("partx", &["-d", "--nr", "1"], &l.dev);
    l.run("mkfs.ext4", &["-q", "-F"], &l.dev);
    write(&l.dev, backup_at, &backup);
    l.run("e2fsck", &["-n", "-f"], &l.dev);
    let before = l.fingerprint();

    let listed = common::volumes_on(&mut vc, n).await;
    assert!(
        listed.iter().all(|id| id.contains("-part0-")),
        "only the whole-disk filesystem is a volume: {listed:?}"
    );
    let msg = refusal(
        dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await,
    );
    assert!(
        msg.contains("PartitionDisk") && msg.contains("ext") && msg.contains("stale"),
        "{msg}"
    );
    assert_eq!(l.fingerprint(), before, "nothing was written to the disk");
    l.run("e2fsck", &["-n", "-f"], &l.dev);
}

/// Drivers call PartitionDisk on every NodeStage, also while the volume is staged (kubelet
/// stages again after a restart): that is an OK no-op, not EBUSY from an exclusive open.
#[tokio::test(flavor = "multi_thread")]
async fn re_stage_while_the_partition_is_mounted_is_an_ok_no_op() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "restage", 64).unwrap();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let n = l.disk_number();
    let id = common::partition_one(&mut dc, &mut vc, n).await;
    common::format_ok(&mut vc, &id).await;
    let stage = d.k("plugins/kubernetes.io/csi/pv/r/globalmount");
    std::fs::create_dir_all(&stage).unwrap();
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .unwrap();
    let before = l.fingerprint();

    partition(&mut dc, n).await.unwrap();
    partition(&mut dc, n).await.unwrap();
    assert_eq!(common::volumes_on(&mut vc, n).await, vec![id.clone()]);
    assert_eq!(l.fingerprint(), before, "nothing was written to the disk");

    vc.unmount_volume(v1::UnmountVolumeRequest {
        volume_id: id,
        target_path: stage,
    })
    .await
    .unwrap();
}

/// A table whose primary copy is damaged is never repaired by ResizeVolume (not even on a disk
/// in use); PartitionDisk restores it where nothing else is on the disk, and the resize works
/// after that.
#[tokio::test(flavor = "multi_thread")]
async fn resize_never_repairs_a_table_and_partition_disk_restores_a_cut_one() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "damaged", 300).unwrap();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let n = l.disk_number();
    let id = common::partition_one(&mut dc, &mut vc, n).await;
    common::format_ok(&mut vc, &id).await;
    // A table write cut off between the primary array and its header: the array no longer
    // matches the header's CRC.
    let mut array = read(&l.dev, 2 * SECTOR, 512);
    array[100] ^= 0xFF;
    write(&l.dev, 2 * SECTOR, &array);
    let before = l.fingerprint();

    let msg = refusal(resize(&mut vc, &id, 0).await);
    assert!(
        msg.contains("ResizeVolume") && msg.contains("never repairs"),
        "{msg}"
    );
    assert_eq!(l.fingerprint(), before, "ResizeVolume wrote nothing");

    partition(&mut dc, n).await.unwrap();
    assert_ne!(
        l.fingerprint(),
        before,
        "PartitionDisk restored the primary"
    );
    assert_eq!(common::volumes_on(&mut vc, n).await, vec![id.clone()]);
    resize(&mut vc, &id, 0).await.unwrap();
    l.run("e2fsck", &["-n", "-f"], &l.partition(1));
}

/// A filesystem the host cannot grow (or whose size it cannot read) is refused before the
/// partition changes: before, the partition was grown, the filesystem was not, and the answer
/// was OK. With nothing to grow the call succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn resize_refuses_a_filesystem_it_cannot_grow_and_changes_nothing() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "ntfs", 64).unwrap();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let n = l.disk_number();
    let id = common::partition_one(&mut dc, &mut vc, n).await;
    // An NTFS boot sector, as Windows (or mkntfs) writes its OEM ID.
    let mut boot = vec![0u8; 512];
    boot[3..11].copy_from_slice(b"NTFS    ");
    boot[510] = 0x55;
    boot[511] = 0xAA;
    write(&l.partition(1), 0, &boot);
    // Nothing to grow: OK on any volume (gce-pd resizes at every stage).
    resize(&mut vc, &id, 0).await.unwrap();
    l.grow_to(300);
    dc.rescan(d1::RescanRequest {}).await.unwrap();
    let part_before = size_of(&l.partition(1));
    let before = l.fingerprint();

    let msg = refusal(resize(&mut vc, &id, 0).await);
    assert!(
        msg.contains("ntfs") && msg.contains("it is not grown"),
        "{msg}"
    );
    assert_eq!(size_of(&l.partition(1)), part_before);
    assert_eq!(l.fingerprint(), before, "the table was not grown");
}

/// The kernel's idea of a partition longer than the table's (another tool grew it) is never cut
/// back with BLKPG: that would shrink a partition under its filesystem.
#[tokio::test(flavor = "multi_thread")]
async fn resize_never_shrinks_the_kernels_partition() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "shrink", 128).unwrap();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let n = l.disk_number();
    let id = common::partition_one(&mut dc, &mut vc, n).await;
    common::format_ok(&mut vc, &id).await;
    l.grow_to(256);
    dc.rescan(d1::RescanRequest {}).await.unwrap();
    let table_len = size_of(&l.partition(1));
    let start: u64 = std::fs::read_to_string(format!("/sys/class/block/{}p1/start", l.name()))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The kernel is told of a longer partition than the table holds (resizepart: BLKPG).
    let longer = table_len / 512 + 2048;
    let out = std::process::Command::new("resizepart")
        .arg(&l.dev)
        .args(["1", &longer.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(size_of(&l.partition(1)), longer * 512, "start {start}");

    // A growth under 100 MiB writes no table; the table's length is then shorter than the
    // kernel's.
    let msg = refusal(resize(&mut vc, &id, (table_len + (10 << 20)) as i64).await);
    assert!(msg.contains("never shrunk"), "{msg}");
    assert_eq!(size_of(&l.partition(1)), longer * 512);
}

/// A GPT copy's header (LBA 1 for the primary, the last LBA for the backup) with its CRCs made
/// right again after `edit` changed it or its entry array (so only the lie itself is wrong).
fn rewrite_gpt(dev: &Path, header_at: u64, edit: impl Fn(&mut Vec<u8>, &mut Vec<u8>)) {
    let mut h = read(dev, header_at, SECTOR as usize);
    let entries_lba = u64::from_le_bytes(h[72..80].try_into().unwrap());
    let mut entries = read(dev, entries_lba * SECTOR, 128 * 128);
    edit(&mut h, &mut entries);
    let count = u32::from_le_bytes(h[80..84].try_into().unwrap()) as usize;
    if count <= 128 {
        let crc = csi_proxy_formats::gpt::crc32(&entries[..count * 128]);
        h[88..92].copy_from_slice(&crc.to_le_bytes());
    }
    h[16..20].fill(0);
    let crc = csi_proxy_formats::gpt::crc32(&h[..92]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    write(dev, entries_lba * SECTOR, &entries);
    write(dev, header_at, &h);
}

/// Tables that lie (entries overlapping, an entry past the disk's end, a header claiming 2^32
/// entries, a backup that disagrees with its primary, a header whose backup LBA or usable range
/// does not fit the disk), each with valid checksums, on a disk
/// holding a formatted volume: PartitionDisk, FormatVolume, ResizeVolume and ListVolumesOnDisk
/// answer a precise status or a harmless OK, the daemon keeps serving, and not a byte of the
/// disk changes.
#[tokio::test(flavor = "multi_thread")]
async fn lying_tables_change_nothing_through_four_rpcs() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "liar", 64).unwrap();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let n = l.disk_number();
    let id = common::partition_one(&mut dc, &mut vc, n).await;
    common::format_ok(&mut vc, &id).await;
    let good = read(&l.dev, 0, (34 * SECTOR) as usize);
    let end = size_of(&l.dev);
    let good_tail = read(
        &l.dev,
        end - GPT_SECTORS * SECTOR,
        (GPT_SECTORS * SECTOR) as usize,
    );
    let total = end / SECTOR;

    type Lie = (&'static str, u64, fn(&mut Vec<u8>, &mut Vec<u8>, u64));
    let lies: [Lie; 7] = [
        ("overlapping entries", SECTOR, |_, e, _| {
            // Entry 2: a copy of entry 1 with another unique GUID, over the same sectors.
            let first = e[..128].to_vec();
            e[128..256].copy_from_slice(&first);
            e[128 + 16] ^= 0xff;
        }),
        ("an entry past the disk's end", SECTOR, |_, e, total| {
            e[40..48].copy_from_slice(&(total + 1000).to_le_bytes());
        }),
        ("2^32 entries", SECTOR, |h, _, _| {
            h[80..84].copy_from_slice(&u32::MAX.to_le_bytes());
        }),
        ("a backup that disagrees", 0, |_, e, _| {
            e[16] ^= 0xff; // entry 1's unique GUID, in the backup only
        }),
        // Header fields a table write would trust: where the backup goes, what is usable.
        (
            "a backup header mid-disk, before usable sectors",
            SECTOR,
            |h, _, total| {
                h[32..40].copy_from_slice(&(total / 2).to_le_bytes());
            },
        ),
        ("a backup header past the disk", SECTOR, |h, _, total| {
            h[32..40].copy_from_slice(&(total + 1000).to_le_bytes());
        }),
        (
            "usable sectors inside the primary table",
            SECTOR,
            |h, _, _| {
                h[40..48].copy_from_slice(&2u64.to_le_bytes());
            },
        ),
    ];
    for (what, header_at, lie) in lies {
        let header_at = if header_at == 0 {
            end - SECTOR
        } else {
            header_at
        };
        rewrite_gpt(&l.dev, header_at, |h, e| lie(h, e, total));
        let before = l.fingerprint();
        let mut answers = Vec::new();
        for rpc in [
            "PartitionDisk",
            "FormatVolume",
            "ResizeVolume",
            "ListVolumesOnDisk",
        ] {
            let status = match rpc {
                "PartitionDisk" => partition(&mut dc, n).await.err(),
                "FormatVolume" => vc
                    .format_volume(v1::FormatVolumeRequest {
                        volume_id: id.clone(),
                    })
                    .await
                    .err(),
                "ResizeVolume" => resize(&mut vc, &id, 0).await.err(),
                _ => vc
                    .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
                        disk_number: n,
                        partition_number: 0,
                    })
                    .await
                    .err(),
            };
            assert_eq!(
                l.fingerprint(),
                before,
                "{what}: {rpc} changed the disk ({status:?})"
            );
            answers.push((rpc, status));
        }
        for (rpc, status) in answers {
            // A table write is refused outright; a backup's lie matters to a write of both
            // copies (ResizeVolume), not to PartitionDisk's no-op on a partitioned disk.
            let must_refuse = match rpc {
                "ResizeVolume" => true,
                "PartitionDisk" => !what.contains("backup"),
                _ => false,
            };
            if must_refuse {
                let s = status
                    .as_ref()
                    .unwrap_or_else(|| panic!("{what}: {rpc} answered OK"));
                assert_eq!(
                    s.code(),
                    Code::FailedPrecondition,
                    "{what}: {rpc}: {}",
                    s.message()
                );
                assert!(
                    s.message().contains("GPT") || s.message().contains("table"),
                    "{what}: {rpc} does not name the table: {}",
                    s.message()
                );
            }
            eprintln!("{what}: {rpc}: {:?}", status.as_ref().map(|s| s.message()));
            if let Some(s) = status {
                assert!(
                    matches!(s.code(), Code::FailedPrecondition | Code::NotFound),
                    "{what}: {rpc}: {:?} {}",
                    s.code(),
                    s.message()
                );
                assert!(s.message().contains(rpc), "{what}: {}", s.message());
            }
        }
        assert_eq!(l.fingerprint(), before, "{what}: the disk changed");
        // The daemon is alive and well: it still answers for the disk.
        dc.get_disk_stats(d1::GetDiskStatsRequest { disk_number: n })
            .await
            .unwrap();
        write(&l.dev, 0, &good);
        write(&l.dev, end - GPT_SECTORS * SECTOR, &good_tail);
    }
}

/// A GPT whose header puts its backup (and the end of the usable sectors) mid-disk, as the
/// table of a disk that has since grown does, and no data partition: PartitionDisk adds the
/// partition and writes the backup at the disk's real end, rebuilding the header from the
/// disk's geometry; what lies where the header said the backup was is untouched. Before: the
/// backup was written where the header said, over it.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_write_rebuilds_the_header_from_the_disks_geometry() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "grown", 64).unwrap();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let total = size_of(&l.dev) / SECTOR;
    let old_total = total / 2;
    let table = csi_proxy_formats::gpt::Gpt::new(
        SECTOR,
        old_total,
        csi_proxy_formats::uuid::Uuid::from_bytes([7; 16]),
    )
    .unwrap();
    // The primary only (array, header, protective MBR): the old backup is long overwritten.
    for (off, bytes) in table.serialize(old_total).into_iter().skip(1) {
        write(&l.dev, off, &bytes);
    }
    let old_backup = (old_total - GPT_SECTORS) * SECTOR;
    let data = vec![0x5a; (GPT_SECTORS * SECTOR) as usize];
    write(&l.dev, old_backup, &data);

    partition(&mut dc, l.disk_number()).await.unwrap();
    assert_eq!(
        read(&l.dev, old_backup, data.len()),
        data,
        "nothing was written where the header said the backup was"
    );
    let backup = read(&l.dev, (total - 1) * SECTOR, SECTOR as usize);
    assert_eq!(&backup[..8], b"EFI PART", "the backup is at the disk's end");
    let primary = read(&l.dev, SECTOR, SECTOR as usize);
    let alternate = u64::from_le_bytes(primary[32..40].try_into().unwrap());
    let last_usable = u64::from_le_bytes(primary[48..56].try_into().unwrap());
    assert_eq!(alternate, total - 1);
    assert_eq!(last_usable, total - 1 - GPT_SECTORS);
    assert_eq!(common::volumes_on(&mut vc, l.disk_number()).await.len(), 1);
}

/// MBR entries that would let a format destroy the table or another partition (starting in
/// LBA 0, past the disk's end, overlapping) make the disk's table untrusted:
/// ListVolumesOnDisk and PartitionDisk answer FAILED_PRECONDITION naming the entry, and the
/// disk is unchanged. An extended-partition container (0x85, Linux's) is never a volume.
/// Before: the entries were taken as they were, and the container was listed as a volume.
#[tokio::test(flavor = "multi_thread")]
async fn mbr_entries_that_lie_are_refused_and_containers_are_no_volumes() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "mbrlies", 64).unwrap();
    let n = l.disk_number();
    let total = (size_of(&l.dev) / SECTOR) as u32;
    let mbr = |entries: &[(u8, u32, u32)]| {
        let mut m = vec![0u8; 512];
        m[440..444].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        for (i, &(kind, start, len)) in entries.iter().enumerate() {
            let e = &mut m[446 + 16 * i..462 + 16 * i];
            e[4] = kind;
            e[8..12].copy_from_slice(&start.to_le_bytes());
            e[12..16].copy_from_slice(&len.to_le_bytes());
        }
        m[510..].copy_from_slice(&[0x55, 0xAA]);
        m
    };
    /// What a lie is called, its entries (type, first sector, sectors), what the refusal says.
    type MbrLie = (&'static str, Vec<(u8, u32, u32)>, &'static str);
    let lies: [MbrLie; 3] = [
        ("starts in LBA 0", vec![(0x83, 0, 40960)], "starts in LBA 0"),
        ("past the end", vec![(0x83, 2048, total)], "past the end"),
        (
            "overlapping",
            vec![(0x83, 2048, 40960), (0x83, 20480, 40960)],
            "overlap",
        ),
    ];
    for (what, entries, says) in lies {
        write(&l.dev, 0, &mbr(&entries));
        let before = l.fingerprint();
        let listed = vc
            .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
                disk_number: n,
                partition_number: 0,
            })
            .await
            .map(|r| r.into_inner().volume_ids);
        let msg = refusal(listed);
        assert!(
            msg.contains("ListVolumesOnDisk") && msg.contains(says),
            "{what}: {msg}"
        );
        let msg = refusal(partition(&mut dc, n).await);
        assert!(
            msg.contains("PartitionDisk") && msg.contains(says),
            "{what}: {msg}"
        );
        assert_eq!(l.fingerprint(), before, "{what}: the disk changed");
    }
    // An extended container with an empty chain: no volume, nothing to format over.
    write(&l.dev, 0, &mbr(&[(0x85, 2048, 40960)]));
    let before = l.fingerprint();
    assert_eq!(common::volumes_on(&mut vc, n).await, Vec::<String>::new());
    partition(&mut dc, n).await.unwrap();
    assert_eq!(common::volumes_on(&mut vc, n).await, Vec::<String>::new());
    assert_eq!(l.fingerprint(), before, "the container was left alone");
}
