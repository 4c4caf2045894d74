//! Path confinement: every path argument must lie inside `--kubelet-path` or a `--working-dir`.
//!
//! Upstream only did a case-insensitive string-prefix test (so `…\kubelet-evil` passed, an empty
//! `--kubelet-path` allowed everything, and any link below a root led anywhere). Here a path is
//! accepted in two layers:
//!
//! 1. [`PathPolicy::check`] is lexical: the path must be well formed for its [`PathStyle`] and lie
//!    component-wise inside a root. Malformed input is [`Kind::InvalidArgument`]; a well-formed path
//!    outside every root is [`Kind::PermissionDenied`]. It returns the normalised path, which is what
//!    the host must operate on.
//! 2. [`PathPolicy::confine`] and [`PathPolicy::confine_following`] also walk the existing components
//!    below the root, asking a [`LinkProbe`] about each, so no existing link or mount point leads out.
//!
//! Choices worth knowing (each is argued where it is implemented):
//! - Length limits: POSIX paths are at most [`POSIX_MAX_PATH_BYTES`] (4095) bytes, because Linux's
//!   `PATH_MAX` of 4096 counts the terminating NUL. Windows paths are at most
//!   [`WINDOWS_MAX_PATH_UNITS`] (32,763) UTF-16 units, so the `\\?\`-prefixed form the host builds
//!   stays within Windows' 32,767. Components: 255 bytes / 255 UTF-16 units.
//! - Windows: repeated `\` and a trailing `\` are normalised away (upstream accepts doubled
//!   separators and drivers join paths sloppily); a `.` component is refused (it ends in `.`, and
//!   upstream's own `RemoveAll` refuses such paths). Case-insensitive comparison folds ASCII only:
//!   it never calls two names equal that NTFS keeps apart (NTFS's upcase table varies by volume and
//!   Unicode-aware folding would, for example, equate the Kelvin sign with `k`); a non-ASCII root
//!   spelled in another case is therefore refused, never wrongly accepted.
//! - Link targets are resolved the way the kernel does (each `..` goes to the parent of the place
//!   reached so far, after earlier links were followed), not by lexically normalising the target
//!   text: lexical normalisation of `s/../../x` where `s` is itself a link would skip `s` and let a
//!   path escape on Linux. Windows evaluates `..` in relative link targets textually, so there a
//!   `..` that would step back out of a followed link or a mounted volume is refused, because the two
//!   readings disagree.
//! - A mounted [`LinkTarget::Volume`] is allowed, and probing continues inside it: a volume's contents
//!   may be written by a pod, and a link in it to `/etc` must not be followed.
//! - A missing component (or one below a plain file) ends probing: nothing further exists.

mod lexical;
#[cfg(test)]
mod tests;
mod walk;

pub use lexical::is_drive_root;
#[cfg(test)]
use lexical::parse_target;
use lexical::{posix_lexical, windows_lexical};
pub use walk::{Beneath, Found, Held, Mode, Reached, Walk, Walker, names_nothing};

use crate::error::{Error, Kind, Result};
use std::io;

/// Longest accepted POSIX path in bytes: Linux's `PATH_MAX` (4096) includes the terminating NUL.
pub const POSIX_MAX_PATH_BYTES: usize = 4095;

/// Longest accepted Windows path in UTF-16 units: 32,767 minus the `\\?\` prefix the host adds.
pub const WINDOWS_MAX_PATH_UNITS: usize = 32_767 - 4;

/// Longest accepted path component: 255 bytes (POSIX `NAME_MAX`) or 255 UTF-16 units (NTFS).
pub const MAX_COMPONENT_LEN: usize = 255;

/// How many links one path may pass through before it is refused (Linux's `MAXSYMLINKS`).
pub const MAX_LINK_HOPS: usize = 40;

