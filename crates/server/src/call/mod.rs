//! How every RPC runs: host work off the async workers (or, for quick metadata calls, on one
//! worker kept for them), a panic turned into INTERNAL for that request only, errors turned into
//! statuses, and one log line per request at `-v=4` and above. `inline_slot.rs`: which metadata
//! calls may run on the worker that received them.

use crate::status::to_status;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Instant;
use tonic::{Code, Response, Status};

mod inline_slot;

use inline_slot::InlineSlot;

static VERBOSITY: AtomicU8 = AtomicU8::new(0);
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// RPCs that only read metadata (a stat of a path): they usually answer in microseconds, so
/// handing them to the blocking pool (a thread wake-up there and another one back) costs more
/// than the call itself. None of them is a call that can block on the outside world
/// ([`crate::admission`]): those (disk and volume stats, disk IDs) always take a blocking
/// thread under their kind's cap, since one hung on an async worker holds that worker and the
/// tasks queued on it.
const METADATA_RPCS: [&str; 2] = ["PathExists", "IsSymlink"];

/// How many requests have reached a handler since start: a cheap activity signal for
/// housekeeping that should wait for quiet moments.
pub fn requests_started() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

/// Sets the klog-style verbosity (`-v`); request lines are logged from 4 up.
pub fn set_verbosity(v: u8) {
    VERBOSITY.store(v, Ordering::Relaxed);
}

/// The klog-style verbosity.
pub fn verbosity() -> u8 {
    VERBOSITY.load(Ordering::Relaxed)
}

/// Names one RPC of one group-version, for logs and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcId {
    /// API group, e.g. `disk`.
    pub group: &'static str,
    /// API version, e.g. `v1beta3`.
    pub version: &'static str,
    /// RPC name as on the wire, e.g. `PartitionDisk`.
    pub method: &'static str,
    /// The driver name of the profile whose endpoint received the call; empty without
    /// profiles (`--profiles`). Labels its metrics and log lines.
    pub profile: &'static str,
}

/// `profile` as a `&'static str` for [`RpcId::profile`]: each distinct name is leaked once, so
/// the memory kept is bounded by the number of profiles the daemon serves; `None` (no
/// profiles) is the empty name.
pub fn profile_label(profile: Option<&str>) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let Some(name) = profile.filter(|p| !p.is_empty()) else {
        return "";
    };
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = names.iter().find(|n| **n == name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(leaked);
    leaked
}

/// Runs `work` (blocking host work) on tokio's blocking pool and answers the RPC with its result.
///
/// Host calls block (syscalls, mkfs, WMI), so they do not run on the async workers; the
/// exception is a metadata RPC ([`METADATA_RPCS`]) while an inline slot is free, which runs
/// where it was received. A panic inside `work` is caught and answered with INTERNAL; the
/// daemon keeps serving.
///
/// `deadline` is the caller's ([`deadline_of`]): host work that has not started by then is not
/// started (see `csi_proxy_core::deadline`).
pub async fn blocking<T, F>(
    rpc: RpcId,
    deadline: Option<Instant>,
    work: F,
) -> Result<Response<T>, Status>
where
    F: FnOnce() -> csi_proxy_core::Result<T> + Send + 'static,
    T: Send + 'static,
{
    blocking_on(rpc, None, deadline, work).await
}

