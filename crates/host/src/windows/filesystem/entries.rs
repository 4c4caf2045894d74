//! One directory entry at a time as Win32 sees it: open, examine, remove (links as
//! themselves, read-only entries cleared). The recursive removal is in `removal.rs`.

use super::*;

/// Sharing that lets others do anything with an entry we only look at.
pub(super) const SHARE_ALL: u32 = access::SHARE_READ | access::SHARE_WRITE | access::SHARE_DELETE;
/// Sharing for a directory we are emptying: others may read and write, but nobody may delete or
/// rename it while we hold it.
pub(super) const SHARE_PIN: u32 = access::SHARE_READ | access::SHARE_WRITE;

/// The filesystem logic over one seam.
pub(super) struct Fs<'a> {
    pub(super) os: &'a dyn Win32,
}

impl<'a> Fs<'a> {
    /// Opens an existing file or directory; with `follow == false` a reparse point itself.
    pub(super) fn open(
        &self,
        path: &[u16],
        access: u32,
        share: u32,
        follow: bool,
    ) -> Win32Result<Handle<'a>> {
        super::super::os::open_entry(self.os, &z(path), access, share, follow)
    }

    /// The attributes of the entry itself (a link's own, not its target's).
    pub(super) fn attributes(&self, path: &[u16]) -> Win32Result<u32> {
        self.os.file_attributes(&z(path))
    }

    pub(super) fn read_reparse_point(&self, path: &[u16]) -> io::Result<ReparsePoint> {
        let data = self.os.reparse_data(&z(path)).map_err(|e| io_error(&e))?;
        Ok(reparse::parse(&data)?)
    }

    /// The reparse tag of the entry at `path`, from its directory entry: needs no access to the
    /// entry itself, as upstream's check.
    pub(super) fn reparse_tag(&self, path: &[u16]) -> Win32Result<Option<u32>> {
        let (attrs, tag) = self.os.find_entry(&z(path))?;
        Ok(has(attrs, attr::REPARSE_POINT).then_some(tag))
    }

    /// Clears FILE_ATTRIBUTE_READONLY on the entry itself (never a link's target); `Ok(true)`
    /// if it was set.
    pub(super) fn clear_readonly(&self, path: &[u16]) -> Win32Result<bool> {
        let access = access::READ_ATTRIBUTES | access::WRITE_ATTRIBUTES;
        let h = self.open(path, access, SHARE_ALL, false)?;
        self.clear_readonly_of(&h)
    }

    /// Clears FILE_ATTRIBUTE_READONLY of what the handle (with FILE_WRITE_ATTRIBUTES) is open
    /// on; `Ok(true)` if it was set.
    pub(super) fn clear_readonly_of(&self, h: &Handle<'_>) -> Win32Result<bool> {
        let attrs = self.os.basic_attributes(h.raw())?;
        if !has(attrs, attr::READONLY) {
            return Ok(false);
        }
        let mut attrs = attrs & !attr::READONLY;
        if attrs == 0 {
            attrs = attr::NORMAL;
        }
        self.os.set_basic_attributes(h.raw(), attrs)?;
        Ok(true)
    }

    /// Runs a delete; on ERROR_ACCESS_DENIED clears the read-only attribute and retries once.
    pub(super) fn with_readonly_retry(
        &self,
        path: &[u16],
        delete: impl Fn(&[u16]) -> Win32Result<()>,
    ) -> Win32Result<()> {
        let name = z(path);
        match delete(&name) {
            Err(e)
                if is_code(&e, code::ACCESS_DENIED)
                    && self.clear_readonly(path).unwrap_or(false) =>
            {
                delete(&name)
            }
            r => r,
        }
    }

    /// An empty directory, or a directory reparse point itself.
    pub(super) fn remove_directory(&self, path: &[u16]) -> Win32Result<()> {
        self.with_readonly_retry(path, |p| self.os.remove_directory(p))
    }

    /// A file, or a file symbolic link itself.
    pub(super) fn delete_file(&self, path: &[u16]) -> Win32Result<()> {
        self.with_readonly_retry(path, |p| self.os.delete_file(p))
    }

    /// Tells the mount manager to forget the volume mount point at `path` (logged, not
    /// failed, when it cannot: the folder left is removed as a folder).
    pub(super) fn delete_volume_mount_point(&self, path: &[u16]) {
        tracing::info!(path = %show(path), "deleting volume mount point");
        // DeleteVolumeMountPointW needs the trailing backslash.
        let mut mp = show(path);
        if !mp.ends_with('\\') {
            mp.push('\\');
        }
        if let Err(e) = self.os.delete_volume_mount_point(&mp) {
            tracing::warn!(path = %mp, error = %e, "DeleteVolumeMountPointW failed");
        }
    }

    /// Removes a reparse point itself; a volume mount point is first given to
    /// `DeleteVolumeMountPointW`, so the mount manager forgets it. What it leads to is never
    /// touched.
    pub(super) fn remove_reparse_point(&self, path: &[u16], attrs: u32) -> Win32Result<()> {
        if !has(attrs, attr::DIRECTORY) {
            return self.delete_file(path);
        }
        if self
            .read_reparse_point(path)
            .is_ok_and(|rp| rp.is_volume_mount_point())
        {
            // A name that is not valid UTF-16 cannot be passed; RemoveDirectoryW below still
            // removes the mount point.
            self.delete_volume_mount_point(path);
        }
        self.remove_directory(path)
    }

    /// Whether the directory at `path`, links followed, is a directory (what std's
    /// `metadata().is_dir()` answers).
    pub(super) fn is_dir_following(&self, path: &[u16]) -> bool {
        self.open(path, 0, SHARE_ALL, true)
            .and_then(|h| self.os.attribute_tag(h.raw()))
            .is_ok_and(|(a, _)| has(a, attr::DIRECTORY))
    }

    /// Creates `path` and the directories above it that are missing; an existing directory
    /// (or link to one) is success, anything else there is ERROR_ALREADY_EXISTS.
    pub(super) fn mkdir_all(&self, path: &[u16]) -> Win32Result<()> {
        let mut missing = vec![path];
        loop {
            let Some(&p) = missing.last() else {
                return Ok(());
            };
            match create_directory(self.os, &z(p)) {
                Ok(()) => {
                    missing.pop();
                }
                Err(e) if is_code(&e, code::PATH_NOT_FOUND) => match parent(p) {
                    Some(up) if missing.len() < 4096 => missing.push(up),
                    _ => return Err(e),
                },
                Err(e) if self.is_dir_following(p) => {
                    tracing::trace!(path = %show(p), error = %e, "already a directory");
                    missing.pop();
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Errors that mean "nothing is there" for a link's target (a dangling link answers false, not
/// an error); any other error, such as a logon failure on a share, is reported.
pub(super) fn unreachable(e: &OsError) -> bool {
    [
        code::FILE_NOT_FOUND,
        code::PATH_NOT_FOUND,
        code::NOT_READY,
        ERROR_BAD_NETPATH,
        ERROR_BAD_NET_NAME,
        ERROR_INVALID_NAME,
        code::UNRECOGNIZED_VOLUME,
        ERROR_CANT_RESOLVE_FILENAME,
    ]
    .contains(&e.code)
}
