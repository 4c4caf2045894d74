//! The recursive removal behind Rmdir(force) and RmdirContents, bounded whatever tree a tenant
//! built: at most [`OPEN_LEVELS`] directories are held open at a time, a listing is read one
//! buffer of [`LISTING_BUFFER`] bytes at a time, the one path kept (the deepest level's, for
//! messages and re-opening) stays within Win32's 32,767 units, and a level above the open
//! window keeps only its file ID, down to [`MAX_DEPTH`] levels.
//!
//! Every entry is opened relative to the handle of the directory it was listed in
//! (`NtCreateFile` with a `RootDirectory`, as itself: a link is never followed) and removed
//! through its own handle (`FileDispositionInfo`), so no path through the levels above the
//! window, which are not held and may be renamed meanwhile, is ever acted on. Each open level
//! is held without FILE_SHARE_DELETE, so it cannot be renamed away while the removal works in
//! it. When the removal climbs back to a closed level, it opens it again by its path and checks
//! its file ID against the one recorded, or stops: a directory renamed or replaced meanwhile is
//! never entered. Its listing is then read again from the start; entries that failed are skipped
//! by file ID.

use super::*;
use crate::windows::os::files::{DirEntry, FileId};
use crate::windows::os::open_child;
use csi_proxy_formats::reparse::IO_REPARSE_TAG_MOUNT_POINT;
use std::collections::VecDeque;

/// Directories one removal holds open at a time.
pub(crate) const OPEN_LEVELS: usize = 8;
/// Bytes of one listing read (`FILE_ID_BOTH_DIR_INFO` records: 64 to 148 entries), the most of
/// a listing one open level holds.
pub(crate) const LISTING_BUFFER: usize = 16 * 1024;
/// Levels below the removed directory a removal descends to; deeper ones are left in place and
/// reported.
pub(super) const MAX_DEPTH: usize = 4096;
/// The longest path Win32 takes (with the `\\?\` prefix); a directory deeper than that cannot
/// be opened again by its path, so it is left in place and reported.
pub(super) const MAX_PATH_UNITS: usize = 32_767;
/// Entries whose removal failed that one removal remembers (to skip them when it reads a
/// directory again); past it, the removal stops with the first error.
pub(super) const MAX_FAILED: usize = 64;

/// What an entry being removed is opened with: delete it, read and clear its attributes.
const ENTRY_ACCESS: u32 = access::DELETE | access::READ_ATTRIBUTES | access::WRITE_ATTRIBUTES;

/// One directory being emptied, from the removed one downwards.
struct Level<'a> {
    /// Its file ID when it was opened; `None` where the filesystem has none (FileIdInfo
    /// unsupported): such a level is never let out of the window.
    id: Option<FileId>,
    /// Its file ID in its parent's listing (to skip it there after a failure).
    listed: u64,
    /// The length of [`Removal::path`] that is this level's path.
    path_len: usize,
    /// Open while the level is among the deepest [`OPEN_LEVELS`].
    open: Option<Open<'a>>,
    /// Entries here whose removal failed, by listed file ID: skipped when read again.
    failed: Vec<u64>,
    /// The first error met below this level.
    error: Option<io::Error>,
}

/// An open level: its handle (without FILE_SHARE_DELETE) and the part of its listing read and
/// not handled yet (one buffer at most).
struct Open<'a> {
    handle: Handle<'a>,
    pending: VecDeque<DirEntry>,
    /// The next read starts the listing again (a level opened again).
    restart: bool,
    /// The listing is done.
    done: bool,
}

impl<'a> Open<'a> {
    fn new(handle: Handle<'a>) -> Self {
        Open {
            handle,
            pending: VecDeque::new(),
            restart: true,
            done: false,
        }
    }

    /// The next entry to handle, skipping `.`, `..` and `failed` ones; `None` when the
    /// listing is done.
    fn next(&mut self, os: &dyn Win32, failed: &[u64]) -> Win32Result<Option<DirEntry>> {
        loop {
            while let Some(e) = self.pending.pop_front() {
                let dots = e.name == [0x2e] || e.name == [0x2e, 0x2e];
                if !dots && !failed.contains(&e.file_id) {
                    return Ok(Some(e));
                }
            }
            if self.done {
                return Ok(None);
            }
            let batch = os.read_dir(self.handle.raw(), self.restart, LISTING_BUFFER)?;
            self.restart = false;
            self.done = batch.is_empty();
            self.pending = batch.into();
        }
    }
}

