//! csi-driver-smb and azurefile replayed over the simulated Windows (`common/smb_driver.rs`):
//! each CSI operation as their Windows mounters make it through the v1 endpoints, kubelet's
//! path forms (staging `\var\lib\kubelet\…` without a drive, publish `c:\var\lib\kubelet\…`)
//! normalised their way, and kubelet's retries. The main lives run twice: without profiles, and
//! under the driver's own profile served where its clients dial, kubelet's per-volume records
//! written where kubelet writes them. Needs nothing from the host.
#![cfg(unix)]

mod common;

use common::{SimDaemon, SmbDriver, SmbFlavour, count_dir};
use csi_proxy_host::windows::os::OsError;

const PODS: &str = r"c:\var\lib\kubelet\pods";

/// The CSI name of the driver `flavour` replays.
fn driver(flavour: SmbFlavour) -> &'static str {
    match flavour {
        SmbFlavour::CsiDriverSmb | SmbFlavour::CsiDriverSmbV1_12 => "smb.csi.k8s.io",
        SmbFlavour::AzureFile => "file.csi.azure.com",
    }
}

/// csi-driver-smb's staging path for `hash`.
fn staging(hash: &str) -> String {
    staging_of(SmbFlavour::CsiDriverSmb, hash)
}

/// The staging path kubelet hands `flavour`'s driver for `hash` (driveless).
fn staging_of(flavour: SmbFlavour, hash: &str) -> String {
    format!(
        r"\var\lib\kubelet\plugins\kubernetes.io\csi\{}\{hash}\globalmount",
        driver(flavour)
    )
}

/// As [`staging_of`], with the directory kubelet makes for it and its record of the driver
/// there, as kubelet leaves them before NodeStageVolume.
fn staged_by(d: &SimDaemon, flavour: SmbFlavour, hash: &str) -> String {
    let st = staging_of(flavour, hash);
    d.kubelet_volume(&st, driver(flavour));
    st
}

/// The publish path of `pvc` in pod `uid` for `flavour`'s driver, whose parent kubelet has
/// made and recorded the volume's driver in.
fn publish_path(d: &SimDaemon, flavour: SmbFlavour, uid: &str, pvc: &str) -> String {
    let target = format!(r"{PODS}\{uid}\volumes\kubernetes.io~csi\{pvc}\mount");
    d.kubelet_volume(&target, driver(flavour));
    target
}

/// csi-driver-smb through a volume life, each operation twice as kubelet retries: stage (the
/// mapping, its link and the driver's count file), publish, unpublish, unstage (its count file
/// removed, then the mapping when no count file of the share is left, before the staging
/// link); a second volume on the same share with a secret the server also takes reuses the
/// healthy mapping, and the counts, files on the host, survive the driver's restart.
#[tokio::test(flavor = "multi_thread")]
async fn smb_node_operations_each_twice() {
    for profile in [None, Some(driver(SmbFlavour::CsiDriverSmb))] {
        smb_node_operations(profile).await;
    }
}

