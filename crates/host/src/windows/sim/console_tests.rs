//! Console control events (`sim/console.rs`, ledger row 87) and the daemon's stop on them
//! (`windows/console.rs`).

use super::console::{Ending, SimConsole};
use crate::windows::console::{ConsoleStop, CtrlEvent};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

/// The simulated Windows ends the process as soon as a handler returns TRUE for an event that
/// ends it, and calls ExitProcess when no handler takes the event; Ctrl+C taken leaves it
/// running. (The sim turned kind, letting a process live on after CTRL_SHUTDOWN_EVENT, would
/// fail this test.)
#[test]
fn a_handler_returning_at_once_lets_the_system_end_the_process_at_once() {
    for event in [CtrlEvent::Close, CtrlEvent::Logoff, CtrlEvent::Shutdown] {
        let console = SimConsole::new(false);
        assert_eq!(
            console.generate(event).outcome(),
            Some(Ending::DefaultHandler),
            "{event:?} with no handler"
        );
        console.set_ctrl_handler(|_| true);
        assert_eq!(
            console.generate(event).outcome(),
            Some(Ending::HandlerReturned),
            "{event:?}"
        );
    }
    let console = SimConsole::new(false);
    console.set_ctrl_handler(|_| false);
    assert_eq!(
        console.generate(CtrlEvent::C).outcome(),
        Some(Ending::DefaultHandler)
    );
    // Last registered, first called: the later handler takes it, the earlier is not asked.
    console.set_ctrl_handler(|ty| ty == 1);
    assert_eq!(console.generate(CtrlEvent::Break).outcome(), None);
}

/// A handler still running when the event's time-out elapses is cut off (the time-outs are
/// shortened here: the documented ones are 5 s and 20 s).
#[test]
fn a_handler_still_running_at_the_time_out_is_cut_off() {
    fn short(event: CtrlEvent, _: bool) -> Option<Duration> {
        event
            .ends_the_process()
            .then_some(Duration::from_millis(50))
    }
    let console = SimConsole::with_time_limits(false, short);
    let (release, wait) = mpsc::channel::<()>();
    let wait = std::sync::Mutex::new(wait);
    console.set_ctrl_handler(move |_| {
        let _ = wait.lock().unwrap().recv();
        true
    });
    assert_eq!(
        console.generate(CtrlEvent::Shutdown).outcome(),
        Some(Ending::TimedOut)
    );
    drop(release);
}

/// The daemon's handler asks for a stop on each event and, for the three after which the
/// system ends the process, holds its thread until the daemon has stopped: the process ends
/// after the drain, not before. Mutation check: `ConsoleStop::handle` returning at once (as a
/// handler that only records the event does) ends the process before "drained".
#[test]
fn the_daemon_stops_before_an_event_that_ends_the_process_ends_it() {
    for event in [CtrlEvent::Close, CtrlEvent::Logoff, CtrlEvent::Shutdown] {
        let console = Arc::new(SimConsole::new(false));
        let (asked_tx, asked_rx) = mpsc::channel();
        let asked_tx = std::sync::Mutex::new(asked_tx);
        let stop = Arc::new(ConsoleStop::new(move |e| {
            let _ = asked_tx.lock().unwrap().send(e);
        }));
        let s = stop.clone();
        console.set_ctrl_handler(move |ty| s.handle(ty));
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let daemon = {
            let console = console.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let e: CtrlEvent = asked_rx.recv().unwrap();
                console.note(&format!("asked: {}", e.name()));
                // Calls in flight finish (the test says when).
                gate_rx.recv().unwrap();
                console.note("drained");
                stop.stopped();
            })
        };
        let delivery = console.generate(event);
        let delivery = match delivery.finished_within(Duration::from_millis(100)) {
            Ok(ending) => panic!("{event:?}: the handler returned before the stop: {ending:?}"),
            Err(d) => d,
        };
        gate_tx.send(()).unwrap();
        assert_eq!(
            delivery.outcome(),
            Some(Ending::HandlerReturned),
            "{event:?}"
        );
        daemon.join().unwrap();
        assert_eq!(
            console.journal(),
            [
                format!("asked: {}", event.name()),
                "drained".to_string(),
                "terminated: HandlerReturned".to_string()
            ],
            "{event:?}"
        );
    }
}

/// Ctrl+C and Ctrl+Break ask for the stop and return at once: the process goes on and ends by
/// itself once the daemon has stopped. A second event does not ask twice.
#[test]
fn ctrl_c_and_break_ask_once_and_leave_the_process_running() {
    for event in [CtrlEvent::C, CtrlEvent::Break] {
        let console = SimConsole::new(false);
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let stop = Arc::new(ConsoleStop::new(move |e| {
            let _ = tx.lock().unwrap().send(e);
        }));
        let s = stop.clone();
        console.set_ctrl_handler(move |ty| s.handle(ty));
        assert_eq!(console.generate(event).outcome(), None);
        assert_eq!(console.generate(event).outcome(), None);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [event]);
    }
}
