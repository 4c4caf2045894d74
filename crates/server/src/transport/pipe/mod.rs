//! Windows named-pipe transport: `\\.\pipe\csi-proxy-<group>-<version>`.
//!
//! [`PipeListener::bind`] creates the first instance of a pipe with an explicit security
//! descriptor; [`PipeListener::into_incoming`] turns it into the stream of connections that
//! `tonic::transport::Server::serve_with_incoming` wants. Each item is a [`PipeConn`].
//!
//! Properties of every pipe instance (compare upstream's go-winio `ListenPipe`, which this
//! mirrors except for the security descriptor):
//!
//! - byte mode, overlapped I/O, unlimited instances, system default buffer sizes;
//! - `PIPE_REJECT_REMOTE_CLIENTS`: only local processes can connect;
//! - the first instance carries `FILE_FLAG_FIRST_PIPE_INSTANCE`, so a second daemon (or anything
//!   else already owning the name) makes [`PipeListener::bind`] fail instead of silently sharing
//!   the name with it;
//! - the security descriptor comes from an SDDL string ([`DEFAULT_PIPE_SDDL`]: SYSTEM and
//!   Administrators only) rather than the Windows default named-pipe DACL, which also grants read
//!   access to Everyone and Anonymous.
//!
//! The account the daemon runs as must itself be granted access by the SDDL: creating every
//! further instance needs `FILE_CREATE_PIPE_INSTANCE` on the pipe, which the DACL decides.
//!
//! Files: this one the listener and its stream of connections, `security.rs` the pipe's
//! security descriptor, `conn.rs` one connected client, `write.rs` its writes (overlapped
//! writes whose completion skips the runtime's completion port) over the Win32 calls in
//! `win32.rs`.
#![allow(
    unsafe_code,
    reason = "creating a pipe instance with a raw security descriptor has no safe wrapper"
)]

