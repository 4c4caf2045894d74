//! The simulated Windows directory tree: the file primitives of the seam ([`FileApi`]), so the
//! real filesystem host's logic (and the volume and SMB hosts' looks at mount points and links)
//! runs over it. What it models, as Microsoft documents it:
//! - `GetFileAttributesW` answers for the entry itself, "not the link destination"; a symbolic
//!   link carries FILE_ATTRIBUTE_REPARSE_POINT (tag `IO_REPARSE_TAG_SYMLINK`, substitute name
//!   `\??\C:\...`), a mounted folder FILE_ATTRIBUTE_REPARSE_POINT with
//!   `IO_REPARSE_TAG_MOUNT_POINT` and the volume's `\??\Volume{GUID}\`.
//! - A missing entry is ERROR_FILE_NOT_FOUND, a missing parent ERROR_PATH_NOT_FOUND.
//! - `RemoveDirectoryW` removes an empty directory, or a directory link or mounted folder
//!   itself "regardless of whether the target directory is empty"; a non-empty directory is
//!   ERROR_DIR_NOT_EMPTY and a file ERROR_DIRECTORY. `DeleteFileW` on a directory is
//!   ERROR_ACCESS_DENIED. FILE_ATTRIBUTE_READONLY makes both fail with ERROR_ACCESS_DENIED.
//! - Deleting needs DELETE access, which an open handle without FILE_SHARE_DELETE denies:
//!   ERROR_SHARING_VIOLATION. With handles open that share delete, `RemoveDirectoryW` and
//!   `DeleteFileW` succeed but only mark the entry: it is deleted at the last close ("the
//!   directory is not removed until the last handle to the directory is closed"). Until then it
//!   is delete-pending: it is still listed (its directory is not empty), and opening it,
//!   reading its attributes, deleting it again or creating an entry of its name fail with
//!   ERROR_ACCESS_DENIED (STATUS_DELETE_PENDING).
//! - A directory's listing holds `.` and `..` in every directory but a drive root.
//!
//! - A link in the middle of a path is followed (`races.rs`); a final one only when asked.
//! - Handle-relative primitives (ledger row 86): `NtCreateFile` with a `RootDirectory` opens
//!   one entry of the directory that handle is open on, wherever it is now, as itself;
//!   `GetFileInformationByHandleEx(FileIdBothDirectoryInfo)` reads the listing in batches that
//!   fit the caller's buffer, each call resuming "after the last file is returned" (a cursor
//!   by name, as an NTFS index is ordered), the `…RestartInfo` class starting again and
//!   ERROR_NO_MORE_FILES ending it; `FileIdInfo` answers an identity that stays with the entry
//!   when it is renamed and that no other entry has; `FileDispositionInfo` needs DELETE access
//!   (ERROR_ACCESS_DENIED), fails on a read-only entry (STATUS_CANNOT_DELETE,
//!   ERROR_ACCESS_DENIED) and on a directory that is not empty (ERROR_DIR_NOT_EMPTY), and
//!   deletes at the last close. A directory no handle holds without FILE_SHARE_DELETE can be
//!   renamed ([`SimWindows::rename`]), handles open below it following it.
//!
//! - File contents (ledger row 92): `ReadFile` through a handle opened with FILE_READ_DATA
//!   reads from the handle's file pointer and advances it, answers fewer bytes than asked near
//!   the end and none at the end; without read access it is ERROR_ACCESS_DENIED. A directory's
//!   handle answers ERROR_INVALID_FUNCTION and a symbolic link opened as itself reads as empty
//!   (both inferred). Contents are what a test put ([`SimWindows::put_file`]); nothing here
//!   writes a file.
//!
//! Not modelled: writing files, byte-range locks, times.

use super::{SimWindows, State, key, mp_key, parent_key, smb};
use crate::windows::os::files::{
    DirEntry, ERROR_DIRECTORY, ERROR_INVALID_NAME, FileApi, FileId, access, access::SHARE_DELETE,
    attr, dir_record_len, link_flag,
};
use crate::windows::os::{OsError, Win32Result, code};
use csi_proxy_formats::reparse::{
    IO_REPARSE_TAG_MOUNT_POINT, IO_REPARSE_TAG_SYMLINK, SYMLINK_FLAG_RELATIVE,
};

/// A symbolic link in the simulated tree.
#[derive(Debug, Clone)]
pub(super) struct Link {
    /// The target as given to `CreateSymbolicLinkW`.
    pub(super) target: String,
    /// The link's path as created.
    pub(super) text: String,
    /// A directory link (SYMBOLIC_LINK_FLAG_DIRECTORY).
    directory: bool,
}

