//! Listening sockets handed over by systemd (socket activation, `sd_listen_fds(3)`).
//!
//! A `.socket` unit binds the endpoints' sockets and keeps them open across restarts of the
//! service: a client that connects while the daemon restarts waits in the socket's backlog
//! until the new daemon accepts it, instead of being refused and backing off.
//!
//! The protocol: `LISTEN_PID` is this process's pid, `LISTEN_FDS` is n, and the sockets are
//! descriptors 3 to 3+n-1. Each one is matched to an endpoint by the path it is bound to,
//! never by its position or its `FileDescriptorName=`, so the unit may list the sockets in any
//! order. A socket the daemon serves no endpoint for is closed with a warning; an endpoint no
//! socket was passed for is bound by the daemon as usual.
//!
//! Checks: each descriptor must be a listening Unix stream socket bound to a path, and the
//! socket file must not let others connect (write permission for "other" is what `connect(2)`
//! needs), since systemd's default `SocketMode=` is 0666 and whoever may connect may format
//! disks.
#![allow(
    unsafe_code,
    reason = "adopting the descriptors systemd passed (sd_listen_fds) means taking ownership of \
              raw descriptor numbers, which has no safe form"
)]

use std::collections::HashMap;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_FD: i32 = 3;

/// More descriptors than this in `LISTEN_FDS` is not a unit of ours (23 endpoints).
const MAX_FDS: i32 = 256;

/// The sockets passed to this process, by the canonical path they are bound to.
#[derive(Debug, Default)]
pub struct Inherited {
    by_path: HashMap<PathBuf, UnixListener>,
}

/// Taken once per process: a descriptor is adopted by exactly one owner.
static TAKEN: Mutex<bool> = Mutex::new(false);

impl Inherited {
    /// Adopts the sockets systemd passed to this process, on the first call; later calls and
    /// processes started without socket activation get none.
    ///
    /// The variables are left in the environment (removing them is not sound once threads run);
    /// the descriptors are made close-on-exec, so tools the daemon starts get neither a socket
    /// nor, with their own pid, a `LISTEN_PID` that names them.
    pub fn take() -> io::Result<Inherited> {
        let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
        if *taken {
            return Ok(Inherited::default());
        }
        *taken = true;
        let pid = std::env::var("LISTEN_PID").ok();
        let fds = std::env::var("LISTEN_FDS").ok();
        let count = match passed_count(pid.as_deref(), fds.as_deref(), std::process::id())? {
            0 => return Ok(Inherited::default()),
            n => n,
        };
        let mut by_path = HashMap::new();
        for fd in FIRST_FD..FIRST_FD + count {
            // SAFETY: sd_listen_fds(3): when LISTEN_PID names this process, descriptors 3 to
            // 3+LISTEN_FDS-1 are open and passed to it; nothing else in the process owns them,
            // and `TAKEN` makes sure they are adopted once.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let (path, listener) = adopt(owned).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("socket activation: descriptor {fd} passed by systemd: {e}"),
                )
            })?;
            if by_path.insert(path.clone(), listener).is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "socket activation: two descriptors passed by systemd are bound to {}",
                        path.display()
                    ),
                ));
            }
        }
        tracing::info!(
            sockets = by_path.len(),
            "listening sockets passed by systemd"
        );
        Ok(Inherited { by_path })
    }

    /// The passed socket bound to `path`, if any, ready for tokio.
    pub fn listener_for(&mut self, path: &Path) -> io::Result<Option<tokio::net::UnixListener>> {
        if self.by_path.is_empty() {
            return Ok(None);
        }
        // A socket dir that does not exist holds no passed socket.
        let key = match canonical(path) {
            Ok(key) => key,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(l) = self.by_path.remove(&key) else {
            return Ok(None);
        };
        l.set_nonblocking(true)?;
        tokio::net::UnixListener::from_std(l).map(Some)
    }

    /// Closes the passed sockets no endpoint took, naming each in a warning (a `.socket` unit
    /// listing an endpoint this daemon does not serve, or a path that does not match
    /// `--socket-dir`).
    pub fn close_unused(self) {
        for path in self.by_path.into_keys() {
            tracing::warn!(
                socket = %path.display(),
                "systemd passed a socket no endpoint is served on; check ListenStream= against --socket-dir"
            );
        }
    }
}