/// [`blocking`] for a call acting on `object` ("disk 3", "portal 10.0.0.1:3260"): a call that
/// can block on the outside world first takes its places under its kind's caps
/// ([`crate::admission`]), waiting for them without a thread, and holds them until its work
/// ends.
pub async fn blocking_on<T, F>(
    rpc: RpcId,
    object: Option<String>,
    deadline: Option<Instant>,
    work: F,
) -> Result<Response<T>, Status>
where
    F: FnOnce() -> csi_proxy_core::Result<T> + Send + 'static,
    T: Send + 'static,
{
    let started = Instant::now();
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    let in_flight = crate::metrics::InFlight::start(rpc);
    let admitted = match crate::admission::admit(rpc, object, deadline).await {
        Ok(admitted) => admitted,
        Err(refused) => {
            in_flight.finish(refused.code());
            let result = Err(refused);
            log_request(rpc, started, &result);
            return result;
        }
    };
    let work = move || {
        csi_proxy_core::deadline::within(deadline, || {
            csi_proxy_core::deadline::check(rpc.method, "request")?;
            work()
        })
    };
    let slot = if METADATA_RPCS.contains(&rpc.method) {
        InlineSlot::wait().await
    } else {
        None
    };
    let ran = match slot {
        Some(slot) => {
            let r = std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(panic_message);
            drop(slot);
            r
        }
        None => tokio::task::spawn_blocking(work).await.map_err(|join| {
            if join.is_panic() {
                panic_message(join.into_panic())
            } else {
                "the request was cancelled".to_string()
            }
        }),
    };
    let result = match ran {
        Ok(Ok(v)) => Ok(Response::new(v)),
        Ok(Err(e)) => Err(to_status(&e)),
        Err(what) => {
            tracing::error!(
                group = rpc.group,
                version = rpc.version,
                method = rpc.method,
                "request handler failed: {what}"
            );
            Err(Status::new(
                Code::Internal,
                format!(
                    "{} {}: internal error in the handler ({what})",
                    rpc.group, rpc.method
                ),
            ))
        }
    };
    drop(admitted);
    let code = match &result {
        Ok(_) => Code::Ok,
        Err(s) => s.code(),
    };
    in_flight.finish(code);
    log_request(rpc, started, &result);
    result
}

/// When the caller stops waiting for `request`: the moment the daemon answers it
/// DEADLINE_EXCEEDED, as [`crate::spec_status`] recorded it on arrival; `None` without a
/// `grpc-timeout`.
pub fn deadline_of<T>(request: &tonic::Request<T>) -> Option<Instant> {
    request
        .extensions()
        .get::<crate::spec_status::CallDeadline>()
        .map(|d| d.0)
}

