//! `csi-proxy-ctl selftest` over the simulated Windows, its optional and condition-making
//! steps: the iSCSI steps against a simulated target, the SMB step under each way Windows may
//! report a failed mapping (the steps that reach one LUN or server a second way are in
//! `selftest_paths_windows_sim.rs`), steps that cannot make their condition (no second process, no
//! links), the second process's own logic over the simulator, and every ledger row checked
//! against the steps the selftest records.
#![cfg(unix)]

mod common;
mod selftest_sim;

use common::SimDaemon;
use csi_proxy_ctl::selftest::hold::{Hold, Holding, OtherProcess};
use csi_proxy_ctl::selftest::{self, Machine, Options, hold};
use csi_proxy_host::windows::disk::volume_device;
use csi_proxy_host::windows::os::{OsError, Win32, code};
use selftest_sim::*;
use std::time::Duration;

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
            "iSCSI: a second path to each LUN (multipath-enabled login)",
            "iSCSI: DisconnectTarget while its disk is held",
            "clean-up: iSCSI DisconnectTarget",
            "clean-up: iSCSI RemoveTargetPortal",
        ]
    );
    // Every step ran but the SMB ones, which had no server.
    let not_run: Vec<&str> = o
        .steps
        .iter()
        .filter(|s| !s.ran)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        not_run,
        [
            "SMB: NewSmbGlobalMapping of a missing share",
            "SMB: a second user on a mapped server, by name and by address",
            "drives without media",
        ]
    );
    let disks = &o
        .steps
        .iter()
        .find(|s| s.name == "iSCSI: GetTargetDisks after login")
        .unwrap()
        .answer;
    assert!(disks.contains("ms after ConnectTarget returned"), "{disks}");
    assert!(disks.contains("ledger row 83"), "{disks}");
    // The second path: the LUN again as a disk of its own, one identity, offline.
    let second = &o
        .steps
        .iter()
        .find(|s| s.name.starts_with("iSCSI: a second path"))
        .unwrap()
        .answer;
    assert!(
        second.contains(&format!("reports disk {lun}'s page 83"))
            && second.contains(", offline (disk")
            && second.contains("settles ledger row 91")
            && second.ends_with("the second session logged out"),
        "{second}"
    );
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
        let step = step(&o, "SMB: NewSmbGlobalMapping of a missing share");
        assert!(step.ran && step.ok);
        assert!(step.answer.contains(want), "{encoding:?}: {}", step.answer);
        assert!(step.answer.contains("ledger row 38"), "{}", step.answer);
        assert_eq!(d.sim.smb_roots(), Vec::<String>::new());
    }
}

/// Every row of the simulated Windows' ledger is documented, names a step this selftest
/// records (run here with every optional flag given), or says why it stays inferred: a row
/// whose only step was renamed or removed fails here.
#[tokio::test(flavor = "multi_thread")]
async fn every_ledger_row_is_documented_or_names_a_step_that_exists() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    d.sim.add_empty_drive();
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
    let failed = failed_steps(&o);
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

/// A Windows that answers a condition-making step otherwise than the simulated Windows models
/// (here `ReadFile` through the link opened as itself failing): that step fails, naming the
/// ledger row and Windows' answer, and every later step still runs and passes.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_the_model_does_not_expect_fails_its_step_naming_the_row() {
    let d = SimDaemon::start().await;
    d.sim.mkdir(r"C:\selftest");
    d.sim
        .fail_next("read_handle", OsError::new(code::ACCESS_DENIED));
    let o = run_with(&d, d.sim.as_ref(), &options()).await;
    print(&o);
    let failed = failed_steps(&o);
    assert_eq!(failed, ["a file link and a folder read as themselves"]);
    let step = o.failed().unwrap();
    assert!(
        step.answer.contains("Access is denied. (os error 5)")
            && step.answer.contains("ledger row 92 models"),
        "{}",
        step.answer
    );
    let names = names(&o);
    let at = names.iter().position(|n| *n == step.name).unwrap();
    assert!(names[at + 1..].contains(&"disk copy attached beside it"));
    nothing_left(&d.sim);
}

/// A node with an empty optical drive (the virtual DVD drive of a VM template): the selftest
/// reads what it answers, changing nothing, and settles ledger row 18 whichever code it gives,
/// since the daemon tells an optical drive by its kind; the stage flow beside it is untouched.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_drive_is_read_and_settles_its_row() {
    for (answer, model) in [(code::NOT_READY, true), (1117, false)] {
        let d = SimDaemon::start().await;
        d.sim.mkdir(r"C:\selftest");
        let dvd = d.sim.add_empty_drive_answering(answer);
        let o = run_with(&d, d.sim.as_ref(), &options()).await;
        print(&o);
        assert!(o.failed().is_none(), "{answer}: {:?}", o.failed());
        let s = step(&o, "drives without media");
        assert!(s.ran && s.ok, "{s:?}");
        assert!(
            s.answer.contains(&dvd) && s.answer.contains("settles ledger row 18"),
            "{s:?}"
        );
        assert_eq!(!s.answer.contains("not the model's"), model, "{s:?}");
        // The drive keeps its letter; nothing of the selftest is left.
        assert!(d.sim.vhd_files().is_empty(), "the VHDX file is deleted");
        let mps: Vec<String> = d.sim.mount_points().into_iter().map(|m| m.0).collect();
        assert_eq!(mps, [r"C:\", r"D:\"]);
    }
}

/// The steps made in the scratch folder for ledger rows 37 and 86 and the extend on the
/// read-only disk (row 21) settle their rows over the simulated Windows; a node that refuses
/// renaming a folder with a handle open below it (kinder than the model) is reported as
/// settling row 37, not failed; one whose rename of a folder held without FILE_SHARE_DELETE
/// answers anything but ERROR_SHARING_VIOLATION fails naming row 37. Nothing is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn renames_listing_and_extend_steps_settle_their_rows() {
    const RENAME: &str = "rename of a held folder, and of one held below";
    for (faults, ok, want) in [
        (vec![], true, "settles ledger row 37: the folder moved"),
        (
            vec![code::SHARING_VIOLATION, code::ACCESS_DENIED],
            true,
            "settles ledger row 37: this node refuses",
        ),
        (
            vec![code::ACCESS_DENIED],
            false,
            "ledger row 37 models ERROR_SHARING_VIOLATION",
        ),
    ] {
        let d = SimDaemon::start().await;
        d.sim.mkdir(r"C:\selftest");
        for c in &faults {
            d.sim.fail_next("rename_entry", OsError::new(*c));
        }
        let o = run_with(&d, d.sim.as_ref(), &options()).await;
        print(&o);
        let s = step(&o, RENAME);
        assert_eq!(s.ok, ok, "{faults:?}: {s:?}");
        assert!(s.answer.contains(want), "{faults:?}: {}", s.answer);
        let failed = failed_steps(&o);
        assert_eq!(failed, if ok { vec![] } else { vec![RENAME] });
        for other in [
            "listing read while its entries are deleted",
            "read-only disk: FSCTL_EXTEND_VOLUME after a grow",
        ] {
            let s = step(&o, other);
            assert!(s.ok && s.answer.contains("settles ledger row"), "{s:?}");
        }
        assert!(
            step(&o, "read-only disk: FSCTL_EXTEND_VOLUME after a grow")
                .answer
                .contains("The media is write protected")
        );
        // The scratch folder gone: a handle left open below it would have kept it
        // delete-pending, still there.
        nothing_left(&d.sim);
    }
}
