//! The registry values the seam reads: the crash dump settings.

use super::super::os::{OsError, Win32Result, code};
use super::super::win::{from_wide, wide};
use windows::Win32::Foundation::{ERROR_FILE_NOT_FOUND, ERROR_MORE_DATA, ERROR_SUCCESS};
use windows::Win32::System::Registry::{
    HKEY_LOCAL_MACHINE, RRF_RT_REG_EXPAND_SZ, RRF_RT_REG_SZ, RegGetValueW,
};
use windows::core::PCWSTR;

/// The key of the crash dump settings ("CrashControl").
const CRASH_CONTROL: &str = r"SYSTEM\CurrentControlSet\Control\CrashControl";

/// `RegGetValueW(HKEY_LOCAL_MACHINE, CrashControl, name, RRF_RT_REG_SZ | RRF_RT_REG_EXPAND_SZ)`:
/// RegGetValueW expands a REG_EXPAND_SZ value's environment strings unless told not to
/// (RRF_NOEXPAND). A value that is not set is `None` (ERROR_FILE_NOT_FOUND); a buffer too
/// small (ERROR_MORE_DATA) is grown to the size the call reports.
pub(super) fn crash_control(name: &str) -> Win32Result<Option<String>> {
    let key = wide(CRASH_CONTROL);
    let value = wide(name);
    let mut units = 512usize;
    for _ in 0..4 {
        let mut buf = vec![0u16; units];
        let mut bytes = u32::try_from(units * 2).unwrap_or(u32::MAX);
        // SAFETY: `key` and `value` are NUL-terminated and outlive the call; `buf` holds
        // `bytes` bytes, which the call updates to the size written or needed.
        let rc = unsafe {
            RegGetValueW(
                HKEY_LOCAL_MACHINE,
                PCWSTR(key.as_ptr()),
                PCWSTR(value.as_ptr()),
                RRF_RT_REG_SZ | RRF_RT_REG_EXPAND_SZ,
                None,
                Some(buf.as_mut_ptr().cast()),
                Some(&mut bytes),
            )
        };
        match rc {
            ERROR_SUCCESS => return Ok(Some(from_wide(&buf))),
            ERROR_FILE_NOT_FOUND => return Ok(None),
            ERROR_MORE_DATA => units = (bytes as usize).div_ceil(2).max(units * 2),
            other => return Err(OsError::new(other.0)),
        }
    }
    Err(OsError::new(code::MORE_DATA))
}
