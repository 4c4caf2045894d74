//! Clones of a mounted filesystem. A snapshot restored on the node that stages the original,
//! or two clones of one image, carry the same filesystem UUID on different disks, and xfs
//! refuses to mount a UUID that is already mounted (EINVAL, "Filesystem has duplicate UUID"):
//! the clone could then be neither staged nor grown (growing an xfs needs a mount). xfs's
//! `nouuid` skips that check. It is given only when every mounted twin sits on a disk of
//! another identity (page 0x83 ID and serial number, a loop device's backing file); the same
//! disk reached through a second path (two SCSI paths without multipath) shows the same
//! identity and is refused, since mounting one filesystem twice corrupts it.

use super::*;

impl LinuxVolumeHost {
    /// Whether `vol`, holding `sig`, is mounted with xfs's `nouuid`: only for an xfs whose
    /// UUID is mounted from other disks, each of another identity. FAILED_PRECONDITION when a
    /// twin's disk could be this very disk.
    pub(super) fn mount_as_clone(&self, op: &str, vol: &Volume, sig: &Signature) -> Result<bool> {
        let (Some("xfs"), Some(uuid)) = (sig.mount_type, sig.uuid) else {
            return Ok(false);
        };
        let os = &self.os;
        let table = mountinfo::read_from(&**os).map_err(|e| Error::io(op, shown(&vol.id), &e))?;
        let ours = identity(os, &vol.disk);
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
            let theirs = identity(os, &disk);
            if ours.is_none() || ours == theirs {
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
                        if ours.is_none() {
                            "this host cannot tell apart from this one (neither has a serial number or page 0x83 ID)"
                        } else {
                            "with the same serial number and page 0x83 ID (the same disk through another path)"
                        }
                    ),
                ));
            }
            clone = true;
        }
        Ok(clone)
    }
}

/// A disk's identity: its page 0x83 ID and serial number, `None` when it has neither.
pub(super) fn identity(os: &Os, disk: &Disk) -> Option<String> {
    let (page83, serial) = (block::page83(os, disk), block::serial(os, disk));
    (!page83.is_empty() || !serial.is_empty())
        .then(|| format!("page83\0{page83}\0serial\0{serial}"))
}
