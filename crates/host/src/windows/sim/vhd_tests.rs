//! Virtual disks on the simulated Windows (`vhd.rs`).

use super::*;
use crate::windows::vhd::{VirtualDisks, disk_number_of};

const GIB: u64 = 1 << 30;

fn machine() -> SimWindows {
    let sim = SimWindows::new();
    sim.mkdir(r"C:\vhd");
    sim
}

#[test]
fn an_attached_vhdx_is_a_new_raw_disk_without_scsi_address_that_detach_removes() {
    let sim = machine();
    let h = sim.create(r"C:\vhd\a.vhdx", GIB).unwrap();
    assert_eq!(sim.physical_path(h).unwrap_err().code, code::NOT_READY);
    sim.attach(h).unwrap();
    let n = disk_number_of(&sim.physical_path(h).unwrap()).unwrap();
    assert_eq!(n, 1);
    assert!(sim.partitions(n).is_empty());
    assert_eq!(sim.lock().disks[&n].scsi, None);
    assert_eq!(sim.lock().disks[&n].size, GIB);
    sim.detach(h).unwrap();
    assert!(!sim.lock().disks.contains_key(&n));
    assert_eq!(sim.detach(h).unwrap_err().code, code::NOT_READY);
    sim.close_vhd(h);
    sim.delete_vhd_file(r"C:\vhd\a.vhdx").unwrap();
    assert_eq!(sim.vhd_files(), vec![]);
}

#[test]
fn closing_the_attaching_handle_detaches_and_an_open_file_is_not_deleted() {
    let sim = machine();
    let h = sim.create(r"C:\vhd\b.vhdx", GIB).unwrap();
    sim.attach(h).unwrap();
    assert_eq!(
        sim.delete_vhd_file(r"C:\vhd\b.vhdx").unwrap_err().code,
        code::SHARING_VIOLATION
    );
    sim.close_vhd(h);
    assert!(
        !sim.lock().disks.contains_key(&1),
        "detached with its handle"
    );
    assert_eq!(sim.vhd_files(), vec![(r"c:\vhd\b.vhdx".to_string(), false)]);
    sim.delete_vhd_file(r"C:\vhd\b.vhdx").unwrap();
}

#[test]
fn create_refuses_an_existing_file_a_missing_folder_and_odd_sizes() {
    let sim = machine();
    sim.create(r"C:\vhd\c.vhdx", GIB).unwrap();
    let err = |p: &str, size| sim.create(p, size).unwrap_err().code;
    assert_eq!(err(r"C:\vhd\c.vhdx", GIB), code::FILE_EXISTS);
    assert_eq!(err(r"C:\nowhere\c.vhdx", GIB), code::PATH_NOT_FOUND);
    assert_eq!(err(r"C:\vhd\d.vhdx", GIB + 1), code::INVALID_PARAMETER);
    assert_eq!(
        sim.open(r"C:\vhd\missing.vhdx").unwrap_err().code,
        code::FILE_NOT_FOUND
    );
}

#[test]
fn attach_returns_before_the_disk_is_surfaced() {
    let sim = machine();
    let h = sim.create(r"C:\vhd\e.vhdx", GIB).unwrap();
    sim.attach(h).unwrap();
    let path = sim.physical_path(h).unwrap();
    // Plug and Play has not installed the disk yet: its device does not open and the
    // enumeration under way does not list it...
    assert_eq!(
        crate::windows::os::open_query(&sim, &path)
            .unwrap_err()
            .code,
        code::FILE_NOT_FOUND
    );
    assert_eq!(sim.disk_interfaces().unwrap().len(), 1);
    // ...nor does any enumeration before the arrival delay has passed, however many there
    // are (the sim once surfaced it by the second enumeration, whatever the time)...
    for _ in 0..3 {
        assert_eq!(sim.disk_interfaces().unwrap().len(), 1);
    }
    crate::windows::os::open_query(&sim, &path).unwrap_err();
    // ...and once it has, it is there.
    sim.sleep(Duration::from_millis(300));
    assert_eq!(sim.disk_interfaces().unwrap().len(), 2);
    crate::windows::os::open_query(&sim, &path).unwrap();
}

