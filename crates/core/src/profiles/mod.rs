//! Least privilege per driver: which driver's node plugin may touch what.
//!
//! Without profiles every client that reaches an endpoint may do everything ([`Scope::all`]),
//! as upstream. With profiles, each driver has its own endpoints, and every call made on them
//! runs under that driver's [`Scope`]. The rules live here, once, and are asked before any host
//! call:
//! - **groups**: a call of a group the profile does not list is refused (the system group only
//!   when listed);
//! - **paths** ([`area`]): the driver's plugin directories (`plugins/<driver>/`,
//!   `plugins/kubernetes.io/csi/<driver>/`), its extra `paths`, and the per-volume directories
//!   kubelet made for one of its volumes (older kubelets' `plugins/kubernetes.io/csi/pv/<pv>/`,
//!   block volumes' `volumeDevices/…/<pv>/`, publish targets `pods/<uid>/volumes/
//!   kubernetes.io~csi/<pv>/`), claimed at first use when kubelet's `vol_data.json` there names
//!   the driver; nothing else under the kubelet path;
//! - **disks and volumes**: a filesystem mounted under another profile's paths makes its disk
//!   that profile's (the path policy's own-use test, `crate::disk::refuse_in_use`);
//! - **SMB mappings, iSCSI portals and sessions**: those the profile made ([`owners`]); a
//!   mapping or a portal two profiles hold stays until both let it go.
//!
//! A refusal is PERMISSION_DENIED naming the profile and, where there is one, the owner.

pub mod area;
pub mod owners;
#[cfg(test)]
mod tests;

use crate::error::{Error, Kind, Result};
use crate::paths::PathStyle;
use area::{Area, Claim};
use owners::{Object, Owners};
use std::fmt;
use std::sync::Arc;

/// An API group, as a profile lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// `filesystem`
    Filesystem,
    /// `disk`
    Disk,
    /// `volume`
    Volume,
    /// `smb`
    Smb,
    /// `system`
    System,
    /// `iscsi`
    Iscsi,
}

impl Group {
    /// Every group, in upstream's order.
    pub const ALL: [Group; 6] = [
        Group::Filesystem,
        Group::Disk,
        Group::Volume,
        Group::Smb,
        Group::System,
        Group::Iscsi,
    ];

    /// The group's name on the wire and in endpoint names.
    pub const fn as_str(self) -> &'static str {
        match self {
            Group::Filesystem => "filesystem",
            Group::Disk => "disk",
            Group::Volume => "volume",
            Group::Smb => "smb",
            Group::System => "system",
            Group::Iscsi => "iscsi",
        }
    }

    /// The group named `name`.
    pub fn parse(name: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.as_str() == name)
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One driver's profile, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The driver's CSI name (`ebs.csi.aws.com`); also the profile's name.
    pub driver: String,
    /// The groups it may call.
    pub groups: Vec<Group>,
    /// Extra directories it may use (absolute, inside the daemon's allowed roots).
    pub paths: Vec<String>,
}

/// Directory names kubelet uses below `plugins/kubernetes.io/csi/` for its own layouts: never a
/// driver's name there.
const RESERVED_NAMES: [&str; 3] = ["pv", "volumeDevices", "kubernetes.io"];

/// Longest driver name the CSI specification allows.
const MAX_DRIVER_NAME: usize = 63;

/// Reads kubelet's per-volume record (`vol_data.json`) of a claimable directory: the driver it
/// names. Implemented over the filesystem host ([`crate::filesystem::VolDataFromHost`]), which
/// reads it without following links; `Ok(None)`: there is no such record.
pub trait VolDataReader: Send + Sync {
    /// The driver the record at `file` (components below the directory `dir`) names.
    fn driver_of(&self, op: &str, dir: &str, file: &[&str]) -> Result<Option<String>>;
}

/// Every profile the daemon serves, the kubelet path they are judged under, and who holds what.
pub struct Profiles {
    style: PathStyle,
    /// `--kubelet-path`, split into components (Windows: drive first).
    kubelet: Vec<String>,
    list: Vec<Profile>,
    /// Each profile's extra paths, split into components.
    extra: Vec<Vec<Vec<String>>>,
    owners: Arc<Owners>,
}

impl fmt::Debug for Profiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profiles")
            .field("kubelet", &self.kubelet)
            .field("list", &self.list)
            .finish_non_exhaustive()
    }
}

