//! Unix-socket endpoints: `<socket-dir>/csi-proxy-<group>-<version>.sock`.
//!
//! A socket file left by a crashed daemon is replaced; one held by a live daemon is never stolen.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;

/// Mode of every socket: owner and group may connect, nobody else.
pub const SOCKET_MODE: u32 = 0o660;

/// The socket path of one group-version.
pub fn socket_path(dir: &Path, group: &str, version: &str) -> PathBuf {
    dir.join(format!("csi-proxy-{group}-{version}.sock"))
}

/// Binds a listener at `path` with mode 0660 and, if given, owning group `gid`.
///
/// An existing socket file is probed first: if something accepts on it, another daemon is alive
/// and binding fails with `AddrInUse`; if the connection is refused, the file is stale and is
/// replaced. A non-socket file at `path` is never removed.
pub fn bind(path: &Path, gid: Option<u32>) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "socket {} is served by a running process (another csi-proxy?); \
                             stop it first or use another --socket-dir",
                            path.display()
                        ),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    tracing::info!(socket = %path.display(), "replacing stale socket file");
                    std::fs::remove_file(path).or_else(ignore_not_found)?;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("probing existing socket {}: {e}", path.display()),
                    ));
                }
            }
        }
        Ok(_) => {
            return Err(not_a_socket(path));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    bind_restricted(path, gid)
}

/// Binds a listener at `at` (nothing there) and gives the socket file [`restrict`]'s mode and
/// group; on a failure of the latter the file is removed again.
fn bind_restricted(at: &Path, gid: Option<u32>) -> io::Result<UnixListener> {
    let listener = UnixListener::bind(at)
        .map_err(|e| io::Error::new(e.kind(), format!("binding {}: {e}", at.display())))?;
    if let Err(e) = restrict(at, gid) {
        let _ = std::fs::remove_file(at);
        return Err(io::Error::new(
            e.kind(),
            format!("setting owner/mode of {}: {e}", at.display()),
        ));
    }
    Ok(listener)
}

/// The refusal to bind over `path`, which exists and is not a socket.
fn not_a_socket(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} exists and is not a socket; refusing to replace it",
            path.display()
        ),
    )
}

/// Where a daemon taking over binds `path`'s socket before renaming it over `path`:
/// `<dir>/.csi-proxy-<group>-<version>.sock.new`, in the same directory (rename(2) is atomic
/// only within one filesystem).
pub fn beside(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.new"))
}

/// Binds a listener for `path` at [`beside`]`(path)`, restricted as [`bind`] restricts, for a
/// hand-off: `path` itself is left to the serving daemon until [`rename_over`]. A leftover
/// socket at the beside name (a take-over that crashed; only one runs at a time) is replaced;
/// anything else there is refused. `path` must be absent or a socket, so that the rename
/// later cannot replace anything but a socket.
pub fn bind_beside(path: &Path, gid: Option<u32>) -> io::Result<(UnixListener, PathBuf)> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(not_a_socket(path));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let new = beside(path);
    match std::fs::symlink_metadata(&new) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(&new).or_else(ignore_not_found)?;
        }
        Ok(_) => {
            return Err(not_a_socket(&new));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok((bind_restricted(&new, gid)?, new))
}

/// Renames the socket bound at `from` over `to` in one step: every connect() to `to` finds a
/// listening socket, the serving daemon's before, this one's after.
pub fn rename_over(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("renaming {} over {}: {e}", from.display(), to.display()),
        )
    })
}

/// Which file `path` names now (device and inode, the link itself if it is one).
pub fn identity(path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino()))
}

/// Removes `path` at exit if it still names the socket this daemon bound (`ours`, from
/// [`identity`] right after binding): after a hand-off it names the next daemon's socket, and
/// a daemon started meanwhile may have replaced it; neither is ours to remove. Says whether
/// it removed it.
pub fn remove_if_ours(path: &Path, ours: (u64, u64)) -> io::Result<bool> {
    match identity(path) {
        Ok(id) if id == ours => std::fs::remove_file(path)
            .or_else(ignore_not_found)
            .map(|()| true),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the socket file just bound at `path` mode [`SOCKET_MODE`] and group `gid`, acting on
/// the file itself: it is opened with `O_PATH | O_NOFOLLOW` and must be a socket, so a link a
/// client swapped in meanwhile is refused, never followed to what it names.
fn restrict(path: &Path, gid: Option<u32>) -> io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags};
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::Socket {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "it was replaced by something that is not a socket",
        ));
    }
    // chmod has no form taking an O_PATH handle before fchmodat2 (Linux 6.6); the fd's
    // /proc/self/fd entry names the held inode itself (what glibc's fchmodat with
    // AT_SYMLINK_NOFOLLOW does).
    rustix::fs::chmod(
        format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
        Mode::from_raw_mode(SOCKET_MODE),
    )?;
    if let Some(gid) = gid {
        rustix::fs::chownat(&fd, "", None, Some(Gid::from_raw(gid)), AtFlags::EMPTY_PATH)?;
    }
    Ok(())
}

