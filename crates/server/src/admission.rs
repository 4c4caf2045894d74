//! Admission of the calls that can block on the outside world, stated once.
//!
//! A call whose host work may wait for something the daemon does not control (a portal on the
//! network, a filesystem tool, an SMB server, a disk or share that stopped answering) holds one
//! thread of the blocking pool for as long as that wait lasts. Each such kind of work ([`Work`])
//! has a cap on the calls that run at once, in all and on one object (a portal, a share, a disk
//! or volume); a call past a cap waits for a place **before** it takes a thread (an async wait,
//! a few hundred bytes), within its deadline or, without one, [`ADMISSION_WAIT`]. The caps
//! together ([`HANGING_THREADS`]) leave most of the blocking pool's 512 threads to the calls that
//! cannot hang (path calls, metadata), so a flood of one kind of work never starves them.
//!
//! A call that gets no place answers DEADLINE_EXCEEDED (its deadline passed) or
//! RESOURCE_EXHAUSTED (no deadline, or [`WAITING_PER_KIND`] calls already wait), naming the cap;
//! each refusal is counted as `csi_proxy_refused_total{limit="admission_<kind>"}`.
//!
//! Which RPC is which kind is [`work_of`], one table over every RPC of every version; the object
//! a call is capped on is named by its adapter (the `on |r| ...` clause of `unary!`).

use crate::call::RpcId;
use crate::metrics::{Limit, refused};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// A kind of work that can block on the outside world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Work {
    /// iSCSI discovery and logins: a portal that accepts and never answers holds the call for
    /// the initiator's own timeouts.
    Network,
    /// The filesystem tools: mkfs, fsck, resize (minutes on a large or slow disk).
    Tools,
    /// SMB mounts and mapping probes: a server that stopped answering holds them.
    Smb,
    /// Stats and I/O on a disk or volume that may stop answering (a hostile iSCSI target, a
    /// device under a frozen filesystem): partitioning, mounting, flushing, probing.
    DeviceIo,
}

/// One kind's caps.
#[derive(Debug, Clone, Copy)]
pub struct Cap {
    /// The kind.
    pub work: Work,
    /// The `limit` label of its refusals, and its name in docs/operating.md.
    pub label: &'static str,
    /// The work, in words, for messages.
    pub what: &'static str,
    /// Calls of this kind running at once, in the whole daemon.
    pub calls: usize,
    /// Calls of this kind running at once on one object.
    pub per_object: usize,
}

/// Every kind's caps. A node stages a few volumes at a time (kubelet's calls per volume are
/// sequential); 4 calls of a kind on one object and 16 to 48 in all are far above a driver's
/// flow, while each cap is a small share of the blocking pool.
pub const CAPS: [Cap; 4] = [
    Cap {
        work: Work::Network,
        label: "admission_network",
        what: "iSCSI discovery and login",
        calls: 32,
        per_object: 4,
    },
    Cap {
        work: Work::Tools,
        label: "admission_tools",
        what: "filesystem tool (mkfs, fsck, resize)",
        calls: 16,
        per_object: 2,
    },
    Cap {
        work: Work::Smb,
        label: "admission_smb",
        what: "SMB mount and probe",
        calls: 32,
        per_object: 4,
    },
    Cap {
        work: Work::DeviceIo,
        label: "admission_device_io",
        what: "disk and volume I/O",
        calls: 48,
        per_object: 4,
    },
];

/// Blocking threads the calls that can hang take at most, all kinds together: 128 of the pool's
/// 512, so at least 384 are left to the calls that cannot hang.
pub const HANGING_THREADS: usize = CAPS[0].calls + CAPS[1].calls + CAPS[2].calls + CAPS[3].calls;

/// Calls of one kind waiting for a place at most; more are refused at once. A waiting call is
/// an async task (no thread), so this only bounds their memory.
pub const WAITING_PER_KIND: usize = 2048;

/// How long a call without a deadline waits for a place: the daemon's default wait, as for a
/// held disk (kubelet's own timeout for a CSI call).
pub const ADMISSION_WAIT: Duration = csi_proxy_core::locks::DEFAULT_WAIT;

