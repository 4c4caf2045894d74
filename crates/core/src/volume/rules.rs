//! The volume group's safety rules, written once for every platform.
//!
//! FormatVolume, MountVolume, UnmountVolume and ResizeVolume decide here what to do from what a
//! host reports about one resolved volume; the hosts only report and act (probe, read the
//! durable format record, make a filesystem, mount, grow). So a rule such as "never format a
//! volume that holds anything but this daemon's own unfinished work" exists once, is tested
//! here without root or a disk, and holds on Linux and Windows alike.

use super::ResizeTarget;
use crate::error::{Error, Kind, Result};

/// What a FormatVolume did, or was doing, to one volume: written `pending` before the format
/// starts and `done`, with the new filesystem's identity, once it finished, so that a retry
/// tells a filesystem this daemon made from one it must never format over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatRecord {
    /// The filesystem type made (`ext4`, `xfs`, `NTFS`).
    pub fs: String,
    /// The filesystem's identity: the UUID chosen for it (Linux), or the volume serial number
    /// Windows assigned (empty while pending: Windows chooses it).
    pub id: String,
    /// Whether the format finished.
    pub done: bool,
}

/// What a volume holds, as the host's probe sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    /// The filesystem or signature kind (`ext4`, `NTFS`, `crypto_LUKS`, ...).
    pub kind: String,
    /// Its identity when it has one (a filesystem UUID, a volume serial number).
    pub id: Option<String>,
    /// How the host names it in messages (`ext4 (UUID …)`, `NTFS`).
    pub shown: String,
}

impl Content {
    /// Whether this is the filesystem `record` describes: the same identity, or, for a record
    /// whose identity was not known in advance, the same kind.
    fn is_from(&self, record: &FormatRecord) -> bool {
        if record.id.is_empty() {
            self.kind.eq_ignore_ascii_case(&record.fs)
        } else {
            self.id
                .as_deref()
                .is_some_and(|id| id.eq_ignore_ascii_case(&record.id))
        }
    }
}

/// IsVolumeFormatted: whether the volume holds anything, but for this daemon's own interrupted
/// format, which answers false. Drivers call FormatVolume only after a false here (aws-ebs,
/// azuredisk, gce-pd, vSphere); answering true would send them straight to MountVolume, which
/// refuses an unfinished format, on every retry forever. False makes the next FormatVolume
/// finish it.
pub fn is_formatted(content: Option<&Content>, record: Option<&FormatRecord>) -> bool {
    match (content, record) {
        (None, _) => false,
        (Some(c), Some(r)) => r.done || !c.is_from(r),
        (Some(_), None) => true,
    }
}

/// What FormatVolume needs from a host, on one resolved volume.
pub trait FormatTarget {
    /// The volume, as messages name it.
    fn object(&self) -> String;
    /// Where the volume (or anything on it) is mounted, if anywhere.
    fn mounted_at(&self) -> Result<Option<String>>;
    /// What the volume holds: every signature the host knows, wherever the probe reads.
    fn content(&self) -> Result<Option<Content>>;
    /// The durable record of an earlier FormatVolume of this volume.
    fn record(&self) -> Option<FormatRecord>;
    /// Writes the durable record (synchronously: it must survive a crash that follows).
    fn write_record(&self, record: &FormatRecord) -> Result<()>;
    /// The filesystem this host makes, and the identity it will give it when the host chooses
    /// one in advance.
    fn new_filesystem(&self) -> Result<(String, Option<String>)>;
    /// Makes the filesystem with identity `id` (when chosen in advance). `finishing`: the volume
    /// may hold the partial filesystem of this daemon's own interrupted format, which the
    /// host's tools must be allowed to write over.
    fn make_filesystem(&self, id: Option<&str>, finishing: bool) -> Result<()>;
}

