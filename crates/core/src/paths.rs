//! Path confinement: every path argument must lie inside `--kubelet-path` or a `--working-dir`.
//!
//! PLACEHOLDER interface; the full rules (design.md §5) are being written.

use crate::error::{Error, Kind, Result};
use std::io;

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
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>>;
}

/// The allowed roots and the rules to check paths against them.
#[derive(Debug, Clone)]
pub struct PathPolicy {
    style: PathStyle,
    roots: Vec<String>,
}

impl PathPolicy {
    /// A policy over `working_dirs` then `kubelet_path` (upstream's order).
    pub fn new(style: PathStyle, kubelet_path: &str, working_dirs: &[String]) -> Result<Self> {
        let mut roots: Vec<String> = working_dirs.to_vec();
        roots.push(kubelet_path.to_string());
        Ok(Self { style, roots })
    }

    /// The path syntax this policy checks.
    pub fn style(&self) -> PathStyle {
        self.style
    }

    /// The normalised roots.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }

    /// Lexical checks only; returns the normalised path.
    pub fn check(&self, op: &str, path: &str) -> Result<String> {
        if path.is_empty() {
            return Err(Error::invalid(op, "\"\"", "path is empty"));
        }
        if !self.roots.iter().any(|r| path.starts_with(r.as_str())) {
            return Err(Error::new(
                Kind::PermissionDenied,
                op,
                format!("{path:?}"),
                "not within the allowed roots",
            ));
        }
        Ok(path.to_string())
    }

    /// Whether a normalised path is one of the roots itself.
    pub fn is_root(&self, normalized: &str) -> bool {
        self.roots.iter().any(|r| r == normalized)
    }

    /// Lexical checks plus no escape through an existing link or mount point.
    pub fn confine(&self, op: &str, path: &str, _probe: &dyn LinkProbe) -> Result<String> {
        self.check(op, path)
    }
}
