//! A meeting point for races: calls whose recorded line starts with a prefix wait, after they
//! have done their work and outside the fake's lock, for a second such call from another
//! thread. Both then pass that point before either goes on, which is the interleaving a
//! check-then-act race needs, made certain rather than left to the scheduler.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The meeting point of a [`super::FakeLinux`]; inert until [`Meet::set`].
#[derive(Debug, Default)]
pub(super) struct Meet {
    state: Mutex<State>,
    met: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The calls that meet, and how long one waits for a partner.
    at: Option<(String, Duration)>,
    /// A call is waiting for a partner.
    waiting: bool,
    /// Counts meetings, so a waiter knows its partner came.
    meetings: u64,
}

impl Meet {
    pub(super) fn set(&self, prefix: &str, wait: Duration) {
        self.lock().at = Some((prefix.to_string(), wait));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called after `call` was made: waits for a partner when `call` is one that meets. A
    /// call that finds none within the wait goes on alone (the other thread may be blocked
    /// on the very lock under test).
    pub(super) fn after(&self, call: &str) {
        let mut s = self.lock();
        let Some((_, wait)) = s.at.as_ref().filter(|(p, _)| call.starts_with(p.as_str())) else {
            return;
        };
        let wait = *wait;
        if s.waiting {
            s.waiting = false;
            s.meetings += 1;
            self.met.notify_all();
            return;
        }
        s.waiting = true;
        let seen = s.meetings;
        let (mut s, _) = (self.met)
            .wait_timeout_while(s, wait, |s| s.meetings == seen)
            .unwrap_or_else(|p| p.into_inner());
        if s.meetings == seen {
            s.waiting = false;
        }
    }
}
