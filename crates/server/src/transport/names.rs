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

/// Creates the first instance of pipe `name` or (`beside`, a take-over) a further instance
/// of the pipe the serving daemon still serves: clients reach either from then on, and the
/// new daemon's alone once the old one stops creating instances. Nothing to rename.
#[cfg(windows)]
pub fn bind_pipe(
    name: &str,
    sddl: &str,
    beside: bool,
) -> io::Result<crate::transport::pipe::PipeListener> {
    use crate::transport::pipe::PipeListener;
    if beside {
        PipeListener::bind_beside(name, sddl)
    } else {
        PipeListener::bind(name, sddl)
    }
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A rename that fails part-way leaves every path served by somebody: the ones renamed are
    /// ours (and removed by us at exit), the rest keep what they named (the serving daemon's
    /// sockets; here a directory the rename could not replace) and our sockets bound beside
    /// them are removed, never left in the socket dir.
    #[tokio::test]
    async fn a_rename_failing_part_way_leaves_the_rest_to_the_serving_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let name = |g: &str| {
            crate::transport::unix::socket_path(dir.path(), g, "v1")
                .display()
                .to_string()
        };
        let (a, b, c) = (name("disk"), name("volume"), name("smb"));
        let mut owned = Vec::new();
        let mut listeners = Vec::new();
        for n in [&a, &b, &c] {
            let (l, o) = bind_unix(n, None, true).unwrap();
            listeners.push(l);
            owned.push(o);
        }
        // Between the binds and the renames, the second path became a directory.
        std::fs::create_dir(&b).unwrap();
        let e = rename_all(&mut owned).unwrap_err();
        assert!(e.contains("1 of 3 endpoints") && e.contains(&b), "{e}");
        let meta = std::fs::symlink_metadata(&a).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
        assert!(std::path::Path::new(&b).is_dir());
        assert!(!std::path::Path::new(&c).exists());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".new"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        for o in &owned {
            o.remove_if_ours();
        }
        assert!(
            !std::path::Path::new(&a).exists(),
            "ours is removed at exit"
        );
        assert!(std::path::Path::new(&b).is_dir(), "what is not ours stays");
    }
}
