//! Simulated Service Control Manager and firmware, as Microsoft documents them:
//! - a service is opened with the access rights the caller asks for, and refused with
//!   ERROR_ACCESS_DENIED when its security descriptor does not grant them ("Service Security and
//!   Access Rights");
//! - StartService moves a stopped service to START_PENDING, then RUNNING (or STOPPED, when it
//!   fails) a moment later; one that is not stopped answers ERROR_SERVICE_ALREADY_RUNNING ("An
//!   instance of the service is already running"), also while it is STOP_PENDING (the stopping
//!   instance is still there), a disabled one ERROR_SERVICE_DISABLED;
//! - a STOP control moves it to STOP_PENDING, then STOPPED; a stopped one answers
//!   ERROR_SERVICE_NOT_ACTIVE, a pending one ERROR_SERVICE_CANNOT_ACCEPT_CTRL, one that running
//!   services depend on ERROR_DEPENDENT_SERVICES_RUNNING;
//! - EnumDependentServices lists the active dependents in reverse start order;
//! - CreateService adds a stopped, demand-start service (ERROR_SERVICE_EXISTS for a name taken,
//!   ERROR_SERVICE_MARKED_FOR_DELETE for one marked for deletion); DeleteService "marks a service
//!   for deletion", and the entry goes once it is not running (each call here closes its handle
//!   before it returns); a marked service refuses a start with ERROR_SERVICE_MARKED_FOR_DELETE;
//! - the process of a service created with a program [`SimWindows::hold_stop_for_program`]
//!   names (the selftest's scratch service) holds STOP_PENDING on a stop until the entry its
//!   command line names last exists, at most [`HOLD_LIMIT`]: the model of that program, not of
//!   Windows (ledger row 40).

use super::{OsError, SimWindows, State, Win32Result};
use crate::windows::os::code;
use std::time::Duration;

/// `SERVICE_QUERY_CONFIG`.
pub const QUERY_CONFIG: u32 = 0x1;
/// `SERVICE_QUERY_STATUS`.
pub const QUERY_STATUS: u32 = 0x4;
/// `SERVICE_ENUMERATE_DEPENDENTS`.
pub const ENUMERATE_DEPENDENTS: u32 = 0x8;
/// `SERVICE_START`.
pub const START: u32 = 0x10;
/// `SERVICE_STOP`.
pub const STOP: u32 = 0x20;
/// Every right above.
pub const ALL: u32 = QUERY_CONFIG | QUERY_STATUS | ENUMERATE_DEPENDENTS | START | STOP;
/// `DELETE`, the standard right DeleteService needs; its creator is granted it.
pub const DELETE: u32 = 0x1_0000;
/// How long the modelled scratch-service process holds STOP_PENDING at most before it stops
/// anyway (`csi-proxy-ctl selftest-service`'s bound).
pub const HOLD_LIMIT: Duration = Duration::from_secs(120);

/// What the simulated SCM does beyond each service: the programs it models, and an answer a test
/// makes it give instead of the modelled one.
#[derive(Debug, Default)]
pub(super) struct Scm {
    /// Programs whose service process holds STOP_PENDING until its release entry exists.
    holding: Vec<String>,
    /// What StartService answers for a service in STOP_PENDING instead of
    /// ERROR_SERVICE_ALREADY_RUNNING (a Windows that answered otherwise, for the selftest's
    /// failure path).
    start_while_stopping: Option<u32>,
}

const STOPPED: u32 = 1;
const START_PENDING: u32 = 2;
const STOP_PENDING: u32 = 3;
const RUNNING: u32 = 4;
/// How long a start or stop stays pending.
const PENDING: Duration = Duration::from_millis(500);