/// The directories below `--kubelet-path` that kubelet keeps for every driver and pod (`*`:
/// any one component), in components. Drivers stage at
/// `plugins/kubernetes.io/csi/<driver>/<hash>/globalmount` (older kubelets:
/// `plugins/kubernetes.io/csi/pv/<pv>/globalmount`) and publish at
/// `pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount` (block volumes below `volumeDevices`),
/// always deeper than these.
pub const KUBELET_SHARED: &[&[&str]] = &[
    &["plugins"],
    &["plugins", "kubernetes.io"],
    &["plugins", "kubernetes.io", "csi"],
    &["plugins", "kubernetes.io", "csi", "pv"],
    &["plugins", "kubernetes.io", "csi", "volumeDevices"],
    &[
        "plugins",
        "kubernetes.io",
        "csi",
        "volumeDevices",
        "staging",
    ],
    &[
        "plugins",
        "kubernetes.io",
        "csi",
        "volumeDevices",
        "publish",
    ],
    &["plugins_registry"],
    &["pods"],
    &["pods", "*"],
    &["pods", "*", "volumes"],
    &["pods", "*", "volumes", "*"],
    &["pods", "*", "volumeDevices"],
    &["pods", "*", "volumeDevices", "*"],
];

/// Which path syntax the policy checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStyle {
    /// `/var/lib/kubelet/...`
    Posix,
    /// `C:\var\lib\kubelet\...`
    Windows,
}

impl PathStyle {
    /// The style of the platform this binary was built for.
    pub const fn native() -> Self {
        if cfg!(windows) {
            PathStyle::Windows
        } else {
            PathStyle::Posix
        }
    }

    /// How many leading components name the filesystem root: none on POSIX, the drive on Windows.
    fn base(self) -> usize {
        match self {
            PathStyle::Posix => 0,
            PathStyle::Windows => 1,
        }
    }

    /// Component equality: exact on POSIX, ASCII case-insensitive on Windows (see module docs).
    pub(crate) fn same(self, a: &str, b: &str) -> bool {
        match self {
            PathStyle::Posix => a == b,
            PathStyle::Windows => a.eq_ignore_ascii_case(b),
        }
    }

    /// Whether `prefix` is a component-wise prefix of `path` (equal counts).
    pub(crate) fn starts_with<A: AsRef<str>, B: AsRef<str>>(
        self,
        path: &[A],
        prefix: &[B],
    ) -> bool {
        path.len() >= prefix.len()
            && path
                .iter()
                .zip(prefix)
                .all(|(a, b)| self.same(a.as_ref(), b.as_ref()))
    }

    /// Renders absolute components: POSIX `/a/b`; Windows `C:\a\b` (the first component is the
    /// drive, and the drive alone renders as `C:\`).
    fn render<S: AsRef<str>>(self, comps: &[S]) -> String {
        match self {
            PathStyle::Posix => {
                let mut s = String::new();
                for c in comps {
                    s.push('/');
                    s.push_str(c.as_ref());
                }
                if s.is_empty() {
                    s.push('/');
                }
                s
            }
            PathStyle::Windows => {
                let Some((drive, rest)) = comps.split_first() else {
                    return String::new();
                };
                let mut s = drive.as_ref().to_string();
                s.push('\\');
                for (i, c) in rest.iter().enumerate() {
                    if i > 0 {
                        s.push('\\');
                    }
                    s.push_str(c.as_ref());
                }
                s
            }
        }
    }

    /// Splits a client path into normalised components, or says why it is malformed.
    fn lexical(self, path: &str) -> std::result::Result<Vec<&str>, String> {
        match self {
            PathStyle::Posix => posix_lexical(path),
            PathStyle::Windows => windows_lexical(path),
        }
    }
}

/// What a path component that is a link or mount point leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkTarget {
    /// A symlink or junction to this path (absolute, or relative to the link's parent).
    Path(String),
    /// A whole volume/filesystem mounted here (its contents are the volume: allowed).
    Volume,
    /// Leads somewhere that cannot be proven to stay inside a root (denied).
    Foreign(String),
}

