//! The simulated iSCSI initiator, as `iscsidsc.h` documents its calls:
//! - adding a SendTargets portal registers it on each initiator port (two here, so it is
//!   listed twice) and runs discovery on it; an unreachable one fails with
//!   ISDSC_CONNECTION_FAILED, a registered one with ISDSC_TARGET_PORTAL_ALREADY_EXISTS;
//! - `ReportIScsiTargetsW(ForceUpdate)` repeats discovery on every portal first (counted, so a
//!   test sees how many discoveries a request cost);
//! - a login needs the target discovered (else ISDSC_TARGET_NOT_FOUND), the target's CHAP
//!   credentials when it has some (else ISDSC_LOGIN_FAILED), and answers
//!   ISDSC_TARGET_ALREADY_LOGGED_IN for a second session, unless the login's `LoginFlags` has
//!   ISCSI_LOGIN_FLAG_MULTIPATH_ENABLED ("the login is allowed to proceed and create a new
//!   login session even if there is already a login session to the target"): then, without
//!   MPIO, the second session surfaces each of the target's LUNs again, as a disk of its own
//!   reporting the LUN's identity, offline while the first is online (ledger row 91);
//! - a target's LUN disks are not on the machine before a login: they arrive asynchronously
//!   after it (the arrival delay; until then `GetDevicesForIScsiSessionW` lists none, and the
//!   next enumeration of disks does not list them), and leave with the logout (ledger row 83);
//! - every list call answers ERROR_INSUFFICIENT_BUFFER with the size it needs when too small.

use super::{SimWindows, State};
use crate::windows::os::{IscsiSession, OsError, PersistentLogin, Win32Result, code};
use csi_proxy_formats::windows_buffers::iscsi::{self as data, ISCSI_ALL_INITIATOR_PORTS, isdsc};
use std::collections::{BTreeMap, BTreeSet};

/// ISDSC_LOGIN_FAILED: the target refused the login (authentication).
const LOGIN_FAILED: u32 = 0xEFFF_0007;
/// ISDSC_INVALID_CHAP_SECRET.
const INVALID_CHAP_SECRET: u32 = 0xEFFF_0070;
/// The initiator ports a portal is registered on.
const PORTS: usize = 2;
/// The bytes one session takes in `GetIScsiSessionListW`'s buffer (structures and strings).
const SESSION_BYTES: usize = 512;
/// The size of one `PERSISTENT_ISCSI_LOGIN_INFOW` with its strings.
const PERSISTENT_LOGIN_BYTES: usize = 1600;
/// The Microsoft software initiator's instance name.
const SOFTWARE_INITIATOR: &str = r"ROOT\ISCSIPRT\0000_0";

/// A target an iSCSI array offers.
#[derive(Debug, Clone)]
pub(super) struct Target {
    iqn: String,
    disks: Vec<u32>,
    /// `(user, secret)` it requires, if any.
    chap: Option<(String, String)>,
}

#[derive(Debug, Clone)]
struct Session {
    id: (u64, u64),
    iqn: String,
    portal: (String, u16),
    disks: Vec<u32>,
    /// Its connection dropped and is being re-established: what it lists as its connection
    /// meanwhile (`None` nothing, or a connection with no usable portal: which of them
    /// Windows lists no page says, ledger row 31).
    reconnecting: Option<Option<(String, u16)>>,
    /// When Plug and Play has surfaced its LUNs' disks: they arrive asynchronously after the
    /// login (the arrival delay), and the session lists no device before.
    devices_due: std::time::Duration,
    /// A multipath-enabled second session: the LUN disks (of the first session) it surfaces
    /// again as second paths when its devices are due; its `disks` are those paths, which
    /// leave the machine with it.
    paths_of: Option<Vec<u32>>,
}

