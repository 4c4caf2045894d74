//! The disk and volume groups end to end on Linux: the real daemon, real loop disks, real
//! filesystems and mounts, driven through the gRPC endpoints the way a CSI driver stages and
//! unstages a volume. Needs root (loop devices, mount); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, is_mounted};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::{v1 as vol1, v2alpha1 as vol2};
use d1::disk_client::DiskClient;
use std::path::Path;
use tonic::Code;
use tonic::transport::Channel;
use vol1::volume_client::VolumeClient;

const MIB: i64 = 1 << 20;

struct Clients {
    disk: DiskClient<Channel>,
    vol: VolumeClient<Channel>,
    vol2: vol2::volume_client::VolumeClient<Channel>,
}

async fn clients(d: &Daemon) -> Clients {
    let c = d.connector();
    Clients {
        disk: DiskClient::new(c.channel("disk", "v1").await.unwrap()),
        vol: VolumeClient::new(c.channel("volume", "v1").await.unwrap()),
        vol2: vol2::volume_client::VolumeClient::new(
            c.channel("volume", "v2alpha1").await.unwrap(),
        ),
    }
}

/// The disk number the daemon gives a loop disk: found by its serial (the backing file).
async fn number_of(c: &mut Clients, l: &LoopDisk) -> u32 {
    let serial = l.serial();
    let found = common::disks_by_serial(&mut c.disk, |s| s == serial).await;
    assert_eq!(found.len(), 1, "{serial:?}: {found:?}");
    found[0]
}

fn code<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    let s = r.expect_err("expected a failure");
    (s.code(), s.message().to_string())
}

impl Clients {
    async fn partition(&mut self, n: u32) {
        self.disk
            .partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await
            .unwrap();
    }

    async fn volumes(&mut self, n: u32, p: u32) -> Vec<String> {
        self.vol
            .list_volumes_on_disk(vol1::ListVolumesOnDiskRequest {
                disk_number: n,
                partition_number: p,
            })
            .await
            .unwrap()
            .into_inner()
            .volume_ids
    }

    async fn formatted(&mut self, id: &str) -> bool {
        self.vol
            .is_volume_formatted(vol1::IsVolumeFormattedRequest {
                volume_id: id.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .formatted
    }

    async fn format(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.vol
            .format_volume(vol1::FormatVolumeRequest {
                volume_id: id.into(),
            })
            .await
            .map(drop)
    }

    async fn mount(&mut self, id: &str, target: &str) -> Result<(), tonic::Status> {
        self.vol
            .mount_volume(vol1::MountVolumeRequest {
                volume_id: id.into(),
                target_path: target.into(),
            })
            .await
            .map(drop)
    }

    async fn unmount(&mut self, id: &str, target: &str) {
        self.vol
            .unmount_volume(vol1::UnmountVolumeRequest {
                volume_id: id.into(),
                target_path: target.into(),
            })
            .await
            .unwrap();
    }

    async fn stats(&mut self, id: &str) -> (i64, i64) {
        let s = self
            .vol
            .get_volume_stats(vol1::GetVolumeStatsRequest {
                volume_id: id.into(),
            })
            .await
            .unwrap()
            .into_inner();
        (s.total_bytes, s.used_bytes)
    }

    async fn resize(&mut self, id: &str, size_bytes: i64) -> Result<(), tonic::Status> {
        self.vol
            .resize_volume(vol1::ResizeVolumeRequest {
                volume_id: id.into(),
                size_bytes,
            })
            .await
            .map(drop)
    }

    async fn disk_size(&mut self, n: u32) -> i64 {
        self.disk
            .get_disk_stats(d1::GetDiskStatsRequest { disk_number: n })
            .await
            .unwrap()
            .into_inner()
            .total_bytes
    }

    async fn rescan(&mut self) {
        self.disk.rescan(d1::RescanRequest {}).await.unwrap();
    }

    /// Partition, find the one volume, format it: the first half of staging.
    async fn prepare(&mut self, n: u32) -> String {
        self.partition(n).await;
        let ids = self.volumes(n, 0).await;
        assert_eq!(ids.len(), 1, "{ids:?}");
        assert!(!self.formatted(&ids[0]).await);
        self.format(&ids[0]).await.unwrap();
        assert!(self.formatted(&ids[0]).await);
        ids[0].clone()
    }
}

fn mkdir(p: &str) {
    std::fs::create_dir_all(p).unwrap();
}

/// The whole stage / publish / resize / unstage flow a CSI driver runs, on xfs so the online
/// resize works on this machine (see the ext4 test for why).
#[tokio::test(flavor = "multi_thread")]
async fn stage_resize_and_unstage_flow_on_xfs() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&["--format-filesystem", "xfs"]);
    let l = LoopDisk::new(d.dir.path(), "flow", 400).unwrap();
    let mut c = clients(&d).await;
    let n = number_of(&mut c, &l).await;
    assert_eq!(c.disk_size(n).await, 400 * MIB);

