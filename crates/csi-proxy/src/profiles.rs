//! `--profiles`: one set of endpoints per driver, every call on them judged by that driver's
//! profile ([`csi_proxy_core::profiles`]); the owners book lives in the state directory, so
//! claims and holds survive restarts and hand-offs.

use crate::flags::Flags;
use csi_proxy_core::filesystem::VolDataFromHost;
use csi_proxy_core::paths::PathStyle;
use csi_proxy_core::profiles::Profiles;
use csi_proxy_core::profiles::owners::{Object, Owners};
use csi_proxy_host::profiles_file::{self, StateDirBook};
use csi_proxy_server::daemon::{Endpoint, Place};
use csi_proxy_server::registry::{self, Services};
use std::path::Path;
use std::sync::Arc;

/// Every profile's endpoints, named at its own place, over `services` (the daemon's, whose
/// hosts, locks and caches all profiles share), and the owners book they share. Errors name
/// the file and what is wrong.
pub fn endpoints(
    services: &Services,
    flags: &Flags,
    file: &str,
    state: &Path,
) -> Result<(Vec<Endpoint>, Arc<Owners>), String> {
    let specs = profiles_file::read(Path::new(file))?;
    #[cfg(unix)]
    for spec in &specs {
        let dir = Path::new(&spec.place);
        if dir.starts_with(state) || state.starts_with(dir) {
            return Err(format!(
                "--profiles {file}: profile {:?}: socket_dir {:?} overlaps --state-dir {:?}, \
                 which no client may reach",
                spec.profile.driver,
                spec.place,
                state.display()
            ));
        }
    }
    let owners = Owners::load(Box::new(StateDirBook::new(state))).map_err(|e| e.to_string())?;
    // A claimed directory kubelet removed since (its pod gone, its volume unstaged) is nobody's
    // any more: a later volume of the same name (older kubelets name the directory by the PV)
    // may be another driver's.
    let gone = owners
        .retain(|o| match o {
            Object::Dir(dir) => Path::new(dir).symlink_metadata().is_ok(),
            _ => true,
        })
        .map_err(|e| e.to_string())?;
    if gone > 0 {
        tracing::info!(
            gone,
            "profiles: claims of directories that no longer exist let go"
        );
    }
    let policy = services.filesystem.policy();
    let kubelet = policy.roots().last().cloned().unwrap_or_default();
    let owners = Arc::new(owners);
    let profiles = Profiles::new(
        PathStyle::native(),
        &kubelet,
        policy,
        specs.iter().map(|s| s.profile.clone()).collect(),
        owners.clone(),
    )
    .map_err(|e| format!("--profiles {file}: {e}"))?;
    let reader = Arc::new(VolDataFromHost::new(&services.filesystem));
    let mut out = Vec::with_capacity(specs.len() * 23);
    for spec in &specs {
        let driver = &spec.profile.driver;
        let scope = profiles
            .scope(driver, reader.clone())
            .ok_or_else(|| format!("--profiles {file}: profile {driver:?} vanished"))?;
        let place = place_of(&spec.place, flags);
        tracing::info!(
            profile = %driver,
            at = %spec.place,
            groups = ?spec.profile.groups.iter().map(|g| g.as_str()).collect::<Vec<_>>(),
            paths = ?spec.profile.paths,
            "serving a profile"
        );
        out.extend(registry::endpoints_at(&services.scoped(scope), &place));
    }
    Ok((out, owners))
}

/// A profile's place: the daemon's default one when it names it (the default socket directory,
/// or upstream's pipe prefix `csi-proxy`: how a driver that cannot have its endpoints renamed,
/// a HostProcess container's, gets a profile), its own otherwise.
fn place_of(place: &str, flags: &Flags) -> Place {
    #[cfg(unix)]
    {
        if Path::new(place) == Path::new(&flags.socket_dir) {
            Place::Default
        } else {
            Place::Dir(place.into())
        }
    }
    #[cfg(windows)]
    {
        let _ = flags;
        if place.eq_ignore_ascii_case("csi-proxy") {
            Place::Default
        } else {
            Place::Prefix(place.to_string())
        }
    }
}
