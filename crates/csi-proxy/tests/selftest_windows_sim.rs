//! `csi-proxy-ctl selftest` over the simulated Windows: the command's own step sequence
//! (`csi_proxy_ctl::selftest::run`) drives the daemon serving the simulator, with the VHDX
//! calls answered by the simulator too. It passes; told to misbehave at a step, it fails
//! naming that step and still detaches and deletes the VHDX; it refuses a disk it did not
//! create; on a Windows without a virtual disk service it says so.
#![cfg(unix)]

mod common;

use common::{KUBELET, SimDaemon};
use csi_proxy_ctl::selftest::hold::{Hold, Holding, OtherProcess};
use csi_proxy_ctl::selftest::{self, Machine, Options, Outcome, hold};
use csi_proxy_host::windows::disk::volume_device;
use csi_proxy_host::windows::os::{Access, OsError, Win32, Win32Result, code};
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::sim::holders::{FILE_SHARE_READ, FILE_SHARE_WRITE};
use csi_proxy_host::windows::vhd::{CALL_NOT_IMPLEMENTED, VirtualDisks};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const VHDX: &str = r"C:\selftest\node.vhdx";

fn options() -> Options {
    Options {
        kubelet_path: KUBELET.into(),
        vhdx_path: VHDX.into(),
        size: 1024 * MIB,
        grown_size: 1536 * MIB,
        wait: Duration::from_secs(5),
        failure_flag: None,
        iscsi: None,
        smb_server: None,
    }
}

async fn run_over(d: &SimDaemon, vd: &dyn VirtualDisks) -> Outcome {
    d.sim.mkdir(r"C:\selftest");
    run_with(d, vd, &options()).await
}

/// The simulated Windows' model of another process (handles that are not the daemon's), as the
/// selftest's second process: what `csi-proxy-ctl selftest-hold` holds on a node.
struct SimOthers(Arc<SimWindows>);

enum SimHeld {
    /// A device handle of the other process.
    Device(Arc<SimWindows>, u64),
    /// A volume it locked.
    Lock(Arc<SimWindows>, String),
    /// An entry it holds.
    Entry(Arc<SimWindows>, u64),
}

impl OtherProcess for SimOthers {
    fn hold(&self, what: &Hold) -> Result<Box<dyn Holding>, String> {
        let sim = self.0.clone();
        let share = FILE_SHARE_READ | FILE_SHARE_WRITE;
        Ok(Box::new(match what {
            Hold::Open(v) => {
                let h = sim.open_in_other_process(&volume_device(v), Access::Read, share);
                SimHeld::Device(sim, h)
            }
            Hold::Disk(d) => {
                let h = sim.open_in_other_process(d, Access::Read, share);
                SimHeld::Device(sim, h)
            }
            Hold::Lock(v) => {
                sim.set_volume_locked(v, true);
                SimHeld::Lock(sim, v.clone())
            }
            Hold::Entry(p) => {
                let h = sim.hold_entry(p, Duration::from_secs(3600));
                SimHeld::Entry(sim, h)
            }
        }))
    }
}

impl Holding for SimHeld {
    fn release(self: Box<Self>) -> Result<String, String> {
        Ok(match *self {
            SimHeld::Device(sim, h) => {
                let works = sim.other_handle_works(h);
                sim.close_in_other_process(h);
                if works {
                    "released: its handle still read".into()
                } else {
                    "released: its handle no longer read: the volume was dismounted".into()
                }
            }
            SimHeld::Lock(sim, v) => {
                sim.set_volume_locked(&v, false);
                "released: its handle still read".into()
            }
            SimHeld::Entry(sim, h) => {
                Win32::close(sim.as_ref(), h);
                "released".into()
            }
        })
    }
}

/// The selftest over the simulated Windows: its own calls are the simulator's, its second
/// process the simulator's model of another process.
async fn run_with(d: &SimDaemon, vd: &dyn VirtualDisks, opts: &Options) -> Outcome {
    let others = SimOthers(d.sim.clone());
    let machine = Machine {
        vd,
        os: d.sim.as_ref(),
        others: &others,
    };
    selftest::run(&d.connector, machine, opts).await
}

