//! SMB group: node-wide ("global") mappings of `\\server\share` roots and links to them.
//!
//! [`SmbService`] holds the version-agnostic logic (remote path normalisation, share root,
//! local path confinement); the [`SmbHost`] trait is the OS layer implemented per platform in
//! `csi-proxy-host` (Windows: `MSFT_SmbGlobalMapping` + directory symlink; Linux: a cifs mount).
//!
//! Secrets: the SMB password is a [`Secret`], whose `Debug` redacts it, and never enters an
//! error message or a log line.

use crate::error::{Error, Kind, Result};
use crate::filesystem::FilesystemService;
use crate::profiles::owners::Object;
use crate::profiles::{Release, Scope};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};

mod remote;

pub use remote::{
    RemotePath, SERVER_NAME_FORBIDDEN, SHARE_NAME_FORBIDDEN, remote_of_link_target, same_remote,
    share_root_of_link_target,
};

const NEW: &str = "NewSmbGlobalMapping";
const REMOVE: &str = "RemoveSmbGlobalMapping";

/// A credential that must never be shown: its `Debug` prints `<redacted>` (or `""` when empty)
/// and it has no `Display`, so a struct holding one can derive `Debug` safely.
///
/// Used by the SMB and iSCSI groups (re-exported as `iscsi::Secret`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the host call that needs it; never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether no secret was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_string())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
}

/// A NewSmbGlobalMapping request, version-agnostic. `Debug` redacts the password.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSmbGlobalMappingRequest {
    /// `\\server\share[\sub\dir]`; `/` is accepted for `\`.
    pub remote_path: String,
    /// Where to create a link to the remote path; empty for none. Confined to the allowed roots.
    pub local_path: String,
    /// Empty to map with the host's own (machine) credentials.
    pub username: String,
    /// The password of `username`.
    pub password: Secret,
}

/// The user a mapping is made as. `Debug` redacts the password; hosts must not put it in
/// errors either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmbCredentials {
    /// User name as the client sent it (a host escapes it as its API needs).
    pub username: String,
    /// The password of `username`.
    pub password: Secret,
}

/// A link under the allowed roots that uses a mapping: where the link is, and the remote path
/// it leads to as the host reads it back from the link's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmbLinkUse {
    /// The link's path.
    pub link: String,
    /// The remote path it leads to (`\\server\share\…`).
    pub remote: String,
}

/// The links that use a mapping, and whether the host could look everywhere such a link may be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmbUsers {
    /// The links found.
    pub links: Vec<SmbLinkUse>,
    /// Why the scan may have missed links (a directory it could not read, its entry limit):
    /// the manager then never removes the mapping, since it cannot prove it unused.
    pub incomplete: Option<String>,
}

/// What the host is asked to map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmbMapping {
    /// The lower-cased `\\server\share` root.
    pub root: String,
    /// `None` maps with the host's own credentials (upstream: no `Credential` when the user is empty).
    pub credentials: Option<SmbCredentials>,
    /// Whether the mapping must encrypt traffic (`--require-privacy`).
    pub require_privacy: bool,
}

/// What the host knows about the node-wide mapping of one share root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingState {
    /// The host cannot tell; the manager then creates (which must accept an existing healthy
    /// mapping) and removes blindly.
    Unknown,
    /// No mapping of this root exists.
    Absent,
    /// A mapping exists.
    Present(MappingInfo),
}

/// Facts about an existing mapping, as the host sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingInfo {
    /// Its status is OK and the share root answers (Windows: `Status == 0` and the root is
    /// accessible; Linux: the cifs mount answers `statfs` in time).
    pub healthy: bool,
    /// The status as the host names it (`OK`, `Disconnected`, `Unavailable`, `not answering`),
    /// for messages and logs.
    pub status: String,
    /// The user the mapping was made as, when the host records it (`None`: unknown).
    pub username: Option<String>,
    /// For a mapping that is not healthy: whether mapping again with a request's credentials
    /// can heal it, as when the server answered and refused the mapping's credential (a
    /// rotated password or storage key). One whose server does not answer at all cannot be
    /// healed that way: removed, its volumes would stay broken when the server is back, where
    /// the mapping kept reconnects by itself.
    pub remap_heals: bool,
}

