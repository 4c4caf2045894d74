//! What a volume's content may make MountVolume do, through the daemon's endpoints on real loop
//! disks: the content never picks the kernel filesystem driver (only ext4, xfs, btrfs and what
//! `--mount-filesystem` allows are mounted, always naming the type), every mount is
//! `nosuid,nodev`, and ext4 is mounted `errors=remount-ro` whatever its superblock says. Needs
//! root (loop devices); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, is_mounted, run, v1_clients};
use csi_proxy_api::volume::v1;
use std::os::unix::fs::FileExt;
use std::path::Path;
use tonic::Code;

async fn mount(vc: &mut common::VolumeClient, id: &str, target: &str) -> Result<(), tonic::Status> {
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.into(),
        target_path: target.into(),
    })
    .await
    .map(drop)
}

/// The mountinfo line of the mount at `target`: (per-mount options, per-superblock options).
fn mount_options(target: &Path) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let target = target.canonicalize().unwrap();
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        if Path::new(f[4]) != target {
            return None;
        }
        let sep = f.iter().position(|x| *x == "-")?;
        Some((f[5].to_string(), f.get(sep + 3)?.to_string()))
    })
}

/// An ext4 whose superblock says `errors=panic` (tune2fs -e panic) is mounted with
/// `errors=remount-ro`, which overrides it, and `nosuid,nodev`. Before: mounted with no
/// options, so its first error would panic the node, and set-uid files on it were honoured.
#[tokio::test(flavor = "multi_thread")]
async fn ext4_set_to_panic_is_mounted_remount_ro_nosuid_nodev() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "panic", 64).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    common::format_ok(&mut vc, &id).await;
    run(
        "tune2fs",
        &["-e", "panic", &l.partition(1).to_string_lossy()],
    );
    let target = d.kubelet.join("panic-mnt");
    std::fs::create_dir(&target).unwrap();
    mount(&mut vc, &id, &target.to_string_lossy())
        .await
        .unwrap();
    let (per_mount, per_sb) = mount_options(&target).expect("mounted");
    for opt in ["nosuid", "nodev"] {
        assert!(per_mount.split(',').any(|o| o == opt), "{per_mount}");
    }
    assert!(
        per_sb.split(',').any(|o| o == "errors=remount-ro"),
        "the mount option overrides the superblock's errors=panic: {per_sb}"
    );
}

/// A volume holding a filesystem this host neither makes nor grows is not handed to that
/// filesystem's kernel driver: FAILED_PRECONDITION naming the type and the flag that would
/// allow it, nothing mounted. With `--mount-filesystem=<type>` the type is passed to the kernel
/// by name (this test kernel has no vfat driver: the mount then fails in the kernel, ENODEV).
#[tokio::test(flavor = "multi_thread")]
async fn a_filesystem_this_host_does_not_make_is_not_mounted_unless_allowed() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let target = d.kubelet.join("foreign-mnt");
    std::fs::create_dir(&target).unwrap();
    let t = target.to_string_lossy().into_owned();
    let mut ids = Vec::new();
    for (name, ty) in [("vfat", "vfat"), ("f2fs", "f2fs"), ("iso", "iso9660")] {
        let l = LoopDisk::new(d.dir.path(), name, 64).unwrap();
        let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
        let part = l.partition(1);
        match name {
            "vfat" => l.run("mkfs.vfat", &[], &part),
            "f2fs" => l.run("mkfs.f2fs", &["-q"], &part),
            // An ISO 9660 primary volume descriptor at sector 16 (ECMA-119 §8.4).
            _ => {
                let f = std::fs::OpenOptions::new().write(true).open(&part).unwrap();
                f.write_all_at(b"\x01CD001\x01", 32768).unwrap();
                f.sync_all().unwrap();
            }
        }
        let s = mount(&mut vc, &id, &t).await.expect_err(name);
        assert_eq!(
            s.code(),
            Code::FailedPrecondition,
            "{name}: {}",
            s.message()
        );
        assert!(
            s.message().contains("MountVolume")
                && s.message().contains(ty)
                && s.message().contains(&format!("--mount-filesystem={ty}")),
            "{name}: {}",
            s.message()
        );
        assert!(!is_mounted(&target), "{name}: nothing mounted");
        ids.push((l, id));
    }
    drop(dc);
    drop(vc);
    drop(d);

    // Allowed by the operator: the kernel is asked for exactly that type.
    let d = Daemon::start(&["--mount-filesystem=vfat"]);
    let (_, mut vc) = v1_clients(&d).await;
    let target = d.kubelet.join("vfat-mnt");
    std::fs::create_dir(&target).unwrap();
    let (_l, id) = &ids[0];
    let vfat_known = std::fs::read_to_string("/proc/filesystems")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().last() == Some("vfat"));
    match mount(&mut vc, id, &target.to_string_lossy()).await {
        Ok(()) => {
            assert!(vfat_known, "mounted without a vfat driver?");
            let (per_mount, _) = mount_options(&target).unwrap();
            assert!(per_mount.contains("nosuid") && per_mount.contains("nodev"));
        }
        Err(s) => {
            assert!(!vfat_known, "{}", s.message());
            assert!(
                s.message().contains("mount vfat") && !s.message().contains("--mount-filesystem"),
                "the kernel was asked for vfat: {}",
                s.message()
            );
        }
    }
}