fn names(o: &Outcome) -> Vec<&str> {
    o.steps.iter().map(|s| s.name.as_str()).collect()
}

/// Nothing of the selftest is left on the machine: no VHDX file, no disk beyond the system
/// disk, no scratch folder, no mount point but `C:`.
fn nothing_left(sim: &SimWindows) {
    assert_eq!(sim.vhd_files(), vec![], "the VHDX file is deleted");
    assert!(sim.partitions(1).is_empty(), "the VHDX's disk is gone");
    let mps: Vec<String> = sim.mount_points().into_iter().map(|m| m.0).collect();
    assert_eq!(mps, vec![r"C:\".to_string()]);
    let scratch = format!(r"{KUBELET}\csi-proxy-selftest-{}", std::process::id());
    assert!(!sim.entry_exists(&scratch), "{scratch} is removed");
}

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
        "disk copy attached beside it",
        "clean-up: Rmdir",
        "clean-up: DetachVirtualDisk",
        "clean-up: delete VHDX",
        "iSCSI: AddTargetPortal",
        "iSCSI: DiscoverTargetPortal",
        "iSCSI: ConnectTarget",
        "iSCSI: GetTargetDisks after login",
        "iSCSI: DisconnectTarget while its disk is held",
        "SMB: NewSmbGlobalMapping of a missing share",
    ];
    assert_eq!(names(&o), want);
    // Without the flags the optional steps are listed, never run and never passed.
    for s in o.steps.iter().filter(|s| s.name.starts_with("iSCSI")) {
        assert!(!s.ran && !s.ok, "{s:?}");
        assert_eq!(s.answer, "not run: needs --iscsi-portal and --iscsi-target");
    }
    let smb = o.steps.last().unwrap();
    assert!(!smb.ran && !smb.ok, "{smb:?}");
    assert_eq!(smb.answer, "not run: needs --smb-server");
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

const PORTAL: &str = "10.0.0.9";
const IQN: &str = "iqn.2026-01.test:selftest";

fn iscsi_options() -> Options {
    Options {
        iscsi: Some(selftest::IscsiTarget {
            portal: csi_proxy_client::iscsi::Portal {
                address: PORTAL.into(),
                port: 3260,
            },
            iqn: IQN.into(),
        }),
        ..options()
    }
}

fn print(o: &Outcome) {
    for s in &o.steps {
        println!(
            "{:<40} ran {:<5} ok {:<5} {:>6} ms  {}",
            s.name,
            s.ran,
            s.ok,
            s.time.as_millis(),
            s.answer
        );
    }
}

/// With a test target named, the selftest logs in, reports how long after the login returned
/// the LUN was listed (the arrival delay, ledger row 83), logs out and removes the portal it
/// added: no session, no portal, the LUN back with the array.
#[tokio::test(flavor = "multi_thread")]
async fn a_named_iscsi_target_is_logged_in_timed_and_logged_out() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    let lun = d.sim.add_disk(1024 * MIB, 0);
    d.sim.add_iscsi_target(PORTAL, 3260, IQN, &[lun], None);
    let o = run_with(&d, d.sim.as_ref(), &iscsi_options()).await;
    print(&o);
    assert!(o.failed().is_none(), "{:?}", o.failed());
    let iscsi: Vec<&str> = names(&o)
        .into_iter()
        .filter(|n| n.contains("iSCSI"))
        .collect();
    assert_eq!(
        iscsi,
        [
            "iSCSI: AddTargetPortal",
            "iSCSI: DiscoverTargetPortal",
            "iSCSI: ConnectTarget",
            "iSCSI: GetTargetDisks after login",
            "iSCSI: DisconnectTarget while its disk is held",
            "clean-up: iSCSI DisconnectTarget",
            "clean-up: iSCSI RemoveTargetPortal",
        ]
    );
    // Every step ran but the SMB one, which had no server.
    let not_run: Vec<&str> = o
        .steps
        .iter()
        .filter(|s| !s.ran)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(not_run, ["SMB: NewSmbGlobalMapping of a missing share"]);
    let disks = &o
        .steps
        .iter()
        .find(|s| s.name == "iSCSI: GetTargetDisks after login")
        .unwrap()
        .answer;
    assert!(disks.contains("ms after ConnectTarget returned"), "{disks}");
    assert!(disks.contains("ledger row 83"), "{disks}");
    assert_eq!(d.sim.iscsi_sessions(), 0, "the selftest's session is gone");
    let mut c = csi_proxy_client::iscsi::IscsiClient::connect(&d.connector)
        .await
        .unwrap();
    assert_eq!(c.list_target_portals().await.unwrap(), vec![]);
    nothing_left(&d.sim);
}

