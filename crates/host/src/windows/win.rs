//! Small helpers shared by the Windows hosts: wide strings and turning Win32
//! errors into [`Error`]s that name the operation and the object.

use csi_proxy_core::{Error, Kind};
use std::io;
use windows::Win32::Foundation::WIN32_ERROR;

/// `s` as a NUL-terminated UTF-16 string.
pub fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

/// A UTF-16 buffer up to its first NUL, as a `String`.
pub fn from_wide(buf: &[u16]) -> String {
    let n = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf16_lossy(&buf[..n])
}

/// The Win32 error code inside a `windows` error, when it carries one (`HRESULT_FROM_WIN32`).
pub fn win32_code(e: &windows::core::Error) -> Option<WIN32_ERROR> {
    WIN32_ERROR::from_error(e)
}

/// An [`Error`] for a failed Win32 call in operation `op` on `object`. The kind follows the OS
/// error (not found, access denied, ...); `overrides` maps specific Win32 codes to kinds first
/// (e.g. `ERROR_SERVICE_DOES_NOT_EXIST` is NOT_FOUND).
pub fn os_error(
    op: &str,
    object: impl std::fmt::Display,
    e: &windows::core::Error,
    overrides: &[(WIN32_ERROR, Kind)],
) -> Error {
    // A `windows` error carries an HRESULT; `io::Error::from` would keep that HRESULT as the
    // raw OS error, which std cannot classify (NotFound, PermissionDenied, ...). The Win32 code
    // inside it (HRESULT_FROM_WIN32) is what std's error kinds are built on.
    let io = match win32_code(e) {
        Some(code) => io::Error::from_raw_os_error(code.0 as i32),
        None => io::Error::from(e.clone()),
    };
    if let Some(code) = win32_code(e)
        && let Some((_, kind)) = overrides.iter().find(|(c, _)| *c == code)
    {
        return Error::new(*kind, op, object, io);
    }
    Error::io(op, object, &io)
}
