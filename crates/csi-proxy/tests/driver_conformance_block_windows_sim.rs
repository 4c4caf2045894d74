//! aws-ebs and azuredisk replayed exactly over the simulated Windows (`common/ebs_driver.rs`,
//! `common/azuredisk_driver.rs`): every CSI node operation as the driver makes it, twice as
//! kubelet retries, with kubelet's path forms (the driveless `\var\lib\kubelet\…` staging path,
//! `c:\var\lib\kubelet\pods\…` and its driveless form for the publish path); azuredisk also
//! through its v1beta fallback on a daemon serving only filesystem v1beta1, disk and volume
//! v1beta2. Each life runs twice: without profiles, and under the driver's own profile served
//! where its clients dial, kubelet's per-volume records written where kubelet writes them.
//! Needs nothing from the host.
#![cfg(unix)]

mod common;

use common::{AzureDiskDriver, EbsDriver, GIB, SimDaemon, ebs_reads_not_mounted};

fn staging(driver: &str) -> String {
    format!(r"\var\lib\kubelet\plugins\kubernetes.io\csi\{driver}\0f1e2d\globalmount")
}
const EBS: &str = "ebs.csi.aws.com";
const AZUREDISK: &str = "disk.csi.azure.com";
const POD_VOLUME: &str = r"\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount";

fn publish_path() -> String {
    common::normalize_windows_path(POD_VOLUME)
}

/// aws-ebs finds its disk by the volume ID in the NVMe serial, makes the staging directory and
/// asks GetVolumeIDFromTargetPath on it while it is empty: the answer must carry the text it
/// reads as "not mounted", else its NodeStage fails. Then every operation twice; NeedResize
/// finds nothing to grow at stage; NodeExpand after the disk grew answers the disk's size;
/// NodeUnstage reads "not mounted" once the staging directory is gone and takes the disk
/// offline; a second life stages the same volume without formatting it.
#[tokio::test(flavor = "multi_thread")]
async fn ebs_every_node_operation_twice() {
    for profile in [None, Some(EBS)] {
        ebs_life(profile).await;
    }
}

async fn ebs_life(profile: Option<&str>) {
    let d = SimDaemon::start_as(profile).await;
    let mut ebs = EbsDriver::new(&d.connector, d.host()).await;
    let disk = d.sim.add_disk(10 * GIB, 0);
    d.sim.add_disk(10 * GIB, 1);
    d.sim.set_disk_serial(disk, "vol0123456789abcdef0");
    let vol = "vol-0123456789abcdef0";
    let staging = staging(EBS);
    let target = publish_path();
    // kubelet made the staging and the pod's volume directory, each with its record of the
    // volume's driver (kubelet before 1.20 the target too).
    d.kubelet_volume(&staging, EBS);
    d.kubelet_volume(&target, EBS);
    d.sim.mkdir(&target);

    ebs.unstage(&staging)
        .await
        .expect("never staged: not mounted");
    ebs.stage(vol, &staging).await.expect("staged");
    ebs.stage(vol, &staging).await.expect("already staged");
    let formats = d.sim.calls()["format_ntfs"];
    ebs.publish(&staging, &target).await.expect("published");
    ebs.publish(&staging, &target)
        .await
        .expect("published again");
    let before = ebs.stats(&target).await.expect("stats");
    assert!(before > 9 * GIB, "{before}");

    d.sim.grow_disk(disk, 20 * GIB);
    let capacity = ebs.expand(vol, &target).await.expect("expanded");
    assert_eq!(capacity, 20 * GIB as i64);
    assert_eq!(ebs.expand(vol, &target).await.unwrap(), capacity);
    let after = ebs.stats(&target).await.unwrap();
    assert!(after > before + 9 * GIB, "{before} -> {after}");

    ebs.unpublish(&target).await.unwrap();
    ebs.unpublish(&target).await.unwrap();
    let err = ebs.stats(&target).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    ebs.unstage(&staging).await.expect("unstaged");
    ebs.unstage(&staging).await.expect("unstaged again");
    assert!(
        !d.sim
            .entry_exists(&common::normalize_windows_path(&staging))
    );
    assert!(
        d.sim.disk_attributes(disk).unwrap().0,
        "offline after unstage"
    );

    ebs.stage(vol, &staging).await.expect("staged again");
    assert_eq!(d.sim.calls()["format_ntfs"], formats, "not formatted again");
    ebs.unstage(&staging).await.unwrap();
}

/// aws-ebs's "not mounted" test is a regular expression over the error text.
#[test]
fn ebs_not_mounted_pattern() {
    assert!(ebs_reads_not_mounted(
        "x: no volume is mounted there, because it does not exist"
    ));
    assert!(ebs_reads_not_mounted(
        r"error running (Get-Item -Path c:\a\b).Target, output: , error: <nil>"
    ));
    assert!(!ebs_reads_not_mounted("c:\\a is not a mount point"));
    assert!(!ebs_reads_not_mounted(
        "Get-Item -Path  .Target, output: , error: <nil>"
    ));
}