async fn smb_node_operations(profile: Option<&str>) {
    let flavour = SmbFlavour::CsiDriverSmb;
    let d = SimDaemon::start_as(profile).await;
    let mut drv = SmbDriver::new(&d, flavour).await;
    d.sim
        .add_share(r"\\files.example\vols", Some((r"AZURE\svc", "s3cret")));
    let (st1, st2) = (staged_by(&d, flavour, "h1"), staged_by(&d, flavour, "h2"));
    let target = publish_path(&d, flavour, "uid-1", "pvc-1");
    let source = "//files.example/vols";

    // Unstage of a volume never staged: nothing to read, nothing to remove.
    drv.unstage("pvc-1", &st1).await.unwrap();

    for _ in 0..2 {
        drv.stage("pvc-1", source, Some("pvc-1"), &st1, "svc", "s3cret")
            .await
            .unwrap();
    }
    assert_eq!(d.sim.smb_roots(), [r"\\files.example\vols"]);
    assert!(drv.reads(&st1));

    for _ in 0..2 {
        drv.publish(&st1, &target).await.unwrap();
    }
    assert!(drv.reads(&target));

    // The same server also takes another secret of the same user: the healthy mapping is
    // reused, not replaced under the first volume.
    drv.stage("pvc-2", source, Some("pvc-2"), &st2, "svc", "rotated")
        .await
        .unwrap();
    assert_eq!(d.sim.calls()["smb_create_global_mapping"], 1);
    assert!(drv.reads(&target), "the first volume still answers");

    for _ in 0..2 {
        drv.unpublish(&target).await.unwrap();
    }
    assert!(!d.sim.entry_exists(&target));

    // The driver restarts; its count files stay on the host: the first volume's unstage
    // leaves the mapping to the second volume without asking for its removal.
    let counts = count_dir(r"\\files.example\vols");
    assert_eq!(
        d.sim.dir_entries(&counts).len(),
        2,
        "one count file per volume"
    );
    drv.restart();
    for _ in 0..2 {
        drv.unstage("pvc-1", &st1).await.unwrap();
    }
    assert!(!d.sim.entry_exists(&common::normalize_windows_path(&st1)));
    assert_eq!(d.sim.smb_roots().len(), 1, "kept for the other volume");
    assert_eq!(d.sim.calls().get("smb_remove_global_mapping"), None);
    assert!(drv.reads(&st2));

    // The last volume unstages in the driver's order: the mapping goes, then its link.
    for _ in 0..2 {
        drv.unstage("pvc-2", &st2).await.unwrap();
    }
    assert!(d.sim.smb_roots().is_empty(), "{:?}", d.sim.smb_roots());
    assert!(!d.sim.entry_exists(&common::normalize_windows_path(&st2)));
}

/// The share's password changes (an Azure Files key rotation) and the server drops its sessions:
/// the mapping made with the old secret stops answering, and with it every staged volume of the
/// share. The next NodeStage of a volume on that share, with the new secret from its Kubernetes
/// secret, repairs the mapping while the other volumes' links still lead into it, and every volume
/// answers again. (Before, the daemon refused with FAILED_PRECONDITION as long as another volume
/// was staged, so the share stayed broken.)
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_mapping_other_volumes_use_is_made_again_with_the_new_secret() {
    for flavour in [SmbFlavour::CsiDriverSmb, SmbFlavour::AzureFile] {
        for profile in [None, Some(driver(flavour))] {
            let d = SimDaemon::start_as(profile).await;
            broken_mapping_repaired(&d, flavour).await;
        }
    }
}

/// azurefile v1.35.4 on no longer removes a publish link it cannot read (NodePublishVolume's
/// `ensureMountPoint` with `shouldUnmount` false): after a key rotation dropped the share's
/// sessions, kubelet's republish fails and the dead link stays, answered as existing and
/// still a link by the daemon; once a stage with the new key repairs the mapping, the same
/// link reads again and the next publish finds it mounted. csi-driver-smb still removes it.
#[tokio::test(flavor = "multi_thread")]
async fn azurefile_keeps_a_publish_link_it_cannot_read() {
    for (flavour, profiled) in [
        (SmbFlavour::AzureFile, false),
        (SmbFlavour::AzureFile, true),
        (SmbFlavour::CsiDriverSmb, false),
        (SmbFlavour::CsiDriverSmb, true),
    ] {
        let d = SimDaemon::start_as(profiled.then_some(driver(flavour))).await;
        let mut drv = SmbDriver::new(&d, flavour).await;
        let (root, user) = (r"\\acct.file.core.windows.net\pvc-share", r"AZURE\acct");
        d.sim.add_share(root, Some((user, "key1")));
        let (st1, st2) = (staged_by(&d, flavour, "a"), staged_by(&d, flavour, "b"));
        let t1 = publish_path(&d, flavour, "uid-1", "pvc-1");
        drv.stage("pvc-1", root, Some("pvc-1"), &st1, user, "key1")
            .await
            .unwrap();
        drv.publish(&st1, &t1).await.unwrap();
        d.sim.set_share_credential(root, Some((user, "key2")));
        d.sim.drop_smb_sessions(root);
        assert!(!drv.reads(&t1));

        let e = drv.publish(&st1, &t1).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal, "the driver's own failure");
        let kept = drv.exists(&t1).await.unwrap();
        assert_eq!(kept, flavour == SmbFlavour::AzureFile, "{flavour:?}: {e:?}");
        if flavour != SmbFlavour::AzureFile {
            continue;
        }
        drv.stage("pvc-2", root, Some("pvc-2"), &st2, user, "key2")
            .await
            .unwrap();
        assert!(
            drv.reads(&t1),
            "the kept link answers once the mapping is repaired"
        );
        drv.publish(&st1, &t1).await.expect("already mounted");
        drv.unpublish(&t1).await.unwrap();
        for (vol, st) in [("pvc-1", &st1), ("pvc-2", &st2)] {
            drv.unstage(vol, st).await.unwrap();
        }
    }
}

