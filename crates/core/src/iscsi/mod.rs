//! iSCSI group: target portals, discovery, sessions and the disks they bring.
//!
//! [`IscsiService`] holds the version-agnostic logic (portal, IQN and authentication type
//! validation); the [`IscsiHost`] trait is the OS layer implemented per platform in
//! `csi-proxy-host` (Windows: the iSCSI initiator; Linux: open-iscsi).
//!
//! Secrets: CHAP secrets are [`Secret`]s, whose `Debug` redacts them; none ever enters an error
//! message or a log line.

use crate::disk::{DiskUsage, OwnUse, refuse_in_use};
use crate::error::{Error, Kind, Result};
use crate::locks::lock_disk;
use crate::profiles::owners::Object;
use crate::profiles::{Release, Scope};
use crate::quota::Quota;
pub use crate::smb::Secret;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod portal;

/// Target portals AddTargetPortal lets the node have registered (a node uses a handful; each
/// one is kept, and on Linux rewritten, with every change).
pub const MAX_PORTALS: usize = 64;

static PORTALS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// AddTargetPortal calls refused by [`MAX_PORTALS`] since start (for the daemon's metrics).
pub fn portal_refusals() -> u64 {
    PORTALS_REFUSED.load(Ordering::Relaxed)
}

/// The port a portal listens on when the request says 0 (upstream's default).
pub const DEFAULT_PORT: u16 = 3260;

/// A target portal as the client sent it, before validation (the wire `TargetPortal`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawTargetPortal {
    /// Host name or IP address.
    pub address: String,
    /// 0 means [`DEFAULT_PORT`]; above 65535 is invalid.
    pub port: u32,
}

/// A validated target portal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetPortal {
    /// Host name or IP address, never empty.
    pub address: String,
    /// Never 0.
    pub port: u16,
}

impl TargetPortal {
    /// Validates the portal of an `op` request. Upstream crashed the daemon on a missing portal
    /// and truncated ports above 65535 silently; both are InvalidArgument here, and so is an
    /// address that is not a host name or an IP address (see [`portal::validate_address`]; an
    /// IPv6 address in brackets is kept without them).
    pub fn from_raw(op: &str, raw: Option<&RawTargetPortal>) -> Result<Self> {
        let Some(raw) = raw else {
            return Err(Error::invalid(op, "request", "target_portal is missing"));
        };
        let address = portal::validate_address(op, &raw.address)?;
        let port = match raw.port {
            0 => DEFAULT_PORT,
            p => u16::try_from(p).map_err(|_| {
                Error::invalid(
                    op,
                    format!("target portal {address:?}"),
                    format!("target_port {p} is out of range (1-65535, 0 for {DEFAULT_PORT})"),
                )
            })?,
        };
        Ok(Self { address, port })
    }
}

impl fmt::Display for TargetPortal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.address.contains(':') {
            write!(f, "[{}]:{}", self.address, self.port)
        } else {
            write!(f, "{}:{}", self.address, self.port)
        }
    }
}

/// How the initiator authenticates to a target; numbers as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum AuthType {
    /// No authentication.
    None = 0,
    /// The target authenticates the initiator.
    OneWayChap = 1,
    /// Both authenticate each other (the initiator's secret is set by SetMutualChapSecret).
    MutualChap = 2,
}

impl AuthType {
    /// The type with wire number `n`, if there is one.
    pub fn from_number(n: i32) -> Option<Self> {
        match n {
            0 => Some(Self::None),
            1 => Some(Self::OneWayChap),
            2 => Some(Self::MutualChap),
            _ => None,
        }
    }
}

/// Authentication for one session. `Debug` redacts the secret; hosts must not put it in errors
/// either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chap {
    /// The authentication type.
    pub auth_type: AuthType,
    /// CHAP user name (may be empty; passed through as upstream does).
    pub username: String,
    /// CHAP secret.
    pub secret: Secret,
}

/// A ConnectTarget request, version-agnostic and not yet validated. `Debug` redacts the secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectTargetRequest {
    /// The portal the target is reached through; `None` is invalid.
    pub target_portal: Option<RawTargetPortal>,
    /// The target's IQN (exact, case-sensitive).
    pub iqn: String,
    /// Wire number of the [`AuthType`]; unknown numbers are invalid.
    pub auth_type: i32,
    /// CHAP user name.
    pub chap_username: String,
    /// CHAP secret.
    pub chap_secret: Secret,
}