/// The kind of work RPC `method` of `group` does, if it can block on the outside world; `None`
/// for the calls that cannot hang (path calls, metadata read from the kernel's tables).
///
/// Every RPC of every version is named here, either way (a test checks the table against the
/// wire contract), so a new RPC is classified when it is added.
pub fn work_of(group: &str, method: &str) -> Option<Work> {
    match (group, method) {
        (
            "iscsi",
            "AddTargetPortal"
            | "DiscoverTargetPortal"
            | "ConnectTarget"
            | "DisconnectTarget"
            | "RemoveTargetPortal",
        ) => Some(Work::Network),
        ("iscsi", "ListTargetPortals" | "GetTargetDisks" | "SetMutualChapSecret") => None,
        ("smb", "NewSmbGlobalMapping" | "RemoveSmbGlobalMapping") => Some(Work::Smb),
        ("volume", "FormatVolume" | "ResizeVolume") => Some(Work::Tools),
        (
            "volume",
            "IsVolumeFormatted" | "WriteVolumeCache" | "ListVolumesOnDisk" | "MountVolume"
            | "UnmountVolume" | "DismountVolume" | "GetVolumeStats" | "VolumeStats",
        ) => Some(Work::DeviceIo),
        (
            "volume",
            "GetDiskNumberFromVolumeID"
            | "GetVolumeIDFromTargetPath"
            | "GetVolumeDiskNumber"
            | "GetVolumeIDFromMount"
            | "GetClosestVolumeIDFromTargetPath",
        ) => None,
        (
            "disk",
            "PartitionDisk" | "Rescan" | "ListDiskIDs" | "GetDiskStats" | "DiskStats"
            | "SetDiskState" | "SetAttachState",
        ) => Some(Work::DeviceIo),
        (
            "disk",
            "ListDiskLocations" | "GetDiskState" | "GetAttachState" | "GetDiskNumberByName",
        ) => None,
        ("filesystem" | "system", _) => None,
        _ => None,
    }
}

/// Whether [`work_of`] names `method` of `group` (either way): the check behind "every RPC is
/// classified".
pub fn classified(group: &str, method: &str) -> bool {
    work_of(group, method).is_some()
        || matches!(
            (group, method),
            (
                "iscsi",
                "ListTargetPortals" | "GetTargetDisks" | "SetMutualChapSecret"
            ) | (
                "volume",
                "GetDiskNumberFromVolumeID"
                    | "GetVolumeIDFromTargetPath"
                    | "GetVolumeDiskNumber"
                    | "GetVolumeIDFromMount"
                    | "GetClosestVolumeIDFromTargetPath"
            ) | (
                "disk",
                "ListDiskLocations" | "GetDiskState" | "GetAttachState" | "GetDiskNumberByName"
            ) | ("filesystem" | "system", _)
        )
}

/// The object an SMB call is capped on: the share (`\\server\share`, lower-cased) of
/// `remote_path`, so one server's trouble holds up only its own share's calls.
pub fn smb_share(remote_path: &str) -> String {
    let parts: Vec<&str> = remote_path
        .split(['\\', '/'])
        .filter(|s| !s.is_empty())
        .take(2)
        .collect();
    format!(r"share \\{}", parts.join("\\").to_lowercase())
}

/// One kind's places and waiters.
struct Places {
    cap: Cap,
    calls: Arc<Semaphore>,
    waiting: AtomicUsize,
    objects: Mutex<HashMap<String, Arc<Semaphore>>>,
}

static PLACES: LazyLock<[Places; 4]> = LazyLock::new(|| {
    CAPS.map(|cap| Places {
        cap,
        calls: Arc::new(Semaphore::new(cap.calls)),
        waiting: AtomicUsize::new(0),
        objects: Mutex::default(),
    })
});

fn places(work: Work) -> &'static Places {
    &PLACES[work as usize]
}

fn limit(work: Work) -> Limit {
    match work {
        Work::Network => Limit::AdmissionNetwork,
        Work::Tools => Limit::AdmissionTools,
        Work::Smb => Limit::AdmissionSmb,
        Work::DeviceIo => Limit::AdmissionDeviceIo,
    }
}

/// A call's places under its kind's caps, given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    /// Dropped before the object itself, which then finds whether anyone else still uses it.
    _object: Option<(OwnedSemaphorePermit, Object)>,
    _call: OwnedSemaphorePermit,
}

/// A use of one object's places (running or waiting); the last use takes the object out of its
/// kind's table, so the table holds only objects in use.
#[derive(Debug)]
struct Object {
    work: Work,
    key: String,
    places: Arc<Semaphore>,
}

