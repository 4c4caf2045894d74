//! gce-pd replayed over the simulated Windows (`common/pd_driver.rs`): its NodeStage (with the
//! ResizeVolume(id, 0) every stage makes, and GetDiskStats when disk-size validation is on),
//! NodePublish, NodeGetVolumeStats, NodeExpand, NodeUnpublish and NodeUnstage as its Windows mounter makes them through the v1 endpoints, with kubelet's raw
//! staging path. Needs nothing from the host.
#![cfg(unix)]

mod common;

use common::{GIB, PdDriver, SimDaemon};

const STAGING: &str =
    r"\var\lib\kubelet\plugins\kubernetes.io\csi\pd.csi.storage.gke.io\abc\globalmount";

/// Divergence 2 of issue 28. A disk that arrives initialised MBR (restored from an image)
/// stages: ResizeVolume(id, 0) on a partition that already fills the disk has nothing to grow
/// and answers OK; once the disk is grown, NodeExpand grows the MBR partition and its NTFS.
/// The disk is taken offline at unstage and staged again in gce-pd's order (PartitionDisk on
/// the offline disk first). Before, ResizeVolume refused every non-GPT disk, so the stage
/// failed.
#[tokio::test(flavor = "multi_thread")]
async fn an_mbr_disk_stages_and_grows() {
    let d = SimDaemon::start().await;
    let mut pd = PdDriver::new(&d.connector, d.host()).await;
    assert_eq!(pd.api.versions(), ("v1", "v1", "v1"));
    mbr_disk_life(&d, &mut pd).await;
}

/// An older csi-proxy (no v1 endpoints): gce-pd falls back to filesystem v1beta1, disk v1beta2
/// and volume v1beta1 and lives the same life.
#[tokio::test(flavor = "multi_thread")]
async fn an_mbr_disk_stages_and_grows_through_the_v1beta_fallback() {
    let d = SimDaemon::serving(|g, v| {
        matches!(
            (g, v),
            ("filesystem", "v1beta1") | ("disk", "v1beta2") | ("volume", "v1beta1")
        )
    })
    .await;
    let mut pd = PdDriver::new(&d.connector, d.host()).await;
    assert_eq!(pd.api.versions(), ("v1beta1", "v1beta2", "v1beta1"));
    mbr_disk_life(&d, &mut pd).await;
}

async fn mbr_disk_life(d: &SimDaemon, pd: &mut PdDriver) {
    let (disk, volume) = d.sim.add_mbr_disk(10 * GIB, 2, 10 * GIB - (1 << 20));
    let device = format!("sim-disk-{disk}");
    d.sim.mkdir(&common::normalize_windows_path(STAGING));
    let target = r"c:\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount";
    d.sim
        .mkdir(r"c:\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount");

    let id = pd.stage(&device, STAGING).await.expect("staged");
    assert_eq!(id, volume, "the volume the image brought, not a new one");
    assert_eq!(pd.stage(&device, STAGING).await.unwrap(), id);
    pd.publish(STAGING, target).await.unwrap();

    // NodeGetVolumeStats on the raw publish path, through the daemon (issue 41).
    let (available, before, used) = pd.stats(target).await.expect("stats");
    assert_eq!((before, used), pd.api.volume_stats(&id).await.unwrap());
    assert_eq!(available + used, before);
    assert!(before > 9 * GIB as i64, "{before}");
    d.sim.grow_disk(disk, 20 * GIB);
    pd.expand(target).await.expect("the MBR partition grows");
    let after = pd.stats(target).await.unwrap().1;
    assert!(after > before + 9 * GIB as i64, "{before} -> {after}");
    pd.expand(target).await.expect("nothing more to grow: OK");

    pd.unpublish(target).await.unwrap();
    pd.unstage(STAGING).await.unwrap();
    pd.unstage(STAGING).await.unwrap();
    d.sim.mkdir(&common::normalize_windows_path(STAGING));
    // Re-staged with disk-size validation on: GetDiskStats on the disk the unstage took
    // offline, before PartitionDisk and SetDiskState (issue 41).
    let e = pd
        .stage_validating(&device, STAGING, Some(21))
        .await
        .unwrap_err();
    assert!(e.message().contains("expected block size"), "{e:?}");
    let restaged = pd.stage_validating(&device, STAGING, Some(20)).await;
    assert_eq!(restaged.expect("a 20 GiB disk passes"), id);
    pd.unstage(STAGING).await.unwrap();
}