/// OS primitives of the SMB group. Arguments are already validated; the decisions (reuse,
/// replace, conflict handling, keep while used) are [`SmbService`]'s.
///
/// Every method is required, the queries too: a real host can tell what is mapped and what uses
/// it, and a "cannot tell" answer would make the service create and remove mappings blindly. Test
/// doubles implement `csi_proxy_core::testing::PartialSmbHost` instead (feature `testing`). No
/// method may put a password into an error.
pub trait SmbHost: Send + Sync {
    /// Creates the node-wide mapping of `mapping.root` with these credentials.
    ///
    /// AlreadyExists when the host refuses because a mapping of this root exists, or because the
    /// server already has a connection made with other credentials (Windows error 1219: one set
    /// of credentials per server and session).
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()>;

    /// Creates a directory link at `local_path` (confined) to `remote_path` (normalised full
    /// remote path, original case) through `mapping`, the mapping of its root the request made
    /// or reused (a host with a mapping per credential links into that credential's); fails if
    /// `local_path` exists.
    fn new_smb_link(&self, mapping: &SmbMapping, remote_path: &str, local_path: &str)
    -> Result<()>;

    /// Removes the node-wide mapping of `root` (forcibly: open handles are closed); NotFound when
    /// there is none. Links to it are left alone.
    fn remove_smb_global_mapping(&self, root: &str) -> Result<()>;

    /// Where the host keeps a mapping per credential (see [`SmbHost::credential_mapping`]):
    /// removes only the one `mapping`'s credentials have, leaving other credentials' mappings of
    /// the root, and the links into them, alone; NotFound when there is none. A host with one
    /// mapping per root removes that one, as [`SmbHost::remove_smb_global_mapping`] does.
    fn remove_credential_mapping(&self, mapping: &SmbMapping) -> Result<()>;

    /// The state of the mapping of `root` (lower-cased `\\server\share`); where the host keeps
    /// a mapping per credential, of all of them together (present when any is).
    fn smb_global_mapping(&self, root: &str) -> Result<MappingState>;

    /// Where the host keeps a separate mapping of a root per credential (Linux: a cifs mount
    /// per user and password, so a mount made with one tenant's credentials never serves a
    /// request made with another's), the state of the one `mapping`'s credentials have;
    /// `None` where a root has one mapping whatever its credentials (Windows), and
    /// [`SmbHost::smb_global_mapping`] tells its state.
    fn credential_mapping(&self, mapping: &SmbMapping) -> Result<Option<MappingState>>;

    /// The roots of every node-wide mapping (lower-cased `\\server\share`), whatever its state.
    fn smb_global_mappings(&self) -> Result<Vec<String>>;

    /// The links under `scan_roots` (the allowed roots: kubelet path and working dirs) that lead
    /// into the mapping of `root`, looked for where kubelet puts staging and publish links;
    /// derived from what is on disk, so nothing is lost when the daemon restarts. A scan that
    /// may have missed some says so in [`SmbUsers::incomplete`].
    fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<SmbUsers>;
}

/// What the manager does with the mapping a NewSmbGlobalMapping needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing is mapped (or the host cannot tell): create.
    Create,
    /// A healthy mapping with the same credentials exists: use it.
    Reuse,
    /// A mapping exists but must be removed and made again, for this reason.
    Replace(String),
}

/// Credentials as far as the manager may remember them: a keyed hash, never the password.
type Fingerprint = u64;

/// Decides what to do with `state` for a request made with `requested` credentials, given the
/// fingerprint of the credentials this daemon last mapped the root with (`None`: not known, e.g.
/// after a restart or for a mapping made by someone else).
pub fn decide(
    state: &MappingState,
    requested: Option<&SmbCredentials>,
    requested_fingerprint: Fingerprint,
    remembered: Option<Fingerprint>,
) -> Decision {
    let info = match state {
        MappingState::Unknown | MappingState::Absent => return Decision::Create,
        MappingState::Present(info) => info,
    };
    if !info.healthy {
        return Decision::Replace(format!("the existing mapping is {}", info.status));
    }
    if let Some(existing) = &info.username {
        let wanted = requested.map(|c| c.username.as_str()).unwrap_or("");
        if !existing.eq_ignore_ascii_case(wanted) {
            return Decision::Replace(format!(
                "the existing mapping was made as user {existing:?}, this request is for {wanted:?}"
            ));
        }
    }
    match remembered {
        Some(fp) if fp != requested_fingerprint => {
            Decision::Replace("the credentials changed since the mapping was made".into())
        }
        _ => Decision::Reuse,
    }
}