use std::ffi::c_void;
use std::fmt;
use std::future::Future;
use std::io;
use std::os::windows::io::AsRawHandle;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::windows::named_pipe::{NamedPipeServer, PipeMode, ServerOptions};
use tokio_stream::Stream;
use windows::Win32::Foundation::{HANDLE, HLOCAL, LocalFree};
use windows::Win32::Security::Authorization::{
    ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows::Win32::Security::{
    ACL, GetSecurityDescriptorDacl, PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES,
};
use windows::Win32::System::Pipes::GetNamedPipeClientProcessId;
use windows::core::{BOOL, PCWSTR};

mod conn;
mod security;
mod win32;
mod write;

pub use conn::{PipeConn, PipeConnectInfo};
use security::*;

/// Default security descriptor of every pipe: a protected DACL (`P`: nothing inherited) granting
/// `GENERIC_ALL` to LocalSystem (`SY`) and BUILTIN\Administrators (`BA`), and nothing to anyone
/// else. CSI node plugins run as `ContainerAdministrator`/`NT AUTHORITY\SYSTEM` host-process
/// containers, which this admits.
pub const DEFAULT_PIPE_SDDL: &str = "D:P(A;;GA;;;SY)(A;;GA;;;BA)";

/// Prefix of every local pipe path.
const PIPE_PREFIX: &str = r"\\.\pipe\";

/// Attempts to create a further pipe instance before the endpoint gives up (~0.85 s in all).
const CREATE_ATTEMPTS: u32 = 5;

/// Win32 `ERROR_ACCESS_DENIED`.
const ERROR_ACCESS_DENIED: i32 = 5;
/// Win32 `ERROR_PIPE_BUSY`.
const ERROR_PIPE_BUSY: i32 = 231;

/// Full pipe path for a group-version endpoint: `\\.\pipe\csi-proxy-<group>-<version>`.
pub fn pipe_path(group: &str, version: &str) -> String {
    format!("{PIPE_PREFIX}csi-proxy-{group}-{version}")
}
/// A named pipe that accepts connections: the listening instance plus what is needed to create
/// the next one.
#[derive(Debug)]
pub struct PipeListener {
    path: String,
    security: Arc<PipeSecurity>,
    /// The instance clients connect to next; `None` only after creating it failed.
    listening: Option<NamedPipeServer>,
    /// Connection attempts that failed in a row; drives a small back-off.
    failures: u32,
}

impl PipeListener {
    /// Creates the first instance of the pipe `name` with the security descriptor `sddl`.
    ///
    /// `name` is either a full local pipe path (`\\.\pipe\csi-proxy-disk-v1`) or the bare name
    /// after `\\.\pipe\` (`csi-proxy-disk-v1`). Must be called inside a Tokio runtime.
    ///
    /// Errors: [`io::ErrorKind::InvalidInput`] for a bad name or SDDL;
    /// [`io::ErrorKind::AddrInUse`] when the pipe already exists (another csi-proxy running).
    pub fn bind(name: &str, sddl: &str) -> io::Result<PipeListener> {
        let path = full_pipe_path(name)?;
        let security: Arc<PipeSecurity> = PipeSecurity::from_sddl(sddl)?.into();
        ensure_no_server(&path)?;
        let first = create_instance(&path, &security, true).map_err(|e| {
            // FILE_FLAG_FIRST_PIPE_INSTANCE: "If you attempt to create multiple instances of a
            // pipe with this flag, creation of the first instance succeeds, but creation of the
            // next instance fails with ERROR_ACCESS_DENIED." So ACCESS_DENIED here means the name
            // is taken (by a pipe whose DACL may also keep us out). PIPE_BUSY: the existing pipe
            // has reached its instance limit.
            match e.raw_os_error() {
                Some(ERROR_ACCESS_DENIED | ERROR_PIPE_BUSY) => already_in_use(&path, &e),
                _ => io::Error::new(e.kind(), format!("cannot create pipe {path}: {e}")),
            }
        })?;
        Ok(PipeListener {
            path,
            security,
            listening: Some(first),
            failures: 0,
        })
    }

    /// Creates a further instance of the pipe `name` while another process (the csi-proxy being
    /// replaced) still serves it, so clients find an instance of one or the other at every
    /// moment; with nobody serving the name it is [`Self::bind`].
    ///
    /// Only for a hand-off agreed through the state directory: it is what
    /// `FILE_FLAG_FIRST_PIPE_INSTANCE` exists to prevent. The pipe keeps the security
    /// descriptor its first instance was created with ("Named Pipe Security and Access Rights":
    /// creating an instance of an existing pipe is an access check against the DACL in the
    /// pipe's security descriptor, which needs `FILE_CREATE_PIPE_INSTANCE`), so `sddl` takes
    /// effect only once every instance of the old process is gone; the caller makes sure it
    /// is the one the old process used.
    ///
    /// Errors: as [`Self::bind`]; [`io::ErrorKind::PermissionDenied`] when the pipe's DACL does
    /// not grant this account `FILE_CREATE_PIPE_INSTANCE`.
    pub fn bind_beside(name: &str, sddl: &str) -> io::Result<PipeListener> {
        let path = full_pipe_path(name)?;
        if ensure_no_server(&path).is_ok() {
            return PipeListener::bind(&path, sddl);
        }
        let security: Arc<PipeSecurity> = PipeSecurity::from_sddl(sddl)?.into();
        let next = create_instance(&path, &security, false).map_err(|e| match e.raw_os_error() {
            Some(ERROR_ACCESS_DENIED) => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "cannot create an instance of pipe {path} beside its running server: its \
                     security descriptor does not grant this account FILE_CREATE_PIPE_INSTANCE ({e})"
                ),
            ),
            _ => io::Error::new(e.kind(), format!("cannot create pipe {path}: {e}")),
        })?;
        Ok(PipeListener {
            path,
            security,
            listening: Some(next),
            failures: 0,
        })
    }

    /// The full pipe path, `\\.\pipe\...`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The SDDL string the pipe's security descriptor was built from.
    pub fn sddl(&self) -> &str {
        &self.security.sddl
    }

    /// Waits for the next client and returns its connection.
    ///
    /// The next instance is created before the connected one is returned, so a client that
    /// arrives while the caller is busy finds an instance waiting instead of `ERROR_PIPE_BUSY`.
    /// A client that connects and goes away before it is accepted is skipped. An error means no
    /// instance could be created, even after a few retries: nobody can connect until a later
    /// call succeeds in creating one. Cancel-safe: dropping the future loses no connection.
    pub async fn accept(&mut self) -> io::Result<PipeConn> {
        loop {
            if self.listening.is_none() {
                self.listening = Some(self.create_next_retrying().await?);
            }
            let Some(server) = &self.listening else {
                unreachable!("a listening instance was just created");
            };
            if self.failures > 1 {
                // Something keeps failing every connection: do not spin.
                let backoff = Duration::from_millis(10u64 << self.failures.min(7));
                tokio::time::sleep(backoff).await;
            }
            // ConnectNamedPipe, overlapped. A client that connected before the call is reported
            // as ERROR_PIPE_CONNECTED, which tokio treats as success.
            match server.connect().await {
                Ok(()) => {
                    self.failures = 0;
                    let connected = self.listening.take().expect("listening instance is set");
                    // Next instance first, then hand out the connected one. If that fails, the
                    // connected client is still served and the next `accept` retries creation
                    // (and fails only if that does not succeed either).
                    match self.create_next() {
                        Ok(next) => self.listening = Some(next),
                        Err(e) => tracing::error!(
                            pipe = %self.path, error = %e,
                            "cannot create the next pipe instance"
                        ),
                    }
                    return Ok(PipeConn::new(connected));
                }
                Err(e) => {
                    // Typically ERROR_NO_DATA: the client closed its end before we got to
                    // ConnectNamedPipe. That instance cannot be reused without
                    // DisconnectNamedPipe; drop it and listen on a fresh one.
                    self.failures = self.failures.saturating_add(1);
                    tracing::debug!(
                        pipe = %self.path, error = %e,
                        "pipe client went away before it was accepted"
                    );
                    self.listening = None;
                }
            }
        }
    }

    /// Turns the listener into a stream of connections for
    /// `tonic::transport::Server::serve_with_incoming`.
    ///
    /// Every `Ok` item is a connected client. An `Err` item says no pipe instance could be
    /// created, even after a few retries; the stream goes on, and the next poll tries again
    /// (the caller paces it: the daemon pauses accepts after an error, up to a second). The
    /// stream never ends by itself. Per-connection failures are logged and skipped, never
    /// yielded.
    pub fn into_incoming(self) -> Incoming {
        Incoming {
            state: IncomingState::Idle(Box::new(self)),
        }
    }

    /// [`Self::create_next`], retried a few times with a growing delay: the usual causes of a
    /// failure (resource shortages) pass.
    async fn create_next_retrying(&self) -> io::Result<NamedPipeServer> {
        let mut delay = Duration::from_millis(10);
        let mut attempt = 1;
        loop {
            match self.create_next() {
                Ok(next) => return Ok(next),
                Err(e) if attempt < CREATE_ATTEMPTS => {
                    tracing::warn!(
                        pipe = %self.path, error = %e, attempt,
                        "cannot create a pipe instance; retrying"
                    );
                    tokio::time::sleep(delay).await;
                    delay *= 4;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn create_next(&self) -> io::Result<NamedPipeServer> {
        create_instance(&self.path, &self.security, false)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot create pipe {}: {e}", self.path)))
    }
}

fn already_in_use(path: &str, why: &dyn fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("pipe {path} is already in use: another csi-proxy is running? ({why})"),
    )
}

/// Fails if a server already listens on `path`, by dialling it once as a client would.
///
/// On Windows `FILE_FLAG_FIRST_PIPE_INSTANCE` already makes `bind` fail atomically, and this is
/// only an earlier, clearer check. wine (8.0) ignores that flag and would silently make us a
/// second server of the same pipe; this check is what catches a second daemon there. The other
/// server sees one connection that closes without a byte, which it must tolerate anyway
/// (upstream's Go clients do the same before every dial).
fn ensure_no_server(path: &str) -> io::Result<()> {
    // CreateFileW on a pipe name connects to a free instance of it.
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_probe) => Err(already_in_use(path, &"a server answered on it")),
        // The pipe exists but every instance is connected, or its DACL keeps us out.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(ERROR_PIPE_BUSY | ERROR_ACCESS_DENIED)
            ) =>
        {
            Err(already_in_use(path, &e))
        }
        // Normally ERROR_FILE_NOT_FOUND: nobody serves the name. Anything else is left to
        // CreateNamedPipeW to report.
        Err(_) => Ok(()),
    }
}