/// A target this node already has a session to is someone else's: the selftest neither logs
/// in again nor logs that session out.
#[tokio::test(flavor = "multi_thread")]
async fn a_target_already_in_use_is_left_alone() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    let lun = d.sim.add_disk(1024 * MIB, 0);
    d.sim.add_iscsi_target(PORTAL, 3260, IQN, &[lun], None);
    let opts = iscsi_options();
    let portal = opts.iscsi.as_ref().unwrap().portal.clone();
    let mut c = csi_proxy_client::iscsi::IscsiClient::connect(&d.connector)
        .await
        .unwrap();
    c.add_target_portal(&portal).await.unwrap();
    c.connect_target(&portal, IQN).await.unwrap();
    let o = run_with(&d, d.sim.as_ref(), &opts).await;
    print(&o);
    // Only the iSCSI steps are looked at: the VHDX's flow is the other tests'.
    let failed = o
        .steps
        .iter()
        .find(|s| s.name.contains("iSCSI") && !s.ok)
        .expect("refused");
    assert_eq!(failed.name, "iSCSI: AddTargetPortal");
    assert!(failed.ran);
    assert!(
        failed.answer.contains("already has a session"),
        "{}",
        failed.answer
    );
    assert!(!names(&o).iter().any(|n| n.contains("DisconnectTarget")));
    assert_eq!(d.sim.iscsi_sessions(), 1, "the other session is kept");
    assert_eq!(c.list_target_portals().await.unwrap(), vec![portal]);
}

/// With an SMB server named, the selftest asks for a share of its own name, which does not
/// exist, and reports how the failure reached the daemon, for each encoding Windows may use
/// (ledger row 38); a server the node already maps is refused, its mapping untouched.
#[tokio::test(flavor = "multi_thread")]
async fn a_named_smb_server_shows_how_a_failed_mapping_is_reported() {
    use csi_proxy_host::windows::sim::SmbFailureEncoding as E;
    for (encoding, want) in [
        (E::HResult, "HRESULT_FROM_WIN32(67)"),
        (E::ReturnValue, "the bare code 67"),
        (E::ExtendedError, "the bare code 67"),
    ] {
        let d = SimDaemon::start().await;
        d.sim.mkdir(r"C:\selftest");
        d.sim.add_share(r"\\srv\data", None);
        d.sim.set_smb_failure_encoding(encoding);
        let opts = Options {
            smb_server: Some(selftest::smb_server(d.sim.as_ref(), "srv")),
            ..options()
        };
        let o = run_with(&d, d.sim.as_ref(), &opts).await;
        print(&o);
        assert!(o.failed().is_none(), "{:?}", o.failed());
        let step = o.steps.last().unwrap();
        assert_eq!(step.name, "SMB: NewSmbGlobalMapping of a missing share");
        assert!(step.ran && step.ok);
        assert!(step.answer.contains(want), "{encoding:?}: {}", step.answer);
        assert!(step.answer.contains("ledger row 38"), "{}", step.answer);
        assert_eq!(d.sim.smb_roots(), Vec::<String>::new());
    }
}