/// A node whose csi-proxy predates v1: the drivers fall back to filesystem v1beta1 and smb
/// v1beta1 (IsMountPoint, LinkPath, Rmdir in the pod context).
async fn v1beta_daemon() -> SimDaemon {
    v1beta_daemon_as(None).await
}

/// As [`v1beta_daemon`], under `profile` when given.
async fn v1beta_daemon_as(profile: Option<&str>) -> SimDaemon {
    SimDaemon::serving_as(profile, |g, v| {
        matches!((g, v), ("filesystem", "v1beta1") | ("smb", "v1beta1"))
    })
    .await
}

/// The key rotation through both drivers' v1beta fallback: the broken mapping is made again with
/// the new secret under the other volumes' links.
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_mapping_is_repaired_through_the_v1beta_fallback() {
    for flavour in [SmbFlavour::CsiDriverSmb, SmbFlavour::AzureFile] {
        for profile in [None, Some(driver(flavour))] {
            let d = v1beta_daemon_as(profile).await;
            let versions = SmbDriver::new(&d, flavour).await.versions();
            assert_eq!(versions, ("v1beta1", "v1beta1"));
            broken_mapping_repaired(&d, flavour).await;
        }
    }
}

async fn broken_mapping_repaired(d: &SimDaemon, flavour: SmbFlavour) {
    {
        let mut drv = SmbDriver::new(d, flavour).await;
        let (root, user, source) = match flavour {
            SmbFlavour::CsiDriverSmb | SmbFlavour::CsiDriverSmbV1_12 => {
                (r"\\fs01\vols", r"AZURE\svc", "//fs01/vols")
            }
            SmbFlavour::AzureFile => (
                r"\\acct.file.core.windows.net\pvc-share",
                r"AZURE\acct",
                r"\\acct.file.core.windows.net\pvc-share",
            ),
        };
        d.sim.add_share(root, Some((user, "key1")));
        let (st1, st2, st3) = (
            staged_by(d, flavour, "a"),
            staged_by(d, flavour, "b"),
            staged_by(d, flavour, "c"),
        );
        let t1 = publish_path(d, flavour, "uid-1", "pvc-1");
        let t2 = publish_path(d, flavour, "uid-2", "pvc-2");
        for (vol, st, t) in [("pvc-1", &st1, &t1), ("pvc-2", &st2, &t2)] {
            drv.stage(vol, source, Some(vol), st, user, "key1")
                .await
                .unwrap();
            drv.publish(st, t).await.unwrap();
            assert!(drv.reads(t));
        }

        d.sim.set_share_credential(root, Some((user, "key2")));
        assert!(drv.reads(&t1), "sessions made before the change still work");
        d.sim.drop_smb_sessions(root);
        assert!(!drv.reads(&t1) && !drv.reads(&t2), "{flavour:?}");

        // A third volume of the share is staged with the new key: the broken mapping is made
        // again with it, under the two other volumes' links.
        drv.stage("pvc-3", source, Some("pvc-3"), &st3, user, "key2")
            .await
            .unwrap_or_else(|e| panic!("{flavour:?}: {e:?}"));
        assert!(drv.reads(&st3));
        assert!(
            drv.reads(&t1) && drv.reads(&t2),
            "{flavour:?}: every volume of the share answers again"
        );

        // Again, with the first volume re-staged on its dead link (the key rotates once more):
        // the driver removes the link it cannot read and fails; kubelet's retry maps again.
        d.sim.set_share_credential(root, Some((user, "key3")));
        d.sim.drop_smb_sessions(root);
        assert!(!drv.reads(&st1));
        let first = drv.stage("pvc-1", source, Some("pvc-1"), &st1, user, "key3");
        assert!(
            first.await.is_err(),
            "{flavour:?}: the driver's own failure"
        );
        drv.stage("pvc-1", source, Some("pvc-1"), &st1, user, "key3")
            .await
            .unwrap_or_else(|e| panic!("{flavour:?}: {e:?}"));
        assert!(drv.reads(&t1) && drv.reads(&t2) && drv.reads(&st3));
        assert_eq!(d.sim.smb_roots().len(), 1);

        for t in [&t1, &t2] {
            drv.unpublish(t).await.unwrap();
        }
        for (vol, st) in [("pvc-1", &st1), ("pvc-2", &st2), ("pvc-3", &st3)] {
            drv.unstage(vol, st).await.unwrap();
            drv.unstage(vol, st).await.unwrap();
        }
        // azurefile never removes a mapping; csi-driver-smb removes it with its last volume
        // (on v1: its v1beta mounter only removes the link).
        let keeps = flavour == SmbFlavour::AzureFile || drv.versions().1 != "v1";
        let left = usize::from(keeps);
        assert_eq!(d.sim.smb_roots().len(), left, "{flavour:?}");
    }
}

