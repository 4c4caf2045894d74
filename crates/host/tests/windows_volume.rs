//! The Windows volume host against the real volume manager (Windows, or Wine 8, which has
//! volumes for its drive letters but no disks behind them and no Storage WMI provider).
//!
//! What can run anywhere is checked: ID validation before any OS call, unknown volumes, volume
//! enumeration, and mount-point resolution of the volume holding a temporary directory. Mounting,
//! formatting and resizing need a real disk and are left to a Windows node.
#![cfg(windows)]

use csi_proxy_core::Kind;
use csi_proxy_core::volume::{ResizeTarget, VolumeHost};
use csi_proxy_formats::windows_buffers::volume::VolumeName;
use csi_proxy_host::windows::volume::WindowsVolumeHost;

const UNKNOWN: &str = r"\\?\Volume{00000000-1111-2222-3333-444444444444}\";

#[test]
fn malformed_ids_are_invalid_before_any_os_call() {
    let h = WindowsVolumeHost::new(std::env::temp_dir().join("csi-proxy-test-state"));
    let p = std::env::temp_dir();
    let p = p.to_str().unwrap();
    for id in [
        "-1",
        r"C:\",
        r"\\.\Volume{00000000-1111-2222-3333-444444444444}",
    ] {
        let results = [
            h.mount_volume(id, p),
            h.unmount_volume(id, p),
            h.is_volume_formatted(id).map(drop),
            h.format_volume(id),
            h.resize_volume(id, ResizeTarget::Maximum),
            h.get_volume_stats(id).map(drop),
            h.get_disk_number_from_volume_id(id).map(drop),
            h.write_volume_cache(id),
            h.volume_disk_number(id).map(drop),
        ];
        for r in results {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{id}: {}", e.message());
            assert!(e.message().contains("not a volume ID"), "{}", e.message());
        }
    }
}

#[test]
fn unknown_volumes_are_not_found() {
    let h = WindowsVolumeHost::new(std::env::temp_dir().join("csi-proxy-test-state"));
    let results = [
        h.is_volume_formatted(UNKNOWN).map(drop),
        h.format_volume(UNKNOWN),
        h.get_volume_stats(UNKNOWN).map(drop),
        h.get_disk_number_from_volume_id(UNKNOWN).map(drop),
        h.volume_disk_number(UNKNOWN).map(drop),
    ];
    for r in results {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), Kind::NotFound, "{}", e.message());
        assert!(e.message().contains("no such volume"), "{}", e.message());
    }
    // Nothing is mounted at a fresh directory: unmounting is a success (idempotent).
    let dir = tempfile::tempdir().unwrap();
    h.unmount_volume(UNKNOWN, dir.path().to_str().unwrap())
        .unwrap();
}

#[test]
fn a_missing_disk_is_not_found() {
    let h = WindowsVolumeHost::new(std::env::temp_dir().join("csi-proxy-test-state"));
    let e = h.list_volumes_on_disk(4000, None).unwrap_err();
    assert_eq!(e.kind(), Kind::NotFound, "{}", e.message());
}

#[test]
fn the_volume_of_a_directory_is_found_and_a_plain_directory_is_no_mount_point() {
    let h = WindowsVolumeHost::new(std::env::temp_dir().join("csi-proxy-test-state"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let e = h.get_volume_id_from_target_path(&path).unwrap_err();
    assert_eq!(e.kind(), Kind::NotFound, "{}", e.message());
    assert!(e.message().contains("not a mount point"), "{}", e.message());
    let missing = format!(r"{path}\missing");
    let e = h.get_volume_id_from_target_path(&missing).unwrap_err();
    assert_eq!(e.kind(), Kind::NotFound, "{}", e.message());
    match h.get_closest_volume_id_from_target_path(&path) {
        Ok(id) => {
            assert!(VolumeName::parse(&id).is_some(), "{id}");
            // The drive root's volume is the same one, and its own mount point resolves to it.
            let root = &path[..3];
            assert_eq!(h.get_volume_id_from_target_path(root).unwrap(), id);
        }
        Err(e) => eprintln!(
            "SKIPPED: this host names no volume for {path:?} ({}); Wine without a \
             volume behind the drive",
            e.message()
        ),
    }
}