#[test]
fn resize_is_refused_while_attached_and_seen_on_the_next_attach() {
    let sim = machine();
    let h = sim.create(r"C:\vhd\f.vhdx", GIB).unwrap();
    sim.attach(h).unwrap();
    let n = disk_number_of(&sim.physical_path(h).unwrap()).unwrap();
    sim.lock().disks.get_mut(&n).unwrap().parts = vec![part(
        1,
        1 << 20,
        1 << 29,
        csi_proxy_formats::windows_buffers::layout::BASIC_DATA,
        Uuid::nil(),
        0,
    )];
    // "Resize-VHD is an offline operation; the virtual hard disk must not be attached".
    assert_eq!(sim.resize(h, 2 * GIB).unwrap_err().code, code::BUSY);
    sim.detach(h).unwrap();
    assert_eq!(
        sim.resize(h, 2 * GIB + 1).unwrap_err().code,
        code::INVALID_PARAMETER,
        "a size in whole sectors"
    );
    sim.resize(h, 2 * GIB).unwrap();
    sim.attach(h).unwrap();
    let n = disk_number_of(&sim.physical_path(h).unwrap()).unwrap();
    // The disk is the new size, with what was written on it.
    assert_eq!(sim.lock().disks[&n].size, 2 * GIB);
    assert_eq!(sim.partitions(n).len(), 1);
    sim.close_vhd(h);
}

/// A copied VHDX file (`CopyFileW`) holds what its source held, IDs and all: it is copied
/// detached, never over a file, and attached beside its online source it arrives offline for
/// the collision (ledger row 71), with a volume for its partition; attached alone it is online.
#[test]
fn a_copied_vhdx_attached_beside_its_source_arrives_offline() {
    let sim = machine();
    let (a, copy) = (r"C:\vhd\g.vhdx", r"C:\vhd\g-copy.vhdx");
    let h = sim.create(a, GIB).unwrap();
    sim.attach(h).unwrap();
    let n = disk_number_of(&sim.physical_path(h).unwrap()).unwrap();
    {
        let mut s = sim.lock();
        let d = s.disks.get_mut(&n).unwrap();
        d.style = STYLE_GPT;
        d.disk_id = Uuid::from_u128(0x71);
        d.parts = vec![part(
            1,
            1 << 20,
            1 << 29,
            csi_proxy_formats::windows_buffers::layout::BASIC_DATA,
            Uuid::from_u128(0x7101),
            0,
        )];
    }
    assert_eq!(
        sim.copy_vhd_file(a, copy).unwrap_err().code,
        code::SHARING_VIOLATION,
        "an attached VHDX is copied detached"
    );
    sim.detach(h).unwrap();
    sim.copy_vhd_file(a, copy).unwrap();
    assert_eq!(
        sim.copy_vhd_file(a, copy).unwrap_err().code,
        code::FILE_EXISTS
    );
    assert_eq!(
        sim.copy_vhd_file(r"C:\vhd\none.vhdx", r"C:\vhd\x.vhdx")
            .unwrap_err()
            .code,
        code::FILE_NOT_FOUND
    );
    sim.attach(h).unwrap();
    let c = sim.open(copy).unwrap();
    sim.attach(c).unwrap();
    let m = disk_number_of(&sim.physical_path(c).unwrap()).unwrap();
    assert_ne!(m, n);
    assert_eq!(sim.disk_attributes(m).map(|a| a.0), Some(true), "offline");
    assert_eq!(sim.disk_attributes(n).map(|a| a.0), Some(false));
    assert_eq!(sim.partitions(m).len(), 1);
    // Alone, the copy collides with nothing.
    sim.detach(c).unwrap();
    sim.detach(h).unwrap();
    sim.attach(c).unwrap();
    let m = disk_number_of(&sim.physical_path(c).unwrap()).unwrap();
    assert_eq!(sim.disk_attributes(m).map(|a| a.0), Some(false), "online");
    sim.close_vhd(c);
    sim.close_vhd(h);
}