/// The version-agnostic SMB service every SMB API version is served by, and the mapping
/// manager: it decides from what the host reports, so a restart loses nothing.
///
/// * NewSmbGlobalMapping reuses a healthy mapping made with the same credentials, replaces one
///   made with other credentials (so a rotated password takes effect) when no other volume's
///   link uses it, reuses a healthy one that others use whatever its credentials (as upstream),
///   repairs a broken (disconnected, inaccessible) one whoever uses it, and treats "already
///   exists" / Windows error 1219 as reuse-or-rebind.
/// * RemoveSmbGlobalMapping removes the mapping unless another volume's link still leads into
///   it (see `keep_for`: csi-driver-smb asks before removing its own staging link), so two
///   volumes on one share do not break each other.
///
/// Operations on one share root are ordered (`locks::lock_smb_root`): a mapping is never
/// removed between another request's mapping and its link, and a share whose server does not
/// answer holds up only the calls for that share. Removing other mappings on the same server
/// (Windows error 1219) takes each of their roots without waiting: one busy is kept.
#[derive(Clone)]
pub struct SmbService {
    host: Arc<dyn SmbHost>,
    fs: FilesystemService,
    require_privacy: bool,
    manager: Arc<Manager>,
}

/// The manager's memory: only keyed hashes of the credentials each root was mapped with, under
/// a key made at start-up and never stored, so nothing here can reveal a password.
struct Manager {
    remembered: Mutex<HashMap<String, Fingerprint>>,
    key: RandomState,
}

impl Manager {
    /// The fingerprints by root; held only to read or change one entry, never across a host
    /// call (the share root's lock orders the calls).
    fn remembered(&self) -> MutexGuard<'_, HashMap<String, Fingerprint>> {
        self.remembered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn forget(&self, root: &str) {
        self.remembered().remove(root);
    }

    fn fingerprint(&self, credentials: Option<&SmbCredentials>) -> Fingerprint {
        let mut h = self.key.build_hasher();
        match credentials {
            None => 0u8.hash(&mut h),
            Some(c) => {
                1u8.hash(&mut h);
                c.username.to_lowercase().hash(&mut h);
                c.password.expose().hash(&mut h);
            }
        }
        h.finish()
    }
}

/// Whether a RemoveSmbGlobalMapping of `remote` keeps the mapping that `users` use.
///
/// csi-driver-smb unstages by removing the mapping first and its staging link second, so the
/// caller's own link still exists when it asks: a link leading to exactly `remote` is taken for
/// it. The mapping is kept while any link leads elsewhere in the share (another volume) or more
/// than one leads to `remote` (two volumes on the same path). Decided from the links on disk,
/// so it holds across daemon restarts. A scan that may have missed links keeps it too.
fn keep_for(users: &SmbUsers, remote: &str) -> bool {
    let own = users
        .links
        .iter()
        .filter(|u| same_remote(&u.remote, remote))
        .count();
    users.incomplete.is_some() || own > 1 || users.links.len() > own
}

/// The other links a mapping has, as [`SmbService::other_users`] finds them.
struct Others {
    links: Vec<String>,
    /// Why there may be more (see [`SmbUsers::incomplete`]).
    incomplete: Option<String>,
}

impl Others {
    /// Whether the mapping may serve other volumes.
    fn any(&self) -> bool {
        !self.links.is_empty() || self.incomplete.is_some()
    }

    /// The other users, for a message: "3 other links", or why there may be some.
    fn describe(&self) -> String {
        match &self.incomplete {
            None => format!("{} other links use", self.links.len()),
            Some(why) => format!(
                "{} other links were found and the link scan was incomplete ({why}), so more may use",
                self.links.len()
            ),
        }
    }
}

/// The server part (`\\server`) of a lower-cased share root.
fn server_of(root: &str) -> &str {
    let body = root.trim_start_matches('\\');
    body.split('\\').next().unwrap_or(body)
}