/// The initiator's state.
#[derive(Debug, Default)]
pub(super) struct Initiator {
    unavailable: bool,
    /// Arrays by portal.
    arrays: BTreeMap<(String, u16), Vec<Target>>,
    /// Registered SendTargets portals.
    portals: Vec<(String, u16)>,
    /// Discovered targets and the portals that found them.
    discovered: BTreeMap<String, BTreeSet<(String, u16)>>,
    forced_discoveries: u64,
    sessions: Vec<Session>,
    next_session: u64,
    /// Persistent logins: (IQN, initiator instance, initiator port, portal address, port).
    persistent: BTreeSet<(String, String, u32, String, u16)>,
    chap_secret: Option<Vec<u8>>,
    /// LUN disks of targets nobody is logged in to, off the machine, with their volumes.
    parked: BTreeMap<u32, (super::Disk, Vec<usize>)>,
}

impl Initiator {
    /// The numbers of the LUN disks parked off the machine.
    pub(super) fn parked_numbers(&self) -> impl Iterator<Item = &u32> {
        self.parked.keys()
    }
}

fn err(code: u32) -> OsError {
    OsError::with_message(code, data::failure(code).1)
}

fn short(needed: usize) -> OsError {
    let mut e = OsError::new(code::INSUFFICIENT_BUFFER);
    e.needed = needed;
    e
}

impl Initiator {
    fn discover(&mut self, portal: &(String, u16)) {
        for t in self.arrays.get(portal).cloned().unwrap_or_default() {
            self.discovered
                .entry(t.iqn.clone())
                .or_default()
                .insert(portal.clone());
        }
    }
}

impl State {
    fn initiator(&mut self) -> Win32Result<&mut Initiator> {
        if self.iscsi.unavailable {
            return Err(err(isdsc::SERVICE_NOT_RUNNING));
        }
        Ok(&mut self.iscsi)
    }
}

pub(super) fn available(s: &State) -> std::result::Result<(), String> {
    if s.iscsi.unavailable {
        Err("iscsidsc.dll has no LoginIScsiTargetW".into())
    } else {
        Ok(())
    }
}

pub(super) fn add_portal(s: &mut State, address: &str, port: u16) -> Win32Result<()> {
    let i = s.initiator()?;
    let p = (address.to_ascii_lowercase(), port);
    if i.portals.contains(&p) {
        return Err(err(isdsc::TARGET_PORTAL_ALREADY_EXISTS));
    }
    if !i.arrays.contains_key(&p) {
        return Err(err(isdsc::CONNECTION_FAILED));
    }
    i.portals.push(p.clone());
    i.discover(&p);
    Ok(())
}

pub(super) fn remove_portal(s: &mut State, address: &str, port: u16) -> Win32Result<()> {
    let i = s.initiator()?;
    let p = (address.to_ascii_lowercase(), port);
    let before = i.portals.len();
    i.portals.retain(|q| *q != p);
    if i.portals.len() == before {
        return Err(err(isdsc::PORTAL_NOT_FOUND));
    }
    Ok(())
}

pub(super) fn portals(s: &mut State, capacity: usize) -> Win32Result<Vec<(String, u16)>> {
    let i = s.initiator()?;
    let listed: Vec<(String, u16)> = i
        .portals
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.clone(), PORTS))
        .collect();
    if capacity < listed.len() {
        return Err(short(listed.len()));
    }
    Ok(listed)
}

/// A MULTI_SZ list's length in UTF-16 units.
fn multi_sz_len(items: &[String]) -> usize {
    items
        .iter()
        .map(|t| t.encode_utf16().count() + 1)
        .sum::<usize>()
        + 1
}

pub(super) fn targets(s: &mut State, force: bool, capacity: usize) -> Win32Result<Vec<String>> {
    let i = s.initiator()?;
    if force {
        i.forced_discoveries += 1;
        for p in i.portals.clone() {
            i.discover(&p);
        }
    }
    let list: Vec<String> = i.discovered.keys().cloned().collect();
    let needed = multi_sz_len(&list);
    if capacity < needed {
        return Err(short(needed));
    }
    Ok(list)
}

