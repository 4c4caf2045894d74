//! A service of the selftest's own, caught in STOP_PENDING (ledger row 40): the selftest
//! creates `csi-proxy-selftest-<pid>` (its own process, demand start, LocalSystem) whose program
//! is the selftest's own, `csi-proxy-ctl selftest-service <release>` (`service.rs`), which holds
//! STOP_PENDING on a stop until the release folder exists. The step starts it, stops it, and
//! while the stop is pending asks `StartServiceW` (modelled: ERROR_SERVICE_ALREADY_RUNNING);
//! then makes the release folder, waits for STOPPED, starts it again (modelled: it works) and
//! stops it (released already: at once). The clean-up deletes the service whatever happened
//! (released and stopped first, so DeleteService's "not running" holds) and removes the folder;
//! a service it cannot delete is named in its answer. No other service is touched.

use super::record::Outcome;
use csi_proxy_host::windows::os::files::utf16;
use csi_proxy_host::windows::os::{OsError, Win32, code};
use std::time::{Duration, Instant};

/// The step, and its clean-up.
pub const STEP: &str = "scratch service: StartServiceW while STOP_PENDING";
pub const CLEAN_UP: &str = "clean-up: DeleteService (scratch service)";

/// SERVICE_STATUS `dwCurrentState` values.
const STOPPED: u32 = 1;
const STOP_PENDING: u32 = 3;
const RUNNING: u32 = 4;

/// How often a wait asks the SCM again.
const POLL: Duration = Duration::from_millis(100);

/// A state's name as SERVICE_STATUS spells it.
fn state_name(state: u32) -> String {
    match state {
        STOPPED => "STOPPED".into(),
        2 => "START_PENDING".into(),
        STOP_PENDING => "STOP_PENDING".into(),
        RUNNING => "RUNNING".into(),
        other => format!("state {other}"),
    }
}

fn shown(r: &Result<(), OsError>) -> String {
    r.as_ref().map_or_else(|e| e.to_string(), |()| "OK".into())
}

/// The service the step makes.
struct Scratch<'a> {
    os: &'a dyn Win32,
    name: String,
    release: String,
    wait: Duration,
    created: bool,
    released: bool,
}

