//! iSCSI on Windows through the iSCSI initiator API of `iscsidsc.dll`, reached through the
//! [`Win32`] seam — no PowerShell, no WMI. Where the initiator is absent (Wine, stripped-down
//! images) every RPC answers FAILED_PRECONDITION.
//!
//! Pure parts (login options, status codes, string lists) live in
//! [`csi_proxy_formats::windows_buffers::iscsi`]. CHAP secrets only travel in the login options of the login
//! call or the buffer of `SetIScsiInitiatorCHAPSharedSecret`, are wiped after the call and never
//! enter an error or a log line.
//!
//! Logins are not persistent (`IsPersistent = FALSE`): the kubelet stages volumes again after a
//! reboot, and a persistent login would keep the CHAP secret in the initiator's store past
//! DisconnectTarget.

use super::disk::WindowsDiskHost;
use super::os::{IscsiSession, OsError, Win32, Win32Result, code};
use csi_proxy_core::disk::{DiskHost, DiskUsage};
use csi_proxy_core::iscsi::{Chap, IscsiHost, Secret, TargetPortal};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::windows_buffers::iscsi::{self as data, FILE_DEVICE_DISK, isdsc};

/// What an RPC answers where the initiator or one of its functions is missing.
const NOT_AVAILABLE: &str = "the iSCSI initiator (iscsidsc.dll) is not available on this host";

/// How often a size-query-then-fetch call is retried when the data grew in between.
const FETCH_ATTEMPTS: usize = 8;

super::os::seam_host! {
    /// The Windows iSCSI host (`iscsidsc.dll` is loaded on first use, not at creation).
    WindowsIscsiHost
}

/// Whether `iscsidsc.dll` and every function this host needs could be loaded.
#[cfg(windows)]
pub fn available() -> bool {
    use super::os::Win32 as _;
    super::win32::SystemWin32::default()
        .iscsi_available()
        .is_ok()
}

/// How long GetTargetDisks waits for a connected target's first disk: Plug and Play surfaces
/// the LUNs after the login returns, usually within seconds.
const LUN_ARRIVAL_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);
/// The pause between two looks.
const LUN_ARRIVAL_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// An [`Error`] for initiator call `call` of operation `op` on `object` failing with `e`.
fn failed(op: &str, object: impl std::fmt::Display, call: &str, e: &OsError) -> Error {
    let (kind, what) = data::failure(e.code);
    Error::new(kind, op, object, format!("{call}: {what}"))
}

fn target_object(iqn: &str, portal: &TargetPortal) -> String {
    format!("target {iqn:?} at portal {portal}")
}

fn check_iqn(op: &str, iqn: &str, portal: &TargetPortal) -> Result<()> {
    data::check_iqn(iqn).map_err(|why| Error::invalid(op, target_object(iqn, portal), why))
}

/// Checks the portal's address the way the initiator's structure holds it.
fn check_portal(op: &str, portal: &TargetPortal) -> Result<()> {
    data::portal_address(portal)
        .map(drop)
        .map_err(|why| Error::invalid(op, format!("portal {portal}"), why))
}

/// Whether `s` is a session with target `iqn` through `portal`: `None` when it is a session
/// with `iqn` none of whose connections names a portal (being re-established: it lists none,
/// or one with no address or port, whichever Windows lists meanwhile; ledger row 31), so its
/// portal cannot be told.
fn is_session(s: &IscsiSession, portal: &TargetPortal, iqn: &str) -> Option<bool> {
    if !s.names.iter().any(|n| n == iqn) {
        return Some(false);
    }
    let told = |(a, p): &&(String, u16)| *p != 0 && !data::unspecified_address(a);
    let mut connections = s.connections.iter().filter(told).peekable();
    connections.peek()?;
    Some(connections.any(|(a, p)| data::is_portal(a, *p, portal)))
}

/// Calls `call` with a growing capacity while it answers ERROR_INSUFFICIENT_BUFFER, as the
/// initiator's size-then-fetch calls require (the first call asks with `first`). `call` gets the
/// attempt number too. A list that keeps growing meanwhile ends as ERROR_INSUFFICIENT_BUFFER.
pub fn fetch_os<T>(
    first: usize,
    mut call: impl FnMut(usize, usize) -> Win32Result<T>,
) -> Win32Result<T> {
    let mut capacity = first;
    let mut last = OsError::new(code::INSUFFICIENT_BUFFER);
    for attempt in 0..FETCH_ATTEMPTS {
        match call(attempt, capacity) {
            Err(e) if e.code == code::INSUFFICIENT_BUFFER => {
                capacity = e.needed.max(capacity.saturating_mul(2)).max(1);
                last = e;
            }
            other => return other,
        }
    }
    Err(last)
}