/// Creates one instance of the pipe `path`.
fn create_instance(
    path: &str,
    security: &PipeSecurity,
    first: bool,
) -> io::Result<NamedPipeServer> {
    let mut options = ServerOptions::new();
    options
        // FILE_FLAG_FIRST_PIPE_INSTANCE on the first instance only: fail if the name exists.
        .first_pipe_instance(first)
        // PIPE_REJECT_REMOTE_CLIENTS: connections from other machines are refused by the
        // system; upstream's pipes do the same.
        .reject_remote_clients(true)
        // PIPE_TYPE_BYTE | PIPE_READMODE_BYTE: HTTP/2 is a byte stream.
        .pipe_mode(PipeMode::Byte)
        .access_inbound(true)
        .access_outbound(true);
    // SAFETY: the pointer refers to `security.attributes`, a valid SECURITY_ATTRIBUTES whose
    // lpSecurityDescriptor is a valid self-relative descriptor; both live in `security`, which
    // the caller keeps alive for the whole call. CreateNamedPipeW only reads them ("If
    // lpSecurityAttributes is NULL, the named pipe gets a default security descriptor": we pass
    // our own instead).
    unsafe { options.create_with_security_attributes_raw(path, security.attributes_ptr()) }
}

/// `\\.\pipe\<name>` from a bare name or a full local pipe path.
fn full_pipe_path(name: &str) -> io::Result<String> {
    let invalid = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid pipe name {name:?}: {why}"),
        )
    };
    let bare = if name.starts_with(r"\\") || name.starts_with("//") {
        let prefix = name.get(..PIPE_PREFIX.len()).unwrap_or("");
        if !prefix.replace('/', r"\").eq_ignore_ascii_case(PIPE_PREFIX) {
            return Err(invalid(r"only local pipes (\\.\pipe\...) can be served"));
        }
        &name[PIPE_PREFIX.len()..]
    } else {
        name
    };
    if bare.is_empty() {
        return Err(invalid("empty pipe name"));
    }
    if bare.contains('\0') {
        return Err(invalid("contains a NUL character"));
    }
    // Pipe names are limited to 256 characters including the `\\.\pipe\` prefix.
    if PIPE_PREFIX.len() + bare.encode_utf16().count() > 256 {
        return Err(invalid("longer than 256 characters"));
    }
    Ok(format!("{PIPE_PREFIX}{bare}"))
}