pub(super) fn mechanisms(s: &mut State, iqn: &str, capacity: usize) -> Win32Result<Vec<String>> {
    let i = s.initiator()?;
    let found = i
        .discovered
        .get(iqn)
        .ok_or_else(|| err(isdsc::TARGET_NOT_FOUND))?;
    let list: Vec<String> = found
        .iter()
        .map(|(a, p)| format!("SendTargets:*{a} {p:07} Root\\ISCSIPRT\\0000_0"))
        .collect();
    let needed = multi_sz_len(&list) * 2;
    if capacity < needed {
        return Err(short(needed));
    }
    Ok(list)
}

pub(super) fn sessions(s: &mut State, capacity: usize) -> Win32Result<Vec<IscsiSession>> {
    let i = s.initiator()?;
    let needed = i.sessions.len() * SESSION_BYTES;
    if capacity < needed {
        return Err(short(needed));
    }
    Ok(i.sessions
        .iter()
        .map(|x| IscsiSession {
            id: x.id,
            names: [x.iqn.clone(), x.iqn.clone()],
            connections: match &x.reconnecting {
                None => vec![x.portal.clone()],
                Some(listed) => listed.iter().cloned().collect(),
            },
        })
        .collect())
}

pub(super) fn login(
    s: &mut State,
    iqn: &str,
    address: &str,
    port: u16,
    auth: &data::LoginAuth,
    flags: u32,
) -> Win32Result<()> {
    let devices_due = s.clock + s.arrival_delay;
    let i = s.initiator()?;
    let p = (address.to_ascii_lowercase(), port);
    if !i.discovered.get(iqn).is_some_and(|ps| ps.contains(&p)) {
        return Err(err(isdsc::TARGET_NOT_FOUND));
    }
    let target = i
        .arrays
        .get(&p)
        .and_then(|ts| ts.iter().find(|t| t.iqn == iqn))
        .cloned()
        .ok_or_else(|| err(isdsc::CONNECTION_FAILED))?;
    if let Some((user, secret)) = &target.chap
        && (auth.username != user.as_bytes() || auth.secret != secret.as_bytes())
    {
        return Err(err(LOGIN_FAILED));
    }
    // "The target has already been logged in via an iSCSI session": through any portal
    // (without MPIO a second session to the same target is refused), unless the login is
    // multipath-enabled: then it is a second path to each LUN.
    let first = i
        .sessions
        .iter()
        .find(|x| x.iqn == iqn && x.paths_of.is_none());
    let paths_of = match first {
        Some(_) if flags & data::LOGIN_FLAG_MULTIPATH_ENABLED == 0 => {
            return Err(err(isdsc::TARGET_ALREADY_LOGGED_IN));
        }
        Some(_) => Some(target.disks.clone()),
        None => None,
    };
    i.next_session += 1;
    let id = (0xfeed, i.next_session);
    i.sessions.push(Session {
        id,
        iqn: iqn.into(),
        portal: p,
        disks: if paths_of.is_some() {
            Vec::new()
        } else {
            target.disks
        },
        reconnecting: None,
        devices_due,
        paths_of,
    });
    Ok(())
}

impl State {
    /// The LUNs of sessions whose devices are due arrive on the machine (Plug and Play
    /// surfaces them after the login returned, with their volumes).
    pub(super) fn luns_arrive(&mut self) {
        let now = self.clock;
        let due: Vec<u32> = self
            .iscsi
            .sessions
            .iter()
            .filter(|x| x.devices_due <= now)
            .flat_map(|x| x.disks.iter().copied())
            .filter(|d| self.iscsi.parked.contains_key(d))
            .collect();
        for disk in due {
            let Some((d, volumes)) = self.iscsi.parked.remove(&disk) else {
                continue;
            };
            self.disks.insert(disk, d);
            for v in volumes {
                self.volumes[v].disk = disk;
                self.volumes[v].arrives = now;
            }
        }
        // Second sessions surface the LUNs again, each as a second path (at the first
        // session's LUN number, through the next initiator port).
        for x in 0..self.iscsi.sessions.len() {
            let session = &mut self.iscsi.sessions[x];
            if session.devices_due > now {
                continue;
            }
            let Some(sources) = session.paths_of.as_mut().map(std::mem::take) else {
                continue;
            };
            for source in sources {
                let Some(lun) = self.disks.get(&source).map(|d| d.scsi.map_or(0, |a| a.3)) else {
                    continue;
                };
                if let Some(n) = self.surface_path(source, lun) {
                    if let Some(d) = self.disks.get_mut(&n) {
                        d.scsi = d
                            .scsi
                            .map(|(port, bus, target, lun)| (port + 1, bus, target, lun));
                    }
                    self.iscsi.sessions[x].disks.push(n);
                }
            }
        }
    }
}

