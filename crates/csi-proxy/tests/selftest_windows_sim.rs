//! `csi-proxy-ctl selftest` over the simulated Windows: the command's own step sequence
//! (`csi_proxy_ctl::selftest::run`) drives the daemon serving the simulator, with the VHDX
//! calls answered by the simulator too. It passes; told to misbehave at a step, it fails
//! naming that step and still detaches and deletes the VHDX; it refuses a disk it did not
//! create; on a Windows without a virtual disk service it says so. The optional steps, the
//! steps that make conditions the daemon's API cannot, and the ledger's check against the
//! steps are in `selftest_steps_windows_sim.rs`.
#![cfg(unix)]

mod common;
mod selftest_sim;

use common::SimDaemon;
use csi_proxy_ctl::selftest::{self, Options};
use csi_proxy_host::windows::os::{OsError, Win32Result, code};
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::vhd::{CALL_NOT_IMPLEMENTED, VirtualDisks};
use selftest_sim::*;
use std::sync::atomic::{AtomicU32, Ordering};

#[tokio::test(flavor = "multi_thread")]
async fn the_whole_flow_passes_and_leaves_nothing_behind() {
    whole_flow(false).await;
}

/// Under SAN policy OfflineAll every disk the VHDX becomes (attached, and attached again
/// after the resize) arrives offline and read-only: the flow brings it online before it
/// partitions or grows anything.
#[tokio::test(flavor = "multi_thread")]
async fn the_whole_flow_passes_under_san_policy_offline_all() {
    whole_flow(true).await;
}