impl Profiles {
    /// Checks `list` against the kubelet path and the allowed roots (`roots`, normalised, as
    /// [`crate::paths::PathPolicy::roots`]): driver names well formed and unique, at least one
    /// group, extra paths absolute, inside a root and not a directory every driver shares.
    /// Errors name the profile and the field.
    pub fn new(
        style: PathStyle,
        kubelet_path: &str,
        roots: &crate::paths::PathPolicy,
        list: Vec<Profile>,
        owners: Arc<Owners>,
    ) -> Result<Arc<Self>> {
        let kubelet = area::components(style, kubelet_path).ok_or_else(|| {
            Error::invalid(
                "profiles",
                format!("{kubelet_path:?}"),
                "not an absolute path",
            )
        })?;
        let mut extra = Vec::with_capacity(list.len());
        for (i, p) in list.iter().enumerate() {
            let what = format!("profile {:?}", p.driver);
            check_driver_name(&p.driver).map_err(|why| Error::invalid("profiles", &what, why))?;
            if list[..i].iter().any(|q| q.driver == p.driver) {
                return Err(Error::invalid("profiles", &what, "is listed twice"));
            }
            if p.groups.is_empty() {
                return Err(Error::invalid(
                    "profiles",
                    &what,
                    "lists no groups: it could call nothing",
                ));
            }
            let mut mine = Vec::new();
            for path in &p.paths {
                let normalised = roots
                    .check("profiles", path)
                    .map_err(|e| e.context(format!("{what}: paths")))?;
                if roots.is_shared(&normalised) {
                    return Err(Error::invalid(
                        "profiles",
                        format!("{what}: paths {path:?}"),
                        "is a directory every driver's paths lie under; name the driver's own \
                         directory below it",
                    ));
                }
                mine.push(area::components(style, &normalised).unwrap_or_default());
            }
            extra.push(mine);
        }
        Ok(Arc::new(Profiles {
            style,
            kubelet,
            list,
            extra,
            owners,
        }))
    }

    /// The profiles, in the order configured.
    pub fn list(&self) -> &[Profile] {
        &self.list
    }

    /// Who holds what.
    pub fn owners(&self) -> &Arc<Owners> {
        &self.owners
    }

    /// The scope calls on profile `driver`'s endpoints run under; `reader` reads kubelet's
    /// per-volume records for its claims. `None` for a driver no profile names.
    pub fn scope(self: &Arc<Self>, driver: &str, reader: Arc<dyn VolDataReader>) -> Option<Scope> {
        let me = self.list.iter().position(|p| p.driver == driver)?;
        Some(Scope(Some(Arc::new(Restricted {
            all: self.clone(),
            me,
            reader,
        }))))
    }

    /// The profile whose plugin directory or extra path `comps` (in `area`) lies in, if any.
    fn by_place(&self, comps: &[&str], area: &Area) -> Option<usize> {
        (0..self.list.len()).find(|&i| self.place_is(i, comps, area))
    }

    /// Whether `comps` (in `area`, as [`area::classify`] found it) lies in profile `i`'s
    /// plugin directories or extra paths.
    fn place_is(&self, i: usize, comps: &[&str], area: &Area) -> bool {
        let style = self.style;
        self.extra[i]
            .iter()
            .any(|root| style.starts_with(comps, root))
            || matches!(area, Area::Plugin(d) if style.same(d, &self.list[i].driver))
    }
}

/// The CSI specification's rule for a driver name: at most 63 characters, alphanumerics, `-`,
/// `_` and `.`, beginning and ending with an alphanumeric; and not a name kubelet uses itself.
fn check_driver_name(name: &str) -> std::result::Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > MAX_DRIVER_NAME {
        return Err(format!(
            "a driver name has 1 to {MAX_DRIVER_NAME} characters"
        ));
    }
    if !name.chars().all(ok_char) || !edge(name.chars().next()) || !edge(name.chars().last()) {
        return Err(
            "a driver name has only letters, digits, '-', '_' and '.', and begins and ends with a \
             letter or digit (the CSI specification's rule)"
                .into(),
        );
    }
    if RESERVED_NAMES.iter().any(|r| r.eq_ignore_ascii_case(name)) {
        return Err(format!(
            "{name:?} is a directory kubelet keeps for its own layouts, never a driver's"
        ));
    }
    Ok(())
}

/// The rights a call runs with: everything (no profiles, upstream's model), or one profile's.
/// Cloned into every service of a profile's endpoints.
#[derive(Clone, Default)]
pub struct Scope(Option<Arc<Restricted>>);

struct Restricted {
    all: Arc<Profiles>,
    me: usize,
    reader: Arc<dyn VolDataReader>,
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("Scope(all)"),
            Some(r) => write!(f, "Scope({:?})", r.profile().driver),
        }
    }
}

/// What a profile may do with a node-wide object it asked to remove or log out of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Nobody else holds it: the host may remove it.
    Last,
    /// Other profiles still hold it: it stays, and the call succeeds for this profile.
    KeptFor(Vec<String>),
}

impl Restricted {
    fn profile(&self) -> &Profile {
        &self.all.list[self.me]
    }

