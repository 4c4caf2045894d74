//! What other tools left on a disk decides what the daemon does, never what the kernel happens
//! to remember: through the daemon's endpoints on real loop disks, content made by the real
//! tools (LUKS, LVM, swap, filesystems, md members, ...) goes through a driver's whole NodeStage
//! sequence and not a byte of the disk changes. Needs root (loop devices); skipped with the
//! reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Daemon, DiskClient, LoopDisk, VolumeClient, can_use_loop_devices, len_of, md10, md12, md090,
    v1_clients, write_at,
};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tonic::Code;

/// A LUKS volume (`version`: `luks1`, `luks2`) on `on` with a fast key derivation (PBKDF2,
/// 1000 iterations), keyed by the file `key`.
fn luks(on: &Path, key: &Path, version: &str) -> Result<(), String> {
    tool(
        "cryptsetup",
        &[
            "luksFormat",
            "--type",
            version,
            "--batch-mode",
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
            "--key-file",
            &key.display().to_string(),
        ],
        on,
    )
}

/// Whether `key` still opens the LUKS volume on `on` (its header and keyslot are intact).
fn luks_opens(on: &Path, key: &Path) -> bool {
    common::output(
        "cryptsetup",
        &[
            "open",
            "--test-passphrase",
            "--key-file",
            &key.display().to_string(),
            &on.display().to_string(),
        ],
    )
    .status
    .success()
}

/// A driver's NodeStage sequence on disk `n` (ListDiskIDs, GetDiskStats, ListVolumesOnDisk,
/// PartitionDisk, then for every volume listed IsVolumeFormatted, FormatVolume and
/// ResizeVolume), returning what each step answered for the report.
async fn node_stage(dc: &mut DiskClient, vc: &mut VolumeClient, n: u32) -> Vec<String> {
    let mut log = Vec::new();
    let ids = dc.list_disk_i_ds(d1::ListDiskIDsRequest {}).await.unwrap();
    assert!(ids.into_inner().disk_i_ds.contains_key(&n));
    dc.get_disk_stats(d1::GetDiskStatsRequest { disk_number: n })
        .await
        .unwrap();
    let mut listed = common::volumes_on(vc, n).await;
    log.push(format!("ListVolumesOnDisk: {listed:?}"));
    let parted = dc
        .partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await;
    log.push(format!("PartitionDisk: {:?}", parted.as_ref().map(drop)));
    if parted.is_ok() {
        listed = common::volumes_on(vc, n).await;
        log.push(format!("ListVolumesOnDisk: {listed:?}"));
    }
    for id in listed {
        let formatted = vc
            .is_volume_formatted(v1::IsVolumeFormattedRequest {
                volume_id: id.clone(),
            })
            .await
            .map(|r| r.into_inner().formatted);
        log.push(format!("IsVolumeFormatted {id}: {formatted:?}"));
        let format = vc
            .format_volume(v1::FormatVolumeRequest {
                volume_id: id.clone(),
            })
            .await
            .map(drop);
        log.push(format!("FormatVolume {id}: {format:?}"));
        let resize = vc
            .resize_volume(v1::ResizeVolumeRequest {
                volume_id: id.clone(),
                size_bytes: 0,
            })
            .await
            .map(drop);
        log.push(format!("ResizeVolume {id}: {resize:?}"));
    }
    log
}

/// Regression case: a loop device attached without partition scan keeps the partition the daemon
/// added with BLKPG for the image it held before, after that image is detached. The next image
/// there, a whole-disk LUKS2 volume, has no partition table. Before, the stale partition was listed
/// as its volume 1 (`…-part1-00000000-01`), IsVolumeFormatted answered false, and FormatVolume
/// wrote ext4 over the LUKS keyslots.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_partition_device_is_never_a_volume_of_the_next_image() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::without_partscan(d.dir.path(), "before", 64).unwrap();
    let old = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    assert!(l.partition(1).exists(), "the daemon added partition 1");

    // The next tenant's image: whole-disk LUKS2, attached to the same loop device.
    let key = d.dir.path().join("key");
    std::fs::write(&key, "secret").unwrap();
    let image = d.dir.path().join("luks.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    luks(&image, &key, "luks2").unwrap();
    l.replace_image(&image, Duration::from_secs(10)).unwrap();
    assert!(
        l.partition(1).exists(),
        "the kernel kept the old image's partition (the case under test)"
    );
    let n = l.disk_number();
    let before = l.fingerprint();

    let log = node_stage(&mut dc, &mut vc, n).await;
    eprintln!("{log:#?}");
    assert_eq!(
        l.fingerprint(),
        before,
        "the LUKS disk changed; the stage sequence answered {log:#?}"
    );
    assert!(luks_opens(&l.dev, &key), "the LUKS keyslot is intact");
    assert!(
        common::volumes_on(&mut vc, n).await.is_empty(),
        "a disk without a partition table lists no partition volumes"
    );
    let stale = format!("diskseq{n}-part1-00000000-01");
    for r in [
        vc.is_volume_formatted(v1::IsVolumeFormattedRequest {
            volume_id: stale.clone(),
        })
        .await
        .map(drop),
        vc.format_volume(v1::FormatVolumeRequest {
            volume_id: stale.clone(),
        })
        .await
        .map(drop),
    ] {
        let s = r.expect_err("the stale partition is not a volume");
        assert_eq!(s.code(), Code::NotFound, "{}", s.message());
    }
    let s = dc
        .partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .expect_err("a whole-disk LUKS volume is never partitioned");
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    assert!(s.message().contains("crypto_LUKS"), "{}", s.message());
    assert!(
        !l.partition(1).exists(),
        "PartitionDisk dropped the stale partition device"
    );
    assert_eq!(l.fingerprint(), before);
    drop(old);
}