impl SmbService {
    /// A service over `host`, confining local paths with `fs`; `require_privacy` is
    /// `--require-privacy` (upstream default true).
    pub fn new(host: Arc<dyn SmbHost>, fs: FilesystemService, require_privacy: bool) -> Self {
        Self {
            host,
            fs,
            require_privacy,
            manager: Arc::new(Manager {
                remembered: Mutex::new(HashMap::new()),
                key: RandomState::new(),
            }),
        }
    }

    /// The same service (and mapping manager) confining paths with `fs` and judging mappings by
    /// its scope ([`crate::profiles`]).
    pub fn with_fs(&self, fs: FilesystemService) -> Self {
        Self { fs, ..self.clone() }
    }

    /// NewSmbGlobalMapping: makes sure the share root of `remote_path` is mapped node-wide with
    /// these credentials, then links `local_path` (when given) to the full remote path.
    ///
    /// Unlike upstream, `local_path` is confined before the mapping is made, so a request with a
    /// bad local path leaves nothing behind; the OK/non-OK outcome is the same.
    pub fn new_smb_global_mapping(&self, req: &NewSmbGlobalMappingRequest) -> Result<()> {
        let remote = RemotePath::parse(NEW, &req.remote_path)?;
        if !req.local_path.is_empty() {
            self.fs.check_target(NEW, &req.local_path)?;
        }
        let credentials = (!req.username.is_empty()).then(|| SmbCredentials {
            username: req.username.clone(),
            password: req.password.clone(),
        });
        let mapping = SmbMapping {
            root: remote.root.clone(),
            credentials,
            require_privacy: self.require_privacy,
        };
        // The share before the local path (the lock order, `crate::locks`): a call waiting for
        // a share whose server does not answer holds no path.
        let _share = crate::locks::lock_smb_root(
            &mapping.root,
            NEW,
            &format!("mapping {:?}", mapping.root),
        )?;
        // Held until the link is made: the host makes it inside the directory checked here.
        let local = if req.local_path.is_empty() {
            None
        } else {
            Some(
                self.fs
                    .hold_to_change(NEW, &req.local_path)?
                    .ok_or_else(|| {
                        Error::new(
                            Kind::NotFound,
                            NEW,
                            format!("local_path {:?}", req.local_path),
                            "the directory to hold the link does not exist",
                        )
                    })?,
            )
        };
        let own_link = local.as_ref().map(|l| l.normalised.as_str());
        self.ensure_mapped(&mapping, own_link)?;
        // Held from now on, also when the link below fails: the mapping is there.
        self.scope().hold(&mapping_object(&mapping.root))?;
        match local {
            Some(local) => self
                .host
                .new_smb_link(&mapping, &remote.path, &local.os_path)
                .map_err(|e| e.shown_as(&local.os_path, &local.normalised)),
            None => Ok(()),
        }
    }

    /// The state of the mapping `mapping` would use, and whether the host keeps it per
    /// credential (see [`SmbHost::credential_mapping`]).
    fn state_for(&self, mapping: &SmbMapping) -> Result<(MappingState, bool)> {
        Ok(match self.host.credential_mapping(mapping)? {
            Some(state) => (state, true),
            None => (self.host.smb_global_mapping(&mapping.root)?, false),
        })
    }

    /// The links that use the mapping of `root`, but for `own_link` (the request's own local
    /// path, whose link is about to be made again).
    fn other_users(&self, root: &str, own_link: Option<&str>) -> Result<Others> {
        let users = self
            .host
            .smb_mapping_users(root, self.fs.policy().roots())?;
        Ok(Others {
            links: users
                .links
                .into_iter()
                .map(|u| u.link)
                .filter(|l| own_link.is_none_or(|own| !same_remote(l, own)))
                .collect(),
            incomplete: users.incomplete,
        })
    }