    fn denied(&self, op: &str, object: impl fmt::Display, why: impl fmt::Display) -> Error {
        Error::new(
            Kind::PermissionDenied,
            op,
            object,
            format!("refused for profile {:?}: {why}", self.profile().driver),
        )
    }
}

impl Scope {
    /// No profile: every call may do everything (the daemon without `--profiles`).
    pub fn all() -> Self {
        Scope(None)
    }

    /// The profile's name (its driver), `None` without profiles.
    pub fn profile(&self) -> Option<&str> {
        self.0.as_ref().map(|r| r.profile().driver.as_str())
    }

    /// Refuses a call of `group` the profile does not list.
    pub fn check_group(&self, op: &str, group: Group) -> Result<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        if r.profile().groups.contains(&group) {
            return Ok(());
        }
        Err(r.denied(
            op,
            format!("({group} group)"),
            format!(
                "the profile lists the groups [{}]",
                r.profile()
                    .groups
                    .iter()
                    .map(|g| g.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }

    /// Admits a normalised path the call will use: inside the profile's places, or in a
    /// per-volume directory it holds or may claim now. `shown` is how messages name the path.
    pub fn admit_path(&self, op: &str, normalised: &str) -> Result<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        let all = &r.all;
        let shown = format!("{normalised:?}");
        let Some(comps) = area::components(all.style, normalised) else {
            return Err(r.denied(op, shown, "not an absolute path"));
        };
        let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
        let area = area::classify(all.style, &all.kubelet, &comps);
        if all.place_is(r.me, &comps, &area) {
            return Ok(());
        }
        match &area {
            Area::Plugin(driver) => Err(r.denied(op, shown, owned_by(all, &comps, &area, driver))),
            Area::Claim(claim) => self.admit_claim(op, &shown, claim),
            Area::Shared | Area::Outside => Err(r.denied(
                op,
                shown,
                match all.by_place(&comps, &area) {
                    Some(i) => format!("it is among profile {:?}'s paths", all.list[i].driver),
                    None => "outside the profile's paths (its plugin directories, the \
                             per-volume directories kubelet made for its volumes, and its \
                             extra paths)"
                        .into(),
                },
            )),
        }
    }

    /// A per-volume directory: the profile holds it, or kubelet's record there names its
    /// driver and nobody holds it yet (it is claimed now, durably).
    fn admit_claim(&self, op: &str, shown: &str, claim: &Claim) -> Result<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        let me = r.profile().driver.as_str();
        let object = Object::Dir(claim.key(r.all.style));
        match r.all.owners.holders(&object).first() {
            Some(owner) if owner == me => return Ok(()),
            Some(owner) => {
                return Err(r.denied(
                    op,
                    shown,
                    format!("{:?} belongs to profile {owner:?}", claim.dir),
                ));
            }
            None => {}
        }
        let named = r
            .reader
            .driver_of(op, &claim.dir, &claim.record)
            .map_err(|e| match e.kind() {
                Kind::PermissionDenied => r.denied(op, shown, e.message()),
                _ => e,
            })?;
        match named {
            Some(d) if r.all.style.same(&d, me) => {
                // Whoever claimed it meanwhile wins; both asked under the book's lock.
                match r.all.owners.claim(&object, me)? {
                    None => Ok(()),
                    Some(owner) => Err(r.denied(
                        op,
                        shown,
                        format!("{:?} belongs to profile {owner:?}", claim.dir),
                    )),
                }
            }
            Some(d) => Err(r.denied(
                op,
                shown,
                format!(
                    "kubelet recorded {:?} for driver {d:?} ({})",
                    claim.dir,
                    claim.record.join("/")
                ),
            )),
            None => Err(r.denied(
                op,
                shown,
                format!(
                    "{:?} has no record of kubelet's naming its driver ({}): a per-volume \
                     directory is a profile's only once kubelet recorded it for the profile's \
                     driver",
                    claim.dir,
                    claim.record.join("/")
                ),
            )),
        }
    }

    /// Why a mount point (a normalised path) is not this scope's, completing "…, which": it
    /// belongs to another profile, or to nobody's places. `None` when it is this scope's (or
    /// there are no profiles). Nothing is read or claimed: asked for the mounts a disk reports.
    pub fn foreign_owner(&self, normalised: &str) -> Option<String> {
        let r = self.0.as_ref()?;
        let all = &r.all;
        let comps = area::components(all.style, normalised)?;
        let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
        let area = area::classify(all.style, &all.kubelet, &comps);
        if all.place_is(r.me, &comps, &area) {
            return None;
        }
        if let Some(i) = all.by_place(&comps, &area) {
            return Some(format!("belongs to profile {:?}", all.list[i].driver));
        }
        match area {
            Area::Claim(claim) => {
                let holders = all.owners.holders(&Object::Dir(claim.key(all.style)));
                match holders.first() {
                    Some(h) if *h == r.profile().driver => None,
                    Some(h) => Some(format!("belongs to profile {h:?}")),
                    None => Some(format!(
                        "is in {:?}, which no profile has claimed",
                        claim.dir
                    )),
                }
            }
            Area::Plugin(d) => Some(format!(
                "is in driver {d:?}'s plugin directory, which no profile serves"
            )),
            Area::Shared | Area::Outside => Some("is in no profile's places".into()),
        }
    }

    /// Before a node-wide object (an SMB mapping, a target portal, an iSCSI session) is
    /// created, replaced or logged into: refused when another profile holds it and `shared`
    /// is false (it may not be joined), or when it would be replaced (`replacing`) under
    /// another holder.
    pub fn may_use(&self, op: &str, object: &Object, shared: bool, replacing: bool) -> Result<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        let me = r.profile().driver.as_str();
        let others: Vec<String> = r
            .all
            .owners
            .holders(object)
            .into_iter()
            .filter(|h| h != me)
            .collect();
        if others.is_empty() || (shared && !replacing) {
            return Ok(());
        }
        Err(r.denied(
            op,
            object,
            format!(
                "it is held by profile(s) {}{}",
                quoted(&others),
                if replacing {
                    "; it is not replaced under them"
                } else {
                    ""
                }
            ),
        ))
    }

