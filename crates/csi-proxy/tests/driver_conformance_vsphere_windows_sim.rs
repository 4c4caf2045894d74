//! vSphere (v2.4–v3.4) replayed over the simulated Windows (`common/vsphere_driver.rs`): its
//! NodeGetInfo (the VM UUID from GetBIOSSerialNumber, system v1alpha1), NodeStage (the disk
//! whose page 83 NAA ID is the publish context's `diskUUID`), NodePublish, NodeGetVolumeStats,
//! NodeExpand, NodeUnpublish and NodeUnstage as its Windows mounter makes them, each twice as
//! kubelet retries, with kubelet's path forms. Each life runs twice: without profiles, and under
//! vSphere's own profile (with the system group) served where its clients dial, kubelet's
//! per-volume records written where kubelet writes them. Needs nothing from the host.
#![cfg(unix)]

mod common;

use common::{GIB, SimDaemon, VsphereDriver, VsphereRelease, vsphere_convert_uuid};

const VSPHERE: &str = "csi.vsphere.vmware.com";
const STAGING: &str =
    r"\var\lib\kubelet\plugins\kubernetes.io\csi\csi.vsphere.vmware.com\5f1c\globalmount";
const POD_VOLUME: &str = r"\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pvc-1\mount";
const DISK_UUID: &str = "6000c29a98d05e384a43f0ef189aaf5a";
const BIOS_SERIAL: &str = "VMware-42 29 92 4b 83 35 d9 77-f3 82 cf 46 56 61 ac 60";

/// A raw SMBIOS table whose System Information (type 1) serial number is `serial`.
fn smbios_with_serial(serial: &str) -> Vec<u8> {
    let mut t1 = vec![1u8, 27, 0, 1, 1, 2, 3, 4];
    t1.resize(27, 0);
    t1.extend_from_slice(format!("VMware, Inc.\0VMware7,1\0None\0{serial}\0\0").as_bytes());
    t1.extend_from_slice(&[127, 4, 0, 2, 0, 0]);
    let mut raw = vec![0u8, 2, 8, 0];
    raw.extend_from_slice(&(t1.len() as u32).to_le_bytes());
    raw.extend_from_slice(&t1);
    raw
}

