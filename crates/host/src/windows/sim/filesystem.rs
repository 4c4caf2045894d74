//! The simulated Windows directory tree as the filesystem group's host, so whole driver
//! sequences (Mkdir, MountVolume, CreateSymlink, IsSymlink, Rmdir) run in Windows path forms
//! over one simulated machine. The real Windows filesystem host does not go through the seam
//! yet; this models what Windows does for the same calls:
//! - `RemoveDirectoryW` on a mounted folder removes the mount point with the directory, and on
//!   a directory symbolic link removes the link, never what it leads to;
//! - a directory symbolic link is a reparse point (`IO_REPARSE_TAG_SYMLINK`) whose substitute
//!   name is the NT path `\??\C:\...`.

use super::{SimWindows, State, key, mp_key, parent_key};
use crate::reparse::IO_REPARSE_TAG_SYMLINK;
use csi_proxy_core::filesystem::FilesystemHost;
use csi_proxy_core::paths::{LinkProbe, LinkTarget};
use std::io;

/// Makes `path` and its parents directories.
pub(super) fn mkdir_all(s: &mut State, path: &str) {
    let k = key(path);
    if let Some(parent) = parent_key(&k)
        && !s.dirs.contains_key(&parent)
        && parent.len() > 3
    {
        let text = &path[..parent.len().min(path.len())];
        mkdir_all(s, text);
    }
    s.dirs.entry(k).or_insert_with(|| path.to_string());
}

/// Adds a directory symbolic link at `link` to `target`; fails if something is at `link` or
/// its parent directory is missing.
pub(super) fn add_link(s: &mut State, target: &str, link: &str) -> io::Result<()> {
    if s.exists(link) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{link}: already exists"),
        ));
    }
    let parent = parent_key(&key(link)).unwrap_or_default();
    if parent.len() > 3 && !s.dirs.contains_key(&parent) {
        return Err(not_found(link));
    }
    s.links
        .insert(key(link), (target.to_string(), symlink_data(target)));
    s.link_texts.insert(key(link), link.to_string());
    Ok(())
}

/// The reparse data of a directory symbolic link to the absolute path `target` (a UNC target's
/// NT form is `\??\UNC\server\share\…`).
fn symlink_data(target: &str) -> Vec<u8> {
    let nt = match target.strip_prefix(r"\\") {
        Some(unc) => format!(r"\??\UNC\{unc}"),
        None => format!(r"\??\{target}"),
    };
    let sub: Vec<u8> = nt.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let print: Vec<u8> = target.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let mut data = Vec::new();
    data.extend_from_slice(&0u16.to_le_bytes());
    data.extend_from_slice(&(sub.len() as u16).to_le_bytes());
    data.extend_from_slice(&(sub.len() as u16).to_le_bytes());
    data.extend_from_slice(&(print.len() as u16).to_le_bytes());
    data.extend_from_slice(&0u32.to_le_bytes()); // absolute
    data.extend_from_slice(&sub);
    data.extend_from_slice(&print);
    let mut out = IO_REPARSE_TAG_SYMLINK.to_le_bytes().to_vec();
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&data);
    out
}

fn not_found(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{path}: not found"))
}

/// Removes `k` and everything below it, unlinking links and mount points without entering.
fn remove_tree(s: &mut State, k: &str) {
    let prefix = format!("{}\\", k.trim_end_matches('\\'));
    let below = |c: &String| c == k || c.starts_with(&prefix);
    s.dirs.retain(|c, _| !below(c));
    s.files.retain(|c| !below(c));
    s.links.retain(|c, _| !below(c));
    s.link_texts.retain(|c, _| !below(c));
    s.mount_points
        .retain(|c, _| !(c.trim_end_matches('\\') == k || c.starts_with(&prefix)));
}

impl SimWindows {
    /// Where the link at `path` leads, if it is one.
    fn link_of(&self, path: &str) -> Option<String> {
        self.lock().links.get(&key(path)).map(|(t, _)| t.clone())
    }
}

impl LinkProbe for SimWindows {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        if let Some(t) = self.link_of(path) {
            return Ok(Some(LinkTarget::Path(t)));
        }
        let s = self.lock();
        Ok(s.mount_points
            .contains_key(&mp_key(path))
            .then_some(LinkTarget::Volume)
            .filter(|_| path.trim_end_matches('\\').len() > 2))
    }
}

impl FilesystemHost for SimWindows {
    fn path_exists(&self, path: &str) -> io::Result<bool> {
        Ok(self.lock().exists(path))
    }

    fn mkdir_all(&self, path: &str) -> io::Result<()> {
        let mut s = self.lock();
        let k = key(path);
        if s.files.contains(&k) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{path}: a file exists there"),
            ));
        }
        if s.links.contains_key(&k) || s.mount_points.contains_key(&mp_key(path)) {
            return Ok(());
        }
        mkdir_all(&mut s, path);
        Ok(())
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let mut s = self.lock();
        let k = key(path);
        if s.links.remove(&k).is_some() {
            s.link_texts.remove(&k);
            return Ok(());
        }
        if !s.exists(path) {
            return Err(not_found(path));
        }
        let mounted = s.mount_points.remove(&mp_key(path)).is_some();
        if !mounted && s.has_children(&k) {
            return Err(io::Error::new(
                io::ErrorKind::DirectoryNotEmpty,
                format!("{path}: the directory is not empty"),
            ));
        }
        s.dirs.remove(&k);
        s.files.remove(&k);
        Ok(())
    }

    fn remove_all(&self, path: &str) -> io::Result<()> {
        let mut s = self.lock();
        let k = key(path);
        remove_tree(&mut s, &k);
        Ok(())
    }

    fn remove_contents(&self, path: &str) -> io::Result<()> {
        let mut s = self.lock();
        let k = key(path);
        if !s.dirs.contains_key(&k) {
            return Err(not_found(path));
        }
        let prefix = format!("{}\\", k.trim_end_matches('\\'));
        let children: Vec<String> = s
            .dirs
            .keys()
            .chain(s.files.iter())
            .chain(s.links.keys())
            .filter(|c| c.starts_with(&prefix))
            .cloned()
            .collect();
        for c in children {
            remove_tree(&mut s, &c);
        }
        Ok(())
    }

    fn create_symlink(&self, target: &str, link: &str) -> io::Result<()> {
        add_link(&mut self.lock(), target, link)
    }

    fn is_symlink(&self, path: &str) -> io::Result<bool> {
        // Upstream's rule: a link (or mount point) whose direct target exists.
        if let Some(t) = self.link_of(path) {
            return Ok(self.lock().exists(&t));
        }
        let s = self.lock();
        if !s.exists(path) {
            return Err(not_found(path));
        }
        Ok(s.mount_points.contains_key(&mp_key(path)) && path.trim_end_matches('\\').len() > 2)
    }
}
