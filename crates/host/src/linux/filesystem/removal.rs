//! The recursive removal behind Rmdir(force) and RmdirContents, bounded whatever tree a tenant
//! built: at most [`OPEN_LEVELS`] directories are held open (two descriptors each: the
//! directory and its listing), a listing is read [`BATCH`] names at a time, paths kept for
//! messages stay within [`PATH_MAX`] bytes, and a level above the open window keeps only its
//! identity (a few dozen bytes), up to [`MAX_DEPTH`] levels.
//!
//! When the removal climbs back to a closed level, it opens it again as its child's `..` and
//! checks it is the very directory it was (device and inode), or the removal stops: a directory
//! moved meanwhile is never followed. Its listing is then read again from the start; the
//! emptied child is met again and removed, and entries that failed are skipped by inode.

use super::*;
use std::collections::VecDeque;

/// Directories one removal holds open at a time.
pub(super) const OPEN_LEVELS: usize = 8;
/// Names read from one directory listing at a time.
pub(super) const BATCH: usize = 256;
/// Levels below the removed directory a removal descends to; deeper ones are left in place
/// and reported.
pub(super) const MAX_DEPTH: usize = 4096;
/// The longest path kept for messages (Linux's `PATH_MAX`); deeper ones are shortened.
pub(super) const PATH_MAX: usize = 4096;
/// Entries whose removal failed that one removal remembers (to skip them when it reads a
/// directory again); past it, the removal stops with the first error.
pub(super) const MAX_FAILED: usize = 64;

/// One directory being emptied, from the removed one downwards.
struct Level {
    /// Device and inode it had when it was opened.
    identity: (u64, u64),
    /// Its inode as its parent's listing gives it (to skip it there after a failure).
    listed_ino: u64,
    /// Open while the level is among the deepest [`OPEN_LEVELS`].
    open: Option<Box<OpenLevel>>,
    /// Entries here whose removal failed, by listed inode: skipped when read again.
    failed: Vec<u64>,
    /// The first error met below this level.
    error: Option<io::Error>,
}

struct OpenLevel {
    dir: OpenDir,
    /// Its name in its parent.
    name: OsString,
    /// The listing, read lazily; `None` once it is exhausted.
    listing: Option<rustix::fs::Dir>,
    /// Entries read from the listing and not handled yet (at most [`BATCH`]): name and inode.
    pending: VecDeque<(OsString, u64)>,
}

impl OpenLevel {
    fn new(dir: OpenDir, name: OsString) -> io::Result<Box<Self>> {
        let wrap = |e: Errno| with_context(e.into(), "read directory", &dir.path);
        // A descriptor of its own for reading, so the listing's offset is not `dir.fd`'s.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&dir.fd, c".", flags, Mode::empty()).map_err(wrap)?;
        let listing = rustix::fs::Dir::new(fd).map_err(wrap)?;
        Ok(Box::new(OpenLevel {
            dir,
            name,
            listing: Some(listing),
            pending: VecDeque::new(),
        }))
    }

    /// The next entry to handle, skipping `failed` ones; `None` when the listing is done.
    fn next(&mut self, failed: &[u64]) -> io::Result<Option<(OsString, u64)>> {
        loop {
            if let Some((name, ino)) = self.pending.pop_front() {
                if failed.contains(&ino) {
                    continue;
                }
                return Ok(Some((name, ino)));
            }
            let Some(listing) = self.listing.as_mut() else {
                return Ok(None);
            };
            for entry in listing.by_ref() {
                let entry =
                    entry.map_err(|e| with_context(e.into(), "read directory", &self.dir.path))?;
                let name = entry.file_name().to_bytes();
                if name != b"." && name != b".." {
                    let name = OsStr::from_bytes(name).to_owned();
                    self.pending.push_back((name, entry.ino()));
                    if self.pending.len() == BATCH {
                        break;
                    }
                }
            }
            if self.pending.is_empty() {
                self.listing = None;
            }
        }
    }
}

/// The removal's state: the levels below `top` and what failed so far.
struct Removal<'a> {
    mounts: &'a mut Mounts,
    top: &'a OpenDir,
    levels: Vec<Level>,
    failures: usize,
    /// Whether the first level is `top` itself, emptied but kept (RmdirContents).
    keep_first: bool,
    /// The first level's name in `top` (levels opened again as `..` do not keep theirs).
    first_name: OsString,
}