    c.partition(n).await;
    c.partition(n).await; // idempotent
    let ids = c.volumes(n, 0).await;
    assert_eq!(ids.len(), 1);
    let id = ids[0].clone();
    assert!(id.starts_with(&format!("diskseq{n}-part1-")), "{id}");
    assert_eq!(c.volumes(n, 1).await, ids);
    assert!(c.volumes(n, 2).await.is_empty());
    assert!(!c.formatted(&id).await);
    c.format(&id).await.unwrap();
    assert!(c.formatted(&id).await);
    c.format(&id).await.unwrap(); // a retry of a completed format is a success, not a reformat

    let stage = d.k("plugins/kubernetes.io/csi/pv/x/globalmount");
    mkdir(&stage);
    c.mount(&id, &stage).await.unwrap();
    c.mount(&id, &stage).await.unwrap(); // idempotent
    assert!(is_mounted(Path::new(&stage)));
    let payload: Vec<u8> = (0..(8 << 20)).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(Path::new(&stage).join("data.bin"), &payload).unwrap();

    let (total, used) = c.stats(&id).await;
    assert!(total > 300 * MIB && total < 400 * MIB, "{total}");
    assert!(used >= 8 * MIB && used < total, "{used}");

    // Publish: a link in the pod dir to the staging mount, as drivers make it.
    let publish = d.k("pods/p1/volumes/kubernetes.io~csi/pv/mount");
    mkdir(&d.k("pods/p1/volumes/kubernetes.io~csi/pv"));
    std::os::unix::fs::symlink(&stage, &publish).unwrap();
    for path in [&stage, &publish] {
        let got = c
            .vol
            .get_volume_id_from_target_path(vol1::GetVolumeIdFromTargetPathRequest {
                target_path: path.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .volume_id;
        assert_eq!(got, id, "{path}");
    }
    let nested = format!("{stage}/a/b");
    mkdir(&nested);
    let closest = c
        .vol2
        .get_closest_volume_id_from_target_path(vol2::GetClosestVolumeIdFromTargetPathRequest {
            target_path: nested,
        })
        .await
        .unwrap()
        .into_inner()
        .volume_id;
    assert_eq!(closest, id);
    let number = c
        .vol
        .get_disk_number_from_volume_id(vol1::GetDiskNumberFromVolumeIdRequest {
            volume_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .disk_number;
    assert_eq!(number, n);

    // Grow the disk, rescan, grow the volume online.
    l.grow_to(800);
    c.rescan().await;
    assert_eq!(c.disk_size(n).await, 800 * MIB);
    c.resize(&id, 0).await.unwrap();
    let (grown, _) = c.stats(&id).await;
    assert!(grown > total + 350 * MIB, "{total} -> {grown}");
    c.resize(&id, 0).await.unwrap(); // nothing left to grow: no-op
    c.resize(&id, 100 * MIB).await.unwrap(); // a shrink request: no-op
    assert_eq!(c.stats(&id).await.0, grown);
    assert_eq!(
        std::fs::read(Path::new(&stage).join("data.bin")).unwrap(),
        payload
    );

    c.vol
        .write_volume_cache(vol1::WriteVolumeCacheRequest {
            volume_id: id.clone(),
        })
        .await
        .unwrap();
    std::fs::remove_file(&publish).unwrap();
    c.unmount(&id, &stage).await;
    assert!(!is_mounted(Path::new(&stage)));
    c.unmount(&id, &stage).await; // not mounted: success
    // Unmounted, the size comes from the superblock: the same filesystem size, give or take
    // what the filesystem reserves for itself.
    let offline = c.stats(&id).await.0;
    assert!(
        offline.abs_diff(grown) < (grown / 50) as u64,
        "{offline} vs {grown}"
    );

    // Stage again elsewhere: the data is still there.
    let again = d.k("plugins/kubernetes.io/csi/pv/y/globalmount");
    mkdir(&again);
    c.mount(&id, &again).await.unwrap();
    assert_eq!(
        std::fs::read(Path::new(&again).join("data.bin")).unwrap(),
        payload
    );
    c.unmount(&id, &again).await;
    assert!(!is_mounted(Path::new(&again)));
}

/// ext4: grown offline here, because this VM's root lacks CAP_SYS_RESOURCE, which online ext4
/// growth needs; the online attempt must say so precisely (or succeed on a host that has it).
#[tokio::test(flavor = "multi_thread")]
async fn ext4_grows_offline_and_reports_why_online_growth_fails() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "ext4", 200).unwrap();
    let mut c = clients(&d).await;
    let n = number_of(&mut c, &l).await;
    let id = c.prepare(n).await;
    let stage = d.k("plugins/e/globalmount");
    mkdir(&stage);
    c.mount(&id, &stage).await.unwrap();
    std::fs::write(Path::new(&stage).join("keep"), b"ext4 data").unwrap();
    let (before, _) = c.stats(&id).await;

    l.grow_to(400);
    c.rescan().await;
    match c.resize(&id, 0).await {
        Ok(()) => eprintln!("note: online ext4 growth worked (this host grants CAP_SYS_RESOURCE)"),
        Err(s) => {
            assert_eq!(s.code(), Code::PermissionDenied, "{}", s.message());
            assert!(s.message().contains("ResizeVolume"), "{}", s.message());
            assert!(s.message().contains("CAP_SYS_RESOURCE"), "{}", s.message());
        }
    }
    c.unmount(&id, &stage).await;
    c.resize(&id, 0).await.unwrap(); // the partition grew already; the filesystem follows now
    let (after, _) = c.stats(&id).await;
    assert!(after > before + 150 * MIB, "{before} -> {after}");
    // Growth below 100 MiB is a no-op, as upstream.
    l.grow_to(450);
    c.rescan().await;
    c.resize(&id, 0).await.unwrap();
    assert_eq!(c.stats(&id).await.0, after);

    c.mount(&id, &stage).await.unwrap();
    assert_eq!(
        std::fs::read(Path::new(&stage).join("keep")).unwrap(),
        b"ext4 data"
    );
    c.unmount(&id, &stage).await;
}

/// btrfs (made by the real mkfs.btrfs: FormatVolume makes only ext4 and xfs) grows mounted and
/// unmounted, by BTRFS_IOC_RESIZE `<devid>:max` on the mount's root (unmounted: on a private
/// temporary mount); the data stays and `btrfs check` finds nothing.
#[tokio::test(flavor = "multi_thread")]
async fn btrfs_grows_mounted_and_unmounted() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "btrfs", 300).unwrap();
    let mut c = clients(&d).await;
    let n = number_of(&mut c, &l).await;
    c.partition(n).await;
    let id = c.volumes(n, 0).await.remove(0);
    let part = l.partition(1);
    let part_s = part.to_string_lossy().into_owned();
    common::run("mkfs.btrfs", &["-q", "-f", &part_s]);
    let stage = d.k("plugins/b/globalmount");
    mkdir(&stage);
    c.mount(&id, &stage).await.unwrap();
    std::fs::write(Path::new(&stage).join("keep"), b"btrfs data").unwrap();
    let (before, _) = c.stats(&id).await;

