//! A filesystem host driven by path strings, each walked through the host's own handles first
//! as the filesystem service walks request paths: host tests exercise one host operation at a
//! time this way, on any path (the walk is rooted at the filesystem root, with no confinement
//! left to test; the service's tests and the race tests cover that).

use crate::filesystem::FilesystemHost;
use crate::paths::{
    Found, Held, LinkProbe, LinkTarget, Mode, PathPolicy, PathStyle, Reached, Walk,
};
use crate::{Error, Kind};
use std::io;

/// Path-string operations over a [`FilesystemHost`] (see the module docs).
pub struct PathOps<H> {
    host: H,
    policy: PathPolicy,
}

impl<H: FilesystemHost> PathOps<H> {
    /// Operations over `host`, walking paths of `style` from the filesystem root (every drive
    /// from `A:` to `Z:` on Windows).
    pub fn new(host: H, style: PathStyle) -> Self {
        Self {
            host,
            policy: PathPolicy::unconfined(style),
        }
    }

    /// The host itself.
    pub fn host(&self) -> &H {
        &self.host
    }

    fn walk(&self, path: &str, mode: Mode) -> io::Result<Walk<Held>> {
        self.policy
            .walk("test", path, mode, &self.host)
            .map_err(to_io)
    }

    /// The walk's parent and final entry, or NotFound when a directory above it is missing.
    fn entry(&self, path: &str) -> io::Result<(Held, String, Found<Held>)> {
        match self.walk(path, Mode::ENTRY)? {
            Walk::Reached(r) => Ok((r.parent, r.name, r.found)),
            Walk::Absent { .. } => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    /// Whether anything exists at `path`, without following a final link.
    pub fn path_exists(&self, path: &str) -> io::Result<bool> {
        Ok(match self.walk(path, Mode::ENTRY)? {
            Walk::Reached(r) => r.found.exists(),
            Walk::Absent { .. } => false,
        })
    }

    /// Creates `path` and missing parents; an existing directory (or link to one) is success.
    pub fn mkdir_all(&self, path: &str) -> io::Result<()> {
        match self.walk(path, Mode::CREATE)? {
            Walk::Reached(Reached {
                found: Found::Dir(_) | Found::Volume(_),
                ..
            }) => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a directory",
            )),
        }
    }

    /// Removes an empty directory, or a link / mount point itself; fails on a missing path.
    pub fn remove(&self, path: &str) -> io::Result<()> {
        let (parent, name, found) = self.entry(path)?;
        if !found.exists() {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        drop(found);
        self.host.remove(&parent, &name)
    }

    /// Removes `path` recursively without following links; a missing path is success.
    pub fn remove_all(&self, path: &str) -> io::Result<()> {
        match self.entry(path) {
            Ok((parent, name, found)) => {
                drop(found);
                self.host.remove_all(&parent, &name)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Empties the directory `path` (a final link is not followed: refused).
    pub fn remove_contents(&self, path: &str) -> io::Result<()> {
        match self.entry(path)?.2 {
            Found::Dir(dir) | Found::Volume(dir) => self.host.remove_contents(&dir),
            Found::Missing => Err(io::Error::from(io::ErrorKind::NotFound)),
            Found::Link(_) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a link; its target is not emptied through it",
            )),
            Found::Other | Found::Foreign(_) => Err(io::Error::from(io::ErrorKind::NotADirectory)),
        }
    }

    /// Creates a link at `link` pointing to `target`; fails if `link` exists.
    pub fn create_symlink(&self, target: &str, link: &str) -> io::Result<()> {
        let (parent, name, found) = self.entry(link)?;
        if found.exists() {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        self.host.create_symlink(&parent, &name, target)
    }

    /// True for a link / mount point whose target exists; an error for a missing path.
    pub fn is_symlink(&self, path: &str) -> io::Result<bool> {
        let (parent, name, found) = self.entry(path)?;
        if !found.exists() {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        drop(found);
        self.host.is_symlink(&parent, &name)
    }
}

impl<H: LinkProbe> LinkProbe for PathOps<H> {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        self.host.link_target(path)
    }
}

/// A walk's refusal as the io error a host test expects.
fn to_io(e: Error) -> io::Error {
    let kind = match e.kind() {
        Kind::NotFound => io::ErrorKind::NotFound,
        Kind::AlreadyExists => io::ErrorKind::AlreadyExists,
        Kind::PermissionDenied => io::ErrorKind::PermissionDenied,
        Kind::InvalidArgument => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e.message().to_string())
}
