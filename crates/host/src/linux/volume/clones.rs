//! Clones of a mounted filesystem. A snapshot restored on the node that stages the original,
//! or two clones of one image, carry the same filesystem UUID on different disks, and xfs
//! refuses to mount a UUID that is already mounted (EINVAL, "Filesystem has duplicate UUID"):
//! the clone could then be neither staged nor grown (growing an xfs needs a mount). xfs's
//! `nouuid` skips that check. It is given only when every mounted twin sits on other storage
//! (`block::storage_of`: the in-use rule's storage identity); the same disk reached through a
//! second path (two SCSI paths without multipath, two loop devices over one image) is
//! refused, since mounting one filesystem twice corrupts it.

use super::*;

impl LinuxVolumeHost {
    /// Whether `vol`, holding `sig`, is mounted with xfs's `nouuid`: only for an xfs whose
    /// UUID is mounted from other disks, each on other storage. FAILED_PRECONDITION when a
    /// twin's disk could be this very storage.
    pub(super) fn mount_as_clone(&self, op: &str, vol: &Volume, sig: &Signature) -> Result<bool> {
        let (Some("xfs"), Some(uuid)) = (sig.mount_type, sig.uuid) else {
            return Ok(false);
        };
        let os = &self.os;
        let table = mountinfo::read_from(&**os).map_err(|e| Error::io(op, shown(&vol.id), &e))?;
        let (same_storage, known) = block::storage_of(os, &vol.disk).map_err(|e| e.context(op))?;
        let mut seen = Vec::new();
        let mut clone = false;
        for m in table.iter().filter(|m| m.fs_type == "xfs") {
            let dev = (m.major, m.minor);
            if dev == vol.dev || seen.contains(&dev) {
                continue;
            }
            seen.push(dev);
            let Some((disk, part)) = block::whose(os, m.major, m.minor) else {
                continue;
            };
            // A twin that vanished or cannot be read now is not mounted from a disk we see.
            let Ok(twin) = make_volume(os, op, &disk, part, Sync::No) else {
                continue;
            };
            let Ok(head) = twin.file.read_at(0, signatures::PROBE_LEN) else {
                continue;
            };
            if signatures::probe(&head).and_then(|s| s.uuid) != Some(uuid) {
                continue;
            }
            if !known || same_storage.contains(&disk.number) {
                return Err(Error::new(
                    Kind::FailedPrecondition,
                    op,
                    shown(&vol.id),
                    format!(
                        "its xfs (UUID {}) is already mounted from {} at {:?}, on a disk {}; \
                         mounting one filesystem through two paths corrupts it",
                        signatures::uuid_string(&uuid),
                        m.source,
                        m.mount_point,
                        if known {
                            "that reaches the same storage (the same disk through another path)"
                        } else {
                            "this host cannot tell apart from this one (it says nothing about itself: no page 0x83 designator, serial number or loop backing)"
                        }
                    ),
                ));
            }
            clone = true;
        }
        Ok(clone)
    }
}

/// A disk's identity as its volume IDs carry it: its page 0x83 ID and serial number, `None`
/// when it has neither.
pub(super) fn identity(os: &Os, disk: &Disk) -> Option<String> {
    let (page83, serial) = (block::page83(os, disk), block::serial(os, disk));
    (!page83.is_empty() || !serial.is_empty())
        .then(|| format!("page83\0{page83}\0serial\0{serial}"))
}