fn log_request<T>(rpc: RpcId, started: Instant, result: &Result<Response<T>, Status>) {
    let code = match result {
        Ok(_) => Code::Ok,
        Err(s) => s.code(),
    };
    if verbosity() >= 4 {
        tracing::info!(
            profile = rpc.profile,
            group = rpc.group,
            version = rpc.version,
            method = rpc.method,
            // Microseconds, as milliseconds with three decimals: no binary-float tail.
            duration_ms = %format_args!("{:.3}", started.elapsed().as_secs_f64() * 1e3),
            code = ?code,
            "request"
        );
    }
    if let Err(s) = result
        && (verbosity() >= 2 || code == Code::Internal)
    {
        tracing::warn!(
            profile = rpc.profile,
            group = rpc.group,
            version = rpc.version,
            method = rpc.method,
            code = ?code,
            "request failed: {}",
            s.message()
        );
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// Defines one unary RPC method of a generated tonic service trait inside an adapter `impl`.
///
/// `unary!(group, version_module, rust_fn, "WireName", Req => Resp, |svc, req| body)`: the body
/// runs on the blocking pool with a clone of `self.svc` and the decoded request and returns
/// `csi_proxy_core::Result<Resp>`. With `on |req| object` before the body, `object`
/// (an `Option<String>` read from the request) names what the call acts on, for the admission
/// caps per object ([`crate::admission`]).
///
/// The generated traits are `#[async_trait]` traits; this expands to the signature
/// `async_trait` produces (a boxed `Send` future), so adapter impls can be assembled from macros
/// (an attribute macro would not see methods produced by inner macro calls).
#[macro_export]
#[doc(hidden)]
macro_rules! unary {
    ($group:ident, $v:ident, $fn:ident, $method:literal, $req:ident => $resp:ident, |$svc:ident, $r:ident| $body:expr) => {
        $crate::unary!($group, $v, $fn, $method, $req => $resp, on |_r| None, |$svc, $r| $body);
    };
    ($group:ident, $v:ident, $fn:ident, $method:literal, $req:ident => $resp:ident, on |$o:ident| $object:expr, |$svc:ident, $r:ident| $body:expr) => {
        fn $fn<'life0, 'async_trait>(
            &'life0 self,
            request: ::tonic::Request<$v::$req>,
        ) -> ::std::pin::Pin<
            Box<
                dyn ::std::future::Future<
                        Output = ::std::result::Result<
                            ::tonic::Response<$v::$resp>,
                            ::tonic::Status,
                        >,
                    > + Send
                    + 'async_trait,
            >,
        >
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            let deadline = $crate::call::deadline_of(&request);
            #[allow(unused_variables)]
            let $r = request.into_inner();
            let object: ::std::option::Option<::std::string::String> = {
                #[allow(unused_variables)]
                let $o = &$r;
                $object
            };
            #[allow(unused_variables)]
            let $svc = self.svc.clone();
            Box::pin($crate::call::blocking_on(
                $crate::call::RpcId {
                    group: stringify!($group),
                    version: stringify!($v),
                    method: $method,
                    profile: self.profile,
                },
                object,
                deadline,
                move || -> ::csi_proxy_core::Result<$v::$resp> { $body },
            ))
        }
    };
}

/// Declares an adapter struct for one group-version: it holds the group's service and turns
/// into the generated tonic server.
#[macro_export]
#[doc(hidden)]
macro_rules! adapter {
    ($(#[$doc:meta])* $name:ident, $svc:ty, $group:ident :: $v:ident :: $server_mod:ident :: $server:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name {
            svc: $svc,
            profile: &'static str,
        }

        impl $name {
            /// An adapter over the group's version-agnostic service.
            pub fn new(svc: $svc) -> Self {
                Self { svc, profile: "" }
            }

            /// The adapter as served on `profile`'s endpoints: its calls' metrics and log
            /// lines carry the name (see `call::profile_label`).
            pub fn with_profile(mut self, profile: &'static str) -> Self {
                self.profile = profile;
                self
            }

            /// The tonic server for this group-version.
            pub fn into_server(
                self,
            ) -> ::csi_proxy_api::$group::$v::$server_mod::$server<Self> {
                ::csi_proxy_api::$group::$v::$server_mod::$server::new(self)
                    .max_decoding_message_size($crate::limits::max_request_bytes(stringify!($group)))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const RPC: RpcId = RpcId {
        group: "filesystem",
        version: "v1",
        method: "Mkdir",
        profile: "",
    };

    #[test]
    fn no_call_that_can_hang_runs_on_an_async_worker() {
        for group in csi_proxy_api::GROUPS {
            for m in METADATA_RPCS {
                assert_eq!(crate::admission::work_of(group, m), None, "{group} {m}");
            }
        }
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_internal_and_the_next_request_works() {
        let r: Result<Response<()>, Status> = blocking(RPC, None, || panic!("boom")).await;
        let s = r.unwrap_err();
        assert_eq!(s.code(), Code::Internal);
        assert!(s.message().contains("boom"), "{}", s.message());
        assert!(s.message().contains("filesystem Mkdir"), "{}", s.message());
        let ok = blocking(RPC, None, || Ok(7u32)).await.unwrap();
        assert_eq!(ok.into_inner(), 7);
    }

    #[tokio::test]
    async fn errors_become_their_status() {
        let r: Result<Response<()>, Status> = blocking(RPC, None, || {
            Err(csi_proxy_core::Error::invalid("Mkdir", "\"x\"", "bad"))
        })
        .await;
        assert_eq!(r.unwrap_err().code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn work_whose_deadline_passed_before_it_started_is_not_done() {
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let past = Instant::now() - std::time::Duration::from_millis(1);
        let r: Result<Response<()>, Status> = blocking(RPC, Some(past), move || {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        })
        .await;
        assert_eq!(r.unwrap_err().code(), Code::DeadlineExceeded);
        assert!(!ran.load(Ordering::SeqCst));
    }
}
