//! Where a path lies under the kubelet path, as far as profiles care: whose plugin directory,
//! which per-volume directory kubelet made (and where its record of the volume's driver is),
//! or a directory kubelet keeps for everyone. Purely lexical: paths arrive normalised.

use crate::paths::PathStyle;

/// What part of the kubelet path a path is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Area<'a> {
    /// Driver `.0`'s plugin directory (`plugins/<driver>/…`, `plugins/kubernetes.io/csi/
    /// <driver>/…`): the driver's by its name.
    Plugin(&'a str),
    /// A per-volume directory kubelet made, claimable by the driver its record names.
    Claim(Claim),
    /// A directory kubelet keeps for every driver and pod, or anything else under the kubelet
    /// path.
    Shared,
    /// Not under the kubelet path.
    Outside,
}

/// A per-volume directory and where kubelet's record of the volume's driver lies in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The directory, rendered.
    pub dir: String,
    /// The record, as components below `dir`.
    pub record: Vec<&'static str>,
}

impl Claim {
    /// The key the claim is kept under (case-folded on Windows, where the same directory has
    /// many spellings).
    pub fn key(&self, style: PathStyle) -> String {
        match style {
            PathStyle::Posix => self.dir.clone(),
            PathStyle::Windows => self.dir.to_ascii_lowercase(),
        }
    }
}

/// kubelet's per-volume record file.
const VOL_DATA: &str = "vol_data.json";

/// The components of an absolute normalised path (Windows: drive first), `None` if it is not
/// one. Lenient only where normalised paths never differ (the separator).
pub fn components(style: PathStyle, path: &str) -> Option<Vec<String>> {
    match style {
        PathStyle::Posix => {
            let rest = path.strip_prefix('/')?;
            Some(
                rest.split('/')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        }
        PathStyle::Windows => {
            let b = path.as_bytes();
            if b.len() < 2 || !b[0].is_ascii_alphabetic() || b[1] != b':' {
                return None;
            }
            let mut out = vec![path[..2].to_ascii_uppercase()];
            out.extend(
                path[2..]
                    .split(['\\', '/'])
                    .filter(|c| !c.is_empty())
                    .map(str::to_string),
            );
            Some(out)
        }
    }
}

/// Renders components as the path policy does.
fn render(style: PathStyle, comps: &[&str]) -> String {
    match style {
        PathStyle::Posix => format!("/{}", comps.join("/")),
        PathStyle::Windows => match comps.split_first() {
            Some((drive, rest)) => format!("{drive}\\{}", rest.join("\\")),
            None => String::new(),
        },
    }
}

/// Where `comps` lies below the kubelet path `kubelet` (components).
///
/// The layouts (all below the kubelet path):
/// - `plugins/<driver>/…` and `plugins/kubernetes.io/csi/<driver>/…`: the driver's own
///   (staging at `plugins/kubernetes.io/csi/<driver>/<hash>/globalmount`);
/// - `plugins/kubernetes.io/csi/pv/<pv>/…`: older kubelets' staging directory, record
///   `vol_data.json` inside it;
/// - `plugins/kubernetes.io/csi/volumeDevices/{staging,publish,}/<pv>/…`: a block volume's,
///   record `volumeDevices/<pv>/data/vol_data.json`;
/// - `pods/<uid>/volumes/kubernetes.io~csi/<pv>/…`: a pod's publish target, record
///   `vol_data.json` beside the target `mount`.
pub fn classify<'a>(style: PathStyle, kubelet: &[String], comps: &'a [&'a str]) -> Area<'a> {
    if !style.starts_with(comps, kubelet) {
        return Area::Outside;
    }
    let base = kubelet.len();
    let below = &comps[base..];
    let is = |i: usize, name: &str| below.get(i).is_some_and(|c| style.same(c, name));
    let claim = |len: usize, record: Vec<&'static str>| {
        Area::Claim(Claim {
            dir: render(style, &comps[..base + len]),
            record,
        })
    };
    if !is(0, "plugins") && !is(0, "pods") {
        return Area::Shared;
    }
    if is(0, "pods") {
        // pods/<uid>/volumes/kubernetes.io~csi/<pv>/…
        if below.len() >= 5 && is(2, "volumes") && is(3, "kubernetes.io~csi") {
            return claim(5, vec![VOL_DATA]);
        }
        return Area::Shared;
    }
    // plugins/…
    let Some(second) = below.get(1) else {
        return Area::Shared;
    };
    if !style.same(second, "kubernetes.io") {
        return Area::Plugin(second);
    }
    if !is(2, "csi") {
        return Area::Shared;
    }
    let Some(fourth) = below.get(3) else {
        return Area::Shared;
    };
    if style.same(fourth, "pv") {
        return if below.len() >= 5 {
            claim(5, vec![VOL_DATA])
        } else {
            Area::Shared
        };
    }
    if style.same(fourth, "volumeDevices") {
        // volumeDevices/<pv>/… (the record under data/), or volumeDevices/{staging,publish}/<pv>/…
        let at = match below.get(4) {
            Some(c) if style.same(c, "staging") || style.same(c, "publish") => 5,
            Some(_) => 4,
            None => return Area::Shared,
        };
        let Some(pv) = below.get(at) else {
            return Area::Shared;
        };
        let mut dir: Vec<&str> = comps[..base + 4].to_vec();
        dir.push(pv);
        return Area::Claim(Claim {
            dir: render(style, &dir),
            record: vec!["data", VOL_DATA],
        });
    }
    Area::Plugin(fourth)
}