/// OS primitives of the iSCSI group. Arguments are already validated.
///
/// Every method is required, so a forgotten one is a compile error rather than an
/// UNIMPLEMENTED in production; test doubles implement `csi_proxy_core::testing::PartialIscsiHost`
/// instead (feature `testing`). No method may put a CHAP secret into an error.
pub trait IscsiHost: Send + Sync {
    /// Registers `portal`; an existing one is success.
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()>;

    /// IQNs of the targets known through `portal`; NotFound if the portal is not registered.
    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>>;

    /// Unregisters `portal`; NotFound if it is not registered.
    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()>;

    /// Every registered portal.
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>>;

    /// Logs in to target `iqn` through `portal`; an existing session is success.
    fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()>;

    /// Logs out of target `iqn`; no session is success, an unknown target is NotFound.
    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()>;

    /// Disk numbers (as the disk group names disks) of the target's sessions; none when not
    /// connected.
    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>>;

    /// Sets the initiator's (node-wide) mutual CHAP secret.
    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()>;

    /// Who uses disk `number`, brought by a session (see [`DiskUsage`], with its volumes open
    /// elsewhere), for the in-use rule before a logout; `None` when the disk is gone already.
    /// Asked of both hosts: Linux's logout refuses nothing, and Windows' refuses only a device
    /// with something open (`ISDSC_DEVICE_BUSY_ON_SESSION`), not a volume merely mounted.
    fn target_disk_usage(&self, number: u32) -> Result<Option<DiskUsage>>;
}

/// The version-agnostic iSCSI service every iSCSI API version is served by.
///
/// Validation lives here, and so will any session bookkeeping added later.
#[derive(Clone)]
pub struct IscsiService {
    host: Arc<dyn IscsiHost>,
    /// The node's portal list's places ([`MAX_PORTALS`]), shared by every clone (every API
    /// version).
    portals: Arc<Quota<TargetPortal>>,
    /// Whose portals and sessions the calls may touch ([`crate::profiles`]).
    scope: Scope,
}

/// The book's name of a portal.
fn portal_object(portal: &TargetPortal) -> Object {
    Object::Portal(portal.to_string().to_ascii_lowercase())
}

/// The book's name of a session: one target through one portal.
fn session_object(portal: &TargetPortal, iqn: &str) -> Object {
    Object::Session(format!(
        "{} {}",
        portal.to_string().to_ascii_lowercase(),
        iqn.to_ascii_lowercase()
    ))
}

/// The longest iSCSI name, in bytes (RFC 3720, 3.2.6.1).
const IQN_MAX: usize = 223;

/// An iSCSI name as RFC 3720 (3.2.6.3) writes them: `iqn.`, `eui.` or `naa.` and then letters,
/// digits, `-`, `.` and `:` (also `_` and upper case, which some targets use). Hosts use the
/// name in node-record paths and tool arguments, so nothing else gets through.
fn require_iqn(op: &str, iqn: &str) -> Result<()> {
    if iqn.is_empty() {
        return Err(Error::invalid(op, "target \"\"", "iqn is empty"));
    }
    let object = format!("target {iqn:?}");
    let prefixed = ["iqn.", "eui.", "naa."]
        .iter()
        .any(|p| iqn.get(..4).is_some_and(|h| h.eq_ignore_ascii_case(p)));
    if !prefixed || iqn.len() == 4 {
        return Err(Error::invalid(
            op,
            &object,
            "not an iSCSI name (expected iqn.…, eui.… or naa.…)",
        ));
    }
    if iqn.len() > IQN_MAX {
        return Err(Error::invalid(
            op,
            &object,
            format!("an iSCSI name has at most {IQN_MAX} bytes"),
        ));
    }
    if let Some(c) = iqn
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_')))
    {
        return Err(Error::invalid(
            op,
            &object,
            format!("an iSCSI name cannot contain {c:?}"),
        ));
    }
    Ok(())
}

impl IscsiService {
    /// A service over `host`.
    pub fn new(host: Arc<dyn IscsiHost>) -> Self {
        Self {
            host,
            portals: Arc::new(Quota::new(MAX_PORTALS, "target portals")),
            scope: Scope::all(),
        }
    }