/// What became of one entry.
enum Step<'a> {
    Gone,
    /// A directory that is not empty, open (without FILE_SHARE_DELETE) to be emptied.
    Descend(Handle<'a>),
}

/// The removal's state: the levels and what failed so far.
struct Removal<'f, 'a> {
    fs: &'f Fs<'a>,
    /// The deepest level's path.
    path: WPath,
    levels: Vec<Level<'a>>,
    failures: usize,
    /// Whether the first level is emptied but kept (RmdirContents).
    keep_first: bool,
    /// Whether the first level was opened through a mounted folder (its volume's root), and
    /// is opened so again.
    follow_first: bool,
}

impl<'a> Removal<'_, 'a> {
    fn os(&self) -> &'a dyn Win32 {
        self.fs.os
    }

    /// Makes the directory open on `handle`, listed as `listed`, the deepest level; closes the
    /// level that falls out of the window.
    fn push(&mut self, handle: Handle<'a>, listed: u64) -> io::Result<()> {
        let id = match self.os().file_id(handle.raw()) {
            // FILE_ID_INFORMATION: "For file systems that do not support a 128-bit file ID,
            // this field must be set to 0, and must be ignored."
            Ok((_, 0)) => None,
            Ok(id) => Some(id),
            Err(e) if unsupported(&e) => None,
            Err(e) => return Err(with_context(&e, "query the file ID of", &self.path)),
        };
        self.levels.push(Level {
            id,
            listed,
            path_len: self.path.len(),
            open: Some(Open::new(handle)),
            failed: Vec::new(),
            error: None,
        });
        if let Some(out) = self.levels.len().checked_sub(OPEN_LEVELS + 1) {
            self.levels[out].open = None;
        }
        Ok(())
    }

    /// Notes that removing the entry listed as `id` in the deepest level failed (or, past the
    /// top, returns it). Past [`MAX_FAILED`] failures the removal stops with its first error.
    fn fail(&mut self, id: u64, e: io::Error) -> io::Result<()> {
        self.failures += 1;
        if self.failures > MAX_FAILED {
            let first = self.levels.iter_mut().find_map(|l| l.error.take());
            return Err(first.unwrap_or(e));
        }
        self.note(id, e)
    }

    /// Notes in the deepest level the error of an entry in it (or, past the top, returns it).
    fn note(&mut self, id: u64, e: io::Error) -> io::Result<()> {
        let Some(level) = self.levels.last_mut() else {
            return Err(e);
        };
        level.error.get_or_insert(e);
        level.failed.push(id);
        Ok(())
    }

    /// Opens the closed deepest level again by its path and checks it is the very directory
    /// it was.
    fn reopen_deepest(&mut self) -> io::Result<()> {
        let first = self.levels.len() == 1;
        let level = self.levels.last_mut().expect("a level to open again");
        let path = &self.path[..level.path_len];
        let follow = first && self.follow_first;
        // The kept first level is not deleted (and whoever emptied it holds it, not sharing
        // delete).
        let access = if first && self.keep_first {
            access::READ_ATTRIBUTES | access::LIST_DIRECTORY
        } else {
            ENTRY_ACCESS | access::LIST_DIRECTORY
        };
        let handle = match self.fs.open(path, access, SHARE_PIN, follow) {
            Ok(h) => h,
            Err(e) if e.names_nothing() => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{}: no longer at its path (it or a directory above it was renamed or \
                         replaced while being removed); the removal stopped there",
                        show(path)
                    ),
                ));
            }
            Err(e) => return Err(with_context(&e, "open again", path)),
        };
        let id = self
            .fs
            .os
            .file_id(handle.raw())
            .map_err(|e| with_context(&e, "query the file ID of", path))?;
        if Some(id) != level.id {
            return Err(io::Error::other(format!(
                "{}: renamed or replaced while being removed (its file ID changed); the \
                 removal stopped there and nothing in what is there now was removed",
                show(path)
            )));
        }
        level.open = Some(Open::new(handle));
        Ok(())
    }

    /// Removes the deepest level, which has been emptied (as far as it could be). When the
    /// level above was closed, it is first opened again and checked.
    fn finish_deepest(&mut self) -> io::Result<()> {
        let done = self.levels.pop().expect("a level to finish");
        let open = done.open.expect("the deepest level is open");
        if self.levels.is_empty() && self.keep_first {
            return done.error.map_or(Ok(()), Err);
        }
        if self.levels.last().is_some_and(|l| l.open.is_none()) {
            self.reopen_deepest()?;
        }
        // Marked through our own handle. Children marked for deletion go at their last
        // close, which another process (a scanner, an indexer) may make a little later, and
        // Wine makes after the call: until then the directory is not empty. When nothing
        // below failed, that is waited out (bounded: 10 s and the caller's deadline).
        let disposed = if done.error.is_none() {
            super::super::os::retry_within(
                self.fs.os,
                DELETE_PENDING_LIMIT,
                DELETE_PENDING_POLL,
                || {
                    let r = self.fs.dispose(&open.handle);
                    let pending = matches!(&r, Err(e) if is_code(e, code::DIR_NOT_EMPTY));
                    (r, pending)
                },
            )
        } else {
            self.fs.dispose(&open.handle)
        };
        let error = match disposed {
            Ok(()) => None,
            Err(e) if e.names_nothing() => None,
            Err(e) => Some(
                done.error
                    .unwrap_or_else(|| with_context(&e, "remove directory", &self.path)),
            ),
        };
        drop(open);
        let up = self.levels.last().map_or(0, |l| l.path_len);
        if !self.levels.is_empty() {
            self.path.truncate(up);
        }
        match error {
            Some(e) => self.note(done.listed, e),
            None => Ok(()),
        }
    }

    /// Empties and removes the levels until none is left.
    fn run(mut self) -> io::Result<()> {
        while let Some(level) = self.levels.last_mut() {
            let open = level.open.as_mut().expect("the deepest level is open");
            let entry = match open.next(self.fs.os, &level.failed) {
                Ok(Some(entry)) => entry,
                Ok(None) => {
                    self.finish_deepest()?;
                    continue;
                }
                Err(e) => {
                    // The listing cannot be read: what is left here stays; climb out.
                    let path = &self.path[..level.path_len];
                    level.error.get_or_insert(with_context(&e, "list", path));
                    open.done = true;
                    open.pending.clear();
                    continue;
                }
            };
            let path = join(&self.path, &entry.name);
            let parent = &open.handle;
            let dir_hint = has(entry.attributes, attr::DIRECTORY)
                && !has(entry.attributes, attr::REPARSE_POINT);
            match self.fs.step(Some(parent), &entry.name, &path, dir_hint) {
                Ok(Step::Gone) => {}
                Ok(Step::Descend(handle)) => {
                    let refusal = if self.levels.len() > MAX_DEPTH {
                        Some(format!(
                            "more than {MAX_DEPTH} levels below the removed directory, the \
                             deepest a removal goes"
                        ))
                    } else if let Some(closing) = self
                        .levels
                        .len()
                        .checked_sub(OPEN_LEVELS)
                        .filter(|&i| self.levels[i].id.is_none())
                    {
                        let at = &self.path[..self.levels[closing].path_len];
                        Some(format!(
                            "the filesystem gives {} no file ID, so it could not be checked \
                             again once closed, and only {OPEN_LEVELS} directories are held open",
                            show(at)
                        ))
                    } else if path.len() > MAX_PATH_UNITS {
                        Some(format!(
                            "its path is longer than {MAX_PATH_UNITS} UTF-16 units, the \
                             longest Windows opens"
                        ))
                    } else {
                        None
                    };
                    if let Some(why) = refusal {
                        let e = io::Error::new(
                            io::ErrorKind::DirectoryNotEmpty,
                            format!("{}: left in place: {why}", show(&path)),
                        );
                        self.fail(entry.file_id, e)?;
                        continue;
                    }
                    self.path = path;
                    self.push(handle, entry.file_id)?;
                }
                Err(e) => self.fail(entry.file_id, e)?,
            }
        }
        Ok(())
    }
}