/// A working mapping is never replaced under live links: a stage with a secret the server
/// refuses, while the mapping still answers, reuses it (as upstream) and breaks nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_working_mapping_is_never_replaced_under_live_links() {
    let d = SimDaemon::start().await;
    let mut drv = SmbDriver::new(&d, SmbFlavour::CsiDriverSmb).await;
    d.sim
        .add_share(r"\\fs01\vols", Some((r"AZURE\svc", "good")));
    let t1 = publish_path(&d, SmbFlavour::CsiDriverSmb, "uid-1", "pvc-1");
    drv.stage(
        "pvc-1",
        "//fs01/vols",
        Some("pvc-1"),
        &staging("a"),
        "svc",
        "good",
    )
    .await
    .unwrap();
    drv.publish(&staging("a"), &t1).await.unwrap();
    drv.stage(
        "pvc-2",
        "//fs01/vols",
        Some("pvc-2"),
        &staging("b"),
        "svc",
        "wrong",
    )
    .await
    .unwrap();
    assert_eq!(d.sim.calls().get("smb_remove_global_mapping"), None);
    assert!(drv.reads(&t1) && drv.reads(&staging("b")));
}

/// csi-driver-smb v1.9 to v1.20.3: an unstage that failed after the driver removed its count file
/// (here RemoveSmbGlobalMapping failed once) is not recovered by kubelet's retries: each one fails
/// in the driver's own removal of the missing count file, before any call reaches the daemon, so
/// the staging link and the mapping stay. A count file made again by hand (an empty file of that
/// name) lets the next retry through.
#[tokio::test(flavor = "multi_thread")]
async fn a_retried_unstage_fails_in_the_driver_once_its_count_file_is_gone() {
    for flavour in [SmbFlavour::CsiDriverSmb, SmbFlavour::CsiDriverSmbV1_12] {
        let d = SimDaemon::start().await;
        let mut drv = SmbDriver::new(&d, flavour).await;
        d.sim.add_share(r"\\fs01\vols", Some((r"AZURE\svc", "pw")));
        let st = staging("r");
        drv.stage("pvc-1", "//fs01/vols", Some("pvc-1"), &st, "svc", "pw")
            .await
            .unwrap();
        let counts = count_dir(r"\\fs01\vols");
        let [file] = d.sim.dir_entries(&counts).try_into().unwrap();
        d.sim
            .fail_next("smb_remove_global_mapping", OsError::new(0x8004_1001));
        let first = drv.unstage("pvc-1", &st).await.unwrap_err();
        assert!(
            first.message().contains("RemoveSmbGlobalMapping"),
            "{first:?}"
        );
        assert!(
            d.sim.dir_entries(&counts).is_empty(),
            "the driver removed its count first"
        );
        for _ in 0..3 {
            let e = drv.unstage("pvc-1", &st).await.unwrap_err();
            assert!(
                e.message().contains("cannot find the file"),
                "{flavour:?}: {e:?}"
            );
        }
        assert_eq!(
            d.sim.calls()["smb_remove_global_mapping"],
            1,
            "no retry reached the daemon"
        );
        assert_eq!(d.sim.smb_roots(), [r"\\fs01\vols"]);
        assert!(drv.reads(&st), "the staging link stays");

        d.sim.add_file(&format!(r"{counts}\{file}"));
        drv.unstage("pvc-1", &st).await.unwrap();
        assert!(d.sim.smb_roots().is_empty());
        assert!(!d.sim.entry_exists(&common::normalize_windows_path(&st)));
    }
}

