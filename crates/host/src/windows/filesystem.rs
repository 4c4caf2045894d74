//! Windows implementation of the filesystem group ([`FilesystemHost`] and [`LinkProbe`]).
//!
//! Semantics follow upstream-behaviour.md §2.3 and §7 items 6–8:
//!
//! * A reparse point (symbolic link, junction, volume mount point, or any other tag) is removed
//!   as itself and never descended into: `RemoveDirectoryW` for a directory reparse point
//!   ("when lpPathName refers to a directory junction, RemoveDirectory will remove the specified
//!   link regardless of whether the target directory is empty or not"), `DeleteFileW` for a
//!   file link ("If the path points to a symbolic link, the symbolic link is deleted, not the
//!   target", *Symbolic Link Effects on File Systems Functions*). A volume mount point is first
//!   given to `DeleteVolumeMountPointW` so the mount manager forgets it ("Deleting a mounted
//!   folder does not cause the underlying directory to be deleted"), then removed as a directory.
//! * Whether something is a reparse point is read with `GetFileAttributesW`, which "returns
//!   information about the link itself and not the link destination". Before descending into a
//!   directory, it is opened with `FILE_FLAG_OPEN_REPARSE_POINT` (so a link swapped in is opened
//!   as itself) and checked through that handle (`FileAttributeTagInfo`); the handle is held
//!   without `FILE_SHARE_DELETE` while the directory is emptied, so the directory cannot be
//!   renamed away and replaced by a junction meanwhile.
//! * `FILE_ATTRIBUTE_READONLY` blocks deletion; it is cleared (through a handle opened on the
//!   entry itself) when a delete fails with `ERROR_ACCESS_DENIED`, and the delete retried.
//! * Paths of 248 UTF-16 units or more (the documented `CreateDirectoryW` limit of `MAX_PATH`
//!   minus an 8.3 name) are passed with the `\\?\` prefix, which lifts the limit to 32,767.

use crate::reparse::{self, LinkDestination, ReparsePoint};
use csi_proxy_core::filesystem::FilesystemHost;
use csi_proxy_core::paths::{LinkProbe, LinkTarget};
use std::ffi::c_void;
use std::io;
use windows::Win32::Foundation::{
    CloseHandle, ERROR_ACCESS_DENIED, ERROR_BAD_NET_NAME, ERROR_BAD_NETPATH,
    ERROR_CANT_RESOLVE_FILENAME, ERROR_DIR_NOT_EMPTY, ERROR_DIRECTORY, ERROR_FILE_NOT_FOUND,
    ERROR_INVALID_NAME, ERROR_INVALID_PARAMETER, ERROR_NO_MORE_FILES, ERROR_NOT_READY,
    ERROR_PATH_NOT_FOUND, ERROR_UNRECOGNIZED_VOLUME, HANDLE, WIN32_ERROR,
};
use windows::Win32::Storage::FileSystem::{
    CreateFileW, CreateSymbolicLinkW, DeleteFileW, DeleteVolumeMountPointW,
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_NORMAL, FILE_ATTRIBUTE_READONLY,
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_ATTRIBUTE_TAG_INFO, FILE_BASIC_INFO,
    FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT, FILE_READ_ATTRIBUTES,
    FILE_SHARE_DELETE, FILE_SHARE_MODE, FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_WRITE_ATTRIBUTES,
    FIND_FIRST_EX_FLAGS, FileAttributeTagInfo, FileBasicInfo, FindClose, FindExInfoBasic,
    FindExSearchNameMatch, FindFirstFileExW, FindNextFileW, GetFileAttributesW,
    GetFileInformationByHandleEx, INVALID_FILE_ATTRIBUTES, MAXIMUM_REPARSE_DATA_BUFFER_SIZE,
    OPEN_EXISTING, RemoveDirectoryW, SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE,
    SYMBOLIC_LINK_FLAG_DIRECTORY, SYMBOLIC_LINK_FLAGS, SetFileInformationByHandle,
    WIN32_FIND_DATAW,
};
use windows::Win32::System::IO::DeviceIoControl;
use windows::Win32::System::Ioctl::FSCTL_GET_REPARSE_POINT;
use windows::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows::core::{PCWSTR, s, w};

