//! One directory entry at a time as Win32 sees it: open, examine, remove (links as
//! themselves, read-only entries cleared), and the recursive removal built on it.

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

    /// The names in the directory at `path`, without `.` and `..`.
    pub(super) fn list_dir(&self, path: &[u16]) -> Win32Result<Vec<WPath>> {
        let pattern = join(path, &[u16::from(b'*')]);
        match self.os.find_names(&z(&pattern)) {
            Ok(names) => Ok(names
                .into_iter()
                .filter(|n| !n.is_empty() && n != &[0x2e] && n != &[0x2e, 0x2e])
                .collect()),
            // Nothing matched (a root directory has no `.`/`..`).
            Err(e) if is_code(&e, code::FILE_NOT_FOUND) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Clears FILE_ATTRIBUTE_READONLY on the entry itself (never a link's target); `Ok(true)`
    /// if it was set.
    pub(super) fn clear_readonly(&self, path: &[u16]) -> Win32Result<bool> {
        let access = access::READ_ATTRIBUTES | access::WRITE_ATTRIBUTES;
        let h = self.open(path, access, SHARE_ALL, false)?;
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
            tracing::info!(path = %show(path), "deleting volume mount point");
            // DeleteVolumeMountPointW needs the trailing backslash. A name that is not valid
            // UTF-16 cannot be passed; RemoveDirectoryW below still removes the mount point.
            let mut mp = show(path);
            if !mp.ends_with('\\') {
                mp.push('\\');
            }
            if let Err(e) = self.os.delete_volume_mount_point(&mp) {
                tracing::warn!(path = %mp, error = %e, "DeleteVolumeMountPointW failed");
            }
        }
        self.remove_directory(path)
    }

    /// Removes `path` unless it is a non-empty plain directory, which is pinned and listed
    /// instead.
    pub(super) fn step(&self, path: WPath) -> io::Result<Step<'a>> {
        for _ in 0..MAX_ATTEMPTS {
            let attrs = match self.attributes(&path) {
                Ok(a) => a,
                Err(e) if e.names_nothing() => return Ok(Step::Gone),
                Err(e) => return Err(with_context(&e, "attributes of", &path)),
            };
            if has(attrs, attr::REPARSE_POINT) {
                return match self.remove_reparse_point(&path, attrs) {
                    Err(e) if !e.names_nothing() => {
                        Err(with_context(&e, "remove reparse point", &path))
                    }
                    _ => Ok(Step::Gone),
                };
            }
            if !has(attrs, attr::DIRECTORY) {
                return match self.delete_file(&path) {
                    Err(e) if is_code(&e, code::ACCESS_DENIED) && self.dir_now(&path) => continue,
                    Err(e) if !e.names_nothing() => Err(with_context(&e, "delete", &path)),
                    _ => Ok(Step::Gone),
                };
            }
            match self.remove_directory(&path) {
                Ok(()) => return Ok(Step::Gone),
                Err(e) if e.names_nothing() => return Ok(Step::Gone),
                Err(e) if is_code(&e, code::DIR_NOT_EMPTY) => {}
                Err(e) if is_code(&e, ERROR_DIRECTORY) => continue, // now a file
                Err(e) => return Err(with_context(&e, "remove directory", &path)),
            }
            let pin = match self.open(&path, access::READ_ATTRIBUTES, SHARE_PIN, false) {
                Ok(h) => h,
                Err(e) if e.names_nothing() => return Ok(Step::Gone),
                Err(e) => return Err(with_context(&e, "open", &path)),
            };
            let (attrs, _) = self
                .os
                .attribute_tag(pin.raw())
                .map_err(|e| with_context(&e, "query", &path))?;
            if has(attrs, attr::REPARSE_POINT) || !has(attrs, attr::DIRECTORY) {
                continue; // swapped for a link or a file since we looked
            }
            let entries = self
                .list_dir(&path)
                .map_err(|e| with_context(&e, "list", &path))?;
            return Ok(Step::Descend(Frame {
                path,
                pin,
                entries: entries.into_iter(),
                error: None,
            }));
        }
        Err(io::Error::other(format!(
            "{}: changed {MAX_ATTEMPTS} times while being removed",
            show(&path)
        )))
    }

    pub(super) fn dir_now(&self, path: &[u16]) -> bool {
        self.attributes(path).is_ok_and(|a| has(a, attr::DIRECTORY))
    }

    /// Removes `path` and everything below it (iteratively); after an error the remaining
    /// siblings are still removed and the first error is returned.
    pub(super) fn remove_tree(&self, path: WPath) -> io::Result<()> {
        let mut stack = match self.step(path)? {
            Step::Gone => return Ok(()),
            Step::Descend(frame) => vec![frame],
        };
        loop {
            let Some(frame) = stack.last_mut() else {
                return Ok(());
            };
            if let Some(name) = frame.entries.next() {
                match self.step(join(&frame.path, &name)) {
                    Ok(Step::Descend(child)) => stack.push(child),
                    Ok(Step::Gone) => {}
                    Err(e) => {
                        frame.error.get_or_insert(e);
                    }
                }
                continue;
            }
            let Some(Frame {
                path, pin, error, ..
            }) = stack.pop()
            else {
                return Ok(());
            };
            // Unpin first: our own handle without FILE_SHARE_DELETE would block the removal.
            drop(pin);
            let error = match self.remove_directory(&path) {
                Ok(()) => None,
                Err(e) if e.names_nothing() => None,
                Err(e) => {
                    Some(error.unwrap_or_else(|| with_context(&e, "remove directory", &path)))
                }
            };
            match (stack.last_mut(), error) {
                (Some(parent), Some(e)) => {
                    parent.error.get_or_insert(e);
                }
                (None, Some(e)) => return Err(e),
                _ => {}
            }
        }
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

/// A directory being emptied, pinned open without FILE_SHARE_DELETE.
pub(super) struct Frame<'a> {
    path: WPath,
    pin: Handle<'a>,
    entries: std::vec::IntoIter<WPath>,
    error: Option<io::Error>,
}

pub(super) enum Step<'a> {
    Gone,
    Descend(Frame<'a>),
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