/// FormatVolume: refuse a mounted volume; refuse a volume holding anything but this daemon's
/// own (finished: success without a change; unfinished: formatted again); record the intent;
/// make the filesystem; record it done.
pub fn format(op: &str, t: &dyn FormatTarget) -> Result<()> {
    let object = t.object();
    let refuse = |why: String| Error::new(Kind::FailedPrecondition, op, &object, why);
    if let Some(at) = t.mounted_at()? {
        return Err(refuse(format!(
            "the volume is mounted at {at:?}; refusing to format it"
        )));
    }
    let record = t.record();
    let content = t.content()?;
    let pending = match (&content, &record) {
        (Some(c), Some(r)) if c.is_from(r) && r.done => return Ok(()), // formatted earlier
        (Some(c), Some(r)) if c.is_from(r) => Some(r),
        (Some(c), _) => {
            return Err(refuse(format!(
                "the volume already holds {}; refusing to format over it",
                c.shown
            )));
        }
        (None, Some(r)) if !r.done => Some(r),
        (None, _) => None,
    };
    if pending.is_some() {
        tracing::warn!(volume = %object, "an earlier FormatVolume was interrupted; formatting again");
    }
    let (fs, chosen) = t.new_filesystem()?;
    let id = pending
        .map(|r| r.id.clone())
        .filter(|id| !id.is_empty())
        .or(chosen);
    t.write_record(&FormatRecord {
        fs: fs.clone(),
        id: id.clone().unwrap_or_default(),
        done: false,
    })?;
    t.make_filesystem(id.as_deref(), pending.is_some())?;
    let made = t.content()?.ok_or_else(|| {
        Error::new(
            Kind::Internal,
            op,
            &object,
            "the format reported success but no filesystem is found on the volume",
        )
    })?;
    t.write_record(&FormatRecord {
        fs,
        id: made.id.or(id).unwrap_or_default(),
        done: true,
    })?;
    tracing::info!(volume = %object, fs = %made.kind, "formatted");
    Ok(())
}

/// What is mounted at a target directory, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occupant {
    /// Nothing: the directory is not a mount point.
    Nothing,
    /// The volume asked about (under any of its names).
    ThisVolume,
    /// Something else, as messages name it.
    Other(String),
}

/// What MountVolume needs from a host, on one resolved volume and its target.
pub trait MountTarget {
    /// The volume and target, as messages name them.
    fn object(&self) -> String;
    /// Whether the target directory exists.
    fn target_exists(&self) -> Result<bool>;
    /// What is mounted at the target.
    fn occupant(&self) -> Result<Occupant>;
    /// Whether the target directory is empty; `None` when only the mount itself can tell (it
    /// then refuses a non-empty one).
    fn target_empty(&self) -> Result<Option<bool>>;
    /// What the volume holds.
    fn content(&self) -> Result<Option<Content>>;
    /// The durable record of an earlier FormatVolume of this volume.
    fn record(&self) -> Option<FormatRecord>;
    /// Mounts the volume at the target.
    fn mount(&self) -> Result<()>;
}

/// MountVolume: the same volume already there is success; anything else there, a non-empty
/// directory, a volume without a filesystem or with an interrupted format of ours is refused.
pub fn mount(op: &str, t: &dyn MountTarget) -> Result<()> {
    let object = t.object();
    let refuse = |why: String| Error::new(Kind::FailedPrecondition, op, &object, why);
    if !t.target_exists()? {
        return Err(refuse(
            "target_path does not exist; create the directory first".into(),
        ));
    }
    match t.occupant()? {
        Occupant::ThisVolume => return Ok(()), // already mounted here: idempotent
        Occupant::Other(what) => {
            return Err(refuse(format!(
                "another filesystem ({what}) is mounted there"
            )));
        }
        Occupant::Nothing => {}
    }
    if t.target_empty()? == Some(false) {
        return Err(refuse("target_path is not empty".into()));
    }
    let Some(content) = t.content()? else {
        return Err(refuse(
            "the volume has no filesystem; FormatVolume first".into(),
        ));
    };
    if t.record().is_some_and(|r| !r.done && content.is_from(&r)) {
        return Err(refuse(
            "a FormatVolume of this volume was interrupted; call FormatVolume again first".into(),
        ));
    }
    t.mount()
}

