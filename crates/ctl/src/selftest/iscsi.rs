//! The optional iSCSI steps: a login to a test target the operator names
//! (`--iscsi-portal`, `--iscsi-target`), how long its LUNs take to be listed after the login
//! returns, and the logout. Without the flags they are listed as not run.
//!
//! With a LUN listed, a second process of the selftest ([`super::hold`]) holds its disk open
//! (for reading, sharing read and write) while the daemon is asked to log out: what
//! `LogoutIScsiTarget` answers for a session a device of which another process uses (ledger
//! row 60). The holder is released before the clean-up logs out.
//!
//! Before that, a second login to the target with ISCSI_LOGIN_FLAG_MULTIPATH_ENABLED makes a
//! second path to each LUN ([`super::paths`], ledger row 91), logged out again at once.
//!
//! Safe by construction: a target this node already has a session to is left alone (the
//! selftest logs out only of the session it made), nothing is written to its LUNs, and a portal
//! is removed again only when the selftest added it.

use super::hold::{Hold, OtherProcess};
use super::paths::{self, SessionId};
use super::record::Stop;
use super::{ms, poll, status};
use csi_proxy_client::Connector;
use csi_proxy_client::iscsi::{IscsiClient, Portal};
use csi_proxy_formats::windows_buffers::iscsi::isdsc;
use csi_proxy_host::windows::os::Win32;
use std::time::{Duration, Instant};

/// The test target the operator names.
#[derive(Debug, Clone)]
pub struct IscsiTarget {
    /// Its portal.
    pub portal: Portal,
    /// Its IQN.
    pub iqn: String,
}

/// The optional steps, in order, with the ledger row each settles; listed as not run when the
/// operator named no target.
pub const STEPS: &[&str] = &[
    "iSCSI: AddTargetPortal",
    "iSCSI: DiscoverTargetPortal",
    "iSCSI: ConnectTarget",
    "iSCSI: GetTargetDisks after login",
    paths::STEP,
    HELD,
];

/// The step whose logout runs while the selftest's second process holds the LUN's disk.
const HELD: &str = "iSCSI: DisconnectTarget while its disk is held";

/// What [`run`] leaves to undo.
#[derive(Default)]
struct Made {
    portal_added: bool,
    logged_in: bool,
    /// The second path's session, made through the thin layer.
    second: Option<SessionId>,
}

/// Runs the iSCSI steps against `target`, or lists them as not run; then undoes what it made.
pub(super) async fn run(
    out: &mut super::Outcome,
    connector: &Connector,
    target: Option<&IscsiTarget>,
    wait: Duration,
    os: &dyn Win32,
    others: &dyn OtherProcess,
) {
    let Some(target) = target else {
        for s in STEPS {
            out.not_run(*s, "not run: needs --iscsi-portal and --iscsi-target");
        }
        return;
    };
    let mut made = Made::default();
    let mut client = None;
    if let Ok(disks) = flow(out, connector, target, wait, &mut client, &mut made).await
        && let Some(c) = client.as_mut()
    {
        paths::run(out, connector, os, target, &disks, wait, &mut made.second).await;
        held_logout(out, c, target, disks, others, &mut made).await;
    }
    if let Some(c) = client.as_mut() {
        clean_up(out, c, os, target, &made).await;
    }
}

async fn flow(
    out: &mut super::Outcome,
    connector: &Connector,
    target: &IscsiTarget,
    wait: Duration,
    client: &mut Option<IscsiClient>,
    made: &mut Made,
) -> Result<Vec<String>, Stop> {
    let (p, iqn) = (&target.portal, target.iqn.as_str());
    let portal = format!("{}:{}", p.address, p.port);
    let t = Instant::now();
    let r = async {
        let mut c = IscsiClient::connect(connector)
            .await
            .map_err(|e| format!("the daemon's iSCSI API is not reachable: {e}"))?;
        let listed = c
            .list_target_portals()
            .await
            .map_err(|s| status("ListTargetPortals", &s))?;
        let had = listed.contains(p);
        // A session already there is someone else's: never log it out.
        let disks = c
            .target_disks(p, iqn)
            .await
            .map_err(|s| status("GetTargetDisks", &s))?;
        if !disks.is_empty() {
            return Err(format!(
                "{iqn} already has a session on this node (disks {disks:?}); the selftest logs \
                 in only to a target nothing here uses"
            ));
        }
        c.add_target_portal(p)
            .await
            .map_err(|s| status("AddTargetPortal", &s))?;
        Ok(((c, had), format!("{portal} (listed before: {had})")))
    }
    .await;
    let (c, had) = out.record(STEPS[0], t, r)?;
    made.portal_added = !had;
    let c = client.insert(c);

    let t = Instant::now();
    let r = match c.discover_targets(p).await {
        Ok(iqns) if iqns.iter().any(|i| i.eq_ignore_ascii_case(iqn)) => {
            Ok(((), format!("{portal} offers {iqns:?}")))
        }
        Ok(iqns) => Err(format!("{portal} offers {iqns:?}, not {iqn}")),
        Err(s) => Err(status("DiscoverTargetPortal", &s)),
    };
    out.record(STEPS[1], t, r)?;

    let t = Instant::now();
    let r = c
        .connect_target(p, iqn)
        .await
        .map(|()| ((), format!("{iqn} through {portal}, no CHAP")))
        .map_err(|s| status("ConnectTarget", &s));
    out.record(STEPS[2], t, r)?;
    made.logged_in = true;

    // Ledger row 83: the LUN disks arrive after LoginIScsiTargetW returns; how long after is
    // what only a real node shows (the daemon's GetTargetDisks waits out the arrival, so the
    // time to the first non-empty answer is the delay).
    let t = Instant::now();
    let r = poll(wait, async || {
        let disks = c
            .target_disks(p, iqn)
            .await
            .map_err(|s| status("GetTargetDisks", &s))?;
        Ok((!disks.is_empty()).then_some(disks))
    })
    .await
    .and_then(|d| {
        let d = d.ok_or(format!("{iqn} lists no disk {wait:?} after the login"))?;
        let answer = format!(
            "disks {d:?} listed {} ms after ConnectTarget returned (settles ledger row 83)",
            ms(t.elapsed())
        );
        Ok((d, answer))
    });
    out.record(STEPS[3], t, r)
}