/// An entry opened through [`FileApi::open_entry`].
#[derive(Debug, Clone)]
pub(super) struct OpenEntry {
    /// The key of what the handle is open on (a followed link's target).
    pub(super) key: String,
    share: u32,
    /// The access granted (what `delete_on_close` and `read_dir` need).
    pub(super) access: u32,
    /// Opened through a mounted folder: the handle is on the volume's root directory.
    volume_root: bool,
    /// The listing read through this handle so far: the last name returned, lower-cased.
    cursor: Option<String>,
    /// The file pointer `ReadFile` starts at and advances (ledger row 92).
    position: usize,
}

/// The volume serial number `file_id` answers (one volume for the whole tree).
const VOLUME_SERIAL: u64 = 0x5157_0001;

/// What is at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// A drive root or a share's root.
    Root,
    Dir,
    File,
    Link {
        directory: bool,
    },
    /// A directory with a volume mounted on it.
    MountedFolder(usize),
}

/// The path the simulator looks up: `\\?\C:\x` is `C:\x` and `\\?\UNC\srv\s` is `\\srv\s` (the
/// prefix only turns off Win32 path normalisation, which the simulator does not do anyway).
fn text(path: &[u16]) -> String {
    let p = String::from_utf16_lossy(path);
    if let Some(rest) = p.strip_prefix(r"\\?\UNC\") {
        format!(r"\\{rest}")
    } else if let Some(rest) = p.strip_prefix(r"\\?\")
        && !rest.starts_with("Volume{")
    {
        rest.to_string()
    } else {
        p
    }
}

fn is_root(k: &str) -> bool {
    k.len() == 3 && k.as_bytes()[1] == b':'
}

impl State {
    /// What is at `path`, if anything.
    pub(super) fn entry(&self, path: &str) -> Option<Entry> {
        // A volume's GUID path names its root directory, there while the volume can be seen and
        // holds a filesystem.
        if path
            .get(..11)
            .is_some_and(|p| p.eq_ignore_ascii_case(r"\\?\Volume{"))
        {
            return self
                .volume_named(path)
                .filter(|&v| self.volumes[v].fs.is_some())
                .map(|_| Entry::Root);
        }
        if let Some(up) = smb::unc_exists(self, path) {
            return up.then_some(Entry::Root);
        }
        let k = key(path);
        if let Some(l) = self.links.get(&k) {
            return Some(Entry::Link {
                directory: l.directory,
            });
        }
        if self.files.contains_key(&k) {
            return Some(Entry::File);
        }
        if let Some((_, v)) = self.mount_points.get(&mp_key(path)) {
            return Some(if is_root(&k) {
                Entry::Root
            } else {
                Entry::MountedFolder(*v)
            });
        }
        self.dirs.contains_key(&k).then_some(Entry::Dir)
    }

    /// The error for nothing at `path`: ERROR_PATH_NOT_FOUND when its directory is missing too.
    pub(super) fn missing(&self, path: &str) -> OsError {
        if let Some(e) = smb::unc_error(self, path) {
            return e;
        }
        match parent_key(&key(path)) {
            Some(p) if self.entry(&p).is_none() => OsError::new(code::PATH_NOT_FOUND),
            _ => OsError::new(code::FILE_NOT_FOUND),
        }
    }

    fn attributes(&self, path: &str, e: Entry) -> u32 {
        let readonly = if self.readonly.contains(&key(path)) {
            attr::READONLY
        } else {
            0
        };
        readonly
            | match e {
                Entry::Root | Entry::Dir => attr::DIRECTORY,
                Entry::File => attr::ARCHIVE,
                Entry::Link { directory: true } | Entry::MountedFolder(_) => {
                    attr::DIRECTORY | attr::REPARSE_POINT
                }
                Entry::Link { directory: false } => attr::ARCHIVE | attr::REPARSE_POINT,
            }
    }

    /// The direct children of the directory `k`, as named when created.
    pub(super) fn children(&self, k: &str) -> Vec<String> {
        let prefix = format!("{}\\", k.trim_end_matches('\\'));
        let direct = |c: &str| {
            c.len() > prefix.len() && c.starts_with(&prefix) && !c[prefix.len()..].contains('\\')
        };
        let name = |t: &str| t.rsplit(['\\', '/']).next().unwrap_or(t).to_string();
        let mut out: Vec<String> = self
            .dirs
            .iter()
            .filter(|(c, _)| direct(c))
            .map(|(_, t)| name(t.trim_end_matches('\\')))
            .collect();
        out.extend(self.files.keys().filter(|c| direct(c)).map(|c| name(c)));
        out.extend(
            self.links
                .iter()
                .filter(|(c, _)| direct(c))
                .map(|(_, l)| name(&l.text)),
        );
        out
    }

    /// Creating an entry at `path` needs its parent to be a directory (a plain one, a root or a
    /// mounted folder): ERROR_PATH_NOT_FOUND otherwise.
    pub(super) fn parent_is_directory(&self, path: &str) -> Win32Result<()> {
        let parent = parent_key(&key(path)).unwrap_or_default();
        match self.entry(&parent) {
            Some(Entry::Dir | Entry::Root | Entry::MountedFolder(_)) => Ok(()),
            _ => Err(OsError::new(code::PATH_NOT_FOUND)),
        }
    }

    /// What the handle from [`FileApi::open_entry`] is open on.
    fn opened(&self, handle: u64) -> Win32Result<&OpenEntry> {
        self.entries
            .get(&handle)
            .ok_or(OsError::new(code::INVALID_HANDLE))
    }

    /// Whether an open handle without FILE_SHARE_DELETE holds `k`.
    pub(super) fn pinned(&self, k: &str) -> bool {
        self.entries
            .values()
            .any(|o| o.key == k && o.share & SHARE_DELETE == 0)
    }

    /// Whether a handle open with DELETE access holds `k` (a later open not sharing delete
    /// fails: CreateFileW, "If this flag is not specified, but the file or device has been
    /// opened for delete access, the function fails").
    fn opened_for_delete(&self, k: &str) -> bool {
        self.entries
            .values()
            .any(|o| o.key == k && o.access & access::DELETE != 0)
    }

    /// ERROR_SHARING_VIOLATION when an open of `k` with `access` and `share` conflicts with
    /// the handles open on it.
    fn may_open(&self, k: &str, access: u32, share: u32) -> Win32Result<()> {
        let wants_delete = access & access::DELETE != 0;
        if (wants_delete && self.pinned(k))
            || (share & SHARE_DELETE == 0 && self.opened_for_delete(k))
        {
            return Err(OsError::new(code::SHARING_VIOLATION));
        }
        Ok(())
    }

    /// Opens a handle of the daemon's on `key`, counting the most it ever held at once.
    fn open_handle(&mut self, key: String, access: u32, share: u32, volume_root: bool) -> u64 {
        self.next_handle += 4;
        let h = self.next_handle;
        let open = OpenEntry {
            key,
            share,
            access,
            volume_root,
            cursor: None,
            position: 0,
        };
        self.entries.insert(h, open);
        self.entry_handles_peak = self.entry_handles_peak.max(self.entries.len());
        h
    }

    /// The file ID of the entry `k`: given the first time it is asked for, then kept with the
    /// entry across renames (`rekey`) and never given to another.
    fn id_of(&mut self, k: &str) -> u64 {
        if let Some(&id) = self.ids.get(k) {
            return id;
        }
        self.next_id += 1;
        let id = self.next_id;
        self.ids.insert(k.to_string(), id);
        id
    }

    /// What deleting the entry at `path` needs, beyond its type: write access to it and nobody
    /// holding it without sharing delete.
    fn deletable(&self, path: &str) -> Win32Result<()> {
        let k = key(path);
        if self.readonly.contains(&k) {
            return Err(OsError::new(code::ACCESS_DENIED));
        }
        if self.pinned(&k) {
            return Err(OsError::new(code::SHARING_VIOLATION));
        }
        Ok(())
    }

    /// ERROR_ACCESS_DENIED when the entry at `path` is delete-pending (STATUS_DELETE_PENDING,
    /// which Win32 reports as access denied).
    pub(super) fn not_pending(&self, path: &str) -> Win32Result<()> {
        if self.delete_pending.contains(&key(path)) {
            return Err(OsError::new(code::ACCESS_DENIED));
        }
        Ok(())
    }

    /// Deletes the entry at `path` once checked: at once when nothing holds it open, else at
    /// the last close (DeleteFileW and RemoveDirectoryW, Remarks: "marks a file for deletion on
    /// close").
    fn delete(&mut self, path: &str) {
        let k = key(path);
        if self.entries.values().any(|o| o.key == k) {
            self.delete_pending.insert(k);
        } else {
            self.forget(path);
        }
    }

    /// Closes an entry handle; the last close of a delete-pending entry deletes it.
    pub(super) fn close_entry(&mut self, handle: u64) {
        let Some(o) = self.entries.remove(&handle) else {
            return;
        };
        if self.delete_pending.contains(&o.key) && !self.entries.values().any(|e| e.key == o.key) {
            self.delete_pending.remove(&o.key);
            let text = self.dirs.get(&o.key).cloned().unwrap_or(o.key);
            self.forget(&text);
        }
    }

    /// Removes the entry `k` and its bookkeeping (not its children).
    fn forget(&mut self, path: &str) {
        let k = key(path);
        self.dirs.remove(&k);
        self.files.remove(&k);
        self.links.remove(&k);
        self.readonly.remove(&k);
        self.ids.remove(&k);
        self.mount_points.remove(&mp_key(path));
    }

    /// Where following the entry at `path` leads: a link's target (one hop), a mounted folder's
    /// volume root when the volume can be seen.
    fn follow(&self, path: &str) -> Win32Result<String> {
        match self.entry(path) {
            None => Err(self.missing(path)),
            Some(Entry::Link { .. }) => {
                let target = self.links[&key(path)].target.clone();
                match self.entry(&target) {
                    Some(Entry::Link { .. }) | None => Err(OsError::new(code::FILE_NOT_FOUND)),
                    Some(_) => Ok(target),
                }
            }
            Some(Entry::MountedFolder(v)) if !self.visible(v) => Err(OsError::new(code::NOT_READY)),
            Some(_) => Ok(path.to_string()),
        }
    }

    /// The volume `v` is dismounted from the folder `mp`: what was below the folder is on the
    /// volume, not in the folder, which is an empty directory again.
    pub(super) fn hide_volume_contents(&mut self, mp: &str, v: usize) {
        let prefix = format!("{}\\", key(mp).trim_end_matches('\\'));
        let below = |k: &String| k.starts_with(&prefix);
        let mut moved: Vec<(String, Option<Vec<u8>>)> = self
            .dirs
            .iter()
            .filter(|(k, _)| below(k))
            .map(|(k, _)| (k[prefix.len()..].to_string(), None))
            .collect();
        moved.extend(
            self.files
                .iter()
                .filter(|(k, _)| below(k))
                .map(|(k, c)| (k[prefix.len()..].to_string(), Some(c.clone()))),
        );
        self.dirs.retain(|k, _| !below(k));
        self.files.retain(|k, _| !below(k));
        self.ids.retain(|k, _| !below(k));
        self.volumes[v].contents = moved;
    }

    /// The volume `v` is mounted on the folder `mp`: its contents show below it.
    pub(super) fn show_volume_contents(&mut self, mp: &str, v: usize) {
        let base = mp.trim_end_matches('\\');
        for (rel, file) in std::mem::take(&mut self.volumes[v].contents) {
            let path = format!("{base}\\{rel}");
            match file {
                None => {
                    self.dirs.insert(key(&path), path);
                }
                Some(contents) => {
                    self.files.insert(key(&path), contents);
                }
            }
        }
    }

    /// Makes `path` and its parents directories.
    pub(super) fn mkdir_all(&mut self, path: &str) {
        let k = key(path);
        if let Some(parent) = parent_key(&k)
            && !self.dirs.contains_key(&parent)
            && !is_root(&parent)
        {
            let text = &path[..parent.len().min(path.len())];
            self.mkdir_all(text);
        }
        self.dirs.entry(k).or_insert_with(|| path.to_string());
    }

    /// Adds a symbolic link at `link` to `target`.
    pub(super) fn add_link(
        &mut self,
        link: &str,
        target: &str,
        directory: bool,
    ) -> Win32Result<()> {
        self.not_pending(link)?;
        if self.entry(link).is_some() {
            return Err(OsError::new(code::ALREADY_EXISTS));
        }
        self.parent_is_directory(link)?;
        self.links.insert(
            key(link),
            Link {
                target: target.to_string(),
                text: link.to_string(),
                directory,
            },
        );
        Ok(())
    }
}

/// The reparse tag of an entry, 0 when it is not a reparse point.
fn tag(e: Entry) -> u32 {
    match e {
        Entry::Link { .. } => IO_REPARSE_TAG_SYMLINK,
        Entry::MountedFolder(_) => IO_REPARSE_TAG_MOUNT_POINT,
        _ => 0,
    }
}

/// A reparse data buffer: tag, data length, reserved, then the data.
fn reparse_buffer(tag: u32, data: &[u8]) -> Vec<u8> {
    let mut out = tag.to_le_bytes().to_vec();
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The names' offsets and lengths and the names: the layout symbolic links and mount points
/// share (a symbolic link's has its flags between the two).
fn names_data(substitute: &str, print: &str, flags: Option<u32>) -> Vec<u8> {
    let sub: Vec<u8> = substitute
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let print: Vec<u8> = print.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let mut data = Vec::new();
    data.extend_from_slice(&0u16.to_le_bytes());
    data.extend_from_slice(&(sub.len() as u16).to_le_bytes());
    data.extend_from_slice(&(sub.len() as u16).to_le_bytes());
    data.extend_from_slice(&(print.len() as u16).to_le_bytes());
    if let Some(f) = flags {
        data.extend_from_slice(&f.to_le_bytes());
    }
    data.extend_from_slice(&sub);
    data.extend_from_slice(&print);
    data
}

/// The reparse data of a symbolic link to `target`: an absolute target's substitute name is its
/// NT path (`\??\C:\...`, `\??\UNC\server\share\...`), a relative one is stored as given.
fn symlink_data(target: &str) -> Vec<u8> {
    let b = target.as_bytes();
    let (substitute, flags) = if let Some(unc) = target.strip_prefix(r"\\") {
        (format!(r"\??\UNC\{unc}"), 0)
    } else if b.len() >= 3 && b[1] == b':' {
        (format!(r"\??\{target}"), 0)
    } else {
        (target.to_string(), SYMLINK_FLAG_RELATIVE)
    };
    reparse_buffer(
        IO_REPARSE_TAG_SYMLINK,
        &names_data(&substitute, target, Some(flags)),
    )
}

/// The reparse data of a folder the volume `name` (`\\?\Volume{GUID}\`) is mounted on.
fn mount_point_data(name: &str) -> Vec<u8> {
    let nt = name.replacen(r"\\?\", r"\??\", 1);
    reparse_buffer(IO_REPARSE_TAG_MOUNT_POINT, &names_data(&nt, "", None))
}

impl FileApi for SimWindows {
    fn file_attributes(&self, path: &[u16]) -> Win32Result<u32> {
        let s = self.enter("file_attributes")?;
        let p = s.through_links(&text(path))?;
        s.not_pending(&p)?;
        match s.entry(&p) {
            Some(e) => Ok(s.attributes(&p, e)),
            None => Err(s.missing(&p)),
        }
    }

    fn find_entry(&self, path: &[u16]) -> Win32Result<(u32, u32)> {
        let s = self.enter("find_entry")?;
        let p = s.through_links(&text(path))?;
        match s.entry(&p) {
            // A root is not an entry of any directory.
            None | Some(Entry::Root) => Err(s.missing(&p)),
            Some(e) => Ok((s.attributes(&p, e), tag(e))),
        }
    }

    fn open_entry(&self, path: &[u16], access: u32, share: u32, follow: bool) -> Win32Result<u64> {
        let mut s = self.enter("open_entry")?;
        let p = s.through_links(&text(path))?;
        s.not_pending(&p)?;
        let at = if follow {
            s.follow(&p)?
        } else if s.entry(&p).is_some() {
            p
        } else {
            return Err(s.missing(&p));
        };
        let volume_root = follow && matches!(s.entry(&at), Some(Entry::MountedFolder(_)));
        s.not_pending(&at)?;
        let key = key(&at);
        s.may_open(&key, access, share)?;
        Ok(s.open_handle(key, access, share, volume_root))
    }

    fn attribute_tag(&self, handle: u64) -> Win32Result<(u32, u32)> {
        let s = self.enter("attribute_tag")?;
        let open = s.opened(handle)?;
        if open.volume_root {
            return Ok((attr::DIRECTORY, 0));
        }
        let k = open.key.clone();
        let e = s.entry(&k).ok_or(OsError::new(code::FILE_NOT_FOUND))?;
        Ok((s.attributes(&k, e), tag(e)))
    }

    fn basic_attributes(&self, handle: u64) -> Win32Result<u32> {
        self.attribute_tag(handle).map(|(a, _)| a)
    }

    fn set_basic_attributes(&self, handle: u64, attributes: u32) -> Win32Result<()> {
        let mut s = self.enter("set_basic_attributes")?;
        let k = s.opened(handle)?.key.clone();
        if attributes & attr::READONLY != 0 {
            s.readonly.insert(k);
        } else {
            s.readonly.remove(&k);
        }
        Ok(())
    }

    fn reparse_data(&self, path: &[u16]) -> Win32Result<Vec<u8>> {
        let s = self.enter("reparse_data")?;
        let p = s.through_links(&text(path))?;
        s.not_pending(&p)?;
        match s.entry(&p) {
            Some(Entry::Link { .. }) => Ok(symlink_data(&s.links[&key(&p)].target)),
            Some(Entry::MountedFolder(v)) => Ok(mount_point_data(&s.volumes[v].names[0])),
            Some(_) => Err(OsError::new(code::NOT_A_REPARSE_POINT)),
            None => Err(s.missing(&p)),
        }
    }

    fn create_directory(&self, path: &[u16]) -> Win32Result<()> {
        let mut s = self.enter("create_directory")?;
        let p = s.through_links(&text(path))?;
        s.not_pending(&p)?;
        if s.entry(&p).is_some() {
            return Err(OsError::new(code::ALREADY_EXISTS));
        }
        s.parent_is_directory(&p)?;
        s.dirs.insert(key(&p), p);
        Ok(())
    }

    fn remove_directory(&self, path: &[u16]) -> Win32Result<()> {
        let mut s = self.enter("remove_directory")?;
        let p = s.through_links(&text(path))?;
        s.not_pending(&p)?;
        match s.entry(&p) {
            None => return Err(s.missing(&p)),
            Some(Entry::Root) => return Err(OsError::new(code::ACCESS_DENIED)),
            Some(Entry::File | Entry::Link { directory: false }) => {
                return Err(OsError::new(ERROR_DIRECTORY));
            }
            Some(Entry::Dir) if !s.children(&key(&p)).is_empty() => {
                s.deletable(&p)?;
                return Err(OsError::new(code::DIR_NOT_EMPTY));
            }
            Some(Entry::Dir | Entry::Link { directory: true } | Entry::MountedFolder(_)) => {}
        }
        s.deletable(&p)?;
        s.delete(&p);
        Ok(())
    }

    fn delete_file(&self, path: &[u16]) -> Win32Result<()> {
        let mut s = self.enter("delete_file")?;
        let p = s.through_links(&text(path))?;
        s.not_pending(&p)?;
        match s.entry(&p) {
            None => Err(s.missing(&p)),
            Some(Entry::File | Entry::Link { directory: false }) => {
                s.deletable(&p)?;
                s.delete(&p);
                Ok(())
            }
            Some(_) => Err(OsError::new(code::ACCESS_DENIED)),
        }
    }

    fn create_symbolic_link(&self, link: &[u16], target: &[u16], flags: u32) -> Win32Result<()> {
        let mut s = self.enter("create_symbolic_link")?;
        if flags & !(link_flag::DIRECTORY | link_flag::ALLOW_UNPRIVILEGED_CREATE) != 0 {
            return Err(OsError::new(code::INVALID_PARAMETER));
        }
        let link = s.through_links(&text(link))?;
        s.add_link(&link, &text(target), flags & link_flag::DIRECTORY != 0)
    }

    fn rename_entry(&self, from: &[u16], to: &[u16]) -> Win32Result<()> {
        let mut s = self.enter("rename_entry")?;
        s.rename_checked(&text(from), &text(to))
    }

    fn open_child(&self, dir: u64, name: &[u16], access: u32, share: u32) -> Win32Result<u64> {
        let mut s = self.enter("open_child")?;
        let parent = s.opened(dir)?.key.clone();
        let n = String::from_utf16_lossy(name);
        // One component: STATUS_OBJECT_NAME_INVALID otherwise.
        if n.is_empty() || n == "." || n == ".." || n.contains(['\\', '/']) {
            return Err(OsError::new(ERROR_INVALID_NAME));
        }
        if !matches!(
            s.entry(&parent),
            Some(Entry::Dir | Entry::Root | Entry::MountedFolder(_))
        ) {
            return Err(OsError::new(ERROR_DIRECTORY));
        }
        // Relative to the directory itself: no link on the way is followed, the name is looked
        // up where the directory is now.
        let p = format!("{parent}\\{n}");
        s.not_pending(&p)?;
        if s.entry(&p).is_none() {
            return Err(OsError::new(code::FILE_NOT_FOUND));
        }
        let k = key(&p);
        s.may_open(&k, access, share)?;
        Ok(s.open_handle(k, access, share, false))
    }

    fn read_dir(&self, dir: u64, restart: bool, buffer: usize) -> Win32Result<Vec<DirEntry>> {
        let mut s = self.enter("read_dir")?;
        let open = s.opened(dir)?.clone();
        if open.access & access::LIST_DIRECTORY == 0 {
            return Err(OsError::new(code::ACCESS_DENIED));
        }
        let k = open.key.clone();
        if !matches!(
            s.entry(&k),
            Some(Entry::Dir | Entry::Root | Entry::MountedFolder(_))
        ) {
            return Err(OsError::new(code::INVALID_PARAMETER));
        }
        let mut names: Vec<(String, String)> = s
            .children(&k)
            .into_iter()
            .map(|n| (n.to_lowercase(), n))
            .collect();
        names.sort();
        if !is_root(&k) {
            // Sorted before any name.
            names.splice(0..0, [".", ".."].map(|n| (n.to_string(), n.to_string())));
        }
        let after = if restart { None } else { open.cursor.clone() };
        let mut used = 0;
        let mut out = Vec::new();
        for (low, name) in names
            .into_iter()
            .filter(|(low, _)| after.as_ref().is_none_or(|a| low > a))
        {
            let units: Vec<u16> = name.encode_utf16().collect();
            let len = dir_record_len(units.len());
            if used + len > buffer {
                if out.is_empty() {
                    // Not even one record fits.
                    return Err(OsError::new(code::MORE_DATA));
                }
                break;
            }
            used += len;
            let path = format!("{k}\\{low}");
            let attributes = match name.as_str() {
                "." | ".." => attr::DIRECTORY,
                _ => s.entry(&path).map_or(0, |e| s.attributes(&path, e)),
            };
            let file_id = match name.as_str() {
                "." | ".." => 0,
                _ => s.id_of(&key(&path)),
            };
            out.push((
                low,
                DirEntry {
                    name: units,
                    attributes,
                    file_id,
                },
            ));
        }
        let cursor = out.last().map(|(low, _)| low.clone()).or(after);
        if let Some(o) = s.entries.get_mut(&dir) {
            o.cursor = cursor;
        }
        s.dir_batch_peak = s.dir_batch_peak.max(out.len());
        Ok(out.into_iter().map(|(_, e)| e).collect())
    }

    fn file_id(&self, handle: u64) -> Win32Result<FileId> {
        let mut s = self.enter("file_id")?;
        let open = s.opened(handle)?.clone();
        // A mounted volume's root directory: an ID on that volume.
        if open.volume_root
            && let Some(Entry::MountedFolder(v)) = s.entry(&open.key)
        {
            return Ok((v as u64 + 1, 5));
        }
        if s.entry(&open.key).is_none() {
            return Err(OsError::new(code::FILE_NOT_FOUND));
        }
        let id = s.id_of(&open.key);
        Ok((VOLUME_SERIAL, u128::from(id)))
    }

    fn delete_on_close(&self, handle: u64) -> Win32Result<()> {
        let mut s = self.enter("delete_on_close")?;
        let open = s.opened(handle)?.clone();
        if open.access & access::DELETE == 0 {
            return Err(OsError::new(code::ACCESS_DENIED));
        }
        let k = open.key;
        match s.entry(&k) {
            None => return Err(OsError::new(code::FILE_NOT_FOUND)),
            Some(Entry::Root) => return Err(OsError::new(code::ACCESS_DENIED)),
            Some(_) if s.readonly.contains(&k) => return Err(OsError::new(code::ACCESS_DENIED)),
            Some(Entry::Dir) if !s.children(&k).is_empty() => {
                return Err(OsError::new(code::DIR_NOT_EMPTY));
            }
            Some(_) => {}
        }
        s.delete_pending.insert(k);
        Ok(())
    }

    fn dacl_sddl(&self, path: &[u16]) -> Win32Result<String> {
        self.dacl_of(&text(path))
    }

    fn read_handle(&self, handle: u64, max: usize) -> Win32Result<Vec<u8>> {
        let mut s = self.enter("read_handle")?;
        let open = s.opened(handle)?.clone();
        // "The hFile parameter must have been created with read access."
        if open.access & access::READ_DATA == 0 {
            return Err(OsError::new(code::ACCESS_DENIED));
        }
        let k = open.key;
        let data = match s.entry(&k) {
            None => return Err(OsError::new(code::FILE_NOT_FOUND)),
            // A volume's root, a directory: no data to read (inferred: the code, which NTFS
            // gives as STATUS_INVALID_DEVICE_REQUEST).
            _ if open.volume_root => return Err(OsError::new(code::INVALID_FUNCTION)),
            Some(
                Entry::Root
                | Entry::Dir
                | Entry::MountedFolder(_)
                | Entry::Link { directory: true },
            ) => {
                return Err(OsError::new(code::INVALID_FUNCTION));
            }
            // A file symbolic link opened as itself: its target is not read, and its own data
            // stream is empty (inferred).
            Some(Entry::Link { directory: false }) => &[][..],
            Some(Entry::File) => &s.files[&k][..],
        };
        // From the file pointer; fewer bytes near the end, none at the end ("When a synchronous
        // read operation reaches the end of a file, ReadFile returns TRUE and sets
        // *lpNumberOfBytesRead to zero").
        let from = open.position.min(data.len());
        let to = from.saturating_add(max).min(data.len());
        let out = data[from..to].to_vec();
        // "Each read and write operation advances the file pointer by the number of bytes
        // being read and written" (File Pointers).
        if let Some(o) = s.entries.get_mut(&handle) {
            o.position = from + out.len();
        }
        Ok(out)
    }
}

/// `C:\ProgramData`'s DACL as Windows sets it up (`icacls C:\ProgramData`): full control for
/// SYSTEM, Administrators and (inherit-only) CREATOR OWNER, read and execute for
/// BUILTIN\Users, and for them too, on the folder and folders below, "write data / add file,
/// append data / add subdirectory, write extended attributes, write attributes": what the
/// Vista page says, that an application may write in CSIDL_COMMON_APPDATA (ledger row 52;
/// inferred for current builds).
pub const PROGRAMDATA_SDDL: &str = "D:PAI(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICIIO;GA;;;CO)(A;OICI;0x1200a9;;;BU)(A;CI;DCLCRPCR;;;BU)";

/// The DACL of an entry nothing set one on: what it inherits from a private parent.
const INHERITED_SDDL: &str = "D:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)";

impl SimWindows {
    /// Sets the DACL (SDDL) `dacl_sddl` answers for `path`.
    pub fn set_dacl_sddl(&self, path: &str, sddl: &str) {
        self.lock().dacls.insert(key(path), sddl.to_string());
    }

    /// `dacl_sddl`: the DACL set on the entry, `C:\ProgramData`'s ([`PROGRAMDATA_SDDL`]), or
    /// the inherited private one.
    pub(super) fn dacl_of(&self, path: &str) -> Win32Result<String> {
        let s = self.enter("dacl_sddl")?;
        let k = key(path);
        if let Some(d) = s.dacls.get(&k) {
            return Ok(d.clone());
        }
        if k == key(r"C:\ProgramData") {
            return Ok(PROGRAMDATA_SDDL.to_string());
        }
        match s.entry(path) {
            Some(_) => Ok(INHERITED_SDDL.to_string()),
            None => Err(s.missing(path)),
        }
    }
}

impl SimWindows {
    /// Sets FILE_ATTRIBUTE_READONLY on the entry at `path`.
    pub fn set_readonly(&self, path: &str) {
        self.lock().readonly.insert(key(path));
    }

    /// Another process opens the entry at `path` sharing read, write and delete, and closes it
    /// after `held` (of the simulated clock, which the host's waits advance), or when the handle
    /// returned is closed (`Win32::close`) before that.
    pub fn hold_entry(&self, path: &str, held: std::time::Duration) -> u64 {
        let mut s = self.lock();
        s.next_handle += 4;
        let h = s.next_handle;
        let share = crate::windows::os::files::access::SHARE_READ
            | crate::windows::os::files::access::SHARE_WRITE
            | SHARE_DELETE;
        let open = OpenEntry {
            key: key(path),
            share,
            access: 0,
            volume_root: false,
            cursor: None,
            position: 0,
        };
        s.entries.insert(h, open);
        let at = s.clock + held;
        s.closes.push((at, h));
        h
    }

    /// Another process renames the entry at `from` to `to` as [`FileApi::rename_entry`] does.
    pub fn rename(&self, from: &str, to: &str) -> Win32Result<()> {
        self.lock().rename_checked(from, to)
    }

    /// The most file and directory handles the daemon held at once since the last
    /// [`Self::reset_peaks`], and the most entries one listing read returned.
    pub fn peaks(&self) -> (usize, usize) {
        let s = self.lock();
        (s.entry_handles_peak, s.dir_batch_peak)
    }

    /// Starts [`Self::peaks`] again from the handles open now.
    pub fn reset_peaks(&self) {
        let mut s = self.lock();
        s.entry_handles_peak = s.entries.len();
        s.dir_batch_peak = 0;
    }

    /// How many file and directory handles are open now.
    pub fn open_entry_handles(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether the entry at `path` is delete-pending.
    pub fn delete_pending(&self, path: &str) -> bool {
        self.lock().delete_pending.contains(&key(path))
    }

    /// Whether an entry (of any kind) is at `path`.
    pub fn entry_exists(&self, path: &str) -> bool {
        self.lock().entry(path).is_some()
    }

    /// The names of the entries in the directory `path` (a driver's own `os.ReadDir` through
    /// its host-path mount); empty when there is none.
    pub fn dir_entries(&self, path: &str) -> Vec<String> {
        self.lock().children(&key(path))
    }

    /// Removes the plain file at `path` (a driver's own `os.Remove`); false when there is none.
    pub fn remove_file(&self, path: &str) -> bool {
        let mut s = self.lock();
        let p = key(path);
        let found = matches!(s.entry(&p), Some(Entry::File));
        if found {
            s.forget(&p);
        }
        found
    }
}