/// UnmountVolume's decision on what is mounted at the target: `true` to unmount it (it is the
/// volume), `false` when nothing is mounted (success, nothing to do); anything else is refused,
/// never unmounted.
pub fn unmount_decision(op: &str, object: &str, occupant: &Occupant) -> Result<bool> {
    match occupant {
        Occupant::Nothing => Ok(false),
        Occupant::ThisVolume => Ok(true),
        Occupant::Other(what) => Err(Error::new(
            Kind::FailedPrecondition,
            op,
            object,
            format!("a different filesystem ({what}) is mounted there; not unmounting it"),
        )),
    }
}

/// Growth below this is not done (upstream's rule: a request within 100 MiB of the current size,
/// and any shrink, is success without a change).
pub const MIN_GROWTH: u64 = 100 << 20;

/// What ResizeVolume does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeSteps {
    /// Bytes to add to the partition (0: it is big enough already).
    pub grow_partition: u64,
    /// Extend the filesystem to fill the partition afterwards.
    pub extend_filesystem: bool,
}

/// What ResizeVolume's decision starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizeFacts {
    /// The partition's length in bytes.
    pub current: u64,
    /// The largest length it can grow to in place.
    pub maximum: u64,
    /// The size of the filesystem on it; `None` when it holds none.
    pub fs_bytes: Option<u64>,
    /// The disk's logical sector size.
    pub sector: u64,
    /// How much smaller than a partition it fills the filesystem may be (its own rounding).
    pub slack: u64,
    /// Why this host cannot grow this partition (a logical MBR partition, a table kind it does
    /// not write), if it cannot. Only a call that must grow is refused for it: drivers resize
    /// at every stage (gce-pd), and a call with nothing to grow succeeds on any disk.
    pub refusal: Option<String>,
}

/// ResizeVolume's steps. A target above the maximum is refused; a target within
/// [`MIN_GROWTH`] of the current size (or below it) grows nothing, whatever the partition is; a
/// partition that must grow but cannot ([`ResizeFacts::refusal`]) is FAILED_PRECONDITION; a
/// filesystem left smaller than its partition (an earlier call grew the partition and was cut
/// off) is extended in any case, so a retry finishes the job.
pub fn resize_steps(
    op: &str,
    object: &str,
    facts: ResizeFacts,
    target: ResizeTarget,
) -> Result<ResizeSteps> {
    let ResizeFacts {
        current,
        maximum,
        fs_bytes,
        sector,
        slack,
        refusal,
    } = facts;
    let sector = sector.max(1);
    let want = match target {
        ResizeTarget::Maximum => maximum,
        // The request asks for what this disk cannot hold (upstream refuses it too).
        ResizeTarget::Bytes(n) if n > maximum => {
            return Err(Error::new(
                Kind::InvalidArgument,
                op,
                object,
                format!(
                    "size_bytes {n} is more than the partition can grow to ({maximum} bytes on this disk); \
                     Rescan after growing the disk"
                ),
            ));
        }
        ResizeTarget::Bytes(n) => n,
    } / sector
        * sector;
    let grow = if want >= current.saturating_add(MIN_GROWTH) {
        want - current
    } else {
        0
    };
    if grow > 0
        && let Some(why) = refusal
    {
        return Err(Error::new(
            Kind::FailedPrecondition,
            op,
            object,
            format!("the partition must grow by {grow} bytes, but {why}; it is not grown"),
        ));
    }
    let new_length = current.saturating_add(grow);
    Ok(ResizeSteps {
        grow_partition: grow,
        extend_filesystem: fs_bytes
            .is_some_and(|fs| grow > 0 || fs.saturating_add(slack) < new_length),
    })
}

#[cfg(test)]
mod tests;