/// csi-driver-smb before v1.13 names its count files by the remote path: two static volumes
/// of one share with no sub-directory share one file. The first unstage removes it and asks
/// for the mapping's removal, which the daemon refuses quietly while the second volume's link
/// leads through it (that volume keeps answering); the second volume's unstage then fails in
/// the driver on every retry. From v1.13 (count files by volume ID) both unstage, and the
/// mapping goes with the last.
#[tokio::test(flavor = "multi_thread")]
async fn count_files_by_remote_path_before_v1_13_and_by_volume_id_after() {
    for flavour in [SmbFlavour::CsiDriverSmbV1_12, SmbFlavour::CsiDriverSmb] {
        let d = SimDaemon::start().await;
        let mut drv = SmbDriver::new(&d, flavour).await;
        d.sim
            .add_share(r"\\fs01\static", Some((r"AZURE\svc", "pw")));
        let (st1, st2) = (staging("s1"), staging("s2"));
        for (vol, st) in [("pv-a", &st1), ("pv-b", &st2)] {
            drv.stage(vol, "//fs01/static", None, st, "svc", "pw")
                .await
                .unwrap();
        }
        let files = d.sim.dir_entries(&count_dir(r"\\fs01\static")).len();
        drv.unstage("pv-a", &st1).await.unwrap();
        assert_eq!(d.sim.smb_roots().len(), 1, "{flavour:?}: kept for pv-b");
        assert!(drv.reads(&st2), "{flavour:?}");
        let last = drv.unstage("pv-b", &st2).await;
        if flavour == SmbFlavour::CsiDriverSmbV1_12 {
            assert_eq!(files, 1, "one file for both volumes");
            let removals = d.sim.calls().get("smb_remove_global_mapping").copied();
            assert_eq!(removals, None, "kept, answered OK");
            for _ in 0..2 {
                let e = drv.unstage("pv-b", &st2).await.unwrap_err();
                assert!(e.message().contains("cannot find the file"), "{e:?}");
            }
            assert!(last.is_err() && drv.reads(&st2));
        } else {
            assert_eq!(files, 2, "one file per volume");
            last.unwrap();
            assert!(d.sim.smb_roots().is_empty());
        }
    }
}

/// A share whose name has a space (`\\fs01\Team Share`, valid on Windows), given as
/// csi-driver-smb's users write sources (`//fs01/Team Share`) with a sub-directory that has one
/// too, stages, publishes and unstages. Before, the daemon refused the name (INVALID_ARGUMENT), a
/// rule meant only for the Linux cifs option string.
#[tokio::test(flavor = "multi_thread")]
async fn a_share_name_with_spaces_stages() {
    let d = SimDaemon::start().await;
    share_with_spaces_life(&d).await;
}

/// The same through csi-driver-smb's v1beta fallback, which leaves the mapping at unstage.
#[tokio::test(flavor = "multi_thread")]
async fn a_share_name_with_spaces_stages_through_the_v1beta_fallback() {
    let d = v1beta_daemon().await;
    share_with_spaces_life(&d).await;
}

async fn share_with_spaces_life(d: &SimDaemon) {
    share_life(d, r"\\fs01\Team Share", "//fs01/Team Share", "pvc 1").await;
}