impl<'a> Fs<'a> {
    /// Marks the entry open on `h` for deletion at its last close; a read-only entry is made
    /// writable first (through the same handle) and marked again.
    fn dispose(&self, h: &Handle<'_>) -> Win32Result<()> {
        match self.os.delete_on_close(h.raw()) {
            Err(e) if is_code(&e, code::ACCESS_DENIED) => {
                if !self.clear_readonly_of(h)? {
                    return Err(e);
                }
                self.os.delete_on_close(h.raw())
            }
            r => r,
        }
    }

    /// Whether the reparse point open on `h` is a volume mount point that `path` still names
    /// (same file ID): only then is it given to `DeleteVolumeMountPointW`, which takes a path,
    /// so no other mount point is ever touched through a path renamed meanwhile.
    fn volume_mount_point_at(&self, h: &Handle<'_>, path: &[u16], attrs: u32, tag: u32) -> bool {
        if !has(attrs, attr::DIRECTORY) || tag != IO_REPARSE_TAG_MOUNT_POINT {
            return false;
        }
        let same = self
            .open(path, access::READ_ATTRIBUTES, SHARE_ALL, false)
            .and_then(|by_path| Ok(self.os.file_id(by_path.raw())? == self.os.file_id(h.raw())?))
            .unwrap_or(false);
        same && self
            .read_reparse_point(path)
            .is_ok_and(|rp| rp.is_volume_mount_point())
    }

