//! The Windows Event Log calls of the real seam: an event source handle and reports through it.
//! What is reported and when is decided above, in the daemon (`csi-proxy`'s `service_events`).

use super::{OsError, Win32Result, os};
use crate::windows::win::wide;
use windows::Win32::Foundation::HANDLE;
use windows::Win32::System::EventLog::{
    DeregisterEventSource, EVENTLOG_ERROR_TYPE, EVENTLOG_INFORMATION_TYPE, EVENTLOG_WARNING_TYPE,
    RegisterEventSourceW, ReportEventW,
};
use windows::core::PCWSTR;

/// The type of an event, as Event Viewer shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Information.
    Information,
    /// Warning.
    Warning,
    /// Error.
    Error,
}

/// A registered event source of the local Event Log; deregistered on drop.
#[derive(Debug)]
pub struct EventSource(HANDLE);

// SAFETY: an event log handle is not tied to the thread that registered it; ReportEventW and
// DeregisterEventSource take it from any thread.
unsafe impl Send for EventSource {}
// SAFETY: as above; the handle is only read.
unsafe impl Sync for EventSource {}

impl EventSource {
    /// RegisterEventSourceW on the local computer. "If the source name cannot be found, the
    /// event logging service uses the Application log"
    /// (learn.microsoft.com/windows/win32/api/winbase/nf-winbase-registereventsourcew): events
    /// of an unregistered source are still recorded, without a message file to format them.
    pub fn register(source: &str) -> Win32Result<Self> {
        let w = wide(source);
        // SAFETY: a null server name means the local computer; `w` is NUL-terminated and
        // outlives the call.
        unsafe { RegisterEventSourceW(PCWSTR::null(), PCWSTR(w.as_ptr())) }
            .map(Self)
            .map_err(|e| os(&e))
    }

    /// ReportEventW with one insertion string, no category, user or raw data
    /// (learn.microsoft.com/windows/win32/api/winbase/nf-winbase-reporteventw: "Each string is
    /// limited to 31,839 characters"; the caller keeps to that).
    pub fn report(&self, kind: EventType, id: u32, message: &str) -> Win32Result<()> {
        if message.encode_utf16().count() > 31_839 || message.contains('\0') {
            return Err(OsError::with_message(
                87, // ERROR_INVALID_PARAMETER
                "an event string longer than 31,839 characters or with a NUL",
            ));
        }
        let kind = match kind {
            EventType::Information => EVENTLOG_INFORMATION_TYPE,
            EventType::Warning => EVENTLOG_WARNING_TYPE,
            EventType::Error => EVENTLOG_ERROR_TYPE,
        };
        let w = wide(message);
        let strings = [PCWSTR(w.as_ptr())];
        // SAFETY: the handle came from RegisterEventSourceW and is open until drop; `strings`
        // holds one NUL-terminated string that outlives the call; no raw data (size 0).
        unsafe { ReportEventW(self.0, kind, 0, id, None, 0, Some(&strings), None) }
            .map_err(|e| os(&e))
    }
}

impl Drop for EventSource {
    fn drop(&mut self) {
        // SAFETY: the handle came from RegisterEventSourceW and is owned by this value only,
        // so it is deregistered exactly once (DeregisterEventSource: "Closes the specified
        // event log").
        let _ = unsafe { DeregisterEventSource(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real calls (under wine they succeed without a log to write to; on Windows the events
    /// land in the Application log under the test source).
    #[test]
    fn a_source_registers_reports_and_deregisters() {
        let source = EventSource::register("csi-proxy-test").expect("RegisterEventSourceW");
        for kind in [EventType::Information, EventType::Warning, EventType::Error] {
            source
                .report(kind, 1, "csi-proxy test event: ignore")
                .unwrap_or_else(|e| panic!("ReportEventW {kind:?}: {e:?}"));
        }
        assert!(source.report(EventType::Error, 3, "a\0b").is_err());
        let long = "x".repeat(31_840);
        assert!(source.report(EventType::Error, 3, &long).is_err());
        drop(source);
    }
}