    l.grow_to(500);
    c.rescan().await;
    c.resize(&id, 0).await.unwrap();
    let (online, _) = c.stats(&id).await;
    assert!(online > before + 150 * MIB, "mounted: {before} -> {online}");
    c.unmount(&id, &stage).await;

    l.grow_to(700);
    c.rescan().await;
    c.resize(&id, 0).await.unwrap();
    let (offline, _) = c.stats(&id).await;
    assert!(
        offline > online + 150 * MIB,
        "unmounted: {online} -> {offline}"
    );
    common::run("btrfs", &["check", "--readonly", &part_s]);
    c.mount(&id, &stage).await.unwrap();
    assert_eq!(
        std::fs::read(Path::new(&stage).join("keep")).unwrap(),
        b"btrfs data"
    );
    c.unmount(&id, &stage).await;
}

/// Nothing that holds data is ever partitioned or formatted over, and the host's own disk is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn data_and_the_hosts_disks_are_never_touched() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let mut c = clients(&d).await;

    // A whole-disk filesystem (no partition table) is not partitioned over.
    let whole = LoopDisk::new(d.dir.path(), "whole", 64).unwrap();
    whole.run("mkfs.ext4", &["-q", "-F"], &whole.dev);
    let n = number_of(&mut c, &whole).await;
    let (code_, msg) = code(
        c.disk
            .partition_disk(d1::PartitionDiskRequest { disk_number: n })
            .await,
    );
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(
        msg.contains("PartitionDisk") && msg.contains("ext4"),
        "{msg}"
    );
    assert!(c.volumes(n, 0).await.is_empty());

    // A partition someone else formatted is not formatted over.
    let other = LoopDisk::new(d.dir.path(), "other", 64).unwrap();
    let m = number_of(&mut c, &other).await;
    c.partition(m).await;
    let id = c.volumes(m, 0).await.remove(0);
    other.run("mkfs.ext4", &["-q", "-F"], &other.partition(1));
    assert!(c.formatted(&id).await);
    let (code_, msg) = code(c.format(&id).await.map(tonic::Response::new));
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(msg.contains("already holds ext4"), "{msg}");

    // A mounted volume is not formatted, even one we formatted.
    let ours = LoopDisk::new(d.dir.path(), "ours", 64).unwrap();
    let o = number_of(&mut c, &ours).await;
    let oid = c.prepare(o).await;
    let stage = d.k("plugins/s/globalmount");
    mkdir(&stage);
    c.mount(&oid, &stage).await.unwrap();
    let (code_, msg) = code(c.format(&oid).await.map(tonic::Response::new));
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(msg.contains("mounted"), "{msg}");
    // An unformatted volume is not mounted.
    let raw = LoopDisk::new(d.dir.path(), "raw", 64).unwrap();
    let r = number_of(&mut c, &raw).await;
    c.partition(r).await;
    let rid = c.volumes(r, 0).await.remove(0);
    let rdir = d.k("plugins/r/globalmount");
    mkdir(&rdir);
    let (code_, msg) = code(c.mount(&rid, &rdir).await.map(tonic::Response::new));
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(msg.contains("no filesystem"), "{msg}");
    assert!(!is_mounted(Path::new(&rdir)));
    // Loop devices have no offline state: online is a no-op, offline is refused.
    c.disk
        .set_disk_state(d1::SetDiskStateRequest {
            disk_number: r,
            is_online: true,
        })
        .await
        .unwrap();
    let (code_, msg) = code(
        c.disk
            .set_disk_state(d1::SetDiskStateRequest {
                disk_number: r,
                is_online: false,
            })
            .await,
    );
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(msg.contains("no offline state"), "{msg}");
    assert!(
        c.disk
            .get_disk_state(d1::GetDiskStateRequest { disk_number: r })
            .await
            .unwrap()
            .into_inner()
            .is_online
    );

    // The disk holding `/` is refused for every mutating RPC.
    if let Some(root) = root_disk_number() {
        for r in [
            c.disk
                .partition_disk(d1::PartitionDiskRequest { disk_number: root })
                .await
                .map(drop),
            c.disk
                .set_disk_state(d1::SetDiskStateRequest {
                    disk_number: root,
                    is_online: false,
                })
                .await
                .map(drop),
        ] {
            let s = r.unwrap_err();
            assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
            assert!(s.message().contains("refused"), "{}", s.message());
        }
        for vid in c.volumes(root, 0).await {
            let s = c.format(&vid).await.unwrap_err();
            assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
            let s = c.resize(&vid, 0).await.unwrap_err();
            assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
        }
    } else {
        eprintln!("SKIPPED (part): `/` is not on a disk with a diskseq here");
    }
    c.unmount(&oid, &stage).await;
}

