//! Reading a small file (kubelet's per-volume record) through the Windows filesystem host over
//! the simulated Windows (ledger row 92): the name inside a held directory is opened as itself,
//! a link or directory there is refused before a byte is read, and the read is bounded.

use super::*;
use crate::windows::filesystem::WindowsFilesystemHost;
use crate::windows::os::Win32;
use crate::windows::os::files::{FileApi, access, utf16};
use csi_proxy_core::filesystem::{FilesystemHost, FilesystemService, VolDataFromHost};
use csi_proxy_core::paths::{Found, Held, Mode, PathPolicy, PathStyle, Reached, Walk};
use csi_proxy_core::profiles::VolDataReader;
use csi_proxy_core::testing::PathOps;
use std::io::ErrorKind;
use std::sync::Arc;

const VOLUME: &str = r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pv1";
const RECORD: &[u8] = br#"{"driverName":"disk.csi.example.com","volumeHandle":"v1"}"#;

fn sim() -> Arc<SimWindows> {
    let sim = Arc::new(SimWindows::new());
    sim.mkdir(VOLUME);
    sim
}

fn host(sim: &Arc<SimWindows>) -> WindowsFilesystemHost {
    WindowsFilesystemHost::with_os(sim.clone())
}

/// `dir` walked and held as the service holds a request's directory (links on the way
/// followed), then `name` read inside it.
fn read(
    host: &WindowsFilesystemHost,
    dir: &str,
    name: &str,
    limit: usize,
) -> std::io::Result<Vec<u8>> {
    let policy = PathPolicy::unconfined(PathStyle::Windows);
    let held: Held = match policy.walk("test", dir, Mode::FOLLOW, host).unwrap() {
        Walk::Reached(Reached {
            found: Found::Dir(d),
            ..
        }) => d,
        _ => panic!("{dir} is not a directory"),
    };
    host.read_small(&held, name, limit)
}

/// The driver kubelet's record in `dir` names, read as the profiles read it.
fn driver_of(sim: &Arc<SimWindows>, dir: &str) -> csi_proxy_core::Result<Option<String>> {
    let fs = FilesystemService::new(
        Arc::new(host(sim)),
        Arc::new(PathPolicy::unconfined(PathStyle::Windows)),
    );
    VolDataFromHost::new(&fs).driver_of("test", dir, &["vol_data.json"])
}

#[test]
fn reads_a_file_in_the_held_directory() {
    let sim = sim();
    sim.put_file(&format!(r"{VOLUME}\vol_data.json"), RECORD);
    let before = sim.open_entry_handles();
    let h = host(&sim);
    assert_eq!(
        read(&h, VOLUME, "vol_data.json", 64 * 1024).unwrap(),
        RECORD
    );
    // Exactly the limit is read whole; an empty file is empty.
    assert_eq!(
        read(&h, VOLUME, "vol_data.json", RECORD.len()).unwrap(),
        RECORD
    );
    sim.put_file(&format!(r"{VOLUME}\empty"), b"");
    assert_eq!(read(&h, VOLUME, "empty", 10).unwrap(), b"");
    assert_eq!(
        driver_of(&sim, VOLUME).unwrap().as_deref(),
        Some("disk.csi.example.com")
    );
    // Nothing is left open but what the host holds for its life (the walk's root).
    drop(h);
    assert!(sim.open_entry_handles() <= before + 1);
}

#[test]
fn a_link_at_the_name_is_refused_and_its_target_not_read() {
    let sim = sim();
    sim.mkdir(r"C:\elsewhere");
    sim.put_file(
        r"C:\elsewhere\record",
        br#"{"driverName":"other.csi.example.com"}"#,
    );
    let ops = PathOps::new(host(&sim), PathStyle::Windows);
    ops.create_symlink(r"C:\elsewhere\record", &format!(r"{VOLUME}\vol_data.json"))
        .unwrap();
    let e = read(ops.host(), VOLUME, "vol_data.json", 64 * 1024).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    assert_eq!(sim.calls().get("read_handle"), None, "the link was read");
    // The profiles' reader reports the refusal; it never names the target's driver.
    let r = driver_of(&sim, VOLUME);
    assert!(r.is_err(), "{r:?}");
    assert_eq!(sim.calls().get("read_handle"), None, "the link was read");
}

#[test]
fn a_directory_or_a_directory_link_at_the_name_is_refused() {
    let sim = sim();
    sim.mkdir(&format!(r"{VOLUME}\vol_data.json"));
    sim.mkdir(r"C:\elsewhere");
    let ops = PathOps::new(host(&sim), PathStyle::Windows);
    ops.create_symlink(r"C:\elsewhere", &format!(r"{VOLUME}\dirlink"))
        .unwrap();
    for name in ["vol_data.json", "dirlink"] {
        let e = read(ops.host(), VOLUME, name, 64 * 1024).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{name}: {e}");
    }
    assert_eq!(sim.calls().get("read_handle"), None);
}

#[test]
fn more_than_the_limit_is_invalid_data() {
    let sim = sim();
    let h = host(&sim);
    sim.put_file(&format!(r"{VOLUME}\vol_data.json"), RECORD);
    let e = read(&h, VOLUME, "vol_data.json", RECORD.len() - 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    // A file many reads long: refused once the limit is passed, without reading it all.
    let big = vec![b' '; 10 * 1024 * 1024];
    sim.put_file(&format!(r"{VOLUME}\big"), &big);
    let reads = sim.calls().get("read_handle").copied().unwrap_or(0);
    let e = read(&h, VOLUME, "big", 100 * 1024).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    let made = sim.calls()["read_handle"] - reads;
    assert!(made <= 2, "{made} reads for a limit of two chunks");
    // The profiles' reader reads at most its own limit (64 KiB).
    sim.put_file(&format!(r"{VOLUME}\vol_data.json"), &big);
    assert!(driver_of(&sim, VOLUME).is_err());
}

#[test]
fn a_missing_record_names_nothing() {
    let sim = sim();
    let e = read(&host(&sim), VOLUME, "vol_data.json", 64 * 1024).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert_eq!(driver_of(&sim, VOLUME).unwrap(), None);
}

#[test]
fn read_file_follows_the_file_pointer_to_the_end() {
    let sim = sim();
    let path = format!(r"{VOLUME}\vol_data.json");
    sim.put_file(&path, b"0123456789");
    let share = access::SHARE_READ | access::SHARE_WRITE | access::SHARE_DELETE;
    let h = sim
        .open_entry(&utf16(&path), access::READ_DATA, share, false)
        .unwrap();
    assert_eq!(sim.read_handle(h, 4).unwrap(), b"0123");
    assert_eq!(sim.read_handle(h, 4).unwrap(), b"4567");
    // Fewer bytes near the end, none (and no error) at the end.
    assert_eq!(sim.read_handle(h, 4).unwrap(), b"89");
    assert_eq!(sim.read_handle(h, 4).unwrap(), b"");
    Win32::close(&*sim, h);
    // Without read access: refused.
    let h = sim
        .open_entry(&utf16(&path), access::READ_ATTRIBUTES, share, false)
        .unwrap();
    assert_eq!(
        sim.read_handle(h, 4).unwrap_err().code,
        crate::windows::os::code::ACCESS_DENIED
    );
    Win32::close(&*sim, h);
    // A directory's handle has no data.
    let h = sim
        .open_entry(&utf16(VOLUME), access::READ_DATA, share, false)
        .unwrap();
    assert_eq!(
        sim.read_handle(h, 4).unwrap_err().code,
        crate::windows::os::code::INVALID_FUNCTION
    );
    Win32::close(&*sim, h);
}