type AcceptFuture = Pin<Box<dyn Future<Output = (Box<PipeListener>, io::Result<PipeConn>)> + Send>>;

enum IncomingState {
    Idle(Box<PipeListener>),
    Accepting(AcceptFuture),
    Done,
}

/// Stream of accepted pipe connections; see [`PipeListener::into_incoming`].
pub struct Incoming {
    state: IncomingState,
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            IncomingState::Idle(l) => format!("idle on {}", l.path),
            IncomingState::Accepting(_) => "accepting".to_owned(),
            IncomingState::Done => "done".to_owned(),
        };
        f.debug_struct("Incoming").field("state", &state).finish()
    }
}

impl Stream for Incoming {
    type Item = io::Result<PipeConn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match std::mem::replace(&mut self.state, IncomingState::Done) {
                IncomingState::Done => return Poll::Ready(None),
                IncomingState::Idle(mut listener) => {
                    self.state = IncomingState::Accepting(Box::pin(async move {
                        let result = listener.accept().await;
                        (listener, result)
                    }));
                }
                IncomingState::Accepting(mut accepting) => match accepting.as_mut().poll(cx) {
                    Poll::Pending => {
                        self.state = IncomingState::Accepting(accepting);
                        return Poll::Pending;
                    }
                    Poll::Ready((listener, Ok(conn))) => {
                        self.state = IncomingState::Idle(listener);
                        return Poll::Ready(Some(Ok(conn)));
                    }
                    // No instance could be created this time: report it and try again on the
                    // next poll (the daemon's accept back-off paces the retries). Ending the
                    // stream would end the endpoint for good over a passing shortage.
                    Poll::Ready((listener, Err(e))) => {
                        self.state = IncomingState::Idle(listener);
                        return Poll::Ready(Some(Err(e)));
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_paths() {
        assert_eq!(pipe_path("disk", "v1"), r"\\.\pipe\csi-proxy-disk-v1");
        assert_eq!(
            full_pipe_path("csi-proxy-disk-v1").unwrap(),
            r"\\.\pipe\csi-proxy-disk-v1"
        );
        assert_eq!(
            full_pipe_path(r"\\.\PIPE\csi-proxy-disk-v1").unwrap(),
            r"\\.\pipe\csi-proxy-disk-v1"
        );
        for bad in [r"\\server\pipe\x", r"\\.\pipe\", "", "a\0b", r"\\?\C:\x"] {
            let e = full_pipe_path(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        assert!(full_pipe_path(&"x".repeat(300)).is_err());
    }
}
