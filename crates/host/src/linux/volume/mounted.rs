//! A mounted volume reached through a handle on its mount's root, never through the mount point's
//! path again: the mount table names a mount point by a path a client may own a part of, and a
//! directory on it can be swapped for a link, a FIFO or a device node between reading the table and
//! using the path. A FIFO opened there would block the request, and the disk's lock with it, for
//! ever.

use super::*;

/// The root of one of `vol`'s mounts in `table`, opened without following any link on the way
/// ([`Open::MountRoot`]) and checked to be that very mount's root (its mount ID, or its device
/// where the kernel does not report one). `None` when the volume is not mounted; ABORTED when
/// it is, but none of its mount points leads to its mount any more.
pub(super) fn mounted_root(
    os: &Os,
    op: &str,
    vol: &Volume,
    table: &[MountInfo],
) -> Result<Option<Fd>> {
    let mounts = vol.mounts(table);
    if mounts.is_empty() {
        return Ok(None);
    }
    let mut why = Vec::new();
    // Every mount of the filesystem syncs, reports and grows the same filesystem.
    for m in mounts {
        match open_root(os, m) {
            Ok(root) => return Ok(Some(root)),
            Err(e) => why.push(format!("{}: {e}", m.mount_point.display())),
        }
    }
    Err(Error::new(
        Kind::Aborted,
        op,
        shown(&vol.id),
        format!(
            "the volume is mounted, but its mount point changed while the request ran ({}); \
             nothing was done through it, retry",
            why.join("; ")
        ),
    ))
}

/// The root of mount `m`, opened and checked (see [`mounted_root`]).
fn open_root(os: &Os, m: &MountInfo) -> io::Result<Fd> {
    let root = Fd::open(os, &m.mount_point, Open::MountRoot)?;
    let at = root.mount_of()?;
    let same = match at.id {
        Some(id) => id == m.mount_id,
        None => at.dev == (m.major, m.minor),
    };
    if !same || at.root == Some(false) {
        return Err(io::Error::other(
            "a directory other than that mount's root is there now",
        ));
    }
    Ok(root)
}