    /// Opens the entry `name` of `parent` (or, without a parent, `path`) as itself and removes
    /// it, unless it is a directory that is not empty, which is returned open to be emptied.
    fn step(
        &self,
        parent: Option<&Handle<'_>>,
        name: &[u16],
        path: &[u16],
        dir_hint: bool,
    ) -> io::Result<Step<'a>> {
        let mut list = dir_hint;
        let mut unmounted = false;
        for _ in 0..MAX_ATTEMPTS {
            let access = ENTRY_ACCESS | if list { access::LIST_DIRECTORY } else { 0 };
            let opened = match parent {
                Some(p) => open_child(self.os, p, name, access, SHARE_PIN),
                None => self.open(path, access, SHARE_PIN, false),
            };
            let h = match opened {
                Ok(h) => h,
                Err(e) if e.names_nothing() => return Ok(Step::Gone),
                Err(e) => return Err(with_context(&e, "open", path)),
            };
            let (attrs, tag) = self
                .os
                .attribute_tag(h.raw())
                .map_err(|e| with_context(&e, "query", path))?;
            if has(attrs, attr::REPARSE_POINT) {
                if !unmounted && self.volume_mount_point_at(&h, path, attrs, tag) {
                    // The mount manager forgets it; our handle, which does not share delete,
                    // is closed first so that nothing of ours stands in its way. The folder
                    // left is opened again and removed.
                    drop(h);
                    unmounted = true;
                    self.delete_volume_mount_point(path);
                    continue;
                }
                // A link (or a mount point the mount manager would not forget) as itself.
                return match self.dispose(&h) {
                    Err(e) if !e.names_nothing() => {
                        Err(with_context(&e, "remove reparse point", path))
                    }
                    _ => Ok(Step::Gone),
                };
            }
            if !has(attrs, attr::DIRECTORY) {
                return match self.dispose(&h) {
                    Err(e) if !e.names_nothing() => Err(with_context(&e, "delete", path)),
                    _ => Ok(Step::Gone),
                };
            }
            if !list {
                // A directory after all: open it again so that it can be listed.
                list = true;
                continue;
            }
            return match self.dispose(&h) {
                Ok(()) => Ok(Step::Gone),
                Err(e) if e.names_nothing() => Ok(Step::Gone),
                Err(e) if is_code(&e, code::DIR_NOT_EMPTY) => Ok(Step::Descend(h)),
                Err(e) => Err(with_context(&e, "remove directory", path)),
            };
        }
        Err(io::Error::other(format!(
            "{}: changed {MAX_ATTEMPTS} times while being removed",
            show(path)
        )))
    }

    /// Removes `path` and everything below it within the bounds above; after an error the
    /// remaining siblings are still removed and the first error is returned.
    pub(super) fn remove_tree(&self, path: WPath) -> io::Result<()> {
        let first = match self.step(None, &[], &path, true)? {
            Step::Gone => return Ok(()),
            Step::Descend(h) => h,
        };
        let removal = Removal {
            fs: self,
            path,
            levels: Vec::new(),
            failures: 0,
            keep_first: false,
            follow_first: false,
        };
        removal.start(first)
    }

    /// Removes everything inside the directory open on `dir` (at `path`; through a mounted
    /// folder when `follow`) as [`Self::remove_tree`] does, and keeps it.
    pub(super) fn remove_below(
        &self,
        dir: Handle<'a>,
        path: WPath,
        follow: bool,
    ) -> io::Result<()> {
        let removal = Removal {
            fs: self,
            path,
            levels: Vec::new(),
            failures: 0,
            keep_first: true,
            follow_first: follow,
        };
        removal.start(dir)
    }
}

impl<'a> Removal<'_, 'a> {
    fn start(mut self, first: Handle<'a>) -> io::Result<()> {
        self.push(first, 0)?;
        self.run()
    }
}

/// The answers of a filesystem that has no `FileIdInfo` (ERROR_INVALID_PARAMETER,
/// ERROR_INVALID_FUNCTION, ERROR_NOT_SUPPORTED).
fn unsupported(e: &OsError) -> bool {
    [code::INVALID_PARAMETER, code::INVALID_FUNCTION, 50].contains(&e.code)
}
