//! The Service Control Manager and firmware calls of the real seam.

use super::{OsError, Win32Result, os, wmi_os};
use crate::windows::win::wide;
use std::collections::HashMap;
use windows::Win32::Foundation::{ERROR_INSUFFICIENT_BUFFER, ERROR_MORE_DATA, WIN32_ERROR};
use windows::Win32::System::Services::{
    CloseServiceHandle, ControlService, CreateServiceW, DeleteService, ENUM_SERVICE_STATUSW,
    EnumDependentServicesW, OpenSCManagerW, OpenServiceW, QUERY_SERVICE_CONFIGW,
    QueryServiceConfig2W, QueryServiceConfigW, QueryServiceStatusEx, SC_HANDLE, SC_MANAGER_CONNECT,
    SC_MANAGER_CREATE_SERVICE, SC_STATUS_PROCESS_INFO, SERVICE_ACTIVE,
    SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, SERVICE_CONTROL_STOP, SERVICE_DEMAND_START,
    SERVICE_ENUMERATE_DEPENDENTS, SERVICE_ERROR_NORMAL, SERVICE_FAILURE_ACTIONS_FLAG,
    SERVICE_QUERY_CONFIG, SERVICE_QUERY_STATUS, SERVICE_START, SERVICE_STATUS,
    SERVICE_STATUS_PROCESS, SERVICE_STOP, SERVICE_WIN32_OWN_PROCESS, StartServiceW,
};
use windows::Win32::System::SystemInformation::{FIRMWARE_TABLE_PROVIDER, GetSystemFirmwareTable};
use windows::core::PCWSTR;

/// A service control manager or service handle, closed on drop.
struct Sc(SC_HANDLE);

impl Drop for Sc {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful OpenSCManagerW/OpenServiceW and is owned by
        // this value only, so it is closed exactly once.
        let _ = unsafe { CloseServiceHandle(self.0) };
    }
}

/// DELETE, the standard access right DeleteService needs ("Service Security and Access
/// Rights": "Required to call the DeleteService function to delete the service").
const DELETE: u32 = 0x0001_0000;

/// Opens the local SCM's active database with exactly `rights`.
fn open_scm(rights: u32) -> Win32Result<Sc> {
    // SAFETY: null machine and database names mean the local SCM's active database.
    unsafe { OpenSCManagerW(PCWSTR::null(), PCWSTR::null(), rights) }
        .map(Sc)
        .map_err(|e| os(&e))
}

/// Opens service `name` with exactly `rights` ("access rights for a service": each call asks
/// only for what it uses, so an account granted SERVICE_START alone can still start one).
fn open_service(name: &str, rights: u32) -> Win32Result<Sc> {
    let scm = open_scm(SC_MANAGER_CONNECT)?;
    let w = wide(name);
    // SAFETY: `w` is NUL-terminated and outlives the call; names are case-insensitive.
    unsafe { OpenServiceW(scm.0, PCWSTR(w.as_ptr()), rights) }
        .map(Sc)
        .map_err(|e| os(&e))
}

/// See [`crate::windows::os::Win32::service_state`].
pub(super) fn service_state(name: &str) -> Win32Result<u32> {
    let svc = open_service(name, SERVICE_QUERY_STATUS)?;
    let mut status = SERVICE_STATUS_PROCESS::default();
    let mut needed = 0u32;
    // SAFETY: the buffer is exactly one SERVICE_STATUS_PROCESS, the size
    // SC_STATUS_PROCESS_INFO requires; the byte view lives only for the call.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(
            (&raw mut status).cast::<u8>(),
            size_of::<SERVICE_STATUS_PROCESS>(),
        )
    };
    // SAFETY: `svc` holds SERVICE_QUERY_STATUS; `buf` and `needed` are valid for writes.
    unsafe { QueryServiceStatusEx(svc.0, SC_STATUS_PROCESS_INFO, Some(buf), &mut needed) }
        .map_err(|e| os(&e))?;
    Ok(status.dwCurrentState.0)
}

