//! The Windows iSCSI host over the simulated initiator.

use super::*;
use crate::windows::iscsi::WindowsIscsiHost;
use csi_proxy_core::Kind;
use csi_proxy_core::iscsi::{AuthType, Chap, IscsiHost, TargetPortal};
use std::sync::Arc;

const IQN: &str = "iqn.2026-01.com.example:array.t1";

fn host() -> (Arc<SimWindows>, WindowsIscsiHost) {
    let sim = Arc::new(SimWindows::new());
    (sim.clone(), WindowsIscsiHost::with_os(sim))
}

fn portal() -> TargetPortal {
    TargetPortal {
        address: "10.0.0.5".into(),
        port: 3260,
    }
}

fn no_chap() -> Chap {
    Chap {
        auth_type: AuthType::None,
        username: String::new(),
        secret: "".into(),
    }
}

#[test]
fn portals_are_listed_once_and_added_idempotently() {
    let (sim, h) = host();
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[4], None);
    h.add_target_portal(&portal()).unwrap();
    h.add_target_portal(&portal()).unwrap();
    // Registered on two initiator ports, listed once.
    assert_eq!(h.list_target_portals().unwrap(), [portal()]);
    let e = h
        .add_target_portal(&TargetPortal {
            address: "10.0.0.9".into(),
            port: 3260,
        })
        .unwrap_err();
    assert_ne!(e.kind(), Kind::Internal, "{}", e.message());
    h.remove_target_portal(&portal()).unwrap();
    assert_eq!(
        h.remove_target_portal(&portal()).unwrap_err().kind(),
        Kind::NotFound
    );
}

#[test]
fn discovery_forces_one_update_per_request() {
    let (sim, h) = host();
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[4], None);
    h.add_target_portal(&portal()).unwrap();
    let found = h.discover_target_portal(&portal()).unwrap();
    assert_eq!(found, [IQN]);
    // The sizing call forced a discovery on every portal; the fetch that followed did not.
    assert_eq!(sim.forced_discoveries(), 1);
}

#[test]
fn login_disks_and_disconnect_remove_the_persistent_login_too() {
    let (sim, h) = host();
    sim.add_iscsi_target(
        "10.0.0.5",
        3260,
        IQN,
        &[4, 5],
        Some(("user", "s3cret-s3cret")),
    );
    h.add_target_portal(&portal()).unwrap();
    let chap = Chap {
        auth_type: AuthType::OneWayChap,
        username: "user".into(),
        secret: "s3cret-s3cret".into(),
    };
    let e = h.connect_target(&portal(), IQN, &no_chap()).unwrap_err();
    assert!(!e.message().contains("s3cret"), "{}", e.message());
    h.connect_target(&portal(), IQN, &chap).unwrap();
    h.connect_target(&portal(), IQN, &chap).unwrap();
    assert_eq!(sim.iscsi_sessions(), 1);
    assert_eq!(h.get_target_disks(&portal(), IQN).unwrap(), [4, 5]);
    // An operator (or upstream) left a persistent login of the same target.
    sim.add_persistent_login(IQN, "10.0.0.5", 3260);
    h.disconnect_target(&portal(), IQN).unwrap();
    assert_eq!(sim.iscsi_sessions(), 0);
    assert_eq!(sim.persistent_logins(), 0, "it would log in again at boot");
    h.disconnect_target(&portal(), IQN).unwrap();
}

#[test]
fn a_missing_initiator_is_a_precondition_not_a_crash() {
    let (sim, h) = host();
    sim.remove_iscsi_initiator();
    let e = h.list_target_portals().unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    assert!(e.message().contains("iscsidsc.dll"), "{}", e.message());
}

#[test]
fn each_persistent_login_is_removed_with_its_own_initiator_and_port() {
    let (sim, h) = host();
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[4], None);
    h.add_target_portal(&portal()).unwrap();
    h.connect_target(&portal(), IQN, &no_chap()).unwrap();
    // Kept by the software initiator on both its ports; and one through another portal.
    sim.add_persistent_login(IQN, "10.0.0.5", 3260);
    sim.add_persistent_login(IQN, "10.0.0.6", 3260);
    assert_eq!(sim.persistent_logins(), 4);
    h.disconnect_target(&portal(), IQN).unwrap();
    // Both logins through this portal are gone; the other portal's stay.
    assert_eq!(sim.persistent_logins(), 2);
}

