//! The console control handler of the real seam: `SetConsoleCtrlHandler`, routing every event to
//! the daemon's [`ConsoleStop`] (whose logic, and the documented time limits, are in
//! `windows/console.rs`).

use crate::windows::console::ConsoleStop;
use std::sync::OnceLock;
use windows::Win32::System::Console::SetConsoleCtrlHandler;
use windows::core::BOOL;

/// The stop the handler routine reports to: a handler routine is a plain function, so what it
/// reaches is process-wide.
static STOP: OnceLock<ConsoleStop> = OnceLock::new();

/// The HandlerRoutine: "the system creates a new thread in the process to execute the
/// function"; it may block that thread (the daemon's stop does, for the events after which the
/// system ends the process).
unsafe extern "system" fn handler(ty: u32) -> BOOL {
    BOOL::from(STOP.get().is_some_and(|stop| stop.handle(ty)))
}

/// Installs `stop` as the process's console control handler: `SetConsoleCtrlHandler(handler,
/// TRUE)` adds it before the default handler, which would call ExitProcess. Returns the stop
/// installed (the first one, if called twice).
pub fn install(stop: ConsoleStop) -> Result<&'static ConsoleStop, String> {
    let installed = STOP.get_or_init(|| stop);
    // SAFETY: `handler` is a valid PHANDLER_ROUTINE for the life of the process and reads only
    // the process-wide OnceLock set above.
    unsafe { SetConsoleCtrlHandler(Some(handler), true) }
        .map_err(|e| format!("SetConsoleCtrlHandler: {e}"))?;
    Ok(installed)
}

/// The stop installed, if any.
pub fn installed() -> Option<&'static ConsoleStop> {
    STOP.get()
}
