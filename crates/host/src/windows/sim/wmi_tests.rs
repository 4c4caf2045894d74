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
