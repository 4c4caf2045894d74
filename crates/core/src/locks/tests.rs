use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[test]
fn one_disk_is_serialised_and_others_are_not() {
    let inside = Arc::new(AtomicU32::new(0));
    let max = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (inside, max) = (inside.clone(), max.clone());
            std::thread::spawn(move || {
                let _g = lock_disk(4_000_001, "test", "d").unwrap();
                let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                inside.fetch_sub(1, Ordering::SeqCst);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(max.load(Ordering::SeqCst), 1);

    // Holding one disk does not block another.
    let _a = lock_disk(4_000_002, "test", "d").unwrap();
    let other = std::thread::spawn(|| {
        let _b = lock_disk(4_000_003, "test", "d").unwrap();
    });
    other.join().unwrap();
}

#[test]
fn waiting_for_a_held_disk_ends_at_the_call_deadline() {
    let _held = lock_disk(4_000_004, "test", "d").unwrap();
    let deadline = Instant::now() + Duration::from_millis(50);
    let e = std::thread::spawn(move || {
        crate::deadline::within(Some(deadline), || {
            lock_disk(4_000_004, "FormatVolume", "volume v").err()
        })
    })
    .join()
    .unwrap()
    .expect("the disk stays held past the deadline");
    assert!(Instant::now() >= deadline);
    assert_eq!(e.kind(), crate::Kind::DeadlineExceeded);
    assert!(
        e.to_string().contains("FormatVolume") && e.to_string().contains("another operation"),
        "{e}"
    );
    // A free disk is held at once while the caller still waits.
    crate::deadline::within(Some(Instant::now() + Duration::from_secs(5)), || {
        drop(lock_disk(4_000_005, "test", "d").unwrap());
    });
}

/// A call whose caller has gone (it hung past its deadline before reaching the disk) starts
/// nothing even on a free disk: its retry may have done the work already, and a stale
/// UnmountVolume run now would take away a volume staged again since.
#[test]
fn a_caller_that_has_gone_holds_no_disk() {
    let past = Instant::now() - Duration::from_millis(1);
    let Err(e) = crate::deadline::within(Some(past), || lock_disk(4_000_006, "UnmountVolume", "v"))
    else {
        panic!("held for a caller that has gone");
    };
    assert_eq!(e.kind(), crate::Kind::DeadlineExceeded);
    assert!(e.to_string().contains("UnmountVolume"), "{e}");
    drop(lock_disk(4_000_006, "test", "d").expect("the disk was never held"));
}

/// Hundreds of deadline-less callers on a held disk: a few wait, the rest are refused at
/// once (before, all of them waited forever, each on a thread of the blocking pool), and
/// another disk is held at once meanwhile.
#[test]
fn waiters_on_a_held_disk_are_capped_and_others_disks_are_not_held_up() {
    let held = lock_disk(4_000_010, "FormatVolume", "volume big").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let callers: Vec<_> = (0..200)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let r = lock_disk(4_000_010, "ListVolumesOnDisk", "disk 4000010");
                tx.send(r.map(drop)).unwrap();
            })
        })
        .collect();
    // Every caller past the cap is answered while the disk is still held.
    for _ in 0..200 - WAITERS_PER_OBJECT {
        let e = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a refusal while the disk is held")
            .expect_err("the disk is held");
        assert_eq!(e.kind(), Kind::ResourceExhausted, "{e}");
        assert!(
            e.to_string().contains("limit per disk")
                && e.to_string().contains("held by FormatVolume on volume big"),
            "{e}"
        );
    }
    let t = Instant::now();
    drop(lock_disk(4_000_011, "ListVolumesOnDisk", "disk 4000011").unwrap());
    assert!(t.elapsed() < Duration::from_secs(1));
    drop(held);
    for c in callers {
        c.join().unwrap();
    }
    drop(tx);
    let granted: Vec<_> = rx.iter().collect();
    assert_eq!(granted.len(), WAITERS_PER_OBJECT);
    assert!(
        granted.iter().all(Result::is_ok),
        "the capped waiters get the disk in turn"
    );
}

#[test]
fn a_wait_without_a_deadline_ends_after_the_default_and_names_the_holder() {
    let _held = lock_disk(4_000_012, "FormatVolume", "volume slow").unwrap();
    let before = refusals().default_wait_passed;
    let e = std::thread::spawn(|| {
        lock_disk_waiting(
            4_000_012,
            "MountVolume",
            "volume slow",
            Duration::from_millis(50),
        )
        .err()
    })
    .join()
    .unwrap()
    .expect("the disk stays held");
    assert_eq!(e.kind(), Kind::Aborted);
    assert!(
        e.to_string()
            .contains("held by FormatVolume on volume slow"),
        "{e}"
    );
    assert!(refusals().default_wait_passed > before);
}