/// How many times one entry is re-examined when it keeps changing under us.
const MAX_ATTEMPTS: usize = 16;

/// Paths this long (UTF-16 units) or longer get the `\\?\` prefix (`MAX_PATH` − 12).
const SHORT_PATH_LIMIT: usize = 248;

/// The Windows filesystem host.
#[derive(Debug, Default, Clone, Copy)]
pub struct WindowsFilesystemHost {
    _private: (),
}

impl WindowsFilesystemHost {
    /// A host acting on the local filesystem.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Whether this process runs under Wine (`ntdll.dll` exports `wine_get_version`, which no
/// Windows ntdll does). Wine fakes some operations (symbolic links), so tests skip those.
pub fn running_under_wine() -> bool {
    // SAFETY: the module name is a static NUL-terminated UTF-16 string; GetModuleHandleW only
    // looks up a module already loaded (ntdll is mapped into every process) and does not change
    // its reference count, so nothing needs releasing.
    let Ok(ntdll) = (unsafe { GetModuleHandleW(w!("ntdll.dll")) }) else {
        return false;
    };
    // SAFETY: `ntdll` is a valid module handle and the name a static NUL-terminated string;
    // the returned pointer is only tested for presence, never called.
    unsafe { GetProcAddress(ntdll, s!("wine_get_version")) }.is_some()
}

// ---------------------------------------------------------------------------------------------
// Paths and errors

/// A path as UTF-16 without terminator (names on NTFS need not be valid UTF-16).
type WPath = Vec<u16>;

fn wpath(path: &str) -> io::Result<WPath> {
    if path.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path contains a NUL character",
        ));
    }
    Ok(path.encode_utf16().collect())
}

fn starts_with_ascii(p: &[u16], prefix: &str) -> bool {
    p.len() >= prefix.len()
        && p.iter()
            .zip(prefix.bytes())
            .all(|(&a, b)| a == u16::from(b))
}

fn is_sep(u: u16) -> bool {
    u == u16::from(b'\\') || u == u16::from(b'/')
}

/// The NUL-terminated form handed to Win32: `\\?\`-prefixed (with `/` turned into `\`, as the
/// prefix disables that normalisation) when the path is long, as given otherwise.
fn z(p: &[u16]) -> Vec<u16> {
    let verbatim = [r"\\?\", r"\\.\", r"\??\"]
        .iter()
        .any(|pre| starts_with_ascii(p, pre));
    let drive_absolute = p.len() >= 3
        && p[0] < 0x80
        && (p[0] as u8).is_ascii_alphabetic()
        && p[1] == u16::from(b':')
        && is_sep(p[2]);
    let unc = p.len() >= 2 && is_sep(p[0]) && is_sep(p[1]);
    let mut out: Vec<u16> = Vec::with_capacity(p.len() + 9);
    if p.len() >= SHORT_PATH_LIMIT && !verbatim && (drive_absolute || unc) {
        let (prefix, rest) = if unc {
            (r"\\?\UNC\", &p[2..])
        } else {
            (r"\\?\", p)
        };
        out.extend(prefix.encode_utf16());
        out.extend(
            rest.iter()
                .map(|&u| if is_sep(u) { u16::from(b'\\') } else { u }),
        );
    } else {
        out.extend_from_slice(p);
    }
    out.push(0);
    out
}

fn join(parent: &[u16], name: &[u16]) -> WPath {
    let mut p = parent.to_vec();
    if p.last().is_some_and(|&u| !is_sep(u)) {
        p.push(u16::from(b'\\'));
    }
    p.extend_from_slice(name);
    p
}

fn show(p: &[u16]) -> String {
    String::from_utf16_lossy(p)
}

/// A windows-rs error as the `io::Error` std would give: `HRESULT_FROM_WIN32(code)` becomes
/// the Win32 code, so `kind()` and the message are right.
fn os_error(e: windows::core::Error) -> io::Error {
    let hr = e.code().0 as u32;
    if hr & 0xFFFF_0000 == 0x8007_0000 {
        io::Error::from_raw_os_error((hr & 0xFFFF) as i32)
    } else {
        io::Error::other(e)
    }
}

fn is_code(e: &io::Error, code: WIN32_ERROR) -> bool {
    e.raw_os_error() == Some(code.0 as i32)
}

fn not_found(e: &io::Error) -> bool {
    is_code(e, ERROR_FILE_NOT_FOUND) || is_code(e, ERROR_PATH_NOT_FOUND)
}

/// An error with the operation and the (inner) path it concerns, keeping its kind.
fn with_context(e: io::Error, what: &str, path: &[u16]) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", show(path)))
}

// ---------------------------------------------------------------------------------------------
// Handles

/// An open file or directory handle, closed on drop.
struct Handle(HANDLE);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful CreateFileW, is owned by this value only,
        // and is closed exactly once here.
        let _ = unsafe { CloseHandle(self.0) };
    }
}