/// Creates the socket directory (mode 0755 if new) when it does not exist.
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("socket dir {} is not a directory", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        }
        Err(e) => Err(e),
    }
}

/// Resolves `--socket-group`: a numeric gid, or a group name looked up in the system's group
/// database (`getgrnam_r` through `nix`), so groups from LDAP or sssd count, not only /etc/group.
pub fn resolve_group(spec: &str) -> io::Result<u32> {
    if let Ok(gid) = spec.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(spec) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "socket group {spec:?} is not a gid and not a group in the system's group database"
            ),
        )),
        Err(errno) => Err(io::Error::new(
            io::Error::from(errno).kind(),
            format!("looking up socket group {spec:?} in the system's group database: {errno}"),
        )),
    }
}

fn ignore_not_found(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_socket_is_replaced_live_one_is_not_stolen() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "disk", "v1");
        assert!(path.ends_with("csi-proxy-disk-v1.sock"));

        // A stale socket: bound once, listener dropped, file left behind.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let live = bind(&path, None).expect("stale socket replaced");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);

        // A live one: the second bind fails clearly and the socket keeps working.
        let err = bind(&path, None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains("another csi-proxy"), "{err}");
        let accept = tokio::spawn(async move { live.accept().await.map(|_| ()) });
        tokio::net::UnixStream::connect(&path).await.unwrap();
        accept.await.unwrap().unwrap();
    }

    /// At exit only our own socket is removed: not the one a take-over renamed over our path,
    /// not one a daemon started after ours bound there; ours, found at its path, is.
    #[test]
    fn only_our_own_socket_is_removed_at_exit() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "disk", "v1");
        let _ours = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let id = identity(&path).unwrap();
        // A take-over: another socket bound beside and renamed over our path.
        let next = beside(&path);
        let _theirs = std::os::unix::net::UnixListener::bind(&next).unwrap();
        rename_over(&next, &path).unwrap();
        assert!(!remove_if_ours(&path, id).unwrap());
        assert!(path.exists(), "the next daemon's socket stays");
        std::os::unix::net::UnixStream::connect(&path).expect("still served");
        // A restarted daemon that removed ours and bound anew: also kept.
        std::fs::remove_file(&path).unwrap();
        let _third = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(!remove_if_ours(&path, id).unwrap());
        assert!(path.exists());
        // Ours is removed; a path that is gone is not an error.
        let id = identity(&path).unwrap();
        assert!(remove_if_ours(&path, id).unwrap());
        assert!(!path.exists());
        assert!(!remove_if_ours(&path, id).unwrap());
    }

    /// A take-over binds beside the path, restricted like the path, never over a non-socket.
    #[test]
    fn a_take_over_binds_beside_and_never_replaces_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _g = rt.enter();
        let path = socket_path(dir.path(), "volume", "v1");
        let (_l, new) = bind_beside(&path, None).unwrap();
        assert_eq!(new, dir.path().join(".csi-proxy-volume-v1.sock.new"));
        let mode = std::fs::metadata(&new).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);
        assert!(!path.exists(), "the path itself is not touched");
        let file = socket_path(dir.path(), "smb", "v1");
        std::fs::write(&file, b"data").unwrap();
        assert_eq!(
            bind_beside(&file, None).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        std::fs::create_dir(beside(&socket_path(dir.path(), "iscsi", "v1"))).unwrap();
        let e = bind_beside(&socket_path(dir.path(), "iscsi", "v1"), None).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"data");
    }

    #[test]
    fn a_regular_file_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "smb", "v1");
        std::fs::write(&path, b"data").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt.block_on(async { bind(&path, None).unwrap_err() });
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }

    /// A link swapped in for the socket between bind and chmod is refused, and what it names
    /// keeps its mode and group.
    #[test]
    fn the_socket_mode_is_never_set_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("csi-proxy-disk-v1.sock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(restrict(&link, Some(4242)).is_err());
        let meta = std::fs::metadata(&victim).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_ne!(std::os::unix::fs::MetadataExt::gid(&meta), 4242);
        // On the socket itself both are set.
        let sock = dir.path().join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        restrict(&sock, Some(4242)).unwrap();
        let meta = std::fs::symlink_metadata(&sock).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, SOCKET_MODE);
        assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), 4242);
    }

    #[test]
    fn groups_resolve_by_number_and_name() {
        assert_eq!(resolve_group("1234").unwrap(), 1234);
        assert_eq!(resolve_group("root").unwrap(), 0);
        // Every group /etc/group lists resolves to its gid through the system's database.
        let listed = std::fs::read_to_string("/etc/group").unwrap();
        let mut n = 0;
        for line in listed.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split(':').collect();
            if let [name, _, gid, ..] = f[..] {
                assert_eq!(
                    resolve_group(name).unwrap(),
                    gid.parse::<u32>().unwrap(),
                    "{line}"
                );
                n += 1;
            }
        }
        assert!(n > 0);
        let err = resolve_group("no-such-group-xyz").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("\"no-such-group-xyz\""), "{err}");
    }
}