    /// The same service for calls made under `scope` (one profile's endpoints).
    pub fn with_scope(&self, scope: Scope) -> Self {
        Self {
            scope,
            ..self.clone()
        }
    }

    /// AddTargetPortal: registers a portal (idempotent), up to [`MAX_PORTALS`] on the node.
    pub fn add_target_portal(&self, portal: Option<&RawTargetPortal>) -> Result<()> {
        const OP: &str = "AddTargetPortal";
        let portal = TargetPortal::from_raw(OP, portal)?;
        // Checked and taken in one step, and held until the host's add has ended, without a
        // lock across the host's call (which may wait for a portal on the network): calls
        // adding at the same instant cannot pass the limit together.
        let list = || match self.host.list_target_portals() {
            // A host that cannot list cannot be counted; its add answers for itself.
            Err(e) if e.kind() == Kind::Unimplemented => Ok(Vec::new()),
            listed => listed,
        };
        let _place = self
            .portals
            .take(OP, &format!("portal {portal}"), portal.clone(), list)
            .inspect_err(|e| {
                if e.kind() == Kind::ResourceExhausted {
                    PORTALS_REFUSED.fetch_add(1, Ordering::Relaxed);
                }
            })?;
        self.host.add_target_portal(&portal)?;
        // Portals are shared: another profile adding the same one holds it too.
        self.scope.hold(&portal_object(&portal))
    }

    /// DiscoverTargetPortal: the IQNs reachable through a registered portal.
    pub fn discover_target_portal(&self, portal: Option<&RawTargetPortal>) -> Result<Vec<String>> {
        let portal = TargetPortal::from_raw("DiscoverTargetPortal", portal)?;
        self.host.discover_target_portal(&portal)
    }

    /// RemoveTargetPortal: unregisters a portal.
    pub fn remove_target_portal(&self, portal: Option<&RawTargetPortal>) -> Result<()> {
        const OP: &str = "RemoveTargetPortal";
        let portal = TargetPortal::from_raw(OP, portal)?;
        let object = portal_object(&portal);
        match self.scope.release(OP, &object)? {
            Release::KeptFor(others) => {
                tracing::info!(portal = %portal, ?others, "{OP}: kept for the other profiles holding it");
                Ok(())
            }
            Release::Last => self
                .host
                .remove_target_portal(&portal)
                .inspect_err(|_| self.scope.hold_again(&object)),
        }
    }