/// A simulated service.
#[derive(Debug, Clone)]
pub(super) struct Service {
    display: String,
    start_type: u32,
    state: u32,
    /// The state a pending transition ends in, and when.
    settles: Option<(Duration, u32)>,
    /// The rights the daemon's account is granted.
    granted: u32,
    /// Services that depend on this one.
    dependents: Vec<String>,
    /// Whether a start fails (the process exits at once).
    fails: bool,
    /// When it last started, for the stop order.
    started_at: Duration,
    /// Failure actions are configured (`sc.exe failure ... actions= restart/...`).
    recovery: bool,
    /// The failure-actions flag as configured (`sc.exe failureflag`, QueryServiceConfig2).
    flag_configured: bool,
    /// The flag the SCM acts on: the configured one as it was at the last system start.
    flag_in_effect: bool,
    /// Marked for deletion (DeleteService), removed once stopped.
    marked: bool,
    /// Its process holds STOP_PENDING until this entry exists (see [`Scm`]).
    release: Option<String>,
}

impl Service {
    fn new(display: &str, start_type: u32, running: bool, granted: u32) -> Self {
        Service {
            display: display.into(),
            start_type,
            state: if running { RUNNING } else { STOPPED },
            settles: None,
            granted,
            dependents: Vec::new(),
            fails: false,
            started_at: Duration::ZERO,
            recovery: false,
            flag_configured: false,
            flag_in_effect: false,
            marked: false,
            release: None,
        }
    }
}

/// The last argument of a command line: the quoted string at its end, or its last word.
fn last_argument(command_line: &str) -> Option<String> {
    let c = command_line.trim_end();
    match c.strip_suffix('"') {
        Some(open) => open.rsplit_once('"').map(|(_, a)| a.to_string()),
        None => c.rsplit(' ').next().map(str::to_string),
    }
}

impl State {
    fn service(&mut self, name: &str, right: u32) -> Win32Result<&mut Service> {
        let (now, key) = (self.clock, name.to_ascii_lowercase());
        let release = self.services.get(&key).and_then(|s| s.release.clone());
        let released = release.is_some_and(|r| self.entry(&r).is_some());
        let svc = self
            .services
            .get_mut(&key)
            .ok_or(OsError::new(code::SERVICE_DOES_NOT_EXIST))?;
        if let Some((at, to)) = svc.settles
            && (at <= now || (svc.state == STOP_PENDING && released))
        {
            svc.state = to;
            svc.settles = None;
        }
        if svc.marked && svc.state == STOPPED {
            self.services.remove(&key);
            return Err(OsError::new(code::SERVICE_DOES_NOT_EXIST));
        }
        let svc = self.services.get_mut(&key).expect("looked up above");
        if svc.granted & right != right {
            return Err(OsError::new(code::ACCESS_DENIED));
        }
        Ok(svc)
    }

    fn state_of(&mut self, name: &str) -> u32 {
        self.service(name, 0).map_or(STOPPED, |s| s.state)
    }
}

pub(super) fn state(s: &mut State, name: &str) -> Win32Result<u32> {
    Ok(s.service(name, QUERY_STATUS)?.state)
}

pub(super) fn config(s: &mut State, name: &str) -> Win32Result<(String, u32)> {
    let svc = s.service(name, QUERY_CONFIG)?;
    Ok((svc.display.clone(), svc.start_type))
}

pub(super) fn failure_flag(s: &mut State, name: &str) -> Win32Result<bool> {
    Ok(s.service(name, QUERY_CONFIG)?.flag_configured)
}

pub(super) fn start(s: &mut State, name: &str) -> Win32Result<()> {
    let (now, instead) = (s.clock, s.scm.start_while_stopping);
    let svc = s.service(name, START)?;
    if svc.marked {
        return Err(OsError::new(code::SERVICE_MARKED_FOR_DELETE));
    }
    if svc.start_type == 4 {
        return Err(OsError::new(code::SERVICE_DISABLED));
    }
    if let (STOP_PENDING, Some(code)) = (svc.state, instead) {
        return Err(OsError::new(code));
    }
    if svc.state != STOPPED {
        return Err(OsError::new(code::SERVICE_ALREADY_RUNNING));
    }
    svc.state = START_PENDING;
    svc.settles = Some((now + PENDING, if svc.fails { STOPPED } else { RUNNING }));
    svc.started_at = now;
    Ok(())
}