/// The diskseq of the disk holding `/`, from mountinfo and sysfs.
fn root_disk_number() -> Option<u32> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dev = info
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .rfind(|f| f.get(4) == Some(&"/"))?
        .get(2)?
        .to_string();
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{dev}")).ok()?;
    let disk = if sys.join("partition").exists() {
        sys.parent()?.to_path_buf()
    } else {
        sys
    };
    std::fs::read_to_string(disk.join("diskseq"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Two concurrent PartitionDisk calls on one disk make exactly one partition.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_partitioning_makes_one_partition() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "race", 64).unwrap();
    let mut c = clients(&d).await;
    let n = number_of(&mut c, &l).await;
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let mut disk = c.disk.clone();
            tokio::spawn(async move {
                disk.partition_disk(d1::PartitionDiskRequest { disk_number: n })
                    .await
                    .map(drop)
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(c.volumes(n, 0).await.len(), 1);
    let parts = std::fs::read_dir(format!("/sys/block/{}", l.name()))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("partition").exists())
        .count();
    assert_eq!(parts, 1);
}

/// Bad input: each gets its precise status, and nothing changes.
#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_precise_statuses() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let l = LoopDisk::new(d.dir.path(), "bad", 64).unwrap();
    let mut c = clients(&d).await;
    let n = number_of(&mut c, &l).await;
    let missing = u32::MAX - 7;

    let (k, m) = code(
        c.disk
            .get_disk_stats(d1::GetDiskStatsRequest {
                disk_number: missing,
            })
            .await,
    );
    assert_eq!(k, Code::NotFound, "{m}");
    assert!(m.contains(&format!("disk {missing}")), "{m}");
    let (k, m) = code(
        c.disk
            .partition_disk(d1::PartitionDiskRequest {
                disk_number: missing,
            })
            .await,
    );
    assert_eq!(k, Code::NotFound, "{m}");
    // As for any unknown disk (upstream answered an empty list).
    let (k, m) = code(
        c.vol
            .list_volumes_on_disk(vol1::ListVolumesOnDiskRequest {
                disk_number: missing,
                partition_number: 0,
            })
            .await,
    );
    assert_eq!(k, Code::NotFound, "{m}");
    assert!(m.contains(&format!("disk {missing}")), "{m}");

    for (id, want) in [
        ("", Code::InvalidArgument),
        ("-1", Code::InvalidArgument),
        (
            "\\\\?\\Volume{00000000-0000-0000-0000-000000000000}\\",
            Code::InvalidArgument,
        ),
        (
            &format!("diskseq{missing}-part1-0fc63daf-8483-4772-8e79-3d69d8477de4"),
            Code::NotFound,
        ),
        (
            &format!("diskseq{n}-part1-0fc63daf-8483-4772-8e79-3d69d8477de4"),
            Code::NotFound,
        ),
    ] {
        let (k, m) = code(
            c.vol
                .is_volume_formatted(vol1::IsVolumeFormattedRequest {
                    volume_id: id.to_string(),
                })
                .await,
        );
        assert_eq!(k, want, "{id:?}: {m}");
        assert!(m.contains("IsVolumeFormatted"), "{m}");
        let (k, _) = code(c.format(id).await.map(tonic::Response::new));
        assert_eq!(k, want, "FormatVolume {id:?}");
    }

    c.partition(n).await;
    let id = c.volumes(n, 0).await.remove(0);
    // A volume ID with the right disk and partition but another PARTUUID is another volume.
    let forged = format!("{}0000000", &id[..id.len() - 7]);
    if forged != id {
        let (k, m) = code(c.format(&forged).await.map(tonic::Response::new));
        assert_eq!(k, Code::NotFound, "{m}");
    }
    let outside = d.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let (k, m) = code(
        c.mount(&id, &outside.display().to_string())
            .await
            .map(tonic::Response::new),
    );
    assert!(
        matches!(k, Code::InvalidArgument | Code::PermissionDenied),
        "{k:?} {m}"
    );
    assert!(!is_mounted(&outside));
    let (k, m) = code(c.mount(&id, "").await.map(tonic::Response::new));
    assert_eq!(k, Code::InvalidArgument, "{m}");
    let dir = d.k("plugins/b/globalmount");
    mkdir(&dir);
    let (k, m) = code(
        c.vol
            .get_volume_id_from_target_path(vol1::GetVolumeIdFromTargetPathRequest {
                target_path: dir.clone(),
            })
            .await,
    );
    assert_eq!(k, Code::NotFound, "{m}");
    assert!(m.contains("not a mount point"), "{m}");
    let (k, m) = code(c.resize(&id, -5).await.map(tonic::Response::new));
    assert_eq!(k, Code::InvalidArgument, "{m}");
    let (k, m) = code(c.resize(&id, 1 << 40).await.map(tonic::Response::new));
    assert_eq!(k, Code::InvalidArgument, "{m}");
    assert!(
        !c.formatted(&id).await,
        "nothing was formatted along the way"
    );
}

