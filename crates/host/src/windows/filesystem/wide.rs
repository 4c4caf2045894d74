//! Wide (UTF-16) paths as the Win32 calls take them, the errors they answer, and the
//! bounded wait for a delete-pending name.

use super::*;

/// A path as UTF-16 without terminator (names on NTFS need not be valid UTF-16).
pub(super) type WPath = Vec<u16>;

pub(super) fn wpath(path: &str) -> io::Result<WPath> {
    if path.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path contains a NUL character",
        ));
    }
    Ok(files::utf16(path))
}

pub(super) fn starts_with_ascii(p: &[u16], prefix: &str) -> bool {
    p.len() >= prefix.len()
        && p.iter()
            .zip(prefix.bytes())
            .all(|(&a, b)| a == u16::from(b))
}

pub(super) fn is_sep(u: u16) -> bool {
    u == u16::from(b'\\') || u == u16::from(b'/')
}

/// The form handed to Win32: `\\?\`-prefixed (with `/` turned into `\`, as the prefix disables
/// that normalisation) when the path is long, as given otherwise.
pub(super) fn z(p: &[u16]) -> WPath {
    let verbatim = [r"\\?\", r"\\.\", r"\??\"]
        .iter()
        .any(|pre| starts_with_ascii(p, pre));
    let drive_absolute = p.len() >= 3
        && p[0] < 0x80
        && (p[0] as u8).is_ascii_alphabetic()
        && p[1] == u16::from(b':')
        && is_sep(p[2]);
    let unc = p.len() >= 2 && is_sep(p[0]) && is_sep(p[1]);
    if p.len() < SHORT_PATH_LIMIT || verbatim || !(drive_absolute || unc) {
        return p.to_vec();
    }
    let (prefix, rest) = if unc {
        (r"\\?\UNC\", &p[2..])
    } else {
        (r"\\?\", p)
    };
    let mut out: WPath = Vec::with_capacity(p.len() + 8);
    out.extend(prefix.encode_utf16());
    out.extend(
        rest.iter()
            .map(|&u| if is_sep(u) { u16::from(b'\\') } else { u }),
    );
    out
}

pub(super) fn join(parent: &[u16], name: &[u16]) -> WPath {
    let mut p = parent.to_vec();
    if p.last().is_some_and(|&u| !is_sep(u)) {
        p.push(u16::from(b'\\'));
    }
    p.extend_from_slice(name);
    p
}

/// The parent directory of `p`, if it has one below a root (`C:\`, `\\server\share`).
pub(super) fn parent(p: &[u16]) -> Option<&[u16]> {
    let trimmed = p.len() - p.iter().rev().take_while(|&&u| is_sep(u)).count();
    let i = p[..trimmed].iter().rposition(|&u| is_sep(u))?;
    let parent = &p[..i];
    let root = parent.len() == 2 && parent[1] == u16::from(b':');
    let unc_share =
        starts_with_ascii(parent, r"\\") && parent[2..].iter().filter(|&&u| is_sep(u)).count() <= 1;
    (!parent.is_empty() && !unc_share).then_some(if root { &p[..=i] } else { parent })
}

pub(super) fn show(p: &[u16]) -> String {
    String::from_utf16_lossy(p)
}

pub(super) fn is_code(e: &OsError, c: u32) -> bool {
    e.code == c
}

/// An error with the operation and the (inner) path it concerns, keeping its kind.
pub(super) fn with_context(e: &OsError, what: &str, path: &[u16]) -> io::Error {
    let io = io_error(e);
    io::Error::new(io.kind(), format!("{what} {}: {io}", show(path)))
}

pub(super) fn has(attrs: u32, flag: u32) -> bool {
    attrs & flag != 0
}

/// How long creating a directory waits for a delete-pending entry of its name to go: whoever
/// holds it (a scanner, an indexer, a container runtime) closes it at its own pace.
pub(super) const DELETE_PENDING_LIMIT: Duration = Duration::from_secs(10);
/// The pause between two attempts.
pub(super) const DELETE_PENDING_POLL: Duration = Duration::from_millis(50);

/// `CreateDirectoryW(path)`, waiting out a delete-pending entry of the name ([`past_pending`]).
pub(super) fn create_directory(os: &dyn Win32, path: &[u16]) -> Win32Result<()> {
    past_pending(os, path, || os.create_directory(path))
}

/// Runs `call` on `path`; while the entry there is delete-pending (ERROR_ACCESS_DENIED although
/// its directory still lists it: DeleteFileW and RemoveDirectoryW, Remarks, "marks a file for
/// deletion on close ... the file deletion does not occur until the last handle to the file is
/// closed"), runs it again until the entry has gone, for at most [`DELETE_PENDING_LIMIT`] and
/// never past the caller's deadline.
pub(super) fn past_pending<T>(
    os: &dyn Win32,
    path: &[u16],
    mut call: impl FnMut() -> Win32Result<T>,
) -> Win32Result<T> {
    super::super::os::retry_within(os, DELETE_PENDING_LIMIT, DELETE_PENDING_POLL, || {
        let r = call();
        let pending =
            matches!(&r, Err(e) if is_code(e, code::ACCESS_DENIED) && os.find_entry(path).is_ok());
        if pending {
            tracing::debug!(path = %show(path), "a delete-pending entry is in the way");
        }
        (r, pending)
    })
}