/// A find handle from FindFirstFileExW, closed with FindClose on drop.
struct FindHandle(HANDLE);

impl Drop for FindHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful FindFirstFileExW, is owned by this value
        // only, and is closed exactly once here.
        let _ = unsafe { FindClose(self.0) };
    }
}

const SHARE_ALL: FILE_SHARE_MODE =
    FILE_SHARE_MODE(FILE_SHARE_READ.0 | FILE_SHARE_WRITE.0 | FILE_SHARE_DELETE.0);
/// Sharing for a directory we are emptying: others may read and write, but nobody may delete or
/// rename it while we hold it.
const SHARE_PIN: FILE_SHARE_MODE = FILE_SHARE_MODE(FILE_SHARE_READ.0 | FILE_SHARE_WRITE.0);

/// Opens an existing file or directory. `FILE_FLAG_BACKUP_SEMANTICS` is what lets CreateFileW
/// open a directory; with `follow == false`, `FILE_FLAG_OPEN_REPARSE_POINT` opens a reparse
/// point itself ("Normal reparse point processing will not occur").
fn open(path: &[u16], access: u32, share: FILE_SHARE_MODE, follow: bool) -> io::Result<Handle> {
    let name = z(path);
    let mut flags = FILE_FLAG_BACKUP_SEMANTICS;
    if !follow {
        flags |= FILE_FLAG_OPEN_REPARSE_POINT;
    }
    // SAFETY: `name` is NUL-terminated and outlives the call; no security attributes and no
    // template handle are passed.
    let h = unsafe {
        CreateFileW(
            PCWSTR(name.as_ptr()),
            access,
            share,
            None,
            OPEN_EXISTING,
            flags,
            None,
        )
    }
    .map_err(os_error)?;
    Ok(Handle(h))
}

/// `GetFileAttributesW`: the attributes of the entry itself (a link's own, not its target's).
fn attributes(path: &[u16]) -> io::Result<u32> {
    let name = z(path);
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let a = unsafe { GetFileAttributesW(PCWSTR(name.as_ptr())) };
    if a == INVALID_FILE_ATTRIBUTES {
        Err(io::Error::last_os_error())
    } else {
        Ok(a)
    }
}

fn has(attrs: u32, flag: windows::Win32::Storage::FileSystem::FILE_FLAGS_AND_ATTRIBUTES) -> bool {
    attrs & flag.0 != 0
}

/// Attributes and reparse tag of an open handle (`FileAttributeTagInfo`).
fn attribute_tag(h: &Handle) -> io::Result<FILE_ATTRIBUTE_TAG_INFO> {
    let mut info = FILE_ATTRIBUTE_TAG_INFO::default();
    // SAFETY: `info` is a writable FILE_ATTRIBUTE_TAG_INFO and its exact size is passed; the
    // handle is open for the duration of the call.
    unsafe {
        GetFileInformationByHandleEx(
            h.0,
            FileAttributeTagInfo,
            (&raw mut info).cast::<c_void>(),
            size_of::<FILE_ATTRIBUTE_TAG_INFO>() as u32,
        )
    }
    .map_err(os_error)?;
    Ok(info)
}