/// azuredisk's whole life on `d`: the disk by LUN; NodeStage fails once at the ResizeVolume
/// it makes with the disk number as the volume ID (as upstream's does) and succeeds on
/// kubelet's retry through its IsSymlink check; publish twice; stats on the raw and the
/// normalised publish path; NodeExpand after the disk grew (v1.34's size check refuses before
/// the resize, as it does upstream; earlier releases resize); unpublish and unstage twice,
/// unstage with the raw staging path; and a second life on the same volume.
async fn azuredisk_life(d: &SimDaemon, ad: &mut AzureDiskDriver) {
    let disk = d.sim.add_disk(10 * GIB, 3);
    d.sim.add_disk(10 * GIB, 4);
    let staging = staging(AZUREDISK);
    let target = publish_path();
    // kubelet makes the staging directory and the pod's volume directory, each with its
    // record of the volume's driver.
    d.kubelet_volume(&staging, AZUREDISK);
    d.kubelet_volume(&target, AZUREDISK);
    d.sim.mkdir(&common::normalize_windows_path(&staging));
    d.sim.mkdir(&target);

    let e = ad.stage(9, &staging).await.unwrap_err();
    assert!(
        e.message().contains("could not find disk id for lun: 9"),
        "{e}"
    );
    let e = ad.stage(3, &staging).await.unwrap_err();
    assert!(e.message().contains("could not resize volume 1"), "{e}");
    let formats = d.sim.calls()["format_ntfs"];
    ad.stage(3, &staging)
        .await
        .expect("the retry finds it staged");
    ad.publish(&staging, &target).await.expect("published");
    ad.publish(&staging, &target)
        .await
        .expect("published again");
    let (total, used) = ad.stats(POD_VOLUME).await.expect("stats, raw path");
    assert!(total > 9 * GIB as i64 && used < total, "{total} {used}");
    assert_eq!(ad.stats(&target).await.unwrap().0, total);

    d.sim.grow_disk(disk, 20 * GIB);
    let e = ad.expand(&target, 20 * GIB as i64).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
    ad.size_check = false;
    let grown = ad.expand(&target, 20 * GIB as i64).await.expect("grown");
    assert!(grown > total + 9 * GIB as i64, "{total} -> {grown}");
    ad.size_check = true;
    assert_eq!(ad.expand(&target, 20 * GIB as i64).await.unwrap(), grown);

    ad.unpublish(&target).await.unwrap();
    ad.unpublish(&target).await.unwrap();
    ad.unstage(&staging).await.expect("unstaged");
    ad.unstage(&staging).await.expect("unstaged again");
    assert!(
        !d.sim
            .entry_exists(&common::normalize_windows_path(&staging))
    );
    assert!(
        d.sim
            .mount_points()
            .iter()
            .all(|(p, _)| !p.contains("disk.csi"))
    );

    d.sim.mkdir(&common::normalize_windows_path(&staging));
    assert!(ad.stage(3, &staging).await.is_err(), "the resize again");
    ad.stage(3, &staging).await.expect("staged again");
    assert_eq!(d.sim.calls()["format_ntfs"], formats, "not formatted again");
    ad.unstage(&staging).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn azuredisk_every_node_operation_twice() {
    for profile in [None, Some(AZUREDISK)] {
        let d = SimDaemon::start_as(profile).await;
        let mut ad = AzureDiskDriver::new(&d.connector, d.host()).await;
        assert_eq!(ad.api.versions(), ("v1", "v1", "v1"));
        azuredisk_life(&d, &mut ad).await;
    }
}

/// An older csi-proxy (no v1 endpoints): azuredisk falls back to filesystem v1beta1 (LinkPath,
/// IsMountPoint), disk v1beta2 and volume v1beta2 (GetVolumeIDFromMount, DismountVolume,
/// VolumeStats) and lives the same life.
#[tokio::test(flavor = "multi_thread")]
async fn azuredisk_v1beta_fallback() {
    for profile in [None, Some(AZUREDISK)] {
        let d = SimDaemon::serving_as(profile, |g, v| {
            matches!(
                (g, v),
                ("filesystem", "v1beta1") | ("disk", "v1beta2") | ("volume", "v1beta2")
            )
        })
        .await;
        let mut ad = AzureDiskDriver::new(&d.connector, d.host()).await;
        assert_eq!(ad.api.versions(), ("v1beta1", "v1beta2", "v1beta2"));
        azuredisk_life(&d, &mut ad).await;
    }
}
