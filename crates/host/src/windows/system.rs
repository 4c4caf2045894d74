//! Windows implementation of the system group ([`SystemHost`]): the BIOS serial number from the
//! SMBIOS table, and services through the Service Control Manager. No WMI for services and no
//! child process: upstream's `Win32_Service` methods are replaced by the SCM calls they wrap.

use super::win::{os_error, wide};
use csi_proxy_core::system::{ServiceInfo, ServiceStatus, StartType, SystemHost};
use csi_proxy_core::{Error, Kind, Result};
use std::time::{Duration, Instant};
use windows::Win32::Foundation::{
    ERROR_DEPENDENT_SERVICES_RUNNING, ERROR_INSUFFICIENT_BUFFER, ERROR_MORE_DATA,
    ERROR_SERVICE_ALREADY_RUNNING, ERROR_SERVICE_CANNOT_ACCEPT_CTRL, ERROR_SERVICE_DISABLED,
    ERROR_SERVICE_DOES_NOT_EXIST, ERROR_SERVICE_NOT_ACTIVE, WIN32_ERROR,
};
use windows::Win32::System::Services::{
    CloseServiceHandle, ControlService, ENUM_SERVICE_STATUSW, EnumDependentServicesW,
    OpenSCManagerW, OpenServiceW, QUERY_SERVICE_CONFIGW, QueryServiceConfigW, QueryServiceStatusEx,
    SC_HANDLE, SC_MANAGER_CONNECT, SC_STATUS_PROCESS_INFO, SERVICE_ACTIVE, SERVICE_CONTROL_STOP,
    SERVICE_ENUMERATE_DEPENDENTS, SERVICE_QUERY_CONFIG, SERVICE_QUERY_STATUS, SERVICE_START,
    SERVICE_STATUS, SERVICE_STATUS_PROCESS, SERVICE_STOP,
};
use windows::Win32::System::SystemInformation::{FIRMWARE_TABLE_PROVIDER, GetSystemFirmwareTable};
use windows::core::PCWSTR;

/// How long StartService/StopService wait for the service to reach the state (upstream: 30 s).
pub const WAIT: Duration = Duration::from_secs(30);
/// How often the state is polled while waiting (upstream: 200 ms).
const POLL: Duration = Duration::from_millis(200);

/// Win32 codes of the SCM with a precise kind.
const SCM_KINDS: &[(WIN32_ERROR, Kind)] = &[
    (ERROR_SERVICE_DOES_NOT_EXIST, Kind::NotFound),
    (ERROR_SERVICE_DISABLED, Kind::FailedPrecondition),
    (ERROR_DEPENDENT_SERVICES_RUNNING, Kind::FailedPrecondition),
    (ERROR_SERVICE_CANNOT_ACCEPT_CTRL, Kind::Unavailable),
];

/// The Windows system host.
#[derive(Debug, Default, Clone, Copy)]
pub struct WindowsSystemHost {
    _private: (),
}

impl WindowsSystemHost {
    /// A host acting on the local machine.
    pub fn new() -> Self {
        Self::default()
    }
}

/// A service control manager or service handle, closed on drop.
struct Sc(SC_HANDLE);

impl Drop for Sc {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful OpenSCManagerW/OpenServiceW and is owned
        // by this value only, so it is closed exactly once.
        let _ = unsafe { CloseServiceHandle(self.0) };
    }
}

/// The rights StartService needs: its state, and starting it. Each operation asks only for
/// what it uses ("access rights for a service": a caller granted SERVICE_START alone, as a
/// hardened node may grant the daemon's account, must still be able to start a service).
const START_RIGHTS: u32 = SERVICE_QUERY_STATUS | SERVICE_START;
/// The rights StopService needs: its state, stopping it, and (with force) its dependents.
const STOP_RIGHTS: u32 = SERVICE_QUERY_STATUS | SERVICE_STOP | SERVICE_ENUMERATE_DEPENDENTS;
/// The rights a dependent stopped first needs.
const STOP_DEPENDENT_RIGHTS: u32 = SERVICE_QUERY_STATUS | SERVICE_STOP;

