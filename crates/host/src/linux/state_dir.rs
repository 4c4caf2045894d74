//! The daemon's own state directory (`--state-dir`, `/var/lib/csi-proxy` by default) and the
//! files in it: iSCSI portals and the mutual-CHAP secret, format records, the SMB mount base and
//! its credential key.
//!
//! No client can reach this directory: it is root's, 0700, and never given to a container (the
//! socket directory, which every client container mounts, holds nothing but sockets). Even so,
//! nothing here is reached by a path string that could lead elsewhere: each directory is opened
//! without following a link at its last component, and each file is written through that
//! directory handle under a temporary name created exclusively (`O_CREAT | O_EXCL |
//! O_NOFOLLOW`), flushed, and renamed inside the directory, so a link planted anywhere on the
//! way is refused or replaced, never written through.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Checks the state directory at start-up, creating it (mode 0700) when missing: it must be a
/// real directory (not a link), owned by the daemon's user (root), and writable by no one else.
/// The error says which and what to do.
pub fn prepare(dir: &Path) -> Result<PathBuf, String> {
    if !dir.is_absolute() {
        return Err(format!(
            "--state-dir {:?} must be an absolute path",
            dir.display()
        ));
    }
    open_dir(dir, true).map_err(|e| format!("--state-dir {:?}: {e}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// Opens directory `dir` (creating it with mode 0700, and its missing parents, when `create`)
/// without following a link at its last component, and checks that it is the daemon's and
/// writable by no one else.
pub fn open_dir(dir: &Path, create: bool) -> io::Result<OwnedFd> {
    let (parent, name) = match (dir.parent(), dir.file_name()) {
        (Some(p), Some(n)) => (
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            },
            n,
        ),
        _ => {
            return Err(invalid(format!(
                "{:?} is not a directory name",
                dir.display()
            )));
        }
    };
    // The parents are the operator's (the state directory itself, checked at start-up, and
    // above it); only the last component is ours to make and to check.
    if create {
        std::fs::create_dir_all(parent)?;
    }
    let parent = rustix::fs::open(
        parent,
        OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )?;
    subdir(&parent, name, create)
        .map_err(|e| io::Error::new(e.kind(), format!("directory {:?}: {e}", dir.display())))
}

/// Opens (and, with `create`, makes) directory `name` beneath `parent`, refusing a link, a
/// directory of another user and one others may write to.
fn subdir(parent: impl AsFd, name: &std::ffi::OsStr, create: bool) -> io::Result<OwnedFd> {
    if create {
        match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(refused(
            "is a symbolic link; the state directory must be a real directory",
        ));
    }
    let fd = rustix::fs::openat(
        &parent,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(refused(format!(
            "is owned by uid {}, not by the daemon's user (uid {me}, root); `chown {me}` it",
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(refused(format!(
            "has mode {:o}: group or others may write to it; `chmod 0700` it",
            st.st_mode & 0o7777
        )));
    }
    Ok(fd)
}

/// Writes `bytes` as file `name` of directory `dir` (made 0700 when missing) with `mode`,
/// atomically and durably: a temporary file created exclusively beneath the directory handle,
/// flushed, renamed over `name` within the same directory, and the directory flushed. A link
/// at the temporary name (a crash's leftover or anything planted) is removed, never followed;
/// one at `name` is replaced. Callers serialise writes of the same file.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    file_name_ok(name)?;
    let d = open_dir(dir, true)?;
    let tmp = format!(".{name}.tmp");
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(mode);
    let fd = match rustix::fs::openat(&d, tmp.as_str(), flags, mode) {
        Err(rustix::io::Errno::EXIST) => {
            // unlinkat removes the entry itself, whatever it is or points to.
            rustix::fs::unlinkat(&d, tmp.as_str(), AtFlags::empty())?;
            rustix::fs::openat(&d, tmp.as_str(), flags, mode)?
        }
        r => r?,
    };
    // The mode is given to the new file, whatever the umask made of it.
    rustix::fs::fchmod(&fd, mode)?;
    let mut f = std::fs::File::from(fd);
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&d, tmp.as_str(), AtFlags::empty());
        return Err(e);
    }
    rustix::fs::renameat(&d, tmp.as_str(), &d, name)?;
    rustix::fs::fsync(&d)?;
    Ok(())
}

/// The content of file `name` of directory `dir`, `None` when either is missing. A link or
/// anything but a regular file there is an error, never followed or read.
pub fn read_file(dir: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    file_name_ok(name)?;
    let d = match open_dir(dir, false) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        r => r?,
    };
    // NONBLOCK: a FIFO must not hang the open; it is refused just below.
    let fd = match rustix::fs::openat(
        &d,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(refused(format!(
                "{name:?} is a symbolic link; not followed"
            )));
        }
        r => r?,
    };
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Err(refused(format!("{name:?} is not a regular file")));
    }
    let mut out = Vec::new();
    io::Read::read_to_end(&mut std::fs::File::from(fd), &mut out)?;
    Ok(Some(out))
}

