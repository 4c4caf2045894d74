//! A call kubelet gave up on never undoes work done since (simulation seed 511119644): an
//! azuredisk unstage (Rmdir of the staging mount point) hangs in a seam call past its deadline,
//! kubelet's retry and the next stage follow, and then the hung call is let go. A seam call that
//! hangs acts when it is let go, on whatever its path names then; no deadline check can stop
//! a call already inside the OS, so the later calls on the path wait for it instead.

use super::Disturbance;
use super::tests::{formatted, machine};
use crate::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_core::deadline::within;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::volume::VolumeService;
use csi_proxy_core::{Kind, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

const STAGING: &str = r"C:\var\lib\kubelet\plugins\disk.csi.azure.com\01\globalmount";

fn soon(ms: u64) -> Option<Instant> {
    Some(Instant::now() + Duration::from_millis(ms))
}

/// Stages, lets the unstage's Rmdir hang in seam call `hung`, retries it and stages again as
/// kubelet would, lets the hung call go: the volume must stay mounted where it was staged.
fn stale_unstage_after_restage(hung: &'static str) {
    let m = machine();
    let (_, id) = formatted(&m);
    let policy = PathPolicy::new(PathStyle::Windows, r"C:\var\lib\kubelet", &[]).unwrap();
    let fs = FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(m.sim.clone())),
        Arc::new(policy),
    );
    let volume = VolumeService::new(Arc::new(m.volume), fs.clone());
    let stage = || -> Result<()> {
        fs.mkdir(STAGING)?;
        volume.mount_volume(&id, STAGING)
    };
    within(soon(20_000), stage).unwrap();

    let mut first = true;
    m.sim.set_chaos(Some(Box::new(move |call| {
        if call == hung && std::mem::take(&mut first) {
            Disturbance::Hang
        } else {
            Disturbance::None
        }
    })));
    let stale = std::thread::spawn({
        let fs = fs.clone();
        move || within(soon(20_000), || fs.rmdir(STAGING, true))
    });
    for _ in 0..10_000 {
        if m.sim.hung_calls() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(m.sim.hung_calls(), 1, "{hung} never hung");

    // Kubelet gave up on the unstage and retries it, then stages again.
    let mut staged = false;
    match within(soon(100), || fs.rmdir(STAGING, true)) {
        Ok(()) => {
            within(soon(20_000), stage).unwrap();
            staged = true;
        }
        // The retry waited for the hung call on its path, until its own deadline.
        Err(e) => assert_eq!(e.kind(), Kind::DeadlineExceeded, "{e}"),
    }
    m.sim.release_hung();
    let _ = stale.join().unwrap();
    if !staged {
        within(soon(20_000), || fs.rmdir(STAGING, true)).unwrap();
        within(soon(20_000), stage).unwrap();
    }
    let mounted = m.sim.mount_points();
    assert!(
        mounted.iter().any(|(at, v)| {
            at.trim_end_matches('\\').eq_ignore_ascii_case(STAGING)
                && v.trim_end_matches('\\')
                    .eq_ignore_ascii_case(id.trim_end_matches('\\'))
        }),
        "the hung unstage ({hung}) undid the stage made since: mounts {mounted:?}"
    );
}

#[test]
fn a_stale_delete_volume_mount_point_does_not_undo_a_new_stage() {
    stale_unstage_after_restage("delete_volume_mount_point");
}

/// The mount point itself is removed through its handle (`FileDispositionInfo`).
#[test]
fn a_stale_delete_on_close_does_not_undo_a_new_stage() {
    stale_unstage_after_restage("delete_on_close");
}