async fn whole_flow(offline_all: bool) {
    let d = SimDaemon::start().await;
    d.sim.set_san_offline_all(offline_all);
    // The daemon installed as install.ps1 does: restart on failure, the flag set.
    d.sim.add_service(
        "csiproxy",
        "CSI Proxy",
        2,
        true,
        csi_proxy_host::windows::sim::services::ALL,
    );
    d.sim.set_failure_actions("csiproxy", true);
    d.sim.set_failure_flag("csiproxy", !offline_all);
    // The system disk reports an EBS volume's serial, as on an AWS Nitro node.
    d.sim.set_disk_serial(0, "vol0123456789abcdef0");
    // And a VMware NAA ID in its device identification page.
    d.sim.set_disk_naa(
        0,
        &[
            0x60, 0x00, 0xc2, 0x9a, 0x98, 0xd0, 0x5e, 0x38, 0x4a, 0x43, 0xf0, 0xef, 0x18, 0x9a,
            0xaf, 0x5a,
        ],
    );
    d.sim.mkdir(r"C:\selftest");
    let opts = Options {
        failure_flag: selftest::failure_flag(d.sim.as_ref(), "csiproxy"),
        ..options()
    };
    let o = run_with(&d, d.sim.as_ref(), &opts).await;
    for s in &o.steps {
        println!(
            "{:<45} {:<3} {:>6} ms  {}",
            s.name,
            s.ok,
            s.time.as_millis(),
            s.answer
        );
    }
    assert!(o.failed().is_none(), "{:?}", o.failed());
    let want = [
        "virtual disk service",
        "connect",
        "recovery flag",
        "CreateVirtualDisk",
        "AttachVirtualDisk",
        "GetVirtualDiskPhysicalPath",
        "CreateVirtualDisk refusals",
        "ListDiskIDs",
        "ListDiskLocations",
        "node disk IDs",
        "own disk",
        "SetDiskState online (attached)",
        "PartitionDisk",
        "ListVolumesOnDisk",
        "IsVolumeFormatted",
        "FormatVolume",
        "FormatVolume again",
        "IsVolumeFormatted",
        "Mkdir",
        "MountVolume",
        "MountVolume again",
        "GetVolumeIDFromTargetPath",
        "GetVolumeIDFromTargetPath (plain directory)",
        "UnmountVolume",
        "UnmountVolume again",
        "SetDiskState offline",
        "SetDiskState online",
        "SetDiskState online again",
        "PartitionDisk again",
        "GetVolumeStats",
        "DetachVirtualDisk",
        "ResizeVirtualDisk",
        "AttachVirtualDisk again",
        "GetVirtualDiskPhysicalPath again",
        "ListDiskIDs again",
        "SetDiskState online (attached again)",
        "GetDiskStats",
        "read-only disk: FSCTL_EXTEND_VOLUME after a grow",
        "MountVolume (attached again)",
        "ResizeVolume(0)",
        "ResizeVolume(0) again",
        "UnmountVolume (attached again)",
        "held volume: PartitionDisk",
        "held volume: MSFT_Volume.Format (forced)",
        "locked volume: FormatVolume",
        "locked volume: MSFT_Volume.Format",
        "held entry: Rmdir, Mkdir",
        "read-only disk: layout and grow controls",
        "hidden partition while online",
        "64 links: open through them",
        "rename of a held folder, and of one held below",
        "listing read while its entries are deleted",
        "DeleteVolumeMountPointW without its backslash",
        "SET_DISK_ATTRIBUTES with an output buffer",
        "a file link and a folder read as themselves",
        "SET_DRIVE_LAYOUT_EX with RewritePartition FALSE",
        r"ProgramData: what BUILTIN\Users may do",
        "disk copy attached beside it",
        "clean-up: Rmdir",
        "clean-up: DetachVirtualDisk",
        "clean-up: delete VHDX",
        "RemoveIScsiPersistentTargetW with a null initiator",
        "scratch service: StartServiceW while STOP_PENDING",
        "clean-up: DeleteService (scratch service)",
        "iSCSI: AddTargetPortal",
        "iSCSI: DiscoverTargetPortal",
        "iSCSI: ConnectTarget",
        "iSCSI: GetTargetDisks after login",
        "iSCSI: a second path to each LUN (multipath-enabled login)",
        "iSCSI: DisconnectTarget while its disk is held",
        "SMB: NewSmbGlobalMapping of a missing share",
        "SMB: a second user on a mapped server, by name and by address",
        "drives without media",
    ];
    assert_eq!(names(&o), want);
    // Without the flags the optional steps are listed, never run and never passed.
    for s in o.steps.iter().filter(|s| s.name.starts_with("iSCSI")) {
        assert!(!s.ran && !s.ok, "{s:?}");
        assert_eq!(s.answer, "not run: needs --iscsi-portal and --iscsi-target");
    }
    let smb = step(&o, "SMB: NewSmbGlobalMapping of a missing share");
    assert!(!smb.ran && !smb.ok, "{smb:?}");
    assert_eq!(smb.answer, "not run: needs --smb-server");
    let by_name = step(
        &o,
        "SMB: a second user on a mapped server, by name and by address",
    );
    assert!(!by_name.ran && !by_name.ok, "{by_name:?}");
    assert_eq!(
        by_name.answer,
        "not run: needs --smb-server naming a server this node already maps"
    );
    let drives = step(&o, "drives without media");
    assert!(!drives.ran && !drives.ok, "{drives:?}");
    assert!(
        drives.answer.contains("no optical or removable drive"),
        "{drives:?}"
    );
    let answer = |n: &str| &o.steps.iter().find(|s| s.name == n).unwrap().answer;
    assert!(answer("GetVirtualDiskPhysicalPath").ends_with(r"\\.\PhysicalDrive1"));
    assert!(answer("ListDiskLocations").contains("no SCSI address"));
    assert!(
        answer("node disk IDs").contains(
            "disk 0: serial \"vol0123456789abcdef0\" is EBS volume vol-0123456789abcdef0"
        ),
        "{}",
        answer("node disk IDs")
    );
    assert!(
        answer("node disk IDs")
            .contains("disk 0: page83 \"6000c29a98d05e384a43f0ef189aaf5a\" is a VMware NAA ID"),
        "{}",
        answer("node disk IDs")
    );
    // Each refusal is Windows' own answer, and none left a file (`nothing_left`).
    let refusals = answer("CreateVirtualDisk refusals");
    for (what, code) in [
        ("existing file", code::FILE_EXISTS),
        ("missing folder", code::PATH_NOT_FOUND),
        ("size not a multiple of 512", code::INVALID_PARAMETER),
    ] {
        let want = format!("{what}: {}", OsError::new(code));
        assert!(refusals.contains(&want), "{want} in {refusals}");
    }
    // The flag as configured, each way.
    let flag = answer("recovery flag");
    assert!(
        flag.starts_with(if offline_all { "NOT set" } else { "set:" }),
        "{flag}"
    );
    assert_eq!(
        selftest::failure_flag(d.sim.as_ref(), "no-such-service"),
        None
    );
    assert!(
        answer("ResizeVolume(0)").contains("->"),
        "{}",
        answer("ResizeVolume(0)")
    );
    // The conditions the daemon's API cannot make: each answer is the simulated Windows' own,
    // the one its ledger row models, and says which row it settles.
    for (step, row, what) in [
        (
            "held volume: PartitionDisk",
            57,
            "FSCTL_LOCK_VOLUME failed (Access is denied. (os error 5))",
        ),
        (
            "locked volume: FormatVolume",
            19,
            "it is locked by another process (Access is denied. (os error 5))",
        ),
        ("locked volume: MSFT_Volume.Format", 58, "ReturnValue 40001"),
        ("held entry: Rmdir, Mkdir", 82, "Mkdir once released: OK"),
        (
            "read-only disk: layout and grow controls",
            21,
            "GROW_PARTITION (partition 2, 0 bytes): The media is write protected. (os error 19)",
        ),
        ("hidden partition while online", 53, "no longer listed"),
        (
            "64 links: open through them",
            36,
            "through 64: The operation failed. (os error 1921)",
        ),
        (
            "DeleteVolumeMountPointW without its backslash",
            88,
            "The parameter is incorrect. (os error 87); the mount point stayed",
        ),
        (
            "SET_DISK_ATTRIBUTES with an output buffer",
            28,
            "(os error 234)",
        ),
        (
            "a file link and a folder read as themselves",
            92,
            "itself: 0 bytes; through the folder: Incorrect function. (os error 1)",
        ),
        (
            "SET_DRIVE_LAYOUT_EX with RewritePartition FALSE",
            34,
            "the entry was left out of the table",
        ),
        (
            r"ProgramData: what BUILTIN\Users may do",
            52,
            r"BUILTIN\Users may create files and folders in it (rights 0x1201bf)",
        ),
        (
            "disk copy attached beside it",
            71,
            "clearing DISK_ATTRIBUTE_OFFLINE: OK",
        ),
    ] {
        let a = answer(step);
        assert!(
            a.contains(what) && a.contains(&format!("settles ledger row {row}")),
            "{step}: {a}"
        );
    }
    // The provider's format ran four times: the flow's, and the three the selftest asked itself
    // (with its volume open elsewhere, which formats; locked and read-only, both refused).
    assert_eq!(d.sim.calls().get("format_ntfs").copied(), Some(4));
    nothing_left(&d.sim);
    // The system disk was never touched.
    assert_eq!(d.sim.partitions(0).len(), 3);
}