/// How many descriptors were passed to the process `me`, from `LISTEN_PID` and `LISTEN_FDS`.
fn passed_count(pid: Option<&str>, fds: Option<&str>, me: u32) -> io::Result<i32> {
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(0);
    };
    // Variables meant for another process (a parent that was socket-activated and started us
    // without clearing them) are not ours to act on.
    if pid.trim().parse::<u32>().ok() != Some(me) {
        return Ok(0);
    }
    match fds.trim().parse::<i32>() {
        Ok(n) if (0..=MAX_FDS).contains(&n) => Ok(n),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket activation: LISTEN_FDS={fds:?} is not a count from 0 to {MAX_FDS}"),
        )),
    }
}

/// Checks one passed descriptor and returns the canonical path it is bound to.
fn adopt(fd: OwnedFd) -> io::Result<(PathBuf, UnixListener)> {
    use rustix::net::{SocketType, sockopt};
    let kind = sockopt::socket_type(&fd)
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("not a socket: {e}")))?;
    if kind != SocketType::STREAM || !sockopt::socket_acceptconn(&fd)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a listening stream socket (ListenStream= is what csi-proxy needs)",
        ));
    }
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
    let listener = UnixListener::from(fd);
    let addr = listener
        .local_addr()
        .map_err(|e| io::Error::new(e.kind(), format!("not a Unix socket bound to a path: {e}")))?;
    let Some(path) = addr.as_pathname() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a Unix socket bound to a path (abstract or unnamed)",
        ));
    };
    let mode = std::fs::symlink_metadata(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?
        .permissions()
        .mode();
    if mode & 0o002 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} has mode {:04o}, so every local user may connect; set SocketMode=0660 \
                 (and SocketGroup=) in the .socket unit",
                path.display(),
                mode & 0o7777
            ),
        ));
    }
    Ok((canonical(path)?, listener))
}

/// `path` with its directory resolved, so `/run/x/../csi-proxy/a.sock` and
/// `/run/csi-proxy/a.sock` match; the socket file itself is not followed.
fn canonical(path: &Path) -> io::Result<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(path.to_path_buf());
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Ok(std::fs::canonicalize(dir)?.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_count_only_for_the_process_they_name() {
        assert_eq!(passed_count(None, None, 7).unwrap(), 0);
        assert_eq!(passed_count(Some("7"), None, 7).unwrap(), 0);
        assert_eq!(passed_count(Some("8"), Some("3"), 7).unwrap(), 0);
        assert_eq!(passed_count(Some("7"), Some("23"), 7).unwrap(), 23);
        assert_eq!(passed_count(Some("7"), Some("0"), 7).unwrap(), 0);
        for bad in ["-1", "x", "100000"] {
            let e = passed_count(Some("7"), Some(bad), 7).unwrap_err();
            assert!(e.to_string().contains("LISTEN_FDS"), "{e}");
        }
    }

    #[test]
    fn a_listening_socket_is_adopted_by_its_path_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("csi-proxy-disk-v1.sock");
        let l = UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
        let (p, _) = adopt(OwnedFd::from(l)).unwrap();
        assert_eq!(p, canonical(&path).unwrap());
        // Others may read but not connect (systemd-socket-activate's 0777 & ~umask): adopted.
        let readable = dir.path().join("readable.sock");
        let l = UnixListener::bind(&readable).unwrap();
        std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o755)).unwrap();
        adopt(OwnedFd::from(l)).unwrap();

        // systemd's default mode lets every user in: refused, naming the fix.
        let open = dir.path().join("open.sock");
        let l = UnixListener::bind(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = adopt(OwnedFd::from(l)).unwrap_err();
        assert!(e.to_string().contains("SocketMode=0660"), "{e}");

        // A connected (not listening) socket and a regular file are refused.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = adopt(OwnedFd::from(a)).unwrap_err();
        assert!(
            e.to_string().contains("not a listening stream socket"),
            "{e}"
        );
        let f = std::fs::File::create(dir.path().join("f")).unwrap();
        let e = adopt(OwnedFd::from(f)).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
    }
}