/// The raw reparse data of the entry at `path` (`FSCTL_GET_REPARSE_POINT` on a handle opened
/// with `FILE_FLAG_OPEN_REPARSE_POINT`; the buffer is `MAXIMUM_REPARSE_DATA_BUFFER_SIZE`, the
/// most the call can return).
pub(super) fn reparse_data(path: &[u16]) -> io::Result<Vec<u8>> {
    let h = open(path, FILE_READ_ATTRIBUTES.0, SHARE_ALL, false)?;
    let mut buf = vec![0u8; MAXIMUM_REPARSE_DATA_BUFFER_SIZE as usize];
    let mut returned = 0u32;
    // SAFETY: the output buffer is writable for the length passed, `returned` is a valid out
    // pointer, and the handle was opened without FILE_FLAG_OVERLAPPED so the call is synchronous
    // with no OVERLAPPED structure.
    unsafe {
        DeviceIoControl(
            h.0,
            FSCTL_GET_REPARSE_POINT,
            None,
            0,
            Some(buf.as_mut_ptr().cast::<c_void>()),
            buf.len() as u32,
            Some(&raw mut returned),
            None,
        )
    }
    .map_err(os_error)?;
    buf.truncate(returned as usize);
    Ok(buf)
}

fn read_reparse_point(path: &[u16]) -> io::Result<ReparsePoint> {
    Ok(reparse::parse(&reparse_data(path)?)?)
}

/// The reparse tag of the entry at `path`, from `WIN32_FIND_DATAW::dwReserved0` ("If the
/// dwFileAttributes member includes the FILE_ATTRIBUTE_REPARSE_POINT attribute, this member
/// specifies the reparse tag"). Needs no access to the entry itself, as upstream's check.
fn reparse_tag(path: &[u16]) -> io::Result<Option<u32>> {
    let name = z(path);
    let mut data = WIN32_FIND_DATAW::default();
    // SAFETY: `name` is NUL-terminated, `data` is a writable WIN32_FIND_DATAW as
    // FindExInfoBasic requires, and no search filter is passed.
    let h = unsafe {
        FindFirstFileExW(
            PCWSTR(name.as_ptr()),
            FindExInfoBasic,
            (&raw mut data).cast::<c_void>(),
            FindExSearchNameMatch,
            None,
            FIND_FIRST_EX_FLAGS(0),
        )
    }
    .map_err(os_error)?;
    drop(FindHandle(h));
    Ok(has(data.dwFileAttributes, FILE_ATTRIBUTE_REPARSE_POINT).then_some(data.dwReserved0))
}

