//! The recursive removal (Rmdir with force, RmdirContents) against a tenant's tree, over the
//! simulated Windows: however deep or wide the tree, the daemon holds at most a window of open
//! directories and one listing buffer per open level; a directory renamed and replaced while
//! it was outside the window is refused, and nothing in its replacement is removed.

use super::Disturbance;
use super::*;
use crate::windows::filesystem::{LISTING_BUFFER, OPEN_LEVELS, WindowsFilesystemHost};
use crate::windows::os::files::dir_record_len;
use csi_proxy_core::paths::PathStyle;
use csi_proxy_core::testing::PathOps;
use csi_proxy_core::volume::VolumeHost;
use std::sync::Arc;
use std::time::Duration;

const POD: &str = r"C:\k\pod";

/// The simulator, the host, and the handles the host holds for its life (its roots, held
/// from the first call on), which stay open after every call.
fn host() -> (Arc<SimWindows>, Arc<PathOps<WindowsFilesystemHost>>, usize) {
    let sim = Arc::new(SimWindows::new());
    sim.mkdir(POD);
    let ops = PathOps::new(
        WindowsFilesystemHost::with_os(sim.clone()),
        PathStyle::Windows,
    );
    assert!(ops.path_exists(POD).unwrap());
    let held = sim.open_entry_handles();
    (sim, Arc::new(ops), held)
}

/// `depth` nested directories `d1\d2\…` below `base`; returns the deepest one's path.
fn chain(sim: &SimWindows, base: &str, depth: usize) -> String {
    let mut p = base.to_string();
    for i in 1..=depth {
        p = format!(r"{p}\d{i}");
        sim.mkdir(&p);
    }
    p
}

/// Handles the walk of a path takes besides the removal's own: the pins of `C:\`, `k` and
/// `pod` (the policy's walk) and, at a time, one entry being removed and one reopened by path.
const WALK_AND_STEP: usize = 5;

#[test]
fn removal_holds_a_bounded_window_of_directories_and_listing_at_any_depth_and_width() {
    let (sim, fs, held) = host();
    // 300 levels deep, and 5,000 entries wide halfway down.
    let deepest = chain(&sim, POD, 300);
    sim.add_file(&format!(r"{deepest}\bottom"));
    let wide = format!(r"{POD}\d1\wide");
    sim.mkdir(&wide);
    for i in 0..5_000 {
        sim.add_file(&format!(r"{wide}\f{i:05}"));
    }
    sim.reset_peaks();
    fs.remove_contents(POD).unwrap();
    let (handles, batch) = sim.peaks();
    assert!(
        handles <= OPEN_LEVELS + WALK_AND_STEP,
        "{handles} handles open at once for a tree 300 levels deep (bound {})",
        OPEN_LEVELS + WALK_AND_STEP
    );
    let per_buffer = LISTING_BUFFER / dir_record_len(1);
    assert!(
        batch <= per_buffer,
        "{batch} entries listed at once from a directory of 5,000 (bound {per_buffer})"
    );
    assert!(sim.entry_exists(POD));
    assert!(
        sim.dir_entries(POD).is_empty(),
        "{:?}",
        sim.dir_entries(POD)
    );
    assert_eq!(
        sim.open_entry_handles(),
        held,
        "every handle but the roots' is closed"
    );

    // Rmdir with force: the same bounds, and the directory itself goes.
    chain(&sim, &format!(r"{POD}\again"), 100);
    sim.mkdir(&format!(r"{POD}\again"));
    sim.reset_peaks();
    fs.remove_all(&format!(r"{POD}\again")).unwrap();
    let (handles, _) = sim.peaks();
    assert!(handles <= OPEN_LEVELS + WALK_AND_STEP, "{handles} handles");
    assert!(!sim.entry_exists(&format!(r"{POD}\again")));
}

const DEPTH: usize = 30;

/// The removal of a tree `DEPTH` levels deep is held at its first delete at the bottom (the
/// levels above the deepest 8 closed by then) while `swap` does what a tenant can to the
/// directory `d{level}`, which nothing holds; then it goes on. It must stop with an error
/// naming the path and `cause`, and every path of `survivors` must still be there.
fn race_outside_the_window(
    level: usize,
    swap: impl FnOnce(&SimWindows, &str),
    survivors: &[&str],
    cause: &str,
) {
    let (sim, fs, held) = host();
    let deepest = chain(&sim, POD, DEPTH);
    sim.add_file(&format!(r"{deepest}\bottom"));
    sim.add_file(&format!(r"{deepest}\more"));
    let swapped = (1..=level).fold(POD.to_string(), |p, i| format!(r"{p}\d{i}"));

    // Each directory on the way down is first tried as empty (one mark each, refused); the
    // next mark is the bottom file's. (A walk by path deletes it with DeleteFileW instead.)
    let mut marks = 0;
    sim.set_chaos(Some(Box::new(move |call| {
        if call == "delete_on_close" {
            marks += 1;
        }
        if marks == DEPTH + 1 || call == "delete_file" {
            marks += 1;
            return Disturbance::Hang;
        }
        Disturbance::None
    })));
    let walk = std::thread::spawn({
        let fs = fs.clone();
        move || fs.remove_contents(POD)
    });
    for _ in 0..10_000 {
        if sim.hung_calls() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(sim.hung_calls(), 1, "the removal never reached the bottom");
    swap(&sim, &swapped);
    sim.release_hung();
    let e = walk.join().unwrap().unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(r"C:\k\pod\d1\d2\d3") && msg.contains(cause),
        "the error names the path and the cause ({cause}): {msg}"
    );
    for survivor in survivors {
        assert!(sim.entry_exists(survivor), "{survivor} was removed");
    }
    assert_eq!(
        sim.open_entry_handles(),
        held,
        "every handle but the roots' is closed"
    );
}