/// Sixteen stage/unstage flows on sixteen disks at once.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_parallel_flows() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let disks: Vec<LoopDisk> = (0..16)
        .map(|i| LoopDisk::new(d.dir.path(), &format!("p{i}"), 64).unwrap())
        .collect();
    let mut c = clients(&d).await;
    let mut numbers = Vec::new();
    for l in &disks {
        numbers.push(number_of(&mut c, l).await);
    }
    let flows: Vec<_> = numbers
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let mut c = Clients {
                disk: c.disk.clone(),
                vol: c.vol.clone(),
                vol2: c.vol2.clone(),
            };
            let target = d.k(&format!("plugins/par/{i}/globalmount"));
            tokio::spawn(async move {
                let id = c.prepare(n).await;
                mkdir(&target);
                c.mount(&id, &target).await.unwrap();
                std::fs::write(Path::new(&target).join("f"), i.to_string()).unwrap();
                let (total, used) = c.stats(&id).await;
                assert!(total > 0 && used > 0);
                c.unmount(&id, &target).await;
                c.mount(&id, &target).await.unwrap();
                assert_eq!(
                    std::fs::read_to_string(Path::new(&target).join("f")).unwrap(),
                    i.to_string()
                );
                c.unmount(&id, &target).await;
            })
        })
        .collect();
    for f in flows {
        f.await.unwrap();
    }
}