impl Object {
    fn new(work: Work, key: String) -> Self {
        let p = places(work);
        let mut objects = p.objects.lock().unwrap_or_else(|e| e.into_inner());
        let places = objects
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(p.cap.per_object)))
            .clone();
        Object { work, key, places }
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let mut objects = places(self.work)
            .objects
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Ours and the table's: no other call runs or waits on the object (their uses and
        // permits each hold the semaphore too).
        if Arc::strong_count(&self.places) == 2 {
            objects.remove(&self.key);
        }
    }
}

/// Counts a call waiting for a place until dropped (also when the caller goes away).
struct Waiting(&'static Places);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

static BYPASSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Benchmarks only (`csi-proxy-bench-flood`'s "before" row, measured in the same run as its
/// "after"): `true` admits every call at once, as before the caps. The daemon never calls it.
#[doc(hidden)]
pub fn bypass_for_benchmarks(bypass: bool) {
    BYPASSED.store(bypass, Ordering::Relaxed);
}

/// Takes `rpc`'s places under its kind's caps (nothing for a call that cannot hang), waiting
/// for them within `deadline`, else [`ADMISSION_WAIT`]. `object` names what the call acts on
/// ("disk 3", "portal 10.0.0.1:3260"), for its cap per object and the messages.
pub async fn admit(
    rpc: RpcId,
    object: Option<String>,
    deadline: Option<Instant>,
) -> Result<Option<Admitted>, Status> {
    let Some(work) = work_of(rpc.group, rpc.method) else {
        return Ok(None);
    };
    if BYPASSED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    admit_as(work, rpc, object, deadline, ADMISSION_WAIT)
        .await
        .map(Some)
}

async fn admit_as(
    work: Work,
    rpc: RpcId,
    object: Option<String>,
    deadline: Option<Instant>,
    default_wait: Duration,
) -> Result<Admitted, Status> {
    let p = places(work);
    let cap = p.cap;
    let on = object.clone().unwrap_or_else(|| "its object".into());
    let obj = object.map(|key| Object::new(work, key));
    // Places free now: no waiting, and no waiter counted.
    let obj_now = match &obj {
        Some(o) => o.places.clone().try_acquire_owned().ok().map(Some),
        None => Some(None),
    };
    if let Some(obj_permit) = obj_now
        && let Ok(call) = p.calls.clone().try_acquire_owned()
    {
        return Ok(Admitted {
            _object: obj_permit.zip(obj),
            _call: call,
        });
    }
    let refuse = |code: tonic::Code, why: String| {
        refused(limit(work));
        Status::new(
            code,
            format!(
                "{} {} on {on}: {why} (limit {:?}); nothing was done, retry later",
                rpc.group, rpc.method, cap.label
            ),
        )
    };
    if p.waiting.fetch_add(1, Ordering::AcqRel) >= WAITING_PER_KIND {
        p.waiting.fetch_sub(1, Ordering::AcqRel);
        return Err(refuse(
            tonic::Code::ResourceExhausted,
            format!(
                "{WAITING_PER_KIND} calls already wait for a place among the {} {} calls the \
                 daemon runs at once",
                cap.calls, cap.what
            ),
        ));
    }
    let _waiting = Waiting(p);
    let until = deadline.unwrap_or_else(|| Instant::now() + default_wait);
    let object_full = std::sync::atomic::AtomicBool::new(obj.is_some());
    let wait = async {
        let obj_permit = match &obj {
            Some(o) => Some(o.places.clone().acquire_owned().await.ok()?),
            None => None,
        };
        object_full.store(false, Ordering::Relaxed);
        let call = p.calls.clone().acquire_owned().await.ok()?;
        Some((obj_permit, call))
    };
    let got = tokio::time::timeout_at(tokio::time::Instant::from_std(until), wait).await;
    match got {
        Ok(Some((obj_permit, call))) => Ok(Admitted {
            _object: obj_permit.zip(obj),
            _call: call,
        }),
        _ => {
            let full = if object_full.load(Ordering::Relaxed) {
                format!(
                    "{} {} calls already run on {on}, the daemon's limit per object",
                    cap.per_object, cap.what
                )
            } else {
                format!(
                    "{} {} calls already run, the daemon's limit",
                    cap.calls, cap.what
                )
            };
            if deadline.is_some() {
                Err(refuse(
                    tonic::Code::DeadlineExceeded,
                    format!("the caller's deadline passed while {full}"),
                ))
            } else {
                Err(refuse(
                    tonic::Code::ResourceExhausted,
                    format!(
                        "waited the daemon's {} s without a caller deadline while {full}",
                        default_wait.as_secs()
                    ),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;
