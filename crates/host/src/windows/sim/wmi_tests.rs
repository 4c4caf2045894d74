//! WMI after `winmgmt` restarted, through every lookup that uses it.

use super::tests::machine;
use crate::windows::system::WindowsSystemHost;
use csi_proxy_core::disk::DiskHost;
use csi_proxy_core::system::SystemHost;
use csi_proxy_core::volume::VolumeHost;

const GIB: u64 = 1 << 30;

/// The codes a call on a connection whose server is gone can fail with: RPC_E_DISCONNECTED,
/// RPC_S_SERVER_UNAVAILABLE, RPC_S_CALL_FAILED, RPC_E_SERVER_DIED, RPC_E_SERVER_DIED_DNE.
const GONE: [u32; 5] = [
    0x8001_0108,
    0x8007_06BA,
    0x8007_06BE,
    0x8001_0007,
    0x8001_0012,
];

#[test]
fn the_page_file_lookup_reconnects_so_a_lettered_disk_is_not_refused() {
    let m = machine();
    let n = m.sim.add_disk(10 * GIB, 3);
    m.disk.partition_disk(n).unwrap();
    let id = m.volume.list_volumes_on_disk(n, None).unwrap().remove(0);
    m.sim.assign_letter(&id);
    for code in GONE {
        m.sim.restart_wmi_with(code);
        let usage = m.disk.disk_usage(n).unwrap();
        assert_eq!(usage.system_use, None, "{code:#x}: {usage:?}");
    }
    assert_eq!(m.sim.calls()["reset_wmi"], GONE.len() as u64);
    // The system disk still holds the page file, also after a restart.
    m.sim.restart_wmi();
    assert!(m.disk.disk_usage(0).unwrap().system_use.is_some());
}

#[test]
fn the_bios_serial_lookup_reconnects() {
    let m = machine();
    m.sim.set_firmware(None, "FROM-WMI");
    let h = WindowsSystemHost::with_os(m.sim.clone());
    for code in GONE {
        m.sim.restart_wmi_with(code);
        assert_eq!(h.bios_serial_number().unwrap(), "FROM-WMI", "{code:#x}");
    }
}

#[test]
fn format_reconnects_after_every_server_gone_code() {
    let m = machine();
    for code in GONE {
        let n = m.sim.add_disk(10 * GIB, 3);
        m.disk.partition_disk(n).unwrap();
        let id = m.volume.list_volumes_on_disk(n, None).unwrap().remove(0);
        m.sim.restart_wmi_with(code);
        m.volume.format_volume(&id).unwrap();
        assert!(m.volume.is_volume_formatted(&id).unwrap(), "{code:#x}");
    }
}