/// The tenant's move: `dir` renamed away (nothing holds it) and a directory from outside the
/// tree, holding a file, moved into its place.
fn replace_with_outside(sim: &SimWindows, dir: &str) {
    sim.mkdir(r"C:\outside\victim");
    sim.add_file(r"C:\outside\victim\precious");
    sim.rename(dir, r"C:\k\moved")
        .expect("the directory is outside the window: nothing holds it");
    sim.rename(r"C:\outside\victim", dir).unwrap();
}

/// The level just above the window, met again first, is another directory now: opened by its
/// path, it has another file ID. Nothing in it is removed.
#[test]
fn a_directory_replaced_outside_the_window_is_refused_and_nothing_in_it_removed() {
    let level = DEPTH - OPEN_LEVELS;
    let precious = (1..=level).fold(POD.to_string(), |p, i| format!(r"{p}\d{i}")) + r"\precious";
    race_outside_the_window(
        level,
        replace_with_outside,
        &[&precious],
        "renamed or replaced",
    );
}

/// A level further up replaced: the path of the level met again first leads nowhere now.
#[test]
fn a_directory_above_the_window_replaced_stops_the_removal() {
    race_outside_the_window(
        5,
        replace_with_outside,
        &[r"C:\k\pod\d1\d2\d3\d4\d5\precious"],
        "no longer at its path",
    );
}

/// A level above the window replaced by a link to a directory outside that mirrors the names
/// below it: the levels still open are acted on through their handles, never through the link,
/// so the mirror's entries stay; and the level met again through the link is refused.
#[test]
fn a_link_swapped_in_above_the_window_never_leads_the_removal_outside() {
    let mirror = (6..=DEPTH).fold(r"C:\outside".to_string(), |p, i| format!(r"{p}\d{i}"));
    let more = format!(r"{mirror}\more");
    let level_22 = (6..=DEPTH - OPEN_LEVELS)
        .fold(r"C:\outside".to_string(), |p, i| format!(r"{p}\d{i}"))
        + r"\keep";
    race_outside_the_window(
        5,
        |sim, dir| {
            sim.mkdir(&mirror);
            sim.add_file(&more);
            sim.add_file(&level_22);
            sim.rename(dir, r"C:\k\moved").unwrap();
            sim.add_dir_link(dir, r"C:\outside");
        },
        &[&more, &level_22],
        "renamed or replaced",
    );
}

/// Where the filesystem gives no file ID, a directory could not be checked again once closed:
/// the removal holds its 8 directories and leaves what is deeper in place, saying why.
#[test]
fn without_file_ids_the_removal_never_lets_a_directory_out_of_the_window() {
    let (sim, fs, held) = host();
    let deepest = chain(&sim, POD, 12);
    sim.add_file(&format!(r"{deepest}\bottom"));
    sim.add_file(&format!(r"{POD}\top-file"));
    for _ in 0..64 {
        sim.fail_next("file_id", OsError::new(code::INVALID_PARAMETER));
    }
    let e = fs.remove_contents(POD).unwrap_err();
    assert!(
        e.to_string().contains("no file ID") && e.to_string().contains(r"\d8: left in place"),
        "{e}"
    );
    assert!(!sim.entry_exists(&format!(r"{POD}\top-file")));
    assert!(sim.entry_exists(&format!(r"{deepest}\bottom")));
    assert_eq!(
        sim.open_entry_handles(),
        held,
        "every handle but the roots' is closed"
    );
}

/// A volume mounted on a folder deep in the tree: the mount manager is told (the folder still
/// names the entry the removal opened), the folder goes, the volume and its data stay.
#[test]
fn a_volume_mounted_deep_in_the_tree_is_dismounted_not_emptied() {
    let m = super::tests::machine();
    let (_, id) = super::tests::formatted(&m);
    let fs = PathOps::new(
        WindowsFilesystemHost::with_os(m.sim.clone()),
        PathStyle::Windows,
    );
    let deepest = chain(&m.sim, POD, 12);
    let mnt = format!(r"{deepest}\mnt");
    m.sim.mkdir(&mnt);
    m.volume.mount_volume(&id, &mnt).unwrap();
    m.sim.mkdir(&format!(r"{mnt}\volume-data"));
    fs.remove_all(&format!(r"{POD}\d1")).unwrap();
    assert!(!m.sim.entry_exists(&format!(r"{POD}\d1")));
    assert_eq!(m.sim.calls().get("delete_volume_mount_point"), Some(&1));
    m.sim.mkdir(r"C:\k\again");
    m.volume.mount_volume(&id, r"C:\k\again").unwrap();
    assert!(m.sim.entry_exists(r"C:\k\again\volume-data"));
}

/// A file another process holds open (sharing delete: a scanner, an indexer) is only marked
/// when removed; it goes when that process closes it, and until then its directory is not
/// empty. The removal waits that out instead of failing.
#[test]
fn a_file_another_process_holds_is_waited_out() {
    let (sim, fs, _) = host();
    let deepest = chain(&sim, POD, 3);
    let held = format!(r"{deepest}\scanned");
    sim.add_file(&held);
    sim.hold_entry(&held, Duration::from_secs(2));
    fs.remove_all(&format!(r"{POD}\d1")).unwrap();
    assert!(!sim.entry_exists(&format!(r"{POD}\d1")));
}