/// Share names Samba and NAS servers export with `[ ] + = ; ,` (Microsoft's own servers refuse
/// them, MS-FSCC 2.1.6), and names with what PowerShell, WQL or a WMI object path would interpret
/// (`$( )`, `'`, `` ` ``, `&`, `@`, `{ }`, `#`, `%`), stage, publish and unstage as the driver
/// gives them: `MSFT_SmbGlobalMapping.Create` gets the remote path verbatim, as a method parameter.
/// Before, the daemon refused the first six (INVALID_ARGUMENT).
#[tokio::test(flavor = "multi_thread")]
async fn share_names_samba_and_nas_export_stage() {
    let d = SimDaemon::start().await;
    let names = [
        "[team]",
        "a+b",
        "x=y",
        "a;b",
        "a,b",
        "[a+b=c;d,e]",
        "$(calc)",
        "a'b",
        "a`b",
        "a&b",
        "{x}@y",
        "#5%",
    ];
    for (i, name) in names.into_iter().enumerate() {
        share_life(
            &d,
            &format!(r"\\nas0{i}\{name}"),
            &format!("//nas0{i}/{name}"),
            "pvc",
        )
        .await;
    }
}

/// A volume's life on the share `root` (as the server exports it), given as `source` with the
/// sub-directory `sub`: the mapping is made with the remote path verbatim and removed at the
/// unstage (v1; the v1beta mounter leaves it).
async fn share_life(d: &SimDaemon, root: &str, source: &str, sub: &str) {
    let mut drv = SmbDriver::new(d, SmbFlavour::CsiDriverSmb).await;
    d.sim.add_share(root, Some((r"CORP\svc", "pw")));
    let st = staging("sp");
    let target = publish_path(d, SmbFlavour::CsiDriverSmb, "uid-1", "pvc 1");
    drv.stage("pvc-1", source, Some(sub), &st, r"CORP\svc", "pw")
        .await
        .unwrap_or_else(|e| panic!("{source}: {e:?}"));
    assert_eq!(d.sim.smb_roots(), [root.to_lowercase()]);
    drv.publish(&st, &target).await.unwrap();
    assert!(drv.reads(&target), "{source}");
    drv.unpublish(&target).await.unwrap();
    drv.unstage("pvc-1", &st).await.unwrap();
    assert!(!d.sim.entry_exists(&common::normalize_windows_path(&st)));
    let left = usize::from(drv.versions().1 != "v1");
    assert_eq!(d.sim.smb_roots().len(), left, "{source}");
}

/// With csi-driver-smb v1.20.3, while the link scan may have missed links (a directory under the
/// kubelet path it could not list), the driver's unstage succeeds: RemoveSmbGlobalMapping keeps the
/// mapping it cannot prove unused and answers OK (the driver removed its count file before the
/// call, so an error would fail this unstage on every retry) and the driver removes its staging
/// link. Once the scan is whole again, the next volume's unstage lets the mapping go.
#[tokio::test(flavor = "multi_thread")]
async fn an_unstage_while_the_link_scan_is_incomplete_succeeds_and_keeps_the_mapping() {
    let d = SimDaemon::start().await;
    let mut drv = SmbDriver::new(&d, SmbFlavour::CsiDriverSmb).await;
    d.sim.add_share(r"\\fs01\vols", Some((r"AZURE\svc", "pw")));
    let (st1, st2) = (staging("i1"), staging("i2"));
    drv.stage("pvc-1", "//fs01/vols", Some("pvc-1"), &st1, "svc", "pw")
        .await
        .unwrap();
    d.sim
        .set_link_scan_incomplete(Some(r"C:\var\lib\kubelet\pods could not be listed"));
    drv.unstage("pvc-1", &st1).await.unwrap();
    assert_eq!(
        d.sim.smb_roots(),
        [r"\\fs01\vols"],
        "kept: its users are not known"
    );
    assert!(!d.sim.entry_exists(&common::normalize_windows_path(&st1)));
    d.sim.set_link_scan_incomplete(None);
    drv.stage("pvc-2", "//fs01/vols", Some("pvc-2"), &st2, "svc", "pw")
        .await
        .unwrap();
    drv.unstage("pvc-2", &st2).await.unwrap();
    assert!(d.sim.smb_roots().is_empty());
}
