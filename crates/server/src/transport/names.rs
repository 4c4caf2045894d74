//! The names the daemon's endpoints are reached by, bound fresh or (a hand-off) beside and then
//! renamed over, and removed at exit only while they are still this daemon's.

use std::io;

/// One endpoint's name as this daemon made it.
#[derive(Debug)]
pub struct Owned {
    /// The socket path or pipe name clients use.
    pub name: String,
    /// Where the socket is bound until renamed over `name` (a take-over), else `None`.
    #[cfg(unix)]
    beside: Option<std::path::PathBuf>,
    /// Device and inode of the socket this daemon bound.
    #[cfg(unix)]
    id: (u64, u64),
}

/// Binds the socket for path `name`, at it or (`beside`) beside it.
#[cfg(unix)]
pub fn bind_unix(
    name: &str,
    gid: Option<u32>,
    beside: bool,
) -> io::Result<(tokio::net::UnixListener, Owned)> {
    use crate::transport::unix;
    let path = std::path::Path::new(name);
    let (listener, beside) = if beside {
        let (l, at) = unix::bind_beside(path, gid)?;
        (l, Some(at))
    } else {
        (unix::bind(path, gid)?, None)
    };
    let at = beside.as_deref().unwrap_or(path);
    let id = match unix::identity(at) {
        Ok(id) => id,
        Err(e) => {
            let _ = std::fs::remove_file(at);
            return Err(e);
        }
    };
    let owned = Owned {
        name: name.to_string(),
        beside,
        id,
    };
    Ok((listener, owned))
}

/// Pipes: a take-over is the lead's to wire (the new instances are created under the same
/// names before the old daemon stops creating them); until then it is refused.
#[cfg(windows)]
pub fn pipe_names(beside: bool) -> io::Result<()> {
    if beside {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "--take-over is not yet supported for named pipes on Windows",
        ));
    }
    Ok(())
}

impl Owned {
    /// A pipe name (nothing to remove at exit: a pipe vanishes with its last handle).
    #[cfg(windows)]
    pub fn pipe(name: &str) -> Owned {
        Owned {
            name: name.to_string(),
        }
    }

    /// Removes the socket file if it still names the socket this daemon bound: after a
    /// hand-off the path names the next daemon's socket, and a daemon started meanwhile may
    /// have bound there; neither is removed. (A take-over renaming over the path between the
    /// check and the removal would lose its name: that needs a `--take-over` started in the
    /// microseconds in which a daemon stopped by a signal cleans up; a hand-off's own stop
    /// comes after the renames.)
    pub fn remove_if_ours(&self) {
        #[cfg(unix)]
        {
            let at = self
                .beside
                .as_deref()
                .unwrap_or(std::path::Path::new(&self.name));
            match crate::transport::unix::remove_if_ours(at, self.id) {
                Ok(true) => {}
                Ok(false) => tracing::info!(
                    socket = %at.display(),
                    "left in place: it names another daemon's socket now"
                ),
                Err(e) => tracing::warn!(socket = %at.display(), "cannot remove socket: {e}"),
            }
        }
    }
}

/// Renames every socket bound beside its path over the path, in order. On a failure the
/// sockets not yet renamed are removed (their paths stay the serving daemon's: every path is
/// served by somebody) and the error names the path; the ones renamed stay this daemon's.
pub fn rename_all(owned: &mut [Owned]) -> Result<(), String> {
    #[cfg(unix)]
    for i in 0..owned.len() {
        let Some(from) = owned[i].beside.clone() else {
            continue;
        };
        let to = std::path::Path::new(&owned[i].name);
        if let Err(e) = crate::transport::unix::rename_over(&from, to) {
            for later in &mut owned[i..] {
                if let Some(b) = later.beside.take() {
                    let _ = crate::transport::unix::remove_if_ours(&b, later.id);
                }
                // Not bound at its name: never removed at exit either.
                later.id = (u64::MAX, u64::MAX);
            }
            return Err(format!(
                "{e}; {} of {} endpoints were taken over, the others stay with the serving daemon",
                i,
                owned.len()
            ));
        }
        owned[i].beside = None;
    }
    #[cfg(windows)]
    let _ = owned;
    Ok(())
}