pub(super) fn stop(s: &mut State, name: &str) -> Win32Result<()> {
    let now = s.clock;
    let dependents = s.service(name, STOP)?.dependents.clone();
    if dependents.iter().any(|d| s.state_of(d) != STOPPED) {
        return Err(OsError::new(code::DEPENDENT_SERVICES_RUNNING));
    }
    let svc = s.service(name, STOP)?;
    match svc.state {
        STOPPED => Err(OsError::new(code::SERVICE_NOT_ACTIVE)),
        START_PENDING | STOP_PENDING => Err(OsError::new(code::SERVICE_CANNOT_ACCEPT_CTRL)),
        _ => {
            svc.state = STOP_PENDING;
            // A holding process stops once its release entry exists (checked on every call,
            // `State::service`), at its bound at the latest.
            let takes = if svc.release.is_some() {
                HOLD_LIMIT
            } else {
                PENDING
            };
            svc.settles = Some((now + takes, STOPPED));
            Ok(())
        }
    }
}

pub(super) fn create(s: &mut State, name: &str, command_line: &str) -> Win32Result<()> {
    if name.is_empty() || name.contains(['/', '\\']) {
        // ERROR_INVALID_NAME: "Forward-slash (/) and backslash (\) are not valid service name
        // characters".
        return Err(OsError::new(123));
    }
    let key = name.to_ascii_lowercase();
    if let Some(svc) = s.services.get(&key) {
        return Err(OsError::new(if svc.marked {
            code::SERVICE_MARKED_FOR_DELETE
        } else {
            code::SERVICE_EXISTS
        }));
    }
    let program = command_line.trim_start_matches('"');
    let holds = s.scm.holding.iter().any(|p| {
        program
            .get(..p.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(p))
    });
    let mut svc = Service::new(name, 3, false, ALL | DELETE);
    svc.release = holds.then(|| last_argument(command_line)).flatten();
    s.services.insert(key, svc);
    Ok(())
}

pub(super) fn delete(s: &mut State, name: &str) -> Win32Result<()> {
    let key = name.to_ascii_lowercase();
    let svc = s.service(name, DELETE)?;
    if svc.marked {
        return Err(OsError::new(code::SERVICE_MARKED_FOR_DELETE));
    }
    svc.marked = true;
    if svc.state == STOPPED {
        s.services.remove(&key);
    }
    Ok(())
}

pub(super) fn active_dependents(s: &mut State, name: &str) -> Win32Result<Vec<String>> {
    let dependents = s.service(name, ENUMERATE_DEPENDENTS)?.dependents.clone();
    let mut active: Vec<(Duration, String)> = dependents
        .into_iter()
        .filter_map(|d| {
            let svc = s.service(&d, 0).ok()?;
            (svc.state != STOPPED).then_some((svc.started_at, d))
        })
        .collect();
    // Reverse start order: the last started is stopped first.
    active.sort_by_key(|a| std::cmp::Reverse(a.0));
    Ok(active.into_iter().map(|(_, d)| d).collect())
}

impl SimWindows {
    /// Installs a service: its display name, start type (2 automatic, 3 manual, 4 disabled),
    /// whether it runs, and the rights the daemon's account is granted on it ([`ALL`], or fewer).
    pub fn add_service(
        &self,
        name: &str,
        display: &str,
        start_type: u32,
        running: bool,
        granted: u32,
    ) {
        self.lock().services.insert(
            name.to_ascii_lowercase(),
            Service::new(display, start_type, running, granted),
        );
    }

    /// Models `program` (a path, matched at the start of a service's command line,
    /// case-insensitively): the process of a service created with it, told to stop, reports
    /// STOP_PENDING and holds it until the entry its command line names last exists, at most
    /// [`HOLD_LIMIT`], then STOPPED (`csi-proxy-ctl selftest-service <release>`, ledger row 40).
    pub fn hold_stop_for_program(&self, program: &str) {
        self.lock().scm.holding.push(program.to_string());
    }

