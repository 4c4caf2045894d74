//! A graceful stop on console control events, for the daemon outside service mode (a HostProcess
//! pod, a console, a supervisor).
//!
//! What Windows documents (HandlerRoutine, learn.microsoft.com/windows/console/handlerroutine):
//! the handler runs on a new thread of the process; for CTRL_C_EVENT and CTRL_BREAK_EVENT the
//! process goes on once a handler returns TRUE, and there is no time limit. CTRL_CLOSE_EVENT,
//! CTRL_LOGOFF_EVENT and CTRL_SHUTDOWN_EVENT "give the process an opportunity to clean up before
//! termination": whether the handler returns TRUE or FALSE, the process is then terminated
//! (TRUE: "the system terminates the process"; FALSE: the default handler calls ExitProcess),
//! and a handler that has not returned is cut off when the event's time-out elapses (the page's
//! "Timeouts" table, [`time_limit`]). Deleting a HostProcess pod sends its process
//! CTRL_SHUTDOWN_EVENT (the runtime's translation of the kubelet's TERM, delivered by a thread
//! it starts in the process) and terminates it once the pod's grace period is over (ledger row
//! 87); with no handler of ours the default handler would call ExitProcess at once: no GOAWAY,
//! calls in flight failing, a format cut off.
//!
//! So [`ConsoleStop::handle`] asks the daemon to stop for every one of these events, and for the
//! three that end the process it does not return until the daemon says it has stopped
//! ([`ConsoleStop::stopped`]) — the process then ends with the daemon's own exit, inside the
//! event's time limit when the drain fits in it. The logic is here, over no Win32 call, so the
//! simulated Windows (`sim::console`) runs it as the system would; the one real call,
//! `SetConsoleCtrlHandler`, is in `win32::console`.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// A console control event, as `HandlerRoutine`'s `dwCtrlType` numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlEvent {
    /// CTRL_C_EVENT (0): Ctrl+C, or GenerateConsoleCtrlEvent.
    C,
    /// CTRL_BREAK_EVENT (1): Ctrl+Break, or GenerateConsoleCtrlEvent.
    Break,
    /// CTRL_CLOSE_EVENT (2): the console is closed (or "End Task").
    Close,
    /// CTRL_LOGOFF_EVENT (5): a user is logging off.
    Logoff,
    /// CTRL_SHUTDOWN_EVENT (6): the system is shutting down (or a container is stopped).
    Shutdown,
}

impl CtrlEvent {
    /// The event numbered `ty` by the system; `None` for a number the page does not list.
    pub fn from_raw(ty: u32) -> Option<Self> {
        Some(match ty {
            0 => Self::C,
            1 => Self::Break,
            2 => Self::Close,
            5 => Self::Logoff,
            6 => Self::Shutdown,
            _ => return None,
        })
    }

    /// The event's number (`dwCtrlType`).
    pub fn raw(self) -> u32 {
        match self {
            Self::C => 0,
            Self::Break => 1,
            Self::Close => 2,
            Self::Logoff => 5,
            Self::Shutdown => 6,
        }
    }

    /// The name the page gives it, for the log.
    pub fn name(self) -> &'static str {
        match self {
            Self::C => "CTRL_C_EVENT",
            Self::Break => "CTRL_BREAK_EVENT",
            Self::Close => "CTRL_CLOSE_EVENT",
            Self::Logoff => "CTRL_LOGOFF_EVENT",
            Self::Shutdown => "CTRL_SHUTDOWN_EVENT",
        }
    }

    /// Whether the process is terminated once the handler returns (or its time-out elapses):
    /// CLOSE, LOGOFF and SHUTDOWN. Ctrl+C and Ctrl+Break leave it running.
    pub fn ends_the_process(self) -> bool {
        matches!(self, Self::Close | Self::Logoff | Self::Shutdown)
    }
}

/// How long the system waits for the handler of `event` before it terminates the process, as
/// HandlerRoutine's "Timeouts" table documents it (the defaults of the system parameters it
/// names): CTRL_CLOSE_EVENT 5000 ms (`SPI_GETHUNGAPPTIMEOUT`); CTRL_LOGOFF_EVENT and
/// CTRL_SHUTDOWN_EVENT 5000 ms for a process that is not a service (`SPI_GETWAITTOKILLTIMEOUT`),
/// CTRL_SHUTDOWN_EVENT 20000 ms for a service process (`SPI_GETWAITTOKILLSERVICETIMEOUT`);
/// CTRL_C and CTRL_BREAK no time-out (`None`). Calls in flight longer than this are cut off by
/// the system, whatever the daemon does: the drain gets what the event leaves it.
pub fn time_limit(event: CtrlEvent, service: bool) -> Option<Duration> {
    match event {
        CtrlEvent::C | CtrlEvent::Break => None,
        CtrlEvent::Close => Some(Duration::from_millis(5000)),
        CtrlEvent::Shutdown if service => Some(Duration::from_millis(20000)),
        CtrlEvent::Logoff | CtrlEvent::Shutdown => Some(Duration::from_millis(5000)),
    }
}

/// The daemon's side of the console control handler: the first event asks for a stop (through
/// the callback given to [`ConsoleStop::new`]); a handler thread of an event that ends the
/// process waits until [`ConsoleStop::stopped`].
pub struct ConsoleStop {
    ask: Box<dyn Fn(CtrlEvent) + Send + Sync>,
    state: Mutex<Progress>,
    done: Condvar,
}

#[derive(Default)]
struct Progress {
    asked: bool,
    stopped: bool,
}

impl ConsoleStop {
    /// A stop that calls `ask` once, with the first event received.
    pub fn new(ask: impl Fn(CtrlEvent) + Send + Sync + 'static) -> Self {
        Self {
            ask: Box::new(ask),
            state: Mutex::new(Progress::default()),
            done: Condvar::new(),
        }
    }

    /// The handler routine's answer to event `ty`: TRUE (handled) for every listed event. It
    /// returns at once for Ctrl+C and Ctrl+Break (the process goes on and stops by itself), and
    /// only once the daemon has stopped for the events after which the system terminates the
    /// process. A number the page does not list is left to the next handler (FALSE).
    pub fn handle(&self, ty: u32) -> bool {
        let Some(event) = CtrlEvent::from_raw(ty) else {
            return false;
        };
        let first = {
            let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            !std::mem::replace(&mut s.asked, true)
        };
        if first {
            (self.ask)(event);
        }
        if event.ends_the_process() {
            let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            while !s.stopped {
                s = self.done.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
        }
        true
    }

    /// Called once the daemon has stopped (endpoints closed, calls in flight finished): lets
    /// every waiting handler thread return, after which the system ends the process.
    pub fn stopped(&self) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.stopped = true;
        self.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_limits_are_the_documented_ones() {
        for ty in [0, 1, 2, 5, 6] {
            assert_eq!(CtrlEvent::from_raw(ty).unwrap().raw(), ty);
        }
        for ty in [3, 4, 7] {
            assert_eq!(CtrlEvent::from_raw(ty), None);
        }
        assert_eq!(time_limit(CtrlEvent::C, false), None);
        assert_eq!(time_limit(CtrlEvent::Break, true), None);
        assert_eq!(
            time_limit(CtrlEvent::Close, false),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            time_limit(CtrlEvent::Shutdown, false),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            time_limit(CtrlEvent::Shutdown, true),
            Some(Duration::from_secs(20))
        );
    }
}
