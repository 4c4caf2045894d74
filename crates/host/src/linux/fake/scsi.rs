//! SCSI disks of the fake: the `device/state` attribute SetDiskState reads and writes (an open
//! sysfs attribute belongs to the device it was opened on: once that device is removed, reads
//! and writes through it fail with ENODEV), and a disk swapped for another under the same name
//! at a chosen call (a detach and another tenant's attach inside a request's window).

use super::state::{Disk, Handle, State};
use super::{ENOENT, FakeLinux, errno};
use std::collections::HashMap;
use std::io;
use std::path::Path;

const ENODEV: i32 = 19;

impl FakeLinux {
    /// Attaches a blank SCSI disk (its `device/state` is `running`); returns its diskseq.
    pub fn add_scsi_disk(&self, name: &str, size: u64) -> u32 {
        let seq = self.add_disk(name, size);
        let mut s = self.lock();
        if let Some(d) = s.disks.iter_mut().find(|d| d.name == name) {
            d.scsi_state = Some("running".into());
        }
        seq
    }

    /// The SCSI device state of the disk named `name`, if it has one.
    pub fn scsi_state(&self, name: &str) -> Option<String> {
        let s = self.lock();
        s.disks
            .iter()
            .find(|d| d.name == name)
            .and_then(|d| d.scsi_state.clone())
    }

    /// Right after the first call whose record starts with `call`, the disk named `name` is
    /// detached and another blank SCSI disk of the same size attached under its name, with
    /// the next diskseq.
    pub fn replace_disk_at(&self, call: &str, name: &str) {
        self.lock().replace_at = Some((call.into(), name.into()));
    }
}

impl State {
    /// Swaps the disk [`FakeLinux::replace_disk_at`] named once its call was just recorded.
    pub(super) fn fire_replacement(&mut self) {
        let due = match (&self.replace_at, self.calls.last()) {
            (Some((call, _)), Some(last)) => last.starts_with(call.as_str()),
            _ => false,
        };
        let Some((_, name)) = self.replace_at.take_if(|_| due) else {
            return;
        };
        let Some(i) = self.disks.iter().position(|d| d.name == name) else {
            return;
        };
        let old = self.disks.remove(i);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.disks.insert(
            i,
            Disk {
                seq,
                data: HashMap::new(),
                parts: Vec::new(),
                scsi_state: Some("running".into()),
                vpd83: None,
                ..old
            },
        );
    }

    /// The handle of the `device/state` attribute at `path` (`/sys/block/<disk>/device/state`)
    /// of a SCSI disk.
    pub(super) fn open_scsi_state(&self, path: &Path) -> Option<io::Result<Handle>> {
        let name = path
            .strip_prefix("/sys/block")
            .ok()?
            .strip_suffix_components()?;
        let d = self.disks.iter().find(|d| d.name == name)?;
        Some(match d.scsi_state {
            Some(_) => Ok(Handle::ScsiState { seq: d.seq }),
            None => Err(errno(ENOENT)),
        })
    }

    /// The disk a state attribute handle was opened on; ENODEV once it is gone.
    pub(super) fn scsi_disk(&mut self, seq: u64) -> io::Result<&mut Disk> {
        self.disks
            .iter_mut()
            .find(|d| d.seq == seq && d.scsi_state.is_some())
            .ok_or_else(|| errno(ENODEV))
    }
}

/// `<disk>` of `<disk>/device/state`.
trait StateAttr {
    fn strip_suffix_components(&self) -> Option<&str>;
}

impl StateAttr for Path {
    fn strip_suffix_components(&self) -> Option<&str> {
        let mut c = self.iter();
        let name = c.next()?.to_str()?;
        (c.next()? == "device" && c.next()? == "state" && c.next().is_none()).then_some(name)
    }
}
