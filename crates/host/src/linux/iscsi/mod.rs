//! iSCSI on Linux: portal bookkeeping and SendTargets discovery in-process, sessions through
//! open-iscsi.
//!
//! * Portals live in a state file the daemon owns (`<--state-dir>/iscsi/portals`, one `address port` a
//!   line, replaced atomically), so a daemon restart loses none. Discovery runs the in-process
//!   client ([`crate::iscsi_discovery`]), so it needs neither `iscsid` nor the kernel initiator.
//! * ConnectTarget / DisconnectTarget run `iscsiadm` (a child process is acceptable on Linux).
//!   CHAP secrets never go on its command line: the daemon writes them into the node record file
//!   itself (mode 0600), which is where open-iscsi keeps them anyway; any output of `iscsiadm`
//!   that reaches an error message is scrubbed of the secrets first. The node record is deleted
//!   on DisconnectTarget.
//! * SetMutualChapSecret keeps the initiator's mutual secret in `<--state-dir>/iscsi/mutual-chap`
//!   (mode 0600, in a directory only root can enter; never in the socket directory clients
//!   mount); a mutual-CHAP ConnectTarget writes it as the record's `password_in`.
//! * GetTargetDisks reads sysfs: the block devices under the target's iSCSI session, named by
//!   their `diskseq` like the disk group names disks.
//!
//! Files: this one the host and its RPCs, `open_iscsi.rs` running `iscsiadm` and editing its node
//! records, `sessions.rs` the sessions and their disks as sysfs shows them.

use crate::iscsi_discovery::Discovery;
use crate::linux::state_dir;
use csi_proxy_core::disk::DiskUsage;
use csi_proxy_core::iscsi::{AuthType, Chap, IscsiHost, Secret, TargetPortal};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::iscsi_pdu::DiscoveredTarget;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

mod open_iscsi;
mod sessions;
#[cfg(test)]
mod tests;

use open_iscsi::*;
pub use open_iscsi::{apply_settings, record_settings, scrub, session_chap_matches};
use sessions::*;

/// The initiator's name as open-iscsi configures it.
const INITIATOR_NAME_FILE: &str = "/etc/iscsi/initiatorname.iscsi";
/// How long one discovery session may take per step.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(15);
/// `iscsiadm` exit status for "session already exists".
const ISCSI_ERR_SESS_EXISTS: i32 = 15;

/// The Linux iSCSI host.
pub struct LinuxIscsiHost {
    state_dir: PathBuf,
    /// Serialises changes of the state files.
    lock: Mutex<()>,
}

impl LinuxIscsiHost {
    /// A host keeping its state under `state_dir` (created 0700 on first write).
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            lock: Mutex::new(()),
        }
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_portals(&self, op: &str) -> Result<Vec<TargetPortal>> {
        Ok(self
            .read_state(op, "portals")?
            .map(|s| parse_portals(&s))
            .unwrap_or_default())
    }

    /// A state file's text, `None` when it was never written.
    fn read_state(&self, op: &str, name: &str) -> Result<Option<String>> {
        let bytes = state_dir::read_file(&self.state_dir, name).map_err(|e| {
            Error::io(
                op,
                format!("state file {:?}", self.state_dir.join(name).display()),
                &e,
            )
        })?;
        Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    fn write_portals(&self, op: &str, portals: &[TargetPortal]) -> Result<()> {
        let text: String = portals
            .iter()
            .map(|p| format!("{} {}\n", p.address, p.port))
            .collect();
        self.write_state(op, "portals", text.as_bytes())
    }

    /// Writes a state file atomically with mode 0600 (it may hold a secret), through the
    /// state directory's handle (see [`state_dir::write_file`]).
    fn write_state(&self, op: &str, name: &str, bytes: &[u8]) -> Result<()> {
        state_dir::write_file(&self.state_dir, name, bytes, 0o600).map_err(|e| {
            Error::io(
                op,
                format!("state file {:?}", self.state_dir.join(name).display()),
                &e,
            )
        })
    }

    fn require_portal(&self, op: &str, portal: &TargetPortal) -> Result<()> {
        if self.read_portals(op)?.contains(portal) {
            Ok(())
        } else {
            Err(Error::new(
                Kind::NotFound,
                op,
                format!("portal {portal}"),
                "no such target portal (AddTargetPortal first)",
            ))
        }
    }

    fn discover(&self, op: &str, portal: &TargetPortal) -> Result<Vec<DiscoveredTarget>> {
        Discovery {
            address: portal.address.clone(),
            port: portal.port,
            initiator_name: initiator_name(),
            chap: None,
            timeout: DISCOVERY_TIMEOUT,
        }
        .send_targets()
        .map_err(|e| {
            if op == "DiscoverTargetPortal" {
                e
            } else {
                Error::with_message(e.kind(), format!("{op}: {}", e.message()))
            }
        })
    }

    fn mutual_secret(&self, op: &str) -> Result<Option<Secret>> {
        Ok(self
            .read_state(op, "mutual-chap")?
            .filter(|s| !s.is_empty())
            .map(Secret::new))
    }
}