/// Each fault is queued on one simulated call; the selftest fails at the step that makes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_fault_at_a_step_fails_that_step_and_still_cleans_up() {
    let cases: &[(&str, u32, &str)] = &[
        (
            "create_virtual_disk",
            code::ACCESS_DENIED,
            "CreateVirtualDisk",
        ),
        (
            "attach_virtual_disk",
            code::ACCESS_DENIED,
            "AttachVirtualDisk",
        ),
        ("format_ntfs", code::NOT_READY, "FormatVolume"),
        ("set_volume_mount_point", code::ACCESS_DENIED, "MountVolume"),
        (
            "resize_virtual_disk",
            code::INVALID_PARAMETER,
            "ResizeVirtualDisk",
        ),
        (
            "delete_volume_mount_point",
            code::ACCESS_DENIED,
            "UnmountVolume",
        ),
    ];
    for (call, err, step) in cases {
        let d = SimDaemon::start().await;
        d.sim.fail_next(call, OsError::new(*err));
        let o = run_over(&d, d.sim.as_ref()).await;
        let failed = o
            .failed()
            .unwrap_or_else(|| panic!("{call}: no step failed"));
        assert_eq!(failed.name, *step, "fault in {call}: {:?}", failed);
        let last = names(&o);
        if *step != "CreateVirtualDisk" {
            assert!(
                last.contains(&"clean-up: DetachVirtualDisk")
                    || ["AttachVirtualDisk", "ResizeVirtualDisk"].contains(step),
                "{call}: {last:?}"
            );
            assert!(last.contains(&"clean-up: delete VHDX"), "{call}: {last:?}");
        }
        // The clean-up itself succeeded.
        let cleanup_failed: Vec<_> = o
            .steps
            .iter()
            .filter(|s| s.name.starts_with("clean-up") && !s.ok)
            .collect();
        assert!(cleanup_failed.is_empty(), "{call}: {cleanup_failed:?}");
        nothing_left(&d.sim);
    }
}

/// A virtual disk API that reports another disk as the VHDX's after its first `truthful`
/// answers.
struct Lying<'a> {
    sim: &'a SimWindows,
    path: &'static str,
    truthful: AtomicU32,
}