/// A null initiator is refused before anything is looked up (ledger row 26), every persistent
/// login staying; an empty name is a name, not a null pointer, and matches no login.
#[test]
fn a_null_initiator_is_refused_and_removes_nothing() {
    use crate::windows::os::{PersistentLogin, Win32, code};
    use csi_proxy_formats::windows_buffers::iscsi::{ISCSI_ALL_INITIATOR_PORTS, isdsc};
    let (sim, _) = host();
    sim.add_persistent_login(IQN, "10.0.0.5", 3260);
    let before = sim.persistent_logins();
    let e = sim
        .iscsi_remove_persistent_target_without_initiator(IQN)
        .unwrap_err();
    assert_eq!(e.code, code::RPC_X_NULL_REF_POINTER);
    let empty = PersistentLogin {
        iqn: IQN.into(),
        initiator: String::new(),
        initiator_port: ISCSI_ALL_INITIATOR_PORTS,
        portal: ("10.0.0.5".into(), 3260),
    };
    let e = sim.iscsi_remove_persistent_target(&empty).unwrap_err();
    assert_eq!(e.code, isdsc::TARGET_NOT_FOUND);
    assert_eq!(sim.persistent_logins(), before);
}

fn other_portal() -> TargetPortal {
    TargetPortal {
        address: "10.0.0.6".into(),
        port: 3260,
    }
}

/// One target reachable through two portals, both added, logged in to through the first.
fn logged_in_through_one_of_two_portals() -> (Arc<SimWindows>, WindowsIscsiHost) {
    let (sim, h) = host();
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[4], None);
    sim.add_iscsi_target("10.0.0.6", 3260, IQN, &[4], None);
    h.add_target_portal(&portal()).unwrap();
    h.add_target_portal(&other_portal()).unwrap();
    h.connect_target(&portal(), IQN, &no_chap()).unwrap();
    (sim, h)
}

#[test]
fn a_session_through_another_portal_is_neither_success_nor_touched() {
    let (sim, h) = logged_in_through_one_of_two_portals();
    // The initiator refuses a second session (TARGET_ALREADY_LOGGED_IN): not a login through
    // the other portal.
    let e = h
        .connect_target(&other_portal(), IQN, &no_chap())
        .unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(e.message().contains("10.0.0.5:3260"), "{}", e.message());
    assert!(h.get_target_disks(&other_portal(), IQN).unwrap().is_empty());
    h.disconnect_target(&other_portal(), IQN).unwrap();
    assert_eq!(sim.iscsi_sessions(), 1, "the other portal's session stays");
}

/// Whatever a session being re-established lists as its connection (nothing, or a connection
/// with no address or port: no page says which, ledger row 31), its portal is not guessed.
/// Mutation: a blank connection taken as a portal makes DisconnectTarget through the other
/// portal answer OK with the session's portal unknown.
#[test]
fn a_reconnecting_session_is_not_matched_by_its_name_alone() {
    for listed in [
        None,
        Some(("", 0)),
        Some(("0.0.0.0", 0)),
        Some(("[::]", 3260)),
    ] {
        let (sim, h) = logged_in_through_one_of_two_portals();
        sim.drop_iscsi_connections_listing(IQN, listed);
        // Through which portal it was made cannot be told now: no answer is given for either.
        let e = h.disconnect_target(&other_portal(), IQN).unwrap_err();
        assert_eq!(e.kind(), Kind::Unavailable, "{listed:?}: {}", e.message());
        assert_eq!(sim.iscsi_sessions(), 1, "{listed:?}: not logged out");
        let e = h.get_target_disks(&other_portal(), IQN).unwrap_err();
        assert_eq!(e.kind(), Kind::Unavailable, "{listed:?}: {}", e.message());
        let e = h.connect_target(&portal(), IQN, &no_chap()).unwrap_err();
        assert_eq!(e.kind(), Kind::Unavailable, "{listed:?}: {}", e.message());
    }
}

/// The LUNs' disks arrive asynchronously after the login (ledger row 83), and drivers ask for them
/// right after ConnectTarget: GetTargetDisks waits for them.
#[test]
fn the_disks_of_a_target_just_logged_in_are_waited_for() {
    let (sim, h) = host();
    sim.set_arrival_delay(std::time::Duration::from_secs(2));
    let disk = sim.add_disk(1 << 30, 4);
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[disk], None);
    h.add_target_portal(&portal()).unwrap();
    assert!(h.get_target_disks(&portal(), IQN).unwrap().is_empty());
    h.connect_target(&portal(), IQN, &no_chap()).unwrap();
    assert_eq!(h.get_target_disks(&portal(), IQN).unwrap(), [disk]);
}

