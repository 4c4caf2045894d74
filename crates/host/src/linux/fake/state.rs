//! The fake kernel's state: disks with sparse contents and the partitions it knows, the mount
//! table, a directory tree with links, and open handles.

use super::{CHUNK, EBADF, EINVAL, ELOOP, ENOENT, ENOSPC, ENOTDIR, ENXIO, errno};
use crate::linux::os::At;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Component, Path, PathBuf};

/// One fake disk: its sysfs attributes and contents.
#[derive(Debug, Clone)]
pub(super) struct Disk {
    pub(super) name: String,
    pub(super) seq: u64,
    pub(super) major: u32,
    pub(super) minor: u32,
    pub(super) sector: u64,
    pub(super) size: u64,
    /// Sparse contents: chunk index to [`CHUNK`] bytes; missing chunks read as zeros.
    pub(super) data: HashMap<u64, Vec<u8>>,
    pub(super) parts: Vec<Part>,
    /// SCSI `device/state` (`running`, `offline`); `None`: not a SCSI disk (loop, virtio).
    pub(super) scsi_state: Option<String>,
    /// SCSI VPD page 0x83 (`device/vpd_pg83`), binary; `None`: the disk has none.
    pub(super) vpd83: Option<Vec<u8>>,
}

/// A partition as the kernel knows it (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Part {
    pub(super) number: u32,
    pub(super) start: u64,
    pub(super) len: u64,
}

impl Disk {
    pub(super) fn part_name(&self, number: u32) -> String {
        if self.name.ends_with(|c: char| c.is_ascii_digit()) {
            format!("{}p{number}", self.name)
        } else {
            format!("{}{number}", self.name)
        }
    }

    pub(super) fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let end = (offset + len as u64).min(self.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let (chunk, within) = (at / CHUNK, at % CHUNK);
            let n = (CHUNK - within).min(end - at);
            match self.data.get(&chunk) {
                Some(c) => out.extend_from_slice(&c[within as usize..(within + n) as usize]),
                None => out.resize(out.len() + n as usize, 0),
            }
            at += n;
        }
        out
    }

    pub(super) fn write(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if offset + bytes.len() as u64 > self.size {
            return Err(errno(ENOSPC));
        }
        let mut done = 0usize;
        while done < bytes.len() {
            let at = offset + done as u64;
            let (chunk, within) = (at / CHUNK, (at % CHUNK) as usize);
            let n = (CHUNK as usize - within).min(bytes.len() - done);
            let c = self
                .data
                .entry(chunk)
                .or_insert_with(|| vec![0; CHUNK as usize]);
            c[within..within + n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        }
        Ok(())
    }
}

/// A mount in the fake's table.
#[derive(Debug, Clone)]
pub(super) struct Mount {
    pub(super) id: u64,
    pub(super) parent: u64,
    pub(super) dev: (u32, u32),
    pub(super) source: String,
    pub(super) point: PathBuf,
    pub(super) fs_type: String,
}

/// What an open handle refers to.
#[derive(Debug, Clone)]
pub(super) enum Handle {
    /// Partition `part` (0: the whole disk) of the disk named `disk`; looked up at each use,
    /// as a real descriptor keeps naming the device node it was opened on.
    Device {
        disk: String,
        part: u32,
    },
    Dir(PathBuf),
    /// The `device/state` attribute of the SCSI disk with this diskseq.
    ScsiState {
        seq: u64,
    },
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) disks: Vec<Disk>,
    pub(super) mounts: Vec<Mount>,
    pub(super) dirs: BTreeSet<PathBuf>,
    pub(super) files: BTreeSet<PathBuf>,
    pub(super) links: BTreeMap<PathBuf, PathBuf>,
    pub(super) handles: HashMap<u64, Handle>,
    pub(super) next_fd: u64,
    pub(super) next_mount: u64,
    pub(super) next_seq: u64,
    pub(super) random: u8,
    pub(super) calls: Vec<String>,
    /// Tools that are killed (exit by signal) after doing their work, once each.
    pub(super) interrupted: BTreeSet<String>,
    /// How many of those kills happened (see [`super::FakeLinux::take_interrupts`]).
    pub(super) interrupts_landed: u32,
    /// Device nodes whose resize2fs was killed mid-way: until `e2fsck -f -y` repairs them,
    /// resize2fs asks for e2fsck -f and `e2fsck -p` stops at the invalid resize inode, as a
    /// real ext4 can be left.
    pub(super) resize_damaged: BTreeSet<String>,
    /// Mount points whose unmount answers EBUSY.
    pub(super) busy: BTreeSet<PathBuf>,
    /// Devices (kernel names) claimed by a holder the mount table does not show.
    pub(super) claims: BTreeSet<String>,
    /// Tools whose next run never ends on its own (a tenant's filesystem keeping it busy).
    pub(super) hanging: BTreeSet<String>,
    /// A disk to swap for another right after a call (see `FakeLinux::replace_disk_at`).
    pub(super) replace_at: Option<(String, String)>,
}