/// Parses the portals state file; malformed lines are skipped (the file is ours, so one only
/// appears after a crash mid-write, which the atomic rename prevents).
pub fn parse_portals(text: &str) -> Vec<TargetPortal> {
    text.lines()
        .filter_map(|l| {
            let (address, port) = l.trim().rsplit_once(' ')?;
            let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
            (!address.is_empty()).then(|| TargetPortal {
                address: address.to_string(),
                port,
            })
        })
        .collect()
}

/// This initiator's iSCSI name: open-iscsi's when configured, else one derived from the host
/// name (discovery needs a name; sessions always go through open-iscsi's own).
pub fn initiator_name() -> String {
    if let Ok(s) = fs::read_to_string(INITIATOR_NAME_FILE) {
        for line in s.lines() {
            if let Some(v) = line.trim().strip_prefix("InitiatorName=") {
                let v = v.trim();
                if !v.is_empty() {
                    return v.to_string();
                }
            }
        }
    }
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_else(|_| "localhost".into());
    format!("iqn.2026-01.io.k8s.csi-proxy:{host}")
}

/// What is missing for sessions (login/logout) on this host, if anything.
pub fn session_support_missing() -> Option<String> {
    if find_iscsiadm().is_none() {
        return Some("iscsiadm (open-iscsi) is not installed".into());
    }
    if !Path::new("/sys/module/iscsi_tcp").exists() {
        return Some(
            "the kernel iSCSI initiator (module iscsi_tcp) is not loaded; load it with \
             `modprobe iscsi_tcp`"
                .into(),
        );
    }
    None
}

