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
    /// The call waits, the machine unlocked for every other caller, until
    /// [`SimWindows::release_hung`] (a device or provider that stops answering past the
    /// caller's deadline); then it goes through, or fails if the daemon was killed meanwhile.
    /// Only the calls a host makes on its own thread wait; WMI calls (on a pool thread) and
    /// directory enumerations go through at once.
    Hang,
}

/// The code every call answers while the daemon is dead (ERROR_PROCESS_ABORTED: "The process
/// terminated unexpectedly"); nothing the hosts retry on.
pub const CRASHED: u32 = 1067;

/// What a call of a killed daemon answers.
fn crashed() -> OsError {
    OsError::with_message(CRASHED, "the daemon was killed")
}

/// The hook, whether the daemon is dead, and the calls it hangs.
#[derive(Default)]
pub(super) struct Chaos {
    hook: Option<Box<dyn FnMut(&'static str) -> Disturbance + Send>>,
    dead: bool,
    /// The hook hung the call being entered.
    hang_next: bool,
    /// The I/O control code whose next call hangs.
    hang_ioctl: Option<u32>,
    /// Calls hung so far (each call's ticket is its number among them), calls released, and
    /// calls waiting now.
    hung: u64,
    released: u64,
    waiting: usize,
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
        if self.chaos.dead {
            return Err(crashed());
        }
        self.chaos.hang_next = false;
        let Some(hook) = self.chaos.hook.as_mut() else {
            return Ok(());
        };
        match hook(call) {
            Disturbance::None => Ok(()),
            Disturbance::Hang => {
                self.chaos.hang_next = true;
                Ok(())
            }
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
    /// Locks the machine for seam call `call` and takes its fault; a call the hook hangs waits
    /// here, the machine unlocked, until the test releases it.
    pub(super) fn enter(&self, call: &'static str) -> Win32Result<MutexGuard<'_, State>> {
        self.enter_ioctl(call, None)
    }

    /// [`Self::enter`] for `DeviceIoControl` with code `ioctl`, which [`Self::hang_next_ioctl`]
    /// may have asked to hang.
    pub(super) fn enter_ioctl(
        &self,
        call: &'static str,
        ioctl: Option<u32>,
    ) -> Win32Result<MutexGuard<'_, State>> {
        let mut s = self.lock();
        s.take_fault(call)?;
        let picked = ioctl.is_some() && s.chaos.hang_ioctl == ioctl;
        if picked {
            s.chaos.hang_ioctl = None;
        }
        if std::mem::take(&mut s.chaos.hang_next) || picked {
            let ticket = s.chaos.hung;
            s.chaos.hung += 1;
            s.chaos.waiting += 1;
            while s.chaos.released <= ticket {
                s = self.gate.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.chaos.waiting -= 1;
            // Hung past the caller's deadline: the daemon's work after this call meets it.
            csi_proxy_core::deadline::expire();
            if s.chaos.dead {
                return Err(crashed());
            }
        }
        Ok(s)
    }

    /// Hangs the next `DeviceIoControl` with code `ioctl`, whichever thread makes it, as
    /// [`Disturbance::Hang`] does, until [`Self::release_hung`]: a test's way to stop one caller
    /// at a chosen point while another runs.
    pub fn hang_next_ioctl(&self, ioctl: u32) {
        self.lock().chaos.hang_ioctl = Some(ioctl);
    }

    /// How many calls the hook hung that still wait.
    pub fn hung_calls(&self) -> usize {
        self.lock().chaos.waiting
    }

    /// Lets every call hung so far go on.
    pub fn release_hung(&self) {
        let mut s = self.lock();
        s.chaos.released = s.chaos.hung;
        drop(s);
        self.gate.notify_all();
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::os::files::FileApi;
    use std::sync::Arc;

    fn wide(s: &str) -> Vec<u16> {
        s.encode_utf16().collect()
    }

    /// Waits (polling, bounded) until `n` calls are hung.
    fn until_hung(sim: &SimWindows, n: usize) {
        for _ in 0..10_000 {
            if sim.hung_calls() == n {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("{} calls hung, not {n}", sim.hung_calls());
    }

    #[test]
    fn a_hung_call_waits_while_others_go_through_and_goes_on_when_released() {
        let sim = Arc::new(SimWindows::new());
        let mut first = true;
        sim.set_chaos(Some(Box::new(move |_| {
            if std::mem::take(&mut first) {
                Disturbance::Hang
            } else {
                Disturbance::None
            }
        })));
        let hung = std::thread::spawn({
            let sim = sim.clone();
            move || sim.create_directory(&wide(r"C:\a"))
        });
        until_hung(&sim, 1);
        // The machine is not locked by the hung call: another caller's call goes through.
        sim.create_directory(&wide(r"C:\b")).unwrap();
        assert!(sim.entry_exists(r"C:\b") && !sim.entry_exists(r"C:\a"));
        sim.release_hung();
        hung.join().unwrap().unwrap();
        assert!(sim.entry_exists(r"C:\a"));
        assert_eq!(sim.hung_calls(), 0);
    }

    #[test]
    fn a_hung_call_of_a_killed_daemon_fails_when_released() {
        let sim = Arc::new(SimWindows::new());
        let mut n = 0;
        sim.set_chaos(Some(Box::new(move |_| {
            n += 1;
            match n {
                1 => Disturbance::Hang,
                2 => Disturbance::Crash,
                _ => Disturbance::None,
            }
        })));
        let hung = std::thread::spawn({
            let sim = sim.clone();
            move || sim.create_directory(&wide(r"C:\a"))
        });
        until_hung(&sim, 1);
        assert!(sim.create_directory(&wide(r"C:\b")).is_err());
        sim.release_hung();
        let e = hung.join().unwrap().unwrap_err();
        assert_eq!(e.code, CRASHED, "{e:?}");
        sim.revive();
        assert!(!sim.entry_exists(r"C:\a") && !sim.entry_exists(r"C:\b"));
    }
}