/// `LogoutIScsiTarget`: "the iSCSI initiator service ensures that all devices associated with
/// the session can be safely removed from the device stack before allowing the initiator to
/// close the session". A device another process has open, or a volume of it that is locked or
/// has files open, cannot be; the logout then fails with ISDSC_DEVICE_BUSY_ON_SESSION
/// (**inferred**: the code). A volume merely mounted somewhere is dismounted with its device,
/// so it does not stop the logout (ledger row 60).
pub(super) fn logout(s: &mut State, session: (u64, u64)) -> Win32Result<()> {
    let i = s.initiator()?;
    let Some(x) = i.sessions.iter().find(|x| x.id == session) else {
        return Err(err(isdsc::INVALID_SESSION_ID));
    };
    let (disks, second_path) = (x.disks.clone(), x.paths_of.is_some());
    if disks
        .iter()
        .any(|&d| super::holders::in_use_elsewhere(s, d))
    {
        return Err(err(isdsc::DEVICE_BUSY_ON_SESSION));
    }
    s.initiator()?.sessions.retain(|x| x.id != session);
    // The session's LUNs leave the machine with it; a second session's paths are gone for
    // good (a new one surfaces new paths).
    for disk in disks {
        if let Some(kept) = s.unplug(disk)
            && !second_path
        {
            s.iscsi.parked.insert(disk, kept);
        }
    }
    Ok(())
}

/// `ReportIScsiPersistentLoginsW`: every persistent login, each with the initiator and port
/// that keep it.
pub(super) fn persistent_logins(
    s: &mut State,
    capacity: usize,
) -> Win32Result<Vec<PersistentLogin>> {
    let i = s.initiator()?;
    let needed = i.persistent.len() * PERSISTENT_LOGIN_BYTES;
    if capacity < needed {
        return Err(short(needed));
    }
    Ok(i.persistent
        .iter()
        .map(
            |(iqn, initiator, initiator_port, address, port)| PersistentLogin {
                iqn: iqn.clone(),
                initiator: initiator.clone(),
                initiator_port: *initiator_port,
                portal: (address.clone(), *port),
            },
        )
        .collect())
}

/// `RemoveIScsiPersistentTargetW`: removes the login kept by exactly this initiator on this
/// port (or on all its ports with ISCSI_ALL_INITIATOR_PORTS); an empty initiator is a null
/// `[in]` pointer, which the RPC layer refuses.
pub(super) fn remove_persistent(s: &mut State, login: &PersistentLogin) -> Win32Result<()> {
    let i = s.initiator()?;
    let address = login.portal.0.to_ascii_lowercase();
    let before = i.persistent.len();
    i.persistent.retain(|(iqn, initiator, port, a, p)| {
        !(iqn == &login.iqn
            && initiator.eq_ignore_ascii_case(&login.initiator)
            && (login.initiator_port == ISCSI_ALL_INITIATOR_PORTS || *port == login.initiator_port)
            && *a == address
            && *p == login.portal.1)
    });
    if i.persistent.len() < before {
        Ok(())
    } else {
        Err(err(isdsc::TARGET_NOT_FOUND))
    }
}

/// A null `InitiatorInstance` is refused before anything is looked up: the parameter is `[in]`,
/// not optional (ledger row 26; the code is inferred, and the selftest's
/// `RemoveIScsiPersistentTargetW with a null initiator` step shows a node's).
pub(super) fn remove_persistent_without_initiator(s: &mut State, _iqn: &str) -> Win32Result<()> {
    s.initiator()?;
    Err(OsError::new(code::RPC_X_NULL_REF_POINTER))
}

