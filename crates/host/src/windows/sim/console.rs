//! Simulated console control events, as HandlerRoutine and SetConsoleCtrlHandler document them
//! (learn.microsoft.com/windows/console/handlerroutine, .../setconsolectrlhandler):
//! * handlers are called "on a last-registered, first-called basis until one of the handlers
//!   returns TRUE"; if none does, the default handler calls ExitProcess;
//! * the handler runs on "a new thread in the process";
//! * after CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT and CTRL_SHUTDOWN_EVENT the process is terminated:
//!   when a handler returns TRUE ("the system terminates the process"), or when the event's
//!   time-out elapses with the handler still running ("Timeouts" table, `console::time_limit`);
//! * CTRL_C_EVENT and CTRL_BREAK_EVENT have no time-out, and a handler returning TRUE leaves the
//!   process running.
//!
//! Nothing is really terminated: the console keeps a journal (what the test notes, and how the
//! process ended) so a test can see whether the daemon's stop finished before the end.

use crate::windows::console::{CtrlEvent, time_limit};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

type Handler = Arc<dyn Fn(u32) -> bool + Send + Sync>;

/// How the process ended after a control event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// No handler returned TRUE: the default handler called ExitProcess.
    DefaultHandler,
    /// A handler returned TRUE for an event that ends the process.
    HandlerReturned,
    /// The handler was still running when the event's time-out elapsed.
    TimedOut,
}

/// A console the simulated process is attached to.
pub struct SimConsole {
    service: bool,
    limits: fn(CtrlEvent, bool) -> Option<Duration>,
    handlers: Mutex<Vec<Handler>>,
    journal: Arc<Mutex<Vec<String>>>,
}

impl SimConsole {
    /// A console of a process that is a service (`service`) or not, with the documented
    /// time-outs.
    pub fn new(service: bool) -> Self {
        Self::with_time_limits(service, time_limit)
    }

    /// The same, with other time-outs (a test that waits one out need not wait 5 s).
    pub fn with_time_limits(
        service: bool,
        limits: fn(CtrlEvent, bool) -> Option<Duration>,
    ) -> Self {
        Self {
            service,
            limits,
            handlers: Mutex::new(Vec::new()),
            journal: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// `SetConsoleCtrlHandler(handler, TRUE)`: adds `handler` to the process's list.
    pub fn set_ctrl_handler(&self, handler: impl Fn(u32) -> bool + Send + Sync + 'static) {
        self.lock_handlers().push(Arc::new(handler));
    }

    /// Writes `what` into the journal (the test's daemon saying what it has done).
    pub fn note(&self, what: &str) {
        note(&self.journal, what);
    }

    /// What was noted, and how the process ended, in order.
    pub fn journal(&self) -> Vec<String> {
        self.journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sends `event` to the process (as `GenerateConsoleCtrlEvent`, closing the console, or the
    /// system's shutdown would): the handlers run on a new thread.
    pub fn generate(&self, event: CtrlEvent) -> Delivery {
        let handlers: Vec<Handler> = self.lock_handlers().iter().rev().cloned().collect();
        let (tx, rx) = mpsc::channel();
        let journal = self.journal.clone();
        std::thread::spawn(move || {
            let handled = handlers.iter().any(|h| h(event.raw()));
            let ending = match (handled, event.ends_the_process()) {
                (false, _) => Some(Ending::DefaultHandler),
                (true, true) => Some(Ending::HandlerReturned),
                (true, false) => None,
            };
            if let Some(e) = ending {
                note(&journal, &format!("terminated: {e:?}"));
            }
            let _ = tx.send(ending);
        });
        Delivery {
            rx,
            limit: (self.limits)(event, self.service),
            journal: self.journal.clone(),
        }
    }

    fn lock_handlers(&self) -> std::sync::MutexGuard<'_, Vec<Handler>> {
        self.handlers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn note(journal: &Mutex<Vec<String>>, what: &str) {
    journal
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(what.to_string());
}

/// One event on its way through the handlers.
pub struct Delivery {
    rx: mpsc::Receiver<Option<Ending>>,
    limit: Option<Duration>,
    journal: Arc<Mutex<Vec<String>>>,
}

impl Delivery {
    /// Waits for the outcome as the system does: how the process ended, or `None` when a
    /// handler took an event that leaves the process running. A handler still running at the
    /// event's time-out is cut off there.
    pub fn outcome(self) -> Option<Ending> {
        match self.limit {
            None => self.rx.recv().unwrap_or(Some(Ending::DefaultHandler)),
            Some(limit) => match self.rx.recv_timeout(limit) {
                Ok(ending) => ending,
                Err(_) => {
                    note(&self.journal, "terminated: TimedOut");
                    Some(Ending::TimedOut)
                }
            },
        }
    }

    /// The outcome if the handlers have finished within `wait`; `Err(self)` while one still
    /// runs (for a test that looks before letting the daemon finish).
    pub fn finished_within(self, wait: Duration) -> Result<Option<Ending>, Self> {
        match self.rx.recv_timeout(wait) {
            Ok(ending) => Ok(ending),
            Err(_) => Err(self),
        }
    }
}