/// Opens service `name` with `rights`.
fn open_service(op: &str, name: &str, rights: u32) -> Result<Sc> {
    let object = format!("service {name:?}");
    // SAFETY: null machine and database names mean the local SCM's active database; the
    // returned handle is owned by `Sc`.
    let scm = unsafe { OpenSCManagerW(PCWSTR::null(), PCWSTR::null(), SC_MANAGER_CONNECT) }
        .map(Sc)
        .map_err(|e| os_error(op, "service control manager", &e, SCM_KINDS))?;
    let wname = wide(name);
    // SAFETY: `wname` is NUL-terminated and outlives the call; the SCM looks names up
    // case-insensitively ("service names are not case sensitive", OpenServiceW).
    unsafe { OpenServiceW(scm.0, PCWSTR(wname.as_ptr()), rights) }
        .map(Sc)
        .map_err(|e| os_error(op, &object, &e, SCM_KINDS))
}

/// The service's current state (`dwCurrentState`).
fn query_state(op: &str, name: &str, svc: &Sc) -> Result<u32> {
    let mut status = SERVICE_STATUS_PROCESS::default();
    let mut needed = 0u32;
    // SAFETY: the buffer is exactly one SERVICE_STATUS_PROCESS, the size
    // SC_STATUS_PROCESS_INFO requires; the slice view lives only for the call.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(
            (&raw mut status).cast::<u8>(),
            size_of::<SERVICE_STATUS_PROCESS>(),
        )
    };
    // SAFETY: `svc` holds SERVICE_QUERY_STATUS; `buf` and `needed` are valid for writes.
    unsafe { QueryServiceStatusEx(svc.0, SC_STATUS_PROCESS_INFO, Some(buf), &mut needed) }
        .map_err(|e| os_error(op, format!("service {name:?}"), &e, SCM_KINDS))?;
    Ok(status.dwCurrentState.0)
}

/// The service's configuration: display name and start type.
fn query_config(op: &str, name: &str, svc: &Sc) -> Result<(String, u32)> {
    let object = format!("service {name:?}");
    let mut needed = 0u32;
    // The first call sizes the buffer: it fails with ERROR_INSUFFICIENT_BUFFER and sets
    // `needed` (QueryServiceConfigW: "the maximum size of this array is 8K bytes").
    // SAFETY: a null buffer of size 0 is allowed for the sizing call.
    match unsafe { QueryServiceConfigW(svc.0, None, 0, &mut needed) } {
        Ok(()) => {}
        Err(e) if super::win::win32_code(&e) == Some(ERROR_INSUFFICIENT_BUFFER) => {}
        Err(e) => return Err(os_error(op, &object, &e, SCM_KINDS)),
    }
    // u64 elements keep the buffer aligned for QUERY_SERVICE_CONFIGW (pointer members).
    let mut buf = vec![0u64; (needed as usize).div_ceil(8).max(1)];
    let size = u32::try_from(buf.len() * 8).unwrap_or(u32::MAX);
    let cfg = buf.as_mut_ptr().cast::<QUERY_SERVICE_CONFIGW>();
    // SAFETY: `cfg` points to `size` writable, suitably aligned bytes.
    unsafe { QueryServiceConfigW(svc.0, Some(cfg), size, &mut needed) }
        .map_err(|e| os_error(op, &object, &e, SCM_KINDS))?;
    // SAFETY: on success the buffer holds a QUERY_SERVICE_CONFIGW whose string pointers point
    // into the same buffer, which is alive here.
    let (display, start) = unsafe {
        let c = &*cfg;
        let display = if c.lpDisplayName.is_null() {
            String::new()
        } else {
            c.lpDisplayName.to_string().unwrap_or_default()
        };
        (display, c.dwStartType.0)
    };
    Ok((display, start))
}

/// Maps `dwStartType` (SERVICE_BOOT_START 0 ... SERVICE_DISABLED 4) to the wire enum, whose
/// numbers are the same; unknown values are 0 as upstream answers.
fn start_type(v: u32) -> StartType {
    match v {
        1 => StartType::System,
        2 => StartType::Automatic,
        3 => StartType::Manual,
        4 => StartType::Disabled,
        _ => StartType::Boot,
    }
}

/// Maps `dwCurrentState` (SERVICE_STOPPED 1 ... SERVICE_PAUSED 7) to the wire enum, whose
/// numbers are the same.
fn status(v: u32) -> ServiceStatus {
    match v {
        1 => ServiceStatus::Stopped,
        2 => ServiceStatus::StartPending,
        3 => ServiceStatus::StopPending,
        4 => ServiceStatus::Running,
        5 => ServiceStatus::ContinuePending,
        6 => ServiceStatus::PausePending,
        7 => ServiceStatus::Paused,
        _ => ServiceStatus::Unknown,
    }
}

