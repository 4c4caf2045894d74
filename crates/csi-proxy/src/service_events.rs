//! What the daemon writes to the Windows Event Log (`--windows-event-log`, on by default under
//! `--windows-service`): that it started, that it stopped, and every failure that stops it or
//! keeps it from starting, with the cause in the words the log file uses. The writing goes
//! through [`EventSink`]: the real event source on Windows, a recording fake in tests.

/// The event source name, registered by `deploy/windows/install.ps1` and the HostProcess
/// DaemonSet.
#[cfg_attr(not(windows), allow(dead_code))] // the source Windows opens
pub const SOURCE: &str = "csi-proxy";

/// ReportEventW: "Each string is limited to 31,839 characters" (UTF-16 units).
pub const MAX_MESSAGE_UNITS: usize = 31_839;

/// The type of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Information: start and clean stop.
    Information,
    /// Error: the daemon failed or could not start.
    Error,
}

/// Event IDs, one per kind of event, so they can be filtered on.
pub mod id {
    /// Started: every endpoint is served.
    pub const STARTED: u32 = 1;
    /// Stopped cleanly.
    pub const STOPPED: u32 = 2;
    /// Stopped by a failure, or did not start.
    pub const FAILED: u32 = 3;
}

/// Where events go.
pub trait EventSink: Send + Sync {
    /// Writes one event; `message` fits [`MAX_MESSAGE_UNITS`] and holds no NUL.
    fn report(&self, kind: Kind, id: u32, message: &str) -> Result<(), String>;
}

/// The daemon's events, written through a sink. A sink that fails is told to the log file
/// (the event is then lost, never the service).
pub struct ServiceEvents(Option<Box<dyn EventSink>>);

impl ServiceEvents {
    /// Events written through `sink`.
    #[cfg_attr(not(windows), allow(dead_code))] // off Windows only tests have a sink
    pub fn to(sink: impl EventSink + 'static) -> Self {
        Self(Some(Box::new(sink)))
    }

    /// No events (the Event Log is not asked for).
    pub fn none() -> Self {
        Self(None)
    }

    /// Every endpoint is served.
    pub fn started(&self) {
        self.write(
            Kind::Information,
            id::STARTED,
            &format!(
                "csi-proxy {} started: every endpoint is served",
                env!("CARGO_PKG_VERSION")
            ),
        );
    }

    /// The daemon ended: cleanly, or with the cause it failed of.
    pub fn stopped(&self, result: &Result<(), String>) {
        match result {
            Ok(()) => self.write(Kind::Information, id::STOPPED, "csi-proxy stopped"),
            Err(cause) => self.write(
                Kind::Error,
                id::FAILED,
                &format!("csi-proxy stopped: {cause}"),
            ),
        }
    }

    /// The daemon could not start (bad flags, a log file it cannot open).
    pub fn did_not_start(&self, cause: &str) {
        self.write(
            Kind::Error,
            id::FAILED,
            &format!("csi-proxy did not start: {cause}"),
        );
    }

    fn write(&self, kind: Kind, id: u32, message: &str) {
        let Some(sink) = &self.0 else { return };
        if let Err(e) = sink.report(kind, id, &fit(message)) {
            tracing::warn!("cannot write event {id} to the Windows Event Log: {e}");
        }
    }
}

/// `message` as ReportEventW takes it: NULs (which would end the string early) shown as U+FFFD,
/// and cut, at a character, to [`MAX_MESSAGE_UNITS`] with a mark that it was.
fn fit(message: &str) -> String {
    let clean = message.replace('\0', "\u{FFFD}");
    if clean.encode_utf16().count() <= MAX_MESSAGE_UNITS {
        return clean;
    }
    const MARK: &str = " [cut]";
    let mut out = String::new();
    let mut units = 0;
    for c in clean.chars() {
        units += c.len_utf16();
        if units > MAX_MESSAGE_UNITS - MARK.len() {
            break;
        }
        out.push(c);
    }
    out + MARK
}