/// Ledger row 60: another process holds the first of the session's disks open (sharing read
/// and write, so the daemon's own checks, rows 55 to 59, find no holder that refuses sharing
/// and no volume) while DisconnectTarget logs out; the initiator refuses, modelled as
/// ISDSC_DEVICE_BUSY_ON_SESSION. A logout that went through is recorded as done, so the
/// clean-up does not log out again.
async fn held_logout(
    out: &mut super::Outcome,
    c: &mut IscsiClient,
    target: &IscsiTarget,
    disks: Vec<String>,
    others: &dyn OtherProcess,
    made: &mut Made,
) {
    let (p, iqn, name) = (&target.portal, target.iqn.as_str(), HELD);
    let t = Instant::now();
    let Some(disk) = disks.first() else {
        return;
    };
    let holder = match others.hold(&Hold::Disk(format!(r"\\.\PhysicalDrive{disk}"))) {
        Ok(h) => h,
        Err(e) => {
            let _ = out.record::<()>(name, t, Err(format!("the second process: {e}")));
            return;
        }
    };
    let answer = c.disconnect_target(p, iqn).await;
    let released = holder.release();
    let busy = format!("{:#010x}", isdsc::DEVICE_BUSY_ON_SESSION);
    let r = match answer {
        Ok(()) => {
            made.logged_in = false;
            Err(format!(
                "{iqn} logged out while another process had disk {disk} open (ledger row 60 \
                 models a refusal, ISDSC_DEVICE_BUSY_ON_SESSION)"
            ))
        }
        Err(s) if s.message().to_ascii_lowercase().contains(&busy) => Ok((
            (),
            format!(
                "{} (settles ledger row 60: ISDSC_DEVICE_BUSY_ON_SESSION)",
                status("DisconnectTarget", &s)
            ),
        )),
        Err(s) => Err(format!(
            "{} (ledger row 60 models ISDSC_DEVICE_BUSY_ON_SESSION, {busy})",
            status("DisconnectTarget", &s)
        )),
    };
    let r = match (r, released) {
        (r, Ok(_)) => r,
        (Ok(((), a)) | Err(a), Err(e)) => Err(format!("{a}; releasing: {e}")),
    };
    let _ = out.record(name, t, r);
}

async fn clean_up(
    out: &mut super::Outcome,
    c: &mut IscsiClient,
    os: &dyn Win32,
    target: &IscsiTarget,
    made: &Made,
) {
    let (p, iqn) = (&target.portal, target.iqn.as_str());
    if let Some(id) = made.second {
        let t = Instant::now();
        let r = match os.iscsi_logout(id) {
            Ok(()) => Ok(((), format!("the second session {id:x?} logged out"))),
            Err(e) if e.code == isdsc::INVALID_SESSION_ID => {
                Ok(((), format!("the second session {id:x?} had ended")))
            }
            Err(e) => Err(format!("LogoutIScsiTarget of the second session: {e}")),
        };
        let _ = out.record("clean-up: iSCSI LogoutIScsiTarget (second path)", t, r);
    }
    if made.logged_in {
        let t = Instant::now();
        let r = c
            .disconnect_target(p, iqn)
            .await
            .map(|()| ((), format!("{iqn} logged out")))
            .map_err(|s| status("DisconnectTarget", &s));
        let _ = out.record("clean-up: iSCSI DisconnectTarget", t, r);
    }
    if made.portal_added {
        let t = Instant::now();
        let r = c
            .remove_target_portal(p)
            .await
            .map(|()| ((), format!("{}:{} removed", p.address, p.port)))
            .map_err(|s| status("RemoveTargetPortal", &s));
        let _ = out.record("clean-up: iSCSI RemoveTargetPortal", t, r);
    }
}