impl State {
    /// The disk index and partition number (0: whole disk) of the kernel name `name`.
    pub(super) fn device(&self, name: &str) -> Option<(usize, u32)> {
        self.disks.iter().enumerate().find_map(|(i, d)| {
            if d.name == name {
                return Some((i, 0));
            }
            d.parts
                .iter()
                .find(|p| d.part_name(p.number) == name)
                .map(|p| (i, p.number))
        })
    }

    pub(super) fn device_at(&self, path: &Path) -> Option<(usize, u32)> {
        let name = path.strip_prefix("/dev").ok()?.to_str()?;
        self.device(name)
    }

    pub(super) fn dev_numbers(&self, disk: usize, part: u32) -> (u32, u32) {
        let d = &self.disks[disk];
        (d.major, d.minor + part)
    }

    /// The byte range `(start, len)` of an open device.
    pub(super) fn extent(&self, h: &Handle) -> io::Result<(usize, u64, u64)> {
        let Handle::Device { disk, part } = h else {
            return Err(errno(EINVAL));
        };
        let i = self
            .disks
            .iter()
            .position(|d| &d.name == disk)
            .ok_or_else(|| errno(ENXIO))?;
        let d = &self.disks[i];
        if *part == 0 {
            return Ok((i, 0, d.size));
        }
        let p = d
            .parts
            .iter()
            .find(|p| p.number == *part)
            .ok_or_else(|| errno(ENXIO))?;
        Ok((i, p.start, p.len))
    }

    pub(super) fn handle(&self, fd: u64) -> io::Result<Handle> {
        self.handles.get(&fd).cloned().ok_or_else(|| errno(EBADF))
    }

    pub(super) fn is_dir(&self, p: &Path) -> bool {
        self.dirs.contains(p)
    }

    /// `path` with links resolved in every component.
    pub(super) fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        let mut out = PathBuf::from("/");
        for c in path.components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => {
                    out.push(n);
                    let mut hops = 0;
                    while let Some(t) = self.links.get(&out) {
                        hops += 1;
                        if hops > 40 {
                            return Err(errno(ELOOP));
                        }
                        out = if t.is_absolute() {
                            t.clone()
                        } else {
                            out.parent().unwrap_or(Path::new("/")).join(t)
                        };
                    }
                }
                Component::Prefix(_) => return Err(errno(EINVAL)),
            }
        }
        if self.is_dir(&out) || self.files.contains(&out) || self.device_at(&out).is_some() {
            Ok(out)
        } else {
            Err(errno(ENOENT))
        }
    }

    /// The topmost mount at `point`.
    /// The mount a directory is on: the deepest mount point above it, the topmost there
    /// (`max_by_key` keeps the last of equals).
    pub(super) fn mount_holding(&self, dir: &Path) -> Option<&Mount> {
        self.mounts
            .iter()
            .filter(|m| dir.starts_with(&m.point))
            .max_by_key(|m| m.point.components().count())
    }

    pub(super) fn topmost(&self, point: &Path) -> Option<usize> {
        self.mounts.iter().rposition(|m| m.point == point)
    }

    /// What a path names for mount(2) and umount2(2).
    pub(super) fn target(&self, at: At<'_>) -> io::Result<PathBuf> {
        match at {
            At::Path(p) => self.resolve(p),
            At::Dir(fd) => match self.handle(fd.raw())? {
                Handle::Dir(p) => Ok(p),
                Handle::Device { .. } | Handle::ScsiState { .. } => Err(errno(ENOTDIR)),
            },
        }
    }

    pub(super) fn add_mount(
        &mut self,
        dev: (u32, u32),
        source: String,
        point: PathBuf,
        fs_type: String,
    ) {
        let parent = self
            .mounts
            .iter()
            .rev()
            .filter(|m| point.starts_with(&m.point))
            .max_by_key(|m| m.point.components().count())
            .map_or(1, |m| m.id);
        let id = self.next_mount;
        self.next_mount += 1;
        self.mounts.push(Mount {
            id,
            parent,
            dev,
            source,
            point,
            fs_type,
        });
    }
}