    /// Reuses, replaces or creates the mapping; called with the share root held. `own_link`
    /// is the request's local path: its link (from an earlier stage of the same volume) is
    /// about to be made again, so it does not count as another user of the mapping.
    fn ensure_mapped(&self, mapping: &SmbMapping, own_link: Option<&str>) -> Result<()> {
        let root = &mapping.root;
        let fingerprint = self.manager.fingerprint(mapping.credentials.as_ref());
        let (state, per_credential) = self.state_for(mapping)?;
        // A mapping kept per credential was made with these very credentials.
        let made_with = if per_credential {
            None
        } else {
            self.manager.remembered().get(root).copied()
        };
        match decide(&state, mapping.credentials.as_ref(), fingerprint, made_with) {
            Decision::Reuse => {
                return Ok(());
            }
            Decision::Replace(why) => {
                // Never replaced under another profile that holds it.
                self.scope()
                    .may_use(NEW, &mapping_object(root), true, true)?;
                // Removing a working mapping closes every handle opened through it: never
                // under other volumes' links, so a healthy one they use is reused as it is,
                // whatever credentials made it (as upstream does). A broken one serves none of
                // them: made again with this request's credentials (after a password change or
                // a storage key rotation), it heals every volume of the share, as upstream's
                // remove-and-map-again does.
                let others = self.other_users(root, own_link)?;
                if others.any() {
                    if let MappingState::Present(info) = &state
                        && info.healthy
                    {
                        tracing::info!(
                            root = %root,
                            users = others.links.len(),
                            incomplete = ?others.incomplete,
                            "reusing a mapping made with other credentials, since other links may use it ({why})"
                        );
                        return Ok(());
                    }
                    // The server does not answer (or its answer was lost): kept for the other
                    // volumes, whose links work again once it answers; kubelet retries this one.
                    if let MappingState::Present(info) = &state
                        && !info.remap_heals
                    {
                        return Err(Error::new(
                            Kind::Unavailable,
                            NEW,
                            format!("mapping {root:?}"),
                            format!(
                                "the share does not answer ({}) and {} its mapping, which is \
                                 kept for them; retry once the server answers",
                                info.status,
                                others.describe()
                            ),
                        ));
                    }
                    tracing::warn!(
                        root = %root,
                        users = others.links.len(),
                        "repairing a broken mapping other links use ({why}): made again with this request's credentials"
                    );
                }
                self.manager.forget(root);
                // Where each credential has a mapping of its own, only this request's is the
                // broken one: the other tenants' mappings serve their links and stay.
                let removed = if per_credential {
                    self.host.remove_credential_mapping(mapping)
                } else {
                    self.host.remove_smb_global_mapping(root)
                };
                match removed {
                    Err(e) if e.kind() != Kind::NotFound => {
                        return Err(
                            e.context(format!("{NEW}: replacing the mapping of {root:?} ({why})"))
                        );
                    }
                    _ => {}
                }
            }
            Decision::Create => {}
        }
        match self.host.new_smb_global_mapping(mapping) {
            Ok(()) => {}
            Err(e) if e.kind() == Kind::AlreadyExists => {
                self.rebind(mapping, own_link, fingerprint, e)?;
            }
            Err(e) => return Err(e),
        }
        self.manager.remembered().insert(root.clone(), fingerprint);
        Ok(())
    }