pub(super) fn session_devices(
    s: &mut State,
    session: (u64, u64),
    capacity: usize,
) -> Win32Result<Vec<(u32, u32)>> {
    s.luns_arrive();
    let now = s.clock;
    let i = s.initiator()?;
    let x = i
        .sessions
        .iter()
        .find(|x| x.id == session)
        .ok_or_else(|| err(isdsc::INVALID_SESSION_ID))?;
    let disks = if x.devices_due <= now {
        &x.disks[..]
    } else {
        &[]
    };
    if capacity < disks.len() {
        return Err(short(disks.len()));
    }
    Ok(disks.iter().map(|d| (data::FILE_DEVICE_DISK, *d)).collect())
}

pub(super) fn set_chap_secret(s: &mut State, secret: &[u8]) -> Win32Result<()> {
    let i = s.initiator()?;
    if !(12..=16).contains(&secret.len()) {
        return Err(err(INVALID_CHAP_SECRET));
    }
    i.chap_secret = Some(secret.to_vec());
    Ok(())
}

impl SimWindows {
    /// An iSCSI array answering on `address:port` with target `iqn`, whose LUNs are the disks
    /// `disks`, requiring CHAP `(user, secret)` when given.
    pub fn add_iscsi_target(
        &self,
        address: &str,
        port: u16,
        iqn: &str,
        disks: &[u32],
        chap: Option<(&str, &str)>,
    ) {
        let mut s = self.lock();
        s.iscsi
            .arrays
            .entry((address.to_ascii_lowercase(), port))
            .or_default()
            .push(Target {
                iqn: iqn.into(),
                disks: disks.to_vec(),
                chap: chap.map(|(u, s)| (u.into(), s.into())),
            });
        // The LUNs are the array's until a login brings them to the machine.
        for &disk in disks {
            let in_session = s.iscsi.sessions.iter().any(|x| x.disks.contains(&disk));
            if !in_session && let Some(kept) = s.unplug(disk) {
                s.iscsi.parked.insert(disk, kept);
            }
        }
    }

    /// A persistent login of `iqn` through `address:port` (one made by upstream or an
    /// operator), kept by the software initiator on each of its two ports.
    pub fn add_persistent_login(&self, iqn: &str, address: &str, port: u16) {
        let mut s = self.lock();
        for initiator_port in [0, 1] {
            s.iscsi.persistent.insert((
                iqn.into(),
                SOFTWARE_INITIATOR.into(),
                initiator_port,
                address.to_ascii_lowercase(),
                port,
            ));
        }
    }

    /// The persistent logins.
    pub fn persistent_logins(&self) -> usize {
        self.lock().iscsi.persistent.len()
    }

    /// How many forced discoveries (`ReportIScsiTargetsW` with ForceUpdate) were made.
    pub fn forced_discoveries(&self) -> u64 {
        self.lock().iscsi.forced_discoveries
    }

    /// The number of iSCSI sessions.
    pub fn iscsi_sessions(&self) -> usize {
        self.lock().iscsi.sessions.len()
    }

    /// The sessions to `iqn` lose their connection and are being re-established, listing no
    /// connection meanwhile.
    pub fn drop_iscsi_connections(&self, iqn: &str) {
        self.drop_iscsi_connections_listing(iqn, None);
    }

    /// [`drop_iscsi_connections`](Self::drop_iscsi_connections), the sessions listing
    /// `listed` as their connection meanwhile (an empty address, port 0: a connection with no
    /// usable portal).
    pub fn drop_iscsi_connections_listing(&self, iqn: &str, listed: Option<(&str, u16)>) {
        for x in self
            .lock()
            .iscsi
            .sessions
            .iter_mut()
            .filter(|x| x.iqn == iqn)
        {
            x.reconnecting = Some(listed.map(|(a, p)| (a.to_string(), p)));
        }
    }

    /// Makes the initiator missing (as under Wine).
    pub fn remove_iscsi_initiator(&self) {
        self.lock().iscsi.unavailable = true;
    }
}
