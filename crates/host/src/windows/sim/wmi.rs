//! Simulated WMI: each call runs on a thread of its namespace's pool, with the limits and
//! answers of the real WMI layer ([`Namespaces`]), and a namespace's provider can hang
//! (`hang_wmi_namespace`): its calls never answer while it does, holding that namespace's
//! threads only. A caller stops waiting at its deadline (or the call limit) and gets
//! UNAVAILABLE; a call not started by then is dropped.

use super::{SimWindows, State, Win32Result, lock_state, smb};
use crate::windows::os::pool::Namespaces;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `ROOT\Microsoft\Windows\SMB`: SMB global mappings.
pub(super) const SMB: &str = r"ROOT\Microsoft\Windows\SMB";
/// `ROOT\Microsoft\Windows\Storage`: volume format.
pub(super) const STORAGE: &str = r"ROOT\Microsoft\Windows\Storage";
/// `ROOT\CIMV2`: page files, the BIOS serial.
pub(super) const CIMV2: &str = r"ROOT\CIMV2";

/// The WMI namespaces' thread pools of one simulated machine.
pub(super) fn namespaces() -> Namespaces<()> {
    Namespaces::new(|| ())
}

impl SimWindows {
    /// Runs WMI call `call` of `namespace` on that namespace's pool: it waits while the
    /// namespace hangs, then takes its fault, fails while WMI restarts, and runs `f`.
    pub(super) fn wmi_call<R: Send + 'static>(
        &self,
        namespace: &'static str,
        call: &'static str,
        f: impl FnOnce(&mut State) -> Win32Result<R> + Send + 'static,
    ) -> Win32Result<R> {
        self.wmi_call_blocked(namespace, call, |_| false, f)
    }

    /// [`Self::wmi_call`] for a call that also blocks (on its WMI thread, the machine's lock
    /// released) while `blocked` says so: a mapping's Create while its server does not answer.
    pub(super) fn wmi_call_blocked<R: Send + 'static>(
        &self,
        namespace: &'static str,
        call: &'static str,
        blocked: impl Fn(&State) -> bool + Send + 'static,
        f: impl FnOnce(&mut State) -> Win32Result<R> + Send + 'static,
    ) -> Win32Result<R> {
        let state: Arc<Mutex<State>> = self.state.clone();
        self.wmi.run_in(namespace, move |_| {
            let mut s = lock_state(&state);
            while s.wmi_hung.contains(namespace) || blocked(&s) {
                drop(s);
                std::thread::sleep(Duration::from_millis(2));
                s = lock_state(&state);
            }
            s.take_fault(call)?;
            smb::connected(&s)?;
            f(&mut s)
        })
    }

    /// Makes `namespace`'s provider hang (its calls never answer) or answer again; e.g.
    /// `r"ROOT\Microsoft\Windows\SMB"`.
    pub fn hang_wmi_namespace(&self, namespace: &'static str, hangs: bool) {
        let mut s = self.lock();
        if hangs {
            s.wmi_hung.insert(namespace);
        } else {
            s.wmi_hung.remove(namespace);
        }
    }
}