/// An md 1.0 member and a DRBD backing device keep their metadata at the end and their
/// filesystem (the array's, the replicated device's) at the start. MountVolume and
/// ResizeVolume refuse both: mounted directly, a mirror's legs diverge; grown, the filesystem
/// overwrites the metadata. Nothing on the disk changes. Before: both were mounted read-write
/// and grown. A metadata-looking block inside a filesystem that spans it is that filesystem's
/// content, and the volume mounts.
#[tokio::test(flavor = "multi_thread")]
async fn members_with_metadata_at_the_end_are_neither_mounted_nor_grown() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let target = d.kubelet.join("member-mnt");
    std::fs::create_dir(&target).unwrap();
    let t = target.to_string_lossy().into_owned();
    for (name, craft, kind) in [
        (
            "md10",
            common::md10 as fn(&Path, &Path) -> Result<(), String>,
            "linux_raid_member",
        ),
        ("drbd", common::drbd84, "drbd"),
    ] {
        let l = LoopDisk::new(d.dir.path(), name, 64).unwrap();
        let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
        let part = l.partition(1);
        // The array's filesystem: smaller than the member, which keeps its metadata after it.
        l.run("mkfs.ext4", &["-q", "-F"], &part);
        run("resize2fs", &[&part.to_string_lossy(), "40M"]);
        craft(&part, d.dir.path()).unwrap();
        l.grow_to(256);
        dc.rescan(csi_proxy_api::disk::v1::RescanRequest {})
            .await
            .unwrap();
        let before = l.fingerprint();

        let s = mount(&mut vc, &id, &t).await.expect_err(name);
        assert_eq!(
            s.code(),
            Code::FailedPrecondition,
            "{name}: {}",
            s.message()
        );
        assert!(
            s.message().contains("MountVolume")
                && s.message().contains("ext4")
                && s.message().contains(&format!("{kind} metadata at its end")),
            "{name}: {}",
            s.message()
        );
        assert!(!is_mounted(&target), "{name}: not mounted");
        let s = vc
            .resize_volume(v1::ResizeVolumeRequest {
                volume_id: id.clone(),
                size_bytes: 0,
            })
            .await
            .expect_err(name);
        assert_eq!(
            s.code(),
            Code::FailedPrecondition,
            "{name}: {}",
            s.message()
        );
        assert!(
            s.message().contains("ResizeVolume") && s.message().contains(kind),
            "{name}: {}",
            s.message()
        );
        assert_eq!(
            l.fingerprint(),
            before,
            "{name}: nothing on the disk changed"
        );
    }

    // The same block inside an ext4 that spans the whole volume is file content.
    let l = LoopDisk::new(d.dir.path(), "inside", 64).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    common::format_ok(&mut vc, &id).await;
    common::md10(&l.partition(1), d.dir.path()).unwrap();
    mount(&mut vc, &id, &t).await.unwrap();
    assert!(is_mounted(&target));
}
