//! The iSCSI second-path step (ledger row 91): after the selftest's own login to the
//! operator's test target, a second login to it with `LoginFlags`
//! ISCSI_LOGIN_FLAG_MULTIPATH_ENABLED ("the login is allowed to proceed and create a new login
//! session even if there is already a login session to the target") makes a second session,
//! a second path to each LUN. Without MPIO each LUN is then a second disk: what it reports
//! (the device identification page and serial number, through the daemon's ListDiskIDs) and
//! whether it arrived offline (GetDiskState) is what the step records; then the second
//! session is logged out.
//!
//! Safe by construction: nothing is written through either path, and nothing is asked of the
//! daemon through the second: clearing its offline attribute would put the operator's LUN
//! online twice (the page's "data corruption may occur" without multipathing software), and
//! every call the daemon must refuse through it (PartitionDisk, SetDiskState) would write to
//! the LUN or bring it online if it were wrongly allowed. A second path that arrives online
//! while the first is online is logged out at once. The session is made through the thin
//! layer (the daemon's ConnectTarget makes no second session), so the clean-up logs it out by
//! its own ID whatever happened.

use super::{IscsiTarget, POLL, status};
use csi_proxy_client::Connector;
use csi_proxy_client::disk::DiskClient;
use csi_proxy_core::iscsi::{AuthType, Chap};
use csi_proxy_formats::windows_buffers::iscsi::{
    self as data, FILE_DEVICE_DISK, LOGIN_FLAG_MULTIPATH_ENABLED, isdsc,
};
use csi_proxy_host::windows::iscsi::fetch_os;
use csi_proxy_host::windows::os::{Win32, retry_within};
use std::time::{Duration, Instant};

/// The step's recorded name.
pub const STEP: &str = "iSCSI: a second path to each LUN (multipath-enabled login)";

/// A session of the thin layer: `(AdapterUnique, AdapterSpecific)`.
pub(super) type SessionId = (u64, u64);

/// The sessions with `iqn`, by ID.
fn sessions_with(os: &dyn Win32, iqn: &str) -> Result<Vec<SessionId>, String> {
    let all = fetch_os(0, |_, cap| os.iscsi_sessions(cap))
        .map_err(|e| format!("GetIScsiSessionListW: {e}"))?;
    Ok(all
        .into_iter()
        .filter(|s| s.names.iter().any(|n| n == iqn))
        .map(|s| s.id)
        .collect())
}

/// Makes the second session and records what its paths report; `second` is set while the
/// session exists, for the clean-up. `first` are the disks of the selftest's own session.
pub(super) async fn run(
    out: &mut super::Outcome,
    connector: &Connector,
    os: &dyn Win32,
    target: &IscsiTarget,
    first: &[String],
    wait: Duration,
    second: &mut Option<SessionId>,
) {
    let t = Instant::now();
    let r = step(connector, os, target, first, wait, second).await;
    // The answer is recorded before the logout; a logout that fails is left to the clean-up.
    let r = match (r, second.take()) {
        (r, None) => r,
        (r, Some(id)) => match os.iscsi_logout(id) {
            Ok(()) => {
                let done = |a: String| format!("{a}; the second session logged out");
                r.map(done).map_err(done)
            }
            Err(e) if e.code == isdsc::INVALID_SESSION_ID => r,
            Err(e) => {
                *second = Some(id);
                let why = format!("LogoutIScsiTarget of the second session: {e}");
                match r {
                    Ok(a) => Err(format!("{a}; {why}")),
                    Err(a) => Err(format!("{a}; {why}")),
                }
            }
        },
    };
    let _ = out.record(STEP, t, r.map(|a| ((), a)));
}

