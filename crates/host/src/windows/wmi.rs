//! The WMI threads: every WMI call of the daemon runs on a thread of its namespace's pool.
//!
//! A [`wmi::WMIConnection`] is `!Send` (a COM interface pointer bound to the apartment that
//! created it), and connecting to a namespace costs a round trip to the WMI service, so each
//! namespace has a small pool of threads ([`Namespaces`]), started as calls need them, each owning
//! its own connection. Callers hand them closures with [`with_namespace`] and wait at most
//! [`CALL_LIMIT`] (or their own deadline) for the answer; a call not started by then is
//! dropped. An SMB mapping stuck on a dead server (`ROOT\Microsoft\Windows\SMB`) holds one
//! thread, never a format (`ROOT\Microsoft\Windows\Storage`) nor the other mappings. WMI is only used for the few operations Windows has no
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

use super::os::Win32Result;
use super::os::pool::{Namespaces, as_os_error};
use csi_proxy_core::{Error, Kind, Result};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::LazyLock;

pub use csi_proxy_formats::windows_buffers::wmi_codes::hresult_kind;

/// A WMI thread's connection to its namespace, made on first use.
type Connection = Option<wmi::WMIConnection>;

/// Each namespace's pool of WMI threads, created on first use of the namespace.
static POOLS: LazyLock<Namespaces<Connection>> = LazyLock::new(|| Namespaces::new(|| None));

pub use super::os::pool::CALL_LIMIT;

/// Runs `f` on a WMI thread with a connection to `namespace` (e.g.
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
    POOLS.call(op, namespace, move |conn: &mut Connection| {
        run_job(op, namespace, conn, f)
    })
}

/// Connects if needed and runs `f`, catching a panic.
fn run_job<R, F>(
    op: &'static str,
    namespace: &'static str,
    conn: &mut Connection,
    f: F,
) -> Result<R>
where
    F: FnOnce(&wmi::WMIConnection) -> Result<R>,
{
    if conn.is_none() {
        *conn = Some(
            wmi::WMIConnection::with_namespace_path(namespace)
                .map_err(|e| wmi_error(op, format!("WMI namespace {namespace}"), &e))?,
        );
    }
    let Some(c) = conn.as_ref() else {
        return Err(Error::new(Kind::Internal, op, "WMI", "no connection"));
    };
    match catch_unwind(AssertUnwindSafe(|| f(c))) {
        Ok(result) => result,
        Err(_) => {
            // The connection may be mid-call in an unknown state; drop it so the next call
            // reconnects.
            *conn = None;
            Err(Error::new(
                Kind::Internal,
                op,
                format!("WMI namespace {namespace}"),
                "the WMI call panicked",
            ))
        }
    }
}

/// Runs `f` on the WMI thread against `namespace`, for the Win32 seam: `f`'s errors stay
/// [`OsError`]s; a failure to reach the thread or to connect becomes one too.
pub fn run_in<R, F>(namespace: &'static str, f: F) -> Win32Result<R>
where
    R: Send + 'static,
    F: FnOnce(&wmi::WMIConnection) -> Win32Result<R> + Send + 'static,
{
    POOLS.run_in(namespace, move |conn: &mut Connection| {
        run_job("WMI", namespace, conn, move |c| Ok(f(c))).unwrap_or_else(|e| Err(as_os_error(&e)))
    })
}

/// Drops every cached WMI connection, so the next call connects again: after `winmgmt`
/// restarts, a connection made before answers RPC_E_DISCONNECTED for ever. Each WMI thread
/// makes its connection anew before its next call.
pub fn reset() {
    POOLS.reset();
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
            csi_proxy_formats::windows_buffers::wmi_codes::describe_hresult(*hres),
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