/// See [`crate::windows::os::Win32::service_config`].
pub(super) fn service_config(name: &str) -> Win32Result<(String, u32)> {
    let svc = open_service(name, SERVICE_QUERY_CONFIG)?;
    let mut needed = 0u32;
    // The sizing call fails with ERROR_INSUFFICIENT_BUFFER and sets `needed`
    // ("the maximum size of this array is 8K bytes").
    // SAFETY: a null buffer of size 0 is allowed for the sizing call.
    match unsafe { QueryServiceConfigW(svc.0, None, 0, &mut needed) } {
        Ok(()) => {}
        Err(e) if WIN32_ERROR::from_error(&e) == Some(ERROR_INSUFFICIENT_BUFFER) => {}
        Err(e) => return Err(os(&e)),
    }
    // u64 elements keep the buffer aligned for QUERY_SERVICE_CONFIGW (pointer members).
    let mut buf = vec![0u64; (needed as usize).div_ceil(8).max(1)];
    let size = u32::try_from(buf.len() * 8).unwrap_or(u32::MAX);
    let cfg = buf.as_mut_ptr().cast::<QUERY_SERVICE_CONFIGW>();
    // SAFETY: `cfg` points to `size` writable, suitably aligned bytes.
    unsafe { QueryServiceConfigW(svc.0, Some(cfg), size, &mut needed) }.map_err(|e| os(&e))?;
    // SAFETY: on success the buffer holds a QUERY_SERVICE_CONFIGW whose string pointers
    // point into the same buffer, which is alive here.
    Ok(unsafe {
        let c = &*cfg;
        let display = if c.lpDisplayName.is_null() {
            String::new()
        } else {
            c.lpDisplayName.to_string().unwrap_or_default()
        };
        (display, c.dwStartType.0)
    })
}

/// See [`crate::windows::os::Win32::service_failure_flag`]. QueryServiceConfig2W with
/// SERVICE_CONFIG_FAILURE_ACTIONS_FLAG: "The lpBuffer parameter is a pointer to a
/// SERVICE_FAILURE_ACTIONS_FLAG structure", a fixed-size structure (one BOOL).
pub(super) fn service_failure_flag(name: &str) -> Win32Result<bool> {
    let svc = open_service(name, SERVICE_QUERY_CONFIG)?;
    let mut flag = SERVICE_FAILURE_ACTIONS_FLAG::default();
    let mut needed = 0u32;
    let size = size_of::<SERVICE_FAILURE_ACTIONS_FLAG>() as u32;
    // SAFETY: `flag` is a writable SERVICE_FAILURE_ACTIONS_FLAG of `size` bytes.
    unsafe {
        QueryServiceConfig2W(
            svc.0,
            SERVICE_CONFIG_FAILURE_ACTIONS_FLAG,
            Some(std::slice::from_raw_parts_mut(
                (&mut flag as *mut SERVICE_FAILURE_ACTIONS_FLAG).cast::<u8>(),
                size as usize,
            )),
            &mut needed,
        )
    }
    .map_err(|e| os(&e))?;
    Ok(flag.fFailureActionsOnNonCrashFailures.as_bool())
}

/// See [`crate::windows::os::Win32::service_start`].
pub(super) fn service_start(name: &str) -> Win32Result<()> {
    let svc = open_service(name, SERVICE_START)?;
    // SAFETY: `svc` holds SERVICE_START; no arguments are passed.
    unsafe { StartServiceW(svc.0, None) }.map_err(|e| os(&e))
}

/// See [`crate::windows::os::Win32::service_stop`].
pub(super) fn service_stop(name: &str) -> Win32Result<()> {
    let svc = open_service(name, SERVICE_STOP)?;
    let mut st = SERVICE_STATUS::default();
    // SAFETY: `svc` holds SERVICE_STOP; `st` is valid for writes.
    unsafe { ControlService(svc.0, SERVICE_CONTROL_STOP, &mut st) }.map_err(|e| os(&e))
}

