//! The WMI threads: every WMI call of the daemon runs on the thread of its namespace.
//!
//! A [`wmi::WMIConnection`] is `!Send` (a COM interface pointer bound to the apartment that
//! created it), and connecting to a namespace costs a round trip to the WMI service, so one
//! dedicated thread per namespace, started on first use, owns that namespace's connection.
//! Callers hand it closures with [`with_namespace`] and wait at most [`CALL_LIMIT`] for the
//! answer. Calls to one namespace are serialised; calls to different namespaces are not, so an
//! SMB mapping stuck on a dead server (`ROOT\Microsoft\Windows\SMB`) never holds up a format
//! (`ROOT\Microsoft\Windows\Storage`). WMI is only used for the few operations Windows has no
//! documented Win32 call for (volume format, SMB global mappings, page files, the BIOS serial
//! fallback).
//!
//! COM is initialised by the `wmi` crate when the first connection is made on this thread: it
//! joins the process's multithreaded apartment (`CoIncrementMTAUsage`) and sets the default
//! process security (`CoInitializeSecurity` with impersonation), which WMI requires before
//! `IWbemLocator::ConnectServer`.
//!
//! A closure that panics does not take the thread down: the panic is caught and reported as an
//! INTERNAL error naming the operation, and the thread serves the next call.

use super::os::{OsError, Win32Result};
use csi_proxy_core::{Error, Kind, Result};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Mutex, OnceLock};

pub use crate::windows_data::wmi_codes::hresult_kind;

/// A unit of work for the WMI thread.
type Job = Box<dyn FnOnce(&mut Connections) + Send>;

/// The connections the WMI thread holds, by namespace.
type Connections = HashMap<&'static str, wmi::WMIConnection>;

/// The sending side of each namespace thread's queue, created with the thread.
static QUEUES: OnceLock<Mutex<HashMap<&'static str, SyncSender<Job>>>> = OnceLock::new();

/// How many jobs may wait for a namespace's thread; more are refused as UNAVAILABLE.
const QUEUE_DEPTH: usize = 64;

/// How long a caller waits for a WMI call: a quick format of a large volume takes seconds, an
/// SMB mapping to a server that does not answer can take minutes. The call itself is not
/// cancelled (WMI has no way to), but its caller is answered.
pub const CALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs `f` on the WMI thread with a connection to `namespace` (e.g.
/// `r"ROOT\Microsoft\Windows\Storage"`), and returns its result.
///
/// `op` names the operation for error messages. A namespace that cannot be connected to
/// (absent on this Windows edition or under Wine) is an error naming `op` and the namespace; a
/// later call tries to connect again. A panic in `f` is an INTERNAL error.
pub fn with_namespace<R, F>(op: &'static str, namespace: &'static str, f: F) -> Result<R>
where
    R: Send + 'static,
    F: FnOnce(&wmi::WMIConnection) -> Result<R> + Send + 'static,
{
    let (reply_tx, reply_rx) = sync_channel::<Result<R>>(1);
    let job: Job = Box::new(move |conns: &mut Connections| {
        let result = run_job(op, namespace, conns, f);
        // The caller may have gone away (it never does today: it blocks on the reply); nothing
        // to do then.
        let _ = reply_tx.send(result);
    });
    submit(op, namespace, job)?;
    match reply_rx.recv_timeout(CALL_LIMIT) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(Error::new(
            Kind::Unavailable,
            op,
            format!("WMI namespace {namespace}"),
            format!(
                "WMI did not answer within {} s; the call may still complete",
                CALL_LIMIT.as_secs()
            ),
        )),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(Error::new(
            Kind::Internal,
            op,
            format!("WMI namespace {namespace}"),
            "the WMI thread ended without answering",
        )),
    }
}

/// Connects if needed and runs `f`, catching a panic.
fn run_job<R, F>(
    op: &'static str,
    namespace: &'static str,
    conns: &mut Connections,
    f: F,
) -> Result<R>
where
    F: FnOnce(&wmi::WMIConnection) -> Result<R>,
{
    let conn = match conns.entry(namespace) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            let conn = wmi::WMIConnection::with_namespace_path(namespace)
                .map_err(|e| wmi_error(op, format!("WMI namespace {namespace}"), &e))?;
            v.insert(conn)
        }
    };
    match catch_unwind(AssertUnwindSafe(|| f(conn))) {
        Ok(result) => result,
        Err(_) => {
            // The connection may be mid-call in an unknown state; drop it so the next call
            // reconnects.
            conns.remove(namespace);
            Err(Error::new(
                Kind::Internal,
                op,
                format!("WMI namespace {namespace}"),
                "the WMI call panicked",
            ))
        }
    }
}