    /// StartService answers `code` for a service in STOP_PENDING instead of
    /// ERROR_SERVICE_ALREADY_RUNNING: a Windows that does not count a stopping instance as
    /// running (ledger row 40's inferred part), for the selftest's failure path.
    pub fn answer_start_while_stopping(&self, code: u32) {
        self.lock().scm.start_while_stopping = Some(code);
    }

    /// Whether a service of that name exists (marked for deletion or not).
    pub fn service_exists(&self, name: &str) -> bool {
        let mut s = self.lock();
        s.service(name, 0).is_ok()
    }

    /// `ChangeServiceConfig2(SERVICE_CONFIG_FAILURE_ACTIONS)` with a restart action (`restart`)
    /// or none.
    pub fn set_failure_actions(&self, name: &str, restart: bool) {
        if let Some(s) = self.lock().services.get_mut(&name.to_ascii_lowercase()) {
            s.recovery = restart;
        }
    }

    /// `ChangeServiceConfig2(SERVICE_CONFIG_FAILURE_ACTIONS_FLAG)`: configured at once (what
    /// QueryServiceConfig2 answers), acted on from the next system start
    /// (SERVICE_FAILURE_ACTIONS_FLAG, Remarks: "The change takes effect the next time the
    /// system is started"; ledger row 90).
    pub fn set_failure_flag(&self, name: &str, on: bool) {
        if let Some(s) = self.lock().services.get_mut(&name.to_ascii_lowercase()) {
            s.flag_configured = on;
        }
    }

    /// The failure-actions flag as configured (`QueryServiceConfig2`), which says nothing of
    /// whether the SCM acts on it yet.
    pub fn failure_flag(&self, name: &str) -> Option<bool> {
        let s = self.lock();
        s.services
            .get(&name.to_ascii_lowercase())
            .map(|svc| svc.flag_configured)
    }

    /// The system starts again: the SCM reads every service's flag as configured.
    pub fn restart_system_services(&self) {
        for svc in self.lock().services.values_mut() {
            svc.flag_in_effect = svc.flag_configured;
        }
    }

    /// The running service's process ends: having reported SERVICE_STOPPED with
    /// `dwWin32ExitCode` `exit` (`Some`), or without reporting it (`None`: a crash, a kill).
    /// Answers whether the SCM queues its failure actions, as SERVICE_FAILURE_ACTIONS_FLAG
    /// says: always for an end without STOPPED; for STOPPED with a nonzero code only when the
    /// flag is in effect. A queued restart starts it again.
    pub fn service_process_ends(&self, name: &str, exit: Option<u32>) -> bool {
        let mut s = self.lock();
        let now = s.clock;
        let Some(svc) = s.services.get_mut(&name.to_ascii_lowercase()) else {
            return false;
        };
        svc.state = STOPPED;
        svc.settles = None;
        let queued = svc.recovery
            && match exit {
                None => true,
                Some(code) => code != 0 && svc.flag_in_effect,
            };
        if queued {
            svc.state = START_PENDING;
            svc.settles = Some((now + PENDING, RUNNING));
            svc.started_at = now;
        }
        queued
    }

    /// Makes `dependent` depend on `service`.
    pub fn add_dependency(&self, service: &str, dependent: &str) {
        if let Some(s) = self.lock().services.get_mut(&service.to_ascii_lowercase()) {
            s.dependents.push(dependent.to_ascii_lowercase());
        }
    }

    /// Makes the service's process exit as soon as it starts.
    pub fn break_service(&self, name: &str) {
        if let Some(s) = self.lock().services.get_mut(&name.to_ascii_lowercase()) {
            s.fails = true;
        }
    }

    /// Sets the raw SMBIOS table the firmware offers (`None`: none) and what WMI's Win32_BIOS
    /// reports.
    pub fn set_firmware(&self, smbios: Option<Vec<u8>>, wmi_serial: &str) {
        let mut s = self.lock();
        s.smbios = smbios;
        s.wmi_serial = wmi_serial.into();
    }
}