/// Tells the policy what an existing path component is; implemented by each host.
pub trait LinkProbe {
    /// `Ok(None)` for a plain file/dir or a missing path; `Ok(Some(..))` for a link or mount point.
    /// A `NotFound` (or `NotADirectory`) error is also read as "nothing further exists".
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>>;
}

/// The allowed roots and the rules to check paths against them.
#[derive(Debug, Clone)]
pub struct PathPolicy {
    style: PathStyle,
    /// Normalised roots, as rendered for callers and messages.
    roots: Vec<String>,
    /// The same roots split into components (Windows: drive first).
    root_comps: Vec<Vec<String>>,
    /// Whose rights the paths are judged by: everything, or one profile's places within the
    /// roots ([`crate::profiles`]).
    scope: crate::profiles::Scope,
}

/// Where a location stands relative to the roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A root itself or one of its ancestors: chosen by the admin, never probed.
    OnRootPath,
    /// Strictly inside a root (and not on the way to a deeper root): probed.
    Below,
    /// Neither: a link led here.
    Outside,
}

/// Where a parsed link target starts.
#[derive(Debug, PartialEq, Eq)]
enum Start<'a> {
    /// At the link's parent directory.
    Relative,
    /// At the POSIX filesystem root.
    Root,
    /// At the root of this Windows drive (`C:`).
    Drive(&'a str),
}

impl PathPolicy {
    /// A policy over `working_dirs` then `kubelet_path` (upstream's order).
    ///
    /// Each root must pass the lexical rules of `style` and must not be the filesystem root
    /// (upstream's empty `--kubelet-path` silently allowed every path); roots are stored normalised.
    pub fn new(style: PathStyle, kubelet_path: &str, working_dirs: &[String]) -> Result<Self> {
        let named = working_dirs
            .iter()
            .map(|d| ("--working-dir", d.as_str()))
            .chain(std::iter::once(("--kubelet-path", kubelet_path)));
        let mut roots = Vec::new();
        let mut root_comps = Vec::new();
        for (flag, dir) in named {
            let comps = style
                .lexical(dir)
                .map_err(|why| Error::invalid(flag, shown(dir), why))?;
            if comps.len() <= style.base() {
                return Err(Error::invalid(
                    flag,
                    shown(dir),
                    "the filesystem root cannot be an allowed root (it would allow every path)",
                ));
            }
            roots.push(style.render(&comps));
            root_comps.push(comps.iter().map(|c| c.to_string()).collect());
        }
        Ok(Self {
            style,
            roots,
            root_comps,
            scope: crate::profiles::Scope::all(),
        })
    }

    /// The same roots, judged for `scope`: a path must also be one of its profile's places.
    pub fn with_scope(&self, scope: crate::profiles::Scope) -> Self {
        Self {
            scope,
            ..self.clone()
        }
    }

    /// Whose rights paths are judged by.
    pub fn scope(&self) -> &crate::profiles::Scope {
        &self.scope
    }

    /// A policy whose one root is the filesystem root (every drive on Windows): for host tests
    /// that walk arbitrary paths; never for serving requests (see [`PathPolicy::new`]).
    #[cfg(any(test, feature = "testing"))]
    pub fn unconfined(style: PathStyle) -> Self {
        let root_comps: Vec<Vec<String>> = match style {
            PathStyle::Posix => vec![Vec::new()],
            PathStyle::Windows => (b'A'..=b'Z')
                .map(|d| vec![format!("{}:", d as char)])
                .collect(),
        };
        Self {
            style,
            roots: root_comps.iter().map(|r| style.render(r)).collect(),
            root_comps,
            scope: crate::profiles::Scope::all(),
        }
    }

    /// The path syntax this policy checks.
    pub fn style(&self) -> PathStyle {
        self.style
    }

