//! The Win32 calls of the pipe's own write path, one documented call per function; the logic
//! that uses them is in `write.rs`.
#![allow(
    unsafe_code,
    reason = "overlapped writes, events and thread-pool waits have no safe wrapper"
)]

use std::ffi::c_void;
use std::io;

use windows::Win32::Foundation::{
    CloseHandle, ERROR_IO_INCOMPLETE, ERROR_IO_PENDING, HANDLE, INVALID_HANDLE_VALUE, WAIT_OBJECT_0,
};
use windows::Win32::Storage::FileSystem::WriteFile;
use windows::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};
use windows::Win32::System::Threading::{
    CreateEventW, INFINITE, RegisterWaitForSingleObject, UnregisterWaitEx, WT_EXECUTEONLYONCE,
    WaitForSingleObject,
};
use windows::core::PCWSTR;

/// A manual-reset event owned by one connection, signalled by Windows when a write through
/// [`Event::tagged`] completes.
#[derive(Debug)]
pub(super) struct Event(HANDLE);

// SAFETY: an event handle may be used and closed from any thread.
unsafe impl Send for Event {}
// SAFETY: as above; nothing is mutated through `&Event`.
unsafe impl Sync for Event {}

impl Event {
    /// `CreateEventW(NULL, TRUE, FALSE, NULL)`: an unnamed manual-reset event, not signalled.
    pub(super) fn new() -> io::Result<Event> {
        // SAFETY: no security attributes and no name; the handle returned is ours to close.
        let handle = unsafe { CreateEventW(None, true, false, PCWSTR::null()) }?;
        Ok(Event(handle))
    }

    /// The event as `OVERLAPPED.hEvent` of a write whose completion must not reach the
    /// completion port the pipe is associated with. GetQueuedCompletionStatus (ioapiset.h): "an
    /// application can prevent completion port notification. This is done by specifying a valid
    /// event handle for the hEvent member of the OVERLAPPED structure, and setting its low-order
    /// bit. A valid event handle whose low-order bit is set keeps I/O completion from being
    /// queued to the completion port."
    pub(super) fn tagged(&self) -> HANDLE {
        HANDLE((self.0.0 as usize | 1) as *mut c_void)
    }