    /// ListTargetPortals: every registered portal (under a profile, those it holds).
    pub fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        let mut portals = self.host.list_target_portals()?;
        portals.retain(|p| self.scope.sees(&portal_object(p)));
        Ok(portals)
    }

    /// ConnectTarget: logs in to a target (idempotent).
    pub fn connect_target(&self, req: &ConnectTargetRequest) -> Result<()> {
        const OP: &str = "ConnectTarget";
        let portal = TargetPortal::from_raw(OP, req.target_portal.as_ref())?;
        require_iqn(OP, &req.iqn)?;
        // Upstream's wording, so the message stays recognisable.
        let auth_type = AuthType::from_number(req.auth_type).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("target {:?}", req.iqn),
                format!("invalid authentication type authType={}", req.auth_type),
            )
        })?;
        let chap = Chap {
            auth_type,
            username: req.chap_username.clone(),
            secret: req.chap_secret.clone(),
        };
        // A session's disks are its profile's: another profile never logs in beside it.
        let session = session_object(&portal, &req.iqn);
        self.scope.may_use(OP, &session, false, false)?;
        self.host.connect_target(&portal, &req.iqn, &chap)?;
        self.scope.hold(&session)
    }

    /// DisconnectTarget: logs out of a target (idempotent when not connected).
    pub fn disconnect_target(&self, portal: Option<&RawTargetPortal>, iqn: &str) -> Result<()> {
        const OP: &str = "DisconnectTarget";
        let portal = TargetPortal::from_raw(OP, portal)?;
        require_iqn(OP, iqn)?;
        let session = session_object(&portal, iqn);
        // Asked first (refused before any disk is held), let go only for the logout itself.
        self.scope.may_use(OP, &session, false, false)?;
        let object = format!("target {iqn:?} at portal {portal}");
        // The session's disks are held for the logout, in ascending order (as anything holding
        // several does), and none may be in use: a logout under a mounted filesystem loses
        // what it has not written yet.
        let mut disks = match self.host.get_target_disks(&portal, iqn) {
            Ok(disks) => disks,
            // A host that cannot list a session's disks leaves the check to its logout.
            Err(e) if e.kind() == Kind::Unimplemented => Vec::new(),
            Err(e) => return Err(e),
        };
        disks.sort_unstable();
        disks.dedup();
        let mut held = Vec::with_capacity(disks.len());
        for &n in &disks {
            held.push(lock_disk(n, OP, &object)?);
        }
        for &n in &disks {
            if let Some(usage) = self.host.target_disk_usage(n)? {
                refuse_in_use(
                    OP,
                    &format!("{object}: disk {n} of the session"),
                    &usage,
                    OwnUse::Nothing,
                )?;
            }
        }
        if let Release::KeptFor(_) = self.scope.release(OP, &session)? {
            return Ok(());
        }
        self.host
            .disconnect_target(&portal, iqn)
            .inspect_err(|_| self.scope.hold_again(&session))
    }

    /// GetTargetDisks: the disk numbers a connected target brought; empty when not connected.
    pub fn get_target_disks(
        &self,
        portal: Option<&RawTargetPortal>,
        iqn: &str,
    ) -> Result<Vec<u32>> {
        const OP: &str = "GetTargetDisks";
        let portal = TargetPortal::from_raw(OP, portal)?;
        require_iqn(OP, iqn)?;
        self.host.get_target_disks(&portal, iqn)
    }

    /// SetMutualChapSecret: the initiator's node-wide mutual CHAP secret.
    pub fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        self.scope.check_node_wide(
            "SetMutualChapSecret",
            "(the initiator's mutual CHAP secret)",
            "a node-wide setting every driver's sessions depend on; left to a daemon without \
             profiles",
        )?;
        self.host.set_mutual_chap_secret(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::testing::PartialIscsiHost;
    use std::sync::Mutex;

    fn raw(address: &str, port: u32) -> RawTargetPortal {
        RawTargetPortal {
            address: address.into(),
            port,
        }
    }

    #[test]
    fn portals_default_the_port_and_refuse_bad_ones() {
        let p = TargetPortal::from_raw("Op", Some(&raw("10.0.0.1", 0))).unwrap();
        assert_eq!(p.port, 3260);
        let p = TargetPortal::from_raw("Op", Some(&raw("t", 65535))).unwrap();
        assert_eq!(p.port, 65535);
        for bad in [None, Some(raw("10.0.0.1", 65536)), Some(raw("", 3260))] {
            let e = TargetPortal::from_raw("Op", bad.as_ref()).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{bad:?}");
        }
        let e = TargetPortal::from_raw("Op", Some(&raw("h", 70000))).unwrap_err();
        assert!(e.message().contains("70000"), "{}", e.message());
    }

    /// Every RPC that takes a portal refuses an address that is not a host name or an IP
    /// address before the host sees it (the host here would answer UNIMPLEMENTED).
    #[test]
    fn every_rpc_refuses_a_portal_address_that_is_free_text() {
        let svc = IscsiService::new(Arc::new(crate::testing::UnimplementedHost));
        let bad = raw("10.0.0.1 3260\n* * * * * root touch /x", 0);
        let iqn = "iqn.2026-01.test:a";
        let results = [
            (
                "AddTargetPortal",
                svc.add_target_portal(Some(&bad)).map(drop),
            ),
            (
                "DiscoverTargetPortal",
                svc.discover_target_portal(Some(&bad)).map(drop),
            ),
            (
                "RemoveTargetPortal",
                svc.remove_target_portal(Some(&bad)).map(drop),
            ),
            (
                "ConnectTarget",
                svc.connect_target(&ConnectTargetRequest {
                    target_portal: Some(bad.clone()),
                    iqn: iqn.into(),
                    ..Default::default()
                }),
            ),
            ("DisconnectTarget", svc.disconnect_target(Some(&bad), iqn)),
            (
                "GetTargetDisks",
                svc.get_target_disks(Some(&bad), iqn).map(drop),
            ),
        ];
        for (op, r) in results {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{op}: {e}");
            assert!(
                e.message().starts_with(op) && e.message().contains("target_address"),
                "{}",
                e.message()
            );
        }
        // An IPv6 address in brackets reaches the host without them.
        let host = Arc::new(Recorder::default());
        IscsiService::new(host.clone())
            .connect_target(&ConnectTargetRequest {
                target_portal: Some(raw("[fe80::1]", 0)),
                iqn: iqn.into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(host.0.lock().unwrap()[0].0.address, "fe80::1");
    }

    /// A node's portal list as the hosts keep it (add idempotent, remove by equality).
    #[derive(Default)]
    struct Portals(Mutex<Vec<TargetPortal>>);
    impl PartialIscsiHost for Portals {
        fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
            let mut list = self.0.lock().unwrap();
            if !list.contains(portal) {
                list.push(portal.clone());
            }
            Ok(())
        }
        fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
            self.0.lock().unwrap().retain(|p| p != portal);
            Ok(())
        }
        fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
            Ok(self.0.lock().unwrap().clone())
        }
    }

    #[test]
    fn the_portal_list_is_capped_and_a_registered_portal_is_still_added_again() {
        let host = Arc::new(Portals::default());
        let svc = IscsiService::new(host.clone());
        let nth = |i: usize| raw(&format!("10.0.{}.{}", i / 250, i % 250 + 1), 0);
        for i in 0..MAX_PORTALS {
            svc.add_target_portal(Some(&nth(i))).unwrap();
        }
        let before = portal_refusals();
        let e = svc.add_target_portal(Some(&nth(MAX_PORTALS))).unwrap_err();
        assert_eq!(e.kind(), Kind::ResourceExhausted, "{e}");
        assert!(
            e.message().starts_with("AddTargetPortal")
                && e.message().contains("10.0.0.65:3260")
                && e.message().contains("limit (64)"),
            "{}",
            e.message()
        );
        assert!(portal_refusals() > before);
        assert_eq!(
            host.0.lock().unwrap().len(),
            MAX_PORTALS,
            "nothing was added"
        );
        // Retries of a registered portal stay idempotent at the limit.
        svc.add_target_portal(Some(&nth(3))).unwrap();
        // A removal makes room.
        svc.remove_target_portal(Some(&nth(3))).unwrap();
        svc.add_target_portal(Some(&nth(MAX_PORTALS))).unwrap();
    }

    #[test]
    fn portals_display_ipv6_in_brackets() {
        let p = TargetPortal {
            address: "fe80::1".into(),
            port: 3260,
        };
        assert_eq!(p.to_string(), "[fe80::1]:3260");
    }

    #[test]
    fn auth_types_have_the_wire_numbers() {
        for t in [AuthType::None, AuthType::OneWayChap, AuthType::MutualChap] {
            assert_eq!(AuthType::from_number(t as i32), Some(t));
        }
        assert_eq!(AuthType::from_number(3), None);
        assert_eq!(AuthType::from_number(-1), None);
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(TargetPortal, String, Chap)>>);
    impl PartialIscsiHost for Recorder {
        fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()> {
            self.0
                .lock()
                .unwrap()
                .push((portal.clone(), iqn.into(), chap.clone()));
            Ok(())
        }
    }

    fn connect(auth_type: i32, iqn: &str) -> ConnectTargetRequest {
        ConnectTargetRequest {
            target_portal: Some(raw("t", 0)),
            iqn: iqn.into(),
            auth_type,
            chap_username: "u".into(),
            chap_secret: "chap-s3cret".into(),
        }
    }

    #[test]
    fn connect_validates_before_the_host_and_keeps_the_secret_out_of_errors() {
        let host = Arc::new(Recorder::default());
        let svc = IscsiService::new(host.clone());
        let e = svc.connect_target(&connect(7, "iqn.x")).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument);
        assert!(e.message().contains("authType=7"), "{}", e.message());
        assert!(!e.message().contains("chap-s3cret"));
        let e = svc.connect_target(&connect(1, "")).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument);
        assert!(host.0.lock().unwrap().is_empty());

        svc.connect_target(&connect(2, "iqn.x")).unwrap();
        let calls = host.0.lock().unwrap();
        let (portal, iqn, chap) = &calls[0];
        assert_eq!((portal.port, iqn.as_str()), (3260, "iqn.x"));
        assert_eq!(chap.auth_type, AuthType::MutualChap);
        assert_eq!(chap.secret.expose(), "chap-s3cret");
        assert!(!format!("{chap:?}").contains("chap-s3cret"));
        assert!(!format!("{:?}", connect(1, "i")).contains("chap-s3cret"));
    }

    #[test]
    fn a_host_without_overrides_names_group_and_rpc() {
        let svc = IscsiService::new(Arc::new(crate::testing::UnimplementedHost));
        let e = svc.list_target_portals().unwrap_err();
        assert_eq!(e.kind(), Kind::Unimplemented);
        assert!(
            e.message().contains("iscsi ListTargetPortals"),
            "{}",
            e.message()
        );
        let e = svc.set_mutual_chap_secret(&"x".into()).unwrap_err();
        assert!(
            e.message().contains("iscsi SetMutualChapSecret"),
            "{}",
            e.message()
        );
    }

    /// A session with disks 7 and 3; disk 7 is mounted.
    #[derive(Default)]
    struct Session {
        logged_out: Mutex<bool>,
        mounted: Mutex<bool>,
    }
    impl PartialIscsiHost for Session {
        fn get_target_disks(&self, _: &TargetPortal, _: &str) -> Result<Vec<u32>> {
            Ok(vec![900_007, 900_003])
        }
        fn target_disk_usage(&self, n: u32) -> Result<Option<DiskUsage>> {
            Ok(Some(DiskUsage {
                mount_points: (n == 900_007 && *self.mounted.lock().unwrap())
                    .then(|| "/var/lib/kubelet/x".to_string())
                    .into_iter()
                    .collect(),
                ..Default::default()
            }))
        }
        fn disconnect_target(&self, _: &TargetPortal, _: &str) -> Result<()> {
            *self.logged_out.lock().unwrap() = true;
            Ok(())
        }
    }

    #[test]
    fn a_session_whose_disks_are_in_use_is_never_logged_out() {
        let host = Arc::new(Session::default());
        *host.mounted.lock().unwrap() = true;
        let svc = IscsiService::new(host.clone());
        let e = svc
            .disconnect_target(Some(&raw("t", 0)), "iqn.2026-01.test:a")
            .unwrap_err();
        assert_eq!(e.kind(), Kind::FailedPrecondition);
        assert!(
            e.message().contains("DisconnectTarget")
                && e.message()
                    .contains("disk 900007 of the session: refused: the disk holds a filesystem mounted at \"/var/lib/kubelet/x\""),
            "{}",
            e.message()
        );
        assert!(!*host.logged_out.lock().unwrap());
        // Once unmounted, the logout goes ahead, and the disks were released after it.
        *host.mounted.lock().unwrap() = false;
        svc.disconnect_target(Some(&raw("t", 0)), "iqn.2026-01.test:a")
            .unwrap();
        assert!(*host.logged_out.lock().unwrap());
        drop(lock_disk(900_007, "test", "disk").unwrap());
    }

    #[test]
    fn iscsi_names_are_checked_before_the_host_sees_them() {
        let svc = IscsiService::new(Arc::new(Session::default()));
        for bad in [
            "../../etc",
            "iqn.2026-01.test:a/../../b",
            "target1",
            "iqn.",
            "iqn.2026-01.test:a b",
            "iqn.2026-01.test:a\n",
        ] {
            let e = svc.disconnect_target(Some(&raw("t", 0)), bad).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{bad:?}");
            assert!(e.message().contains("DisconnectTarget"), "{}", e.message());
        }
        let long = format!("iqn.2026-01.test:{}", "a".repeat(250));
        assert!(svc.disconnect_target(Some(&raw("t", 0)), &long).is_err());
        for good in [
            "iqn.2026-01.test:e2e",
            "iqn.1991-05.com.microsoft:node-1-target",
            "eui.02004567A425678D",
            "naa.52004567BA64678D",
            "iqn.2000-01.com.synology:NAS.Target-1.abc_def",
        ] {
            svc.disconnect_target(Some(&raw("t", 0)), good).unwrap();
        }
    }
}
