//! The OS calls the Linux SMB host makes, behind a seam: the real kernel here, a fake in the
//! tests (this kernel has no cifs, so the host's logic is tested over the fake).

use super::super::mountinfo::{self, MountInfo};
use rustix::mount::{MountFlags, UnmountFlags};
use std::ffi::CStr;
use std::net::ToSocketAddrs;
use std::path::Path;

/// What the SMB host asks of the OS. Each network step may block for long on a server that
/// does not answer; the host runs them as bounded probes ([`crate::probe`]), so they need not
/// bound themselves.
pub trait CifsOs: Send + Sync {
    /// Why cifs mounts cannot work on this kernel, if they cannot.
    fn cifs_missing(&self) -> Option<String>;
    /// An address of `server` (the kernel client cannot resolve names); blocks while the
    /// name servers do not answer.
    fn resolve(&self, server: &str) -> Option<String>;
    /// `mount(2)` of `source` at `dir`, type cifs, with `flags` and the option string `data`;
    /// blocks while the server does not answer (the kernel's own connect timeouts).
    fn mount(
        &self,
        source: &str,
        dir: &Path,
        flags: MountFlags,
        data: &CStr,
    ) -> Result<(), rustix::io::Errno>;
    /// `umount2(dir, MNT_DETACH)`.
    fn unmount_detach(&self, dir: &Path) -> Result<(), rustix::io::Errno>;
    /// The mount table (`/proc/self/mountinfo`).
    fn mount_table(&self) -> std::io::Result<Vec<MountInfo>>;
    /// Whether the filesystem at `dir` answers `statfs`; the error otherwise (the kernel's
    /// cifs client answers EACCES and its kin when the server refuses the mount's credential
    /// on reconnecting). Blocks while a hard-mounted share's server does not answer.
    fn answers(&self, dir: &Path) -> Result<(), rustix::io::Errno>;
}

/// The real kernel.
pub struct RealCifs;

impl CifsOs for RealCifs {
    fn cifs_missing(&self) -> Option<String> {
        let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        let has = fs
            .lines()
            .any(|l| matches!(l.split_whitespace().last(), Some("cifs" | "smb3")));
        (!has).then(|| {
            "the kernel has no cifs filesystem (not in /proc/filesystems; load module cifs)".into()
        })
    }

    fn resolve(&self, server: &str) -> Option<String> {
        (server, 445u16)
            .to_socket_addrs()
            .ok()?
            .next()
            .map(|a| a.ip().to_string())
    }

    fn mount(
        &self,
        source: &str,
        dir: &Path,
        flags: MountFlags,
        data: &CStr,
    ) -> Result<(), rustix::io::Errno> {
        rustix::mount::mount(source, dir, "cifs", flags, Some(data))
    }

    fn unmount_detach(&self, dir: &Path) -> Result<(), rustix::io::Errno> {
        rustix::mount::unmount(dir, UnmountFlags::DETACH)
    }

    fn mount_table(&self) -> std::io::Result<Vec<MountInfo>> {
        mountinfo::read()
    }

    fn answers(&self, dir: &Path) -> Result<(), rustix::io::Errno> {
        rustix::fs::statfs(dir).map(drop)
    }
}
