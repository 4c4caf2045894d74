//! A test's say over every seam call, for deterministic simulation (many seeded node
//! lifetimes): before each call the hook decides whether it goes through, fails with an error,
//! answers late, or finds the daemon dead. The hook is the test's own seeded random source, so
//! a run repeats exactly from its seed. This models no Windows behaviour of its own: the errors
//! a hook picks are its choice (the simulation draws from the transient ones System Error
//! Codes lists), and the simulator's documented behaviours stay as the ledger says.

use super::*;

/// What happens to one seam call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disturbance {
    /// The call goes through.
    None,
    /// The call fails with this error and changes nothing.
    Fail(OsError),
    /// The call goes through after this much simulated time (a slow device, a busy WMI).
    Late(Duration),
    /// The daemon is killed before this call: it and every later call fail until
    /// [`SimWindows::revive`], as if nothing after this point ever ran.
    Crash,
}

/// The code every call answers while the daemon is dead (ERROR_PROCESS_ABORTED: "The process
/// terminated unexpectedly"); nothing the hosts retry on.
pub const CRASHED: u32 = 1067;

/// The hook and whether the daemon is dead.
#[derive(Default)]
pub(super) struct Chaos {
    hook: Option<Box<dyn FnMut(&'static str) -> Disturbance + Send>>,
    dead: bool,
}

impl std::fmt::Debug for Chaos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chaos")
            .field("hook", &self.hook.is_some())
            .field("dead", &self.dead)
            .finish()
    }
}

impl State {
    /// The hook's decision for `call`, applied: Err when the call must not go through.
    pub(super) fn disturb(&mut self, call: &'static str) -> Win32Result<()> {
        let crashed = || OsError::with_message(CRASHED, "the daemon was killed");
        if self.chaos.dead {
            return Err(crashed());
        }
        let Some(hook) = self.chaos.hook.as_mut() else {
            return Ok(());
        };
        match hook(call) {
            Disturbance::None => Ok(()),
            Disturbance::Fail(e) => Err(e),
            Disturbance::Late(d) => {
                self.clock += d;
                self.settle();
                Ok(())
            }
            Disturbance::Crash => {
                self.chaos.dead = true;
                Err(crashed())
            }
        }
    }
}

impl SimWindows {
    /// Lets `hook` decide the fate of every seam call from now on (`None` ends it).
    pub fn set_chaos(&self, hook: Option<Box<dyn FnMut(&'static str) -> Disturbance + Send>>) {
        self.lock().chaos.hook = hook;
    }

    /// Whether a [`Disturbance::Crash`] killed the daemon.
    pub fn is_dead(&self) -> bool {
        self.lock().chaos.dead
    }

    /// After a crash: the next daemon's calls go through again (the machine kept everything
    /// the dead one did before it died).
    pub fn revive(&self) {
        self.lock().chaos.dead = false;
    }
}