    /// `WaitForSingleObject(event, INFINITE)`: returns once the event is signalled (WriteFile
    /// resets it when it starts an operation, and the system signals it when the operation
    /// completes, OVERLAPPED: "The system sets this event to a signaled state when the
    /// operation has been completed").
    pub(super) fn wait(&self) -> io::Result<()> {
        // SAFETY: the handle is a valid event for the life of `self`.
        let r = unsafe { WaitForSingleObject(self.0, INFINITE) };
        if r == WAIT_OBJECT_0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for Event {
    /// `CloseHandle`.
    fn drop(&mut self) {
        // SAFETY: the handle is ours and nothing uses it after this.
        let _ = unsafe { CloseHandle(self.0) };
    }
}

/// `WriteFile` of `buf` on the overlapped handle `pipe` with `ov`: `Ok(true)` when it completed
/// at once ("If the function succeeds, the return value is nonzero"), `Ok(false)` when it is
/// pending ("completing asynchronously ... GetLastError returns ERROR_IO_PENDING").
///
/// # Safety
/// `pipe` is an open handle opened with `FILE_FLAG_OVERLAPPED`; `buf` and `ov` stay valid and
/// unmoved until the operation has completed (observed through [`overlapped_result`] or
/// [`Event::wait`]).
pub(super) unsafe fn write(pipe: HANDLE, buf: &[u8], ov: *mut OVERLAPPED) -> io::Result<bool> {
    // WriteFile: lpNumberOfBytesWritten "Use NULL for this parameter if this is an asynchronous
    // operation"; the count comes from GetOverlappedResult.
    // SAFETY: per the caller's contract.
    match unsafe { WriteFile(pipe, Some(buf), None, Some(ov)) } {
        Ok(()) => Ok(true),
        Err(e) if e.code() == ERROR_IO_PENDING.to_hresult() => Ok(false),
        Err(e) => Err(io::Error::from_raw_os_error(e.code().0 & 0xffff)),
    }
}

/// `GetOverlappedResult(pipe, ov, &n, FALSE)`: `Ok(Some(n))` once the operation completed,
/// `Ok(None)` while it is still going ("If bWait is FALSE and the operation is still pending,
/// the function returns FALSE and the GetLastError function returns ERROR_IO_INCOMPLETE").
///
/// # Safety
/// `ov` is the OVERLAPPED of an operation started on `pipe`.
pub(super) unsafe fn overlapped_result(
    pipe: HANDLE,
    ov: *const OVERLAPPED,
) -> io::Result<Option<u32>> {
    let mut n = 0u32;
    // SAFETY: per the caller's contract; `n` is a valid out-pointer.
    match unsafe { GetOverlappedResult(pipe, ov, &mut n, false) } {
        Ok(()) => Ok(Some(n)),
        Err(e) if e.code() == ERROR_IO_INCOMPLETE.to_hresult() => Ok(None),
        Err(e) => Err(io::Error::from_raw_os_error(e.code().0 & 0xffff)),
    }
}

/// `CancelIoEx(pipe, ov)`: asks the system to end the one operation `ov` early; it still
/// completes (with `ERROR_OPERATION_ABORTED`) and must be waited for before `ov` is freed
/// ("the I/O operations ... are completed normally with the final status"). An operation that
/// has already completed makes it fail with `ERROR_NOT_FOUND`, which is fine here.
///
/// # Safety
/// `ov` is the OVERLAPPED of an operation started on `pipe`.
pub(super) unsafe fn cancel(pipe: HANDLE, ov: *const OVERLAPPED) {
    // SAFETY: per the caller's contract.
    let _ = unsafe { CancelIoEx(pipe, Some(ov)) };
}

/// What a thread-pool wait calls when its event is signalled.
pub(super) type WaitCallback = unsafe extern "system" fn(*mut c_void, bool);

/// A wait registered with `RegisterWaitForSingleObject`, undone (blocking until a running
/// callback has returned) when dropped.
#[derive(Debug)]
pub(super) struct ThreadPoolWait(HANDLE);

// SAFETY: the wait handle may be unregistered from any thread.
unsafe impl Send for ThreadPoolWait {}
// SAFETY: as above; nothing is mutated through `&ThreadPoolWait`.
unsafe impl Sync for ThreadPoolWait {}

impl ThreadPoolWait {
    /// `RegisterWaitForSingleObject(&wait, event, callback, context, INFINITE,
    /// WT_EXECUTEONLYONCE)`: a thread of the system's thread pool calls `callback(context)`
    /// once the event is signalled, without a thread of ours waiting ("WT_EXECUTEONLYONCE: The
    /// callback function is invoked only once").
    ///
    /// # Safety
    /// `context` stays valid for `callback` until this value is dropped.
    pub(super) unsafe fn register(
        event: &Event,
        callback: WaitCallback,
        context: *const c_void,
    ) -> io::Result<ThreadPoolWait> {
        let mut wait = HANDLE::default();
        // SAFETY: valid out-pointer and event; `context` per the caller's contract.
        unsafe {
            RegisterWaitForSingleObject(
                &mut wait,
                event.0,
                Some(callback),
                Some(context),
                INFINITE,
                WT_EXECUTEONLYONCE,
            )
        }?;
        Ok(ThreadPoolWait(wait))
    }
}

impl Drop for ThreadPoolWait {
    /// `UnregisterWaitEx(wait, INVALID_HANDLE_VALUE)`: "If this parameter is
    /// INVALID_HANDLE_VALUE, the function waits for all callback functions to complete before
    /// returning", so the context may be freed afterwards.
    fn drop(&mut self) {
        // SAFETY: the wait handle is ours and is not used after this.
        let _ = unsafe { UnregisterWaitEx(self.0, Some(INVALID_HANDLE_VALUE)) };
    }
}