/// How one format is made on a device (a whole disk or its partition), by the real tool or,
/// where this kernel lacks the driver the tool needs, crafted to the on-disk format.
struct Format {
    name: &'static str,
    make: fn(&Path, &Path) -> Result<(), String>,
}

fn tool(program: &str, args: &[&str], on: &Path) -> Result<(), String> {
    tool_env(program, args, on, &[])
}

fn tool_env(program: &str, args: &[&str], on: &Path, env: &[(&str, &str)]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .arg(on)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A ZFS vdev's four labels (two at the start, two at the end, 256 KiB each), each with an
/// uberblock ring at 128 KiB whose slots carry the uberblock magic and a version.
fn zfs(dev: &Path, _: &Path) -> Result<(), String> {
    let len = len_of(dev);
    for label in [0, 256 << 10, len - (512 << 10), len - (256 << 10)] {
        for slot in 0..8u64 {
            let mut ub = 0x00ba_b10cu64.to_le_bytes().to_vec();
            ub.extend_from_slice(&5000u64.to_le_bytes());
            ub.extend_from_slice(&(slot + 1).to_le_bytes()); // txg
            write_at(dev, label + (128 << 10) + slot * 1024, &ub)?;
        }
    }
    Ok(())
}

/// ZFS's labels 2 and 3 alone (the last 512 KiB of the length rounded down to 256 KiB), each
/// with only its configuration: an XDR nvlist at +16 KiB naming the pool and its GUID.
fn zfs_end_labels(dev: &Path, _: &Path) -> Result<(), String> {
    fn pair(out: &mut Vec<u8>, name: &str, kind: u32, value: &[u8]) {
        let mut p = (name.len() as u32).to_be_bytes().to_vec();
        p.extend_from_slice(name.as_bytes());
        p.resize(p.len().div_ceil(4) * 4, 0);
        p.extend_from_slice(&kind.to_be_bytes());
        p.extend_from_slice(&1u32.to_be_bytes());
        p.extend_from_slice(value);
        p.resize(p.len().div_ceil(4) * 4, 0);
        let size = (p.len() as u32 + 8).to_be_bytes();
        out.extend_from_slice(&size);
        out.extend_from_slice(&size);
        out.extend_from_slice(&p);
    }
    // nvs header (XDR, little-endian writer), nvlist version 0, NV_UNIQUE_NAME.
    let mut config = vec![1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    pair(&mut config, "version", 8, &5000u64.to_be_bytes());
    pair(
        &mut config,
        "name",
        9,
        &[&4u32.to_be_bytes()[..], b"tank"].concat(),
    );
    pair(
        &mut config,
        "pool_guid",
        8,
        &0x0123_4567_89ab_cdefu64.to_be_bytes(),
    );
    config.extend_from_slice(&[0; 8]);
    let aligned = len_of(dev) & !((256 << 10) - 1);
    for label in [aligned - (512 << 10), aligned - (256 << 10)] {
        write_at(dev, label + (16 << 10), &config)?;
    }
    Ok(())
}

/// [`luks`] keyed by a key file in `dir`, as a matrix format.
fn luks_keyed(dev: &Path, dir: &Path, version: &str) -> Result<(), String> {
    let key = dir.join("key");
    std::fs::write(&key, "secret").map_err(|e| e.to_string())?;
    luks(dev, &key, version)
}

fn luks1(dev: &Path, dir: &Path) -> Result<(), String> {
    luks_keyed(dev, dir, "luks1")
}

fn luks2(dev: &Path, dir: &Path) -> Result<(), String> {
    luks_keyed(dev, dir, "luks2")
}

/// The formats of the matrix.
fn formats() -> Vec<Format> {
    vec![
        Format {
            name: "LUKS1",
            make: luks1,
        },
        Format {
            name: "LUKS2",
            make: luks2,
        },
        Format {
            name: "LVM2 PV",
            make: |d, _| {
                let cfg = "devices { obtain_device_list_from_udev=0 } activation { udev_sync=0 udev_rules=0 }";
                tool("pvcreate", &["--config", cfg, "-y", "-ff"], d)
            },
        },
        Format {
            name: "swap",
            make: |d, _| tool("mkswap", &[], d),
        },
        Format {
            name: "btrfs",
            make: |d, _| tool("mkfs.btrfs", &["-q", "-f", "--mixed"], d),
        },
        Format {
            name: "xfs",
            // mkfs.xfs refuses filesystems under 300 MB unless run by fstests, which it tells
            // by these variables.
            make: |d, _| {
                tool_env(
                    "mkfs.xfs",
                    &["-q", "-f"],
                    d,
                    &[("TEST_DIR", "1"), ("TEST_DEV", "1"), ("QA_CHECK_FS", "1")],
                )
            },
        },
        Format {
            name: "ext4",
            make: |d, _| tool("mkfs.ext4", &["-q", "-F"], d),
        },
        Format {
            name: "f2fs",
            make: |d, _| tool("mkfs.f2fs", &["-q", "-f"], d),
        },
        Format {
            name: "vfat",
            make: |d, _| tool("mkfs.vfat", &[], d),
        },
        Format {
            name: "exfat",
            make: |d, _| tool("mkfs.exfat", &[], d),
        },
        Format {
            name: "ntfs",
            make: |d, _| tool("mkntfs", &["-Q", "-F"], d),
        },
        Format {
            name: "nilfs2",
            make: |d, _| tool("mkfs.nilfs2", &["-q", "-f", "-B", "16"], d),
        },
        Format {
            name: "bcache",
            make: |d, _| tool("make-bcache", &["-B"], d),
        },
        Format {
            name: "md 0.90 member",
            make: md090,
        },
        Format {
            name: "md 1.0 member",
            make: md10,
        },
        Format {
            name: "md 1.2 member",
            make: md12,
        },
        Format {
            name: "DRBD 8.4 metadata at the end",
            make: common::drbd84,
        },
        Format {
            name: "ZFS member",
            make: zfs,
        },
    ]
}

/// Every format of [`formats`], on a whole disk and inside the partition the daemon made,
/// through a driver's NodeStage sequence: the whole disk is never partitioned, the partition
/// is reported formatted, never formatted over nor grown, and not a byte of either disk
/// changes. Before: whole-disk nilfs2 (only libblkid knows it) was partitioned over, and an
/// md 1.0 member made as mdadm makes it (its `super_offset` at +144, not +128) was formatted.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_content_matrix_through_the_stage_sequence() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let mut failures = Vec::new();
    let mut made = 0;
    for (i, f) in formats().into_iter().enumerate() {
        for whole in [true, false] {
            let case = format!(
                "{} ({})",
                f.name,
                if whole { "whole disk" } else { "partition" }
            );
            let l = LoopDisk::new(d.dir.path(), &format!("m{i}{}", u8::from(whole)), 64).unwrap();
            let n = l.disk_number();
            let on = if whole {
                l.dev.clone()
            } else {
                common::partition_one(&mut dc, &mut vc, n).await;
                l.partition(1)
            };
            if let Err(why) = (f.make)(&on, d.dir.path()) {
                eprintln!("SKIPPED {case}: {why}");
                continue;
            }
            made += 1;
            let before = l.fingerprint();
            let log = node_stage(&mut dc, &mut vc, n).await;
            let mut bad = Vec::new();
            if l.fingerprint() != before {
                bad.push("the disk changed".to_string());
            }
            let said = |what: &str| {
                log.iter()
                    .find(|l| l.starts_with(what))
                    .cloned()
                    .unwrap_or_default()
            };
            if whole {
                if !said("PartitionDisk").contains("FailedPrecondition") {
                    bad.push("PartitionDisk was not refused".into());
                }
                if log.iter().any(|l| l.starts_with("FormatVolume")) {
                    bad.push("a volume was listed".into());
                }
            } else {
                if !said("IsVolumeFormatted").contains("Ok(true)") {
                    bad.push("IsVolumeFormatted did not answer true".into());
                }
                if !said("FormatVolume").contains("FailedPrecondition") {
                    bad.push("FormatVolume was not refused".into());
                }
            }
            eprintln!("{case}: {}", if bad.is_empty() { "ok" } else { "FAILED" });
            if !bad.is_empty() {
                failures.push(format!("{case}: {bad:?}\n  {log:#?}"));
            }
        }
    }
    assert!(
        made >= 24,
        "only {made} cases could be made; install the tools scripts/test.sh lists"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Fakeraid metadata the firmware keeps at the end of a whole disk (Intel IMSM, SNIA DDF): only
/// libblkid knows these formats, so only its probe of the whole disk before any table write
/// keeps PartitionDisk from writing a table over an array member. Checked against the old code
/// by answering "nothing found" from the blkid probe: the IMSM member was partitioned over.
/// Also a ZFS pool member whose start was overwritten: only its labels 2 and 3 at the end are
/// left (their configuration nvlist, no uberblock); before, the disk was partitioned over.
#[tokio::test(flavor = "multi_thread")]
async fn fakeraid_metadata_at_the_end_of_a_disk_is_never_partitioned_over() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    for (name, kind, make) in [
        (
            "imsm",
            "isw_raid_member",
            common::imsm as fn(&Path, &Path) -> _,
        ),
        ("ddf", "ddf_raid_member", common::ddf),
        ("zfs-end", "zfs_member", zfs_end_labels),
    ] {
        let l = LoopDisk::new(d.dir.path(), name, 64).unwrap();
        make(&l.dev, d.dir.path()).unwrap();
        let n = l.disk_number();
        let before = l.fingerprint();
        let log = node_stage(&mut dc, &mut vc, n).await;
        assert_eq!(
            l.fingerprint(),
            before,
            "{kind}: the disk changed: {log:#?}"
        );
        assert!(
            !log.iter().any(|l| l.starts_with("FormatVolume")),
            "{kind}: a volume was listed: {log:#?}"
        );
        let s = dc
            .partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await
            .expect_err("a fakeraid member is never partitioned");
        assert_eq!(
            s.code(),
            Code::FailedPrecondition,
            "{kind}: {}",
            s.message()
        );
        assert!(s.message().contains(kind), "{}", s.message());
    }
}

/// An old MBR left in sector 0 of a disk later made into a whole-disk ext4 (as a disk image
/// carries it): before, PartitionDisk took the MBR's entry as the disk's partition, told the
/// kernel about it, and the stage sequence formatted that partition over the filesystem. Now
/// both together are FAILED_PRECONDITION, and no partition of that MBR is a volume.
#[tokio::test(flavor = "multi_thread")]
async fn an_old_mbr_over_a_whole_disk_filesystem_is_refused() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "oldmbr", 64).unwrap();
    l.run("mkfs.ext4", &["-q", "-F"], &l.dev);
    let mut entry = [0u8; 16];
    entry[4] = 0x83;
    entry[8..12].copy_from_slice(&2048u32.to_le_bytes());
    entry[12..16].copy_from_slice(&((len_of(&l.dev) / 512 - 2048) as u32).to_le_bytes());
    write_at(&l.dev, 446, &entry).unwrap();
    write_at(&l.dev, 510, &[0x55, 0xAA]).unwrap();
    let n = l.disk_number();
    let before = l.fingerprint();

    let log = node_stage_lenient(&mut dc, &mut vc, n).await;
    assert_eq!(l.fingerprint(), before, "the disk changed: {log:#?}");
    let s = dc
        .partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .expect_err("an MBR over a whole-disk filesystem is refused");
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    assert!(
        s.message().contains("MBR") && s.message().contains("ext4"),
        "{}",
        s.message()
    );
    assert!(
        !l.partition(1).exists(),
        "the MBR's partition was never added"
    );
    l.run("e2fsck", &["-n", "-f"], &l.dev);
}

/// [`node_stage`], where ListVolumesOnDisk may refuse the disk too.
async fn node_stage_lenient(dc: &mut DiskClient, vc: &mut VolumeClient, n: u32) -> Vec<String> {
    let listed = vc
        .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
            disk_number: n,
            partition_number: 0,
        })
        .await;
    match listed {
        Ok(_) => node_stage(dc, vc, n).await,
        Err(s) => {
            assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
            let parted = dc
                .partition_disk(d1::PartitionDiskRequest { disk_number: n })
                .await;
            vec![
                format!("ListVolumesOnDisk: {}", s.message()),
                format!("PartitionDisk: {:?}", parted.map(drop)),
            ]
        }
    }
}
