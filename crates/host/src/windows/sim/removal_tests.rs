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
use std::sync::Arc;
use std::time::Duration;

const POD: &str = r"C:\k\pod";

fn host() -> (Arc<SimWindows>, Arc<PathOps<WindowsFilesystemHost>>) {
    let sim = Arc::new(SimWindows::new());
    sim.mkdir(POD);
    let ops = PathOps::new(
        WindowsFilesystemHost::with_os(sim.clone()),
        PathStyle::Windows,
    );
    (sim, Arc::new(ops))
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
    let (sim, fs) = host();
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
    assert_eq!(sim.open_entry_handles(), 0, "every handle is closed");

    // Rmdir with force: the same bounds, and the directory itself goes.
    chain(&sim, &format!(r"{POD}\again"), 100);
    sim.mkdir(&format!(r"{POD}\again"));
    sim.reset_peaks();
    fs.remove_all(&format!(r"{POD}\again")).unwrap();
    let (handles, _) = sim.peaks();
    assert!(handles <= OPEN_LEVELS + WALK_AND_STEP, "{handles} handles");
    assert!(!sim.entry_exists(&format!(r"{POD}\again")));
}

/// A tenant renames directory `d{level}` of its tree, which the removal no longer holds open
/// (it fell out of the window), and moves another directory, from outside the tree and holding
/// a file, into its place. When the removal climbs back it must see the change and stop: the
/// file survives and the error names the path and `cause`.
fn replaced_while_outside_the_window(level: usize, cause: &str) {
    const DEPTH: usize = 30;
    let (sim, fs) = host();
    let deepest = chain(&sim, POD, DEPTH);
    sim.add_file(&format!(r"{deepest}\bottom"));
    let victim = r"C:\outside\victim";
    sim.mkdir(victim);
    sim.add_file(&format!(r"{victim}\precious"));
    let replaced = (1..=level).fold(POD.to_string(), |p, i| format!(r"{p}\d{i}"));

    // Each directory on the way down is first tried as empty (one mark each, refused); the
    // next mark is the bottom file's, when the removal is 30 levels down and the levels above
    // the deepest 8 are closed.
    let mut marks = 0;
    sim.set_chaos(Some(Box::new(move |call| {
        if call == "delete_on_close" {
            marks += 1;
            if marks == DEPTH + 1 {
                return Disturbance::Hang;
            }
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
    // The tenant's move: the directory away, the outside one in its place.
    sim.rename(&replaced, r"C:\k\moved")
        .expect("the directory is outside the window: nothing holds it");
    sim.rename(victim, &replaced).unwrap();
    sim.release_hung();
    let e = walk.join().unwrap().unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(r"C:\k\pod\d1\d2\d3") && msg.contains(cause),
        "the error names the path and the cause ({cause}): {msg}"
    );
    assert!(
        sim.entry_exists(&format!(r"{replaced}\precious")),
        "the file of the directory moved in was removed"
    );
    assert_eq!(sim.open_entry_handles(), 0, "every handle is closed");
}

/// The level just above the window, met again first: opened by its path, it has another file
/// ID.
#[test]
fn a_directory_replaced_outside_the_window_is_refused_and_nothing_in_it_removed() {
    replaced_while_outside_the_window(30 - OPEN_LEVELS, "renamed or replaced");
}

/// A level further up: the path of the one met again first no longer leads anywhere.
#[test]
fn a_directory_above_the_window_replaced_stops_the_removal() {
    replaced_while_outside_the_window(5, "no longer at its path");
}