    /// Refuses `op` on `what` when another profile holds `object`: asked before anything else
    /// is weighed, so the refusal names the owner.
    pub fn refuse_held(&self, op: &str, what: &str, object: &Object) -> Result<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        match r.all.owners.holders(object).first() {
            Some(owner) if *owner != r.profile().driver => Err(r.denied(
                op,
                what,
                format!("its {object} is profile {owner:?}'s (the first to use it)"),
            )),
            _ => Ok(()),
        }
    }

    /// Makes `object` the profile's when nobody holds it yet (refused as
    /// [`Scope::refuse_held`] when another profile took it meanwhile).
    pub fn take(&self, op: &str, what: &str, object: &Object) -> Result<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        match r.all.owners.claim(object, &r.profile().driver)? {
            None => Ok(()),
            Some(_) => self.refuse_held(op, what, object),
        }
    }

    /// Records that the profile holds `object` (after the host made or joined it).
    pub fn hold(&self, object: &Object) -> Result<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        r.all.owners.add(object, &r.profile().driver)
    }

    /// Gives the profile's hold of `object` back after the host's removal or logout of it
    /// failed: the object is still there, and still the profile's. Logged when the book cannot
    /// be written (the call's own error is what the client needs).
    pub fn hold_again(&self, object: &Object) {
        if let Err(e) = self.hold(object) {
            tracing::warn!("{object}: the hold could not be given back: {e}");
        }
    }

    /// Before a node-wide object is removed or logged out of: the profile must hold it (or
    /// nobody may); its hold is let go, and the answer says whether others still hold it.
    pub fn release(&self, op: &str, object: &Object) -> Result<Release> {
        let Some(r) = &self.0 else {
            return Ok(Release::Last);
        };
        let me = r.profile().driver.as_str();
        let holders = r.all.owners.holders(object);
        if holders.is_empty() {
            return Ok(Release::Last);
        }
        if !holders.iter().any(|h| h == me) {
            return Err(r.denied(
                op,
                object,
                format!("it is held by profile(s) {}", quoted(&holders)),
            ));
        }
        r.all.owners.remove(object, me)?;
        let others: Vec<String> = holders.into_iter().filter(|h| h != me).collect();
        Ok(if others.is_empty() {
            Release::Last
        } else {
            Release::KeptFor(others)
        })
    }

    /// Whether the profile may see `object` in a listing: it holds it, or there are no
    /// profiles.
    pub fn sees(&self, object: &Object) -> bool {
        match &self.0 {
            None => true,
            Some(r) => r
                .all
                .owners
                .holders(object)
                .iter()
                .any(|h| *h == r.profile().driver),
        }
    }

    /// Whether the call runs under a profile (the node-wide settings are then refused).
    pub fn is_restricted(&self) -> bool {
        self.0.is_some()
    }

    /// Refuses a node-wide setting (one every driver's objects depend on) to a profile.
    pub fn check_node_wide(&self, op: &str, object: &str, why: &str) -> Result<()> {
        match &self.0 {
            None => Ok(()),
            Some(r) => Err(r.denied(op, object, why)),
        }
    }
}

/// `"a", "b"`.
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a path in driver `driver`'s plugin directory is not this profile's.
fn owned_by(all: &Profiles, comps: &[&str], area: &Area, driver: &str) -> String {
    match all.by_place(comps, area) {
        Some(i) => format!("it is among profile {:?}'s paths", all.list[i].driver),
        None => format!("it is driver {driver:?}'s plugin directory, and no profile serves it"),
    }
}