/// Removes file `name` of directory `dir`; a missing one is fine.
pub fn remove_file(dir: &Path, name: &str) -> io::Result<()> {
    file_name_ok(name)?;
    let d = match open_dir(dir, false) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    match rustix::fs::unlinkat(&d, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Makes directory `name` (mode 0700) beneath the handle `parent` of a directory opened with
/// [`open_dir`], or checks the one there, without following a link.
pub fn make_subdir(parent: &impl AsFd, name: &str) -> io::Result<()> {
    file_name_ok(name)?;
    subdir(parent.as_fd(), std::ffi::OsStr::new(name), true).map(drop)
}

fn file_name_ok(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(invalid(format!("{name:?} is not a file name")));
    }
    Ok(())
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

fn refused(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn prepare_creates_a_private_directory_and_refuses_unsafe_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/state");
        prepare(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        prepare(&dir).unwrap(); // again: fine

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&dir).unwrap_err();
        assert!(
            e.contains("group or others may write") && e.contains("chmod 0700"),
            "{e}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(prepare(&dir).is_err());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&dir).unwrap();

        let link = tmp.path().join("link");
        symlink(&dir, &link).unwrap();
        let e = prepare(&link).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");

        let other = tmp.path().join("other");
        std::fs::create_dir(&other).unwrap();
        rustix::fs::chown(&other, Some(rustix::fs::Uid::from_raw(4242)), None).unwrap();
        let e = prepare(&other).unwrap_err();
        assert!(e.contains("owned by uid 4242"), "{e}");
        assert!(prepare(Path::new("relative/state")).is_err());
    }

    #[test]
    fn files_are_written_beneath_the_handle_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state/iscsi");
        std::fs::create_dir_all(tmp.path().join("state")).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "untouched").unwrap();

        write_file(&dir, "portals", b"a 1\n", 0o600).unwrap();
        assert_eq!(read_file(&dir, "portals").unwrap().unwrap(), b"a 1\n");
        assert_eq!(mode(&dir.join("portals")), 0o600);
        assert_eq!(mode(&dir), 0o700);

        // A link at the temporary name is removed, one at the name itself replaced.
        symlink(&outside, dir.join(".portals.tmp")).unwrap();
        write_file(&dir, "portals", b"b 2\n", 0o600).unwrap();
        symlink(&outside, dir.join("secret")).unwrap();
        assert!(
            read_file(&dir, "secret").is_err(),
            "a link is not read through"
        );
        write_file(&dir, "secret", b"s3cret", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
        assert!(
            !std::fs::symlink_metadata(dir.join("secret"))
                .unwrap()
                .is_symlink()
        );
        assert!(!dir.join(".portals.tmp").exists());

        // A link as the directory itself is refused.
        let linked = tmp.path().join("state/linked");
        symlink(tmp.path(), &linked).unwrap();
        assert!(write_file(&linked, "x", b"x", 0o600).is_err());
        assert!(read_file(&linked, "outside").is_err());
        assert!(!tmp.path().join("x").exists());

        assert_eq!(read_file(&tmp.path().join("none"), "x").unwrap(), None);
        assert_eq!(read_file(&dir, "none").unwrap(), None);
        remove_file(&dir, "secret").unwrap();
        remove_file(&dir, "secret").unwrap();
        for bad in ["", "..", "a/b"] {
            assert!(write_file(&dir, bad, b"x", 0o600).is_err());
        }
    }
}