/// While the predecessor of a take-over runs, a call that takes an object waits for its
/// exit: until the call's deadline (DEADLINE_EXCEEDED naming the object and the previous
/// daemon), else the default wait (UNAVAILABLE); once it has exited the call goes on.
/// A gate of its own: the process-wide one stays open for the other tests.
#[test]
fn a_call_taking_an_object_waits_for_the_predecessor() {
    let gate = Arc::new(Gate::new());
    gate.set(false);
    let soon = Some(Instant::now() + Duration::from_millis(30));
    let e = crate::deadline::within(soon, || {
        gate.pass("FormatVolume", "volume v", "disk 7", DEFAULT_WAIT)
    })
    .unwrap_err();
    assert_eq!(e.kind(), Kind::DeadlineExceeded);
    assert!(
        e.to_string().contains("FormatVolume")
            && e.to_string().contains("previous csi-proxy")
            && e.to_string().contains("disk 7"),
        "{e}"
    );
    let e = gate
        .pass("Mkdir", "/k/a", "path \"/k/a\"", Duration::from_millis(20))
        .unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable);
    assert!(e.to_string().contains("previous csi-proxy"), "{e}");
    // A waiter is let through when the predecessor exits.
    let waiter = {
        let gate = gate.clone();
        std::thread::spawn(move || gate.pass("Mkdir", "/k/b", "path", DEFAULT_WAIT))
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished(), "waits while the predecessor runs");
    gate.set(true);
    waiter.join().unwrap().expect("through once it exited");
    assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
}

/// A path is ordered with itself and with the paths above and below it, and with nothing
/// else (a sibling whose name starts the same is another path).
#[test]
fn a_path_waits_for_itself_and_its_ancestors_and_descendants_only() {
    let _held = lock_path("/t/locks/a/b".into(), '/', "Rmdir", "b").unwrap();
    let soon = || Some(Instant::now() + Duration::from_millis(20));
    // Each other call on a thread of its own, as the daemon runs them (one thread taking a
    // second path is an inversion of the lock order).
    let other = |path: &'static str| {
        std::thread::spawn(move || {
            crate::deadline::within(soon(), || {
                lock_path(path.into(), '/', "Mkdir", path).map(drop)
            })
        })
        .join()
        .unwrap()
    };
    for busy in [
        "/t/locks/a/b",
        "/t/locks/a/b/",
        "/t/locks/a",
        "/t/locks/a/b/c",
    ] {
        let e = other(busy)
            .err()
            .unwrap_or_else(|| panic!("{busy} was not ordered after /t/locks/a/b"));
        assert_eq!(e.kind(), crate::Kind::DeadlineExceeded);
        assert!(
            e.to_string().contains("Mkdir") && e.to_string().contains("path"),
            "{e}"
        );
    }
    for free in ["/t/locks/a/bc", "/t/locks/a/c", "/t/locks/ab"] {
        other(free).unwrap();
    }
}

/// The lock order, checked on every acquisition (debug and test builds): taking a disk while
/// holding a path panics even when nobody else holds either, so a call written the wrong way
/// round fails the first test that reaches it.
#[test]
fn a_disk_taken_under_a_path_panics_uncontended() {
    let path = lock_path("/t/order/a".into(), '/', "MountVolume", "a").unwrap();
    let inverted = std::panic::catch_unwind(|| {
        let _disk = lock_disk(4_000_020, "MountVolume", "volume v");
    });
    let message = inverted.expect_err("the inversion panics");
    let message = message
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.contains("lock order inverted")
            && message.contains("disk 4000020")
            && message.contains("path \"/t/order/a\""),
        "{message}"
    );
    drop(path);
    // The panic left the disk free and nothing recorded: the right order goes through.
    let disk = lock_disk(4_000_020, "MountVolume", "volume v").unwrap();
    drop(lock_path("/t/order/a".into(), '/', "MountVolume", "a").unwrap());
    drop(disk);
}

/// Each inversion of the order, as a call would write it, panics; the order itself does not.
#[test]
fn every_inversion_panics_and_the_order_does_not() {
    let panics = |what: &str, f: fn()| {
        assert!(
            std::panic::catch_unwind(f).is_err(),
            "{what} was not refused"
        );
    };
    panics("a share under a path", || {
        let _p = lock_path("/t/order/b".into(), '/', "NewSmbGlobalMapping", "b").unwrap();
        let _s = lock_smb_root(r"\\srv\order-b", "NewSmbGlobalMapping", "m");
    });
    panics("a disk under a share", || {
        let _s = lock_smb_root(r"\\srv\order-c", "Op", "m").unwrap();
        let _d = lock_disk(4_000_021, "Op", "d");
    });
    panics("a lower disk under a higher one", || {
        let _a = lock_disk(4_000_023, "DisconnectTarget", "t").unwrap();
        let _b = lock_disk(4_000_022, "DisconnectTarget", "t");
    });
    panics("a second path", || {
        let _a = lock_path("/t/order/d".into(), '/', "Op", "d").unwrap();
        let _b = lock_path("/t/order/e".into(), '/', "Op", "e");
    });
    // Disks ascending, then a share, then a path; a share taken without waiting under a share.
    let a = lock_disk(4_000_024, "Op", "d").unwrap();
    let b = lock_disk(4_000_025, "Op", "d").unwrap();
    let s = lock_smb_root(r"\\srv\order-f", "Op", "m").unwrap();
    let t = try_lock_smb_root(r"\\srv\order-g", "Op", "m").expect("free");
    let p = lock_path("/t/order/f".into(), '/', "Op", "f").unwrap();
    drop((p, t, s, b, a));
    // A guard dropped on another thread takes its record with it.
    let p = lock_path("/t/order/g".into(), '/', "Op", "g").unwrap();
    std::thread::spawn(move || drop(p)).join().unwrap();
    drop(lock_disk(4_000_026, "Op", "d").unwrap());
}