/// A server the node already maps (a driver's mapping, here made with credentials) is refused
/// before any call: its mapping is untouched.
#[tokio::test(flavor = "multi_thread")]
async fn an_smb_server_the_node_maps_is_left_alone() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    d.sim.add_share(r"\\srv\data", Some(("user", "pw")));
    let mut c = csi_proxy_client::smb::SmbClient::connect(&d.connector)
        .await
        .unwrap();
    c.new_mapping(r"\\srv\data", "user", "pw").await.unwrap();
    let opts = Options {
        smb_server: Some(selftest::smb_server(d.sim.as_ref(), r"\\SRV")),
        ..options()
    };
    let calls = d.sim.calls().get("smb_create_global_mapping").copied();
    let o = run_with(&d, d.sim.as_ref(), &opts).await;
    print(&o);
    let failed = o.failed().expect("refused");
    assert_eq!(failed.name, "SMB: NewSmbGlobalMapping of a missing share");
    assert!(
        failed.answer.contains("refusing server \"SRV\""),
        "{}",
        failed.answer
    );
    assert_eq!(d.sim.smb_roots(), vec![r"\\srv\data".to_string()]);
    assert_eq!(
        d.sim.calls().get("smb_create_global_mapping").copied(),
        calls
    );
}

/// Every row of the simulated Windows' ledger is documented, names a step this selftest
/// records (run here with every optional flag given), or says why it stays inferred: a row
/// whose only step was renamed or removed fails here.
#[tokio::test(flavor = "multi_thread")]
async fn every_ledger_row_is_documented_or_names_a_step_that_exists() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    let lun = d.sim.add_disk(1024 * MIB, 0);
    d.sim.add_iscsi_target(PORTAL, 3260, IQN, &[lun], None);
    d.sim.add_service(
        "csiproxy",
        "CSI Proxy",
        2,
        true,
        csi_proxy_host::windows::sim::services::ALL,
    );
    let opts = Options {
        failure_flag: selftest::failure_flag(d.sim.as_ref(), "csiproxy"),
        smb_server: Some(selftest::smb_server(d.sim.as_ref(), "srv")),
        ..iscsi_options()
    };
    let o = run_with(&d, d.sim.as_ref(), &opts).await;
    assert!(o.failed().is_none(), "{:?}", o.failed());
    let steps: Vec<&str> = names(&o);
    let ledger = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../host/src/windows/sim/LEDGER.md"
    ))
    .unwrap();
    let mut rows = 0;
    let mut bad = Vec::new();
    let mut last_columns = std::collections::HashMap::new();
    for line in ledger.lines() {
        let Some(rest) = line.strip_prefix("| ") else {
            continue;
        };
        let Some((n, _)) = rest.split_once(" |") else {
            continue;
        };
        if n.parse::<u32>().is_err() {
            continue;
        }
        rows += 1;
        let last = line.trim_end_matches(" |").rsplit(" | ").next().unwrap();
        last_columns.insert(n.to_string(), last);
        let named: Vec<&str> = last
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| steps.contains(t))
            .collect();
        let settled =
            !last.contains("inferred") || !named.is_empty() || last.contains("stays inferred: ");
        if !settled || last.contains("no step yet") {
            bad.push(format!("row {n}: {last}"));
        }
    }
    assert!(rows > 70, "only {rows} ledger rows read");
    // Every step whose answer says it settles a row is named by that row: a row cannot lose
    // the step that settles it, nor a step claim a row that does not cite it.
    let mut claims = 0;
    for step in &o.steps {
        for (_, rest) in step
            .answer
            .match_indices("settles ledger row ")
            .map(|(i, m)| step.answer.split_at(i + m.len()))
        {
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            claims += 1;
            match last_columns.get(n.as_str()) {
                Some(last) if last.contains(&format!("`{}`", step.name)) => {}
                Some(last) => bad.push(format!(
                    "row {n} does not name `{}`, which says it settles it: {last}",
                    step.name
                )),
                None => bad.push(format!(
                    "`{}` says it settles row {n}, which the ledger does not have",
                    step.name
                )),
            }
        }
    }
    assert!(
        claims >= 12,
        "only {claims} steps say which row they settle"
    );
    assert!(
        bad.is_empty(),
        "rows neither documented, settled by a step nor saying why:\n{}",
        bad.join("\n")
    );
}