/// See [`crate::windows::os::Win32::service_create`]. CreateServiceW: with a null
/// `lpServiceStartName` "the LocalSystem account" runs it; `lpBinaryPathName` is the command
/// line, whose program path "must be quoted" when it contains a space (the caller quotes it).
/// The handle it returns, asked for no rights, is closed at once.
pub(super) fn service_create(name: &str, command_line: &str) -> Win32Result<()> {
    let scm = open_scm(SC_MANAGER_CREATE_SERVICE)?;
    let (w, cmd) = (wide(name), wide(command_line));
    // SAFETY: `scm` holds SC_MANAGER_CREATE_SERVICE; `w` and `cmd` are NUL-terminated and
    // outlive the call; every optional pointer is null (no group, tag, dependencies, account
    // or password).
    unsafe {
        CreateServiceW(
            scm.0,
            PCWSTR(w.as_ptr()),
            PCWSTR(w.as_ptr()),
            0,
            SERVICE_WIN32_OWN_PROCESS,
            SERVICE_DEMAND_START,
            SERVICE_ERROR_NORMAL,
            PCWSTR(cmd.as_ptr()),
            PCWSTR::null(),
            None,
            PCWSTR::null(),
            PCWSTR::null(),
            PCWSTR::null(),
        )
    }
    .map(|h| drop(Sc(h)))
    .map_err(|e| os(&e))
}

/// See [`crate::windows::os::Win32::service_delete`]. DeleteService "marks a service for
/// deletion": the entry is removed once every handle to it is closed (this one is, on return)
/// and the service is not running.
pub(super) fn service_delete(name: &str) -> Win32Result<()> {
    let svc = open_service(name, DELETE)?;
    // SAFETY: `svc` holds DELETE.
    unsafe { DeleteService(svc.0) }.map_err(|e| os(&e))
}

/// See [`crate::windows::os::Win32::service_active_dependents`].
pub(super) fn service_active_dependents(name: &str) -> Win32Result<Vec<String>> {
    let svc = open_service(name, SERVICE_ENUMERATE_DEPENDENTS)?;
    let (mut needed, mut count) = (0u32, 0u32);
    // Sizing call: with no dependents it succeeds with count 0; otherwise it fails with
    // ERROR_MORE_DATA and sets `needed`.
    // SAFETY: a null buffer of size 0 is allowed for the sizing call.
    match unsafe { EnumDependentServicesW(svc.0, SERVICE_ACTIVE, None, 0, &mut needed, &mut count) }
    {
        Ok(()) => return Ok(Vec::new()),
        Err(e) if WIN32_ERROR::from_error(&e) == Some(ERROR_MORE_DATA) => {}
        Err(e) => return Err(os(&e)),
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
    .map_err(|e| os(&e))?;
    Ok((0..count as usize)
        .map(|i| {
            // SAFETY: on success the buffer starts with `count` ENUM_SERVICE_STATUSW entries
            // whose strings live in the same buffer.
            let name = unsafe { (*arr.add(i)).lpServiceName };
            // SAFETY: a NUL-terminated string inside `buf`.
            unsafe { name.to_string() }.unwrap_or_default()
        })
        .collect())
}

/// See [`crate::windows::os::Win32::smbios_table`].
pub(super) fn smbios_table() -> Win32Result<Option<Vec<u8>>> {
    // 'RSMB' as GetSystemFirmwareTable wants it: the big-endian reading of the characters.
    let rsmb = FIRMWARE_TABLE_PROVIDER(u32::from_be_bytes(*b"RSMB"));
    // With no buffer the function returns the size needed, 0 meaning failure.
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
    Ok(Some(buf))
}

/// See [`crate::windows::os::Win32::wmi_bios_serial`].
pub(super) fn wmi_bios_serial() -> Win32Result<String> {
    crate::windows::wmi::run_in(r"ROOT\CIMV2", |c| {
        let rows: Vec<HashMap<String, wmi::Variant>> = c
            .raw_query("SELECT SerialNumber FROM Win32_BIOS")
            .map_err(|e| wmi_os(&e))?;
        match rows.first().and_then(|r| r.get("SerialNumber")) {
            Some(wmi::Variant::String(s)) => Ok(s.clone()),
            Some(wmi::Variant::Null | wmi::Variant::Empty) | None => Ok(String::new()),
            Some(other) => Err(OsError::with_message(
                0x8000_FFFF,
                format!("Win32_BIOS.SerialNumber is {other:?}"),
            )),
        }
    })
}