/// Polls until the service reaches `want`, for at most [`WAIT`].
fn wait_for(op: &str, name: &str, svc: &Sc, want: ServiceStatus) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = status(query_state(op, name, svc)?);
        if now == want {
            return Ok(());
        }
        // A start that ends in Stopped failed (the service exited); waiting longer is useless.
        if want == ServiceStatus::Running && now == ServiceStatus::Stopped {
            return Err(Error::new(
                Kind::FailedPrecondition,
                op,
                format!("service {name:?}"),
                "the service stopped while starting",
            ));
        }
        if Instant::now() >= deadline {
            return Err(Error::new(
                Kind::DeadlineExceeded,
                op,
                format!("service {name:?}"),
                format!(
                    "still {now:?} after {} s, waiting for {want:?}",
                    WAIT.as_secs()
                ),
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// Sends SERVICE_CONTROL_STOP; a service already stopped is success.
fn send_stop(op: &str, name: &str, svc: &Sc) -> Result<()> {
    let mut st = SERVICE_STATUS::default();
    // SAFETY: `svc` holds SERVICE_STOP; `st` is valid for writes.
    match unsafe { ControlService(svc.0, SERVICE_CONTROL_STOP, &mut st) } {
        Ok(()) => Ok(()),
        Err(e) if super::win::win32_code(&e) == Some(ERROR_SERVICE_NOT_ACTIVE) => Ok(()),
        // "The requested control code cannot be sent to the service because the state of the
        // service is SERVICE_STOPPED, SERVICE_START_PENDING, or SERVICE_STOP_PENDING": a stop
        // already under way is waited for by the caller.
        Err(e)
            if super::win::win32_code(&e) == Some(ERROR_SERVICE_CANNOT_ACCEPT_CTRL)
                && status(query_state(op, name, svc)?) == ServiceStatus::StopPending =>
        {
            Ok(())
        }
        Err(e) => Err(os_error(op, format!("service {name:?}"), &e, SCM_KINDS)),
    }
}

/// Names of the running services that depend on `svc`, directly or not, in the order to stop
/// them. EnumDependentServicesW documents that "the returned services entries are ordered in the
/// reverse order of the start order", which is the order to stop them in.
fn active_dependents(op: &str, name: &str, svc: &Sc) -> Result<Vec<String>> {
    let object = format!("service {name:?}");
    let (mut needed, mut count) = (0u32, 0u32);
    // Sizing call: with no dependents it succeeds with count 0; otherwise it fails with
    // ERROR_MORE_DATA and sets `needed`.
    // SAFETY: a null buffer of size 0 is allowed for the sizing call.
    match unsafe { EnumDependentServicesW(svc.0, SERVICE_ACTIVE, None, 0, &mut needed, &mut count) }
    {
        Ok(()) => return Ok(Vec::new()),
        Err(e) if super::win::win32_code(&e) == Some(ERROR_MORE_DATA) => {}
        Err(e) => return Err(os_error(op, &object, &e, SCM_KINDS)),
    }
    let mut buf = vec![0u64; (needed as usize).div_ceil(8)];
    let size = u32::try_from(buf.len() * 8).unwrap_or(u32::MAX);
    let arr = buf.as_mut_ptr().cast::<ENUM_SERVICE_STATUSW>();
    // SAFETY: `arr` points to `size` writable, aligned bytes.
    unsafe {
        EnumDependentServicesW(
            svc.0,
            SERVICE_ACTIVE,
            Some(arr),
            size,
            &mut needed,
            &mut count,
        )
    }
    .map_err(|e| os_error(op, &object, &e, SCM_KINDS))?;
    (0..count as usize)
        .map(|i| {
            // SAFETY: on success the buffer starts with `count` ENUM_SERVICE_STATUSW entries
            // whose strings live in the same buffer.
            let name = unsafe { (*arr.add(i)).lpServiceName };
            // SAFETY: a NUL-terminated string inside `buf`.
            unsafe { name.to_string() }.map_err(|e| {
                Error::new(Kind::Internal, op, &object, format!("dependent name: {e}"))
            })
        })
        .collect()
}

impl SystemHost for WindowsSystemHost {
    fn bios_serial_number(&self) -> Result<String> {
        const OP: &str = "GetBIOSSerialNumber";
        match smbios_serial() {
            Ok(Some(s)) => Ok(s),
            // No SMBIOS table through this API (old or virtual firmware, Wine without DMI
            // data): ask WMI's Win32_BIOS, the source upstream used.
            Ok(None) | Err(_) => wmi_bios_serial(OP),
        }
    }

    fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        const OP: &str = "GetService";
        let svc = open_service(OP, name, SERVICE_QUERY_CONFIG | SERVICE_QUERY_STATUS)?;
        let (display_name, start) = query_config(OP, name, &svc)?;
        Ok(ServiceInfo {
            display_name,
            start_type: start_type(start),
            status: status(query_state(OP, name, &svc)?),
        })
    }

    fn start_service(&self, name: &str) -> Result<()> {
        const OP: &str = "StartService";
        let svc = open_service(OP, name, START_RIGHTS)?;
        if status(query_state(OP, name, &svc)?) == ServiceStatus::Running {
            return Ok(());
        }
        // SAFETY: `svc` holds SERVICE_START; no arguments are passed.
        match unsafe { windows::Win32::System::Services::StartServiceW(svc.0, None) } {
            Ok(()) => {}
            // Started meanwhile (or start pending): wait below.
            Err(e) if super::win::win32_code(&e) == Some(ERROR_SERVICE_ALREADY_RUNNING) => {}
            Err(e) => return Err(os_error(OP, format!("service {name:?}"), &e, SCM_KINDS)),
        }
        wait_for(OP, name, &svc, ServiceStatus::Running)
    }

    fn stop_service(&self, name: &str, force: bool) -> Result<()> {
        const OP: &str = "StopService";
        let svc = open_service(OP, name, STOP_RIGHTS)?;
        if status(query_state(OP, name, &svc)?) == ServiceStatus::Stopped {
            return Ok(());
        }
        // Without force, ControlService itself refuses with ERROR_DEPENDENT_SERVICES_RUNNING
        // ("a stop control code has been sent to a service that other running services are
        // dependent on"), which is FAILED_PRECONDITION; with force the dependents go first.
        if force {
            for dep in active_dependents(OP, name, &svc)? {
                let d = open_service(OP, &dep, STOP_DEPENDENT_RIGHTS)
                    .map_err(|e| e.context(format!("dependent of {name:?}")))?;
                send_stop(OP, &dep, &d)?;
                wait_for(OP, &dep, &d, ServiceStatus::Stopped)?;
            }
        }
        send_stop(OP, name, &svc)?;
        wait_for(OP, name, &svc, ServiceStatus::Stopped)
    }
}

/// The SMBIOS System Information serial number, `Ok(None)` when the firmware table is not
/// available or holds none.
pub fn smbios_serial() -> Result<Option<String>> {
    const OP: &str = "GetBIOSSerialNumber";
    // 'RSMB' as GetSystemFirmwareTable wants it: the provider signature is the big-endian
    // reading of the four characters.
    let rsmb = FIRMWARE_TABLE_PROVIDER(u32::from_be_bytes(*b"RSMB"));
    // "If the function fails because the buffer is not large enough, the return value is the
    // required buffer size"; with no buffer it returns the size, 0 meaning failure.
    // SAFETY: no buffer is passed.
    let size = unsafe { GetSystemFirmwareTable(rsmb, 0, None) };
    if size == 0 {
        return Ok(None);
    }
    let mut buf = vec![0u8; size as usize];
    // SAFETY: `buf` is writable for its whole length, which the wrapper passes as the size.
    let got = unsafe { GetSystemFirmwareTable(rsmb, 0, Some(&mut buf)) };
    if got == 0 || got as usize > buf.len() {
        return Ok(None);
    }
    buf.truncate(got as usize);
    crate::windows_data::smbios::system_serial(&buf)
        .map_err(|e| Error::new(Kind::Internal, OP, "SMBIOS table", e))
}

/// `Win32_BIOS.SerialNumber` through the WMI thread.
pub fn wmi_bios_serial(op: &'static str) -> Result<String> {
    use std::collections::HashMap;
    super::wmi::with_namespace(op, r"ROOT\CIMV2", move |c| {
        let rows: Vec<HashMap<String, wmi::Variant>> = c
            .raw_query("SELECT SerialNumber FROM Win32_BIOS")
            .map_err(|e| super::wmi::wmi_error(op, "Win32_BIOS", &e))?;
        match rows.first().and_then(|r| r.get("SerialNumber")) {
            Some(wmi::Variant::String(s)) => Ok(s.clone()),
            Some(wmi::Variant::Null | wmi::Variant::Empty) | None => Ok(String::new()),
            Some(other) => Err(Error::new(
                Kind::Internal,
                op,
                "Win32_BIOS.SerialNumber",
                format!("unexpected value {other:?}"),
            )),
        }
    })
}