/// The NAA ID's bytes from its hex form.
fn naa(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn the_vm_uuid_is_made_from_the_bios_serial_as_vsphere_does() {
    assert_eq!(
        vsphere_convert_uuid(BIOS_SERIAL).unwrap(),
        "4229924b-8335-d977-f382-cf465661ac60"
    );
    assert!(vsphere_convert_uuid("Google-42").is_err());
    assert!(vsphere_convert_uuid("VMware-42 29").is_err());
}

/// A whole volume life. NodeGetInfo reads the VMware serial from SMBIOS. NodeStage refuses a
/// staging directory kubelet has not made yet (the driver's own FailedPrecondition), then
/// finds its disk by the hex page 83 NAA ID (a disk with no ID beside it is skipped), and its
/// retry finds the mounted folder through `os.Lstat` and `ReadDir`. Publish twice (the link
/// made again), stats on the raw and the normalised publish path. NodeExpand: a request just
/// above the disk's size (the guest does not see the growth yet) makes SetDiskState and
/// ResizeVolume(id, 0) with nothing to grow, which must be OK; after the disk grew, Rescan
/// shows its size and vSphere's own rule (resize only when the request exceeds the disk by
/// 1 MiB) skips the resize, so the filesystem keeps its size, as with upstream; a request
/// 2 MiB above the disk grows it. Unpublish and
/// unstage twice (the disk offline after), and a second life on the offline disk, not
/// formatted again. Each release's staging check: v2.4's and v3.0's through csi-proxy
/// (PathExists, IsSymlink), v3.3's through `os.Lstat`.
#[tokio::test(flavor = "multi_thread")]
async fn vsphere_every_node_operation_twice() {
    for release in [
        VsphereRelease::V2_4,
        VsphereRelease::V3_0,
        VsphereRelease::V3_3,
    ] {
        for profile in [None, Some(VSPHERE)] {
            vsphere_life(release, profile).await;
        }
    }
}

async fn vsphere_life(release: VsphereRelease, profile: Option<&str>) {
    let d = SimDaemon::start_as(profile).await;
    d.sim
        .set_firmware(Some(smbios_with_serial(BIOS_SERIAL)), "");
    let mut vs = VsphereDriver::new(&d.connector, d.host()).await.unwrap();
    vs.release = release;
    let bare = d.sim.add_disk(10 * GIB, 0);
    d.sim.clear_disk_page83(bare);
    let disk = d.sim.add_disk(10 * GIB, 1);
    d.sim.set_disk_naa(disk, &naa(DISK_UUID));
    let target = common::normalize_windows_path(POD_VOLUME);

    assert_eq!(
        vs.node_id().await.unwrap(),
        "4229924b-8335-d977-f382-cf465661ac60"
    );

    vs.unstage(STAGING).await.expect("never staged: done");
    let e = vs.stage(DISK_UUID, STAGING).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    // kubelet makes the staging directory and the pod's volume directory, each with its
    // record of the volume's driver.
    d.sim.mkdir(&common::normalize_windows_path(STAGING));
    d.kubelet_volume(STAGING, VSPHERE);
    d.kubelet_volume(&target, VSPHERE);
    d.sim.mkdir(&target);
    let e = vs.stage("6000c29000000000000000000000dead", STAGING).await;
    assert!(
        e.unwrap_err().message().contains("no matching disks found"),
        "a disk without page 83 ID is skipped, no other matches"
    );
    vs.stage(DISK_UUID, STAGING).await.expect("staged");
    let formats = d.sim.calls()["format_ntfs"];
    vs.stage(DISK_UUID, STAGING).await.expect("already staged");
    assert_eq!(
        vs.format_and_mounts, 1,
        "{release:?}: the retry found the mount point"
    );
    assert_eq!(d.sim.calls()["format_ntfs"], formats);

    vs.publish(STAGING, &target).await.expect("published");
    vs.publish(STAGING, &target).await.expect("published again");
    let (total, used, free) = vs.stats(POD_VOLUME).await.expect("stats, raw path");
    assert!(total > 9 * GIB as i64 && used + free == total, "{total}");
    assert_eq!(vs.stats(&target).await.unwrap().0, total);

    let asked = 10 * GIB as i64 + 2 * (1 << 20);
    assert_eq!(
        vs.expand(&target, asked)
            .await
            .expect("nothing to grow: OK"),
        asked
    );
    d.sim.grow_disk(disk, 20 * GIB);
    let grown = 20 * GIB as i64;
    assert_eq!(vs.expand(&target, grown).await.unwrap(), grown);
    assert_eq!(vs.expand(&target, grown).await.unwrap(), grown);
    assert_eq!(
        vs.stats(&target).await.unwrap().0,
        total,
        "vSphere skips the resize once Rescan shows the grown disk"
    );
    // A request 2 MiB above the grown disk takes the resize branch: ResizeVolume(id, 0) grows
    // the volume to the disk; asked again, nothing more to grow is OK.
    let above = grown + 2 * (1 << 20);
    for _ in 0..2 {
        assert_eq!(vs.expand(&target, above).await.unwrap(), above);
        let now = vs.stats(&target).await.unwrap().0;
        assert!(now > total + 9 * GIB as i64, "{total} -> {now}");
    }

    vs.unpublish(&target).await.unwrap();
    vs.unpublish(&target).await.unwrap();
    vs.unstage(STAGING).await.expect("unstaged");
    vs.unstage(STAGING).await.expect("unstaged again");
    assert!(!d.sim.entry_exists(&common::normalize_windows_path(STAGING)));
    assert!(d.sim.disk_attributes(disk).unwrap().0, "offline");

    let formats = d.sim.calls()["format_ntfs"];
    d.sim.mkdir(&common::normalize_windows_path(STAGING));
    vs.stage(DISK_UUID, STAGING).await.expect("staged again");
    assert_eq!(d.sim.calls()["format_ntfs"], formats, "not formatted again");
    vs.unstage(STAGING).await.unwrap();
}