async fn step(
    connector: &Connector,
    os: &dyn Win32,
    target: &IscsiTarget,
    first: &[String],
    wait: Duration,
    second: &mut Option<SessionId>,
) -> Result<String, String> {
    let (p, iqn) = (&target.portal, target.iqn.as_str());
    let before = sessions_with(os, iqn)?;
    let none = Chap {
        auth_type: AuthType::None,
        username: String::new(),
        secret: "".into(),
    };
    let auth = data::login_auth(&none)?;
    let port = u16::try_from(p.port).map_err(|_| format!("port {} is not a TCP port", p.port))?;
    os.iscsi_login(iqn, &p.address, port, &auth, LOGIN_FLAG_MULTIPATH_ENABLED)
        .map_err(|e| {
            format!(
                "LoginIScsiTargetW (ISCSI_LOGIN_FLAG_MULTIPATH_ENABLED) of {iqn} through {}:{}: \
                 {e} (ledger row 91 models a second session: the flag allows a new session \
                 to a target that has one)",
                p.address, p.port
            )
        })?;
    let id = sessions_with(os, iqn)?
        .into_iter()
        .find(|s| !before.contains(s))
        .ok_or(format!(
            "the multipath-enabled login of {iqn} answered success but no new session is listed"
        ))?;
    *second = Some(id);
    // Plug and Play surfaces the second path's disks after the login returns, as the first's.
    let paths = retry_within(os, wait, POLL, || {
        match fetch_os(4, |_, cap| os.iscsi_session_devices(id, cap)) {
            Ok(d) => {
                let disks: Vec<u32> = d
                    .into_iter()
                    .filter(|(kind, _)| *kind == FILE_DEVICE_DISK)
                    .map(|(_, n)| n)
                    .collect();
                let empty = disks.is_empty();
                (Ok(disks), empty)
            }
            Err(e) => (Err(format!("GetDevicesForIScsiSessionW: {e}")), false),
        }
    })?;
    if paths.is_empty() {
        return Ok(format!(
            "the second session lists no disk {wait:?} after its login: MPIO claims the LUN \
             (one disk for both paths) or none was surfaced; ledger row 91 (a node without \
             MPIO) is not settled here"
        ));
    }
    let mut disks = DiskClient::connect(connector)
        .await
        .map_err(|e| format!("the daemon's disk API is not reachable: {e}"))?;
    let ids = disks
        .list_disk_ids()
        .await
        .map_err(|s| status("ListDiskIDs", &s))?;
    let mut seen = Vec::new();
    for b in paths {
        let idb = ids.get(&b).cloned().unwrap_or_default();
        let same = first
            .iter()
            .filter_map(|a| a.parse::<u32>().ok())
            .find(|a| ids.get(a).is_some_and(|ida| *ida == idb));
        let online_b = disks
            .is_online(b)
            .await
            .map_err(|s| status(&format!("GetDiskState of disk {b}"), &s))?;
        let Some(a) = same else {
            return Err(format!(
                "disk {b} (the second path) reports page 83 {:?} and serial {:?}, which no disk \
                 of the first session ({first:?}) reports (ledger row 91 models one identity \
                 through both paths)",
                idb.page83, idb.serial_number
            ));
        };
        let online_a = disks
            .is_online(a)
            .await
            .map_err(|s| status(&format!("GetDiskState of disk {a}"), &s))?;
        if online_a && online_b {
            return Err(format!(
                "disk {b} (the second path to disk {a}'s LUN) arrived online while disk {a} is \
                 online; the second session is logged out at once (ledger row 91 models the \
                 redundant path offline, VDSDiskOfflineReasonRedundantPath)"
            ));
        }
        seen.push(format!(
            "disk {b} reports disk {a}'s page 83 {:?} and serial {:?}, {} (disk {a} {})",
            idb.page83,
            idb.serial_number,
            if online_b { "online" } else { "offline" },
            if online_a { "online" } else { "offline" },
        ));
    }
    Ok(format!(
        "{} (settles ledger row 91: one identity through both paths, the second offline; \
         clearing its offline attribute is not tried, it would put the LUN online twice)",
        seen.join("; ")
    ))
}