/// A second process that cannot be started, and links this Windows refuses to make: those
/// steps fail naming why, every other step still runs, and nothing is left behind (the
/// folders the link step made are removed again).
#[tokio::test(flavor = "multi_thread")]
async fn steps_that_cannot_make_their_condition_fail_and_leave_nothing() {
    struct NoSecondProcess;
    impl OtherProcess for NoSecondProcess {
        fn hold(&self, _: &Hold) -> Result<Box<dyn Holding>, String> {
            Err("starting csi-proxy-ctl selftest-hold: Access is denied.".into())
        }
    }
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    // ERROR_PRIVILEGE_NOT_HELD: no SeCreateSymbolicLinkPrivilege.
    d.sim.fail_next("create_symbolic_link", OsError::new(1314));
    let machine = Machine {
        vd: d.sim.as_ref(),
        os: d.sim.as_ref(),
        others: &NoSecondProcess,
    };
    let o = selftest::run(&d.connector, machine, &options()).await;
    print(&o);
    let failed: Vec<&str> = o
        .steps
        .iter()
        .filter(|s| s.ran && !s.ok)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        failed,
        [
            "held volume: PartitionDisk",
            "held volume: MSFT_Volume.Format (forced)",
            "locked volume: FormatVolume",
            "held entry: Rmdir, Mkdir",
            "64 links: open through them",
        ]
    );
    for s in o.steps.iter().filter(|s| s.ran && !s.ok) {
        let why = if s.name.starts_with("64 links") {
            "CreateSymbolicLinkW"
        } else {
            "the second process: starting csi-proxy-ctl selftest-hold"
        };
        assert!(s.answer.contains(why), "{s:?}");
    }
    // The steps that need no second process ran and settled their rows.
    for step in [
        "read-only disk: layout and grow controls",
        "hidden partition while online",
    ] {
        let s = o.steps.iter().find(|s| s.name == step).unwrap();
        assert!(s.ran && s.ok, "{s:?}");
    }
    nothing_left(&d.sim);
}

/// The second process's own logic (`csi-proxy-ctl selftest-hold`, `hold::serve`) over the
/// simulated Windows: it locks the volume it is told, says `ready`, keeps the lock until its
/// input ends, then says what a read through its handle answered and lets go; a volume it
/// cannot lock (the system volume) is refused with Windows' answer, and nothing is held.
#[tokio::test(flavor = "multi_thread")]
async fn the_holder_holds_until_its_input_ends() {
    use csi_proxy_host::windows::os;
    use std::io::BufRead;
    let d = SimDaemon::start().await;
    let n = d.sim.add_disk(1024 * MIB, 3);
    let mut node = d.node().await;
    node.stage(&format!("SIM{n:04}"), &SimDaemon::k("staged"))
        .await;
    let system = Win32::volume_name_for_mount_point(d.sim.as_ref(), r"C:\").unwrap();
    let v = Win32::volumes(d.sim.as_ref())
        .unwrap()
        .into_iter()
        .find(|v| !v.eq_ignore_ascii_case(&system))
        .expect("the staged volume");
    let serve = |what: Hold| {
        let (input, keep) = std::io::pipe().unwrap();
        let (mut said, out) = std::io::pipe().unwrap();
        let sim = d.sim.clone();
        let held = std::thread::spawn(move || {
            let mut out = out;
            hold::serve(
                sim.as_ref(),
                &what,
                input,
                &mut out,
                Duration::from_secs(60),
            )
        });
        let mut line = move || {
            let mut l = String::new();
            // One byte at a time: a line is all `serve` has said so far.
            std::io::BufReader::with_capacity(1, &mut said)
                .read_line(&mut l)
                .unwrap();
            l.trim_end().to_string()
        };
        let first = line();
        (first, keep, held, line)
    };
    let (first, keep, held, mut line) = serve(Hold::Lock(v.clone()));
    assert_eq!(first, "ready");
    let refused = os::open(d.sim.as_ref(), &volume_device(&v), false).unwrap_err();
    assert_eq!(
        refused.code,
        code::ACCESS_DENIED,
        "a locked volume refuses data access"
    );
    drop(keep);
    assert!(line().starts_with("released: its handle"));
    assert!(held.join().unwrap(), "it held");
    os::open(d.sim.as_ref(), &volume_device(&v), false).expect("the lock is gone");

    // FSCTL_LOCK_VOLUME of the system volume fails: said, and nothing held.
    let (first, _keep, held, _) = serve(Hold::Lock(system));
    assert_eq!(
        first,
        format!("failed: {}", OsError::new(code::ACCESS_DENIED))
    );
    assert!(!held.join().unwrap());
}