/// A target's LUN disks are not on the machine before a login (ledger row 83): no enumeration lists
/// them and their device does not open; they arrive after the login and leave with the logout.
#[test]
fn a_targets_disks_exist_only_while_a_session_holds_them() {
    use crate::windows::os::{Access, Win32};
    let (sim, h) = host();
    sim.set_arrival_delay(std::time::Duration::from_secs(2));
    let disk = sim.add_disk(1 << 30, 4);
    let listed = |sim: &SimWindows| {
        sim.disk_interfaces()
            .unwrap()
            .contains(&devices::interface_path(disk))
    };
    let opens = |sim: &SimWindows| {
        sim.open_raw(&format!(r"\\.\PhysicalDrive{disk}"), Access::Read)
            .map(|handle| sim.close(handle))
            .is_ok()
    };
    assert!(
        listed(&sim) && opens(&sim),
        "an ordinary disk before it is a LUN"
    );
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[disk], None);
    assert!(
        !listed(&sim) && !opens(&sim),
        "the array's LUN before any login"
    );
    h.add_target_portal(&portal()).unwrap();
    h.connect_target(&portal(), IQN, &no_chap()).unwrap();
    assert!(
        !listed(&sim) && !opens(&sim),
        "the login returns before Plug and Play"
    );
    assert_eq!(h.get_target_disks(&portal(), IQN).unwrap(), [disk]);
    assert!(
        listed(&sim) && opens(&sim),
        "arrived with the session's devices"
    );
    h.disconnect_target(&portal(), IQN).unwrap();
    assert!(!listed(&sim) && !opens(&sim), "gone with the logout");
    // A new login brings the same LUN, and what was on it, back.
    h.connect_target(&portal(), IQN, &no_chap()).unwrap();
    assert_eq!(h.get_target_disks(&portal(), IQN).unwrap(), [disk]);
    assert!(listed(&sim) && opens(&sim));
}

/// A disk that arrives while a target's LUN is parked off the machine takes a number of its
/// own: the LUN's number stays the LUN's, so its arrival at the login replaces nothing.
#[test]
fn a_disk_arriving_while_a_lun_is_parked_never_takes_its_number() {
    let (sim, h) = host();
    let lun = sim.add_disk(1 << 30, 4);
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[lun], None);
    let other = sim.add_disk(2 << 30, 0);
    assert_ne!(other, lun, "a new disk took the parked LUN's number");
    h.add_target_portal(&portal()).unwrap();
    h.connect_target(&portal(), IQN, &no_chap()).unwrap();
    assert_eq!(h.get_target_disks(&portal(), IQN).unwrap(), [lun]);
    let listed = sim.disk_interfaces().unwrap();
    for n in [lun, other] {
        assert!(
            listed.contains(&devices::interface_path(n)),
            "disk {n} is on the machine after the login"
        );
    }
}

/// A multipath-enabled second login to a target with a session (LoginFlags
/// ISCSI_LOGIN_FLAG_MULTIPATH_ENABLED) is a second session, which without MPIO surfaces each
/// LUN again: a disk of its own reporting the LUN's identity, offline while the first is online
/// (ledger row 91). It leaves with its logout; a second login without the flag is still
/// refused (row 31).
#[test]
fn a_multipath_login_surfaces_each_lun_again_as_an_offline_second_path() {
    use crate::windows::disk::WindowsDiskHost;
    use crate::windows::os::Win32;
    use csi_proxy_core::disk::DiskHost;
    use csi_proxy_formats::windows_buffers::iscsi::{
        self as data, LOGIN_FLAG_MULTIPATH_ENABLED, isdsc,
    };
    let (sim, h) = host();
    let lun = sim.add_disk(1 << 30, 4);
    sim.add_iscsi_target("10.0.0.5", 3260, IQN, &[lun], None);
    h.add_target_portal(&portal()).unwrap();
    h.connect_target(&portal(), IQN, &no_chap()).unwrap();
    assert_eq!(h.get_target_disks(&portal(), IQN).unwrap(), [lun]);
    let auth = data::login_auth(&no_chap()).unwrap();
    let again = sim
        .iscsi_login(IQN, "10.0.0.5", 3260, &auth, 0)
        .unwrap_err();
    assert_eq!(again.code, isdsc::TARGET_ALREADY_LOGGED_IN);
    sim.iscsi_login(IQN, "10.0.0.5", 3260, &auth, LOGIN_FLAG_MULTIPATH_ENABLED)
        .unwrap();
    let sessions = Win32::iscsi_sessions(sim.as_ref(), 1 << 16).unwrap();
    assert_eq!(sessions.len(), 2);
    let second = sessions[1].id;
    // Plug and Play surfaces the second path after the login returns, as the first.
    assert_eq!(sim.iscsi_session_devices(second, 8).unwrap(), []);
    Win32::sleep(sim.as_ref(), std::time::Duration::from_secs(1));
    let paths = sim.iscsi_session_devices(second, 8).unwrap();
    assert_eq!(paths.len(), 1);
    let path = paths[0].1;
    assert_ne!(path, lun);
    let ids = WindowsDiskHost::with_os(sim.clone())
        .list_disk_ids()
        .unwrap();
    assert_eq!(ids.get(&path), ids.get(&lun), "one identity through both");
    assert_eq!(sim.disk_attributes(path).map(|a| a.0), Some(true));
    assert_eq!(sim.disk_attributes(lun).map(|a| a.0), Some(false));
    sim.iscsi_logout(second).unwrap();
    assert_eq!(
        sim.disk_attributes(path),
        None,
        "the path left with its session"
    );
    assert_eq!(h.get_target_disks(&portal(), IQN).unwrap(), [lun]);
}