    /// The host refused with "already exists" (a mapping of the root appeared, or Windows error
    /// 1219: the server has a connection made with other credentials). Reuse what is there if it
    /// is healthy and made as this user; otherwise remove the stale mapping of this root and
    /// every unused mapping on the same server, and try once more. Mappings on the same server
    /// that links still use (or may use: an incomplete scan), or that another call is working
    /// on, are never removed: that conflict is FAILED_PRECONDITION.
    fn rebind(
        &self,
        mapping: &SmbMapping,
        own_link: Option<&str>,
        fingerprint: Fingerprint,
        refused: Error,
    ) -> Result<()> {
        let root = &mapping.root;
        let (state, _) = self.state_for(mapping)?;
        if let MappingState::Present(_) = &state
            && decide(&state, mapping.credentials.as_ref(), fingerprint, None) == Decision::Reuse
        {
            return Ok(());
        }
        let server = server_of(root).to_string();
        let mut in_use = Vec::new();
        for other in self.host.smb_global_mappings()? {
            if server_of(&other) != server {
                continue;
            }
            // Another root of the server is taken without waiting (the caller holds its own):
            // one a call is working on is left to it, so two calls never wait for each other.
            let _other = if other == *root {
                None
            } else {
                match crate::locks::try_lock_smb_root(&other, NEW, &format!("mapping {other:?}")) {
                    Some(guard) => Some(guard),
                    None => {
                        in_use.push(format!("{other:?} (another call is working on it)"));
                        continue;
                    }
                }
            };
            // The requested root too: whatever made the host refuse, a mapping other volumes'
            // links use is never removed under them (the request's own link aside).
            if let Err(held) = self
                .scope()
                .may_use(NEW, &mapping_object(&other), true, true)
            {
                in_use.push(format!("{other:?} ({})", held.message()));
                continue;
            }
            let others = self.other_users(&other, own_link.filter(|_| other == *root))?;
            if others.any() {
                in_use.push(format!("{other:?} ({} it)", others.describe()));
                continue;
            }
            self.manager.forget(&other);
            match self.host.remove_smb_global_mapping(&other) {
                Err(e) if e.kind() != Kind::NotFound => return Err(e),
                _ => {}
            }
        }
        match self.host.new_smb_global_mapping(mapping) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == Kind::AlreadyExists => {
                let why = if in_use.is_empty() {
                    format!("the host still refuses: {}", e.message())
                } else {
                    format!(
                        "server {server:?} already has mappings made with other credentials that \
                         are kept: {} (one set of credentials per server, Windows error 1219)",
                        in_use.join(", ")
                    )
                };
                Err(Error::new(
                    Kind::FailedPrecondition,
                    NEW,
                    format!("mapping {root:?}"),
                    format!("{why}; first refusal: {}", refused.message()),
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// RemoveSmbGlobalMapping: removes the node-wide mapping of the share root of `remote_path`,
    /// unless another volume's link under the allowed roots still leads into it (then it is kept
    /// and the call succeeds). NotFound when nothing is mapped (upstream is not idempotent here),
    /// but for a link still leading to exactly `remote_path`: a retried unstage, answered OK.
    pub fn remove_smb_global_mapping(&self, remote_path: &str) -> Result<()> {
        let remote = RemotePath::parse(REMOVE, remote_path)?;
        let root = &remote.root;
        let _share = crate::locks::lock_smb_root(root, REMOVE, &format!("mapping {root:?}"))?;
        // Under a profile: only a holder removes it, and only when it is the last one.
        let object = mapping_object(root);
        if let Release::KeptFor(others) = self.scope().release(REMOVE, &object)? {
            tracing::info!(root = %root, ?others, "{REMOVE}: kept for the other profiles holding it");
            return Ok(());
        }
        if self.host.smb_global_mapping(root)? == MappingState::Absent {
            // A retry of csi-driver-smb's unstage whose removal went through but whose Rmdir of
            // its staging link, next, did not: the link to exactly this path is still there.
            // NOT_FOUND would fail that unstage on every retry; its work is done.
            let users = self
                .host
                .smb_mapping_users(root, self.fs.policy().roots())?;
            if users
                .links
                .iter()
                .any(|u| same_remote(&u.remote, &remote.path))
            {
                return Ok(());
            }
            return Err(Error::new(
                Kind::NotFound,
                REMOVE,
                format!("mapping {root:?}"),
                "no such SMB global mapping",
            ));
        }
        let users = self
            .host
            .smb_mapping_users(root, self.fs.policy().roots())?;
        if keep_for(&users, &remote.path) {
            // Kept, and answered OK as for a mapping other volumes use: csi-driver-smb fails
            // its retried unstage before it reaches this call again (its count file is gone),
            // so an error would leave the volume's unstage failing for ever, and a mapping
            // kept loses nothing.
            if let Some(why) = &users.incomplete {
                tracing::warn!(
                    root = %root,
                    "{REMOVE}: mapping {root:?} kept: the link scan was incomplete ({why}), so it \
                     cannot be proven unused"
                );
            }
            return Ok(());
        }
        self.manager.forget(root);
        self.host.remove_smb_global_mapping(root).inspect_err(|e| {
            if e.kind() != Kind::NotFound {
                self.scope().hold_again(&object);
            }
        })
    }

    /// Whose mappings the calls may touch: the scope of the path policy they are served with.
    fn scope(&self) -> &Scope {
        self.fs.policy().scope()
    }
}

/// The book's name of the mapping of `root` (already lower-cased).
fn mapping_object(root: &str) -> Object {
    Object::SmbMapping(root.to_string())
}

// The service's paths through a host (credentials, links, confinement, UNIMPLEMENTED) are
// tested over the adapters in `csi-proxy-server/tests/smb_iscsi_system_adapters.rs`, which has
// the filesystem fake the service needs.
#[cfg(test)]
mod tests;