impl IscsiHost for LinuxIscsiHost {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        const OP: &str = "AddTargetPortal";
        let _g = self.guard();
        let mut portals = self.read_portals(OP)?;
        if portals.contains(portal) {
            return Ok(());
        }
        portals.push(portal.clone());
        self.write_portals(OP, &portals)?;
        tracing::info!(portal = %portal, "iSCSI target portal added");
        Ok(())
    }

    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        const OP: &str = "DiscoverTargetPortal";
        self.require_portal(OP, portal)?;
        Ok(self
            .discover(OP, portal)?
            .into_iter()
            .map(|t| t.name)
            .collect())
    }

    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        const OP: &str = "RemoveTargetPortal";
        let _g = self.guard();
        let mut portals = self.read_portals(OP)?;
        let before = portals.len();
        portals.retain(|p| p != portal);
        if portals.len() == before {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                format!("portal {portal}"),
                "no such target portal",
            ));
        }
        self.write_portals(OP, &portals)?;
        tracing::info!(portal = %portal, "iSCSI target portal removed");
        Ok(())
    }

    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        self.read_portals("ListTargetPortals")
    }

    fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()> {
        const OP: &str = "ConnectTarget";
        let object = format!("target {iqn:?} at portal {portal}");
        record_value_ok(OP, iqn, "chap_username", &chap.username)?;
        record_value_ok(OP, iqn, "chap_secret", chap.secret.expose())?;
        record_value_ok(OP, iqn, "iqn", iqn)?;
        if !self.discover(OP, portal)?.iter().any(|t| t.name == iqn) {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                &object,
                "the portal does not report this target",
            ));
        }
        if let Some(why) = session_support_missing() {
            return Err(Error::new(Kind::FailedPrecondition, OP, &object, why));
        }
        let mutual = if chap.auth_type == AuthType::MutualChap {
            let m = self.mutual_secret(OP)?;
            if m.is_none() {
                return Err(Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    &object,
                    "mutual CHAP needs the initiator's secret (SetMutualChapSecret first)",
                ));
            }
            m
        } else {
            None
        };
        // An existing session is this request's only when it was made with the same CHAP
        // settings: a request with other (or no) credentials must not get a session, and the
        // disks behind it, that someone else's credentials opened.
        if !sessions_of(portal, iqn).is_empty() {
            let record = node_record(iqn, portal).and_then(|r| fs::read_to_string(r).ok());
            return session_chap_matches(record.as_deref(), chap, iqn, mutual.as_ref())
                .map_err(|why| Error::new(Kind::FailedPrecondition, OP, &object, why));
        }
        let p = portal.to_string();
        let secrets = [
            chap.secret.expose(),
            mutual.as_ref().map(|m| m.expose()).unwrap_or(""),
        ];
        let fail = |what: &str, r: &Run| {
            Error::new(
                Kind::Unavailable,
                OP,
                &object,
                format!(
                    "iscsiadm {what} failed (exit {}): {}",
                    r.code,
                    scrub(&r.output, &secrets)
                ),
            )
        };
        let r = iscsiadm(
            OP,
            &object,
            &["-m", "node", "-o", "new", "-T", iqn, "-p", &p],
        )?;
        if r.code != 0 {
            return Err(fail("creating the node record", &r));
        }
        let record = node_record(iqn, portal).ok_or_else(|| {
            Error::new(
                Kind::Internal,
                OP,
                &object,
                "iscsiadm created no node record where open-iscsi keeps them",
            )
        })?;
        let old = fs::read_to_string(&record)
            .map_err(|e| Error::io(OP, format!("node record {:?}", record.display()), &e))?;
        let text = apply_settings(&old, &record_settings(chap, iqn, mutual.as_ref()));
        let _g = self.guard();
        let mut f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&record)
            .map_err(|e| Error::io(OP, format!("node record {:?}", record.display()), &e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::io(OP, format!("node record {:?}", record.display()), &e))?;
        drop(f);
        let r = iscsiadm(OP, &object, &["-m", "node", "-T", iqn, "-p", &p, "--login"])?;
        match r.code {
            0 | ISCSI_ERR_SESS_EXISTS => {
                tracing::info!(target = %iqn, portal = %portal, "iSCSI session logged in");
                Ok(())
            }
            _ => Err(fail("login", &r)),
        }
    }

    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        const OP: &str = "DisconnectTarget";
        let object = format!("target {iqn:?} at portal {portal}");
        let has_session = !sessions_of(portal, iqn).is_empty();
        let record = node_record(iqn, portal);
        if !has_session && record.is_none() {
            return Ok(());
        }
        let p = portal.to_string();
        if has_session {
            iscsiadm_unless_gone(
                OP,
                &object,
                &["-m", "node", "-T", iqn, "-p", &p, "--logout"],
                "iscsiadm logout failed",
            )?;
            tracing::info!(target = %iqn, portal = %portal, "iSCSI session logged out");
        }
        if record.is_some() {
            // The record holds the CHAP secret: do not keep it past the session.
            iscsiadm_unless_gone(
                OP,
                &object,
                &["-m", "node", "-o", "delete", "-T", iqn, "-p", &p],
                "iscsiadm could not delete the node record",
            )?;
        }
        Ok(())
    }

    /// The disks of every session to the target through the portal: a logout ends them all,
    /// so the in-use check must see them all.
    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        let mut disks = Vec::new();
        for s in sessions_of(portal, iqn) {
            disks.extend(session_disks(&s).map_err(|e| {
                Error::io(
                    "GetTargetDisks",
                    format!("target {iqn:?} at portal {portal}: session {}", s.display()),
                    &e,
                )
            })?);
        }
        disks.sort_unstable();
        disks.dedup();
        Ok(disks)
    }

    fn target_disk_usage(&self, number: u32) -> Result<Option<DiskUsage>> {
        match crate::linux::block::disk("DisconnectTarget", number) {
            Ok(disk) => crate::linux::block::in_use(&disk).map(Some),
            Err(e) if e.kind() == Kind::NotFound => Ok(None), // gone already: nothing to take
            Err(e) => Err(e),
        }
    }

    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        const OP: &str = "SetMutualChapSecret";
        if secret.expose().chars().any(|c| c.is_control()) {
            return Err(Error::invalid(
                OP,
                "mutual CHAP secret",
                "it contains a control character",
            ));
        }
        let _g = self.guard();
        self.write_state(OP, "mutual-chap", secret.expose().as_bytes())
    }
}