impl Scratch<'_> {
    /// Waits (through `Win32::sleep`, so the simulated SCM's clock moves) until the service is
    /// in `want`; answers how long that took.
    fn wait_for(&self, want: u32) -> Result<Duration, String> {
        let (os, start) = (self.os, self.os.now());
        loop {
            let now = os
                .service_state(&self.name)
                .map_err(|e| format!("QueryServiceStatusEx {}: {e}", self.name))?;
            if now == want {
                return Ok(os.now().saturating_sub(start));
            }
            if os.now().saturating_sub(start) >= self.wait {
                return Err(format!(
                    "{} is {} {:?} after it was asked, not {}",
                    self.name,
                    state_name(now),
                    self.wait,
                    state_name(want)
                ));
            }
            os.sleep(POLL);
        }
    }

    fn release(&mut self) -> Result<(), String> {
        if !self.released {
            self.os
                .create_directory(&utf16(&self.release))
                .map_err(|e| format!("CreateDirectoryW {}: {e}", self.release))?;
            self.released = true;
        }
        Ok(())
    }

    /// The step itself; its answer, or why it failed.
    fn run(&mut self, command_line: &str) -> Result<String, String> {
        let (os, name) = (self.os, self.name.clone());
        os.service_create(&name, command_line)
            .map_err(|e| format!("CreateServiceW {name} ({command_line}): {e}"))?;
        self.created = true;
        os.service_start(&name)
            .map_err(|e| format!("StartServiceW {name}: {e}"))?;
        let up = self.wait_for(RUNNING)?;
        os.service_stop(&name)
            .map_err(|e| format!("ControlService {name} SERVICE_CONTROL_STOP: {e}"))?;
        self.wait_for(STOP_PENDING)?;
        let during = os.service_start(&name);
        let after = os
            .service_state(&name)
            .map_or_else(|e| e.to_string(), state_name);
        let mut answer = format!(
            "{name} RUNNING {} ms after StartServiceW; stopped, and while STOP_PENDING \
             StartServiceW: {} (then {after})",
            up.as_millis(),
            shown(&during)
        );
        self.release()?;
        // Whether a start once the stop completed worked.
        let again = match self.wait_for(STOPPED) {
            Ok(d) => {
                answer += &format!("; released, STOPPED {} ms later", d.as_millis());
                let r = os.service_start(&name);
                answer += &format!("; StartServiceW again: {}", shown(&r));
                if r.is_ok() {
                    let d = self.wait_for(RUNNING)?;
                    answer += &format!(", RUNNING {} ms later", d.as_millis());
                    os.service_stop(&name)
                        .map_err(|e| format!("{answer}; ControlService again: {e}"))?;
                    let d = self.wait_for(STOPPED)?;
                    answer += &format!("; stopped again in {} ms", d.as_millis());
                }
                r.is_ok()
            }
            Err(e) => {
                answer += &format!("; released, but {e}");
                false
            }
        };
        match during {
            Err(e) if e.code == code::SERVICE_ALREADY_RUNNING && again => Ok(format!(
                "{answer} (settles ledger row 40: ERROR_SERVICE_ALREADY_RUNNING while \
                 STOP_PENDING, a start once STOPPED works)"
            )),
            _ => Err(format!(
                "{answer} (ledger row 40 models ERROR_SERVICE_ALREADY_RUNNING while STOP_PENDING, \
                 and a start that works once the stop completed)"
            )),
        }
    }

    /// Waits until the SCM no longer knows the service (DeleteService done, every handle
    /// closed, not running).
    fn wait_gone(&self) -> Result<(), String> {
        let (os, start) = (self.os, self.os.now());
        loop {
            match os.service_state(&self.name) {
                Err(e) if e.code == code::SERVICE_DOES_NOT_EXIST => return Ok(()),
                Err(e) => return Err(format!("QueryServiceStatusEx {}: {e}", self.name)),
                Ok(now) if os.now().saturating_sub(start) >= self.wait => {
                    return Err(format!(
                        "{} still listed ({}) {:?} after DeleteService",
                        self.name,
                        state_name(now),
                        self.wait
                    ));
                }
                Ok(_) => os.sleep(POLL),
            }
        }
    }

    /// Deletes the service whatever happened: released (so a pending stop completes), stopped
    /// (DeleteService removes it only once it is not running), deleted, and waited for until
    /// the SCM no longer knows it; then the release folder is removed.
    fn clean_up(&mut self) -> Result<String, String> {
        let (os, name) = (self.os, self.name.clone());
        let mut left = Vec::new();
        if let Err(e) = self.release() {
            left.push(e);
        }
        match os.service_state(&name) {
            Ok(STOPPED) => {}
            Ok(_) => {
                // Not active, or already stopping: the wait below sees it stop either way.
                let _ = os.service_stop(&name);
                if let Err(e) = self.wait_for(STOPPED) {
                    left.push(e);
                }
            }
            Err(e) => left.push(format!("QueryServiceStatusEx {name}: {e}")),
        }
        let deleted = os
            .service_delete(&name)
            .map_err(|e| format!("DeleteService {name}: {e}"))
            .and_then(|()| self.wait_gone());
        if let Err(e) = deleted {
            left.push(format!(
                "{e}: service {name} is left (marked for deletion if DeleteService answered OK); \
                 remove it with `sc.exe stop {name}` and `sc.exe delete {name}`"
            ));
        }
        if self.released
            && let Err(e) = os.remove_directory(&utf16(&self.release))
        {
            left.push(format!("RemoveDirectoryW {}: {e}", self.release));
        }
        if left.is_empty() {
            Ok(format!("deleted {name}; removed {}", self.release))
        } else {
            Err(left.join("; "))
        }
    }
}

/// Runs the step with `program` (this program's path) as the service's program and the
/// folder `release` as its release entry, then its clean-up; or lists it as not run.
pub(super) fn run(
    out: &mut Outcome,
    os: &dyn Win32,
    program: Option<&str>,
    release: &str,
    wait: Duration,
) {
    let Some(program) = program else {
        out.not_run(STEP, "not run: the selftest cannot name its own program");
        return;
    };
    let mut s = Scratch {
        os,
        name: format!("csi-proxy-selftest-{}", std::process::id()),
        release: release.to_string(),
        wait,
        created: false,
        released: false,
    };
    let t = Instant::now();
    let r = s
        .run(&format!(r#""{program}" selftest-service "{release}""#))
        .map(|a| ((), a));
    let _ = out.record(STEP, t, r);
    if s.created {
        let t = Instant::now();
        let r = s.clean_up().map(|a| ((), a));
        let _ = out.record(CLEAN_UP, t, r);
    }
}