/// The real event source.
#[cfg(windows)]
impl EventSink for csi_proxy_host::windows::win32::EventSource {
    fn report(&self, kind: Kind, id: u32, message: &str) -> Result<(), String> {
        use csi_proxy_host::windows::win32::EventType;
        let kind = match kind {
            Kind::Information => EventType::Information,
            Kind::Error => EventType::Error,
        };
        csi_proxy_host::windows::win32::EventSource::report(self, kind, id, message)
            .map_err(|e| format!("ReportEventW: {e}"))
    }
}

/// The events of the `csi-proxy` source on this Windows; none (said in the log) when the
/// source cannot be opened.
#[cfg(windows)]
pub fn open() -> ServiceEvents {
    match csi_proxy_host::windows::win32::EventSource::register(SOURCE) {
        Ok(source) => ServiceEvents::to(source),
        Err(e) => {
            tracing::warn!("cannot open the Windows Event Log source {SOURCE}: {e}");
            ServiceEvents::none()
        }
    }
}

/// No Event Log off Windows (`--windows-event-log` is refused there at start).
#[cfg(not(windows))]
pub fn open() -> ServiceEvents {
    ServiceEvents::none()
}

/// A sink that records events, for tests; it refuses what ReportEventW refuses.
#[cfg(test)]
#[derive(Clone, Default)]
pub struct Recorder(pub std::sync::Arc<std::sync::Mutex<Vec<(Kind, u32, String)>>>);

#[cfg(test)]
impl Recorder {
    /// The events written so far.
    pub fn events(&self) -> Vec<(Kind, u32, String)> {
        self.0.lock().unwrap().clone()
    }
}

#[cfg(test)]
impl EventSink for Recorder {
    fn report(&self, kind: Kind, id: u32, message: &str) -> Result<(), String> {
        if message.encode_utf16().count() > MAX_MESSAGE_UNITS || message.contains('\0') {
            return Err("ERROR_INVALID_PARAMETER".into());
        }
        self.0.lock().unwrap().push((kind, id, message.to_string()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_stop_and_failure_name_their_cause() {
        let rec = Recorder::default();
        let events = ServiceEvents::to(rec.clone());
        events.started();
        events.stopped(&Ok(()));
        events.stopped(&Err(
            "pipe \\\\.\\pipe\\csi-proxy-disk-v1 is already owned".into()
        ));
        events.did_not_start("bad flags: unexpected argument '--nope'");
        let got = rec.events();
        assert_eq!(got.len(), 4);
        assert_eq!((got[0].0, got[0].1), (Kind::Information, id::STARTED));
        assert!(got[0].2.contains("started"));
        assert_eq!(
            got[1],
            (Kind::Information, id::STOPPED, "csi-proxy stopped".into())
        );
        assert_eq!((got[2].0, got[2].1), (Kind::Error, id::FAILED));
        assert!(got[2].2.ends_with("csi-proxy-disk-v1 is already owned"));
        assert_eq!((got[3].0, got[3].1), (Kind::Error, id::FAILED));
        assert!(got[3].2.contains("unexpected argument '--nope'"));
    }

    #[test]
    fn a_message_reportevent_would_refuse_is_made_to_fit() {
        let rec = Recorder::default();
        let events = ServiceEvents::to(rec.clone());
        // A cause with a NUL (a path from a client) and one far past the limit, made of
        // characters that take two UTF-16 units each.
        events.stopped(&Err("bad path a\0b".into()));
        events.stopped(&Err("\u{1F4BE}".repeat(20_000)));
        let got = rec.events();
        assert_eq!(got.len(), 2, "an event was refused: {got:?}");
        assert_eq!(got[0].2, "csi-proxy stopped: bad path a\u{FFFD}b");
        assert!(got[1].2.ends_with(" [cut]"));
        assert!(got[1].2.encode_utf16().count() <= MAX_MESSAGE_UNITS);
        assert!(got[1].2.encode_utf16().count() > MAX_MESSAGE_UNITS - 10);
        ServiceEvents::none().started(); // no sink: nothing to do, no panic
    }
}