/// Every RPC error is taken for a lost connection, whichever of them a restart produces (the
/// page names the class, "remote procedure call (RPC) errors", not a code; ledger row 5): the
/// RPC runtime's transport codes by name, COM's channel codes, and a proxy whose object is gone.
/// Errors that are not RPC's are answered as they are, with no reconnect.
#[test]
fn every_rpc_error_reconnects_and_no_other_error_does() {
    use crate::windows::os::{OsError, Win32, wmi_disconnected};
    let win32 = |c: u32| 0x8007_0000 | c;
    let rpc = [
        win32(1717), // RPC_S_UNKNOWN_IF
        win32(1722), // RPC_S_SERVER_UNAVAILABLE
        win32(1723), // RPC_S_SERVER_TOO_BUSY
        win32(1726), // RPC_S_CALL_FAILED
        win32(1727), // RPC_S_CALL_FAILED_DNE
        win32(1728), // RPC_S_PROTOCOL_ERROR
        win32(1753), // EPT_S_NOT_REGISTERED
        win32(1818), // RPC_S_CALL_CANCELLED
        win32(1820), // RPC_S_COMM_FAILURE
        0x8001_0001, // RPC_E_CALL_REJECTED
        0x8001_0006, // RPC_E_CONNECTION_TERMINATED
        0x8001_0105, // RPC_E_SERVERFAULT
        0x8004_01FD, // CO_E_OBJNOTCONNECTED
        0x8004_1015, // WBEM_E_TRANSPORT_FAILURE
    ];
    let other = [
        0x8004_1002, // WBEM_E_NOT_FOUND
        0x8004_1008, // WBEM_E_INVALID_PARAMETER
        0x8007_0005, // E_ACCESSDENIED
        0x8001_011F, // RPC_E_TIMEOUT: the call outlived its wait, the server may be working on
        win32(1780), // RPC_X_NULL_REF_POINTER: the caller's own stub, not the transport
        win32(1784), // ERROR_INVALID_USER_BUFFER
        win32(1907), // ERROR_PASSWORD_MUST_CHANGE
    ];
    let m = machine();
    m.sim.set_firmware(None, "FROM-WMI");
    let h = WindowsSystemHost::with_os(m.sim.clone());
    for code in GONE.into_iter().chain(rpc) {
        assert!(wmi_disconnected(&OsError::new(code)), "{code:#x}");
        m.sim.restart_wmi_with(code);
        assert_eq!(h.bios_serial_number().unwrap(), "FROM-WMI", "{code:#x}");
    }
    let resets = m.sim.calls()["reset_wmi"];
    assert_eq!(resets, (GONE.len() + rpc.len()) as u64);
    for code in other {
        assert!(!wmi_disconnected(&OsError::new(code)), "{code:#x}");
        m.sim.restart_wmi_with(code);
        let e = h.bios_serial_number().unwrap_err();
        assert!(
            e.message().contains(&format!("{code:#X}")),
            "{code:#x}: {e}"
        );
        m.sim.reset_wmi();
    }
    // The host never reconnected for them; the test did, once each.
    assert_eq!(m.sim.calls()["reset_wmi"], resets + other.len() as u64);
}

/// A WMI namespace whose provider hangs (rather than failing) stalls neither the other namespaces
/// nor its callers past their deadlines, and is not taken for a lost connection (nothing
/// reconnects).
#[test]
fn a_hanging_namespace_stalls_neither_the_others_nor_its_callers() {
    use crate::windows::smb::WindowsSmbHost;
    use csi_proxy_core::Kind;
    use csi_proxy_core::smb::SmbHost;
    use std::time::{Duration, Instant};
    const SMB: &str = r"ROOT\Microsoft\Windows\SMB";
    let m = machine();
    let n = m.sim.add_disk(10 * GIB, 3);
    m.disk.partition_disk(n).unwrap();
    let id = m.volume.list_volumes_on_disk(n, None).unwrap().remove(0);
    m.sim.hang_wmi_namespace(SMB, true);
    let smb = WindowsSmbHost::with_os(m.sim.clone());
    // More SMB callers than the namespace has threads, each with its deadline.
    let callers: Vec<_> = (0..6)
        .map(|_| {
            let smb = smb.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let deadline = Some(started + Duration::from_secs(2));
                let r = csi_proxy_core::deadline::within(deadline, || smb.smb_global_mappings());
                (r, started.elapsed())
            })
        })
        .collect();
    // Meanwhile, long before the SMB callers give up, the Storage and CIMV2 namespaces answer.
    std::thread::sleep(Duration::from_millis(20));
    let started = Instant::now();
    m.volume.format_volume(&id).unwrap();
    assert!(m.disk.disk_usage(0).unwrap().system_use.is_some());
    assert!(started.elapsed() < Duration::from_millis(1500));
    for c in callers {
        let (r, took) = c.join().unwrap();
        let e = r.unwrap_err();
        assert_eq!(e.kind(), Kind::Unavailable, "{}", e.message());
        // Answered at the deadline: neither early nor long after.
        assert!(took >= Duration::from_millis(1900), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
    assert_eq!(
        m.sim.calls().get("reset_wmi"),
        None,
        "a hang is no lost connection"
    );
    // The provider answers again: so does the namespace.
    m.sim.hang_wmi_namespace(SMB, false);
    assert!(smb.smb_global_mappings().unwrap().is_empty());
}