/// The names in the directory at `path`, without `.` and `..`.
fn list_dir(path: &[u16]) -> io::Result<Vec<WPath>> {
    let pattern = join(path, &[u16::from(b'*')]);
    let name = z(&pattern);
    let mut data = WIN32_FIND_DATAW::default();
    // SAFETY: as in `reparse_tag`.
    let h = match unsafe {
        FindFirstFileExW(
            PCWSTR(name.as_ptr()),
            FindExInfoBasic,
            (&raw mut data).cast::<c_void>(),
            FindExSearchNameMatch,
            None,
            FIND_FIRST_EX_FLAGS(0),
        )
    } {
        Ok(h) => FindHandle(h),
        Err(e) => {
            let e = os_error(e);
            // Nothing matched (a root directory has no `.`/`..`).
            return if is_code(&e, ERROR_FILE_NOT_FOUND) {
                Ok(Vec::new())
            } else {
                Err(e)
            };
        }
    };
    let mut names = Vec::new();
    loop {
        let len = data
            .cFileName
            .iter()
            .position(|&u| u == 0)
            .unwrap_or(data.cFileName.len());
        let entry = &data.cFileName[..len];
        let dots = entry == [u16::from(b'.')] || entry == [u16::from(b'.'), u16::from(b'.')];
        if !dots && !entry.is_empty() {
            names.push(entry.to_vec());
        }
        // SAFETY: `h` is an open find handle and `data` a writable WIN32_FIND_DATAW.
        match unsafe { FindNextFileW(h.0, &raw mut data) }.map_err(os_error) {
            Ok(()) => {}
            Err(e) if is_code(&e, ERROR_NO_MORE_FILES) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(names)
}

// ---------------------------------------------------------------------------------------------
// Removal primitives

/// Clears `FILE_ATTRIBUTE_READONLY` on the entry itself (never a link's target); `Ok(true)` if
/// it was set.
fn clear_readonly(path: &[u16]) -> io::Result<bool> {
    let h = open(
        path,
        FILE_READ_ATTRIBUTES.0 | FILE_WRITE_ATTRIBUTES.0,
        SHARE_ALL,
        false,
    )?;
    let mut info = FILE_BASIC_INFO::default();
    // SAFETY: `info` is a writable FILE_BASIC_INFO and its exact size is passed.
    unsafe {
        GetFileInformationByHandleEx(
            h.0,
            FileBasicInfo,
            (&raw mut info).cast::<c_void>(),
            size_of::<FILE_BASIC_INFO>() as u32,
        )
    }
    .map_err(os_error)?;
    if !has(info.FileAttributes, FILE_ATTRIBUTE_READONLY) {
        return Ok(false);
    }
    let mut attrs = info.FileAttributes & !FILE_ATTRIBUTE_READONLY.0;
    if attrs == 0 {
        attrs = FILE_ATTRIBUTE_NORMAL.0;
    }
    // Zero times mean "keep the file's current value" (FILE_BASIC_INFORMATION).
    let update = FILE_BASIC_INFO {
        FileAttributes: attrs,
        ..Default::default()
    };
    // SAFETY: `update` is a readable FILE_BASIC_INFO and its exact size is passed.
    unsafe {
        SetFileInformationByHandle(
            h.0,
            FileBasicInfo,
            (&raw const update).cast::<c_void>(),
            size_of::<FILE_BASIC_INFO>() as u32,
        )
    }
    .map_err(os_error)?;
    Ok(true)
}

/// Runs a delete; on `ERROR_ACCESS_DENIED` clears the read-only attribute and retries once.
fn with_readonly_retry(
    path: &[u16],
    delete: impl Fn(PCWSTR) -> windows::core::Result<()>,
) -> io::Result<()> {
    let name = z(path);
    match delete(PCWSTR(name.as_ptr())).map_err(os_error) {
        Err(e) if is_code(&e, ERROR_ACCESS_DENIED) && clear_readonly(path).unwrap_or(false) => {
            delete(PCWSTR(name.as_ptr())).map_err(os_error)
        }
        r => r,
    }
}

/// `RemoveDirectoryW`: an empty directory, or a directory reparse point itself.
fn remove_directory(path: &[u16]) -> io::Result<()> {
    // SAFETY: the argument is the NUL-terminated `name` built by `with_readonly_retry`, alive
    // for the whole call.
    with_readonly_retry(path, |p| unsafe { RemoveDirectoryW(p) })
}

/// `DeleteFileW`: a file, or a file symbolic link itself.
fn delete_file(path: &[u16]) -> io::Result<()> {
    // SAFETY: as in `remove_directory`.
    with_readonly_retry(path, |p| unsafe { DeleteFileW(p) })
}

/// `DeleteVolumeMountPointW` needs the mount point with a trailing backslash.
fn delete_volume_mount_point(path: &[u16]) -> io::Result<()> {
    let mut p = path.to_vec();
    if p.last().is_some_and(|&u| !is_sep(u)) {
        p.push(u16::from(b'\\'));
    }
    let name = z(&p);
    // SAFETY: `name` is NUL-terminated and outlives the call.
    unsafe { DeleteVolumeMountPointW(PCWSTR(name.as_ptr())) }.map_err(os_error)
}

/// Removes a reparse point itself; a volume mount point is dismounted first. What it leads to
/// is never touched.
fn remove_reparse_point(path: &[u16], attrs: u32) -> io::Result<()> {
    if !has(attrs, FILE_ATTRIBUTE_DIRECTORY) {
        return delete_file(path);
    }
    if read_reparse_point(path).is_ok_and(|rp| rp.is_volume_mount_point()) {
        tracing::info!(path = %show(path), "deleting volume mount point");
        if let Err(e) = delete_volume_mount_point(path) {
            // RemoveDirectoryW below still removes the mount point (the reparse point) itself.
            tracing::warn!(path = %show(path), error = %e, "DeleteVolumeMountPointW failed");
        }
    }
    remove_directory(path)
}

/// A directory being emptied, pinned open without `FILE_SHARE_DELETE`.
struct Frame {
    path: WPath,
    pin: Handle,
    entries: std::vec::IntoIter<WPath>,
    error: Option<io::Error>,
}

enum Step {
    Gone,
    Descend(Frame),
}

/// Removes `path` unless it is a non-empty plain directory, which is pinned and listed instead.
fn step(path: WPath) -> io::Result<Step> {
    for _ in 0..MAX_ATTEMPTS {
        let attrs = match attributes(&path) {
            Ok(a) => a,
            Err(e) if not_found(&e) => return Ok(Step::Gone),
            Err(e) => return Err(with_context(e, "attributes of", &path)),
        };
        if has(attrs, FILE_ATTRIBUTE_REPARSE_POINT) {
            return match remove_reparse_point(&path, attrs) {
                Err(e) if !not_found(&e) => Err(with_context(e, "remove reparse point", &path)),
                _ => Ok(Step::Gone),
            };
        }
        if !has(attrs, FILE_ATTRIBUTE_DIRECTORY) {
            return match delete_file(&path) {
                Err(e) if is_code(&e, ERROR_ACCESS_DENIED) && dir_now(&path) => continue,
                Err(e) if !not_found(&e) => Err(with_context(e, "delete", &path)),
                _ => Ok(Step::Gone),
            };
        }
        match remove_directory(&path) {
            Ok(()) => return Ok(Step::Gone),
            Err(e) if not_found(&e) => return Ok(Step::Gone),
            Err(e) if is_code(&e, ERROR_DIR_NOT_EMPTY) => {}
            Err(e) if is_code(&e, ERROR_DIRECTORY) => continue, // now a file
            Err(e) => return Err(with_context(e, "remove directory", &path)),
        }
        let pin = match open(&path, FILE_READ_ATTRIBUTES.0, SHARE_PIN, false) {
            Ok(h) => h,
            Err(e) if not_found(&e) => return Ok(Step::Gone),
            Err(e) => return Err(with_context(e, "open", &path)),
        };
        let info = attribute_tag(&pin).map_err(|e| with_context(e, "query", &path))?;
        if has(info.FileAttributes, FILE_ATTRIBUTE_REPARSE_POINT)
            || !has(info.FileAttributes, FILE_ATTRIBUTE_DIRECTORY)
        {
            continue; // swapped for a link or a file since we looked
        }
        let entries = list_dir(&path).map_err(|e| with_context(e, "list", &path))?;
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

fn dir_now(path: &[u16]) -> bool {
    attributes(path).is_ok_and(|a| has(a, FILE_ATTRIBUTE_DIRECTORY))
}

/// Removes `path` and everything below it (iteratively); after an error the remaining
/// siblings are still removed and the first error is returned.
fn remove_tree(path: WPath) -> io::Result<()> {
    let mut stack = match step(path)? {
        Step::Gone => return Ok(()),
        Step::Descend(frame) => vec![frame],
    };
    loop {
        let Some(frame) = stack.last_mut() else {
            return Ok(());
        };
        if let Some(name) = frame.entries.next() {
            match step(join(&frame.path, &name)) {
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
        let error = match remove_directory(&path) {
            Ok(()) => None,
            Err(e) if not_found(&e) => None,
            Err(e) => Some(error.unwrap_or_else(|| with_context(e, "remove directory", &path))),
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

/// Whether what a link or mount point leads to can be reached: opening it (following) works.
/// Absent targets, unreachable shares and dismounted volumes are `false`.
fn target_reachable(path: &[u16]) -> io::Result<bool> {
    // Access 0: "the application can query certain metadata … even if GENERIC_READ access would
    // have been denied" (CreateFileW).
    match open(path, 0, SHARE_ALL, true) {
        Ok(_) => Ok(true),
        Err(e) if unreachable(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Errors that mean "nothing is there" for a link's target (a dangling link answers false, not
/// an error); any other error, such as a logon failure on a share, is reported.
fn unreachable(e: &io::Error) -> bool {
    [
        ERROR_FILE_NOT_FOUND,
        ERROR_PATH_NOT_FOUND,
        ERROR_NOT_READY,
        ERROR_BAD_NETPATH,
        ERROR_BAD_NET_NAME,
        ERROR_INVALID_NAME,
        ERROR_UNRECOGNIZED_VOLUME,
        ERROR_CANT_RESOLVE_FILENAME,
    ]
    .into_iter()
    .any(|c| is_code(e, c))
}

impl LinkProbe for WindowsFilesystemHost {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        let p = wpath(path)?;
        let attrs = match attributes(&p) {
            Ok(a) => a,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if !has(attrs, FILE_ATTRIBUTE_REPARSE_POINT) {
            return Ok(None);
        }
        Ok(match read_reparse_point(&p)?.destination() {
            // Deduplication, cloud files, …: data reparse points, not links.
            None => None,
            Some(LinkDestination::Path(target)) => Some(LinkTarget::Path(target)),
            Some(LinkDestination::Volume(_)) => Some(LinkTarget::Volume),
            Some(LinkDestination::Other(nt)) => {
                Some(LinkTarget::Foreign(format!("link to the NT path {nt:?}")))
            }
        })
    }
}

impl FilesystemHost for WindowsFilesystemHost {
    fn path_exists(&self, path: &str) -> io::Result<bool> {
        // std opens with FILE_FLAG_OPEN_REPARSE_POINT: a dangling link exists.
        match std::fs::symlink_metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn mkdir_all(&self, path: &str) -> io::Result<()> {
        // An existing directory (or a link to one) is success; an existing file is
        // ERROR_ALREADY_EXISTS.
        std::fs::create_dir_all(path)
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let p = wpath(path)?;
        let attrs = attributes(&p)?;
        if has(attrs, FILE_ATTRIBUTE_REPARSE_POINT) {
            remove_reparse_point(&p, attrs)
        } else if has(attrs, FILE_ATTRIBUTE_DIRECTORY) {
            remove_directory(&p)
        } else {
            delete_file(&p)
        }
    }

    fn remove_all(&self, path: &str) -> io::Result<()> {
        remove_tree(wpath(path)?)
    }

    fn remove_contents(&self, path: &str) -> io::Result<()> {
        let p = wpath(path)?;
        let attrs = attributes(&p)?;
        // The contents of a mounted volume are the directory's contents; a symbolic link's or
        // junction's target is somewhere else and is not emptied through it.
        let follow = if has(attrs, FILE_ATTRIBUTE_REPARSE_POINT) {
            if !read_reparse_point(&p)?.is_volume_mount_point() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "is a link; its target is not emptied through it",
                ));
            }
            true
        } else if !has(attrs, FILE_ATTRIBUTE_DIRECTORY) {
            return Err(io::Error::from_raw_os_error(ERROR_DIRECTORY.0 as i32));
        } else {
            false
        };
        let pin = open(&p, FILE_READ_ATTRIBUTES.0, SHARE_PIN, follow)?;
        let info = attribute_tag(&pin)?;
        if !has(info.FileAttributes, FILE_ATTRIBUTE_DIRECTORY)
            || (!follow && has(info.FileAttributes, FILE_ATTRIBUTE_REPARSE_POINT))
        {
            return Err(io::Error::other("changed while being emptied; retry"));
        }
        let mut first_error = None;
        for name in list_dir(&p)? {
            if let Err(e) = remove_tree(join(&p, &name)) {
                first_error.get_or_insert(e);
            }
        }
        drop(pin);
        first_error.map_or(Ok(()), Err)
    }

    fn create_symlink(&self, target: &str, link: &str) -> io::Result<()> {
        let link_w = z(&wpath(link)?);
        let target_w = z(&wpath(target)?);
        // A directory link iff the target is a directory now (following links), as upstream;
        // a missing target gives a file link.
        let kind = if std::fs::metadata(target).is_ok_and(|m| m.is_dir()) {
            SYMBOLIC_LINK_FLAG_DIRECTORY
        } else {
            SYMBOLIC_LINK_FLAGS(0)
        };
        // ALLOW_UNPRIVILEGED_CREATE lets a non-elevated process create links in Developer Mode;
        // Windows before 10 1703 rejects the unknown flag with ERROR_INVALID_PARAMETER, so the
        // call is retried without it.
        for flags in [kind | SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE, kind] {
            // SAFETY: both strings are NUL-terminated and outlive the call.
            let ok = unsafe {
                CreateSymbolicLinkW(PCWSTR(link_w.as_ptr()), PCWSTR(target_w.as_ptr()), flags)
            };
            if ok {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if flags == kind || !is_code(&e, ERROR_INVALID_PARAMETER) {
                return Err(e);
            }
        }
        Err(io::Error::other("CreateSymbolicLinkW failed"))
    }

    fn is_symlink(&self, path: &str) -> io::Result<bool> {
        let p = wpath(path)?;
        let attrs = attributes(&p)?;
        if !has(attrs, FILE_ATTRIBUTE_REPARSE_POINT) {
            return Ok(false);
        }
        // Upstream tests `tag & IO_REPARSE_TAG_MOUNT_POINT != 0`, a bitmask that every Microsoft
        // tag passes (deduplicated files included). Here only real links count: symbolic links
        // and mount points (junctions and volume mount points).
        let tag = reparse_tag(&p)?;
        if tag != Some(reparse::IO_REPARSE_TAG_SYMLINK)
            && tag != Some(reparse::IO_REPARSE_TAG_MOUNT_POINT)
        {
            return Ok(false);
        }
        let named = read_reparse_point(&p)?
            .destination()
            .and_then(|d| reparse::direct_target(path, &d));
        match named {
            // GetFileAttributesW does not follow a final link (the entry's own attributes), so
            // only the link's direct target is looked at, as upstream's Lstat does.
            Some(target) => match attributes(&wpath(&target)?) {
                Ok(_) => Ok(true),
                Err(e) if unreachable(&e) => Ok(false),
                Err(e) => Err(e),
            },
            None => target_reachable(&p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Vec<u16> {
        s.encode_utf16().collect()
    }

    fn unz(v: Vec<u16>) -> String {
        String::from_utf16_lossy(&v[..v.len() - 1])
    }

    #[test]
    fn long_paths_get_the_verbatim_prefix() {
        assert_eq!(unz(z(&u(r"C:\short"))), r"C:\short");
        let long = format!(r"C:\{}", "a".repeat(300));
        assert_eq!(unz(z(&u(&long))), format!(r"\\?\{long}"));
        let long_fwd = format!("C:/{}/b", "a".repeat(300));
        assert_eq!(
            unz(z(&u(&long_fwd))),
            format!(r"\\?\C:\{}\b", "a".repeat(300))
        );
        let unc = format!(r"\\srv\share\{}", "a".repeat(300));
        assert_eq!(
            unz(z(&u(&unc))),
            format!(r"\\?\UNC\srv\share\{}", "a".repeat(300))
        );
        let verbatim = format!(r"\\?\C:\{}", "a".repeat(300));
        assert_eq!(unz(z(&u(&verbatim))), verbatim);
        let relative = "a".repeat(300);
        assert_eq!(unz(z(&u(&relative))), relative);
    }

    #[test]
    fn nul_is_refused() {
        assert!(wpath("C:\\a\0b").is_err());
    }

    #[test]
    fn joins() {
        assert_eq!(show(&join(&u(r"C:\a"), &u("b"))), r"C:\a\b");
        assert_eq!(show(&join(&u(r"C:\"), &u("b"))), r"C:\b");
    }
}