fn lying<'a>(sim: &'a SimWindows, path: &'static str, truthful: u32) -> Lying<'a> {
    Lying {
        sim,
        path,
        truthful: AtomicU32::new(truthful),
    }
}

impl VirtualDisks for Lying<'_> {
    fn open(&self, path: &str) -> Win32Result<u64> {
        self.sim.open(path)
    }
    fn create(&self, path: &str, size: u64) -> Win32Result<u64> {
        self.sim.create(path, size)
    }
    fn attach(&self, handle: u64) -> Win32Result<()> {
        self.sim.attach(handle)
    }
    fn physical_path(&self, handle: u64) -> Win32Result<String> {
        let truthful = self.truthful.load(Ordering::SeqCst);
        if truthful > 0 {
            self.truthful.store(truthful - 1, Ordering::SeqCst);
            return self.sim.physical_path(handle);
        }
        Ok(self.path.into())
    }
    fn resize(&self, handle: u64, size: u64) -> Win32Result<()> {
        self.sim.resize(handle, size)
    }
    fn detach(&self, handle: u64) -> Win32Result<()> {
        self.sim.detach(handle)
    }
    fn close_vhd(&self, handle: u64) {
        self.sim.close_vhd(handle)
    }
    fn delete_vhd_file(&self, path: &str) -> Win32Result<()> {
        self.sim.delete_vhd_file(path)
    }
    fn copy_vhd_file(&self, from: &str, to: &str) -> Win32Result<()> {
        self.sim.copy_vhd_file(from, to)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn it_refuses_a_disk_it_did_not_create() {
    let d = SimDaemon::start().await;
    let o = run_over(&d, &lying(&d.sim, r"\\.\PhysicalDrive0", 0)).await;
    let failed = o.failed().expect("refused");
    assert_eq!(failed.name, "own disk", "{failed:?}");
    assert!(
        failed.answer.contains("refusing disk 0"),
        "{}",
        failed.answer
    );
    // Nothing was written to either disk.
    assert_eq!(d.sim.partitions(0).len(), 3);
    assert!(d.sim.partitions(1).is_empty());
    assert!(!names(&o).contains(&"PartitionDisk"));
    nothing_left(&d.sim);

    // Another disk a driver owns, of the same size as the VHDX, is refused as well: it holds
    // a volume.
    let d = SimDaemon::start().await;
    let other = d.sim.add_disk(1024 * MIB, 3);
    let mut node = d.node().await;
    node.stage(&format!("SIM{other:04}"), &SimDaemon::k("staged"))
        .await;
    let o = run_over(&d, &lying(&d.sim, r"\\.\PhysicalDrive1", 0)).await;
    let failed = o.failed().expect("refused");
    assert_eq!(failed.name, "own disk", "{failed:?}");
    assert!(failed.answer.contains("holds volumes"), "{}", failed.answer);
}

/// A virtual disk API whose OpenVirtualDisk is not implemented (what Wine's answers).
#[tokio::test(flavor = "multi_thread")]
async fn without_a_virtual_disk_service_it_says_so_and_creates_nothing() {
    let d = SimDaemon::start().await;
    d.sim
        .fail_next("open_virtual_disk", OsError::new(CALL_NOT_IMPLEMENTED));
    let o = run_over(&d, d.sim.as_ref()).await;
    let failed = o.failed().expect("fails");
    assert_eq!(failed.name, "virtual disk service");
    assert!(
        failed
            .answer
            .contains("this Windows has no virtual disk service"),
        "{}",
        failed.answer
    );
    assert_eq!(names(&o), ["virtual disk service"]);
    assert_eq!(d.sim.vhd_files(), vec![]);
}

/// The VHDX's disk number changes under the selftest (another disk now answers for it): the
/// next step that would act on the disk refuses, and nothing is formatted.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_that_stops_being_the_vhdx_is_not_acted_on() {
    let d = SimDaemon::start().await;
    // Truthful for GetVirtualDiskPhysicalPath, SetDiskState's and PartitionDisk's checks, then
    // disk 0.
    let o = run_over(&d, &lying(&d.sim, r"\\.\PhysicalDrive0", 3)).await;
    let failed = o.failed().expect("refused");
    assert_eq!(failed.name, "FormatVolume", "{failed:?}");
    assert!(
        failed.answer.contains("refusing to act on disk 1"),
        "{}",
        failed.answer
    );
    assert_eq!(d.sim.calls().get("format_ntfs"), None);
    assert_eq!(d.sim.partitions(0).len(), 3);
    nothing_left(&d.sim);
}