impl Removal<'_> {
    fn push(&mut self, name: OsString, listed_ino: u64, dir: OpenDir) -> io::Result<()> {
        let node = dir
            .node()
            .map_err(|e| with_context(e.into(), "stat", &dir.path))?;
        self.levels.push(Level {
            identity: (node.dev, node.ino),
            listed_ino,
            open: Some(OpenLevel::new(dir, name)?),
            failed: Vec::new(),
            error: None,
        });
        // Only the deepest levels stay open.
        let keep_from = self.levels.len().saturating_sub(OPEN_LEVELS);
        for level in &mut self.levels[..keep_from] {
            level.open = None;
        }
        Ok(())
    }

    /// The path of `name` in `dir` for messages, shortened past [`PATH_MAX`].
    fn child_path(&self, dir: &OpenDir, name: &OsStr) -> PathBuf {
        if dir.path.as_os_str().len() + name.len() < PATH_MAX {
            return dir.child_path(name);
        }
        let depth = self.levels.len() + 1;
        self.top
            .path
            .join(format!("…({depth} levels down)…"))
            .join(name)
    }

    /// Notes that removing the entry listed as `ino` in the deepest level (or, past the top,
    /// returns it) failed. Past [`MAX_FAILED`] failures the removal stops with its first
    /// error.
    fn fail(&mut self, ino: u64, e: io::Error) -> io::Result<()> {
        self.failures += 1;
        if self.failures > MAX_FAILED {
            let first = self.levels.iter_mut().find_map(|l| l.error.take());
            return Err(first.unwrap_or(e));
        }
        self.note(ino, e)
    }

    /// Notes in the deepest level the error of an entry in it (or, past the top, returns it).
    /// Each failure is remembered once at a time (by the inode of its branch in the deepest
    /// level holding it), so what is kept stays within [`MAX_FAILED`].
    fn note(&mut self, ino: u64, e: io::Error) -> io::Result<()> {
        let Some(level) = self.levels.last_mut() else {
            return Err(e);
        };
        level.error.get_or_insert(e);
        level.failed.push(ino);
        Ok(())
    }

    /// Removes the deepest level, which has been emptied (as far as it could be). When the
    /// level above was closed, it is opened again as the deepest level's `..` and must be the
    /// very directory it was; it then reads its listing again and meets the emptied child
    /// there.
    fn finish_deepest(&mut self) -> io::Result<()> {
        let done = self.levels.pop().expect("a level to finish");
        let open = done.open.expect("the deepest level is open");
        drop(open.listing);
        if self.levels.is_empty() && self.keep_first {
            return done.error.map_or(Ok(()), Err);
        }
        if let Some(parent) = self.levels.last_mut()
            && parent.open.is_none()
        {
            let path = open
                .dir
                .path
                .parent()
                .unwrap_or(&open.dir.path)
                .to_path_buf();
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&open.dir.fd, c"..", flags, Mode::empty())
                .map_err(|e| with_context(e.into(), "open again", &path))?;
            let node = node_of(fd.as_fd()).map_err(|e| with_context(e.into(), "stat", &path))?;
            if (node.dev, node.ino) != parent.identity {
                return Err(io::Error::other(format!(
                    "{}: moved while being removed; the removal stopped there",
                    open.dir.path.display()
                )));
            }
            // Its name is only needed to remove it, which its own parent's listing gives.
            let dir = OpenDir::known(fd, node, path);
            parent.open = Some(OpenLevel::new(dir, OsString::new())?);
            return match done.error {
                Some(e) => self.note(done.listed_ino, e),
                // Met again in the listing and removed there.
                None => Ok(()),
            };
        }
        let (parent, name) = match self.levels.last() {
            None => (self.top, &self.first_name),
            Some(l) => (
                &l.open.as_ref().expect("the level above is open").dir,
                &open.name,
            ),
        };
        let error = match rustix::fs::unlinkat(&parent.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => None,
            Err(e) => Some(
                done.error
                    .unwrap_or_else(|| with_context(e.into(), "rmdir", &open.dir.path)),
            ),
        };
        match error {
            Some(e) => self.note(done.listed_ino, e),
            None => Ok(()),
        }
    }

    /// Empties and removes the levels until none is left.
    fn run(mut self) -> io::Result<()> {
        while let Some(level) = self.levels.last_mut() {
            let open = level.open.as_mut().expect("the deepest level is open");
            let (child, ino) = match open.next(&level.failed) {
                Ok(Some(entry)) => entry,
                Ok(None) => {
                    self.finish_deepest()?;
                    continue;
                }
                Err(e) => {
                    // The listing cannot be read: what is left here stays; climb out.
                    level.error.get_or_insert(e);
                    open.listing = None;
                    open.pending.clear();
                    continue;
                }
            };
            let dir = &self
                .levels
                .last()
                .and_then(|l| l.open.as_ref())
                .expect("open")
                .dir;
            if self.levels.len() > MAX_DEPTH {
                let e = io::Error::new(
                    io::ErrorKind::DirectoryNotEmpty,
                    format!(
                        "{}: left in place: more than {MAX_DEPTH} levels below the removed \
                         directory, the deepest a removal goes",
                        self.child_path(dir, &child).display()
                    ),
                );
                self.fail(ino, e)?;
                continue;
            }
            let step = step(self.mounts, dir, &child, false);
            match step {
                Ok(Step::Gone) => {}
                Ok(Step::Descend(mut next)) => {
                    next.path = self.child_path(dir, &child);
                    self.push(child, ino, next)?
                }
                Err(e) => self.fail(ino, e)?,
            }
        }
        Ok(())
    }
}

/// Removes `name` in `top` and everything below it, iteratively and within the bounds above.
/// After an error the remaining siblings are still removed; the first error is returned.
pub(super) fn remove_tree(
    mounts: &mut Mounts,
    top: &OpenDir,
    name: &OsStr,
    unmount_top: bool,
) -> io::Result<()> {
    let first = match step(mounts, top, name, unmount_top)? {
        Step::Gone => return Ok(()),
        Step::Descend(dir) => dir,
    };
    let mut removal = Removal {
        mounts,
        top,
        levels: Vec::new(),
        failures: 0,
        keep_first: false,
        first_name: name.to_owned(),
    };
    removal.push(name.to_owned(), 0, first)?;
    removal.run()
}

/// Removes everything inside `dir` as [`remove_tree`] does, and keeps `dir`.
pub(super) fn remove_below(mounts: &mut Mounts, dir: &OpenDir) -> io::Result<()> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir.fd, c".", flags, Mode::empty())
        .map_err(|e| with_context(e.into(), "open", &dir.path))?;
    let node = dir
        .node()
        .map_err(|e| with_context(e.into(), "stat", &dir.path))?;
    let mut removal = Removal {
        mounts,
        top: dir,
        levels: Vec::new(),
        failures: 0,
        keep_first: true,
        first_name: OsString::from("."),
    };
    let copy = OpenDir::known(fd, node, dir.path.clone());
    removal.push(OsString::from("."), 0, copy)?;
    removal.run()
}