/// Hands `job` to `namespace`'s thread, starting it on first use (and again if it ever died).
fn submit(op: &'static str, namespace: &'static str, job: Job) -> Result<()> {
    let slot = QUEUES.get_or_init(|| Mutex::new(HashMap::new()));
    // A poisoned lock only means another submitter panicked while holding it; the map inside
    // is still consistent.
    let mut queues = slot.lock().unwrap_or_else(|p| p.into_inner());
    let mut job = job;
    for _ in 0..2 {
        let tx = match queues.entry(namespace) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(spawn_thread(op)?),
        };
        match tx.try_send(job) {
            Ok(()) => return Ok(()),
            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                return Err(Error::new(
                    Kind::Unavailable,
                    op,
                    format!("WMI namespace {namespace}"),
                    format!("{QUEUE_DEPTH} WMI calls are already waiting; try again later"),
                ));
            }
            // The thread is gone (it only ends if its loop panicked outside a job): start a
            // new one and retry once with the same job.
            Err(std::sync::mpsc::TrySendError::Disconnected(back)) => {
                job = back;
                queues.remove(namespace);
            }
        }
    }
    Err(Error::new(
        Kind::Internal,
        op,
        "WMI thread",
        "could not hand the call to the WMI thread",
    ))
}

/// Starts a WMI thread and returns its queue.
fn spawn_thread(op: &'static str) -> Result<SyncSender<Job>> {
    let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
    std::thread::Builder::new()
        .name("csi-proxy-wmi".into())
        .spawn(move || serve(rx))
        .map_err(|e| Error::io(op, "WMI thread", &e))?;
    Ok(tx)
}

/// The WMI thread's loop: runs jobs until every sender is gone.
fn serve(rx: Receiver<Job>) {
    let mut conns = Connections::new();
    while let Ok(job) = rx.recv() {
        job(&mut conns);
    }
}

/// Runs `f` on the WMI thread against `namespace`, for the Win32 seam: `f`'s errors stay
/// [`OsError`]s; a failure to reach the thread or to connect becomes one too.
pub fn run_in<R, F>(namespace: &'static str, f: F) -> Win32Result<R>
where
    R: Send + 'static,
    F: FnOnce(&wmi::WMIConnection) -> Win32Result<R> + Send + 'static,
{
    match with_namespace("WMI", namespace, move |c| Ok(f(c))) {
        Ok(r) => r,
        Err(e) => {
            // The thread or the connection failed: keep the kind readable through a code.
            let code = match e.kind() {
                Kind::Unavailable => 0x8001_0108,
                Kind::PermissionDenied => 0x8007_0005,
                Kind::NotFound => 0x8004_1002,
                _ => 0x8000_FFFF,
            };
            Err(OsError::with_message(code, e.message()))
        }
    }
}

/// Drops every cached WMI connection, so the next call connects again: after `winmgmt`
/// restarts, a connection made before answers RPC_E_DISCONNECTED for ever. Each namespace's
/// thread drops its own before its next job.
pub fn reset() {
    let namespaces: Vec<&'static str> = QUEUES
        .get()
        .map(|q| {
            q.lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .copied()
                .collect()
        })
        .unwrap_or_default();
    for namespace in namespaces {
        let job: Job = Box::new(|conns: &mut Connections| conns.clear());
        if let Err(e) = submit("WMI reset", namespace, job) {
            tracing::warn!("could not reset the WMI connection to {namespace}: {e}");
        }
    }
}

/// Maps a WMI/COM error from operation `op` on `object` to an [`Error`], choosing the kind from
/// the HRESULT (e.g. `WBEM_E_NOT_FOUND` is NOT_FOUND, `WBEM_E_INVALID_NAMESPACE` and
/// `WBEM_E_INVALID_CLASS` are UNIMPLEMENTED: the provider is absent on this host).
pub fn wmi_error(op: &str, object: impl std::fmt::Display, err: &wmi::WMIError) -> Error {
    match err {
        wmi::WMIError::HResultError { hres } => Error::new(
            hresult_kind(*hres),
            op,
            object,
            crate::windows_data::wmi_codes::describe_hresult(*hres),
        ),
        wmi::WMIError::ResultEmpty => Error::new(Kind::NotFound, op, object, "no WMI object"),
        other => Error::new(Kind::Internal, op, object, format!("WMI: {other}")),
    }
}

/// Reads property `name` of a WMI object, naming `op` and `object` on failure.
pub fn property(
    op: &str,
    object: &str,
    obj: &wmi::IWbemClassWrapper,
    name: &str,
) -> Result<wmi::Variant> {
    obj.get_property(name)
        .map_err(|e| wmi_error(op, format!("{object} property {name}"), &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_job_is_an_internal_error_and_the_thread_survives() {
        // No WMI namespace is needed to prove the plumbing: an invalid namespace fails to
        // connect before the closure runs, and is reported with op and namespace.
        let e = with_namespace("Probe", r"ROOT\NoSuchNamespaceForTests", |_| Ok(1)).unwrap_err();
        assert!(
            e.message().starts_with("Probe WMI namespace"),
            "{}",
            e.message()
        );
        assert_ne!(e.kind(), Kind::Internal, "{}", e.message());
        // The thread still answers.
        let e = with_namespace("Again", r"ROOT\NoSuchNamespaceForTests", |_| Ok(1)).unwrap_err();
        assert!(e.message().starts_with("Again"), "{}", e.message());
    }
}
