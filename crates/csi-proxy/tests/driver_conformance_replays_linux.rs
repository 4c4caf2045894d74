//! The exact driver replays (`common/{ebs,azuredisk,pd,vsphere}_driver.rs`, the same code the
//! simulated-Windows runs use) on Linux: real loop disks, real xfs, real mounts, through the
//! daemon's Unix sockets, with Linux kubelet paths (`<kubelet>/plugins/…/globalmount`,
//! `<kubelet>/pods/…/mount`) sent as they are. What differs from Windows, and why:
//! - loop disks carry no page 83 ID and no SCSI address, so gce-pd's, azuredisk's and vSphere's
//!   disk lookup is replaced by the serial ListDiskIDs reports (the backing file); aws-ebs finds
//!   its disk by its own rule (the volume ID in the serial);
//! - SetDiskState(offline) is refused for a device with no offline state (only SCSI disks have
//!   one): the unstage of aws-ebs, gce-pd and vSphere fails at that last step, after the
//!   unmount and the Rmdir, and kubelet's retry finds nothing staged and succeeds;
//! - a disk growing is seen by the kernel on a real node; a loop device sees its grown file
//!   only after `losetup -c` (done here as the hypervisor's part) or the daemon's Rescan;
//! - xfs: growing a mounted ext4 needs CAP_SYS_RESOURCE, which this machine's root lacks.
//!
//! Needs root and loop devices; skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{
    AzureDiskDriver, Daemon, EbsDriver, LinuxHost, LoopDisk, PdDriver, VsphereDriver,
    VsphereRelease, can_use_loop_devices, is_mounted,
};
use std::path::Path;
use std::sync::Arc;
use tonic::Code;

const MIB: i64 = 1 << 20;

/// A daemon formatting xfs, and the node as a driver's container sees it; `None` (with the
/// reason printed) where loop devices cannot be made.
/// With `profile`, the daemon serves only that driver's profile, at the default socket
/// directory the driver dials (its groups: disk, volume, filesystem).
fn linux_node(profile: Option<&str>) -> Option<(Daemon, Arc<LinuxHost>)> {
    if !can_use_loop_devices() {
        return None;
    }
    let flags = ["-format-filesystem=xfs"];
    let d = match profile {
        None => Daemon::start(&flags),
        Some(driver) => Daemon::start_profiled(
            |dir| {
                format!(
                    "[[profile]]\ndriver = \"{driver}\"\nsocket_dir = \"{}\"\n\
                     groups = [\"disk\", \"volume\", \"filesystem\"]\n",
                    dir.join("run").display()
                )
            },
            &flags,
        ),
    };
    Some((d, Arc::new(LinuxHost::default())))
}

/// Each replay twice, one after the other (a driver finds its disk by names the two runs
/// share): as every client is served without profiles, and under its driver's own profile.
macro_rules! with_and_without_profile {
    ($($test:ident => $body:ident;)+) => {
        $(
            #[tokio::test(flavor = "multi_thread")]
            async fn $test() {
                $body(false).await;
                $body(true).await;
            }
        )+
    };
}