/// [`fetch_os`], its failure as an [`Error`] naming `call` of `op` on `object`.
fn fetch<T>(
    op: &str,
    object: &str,
    call_name: &str,
    first: usize,
    call: impl FnMut(usize, usize) -> Win32Result<T>,
) -> Result<T> {
    fetch_os(first, call).map_err(|e| {
        if e.code == code::INSUFFICIENT_BUFFER {
            Error::new(
                Kind::Unavailable,
                op,
                object,
                "the list kept growing while it was read",
            )
        } else {
            failed(op, object, call_name, &e)
        }
    })
}

impl WindowsIscsiHost {
    fn os(&self, op: &str) -> Result<&dyn Win32> {
        self.os.iscsi_available().map_err(|why| {
            Error::new(
                Kind::FailedPrecondition,
                op,
                "iSCSI initiator",
                format!("{NOT_AVAILABLE} ({why})"),
            )
        })?;
        Ok(&*self.os)
    }

    /// Every registered SendTargets portal, once each (one portal is reported once per
    /// initiator port it was added on).
    fn portals(&self, op: &str) -> Result<Vec<TargetPortal>> {
        let os = self.os(op)?;
        let listed = fetch(
            op,
            "target portals",
            "ReportIScsiSendTargetPortalsExW",
            0,
            |_, cap| os.iscsi_portals(cap),
        )?;
        let mut out: Vec<TargetPortal> = Vec::new();
        for (address, port) in listed {
            let p = TargetPortal { address, port };
            if !out.contains(&p) {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// Every target the initiator has discovered; with `refresh` the service first repeats
    /// discovery on its portals (documented `ForceUpdate`), on the first call only: the sizing
    /// answer is followed by a plain fetch of the same list, not a second discovery.
    fn targets(&self, op: &str, refresh: bool) -> Result<Vec<String>> {
        let os = self.os(op)?;
        fetch(
            op,
            "discovered targets",
            "ReportIScsiTargetsW",
            0,
            |attempt, cap| os.iscsi_targets(refresh && attempt == 0, cap),
        )
    }

    /// The discovery mechanisms of target `iqn`, or `None` when the initiator cannot say.
    fn mechanisms(&self, op: &str, iqn: &str) -> Option<Vec<String>> {
        let os = self.os(op).ok()?;
        fetch(op, iqn, "GetIScsiTargetInformationW", 0, |_, cap| {
            os.iscsi_discovery_mechanisms(iqn, cap)
        })
        .map_err(|e| tracing::debug!(target = %iqn, "no discovery mechanisms: {e}"))
        .ok()
    }

    /// Every active session.
    /// The sessions with `iqn` through `portal`; UNAVAILABLE while a session with `iqn` is
    /// re-establishing its connection, since whether it is through `portal` cannot be told
    /// (a session through another portal is never taken for this one).
    fn sessions_through(
        &self,
        op: &str,
        portal: &TargetPortal,
        iqn: &str,
    ) -> Result<Vec<IscsiSession>> {
        let all = self.sessions(op)?;
        if all.iter().any(|s| is_session(s, portal, iqn).is_none()) {
            return Err(Error::new(
                Kind::Unavailable,
                op,
                target_object(iqn, portal),
                "a session with the target is re-establishing its connection, so the portal it uses cannot be told; call again",
            ));
        }
        Ok(all
            .into_iter()
            .filter(|s| is_session(s, portal, iqn) == Some(true))
            .collect())
    }

    fn sessions(&self, op: &str) -> Result<Vec<IscsiSession>> {
        let os = self.os(op)?;
        fetch(op, "iSCSI sessions", "GetIScsiSessionListW", 0, |_, cap| {
            os.iscsi_sessions(cap)
        })
    }

    /// Disk numbers of session `id`: the `STORAGE_DEVICE_NUMBER.DeviceNumber` of each device
    /// that is a disk, which is the `N` of `\\.\PhysicalDriveN` the disk group names disks by.
    fn session_disks(&self, op: &str, object: &str, id: (u64, u64)) -> Result<Vec<u32>> {
        let os = self.os(op)?;
        match fetch_os(4, |_, cap| os.iscsi_session_devices(id, cap)) {
            Ok(devices) => Ok(devices
                .into_iter()
                .filter(|(kind, _)| *kind == FILE_DEVICE_DISK)
                .map(|(_, n)| n)
                .collect()),
            // The session ended between listing and asking: it has no disks now.
            Err(e) if e.code == isdsc::INVALID_SESSION_ID => Ok(Vec::new()),
            Err(e) => Err(failed(op, object, "GetDevicesForIScsiSessionW", &e)),
        }
    }
}

impl IscsiHost for WindowsIscsiHost {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        const OP: &str = "AddTargetPortal";
        check_portal(OP, portal)?;
        if self.portals(OP)?.contains(portal) {
            return Ok(());
        }
        // No login options: discovery without CHAP, as the RPC carries none. The service runs
        // SendTargets discovery on the new portal.
        match self.os(OP)?.iscsi_add_portal(&portal.address, portal.port) {
            Ok(()) => {}
            Err(e)
                if e.code == isdsc::TARGET_PORTAL_ALREADY_EXISTS
                    || e.code == isdsc::TARGET_ADDRESS_ALREADY_EXISTS => {}
            Err(e) => {
                return Err(failed(
                    OP,
                    format!("portal {portal}"),
                    "AddIScsiSendTargetPortalW",
                    &e,
                ));
            }
        }
        tracing::info!(portal = %portal, "iSCSI target portal added");
        Ok(())
    }

    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        const OP: &str = "DiscoverTargetPortal";
        if !self.portals(OP)?.contains(portal) {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                format!("portal {portal}"),
                "no such target portal",
            ));
        }
        // ForceUpdate: targets added on the array since the portal was registered are seen.
        // The list covers every portal; each target's discovery mechanisms say which portal
        // found it.
        Ok(self
            .targets(OP, true)?
            .into_iter()
            .filter(|t| {
                self.mechanisms(OP, t)
                    .is_none_or(|m| data::discovered_through(&m, portal))
            })
            .collect())
    }

    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        const OP: &str = "RemoveTargetPortal";
        check_portal(OP, portal)?;
        if !self.portals(OP)?.contains(portal) {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                format!("portal {portal}"),
                "no such target portal",
            ));
        }
        self.os(OP)?
            .iscsi_remove_portal(&portal.address, portal.port)
            .map_err(|e| {
                failed(
                    OP,
                    format!("portal {portal}"),
                    "RemoveIScsiSendTargetPortalW",
                    &e,
                )
            })?;
        tracing::info!(portal = %portal, "iSCSI target portal removed");
        Ok(())
    }

    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        self.portals("ListTargetPortals")
    }

    fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()> {
        const OP: &str = "ConnectTarget";
        let object = target_object(iqn, portal);
        check_iqn(OP, iqn, portal)?;
        check_portal(OP, portal)?;
        let mut auth = data::login_auth(chap).map_err(|why| Error::invalid(OP, &object, why))?;
        if !self.sessions_through(OP, portal, iqn)?.is_empty() {
            return Ok(());
        }
        let r = self
            .os(OP)?
            .iscsi_login(iqn, &portal.address, portal.port, &auth, 0);
        // The secret is not needed past the call: wipe it now (dropping `auth` would too).
        data::wipe(&mut auth.secret);
        drop(auth);
        match r {
            Ok(()) => {
                tracing::info!(target = %iqn, portal = %portal, "iSCSI session logged in");
                Ok(())
            }
            Err(e)
                if e.code == isdsc::TARGET_ALREADY_LOGGED_IN
                    || e.code == isdsc::SESSION_ALREADY_EXISTS =>
            {
                // Success only when the session is through this portal (one a concurrent
                // call made); the initiator refuses a second session to the target through
                // any portal.
                if !self.sessions_through(OP, portal, iqn)?.is_empty() {
                    return Ok(());
                }
                let elsewhere: Vec<String> = self
                    .sessions(OP)?
                    .iter()
                    .filter(|s| s.names.iter().any(|n| n == iqn))
                    .flat_map(|s| s.connections.iter().map(|(a, p)| format!("{a}:{p}")))
                    .collect();
                if elsewhere.is_empty() {
                    return Err(Error::new(
                        Kind::Unavailable,
                        OP,
                        &object,
                        "the initiator reports the target logged in but lists no session with it; call again",
                    ));
                }
                Err(Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    &object,
                    format!(
                        "the target is already logged in through portal {}; DisconnectTarget there first",
                        elsewhere.join(", ")
                    ),
                ))
            }
            Err(e) => Err(failed(OP, &object, "LoginIScsiTargetW", &e)),
        }
    }

    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        const OP: &str = "DisconnectTarget";
        let object = target_object(iqn, portal);
        check_iqn(OP, iqn, portal)?;
        check_portal(OP, portal)?;
        let os = self.os(OP)?;
        for s in self.sessions_through(OP, portal, iqn)? {
            match os.iscsi_logout(s.id) {
                // A session that ended meanwhile is what was asked for.
                Ok(()) => {}
                Err(e) if e.code == isdsc::INVALID_SESSION_ID => {}
                Err(e) => return Err(failed(OP, &object, "LogoutIScsiTarget", &e)),
            }
            tracing::info!(target = %iqn, portal = %portal, "iSCSI session logged out");
        }
        // A persistent login of this target through this portal (one upstream or an operator
        // made) would log in again at the next boot: it goes too, as upstream's disconnect
        // removes it. This host's own logins are never persistent, so usually there is none.
        // Each is removed with the initiator and port that keep it (the initiator is a
        // required argument of RemoveIScsiPersistentTargetW).
        let logins = fetch(OP, &object, "ReportIScsiPersistentLoginsW", 0, |_, cap| {
            os.iscsi_persistent_logins(cap)
        })?;
        for login in logins
            .iter()
            .filter(|l| l.iqn == iqn && data::is_portal(&l.portal.0, l.portal.1, portal))
        {
            match os.iscsi_remove_persistent_target(login) {
                Ok(()) => {
                    tracing::info!(target = %iqn, portal = %portal, initiator = %login.initiator,
                        port = login.initiator_port, "iSCSI persistent login removed");
                }
                // Removed meanwhile: what was asked for.
                Err(e) if e.code == isdsc::TARGET_NOT_FOUND || e.code == code::FILE_NOT_FOUND => {}
                Err(e) => return Err(failed(OP, &object, "RemoveIScsiPersistentTargetW", &e)),
            }
        }
        Ok(())
    }

    /// The disk group's facts of disk `number` (its mounts, the host's own disks, a process
    /// holding it without sharing) and its volumes open elsewhere (the lock probe): the same
    /// questions PartitionDisk asks. LogoutIScsiTarget refuses a session only when a device
    /// cannot be removed (ISDSC_DEVICE_BUSY_ON_SESSION), and a volume mounted somewhere with
    /// no file open is dismounted under its users.
    fn target_disk_usage(&self, number: u32) -> Result<Option<DiskUsage>> {
        const OP: &str = "DisconnectTarget";
        let disks = WindowsDiskHost::with_os(self.os.clone());
        let mut usage = match disks.disk_usage(number) {
            Ok(u) => u,
            // Gone already: nothing to take away.
            Err(e) if e.kind() == Kind::NotFound => return Ok(None),
            Err(e) => return Err(e.context(OP)),
        };
        usage.open_elsewhere = disks
            .volumes_open_elsewhere(number)
            .map_err(|e| e.context(OP))?;
        Ok(Some(usage))
    }

    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        const OP: &str = "GetTargetDisks";
        let object = target_object(iqn, portal);
        check_iqn(OP, iqn, portal)?;
        // The LUNs' disks arrive asynchronously after the login, and drivers ask right after
        // ConnectTarget: a connected target with no disk yet is waited for, bounded by
        // LUN_ARRIVAL_LIMIT and the caller's deadline (a target with no LUN answers empty).
        let os = self.os(OP)?;
        super::os::retry_within(os, LUN_ARRIVAL_LIMIT, LUN_ARRIVAL_POLL, || {
            let sessions = match self.sessions_through(OP, portal, iqn) {
                Ok(s) => s,
                Err(e) => return (Err(e), false),
            };
            let mut disks = Vec::new();
            for s in &sessions {
                match self.session_disks(OP, &object, s.id) {
                    Ok(d) => disks.extend(d),
                    Err(e) => return (Err(e), false),
                }
            }
            disks.sort_unstable();
            disks.dedup();
            let waiting = !sessions.is_empty() && disks.is_empty();
            (Ok(disks), waiting)
        })
    }

    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        const OP: &str = "SetMutualChapSecret";
        self.os(OP)?
            .iscsi_set_chap_secret(secret.expose().as_bytes())
            .map_err(|e| {
                failed(
                    OP,
                    "mutual CHAP secret",
                    "SetIScsiInitiatorCHAPSharedSecret",
                    &e,
                )
            })?;
        tracing::info!("iSCSI initiator mutual CHAP secret set");
        Ok(())
    }
}
