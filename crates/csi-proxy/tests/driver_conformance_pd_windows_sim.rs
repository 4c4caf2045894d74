//! gce-pd replayed over the simulated Windows (`common/pd_driver.rs`): its NodeStage (with the
//! ResizeVolume(id, 0) every stage makes, and GetDiskStats when disk-size validation is on),
//! NodePublish, NodeGetVolumeStats, NodeExpand, NodeUnpublish and NodeUnstage as its Windows mounter makes them through the v1 endpoints, with kubelet's raw
//! staging path. Each replay runs twice: without profiles, and under gce-pd's own profile
//! served where its clients dial, kubelet's per-volume records written where kubelet writes
//! them. Needs nothing from the host.
#![cfg(unix)]

mod common;

use common::{GIB, PdDriver, SimDaemon};

const PD: &str = "pd.csi.storage.gke.io";
const STAGING: &str =
    r"\var\lib\kubelet\plugins\kubernetes.io\csi\pd.csi.storage.gke.io\abc\globalmount";

/// A disk that arrives initialised MBR (restored from an image) stages: ResizeVolume(id, 0) on a
/// partition that already fills the disk has nothing to grow and answers OK; once the disk is
/// grown, NodeExpand grows the MBR partition and its NTFS. The disk is taken offline at unstage and
/// staged again in gce-pd's order (PartitionDisk on the offline disk first). Before, ResizeVolume
/// refused every non-GPT disk, so the stage failed.
#[tokio::test(flavor = "multi_thread")]
async fn an_mbr_disk_stages_and_grows() {
    for profile in [None, Some(PD)] {
        let d = SimDaemon::start_as(profile).await;
        let mut pd = PdDriver::new(&d.connector, d.host()).await;
        assert_eq!(pd.api.versions(), ("v1", "v1", "v1"));
        mbr_disk_life(&d, &mut pd).await;
    }
}