/// kubelet's paths for a volume of `driver`: the staging directory and the publish path,
/// whose parents kubelet has made.
fn kubelet_paths(d: &Daemon, driver: &str) -> (String, String) {
    let staging = d.k(&format!(
        "plugins/kubernetes.io/csi/{driver}/5f1c/globalmount"
    ));
    let target = d.k("pods/uid-1/volumes/kubernetes.io~csi/pvc-1/mount");
    // kubelet makes both directories and records the volume's driver in each before it calls
    // NodeStageVolume and NodePublishVolume.
    for path in [&staging, &target] {
        let volume_dir = Path::new(path).parent().unwrap();
        std::fs::create_dir_all(volume_dir).unwrap();
        std::fs::write(
            volume_dir.join("vol_data.json"),
            format!(r#"{{"driverName":"{driver}","specVolID":"pvc-1"}}"#),
        )
        .unwrap();
    }
    (staging, target)
}

/// The hypervisor grew the disk and the kernel saw it.
fn grow_seen(l: &LoopDisk, mib: u64) {
    l.grow_to(mib);
    l.run("losetup", &["-c"], &l.dev);
}

/// The first unstage of a driver that takes the disk offline fails at SetDiskState (a loop
/// device has no offline state), after the unmount and the Rmdir; kubelet retries.
fn offline_refused(first: Result<(), tonic::Status>, staging: &str) {
    // The daemon answers FAILED_PRECONDITION; vSphere wraps it in its own INTERNAL.
    let e = first.unwrap_err();
    assert!(e.message().contains("no offline state"), "{e}");
    assert!(!is_mounted(Path::new(staging)) && !Path::new(staging).exists());
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(Path::new(path).join("data")).unwrap_or_default()
}

async fn ebs_replayed_on_a_loop_disk_as(profiled: bool) {
    let Some((d, host)) = linux_node(profiled.then_some("ebs.csi.aws.com")) else {
        return;
    };
    let mut ebs = EbsDriver::new(&d.connector(), host).await;
    let l = LoopDisk::new(d.dir.path(), "vol0123456789abcdef0", 400).unwrap();
    let vol = "vol-0123456789abcdef0";
    let (staging, target) = kubelet_paths(&d, "ebs.csi.aws.com");

    ebs.unstage(&staging)
        .await
        .expect("never staged: not mounted");
    ebs.stage(vol, &staging).await.expect("staged");
    ebs.stage(vol, &staging).await.expect("already staged");
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();
    ebs.publish(&staging, &target).await.expect("published");
    ebs.publish(&staging, &target)
        .await
        .expect("published again");
    assert_eq!(read(&target), b"kept");
    let before = ebs.stats(&target).await.expect("stats");

    l.grow_to(700);
    let capacity = ebs.expand(vol, &target).await.expect("expanded");
    assert_eq!(capacity, 700 * MIB);
    assert_eq!(ebs.expand(vol, &target).await.unwrap(), capacity);
    let after = ebs.stats(&target).await.unwrap();
    assert!(after > before + (250 << 20), "{before} -> {after}");

    ebs.unpublish(&target).await.unwrap();
    ebs.unpublish(&target).await.unwrap();
    assert_eq!(ebs.stats(&target).await.unwrap_err().code(), Code::NotFound);
    offline_refused(ebs.unstage(&staging).await, &staging);
    ebs.unstage(&staging)
        .await
        .expect("the retry finds nothing staged");

    ebs.stage(vol, &staging).await.expect("staged again");
    assert_eq!(read(&staging), b"kept", "not formatted again");
    offline_refused(ebs.unstage(&staging).await, &staging);
    ebs.unstage(&staging)
        .await
        .expect("the retry finds nothing staged");
}

async fn azuredisk_replayed_on_a_loop_disk_as(profiled: bool) {
    let Some((d, host)) = linux_node(profiled.then_some("disk.csi.azure.com")) else {
        return;
    };
    let l = LoopDisk::new(d.dir.path(), "azuredisk-lun3", 400).unwrap();
    host.name_disk("3", &l.serial());
    let mut ad = AzureDiskDriver::new(&d.connector(), host).await;
    assert_eq!(ad.api.versions(), ("v1", "v1", "v1"));
    let (staging, target) = kubelet_paths(&d, "disk.csi.azure.com");
    std::fs::create_dir_all(&staging).unwrap(); // kubelet makes it

    // The resize with the disk number as the volume ID fails (as upstream); the retry finds
    // the mount point through IsSymlink and ReadDir.
    let e = ad.stage(3, &staging).await.unwrap_err();
    assert!(e.message().contains("could not resize volume"), "{e}");
    ad.stage(3, &staging)
        .await
        .expect("the retry finds it staged");
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();
    ad.publish(&staging, &target).await.expect("published");
    ad.publish(&staging, &target)
        .await
        .expect("published again");
    assert_eq!(read(&target), b"kept");
    let (total, used) = ad.stats(&target).await.expect("stats");
    assert!(total > 300 * MIB && used < total, "{total} {used}");

    grow_seen(&l, 700);
    let grown = ad.expand(&target, 700 * MIB).await.expect("grown");
    assert!(grown > total + 250 * MIB, "{total} -> {grown}");
    assert_eq!(ad.expand(&target, 700 * MIB).await.unwrap(), grown);

    ad.unpublish(&target).await.unwrap();
    ad.unpublish(&target).await.unwrap();
    ad.unstage(&staging)
        .await
        .expect("unstaged: Rmdir of the mount point");
    ad.unstage(&staging).await.expect("unstaged again");
    assert!(!is_mounted(Path::new(&staging)) && !Path::new(&staging).exists());

    std::fs::create_dir_all(&staging).unwrap();
    assert!(ad.stage(3, &staging).await.is_err(), "the resize again");
    ad.stage(3, &staging).await.expect("staged again");
    assert_eq!(read(&staging), b"kept", "not formatted again");
    ad.unstage(&staging).await.unwrap();
}

async fn pd_replayed_on_a_loop_disk_as(profiled: bool) {
    let Some((d, host)) = linux_node(profiled.then_some("pd.csi.storage.gke.io")) else {
        return;
    };
    let l = LoopDisk::new(d.dir.path(), "pd-disk-1", 400).unwrap();
    host.name_disk("pd-disk-1", &l.serial());
    let mut pd = PdDriver::new(&d.connector(), host).await;
    let (staging, target) = kubelet_paths(&d, "pd.csi.storage.gke.io");
    std::fs::create_dir_all(&staging).unwrap(); // kubelet makes it

    let id = pd.stage("pd-disk-1", &staging).await.expect("staged");
    assert_eq!(pd.stage("pd-disk-1", &staging).await.unwrap(), id);
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();
    pd.publish(&staging, &target).await.unwrap();
    assert_eq!(read(&target), b"kept");

    // NodeGetVolumeStats on the publish path as kubelet hands it, through the daemon.
    let (available, before, used) = pd.stats(&target).await.expect("stats");
    assert_eq!((before, used), pd.api.volume_stats(&id).await.unwrap());
    assert_eq!(available + used, before);
    grow_seen(&l, 700);
    // NodeExpandVolume: the resize, then GetDiskStats must show at least the requested size.
    let grown = pd.node_expand("pd-disk-1", &target, 700 * MIB).await;
    assert_eq!(grown.expect("grown"), 700 * MIB);
    let after = pd.stats(&target).await.unwrap().1;
    assert!(after > before + 250 * MIB, "{before} -> {after}");
    let e = pd
        .node_expand("pd-disk-1", &target, 701 * MIB)
        .await
        .unwrap_err();
    assert!(
        e.message().contains("after resize volume was size"),
        "{e:?}"
    );
    pd.expand(&target).await.expect("nothing more to grow: OK");

    pd.unpublish(&target).await.unwrap();
    pd.unpublish(&target).await.unwrap();
    offline_refused(pd.unstage(&staging).await, &staging);
    // The retry, with the device in-use check gce-pd runs by default: the disk is looked up
    // again by its device name after the unstage, and found.
    let found = pd.node_unstage("pd-disk-1", &staging).await;
    let n = found.expect("the retry finds nothing staged");
    assert!(
        n.is_some(),
        "the device look-up after unstage finds the disk"
    );
    std::fs::create_dir_all(&staging).unwrap();
    // Re-staged with disk-size validation on: GetDiskStats first (700 MiB is 1 GiB rounded up).
    let e = pd.stage_validating("pd-disk-1", &staging, Some(2)).await;
    assert!(e.unwrap_err().message().contains("expected block size"));
    let restaged = pd.stage_validating("pd-disk-1", &staging, Some(1)).await;
    assert_eq!(restaged.unwrap(), id);
    assert_eq!(read(&staging), b"kept", "not formatted again");
    offline_refused(pd.unstage(&staging).await, &staging);
    pd.unstage(&staging)
        .await
        .expect("the retry finds nothing staged");
}

/// Writes a classic MBR (disk signature, primary entries of type 0x83 as `(first, sectors)`),
/// as fdisk leaves one, and has the kernel read it.
fn write_mbr(l: &LoopDisk, entries: &[(u32, u32)]) {
    let mut m = vec![0u8; 512];
    m[440..444].copy_from_slice(&0x5eed_cafe_u32.to_le_bytes());
    for (i, (first, sectors)) in entries.iter().enumerate() {
        let e = &mut m[446 + 16 * i..][..16];
        e[1..4].copy_from_slice(&[0xFE, 0xFF, 0xFF]);
        e[4] = 0x83;
        e[5..8].copy_from_slice(&[0xFE, 0xFF, 0xFF]);
        e[8..12].copy_from_slice(&first.to_le_bytes());
        e[12..16].copy_from_slice(&sectors.to_le_bytes());
    }
    m[510] = 0x55;
    m[511] = 0xAA;
    common::write_at(&l.dev, 0, &m).unwrap();
    // This kernel reads no MBR itself (no BLKRRPART partitions): partx adds them (BLKPG).
    l.run("partx", &["--add"], &l.dev);
    // devtmpfs makes the partitions' nodes shortly after.
    let t = std::time::Instant::now();
    while !(1..=entries.len() as u32).all(|n| l.partition(n).exists()) {
        assert!(
            t.elapsed().as_secs() < 10,
            "no partition nodes for {}",
            l.dev.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The partition table as util-linux's `partx` reads it from the disk: (start, sectors, type).
fn mbr_entries(l: &LoopDisk) -> Vec<(u64, u64, String)> {
    let out = std::process::Command::new("partx")
        .args(["--raw", "--noheadings", "--output", "START,SECTORS,TYPE"])
        .arg(&l.dev)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "partx: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
            )
        })
        .collect()
}

/// gce-pd stages a disk that already carries a classic MBR (an image, a disk another OS
/// partitioned): PartitionDisk keeps it, the first primary partition is the volume, and the
/// ResizeVolume(id, 0) every NodeStage makes has nothing to grow: OK, as on Windows (before, it
/// was refused as "not a GPT disk"). After the disk grew, the primary partition grows in
/// place as Windows grows it (its start, type and the other entries kept), and the filesystem
/// with it; partx reads the grown table.
async fn pd_replayed_on_an_mbr_disk_as(profiled: bool) {
    let Some((d, host)) = linux_node(profiled.then_some("pd.csi.storage.gke.io")) else {
        return;
    };
    let l = LoopDisk::new(d.dir.path(), "pd-mbr-1", 400).unwrap();
    // One primary partition filling the disk, as fdisk makes it.
    write_mbr(&l, &[(2048, 400 * 2048 - 2048)]);
    let made = mbr_entries(&l);
    host.name_disk("pd-mbr-1", &l.serial());
    let mut pd = PdDriver::new(&d.connector(), host).await;
    let (staging, target) = kubelet_paths(&d, "pd.csi.storage.gke.io");
    std::fs::create_dir_all(&staging).unwrap();

    let id = pd
        .stage("pd-mbr-1", &staging)
        .await
        .expect("staged: its ResizeVolume(id, 0) has nothing to grow");
    assert_eq!(
        mbr_entries(&l),
        made,
        "nothing to grow: the table is untouched"
    );
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();
    pd.publish(&staging, &target).await.unwrap();

    let before = pd.api.volume_stats(&id).await.unwrap().0;
    grow_seen(&l, 700);
    pd.expand(&target)
        .await
        .expect("the primary MBR partition grown");
    let after = pd.api.volume_stats(&id).await.unwrap().0;
    assert!(after > before + 250 * MIB, "{before} -> {after}");
    let grown = mbr_entries(&l);
    assert_eq!(grown.len(), 1, "{grown:?}");
    assert_eq!(
        (grown[0].0, grown[0].2.as_str()),
        (made[0].0, made[0].2.as_str())
    );
    assert_eq!(
        grown[0].0 + grown[0].1,
        700 * 2048,
        "grown to the disk's end: {grown:?}"
    );
    pd.expand(&target).await.expect("nothing more to grow: OK");
    assert_eq!(read(&target), b"kept");

    pd.unpublish(&target).await.unwrap();
    offline_refused(pd.unstage(&staging).await, &staging);
    pd.unstage(&staging)
        .await
        .expect("the retry finds nothing staged");
}

/// Two primary MBR partitions: the first grows only up to the second, which is never touched;
/// with nothing left to grow the call is OK.
async fn an_mbr_primary_grows_up_to_the_next_partition_only_as(profiled: bool) {
    let Some((d, host)) = linux_node(profiled.then_some("pd.csi.storage.gke.io")) else {
        return;
    };
    // xfs needs 300 MiB at least.
    let l = LoopDisk::new(d.dir.path(), "pd-mbr-2", 1000).unwrap();
    write_mbr(
        &l,
        &[(2048, 350 * 2048), (1_228_800, 1000 * 2048 - 1_228_800)],
    );
    let made = mbr_entries(&l);
    l.run("mkfs.xfs", &["-q", "-f"], &l.partition(2));
    let second = l.fingerprint_of(&l.partition(2));
    host.name_disk("pd-mbr-2", &l.serial());
    let mut pd = PdDriver::new(&d.connector(), host).await;
    let (staging, _) = kubelet_paths(&d, "pd.csi.storage.gke.io");
    std::fs::create_dir_all(&staging).unwrap();
    pd.stage("pd-mbr-2", &staging).await.expect("staged");
    let grown = mbr_entries(&l);
    assert_eq!(grown[0].0, made[0].0);
    assert_eq!(
        grown[0].0 + grown[0].1,
        1_228_800,
        "up to the second: {grown:?}"
    );
    assert_eq!(grown[1], made[1], "the second entry is kept");
    assert_eq!(l.fingerprint_of(&l.partition(2)), second, "its content too");
    pd.expand(&staging).await.expect("nothing more to grow: OK");
    offline_refused(pd.unstage(&staging).await, &staging);
}

/// Each release's staging check (v2.4 and v3.0 through PathExists and IsSymlink, v3.3
/// through `os.Lstat`), without profiles and under its driver's profile.
#[tokio::test(flavor = "multi_thread")]
async fn vsphere_replayed_on_a_loop_disk() {
    for release in [
        VsphereRelease::V2_4,
        VsphereRelease::V3_0,
        VsphereRelease::V3_3,
    ] {
        for profiled in [false, true] {
            if !vsphere_life(release, profiled).await {
                return;
            }
        }
    }
}

/// `false` when loop disks cannot be made here (the reason printed).
async fn vsphere_life(release: VsphereRelease, profiled: bool) -> bool {
    let Some((d, host)) = linux_node(profiled.then_some("csi.vsphere.vmware.com")) else {
        return false;
    };
    const UUID: &str = "6000c29a98d05e384a43f0ef189aaf5a";
    let l = LoopDisk::new(d.dir.path(), "vsphere-disk", 400).unwrap();
    host.name_disk(UUID, &l.serial());
    let mut vs = VsphereDriver::new(&d.connector(), host).await.unwrap();
    vs.release = release;
    let (staging, target) = kubelet_paths(&d, "csi.vsphere.vmware.com");
    eprintln!("note: NodeGetInfo not replayed here: this machine's BIOS serial is no VMware one");

    vs.unstage(&staging).await.expect("never staged: done");
    let e = vs.stage(UUID, &staging).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    std::fs::create_dir_all(&staging).unwrap(); // kubelet makes it
    vs.stage(UUID, &staging).await.expect("staged");
    vs.stage(UUID, &staging).await.expect("already staged");
    assert_eq!(
        vs.format_and_mounts, 1,
        "{release:?}: the retry found the mount"
    );
    std::fs::write(Path::new(&staging).join("data"), b"kept").unwrap();
    vs.publish(&staging, &target).await.expect("published");
    vs.publish(&staging, &target)
        .await
        .expect("published again");
    assert_eq!(read(&target), b"kept");
    let (total, used, free) = vs.stats(&target).await.expect("stats");
    assert!(total > 300 * MIB && used + free == total, "{total}");

    // A request above the disk's size: SetDiskState and ResizeVolume(id, 0), nothing to grow.
    assert_eq!(vs.expand(&target, 402 * MIB).await.unwrap(), 402 * MIB);
    // After the disk grew, vSphere's own 1 MiB rule skips the resize (as on Windows).
    l.grow_to(700);
    assert_eq!(vs.expand(&target, 700 * MIB).await.unwrap(), 700 * MIB);
    assert_eq!(vs.stats(&target).await.unwrap().0, total);
    // 2 MiB above the disk: the resize branch grows the volume to the disk.
    for _ in 0..2 {
        assert_eq!(vs.expand(&target, 702 * MIB).await.unwrap(), 702 * MIB);
        let now = vs.stats(&target).await.unwrap().0;
        assert!(now > total + 250 * MIB, "{total} -> {now}");
    }

    vs.unpublish(&target).await.unwrap();
    vs.unpublish(&target).await.unwrap();
    offline_refused(vs.unstage(&staging).await, &staging);
    vs.unstage(&staging)
        .await
        .expect("the retry finds nothing staged");
    std::fs::create_dir_all(&staging).unwrap();
    vs.stage(UUID, &staging).await.expect("staged again");
    assert_eq!(read(&staging), b"kept", "not formatted again");
    offline_refused(vs.unstage(&staging).await, &staging);
    vs.unstage(&staging)
        .await
        .expect("the retry finds nothing staged");
    true
}

with_and_without_profile! {
    ebs_replayed_on_a_loop_disk => ebs_replayed_on_a_loop_disk_as;
    azuredisk_replayed_on_a_loop_disk => azuredisk_replayed_on_a_loop_disk_as;
    pd_replayed_on_a_loop_disk => pd_replayed_on_a_loop_disk_as;
    pd_replayed_on_an_mbr_disk => pd_replayed_on_an_mbr_disk_as;
    an_mbr_primary_grows_up_to_the_next_partition_only => an_mbr_primary_grows_up_to_the_next_partition_only_as;
}