    /// The normalised roots: working dirs in order, then the kubelet path.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }

    /// Lexical checks only; returns the normalised path.
    pub fn check(&self, op: &str, path: &str) -> Result<String> {
        let path = self.qualified(path);
        let (comps, _) = self.lexical_inside(op, &path)?;
        Ok(self.style.render(&comps))
    }

    /// A Windows path rooted without a drive (`\var\lib\kubelet\…`, the form kubelet hands
    /// drivers as the staging path, and which some drivers pass on unchanged) given the drive of
    /// `--kubelet-path`: Win32 resolves such a path against the process's current drive, and the
    /// drive kubelet's own directory is on is the one kubelet meant. UNC and namespace forms
    /// (`\\…`) are left for the lexical rules to refuse.
    fn qualified<'p>(&self, path: &'p str) -> std::borrow::Cow<'p, str> {
        match (self.style, self.root_comps.last()) {
            (PathStyle::Windows, Some(kubelet))
                if path.starts_with('\\')
                    && !path.starts_with(r"\\")
                    && !path.starts_with(r"\??\") =>
            {
                std::borrow::Cow::Owned(format!("{}{path}", kubelet[0]))
            }
            _ => std::borrow::Cow::Borrowed(path),
        }
    }

    /// Whether a normalised path is one of the roots itself.
    ///
    /// Used to protect roots from removal, so it errs towards "yes": it also resolves `.`, `..`,
    /// repeated separators and (Windows) `/`, trailing dots/spaces and a `\\?\` or `\??\` prefix.
    pub fn is_root(&self, normalized: &str) -> bool {
        let Some(comps) = self.loose_components(normalized) else {
            return false;
        };
        self.root_comps
            .iter()
            .any(|r| r.len() == comps.len() && self.style.starts_with(&comps, r))
    }

    /// Whether a normalised path is a directory every client's paths may lie under: an allowed
    /// root itself, or one kubelet keeps below its root for all drivers and pods
    /// ([`KUBELET_SHARED`]). Such a directory is never a mount target (the lock order,
    /// [`crate::locks`]): whoever changes it holds every path below it. Leans to "yes" as
    /// [`PathPolicy::is_root`] does.
    pub fn is_shared(&self, normalized: &str) -> bool {
        let Some(comps) = self.loose_components(normalized) else {
            return false;
        };
        if self.is_root(normalized) {
            return true;
        }
        let Some(kubelet) = self.root_comps.last() else {
            return false;
        };
        if !self.style.starts_with(&comps, kubelet) {
            return false;
        }
        let below = &comps[kubelet.len()..];
        KUBELET_SHARED.iter().any(|pattern| {
            pattern.len() == below.len()
                && pattern
                    .iter()
                    .zip(below)
                    .all(|(p, c)| *p == "*" || self.style.same(p, c))
        })
    }

    /// Lexical checks plus no escape through an existing link or mount point in an intermediate
    /// component; the final component is not followed. Returns the normalised path.
    pub fn confine(&self, op: &str, path: &str, probe: &dyn LinkProbe) -> Result<String> {
        self.walk_probe(op, path, false, probe)
            .map(|(normalised, _)| normalised)
    }

    /// As [`PathPolicy::confine`], but also follows a link at the final component (for operations
    /// that act on what the path leads to, such as emptying a directory). Returns the resolved
    /// path; callers protecting roots should test that with [`PathPolicy::is_root`].
    pub fn confine_following(&self, op: &str, path: &str, probe: &dyn LinkProbe) -> Result<String> {
        self.walk_probe(op, path, true, probe)
            .map(|(_, resolved)| resolved)
    }

    /// The lexical check: normalised components and how many of them are the deepest matching root.
    ///
    /// Under a profile the path must also be one of its places: every path argument passes
    /// here before anything is asked of a host.
    fn lexical_inside<'p>(&self, op: &str, path: &'p str) -> Result<(Vec<&'p str>, usize)> {
        let (comps, root) = self.lexical_root(op, path)?;
        let root_len = self.root_comps.get(root).map_or(0, Vec::len);
        if self.scope.is_restricted() {
            self.admit(op, &self.style.render(&comps))?;
        }
        Ok((comps, root_len))
    }

    /// Under a profile, `path` (normalised, or where a walk's links led) must be one of its
    /// places.
    pub(crate) fn admit(&self, op: &str, path: &str) -> Result<()> {
        if self.scope.is_restricted() {
            self.scope.admit_path(op, path)?;
        }
        Ok(())
    }

    /// As [`PathPolicy::lexical_inside`], with the index of the root the path lies in (in
    /// [`PathPolicy::roots`]) instead of its length.
    fn lexical_root<'p>(&self, op: &str, path: &'p str) -> Result<(Vec<&'p str>, usize)> {
        let comps = self
            .style
            .lexical(path)
            .map_err(|why| Error::invalid(op, shown(path), why))?;
        // The deepest root wins, so that components on the way to an admin-chosen nested root are
        // not probed (the admin chose that root, links and all).
        let root = self
            .root_comps
            .iter()
            .enumerate()
            .filter(|(_, r)| self.style.starts_with(&comps, r))
            .max_by_key(|(_, r)| r.len())
            .map(|(i, _)| i)
            .ok_or_else(|| {
                Error::new(
                    Kind::PermissionDenied,
                    op,
                    shown(path),
                    format!("not within the allowed roots [{}]", self.roots.join(", ")),
                )
            })?;
        Ok((comps, root))
    }

    /// Compares only as many components as the roots have, so deep paths cost no more per step.
    fn place_of_names(&self, loc: &[&str]) -> Place {
        let eq = |e: &&str, r: &String| self.style.same(e, r);
        let mut below = false;
        for r in &self.root_comps {
            if loc.len() <= r.len() {
                if loc.iter().zip(r).all(|(e, r)| eq(e, r)) {
                    return Place::OnRootPath;
                }
            } else {
                below |= r.iter().zip(loc).all(|(r, e)| eq(e, r));
            }
        }
        if below { Place::Below } else { Place::Outside }
    }

    /// A lenient split for [`PathPolicy::is_root`]; `None` if it is not an absolute path at all.
    fn loose_components(&self, p: &str) -> Option<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        match self.style {
            PathStyle::Posix => {
                let rest = p.strip_prefix('/')?;
                for c in rest.split('/') {
                    match c {
                        "" | "." => {}
                        ".." => {
                            out.pop();
                        }
                        _ => out.push(c.to_string()),
                    }
                }
            }
            PathStyle::Windows => {
                let s = [r"\\?\", r"\??\"]
                    .iter()
                    .find_map(|pre| p.strip_prefix(pre))
                    .unwrap_or(p);
                let b = s.as_bytes();
                if b.len() < 2 || !b[0].is_ascii_alphabetic() || b[1] != b':' {
                    return None;
                }
                out.push(s[..2].to_string());
                for c in s[2..].split(['\\', '/']) {
                    match c {
                        "" | "." => {}
                        ".." => {
                            if out.len() > 1 {
                                out.pop();
                            }
                        }
                        // Win32 strips trailing dots and spaces, so `kubelet.` names `kubelet`.
                        _ => {
                            let t = c.trim_end_matches(['.', ' ']);
                            if !t.is_empty() {
                                out.push(t.to_string());
                            }
                        }
                    }
                }
            }
        }
        Some(out)
    }
}

/// `{path:?}`, shortened for absurdly long input so an error message stays readable.
fn shown(path: &str) -> String {
    const LIMIT: usize = 512;
    if path.len() <= LIMIT {
        return format!("{path:?}");
    }
    let head: String = path.chars().take(96).collect();
    format!("{head:?}… ({} bytes)", path.len())
}