/// An older csi-proxy (no v1 endpoints): gce-pd falls back to filesystem v1beta1, disk v1beta2
/// and volume v1beta1 and lives the same life.
#[tokio::test(flavor = "multi_thread")]
async fn an_mbr_disk_stages_and_grows_through_the_v1beta_fallback() {
    for profile in [None, Some(PD)] {
        let d = SimDaemon::serving_as(profile, |g, v| {
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
}

async fn mbr_disk_life(d: &SimDaemon, pd: &mut PdDriver) {
    let (disk, volume) = d.sim.add_mbr_disk(10 * GIB, 2, 10 * GIB - (1 << 20));
    let device = format!("sim-disk-{disk}");
    d.sim.mkdir(&common::normalize_windows_path(STAGING));
    let target = r"c:\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount";
    // kubelet's records of the volume's driver, beside the staging and the publish path.
    d.kubelet_volume(STAGING, PD);
    d.kubelet_volume(target, PD);
    d.sim
        .mkdir(r"c:\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount");

    let id = pd.stage(&device, STAGING).await.expect("staged");
    assert_eq!(id, volume, "the volume the image brought, not a new one");
    assert_eq!(pd.stage(&device, STAGING).await.unwrap(), id);
    pd.publish(STAGING, target).await.unwrap();

    // NodeGetVolumeStats on the raw publish path, through the daemon.
    let (available, before, used) = pd.stats(target).await.expect("stats");
    assert_eq!((before, used), pd.api.volume_stats(&id).await.unwrap());
    assert_eq!(available + used, before);
    assert!(before > 9 * GIB as i64, "{before}");
    d.sim.grow_disk(disk, 20 * GIB);
    // NodeExpandVolume: the resize, then GetDiskStats on the disk must show the requested size.
    let asked = 20 * GIB as i64 - (1 << 20);
    let grown = pd.node_expand(&device, target, asked).await;
    assert_eq!(grown.expect("the MBR partition grows"), asked);
    let after = pd.stats(target).await.unwrap().1;
    assert!(after > before + 9 * GIB as i64, "{before} -> {after}");
    let e = pd
        .node_expand(&device, target, 21 * GIB as i64)
        .await
        .unwrap_err();
    assert!(
        e.message().contains("after resize volume was size"),
        "{e:?}"
    );
    pd.node_expand(&device, target, asked)
        .await
        .expect("nothing more to grow: OK");

    pd.unpublish(target).await.unwrap();
    // NodeUnstageVolume with the device in-use check (on by default): the disk, now offline,
    // is looked up again by its device name and found.
    let found = pd.node_unstage(&device, STAGING).await.unwrap();
    assert_eq!(
        found,
        Some(disk.to_string()),
        "the offline disk is still listed"
    );
    let found = pd.node_unstage(&device, STAGING).await.unwrap();
    assert_eq!(found, Some(disk.to_string()));
    d.sim.mkdir(&common::normalize_windows_path(STAGING));
    // Re-staged with disk-size validation on: GetDiskStats on the disk the unstage took offline,
    // before PartitionDisk and SetDiskState.
    let e = pd
        .stage_validating(&device, STAGING, Some(21))
        .await
        .unwrap_err();
    assert!(e.message().contains("expected block size"), "{e:?}");
    let restaged = pd.stage_validating(&device, STAGING, Some(20)).await;
    assert_eq!(restaged.expect("a 20 GiB disk passes"), id);
    pd.unstage(STAGING).await.unwrap();
}

/// gce-pd v1.21+ on Google Cloud finds a Hyperdisk (NVMe) by its namespace identifier: the metadata
/// server lists the device as NVMe with that identifier, ListDiskIDs' page 83 ID of an NVMe
/// namespace is the EUI-64 as hex (no `eui.`), so the driver reformats each disk's serial number to
/// 32 hex digits and compares the first 16. Two NVMe disks and a SCSI one are attached; each NVMe
/// device name finds its own disk and stages, and a device the metadata server lists over SCSI
/// falls back to page 83's device name.
#[tokio::test(flavor = "multi_thread")]
async fn hyperdisk_nvme_disks_are_found_by_their_namespace_identifier() {
    for profile in [None, Some(PD)] {
        hyperdisk_life(profile).await;
    }
}

async fn hyperdisk_life(profile: Option<&str>) {
    let d = SimDaemon::start_as(profile).await;
    let mut pd = PdDriver::new(&d.connector, d.host()).await;
    let scsi = d.sim.add_disk(10 * GIB, 1);
    let a = d.sim.add_disk(10 * GIB, 2);
    let b = d.sim.add_disk(10 * GIB, 3);
    let (eui_a, eui_b) = (0x10CC_9636_B6E3_CE3B_u64, 0x10CC_9636_B6E3_CE3C_u64);
    d.sim.make_disk_nvme(a, eui_a.to_be_bytes());
    d.sim.make_disk_nvme(b, eui_b.to_be_bytes());
    let ids = pd.api.disk_ids().await.unwrap();
    let serial_a = &ids.iter().find(|(n, _)| *n == a.to_string()).unwrap().1;
    assert_eq!(serial_a.serial, "10CC_9636_B6E3_CE3B_0000_0000_0000_0000.");
    assert_eq!(
        serial_a.page83, "10cc9636b6e3ce3b",
        "no eui. prefix: the serial is used"
    );

    pd.on_google_cloud("hd-b", "NVME", eui_b);
    pd.on_google_cloud("hd-a", "NVME", eui_a);
    pd.on_google_cloud(&format!("sim-disk-{scsi}"), "SCSI", 0);
    assert_eq!(pd.disk_number("hd-a").await.unwrap(), a.to_string());
    assert_eq!(pd.disk_number("hd-b").await.unwrap(), b.to_string());
    let legacy = pd.disk_number(&format!("sim-disk-{scsi}")).await.unwrap();
    assert_eq!(legacy, scsi.to_string());
    // A namespace no disk carries: the legacy lookup, which finds nothing either.
    pd.on_google_cloud("hd-gone", "NVME", 0x10CC_9636_0000_0001);
    assert!(pd.disk_number("hd-gone").await.is_err());

    let staging =
        r"\var\lib\kubelet\plugins\kubernetes.io\csi\pd.csi.storage.gke.io\hdb\globalmount";
    d.sim.mkdir(&common::normalize_windows_path(staging));
    d.kubelet_volume(staging, PD);
    let id = pd
        .stage("hd-b", staging)
        .await
        .expect("the Hyperdisk stages");
    assert_eq!(d.sim.volume_disk(&id), Some(b));
    pd.unstage(staging).await.unwrap();
}