/// Every RPC of every older disk and volume version, once each, on real loop disks, checked
/// against what the host really did.
#[tokio::test(flavor = "multi_thread")]
async fn every_older_version_rpc_works_on_real_disks() {
    use csi_proxy_api::disk::{v1alpha1 as da1, v1beta1 as db1, v1beta2 as db2, v1beta3 as db3};
    use csi_proxy_api::volume::{v1alpha1 as va1, v1beta1 as vb1, v1beta2 as vb2, v1beta3 as vb3};
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let mut c = clients(&d).await;
    let conn = d.connector();
    let ch = |g: &'static str, v: &'static str| conn.lazy_channel(g, v);

    // Disk v1alpha1: GetDiskNumberByName, ListDiskLocations, PartitionDisk, Rescan.
    let l1 = LoopDisk::new(d.dir.path(), "a1", 64).unwrap();
    let n1 = number_of(&mut c, &l1).await;
    let mut da1c = da1::disk_client::DiskClient::new(ch("disk", "v1alpha1"));
    let e = da1c
        .get_disk_number_by_name(da1::GetDiskNumberByNameRequest {
            disk_name: "no-such-page83".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{}", e.message());
    let locs = da1c
        .list_disk_locations(da1::ListDiskLocationsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_locations;
    assert!(
        !locs.contains_key(&n1.to_string()),
        "a loop disk has no SCSI address"
    );
    da1c.partition_disk(da1::PartitionDiskRequest {
        disk_id: n1.to_string(),
    })
    .await
    .unwrap();
    da1c.rescan(da1::RescanRequest {}).await.unwrap();
    assert_eq!(c.volumes(n1, 0).await.len(), 1);

    // Disk v1beta1 and v1beta2: string disk IDs, identifiers maps, DiskStats, attach state.
    let l2 = LoopDisk::new(d.dir.path(), "b1", 72).unwrap();
    let n2 = number_of(&mut c, &l2).await;
    let mut db1c = db1::disk_client::DiskClient::new(ch("disk", "v1beta1"));
    let ids = db1c
        .list_disk_i_ds(db1::ListDiskIDsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_i_ds;
    assert_eq!(
        ids[&n2.to_string()].identifiers["serialNumber"],
        l2.serial()
    );
    let size = db1c
        .disk_stats(db1::DiskStatsRequest {
            disk_id: n2.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
        .disk_size;
    assert_eq!(size, 72 * MIB);
    db1c.list_disk_locations(db1::ListDiskLocationsRequest {})
        .await
        .unwrap();
    db1c.rescan(db1::RescanRequest {}).await.unwrap();
    db1c.partition_disk(db1::PartitionDiskRequest {
        disk_id: n2.to_string(),
    })
    .await
    .unwrap();
    let e = db1c
        .disk_stats(db1::DiskStatsRequest {
            disk_id: "not-a-number".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());

    let mut db2c = db2::disk_client::DiskClient::new(ch("disk", "v1beta2"));
    assert!(
        db2c.get_attach_state(db2::GetAttachStateRequest {
            disk_id: n2.to_string()
        })
        .await
        .unwrap()
        .into_inner()
        .is_online
    );
    db2c.set_attach_state(db2::SetAttachStateRequest {
        disk_id: n2.to_string(),
        is_online: true,
    })
    .await
    .unwrap();
    db2c.list_disk_i_ds(db2::ListDiskIDsRequest {})
        .await
        .unwrap();
    db2c.list_disk_locations(db2::ListDiskLocationsRequest {})
        .await
        .unwrap();
    db2c.rescan(db2::RescanRequest {}).await.unwrap();
    db2c.partition_disk(db2::PartitionDiskRequest {
        disk_id: n2.to_string(),
    })
    .await
    .unwrap();
    assert_eq!(
        db2c.disk_stats(db2::DiskStatsRequest {
            disk_id: n2.to_string()
        })
        .await
        .unwrap()
        .into_inner()
        .disk_size,
        72 * MIB
    );

    // Disk v1beta3 (the v1 shapes under another package).
    let mut db3c = db3::disk_client::DiskClient::new(ch("disk", "v1beta3"));
    let ids = db3c
        .list_disk_i_ds(db3::ListDiskIDsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_i_ds;
    assert_eq!(ids[&n2].serial_number, l2.serial());
    db3c.list_disk_locations(db3::ListDiskLocationsRequest {})
        .await
        .unwrap();
    db3c.partition_disk(db3::PartitionDiskRequest { disk_number: n2 })
        .await
        .unwrap();
    db3c.rescan(db3::RescanRequest {}).await.unwrap();
    assert_eq!(
        db3c.get_disk_stats(db3::GetDiskStatsRequest { disk_number: n2 })
            .await
            .unwrap()
            .into_inner()
            .total_bytes,
        72 * MIB
    );
    db3c.set_disk_state(db3::SetDiskStateRequest {
        disk_number: n2,
        is_online: true,
    })
    .await
    .unwrap();
    assert!(
        db3c.get_disk_state(db3::GetDiskStateRequest { disk_number: n2 })
            .await
            .unwrap()
            .into_inner()
            .is_online
    );

    // Volume v1alpha1 on disk 1: list by string ID, format, mount, resize, dismount.
    let mut va1c = va1::volume_client::VolumeClient::new(ch("volume", "v1alpha1"));
    let id1 = va1c
        .list_volumes_on_disk(va1::ListVolumesOnDiskRequest {
            disk_id: n1.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
        .volume_ids
        .remove(0);
    assert!(
        !va1c
            .is_volume_formatted(va1::IsVolumeFormattedRequest {
                volume_id: id1.clone()
            })
            .await
            .unwrap()
            .into_inner()
            .formatted
    );
    va1c.format_volume(va1::FormatVolumeRequest {
        volume_id: id1.clone(),
    })
    .await
    .unwrap();
    l1.grow_to(200);
    c.rescan().await;
    va1c.resize_volume(va1::ResizeVolumeRequest {
        volume_id: id1.clone(),
        size: 180 * MIB,
    })
    .await
    .unwrap();
    assert!(
        c.stats(&id1).await.0 > 150 * MIB,
        "grown offline to ~180 MiB"
    );
    let p1 = d.k("plugins/old/a1");
    mkdir(&p1);
    va1c.mount_volume(va1::MountVolumeRequest {
        volume_id: id1.clone(),
        path: p1.clone(),
    })
    .await
    .unwrap();
    assert!(is_mounted(Path::new(&p1)));
    va1c.dismount_volume(va1::DismountVolumeRequest {
        volume_id: id1.clone(),
        path: p1.clone(),
    })
    .await
    .unwrap();
    assert!(!is_mounted(Path::new(&p1)));

    // Volume v1beta1 and v1beta2 on disk 2: + disk number, ID from mount, stats, write cache.
    let mut vb1c = vb1::volume_client::VolumeClient::new(ch("volume", "v1beta1"));
    let id2 = vb1c
        .list_volumes_on_disk(vb1::ListVolumesOnDiskRequest {
            disk_id: n2.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
        .volume_ids
        .remove(0);
    vb1c.format_volume(vb1::FormatVolumeRequest {
        volume_id: id2.clone(),
    })
    .await
    .unwrap();
    assert!(
        vb1c.is_volume_formatted(vb1::IsVolumeFormattedRequest {
            volume_id: id2.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .formatted
    );
    assert_eq!(
        vb1c.get_volume_disk_number(vb1::VolumeDiskNumberRequest {
            volume_id: id2.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .disk_number,
        i64::from(n2)
    );
    let p2 = d.k("plugins/old/b1");
    mkdir(&p2);
    vb1c.mount_volume(vb1::MountVolumeRequest {
        volume_id: id2.clone(),
        path: p2.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        vb1c.get_volume_id_from_mount(vb1::VolumeIdFromMountRequest { mount: p2.clone() })
            .await
            .unwrap()
            .into_inner()
            .volume_id,
        id2
    );
    let st = vb1c
        .volume_stats(vb1::VolumeStatsRequest {
            volume_id: id2.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        st.volume_size > 40 * MIB && st.volume_used_size > 0,
        "{st:?}"
    );
    vb1c.resize_volume(vb1::ResizeVolumeRequest {
        volume_id: id2.clone(),
        size: 10 * MIB,
    })
    .await
    .unwrap(); // a shrink request is a no-op
    let mut vb2c = vb2::volume_client::VolumeClient::new(ch("volume", "v1beta2"));
    vb2c.write_volume_cache(vb2::WriteVolumeCacheRequest {
        volume_id: id2.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        vb2c.volume_stats(vb2::VolumeStatsRequest {
            volume_id: id2.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .volume_size,
        st.volume_size
    );
    vb2c.get_volume_disk_number(vb2::VolumeDiskNumberRequest {
        volume_id: id2.clone(),
    })
    .await
    .unwrap();
    vb2c.get_volume_id_from_mount(vb2::VolumeIdFromMountRequest { mount: p2.clone() })
        .await
        .unwrap();
    vb2c.list_volumes_on_disk(vb2::ListVolumesOnDiskRequest {
        disk_id: n2.to_string(),
    })
    .await
    .unwrap();
    vb2c.is_volume_formatted(vb2::IsVolumeFormattedRequest {
        volume_id: id2.clone(),
    })
    .await
    .unwrap();
    vb2c.format_volume(vb2::FormatVolumeRequest {
        volume_id: id2.clone(),
    })
    .await
    .unwrap_err(); // mounted: refused
    vb2c.resize_volume(vb2::ResizeVolumeRequest {
        volume_id: id2.clone(),
        size: 0,
    })
    .await
    .unwrap();
    vb2c.dismount_volume(vb2::DismountVolumeRequest {
        volume_id: id2.clone(),
        path: p2.clone(),
    })
    .await
    .unwrap();
    assert!(!is_mounted(Path::new(&p2)));
    vb2c.mount_volume(vb2::MountVolumeRequest {
        volume_id: id2.clone(),
        path: p2.clone(),
    })
    .await
    .unwrap();
    vb1c.dismount_volume(vb1::DismountVolumeRequest {
        volume_id: id2.clone(),
        path: p2.clone(),
    })
    .await
    .unwrap();

    // Volume v1beta3: the v1 shapes.
    let mut vb3c = vb3::volume_client::VolumeClient::new(ch("volume", "v1beta3"));
    let ids = vb3c
        .list_volumes_on_disk(vb3::ListVolumesOnDiskRequest {
            disk_number: n2,
            partition_number: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .volume_ids;
    assert_eq!(ids, std::slice::from_ref(&id2));
    assert!(
        vb3c.is_volume_formatted(vb3::IsVolumeFormattedRequest {
            volume_id: id2.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .formatted
    );
    vb3c.format_volume(vb3::FormatVolumeRequest {
        volume_id: id2.clone(),
    })
    .await
    .unwrap(); // ours and done: idempotent
    vb3c.mount_volume(vb3::MountVolumeRequest {
        volume_id: id2.clone(),
        target_path: p2.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        vb3c.get_volume_id_from_target_path(vb3::GetVolumeIdFromTargetPathRequest {
            target_path: p2.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .volume_id,
        id2
    );
    assert_eq!(
        vb3c.get_disk_number_from_volume_id(vb3::GetDiskNumberFromVolumeIdRequest {
            volume_id: id2.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .disk_number,
        n2
    );
    assert!(
        vb3c.get_volume_stats(vb3::GetVolumeStatsRequest {
            volume_id: id2.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .total_bytes
            > 0
    );
    vb3c.resize_volume(vb3::ResizeVolumeRequest {
        volume_id: id2.clone(),
        size_bytes: 0,
    })
    .await
    .unwrap();
    vb3c.write_volume_cache(vb3::WriteVolumeCacheRequest {
        volume_id: id2.clone(),
    })
    .await
    .unwrap();
    vb3c.unmount_volume(vb3::UnmountVolumeRequest {
        volume_id: id2.clone(),
        target_path: p2.clone(),
    })
    .await
    .unwrap();
    assert!(!is_mounted(Path::new(&p2)));
}
