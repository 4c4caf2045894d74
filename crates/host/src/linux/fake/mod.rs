//! The fake Linux: a [`LinuxOs`] that keeps block devices, their sysfs view, a directory tree
//! and the mount table in memory, so the Linux hosts' logic runs in tests without root and
//! without touching the machine. It behaves as the kernel documents where the logic depends on
//! it: BLKRRPART reads the GPT on the device, BLKPG adds and resizes partitions, mount(2) wants
//! a filesystem of the type asked for (EINVAL otherwise), umount2(2) of something not mounted
//! is EINVAL, `O_EXCL` on a disk with a mounted partition is EBUSY, `O_NOFOLLOW` on a link is
//! ELOOP. The filesystem tools are modelled in `tools`. Every call is recorded, so tests can
//! count what an operation costs.

mod meet;
mod render;
mod scsi;
mod state;
mod tools;

use super::os::{At, Blkpg, LinuxOs, MountFlags, MountOf, Open, OpenOn, Ran, Space, XfsGeometry};
use csi_proxy_formats::signatures;
use state::{Disk, Handle, Mount, Part, State};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Bytes per chunk of a device's sparse contents.
const CHUNK: u64 = 64 << 10;

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}
const ENOENT: i32 = 2;
const EBADF: i32 = 9;
const EBUSY: i32 = 16;
const ENOTDIR: i32 = 20;
const EINVAL: i32 = 22;
const ENOSPC: i32 = 28;
const ELOOP: i32 = 40;
/// EUCLEAN, "Structure needs cleaning" (the kernel's EFSCORRUPTED).
const EUCLEAN: i32 = 117;
const ENXIO: i32 = 6;
const ENODEV: i32 = 19;
const ENOTTY: i32 = 25;

/// The fake Linux (see the module documentation).
#[derive(Debug, Default)]
pub struct FakeLinux {
    state: Mutex<State>,
    meet: meet::Meet,
}

impl FakeLinux {
    /// An empty machine: `/` mounted (a tmpfs), no disks.
    pub fn new() -> Arc<Self> {
        let fake = Self::default();
        {
            let mut s = fake.lock();
            s.dirs.insert("/".into());
            s.next_fd = 3;
            s.next_mount = 21;
            s.next_seq = 1;
            s.mounts.push(Mount {
                id: 20,
                parent: 1,
                dev: (0, 20),
                source: "rootfs".into(),
                point: "/".into(),
                fs_type: "tmpfs".into(),
            });
        }
        Arc::new(fake)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, call: String) -> MutexGuard<'_, State> {
        let mut s = self.lock();
        s.calls.push(call);
        s.fire_replacement();
        s
    }

    /// Attaches a blank disk of `size` bytes with 512-byte sectors; returns its diskseq.
    pub fn add_disk(&self, name: &str, size: u64) -> u32 {
        let mut s = self.lock();
        let seq = s.next_seq;
        s.next_seq += 1;
        let index = s.disks.len() as u32;
        s.disks.push(Disk {
            name: name.into(),
            seq,
            major: 8,
            minor: index * 16,
            sector: 512,
            size,
            data: HashMap::new(),
            parts: Vec::new(),
            scsi_state: None,
            vpd83: None,
        });
        seq as u32
    }

    /// Attaches disk `source`'s LUN a second time as `name`: another SCSI path to the same
    /// storage without multipath. Both report one NAA designator in VPD page 0x83 (given to
    /// `source` here if it had none), and the new path shows what is on the LUN now: its
    /// contents and the partitions the kernel knows. Later writes through one are not
    /// mirrored into the other. Returns the new disk's diskseq.
    pub fn add_disk_path(&self, source: &str, name: &str) -> u32 {
        let mut s = self.lock();
        let seq = s.next_seq;
        s.next_seq += 1;
        let index = s.disks.len() as u32;
        let Some(src) = s.disks.iter_mut().find(|d| d.name == source) else {
            return u32::MAX;
        };
        let naa = 0x6000_0000_0000_0000u64 | u64::from(index);
        let page = src.vpd83.get_or_insert_with(|| {
            let mut p = vec![0x00, 0x83, 0x00, 12, 0x01, 0x03, 0x00, 8];
            p.extend(naa.to_be_bytes());
            p
        });
        let path = Disk {
            name: name.into(),
            seq,
            major: 8,
            minor: index * 16,
            vpd83: Some(page.clone()),
            ..src.clone()
        };
        s.disks.push(path);
        seq as u32
    }

    /// Changes a disk's size (a grown cloud disk), keeping its contents.
    pub fn resize_disk(&self, name: &str, size: u64) {
        if let Some(d) = self.lock().disks.iter_mut().find(|d| d.name == name) {
            d.size = size;
        }
    }

    /// Writes `bytes` at `offset` of the device `name` (a disk or partition), as another
    /// program on the host would.
    pub fn write_device(&self, name: &str, offset: u64, bytes: &[u8]) {
        let mut s = self.lock();
        let (disk, part) = s.device(name).expect("no such device");
        let start = s.disks[disk]
            .parts
            .iter()
            .find(|p| p.number == part)
            .map_or(0, |p| p.start);
        s.disks[disk]
            .write(start + offset, bytes)
            .expect("inside the device");
    }

    /// Creates a directory and its parents.
    pub fn add_dir(&self, path: &str) {
        let mut s = self.lock();
        for p in Path::new(path).ancestors() {
            s.dirs.insert(p.to_path_buf());
        }
    }

    /// Creates a file (in an existing directory).
    pub fn add_file(&self, path: &str) {
        self.lock().files.insert(path.into());
    }

    /// Makes `path` a symbolic link to `target`.
    pub fn add_link(&self, path: &str, target: &str) {
        self.lock().links.insert(path.into(), target.into());
    }

    /// The next run of `program` does its work and is then killed (a daemon or node dying
    /// mid-tool).
    pub fn interrupt(&self, program: &str) {
        self.lock().interrupted.insert(program.into());
    }

    /// Whether a run of a tool was killed by [`FakeLinux::interrupt`] since the last call;
    /// kills asked for that did not land are dropped.
    pub fn take_interrupts(&self) -> bool {
        let mut s = self.lock();
        s.interrupted.clear();
        std::mem::take(&mut s.interrupts_landed) > 0
    }

    /// The next run of `program` never ends on its own: it is stopped at the time limit it is
    /// given (TimedOut), and a run without one fails the test.
    pub fn hang(&self, program: &str) {
        self.lock().hanging.insert(program.into());
    }

    /// Unmounting what is mounted at `point` fails with EBUSY (open files on it).
    pub fn set_busy(&self, point: &str) {
        self.lock().busy.insert(point.into());
    }

    /// Device `name` (`vdb`, `vdb1`) is claimed exclusively by a holder the mount table does not
    /// show (a mount in another namespace) until [`FakeLinux::release`].
    pub fn claim(&self, name: &str) {
        self.lock().claims.insert(name.into());
    }

    /// Ends [`FakeLinux::claim`].
    pub fn release(&self, name: &str) {
        self.lock().claims.remove(name);
    }

    /// The mount points, in mount order.
    pub fn mount_points(&self) -> Vec<String> {
        let s = self.lock();
        s.mounts
            .iter()
            .map(|m| m.point.display().to_string())
            .collect()
    }

    /// Every call made so far, one line each (`"<method> <arguments>"`).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Forgets the calls recorded so far.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// From now on, a `read_file` whose recorded line starts with `prefix` waits up to `wait`
    /// for another thread's, so both have read before either acts on what it read.
    pub fn meet_after(&self, prefix: &str, wait: Duration) {
        self.meet.set(prefix, wait);
    }
}

impl LinuxOs for FakeLinux {
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let call = format!("read_file {}", path.display());
        let s = self.record(call.clone());
        let r = match render::vpd83(&s, path) {
            Some(page) => page,
            None => render::read(&s, path).map(String::into_bytes),
        };
        drop(s);
        self.meet.after(&call);
        r
    }

    fn write_file(&self, path: &Path, text: &str) -> io::Result<()> {
        let mut s = self.record(format!("write_file {} {text}", path.display()));
        // The writable attributes are SCSI and NVMe rescans and SCSI device states; a fake
        // disk has only the last, and only when it is a SCSI one.
        match s.open_scsi_state(path) {
            Some(Ok(Handle::ScsiState { seq })) => {
                s.scsi_disk(seq)?.scsi_state = Some(text.trim().into());
                Ok(())
            }
            Some(Err(e)) => Err(e),
            _ => Err(errno(ENOENT)),
        }
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let s = self.record(format!("list_dir {}", path.display()));
        render::list(&s, path)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        let s = self.record(format!("canonicalize {}", path.display()));
        render::sys_dev_link(&s, path).map_or_else(|| s.resolve(path), Ok)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        let s = self.record(format!("read_link {}", path.display()));
        s.links.get(path).cloned().ok_or_else(|| errno(EINVAL))
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.record(format!("exists {}", path.display()));
        render::sys_dev_link(&s, path).is_some()
            || render::read(&s, path).is_ok()
            || s.resolve(path).is_ok()
    }

    fn open_on(&self, path: &Path) -> io::Result<OpenOn> {
        let s = self.record(format!("open_on {}", path.display()));
        let real = s.resolve(path)?;
        match s.device_at(&real) {
            Some((disk, part)) => Ok(OpenOn::Block(s.dev_numbers(disk, part))),
            // No fake loop has a backing file: a file's numbers match none.
            None if s.is_dir(&real) || s.files.contains(&real) => Ok(OpenOn::File {
                dev: u64::MAX,
                ino: u64::MAX,
            }),
            None => Err(errno(ENOENT)),
        }
    }

    fn create_dir_all(&self, path: &Path, _mode: u32) -> io::Result<()> {
        let mut s = self.record(format!("create_dir_all {}", path.display()));
        for p in path.ancestors() {
            s.dirs.insert(p.to_path_buf());
        }
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.record(format!("remove_dir {}", path.display()));
        if s.mounts.iter().any(|m| m.point == path) {
            return Err(errno(EBUSY));
        }
        if s.dirs.iter().any(|d| d.parent() == Some(path))
            || s.files.iter().any(|f| f.parent() == Some(path))
        {
            return Err(errno(39)); // ENOTEMPTY
        }
        if s.dirs.remove(path) {
            Ok(())
        } else {
            Err(errno(ENOENT))
        }
    }

    fn open_raw(&self, path: &Path, how: Open) -> io::Result<u64> {
        let mut s = self.record(format!("open {} {how:?}", path.display()));
        let handle = if let Some(attr) = s.open_scsi_state(path) {
            attr?
        } else if let Some((disk, part)) = s.device_at(path) {
            if how == Open::DirNoFollow {
                return Err(errno(ENOTDIR));
            }
            let d = &s.disks[disk];
            let claimed = |p: u32| {
                let dev = (d.major, d.minor + p);
                let name = if p == 0 {
                    d.name.clone()
                } else {
                    d.part_name(p)
                };
                s.mounts.iter().any(|m| m.dev == dev) || s.claims.contains(&name)
            };
            // O_EXCL on a block device: EBUSY while it, or (for a whole disk) one of its
            // partitions, is claimed (by a mount, or a holder set with `claim`).
            if matches!(how, Open::Write { exclusive: true } | Open::Claim)
                && (claimed(part) || part == 0 && d.parts.iter().any(|p| claimed(p.number)))
            {
                return Err(errno(EBUSY));
            }
            Handle::Device {
                disk: d.name.clone(),
                part,
            }
        } else if how == Open::DirNoFollow && s.links.contains_key(path) {
            return Err(errno(ELOOP));
        } else if how == Open::MountRoot && path.ancestors().any(|p| s.links.contains_key(p)) {
            // RESOLVE_NO_SYMLINKS: a link anywhere on the way.
            return Err(errno(ELOOP));
        } else {
            let real = s.resolve(path)?;
            if !s.is_dir(&real) {
                return Err(errno(
                    if matches!(how, Open::DirNoFollow | Open::MountRoot) {
                        ENOTDIR
                    } else {
                        ENOENT
                    },
                ));
            }
            Handle::Dir(real)
        };
        let fd = s.next_fd;
        s.next_fd += 1;
        s.handles.insert(fd, handle);
        Ok(fd)
    }

    fn close(&self, fd: u64) {
        self.record(format!("close {fd}")).handles.remove(&fd);
    }

    fn device_number(&self, fd: u64) -> io::Result<(u32, u32)> {
        let s = self.record(format!("device_number {fd}"));
        let Handle::Device { disk, part } = s.handle(fd)? else {
            return Err(errno(EINVAL));
        };
        let i = s
            .disks
            .iter()
            .position(|d| d.name == disk)
            .ok_or_else(|| errno(ENXIO))?;
        Ok(s.dev_numbers(i, part))
    }

    fn read_at(&self, fd: u64, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut s = self.record(format!("read_at {fd} {offset} {len}"));
        if let Handle::ScsiState { seq } = s.handle(fd)? {
            let text = format!(
                "{}\n",
                s.scsi_disk(seq)?.scsi_state.clone().unwrap_or_default()
            );
            let bytes = text.as_bytes();
            let from = (offset as usize).min(bytes.len());
            return Ok(bytes[from..(from + len).min(bytes.len())].to_vec());
        }
        let (i, start, dev_len) = s.extent(&s.handle(fd)?)?;
        let len = (len as u64).min(dev_len.saturating_sub(offset)) as usize;
        Ok(s.disks[i].read(start + offset, len))
    }

    fn write_at(&self, fd: u64, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut s = self.record(format!("write_at {fd} {offset} {}", bytes.len()));
        if let Handle::ScsiState { seq } = s.handle(fd)? {
            let text = String::from_utf8_lossy(bytes).trim().to_string();
            s.scsi_disk(seq)?.scsi_state = Some(text);
            return Ok(());
        }
        let (i, start, dev_len) = s.extent(&s.handle(fd)?)?;
        if offset + bytes.len() as u64 > dev_len {
            return Err(errno(ENOSPC));
        }
        s.disks[i].write(start + offset, bytes)
    }

    fn fsync(&self, fd: u64) -> io::Result<()> {
        self.record(format!("fsync {fd}")).handle(fd).map(drop)
    }

    fn syncfs(&self, fd: u64) -> io::Result<()> {
        self.record(format!("syncfs {fd}")).handle(fd).map(drop)
    }

    fn device_len(&self, fd: u64) -> io::Result<u64> {
        let s = self.record(format!("device_len {fd}"));
        Ok(s.extent(&s.handle(fd)?)?.2)
    }

    fn diskseq(&self, fd: u64) -> io::Result<u64> {
        let s = self.record(format!("diskseq {fd}"));
        let (i, _, _) = s.extent(&s.handle(fd)?)?;
        Ok(s.disks[i].seq)
    }

    fn reread_partitions(&self, fd: u64) -> io::Result<()> {
        let mut s = self.record(format!("reread_partitions {fd}"));
        let (i, _, _) = s.extent(&s.handle(fd)?)?;
        let d = &s.disks[i];
        let busy = d.parts.iter().any(|p| {
            let dev = (d.major, d.minor + p.number);
            s.mounts.iter().any(|m| m.dev == dev)
        });
        if busy {
            return Err(errno(EBUSY));
        }
        let head = d.read(0, csi_proxy_formats::gpt::head_len(d.sector));
        let parts = match csi_proxy_formats::gpt::Gpt::parse(&head, d.sector, d.size / d.sector) {
            Ok(Some(t)) => t.data_extents(),
            _ => csi_proxy_formats::gpt::mbr_data_extents(&head, d.sector),
        };
        s.disks[i].parts = parts
            .into_iter()
            .map(|(number, start, len)| Part { number, start, len })
            .collect();
        Ok(())
    }

    fn blkpg(&self, fd: u64, op: Blkpg, number: u32, start: u64, length: u64) -> io::Result<()> {
        let mut s = self.record(format!("blkpg {fd} {op:?} {number} {start} {length}"));
        let (i, _, _) = s.extent(&s.handle(fd)?)?;
        let parts = &mut s.disks[i].parts;
        let at = parts.iter().position(|p| p.number == number);
        match (op, at) {
            (Blkpg::Add, Some(_)) => Err(errno(EBUSY)),
            (Blkpg::Add, None) => {
                parts.push(Part {
                    number,
                    start,
                    len: length,
                });
                parts.sort_by_key(|p| p.number);
                Ok(())
            }
            (Blkpg::Resize, Some(at)) if parts[at].start == start => {
                parts[at].len = length;
                Ok(())
            }
            (Blkpg::Resize, _) => Err(errno(ENXIO)),
            (Blkpg::Delete, Some(at)) => {
                parts.remove(at);
                Ok(())
            }
            (Blkpg::Delete, None) => Err(errno(ENXIO)),
        }
    }

    fn loop_set_capacity(&self, fd: u64) -> io::Result<()> {
        self.record(format!("loop_set_capacity {fd}"))
            .handle(fd)
            .map(drop)
    }

    fn loop_backing(&self, fd: u64) -> io::Result<crate::linux::os::LoopBacking> {
        // No fake disk is a loop device: the ioctl is not one its driver knows.
        self.record(format!("loop_backing {fd}")).handle(fd)?;
        Err(errno(ENOTTY))
    }

    fn dir_is_empty(&self, fd: u64) -> io::Result<bool> {
        let s = self.record(format!("dir_is_empty {fd}"));
        let Handle::Dir(dir) = s.handle(fd)? else {
            return Err(errno(ENOTDIR));
        };
        let child = |p: &PathBuf| p.parent() == Some(dir.as_path());
        Ok(!s.dirs.iter().any(child) && !s.files.iter().any(child) && !s.links.keys().any(child))
    }

    fn mount(
        &self,
        source: &Path,
        target: At<'_>,
        fs_type: &str,
        flags: MountFlags,
    ) -> io::Result<()> {
        let mut s = self.record(format!(
            "mount {} {target:?} {fs_type} {flags:?}",
            source.display()
        ));
        let (disk, part) = s.device_at(source).ok_or_else(|| errno(ENOENT))?;
        let point = s.target(target)?;
        if !s.is_dir(&point) {
            return Err(errno(ENOTDIR));
        }
        let (i, start, len) = s.extent(&Handle::Device {
            disk: s.disks[disk].name.clone(),
            part,
        })?;
        let head = s.disks[i].read(start, signatures::PROBE_LEN.min(len as usize));
        // mount(2): EINVAL when the superblock is not one of the filesystem type asked for.
        if signatures::probe(&head).and_then(|sig| sig.mount_type) != Some(fs_type) {
            return Err(errno(EINVAL));
        }
        // The kernel refuses an xfs whose mkfs never finished ("Offline file system operation
        // in progress!"): EFSCORRUPTED.
        if fs_type == "xfs"
            && head
                .get(tools::XFS_INPROGRESS as usize)
                .is_some_and(|b| *b != 0)
        {
            return Err(errno(EUCLEAN));
        }
        let dev = s.dev_numbers(disk, part);
        s.add_mount(dev, source.display().to_string(), point, fs_type.into());
        Ok(())
    }

    fn bind_onto_itself(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.record(format!("bind_onto_itself {}", dir.display()));
        let point = s.resolve(dir)?;
        let under = s
            .mounts
            .iter()
            .filter(|m| point.starts_with(&m.point))
            .max_by_key(|m| m.point.components().count())
            .cloned()
            .ok_or_else(|| errno(EINVAL))?;
        s.add_mount(under.dev, under.source, point, under.fs_type);
        Ok(())
    }

    fn make_private(&self, dir: &Path) -> io::Result<()> {
        let s = self.record(format!("make_private {}", dir.display()));
        let point = s.resolve(dir)?;
        s.topmost(&point).map(drop).ok_or_else(|| errno(EINVAL))
    }

    fn unmount(&self, target: At<'_>, nofollow: bool) -> io::Result<()> {
        let mut s = self.record(format!("unmount {target:?} nofollow={nofollow}"));
        if let At::Path(p) = target
            && nofollow
            && s.links.contains_key(p)
        {
            return Err(errno(EINVAL));
        }
        let point = s.target(target)?;
        let at = s.topmost(&point).ok_or_else(|| errno(EINVAL))?;
        if s.busy.contains(&point) {
            return Err(errno(EBUSY));
        }
        s.mounts.remove(at);
        Ok(())
    }

    fn statvfs(&self, fd: u64) -> io::Result<Space> {
        let s = self.record(format!("statvfs {fd}"));
        let Handle::Dir(path) = s.handle(fd)? else {
            return Err(errno(EINVAL));
        };
        let m = s.mount_holding(&path).ok_or_else(|| errno(ENOENT))?;
        let name = m.source.trim_start_matches("/dev/");
        let Some((disk, part)) = s.device(name) else {
            return Ok(Space {
                total: 1 << 30,
                free: 1 << 29,
                block: 4096,
            });
        };
        let (i, start, _) = s.extent(&Handle::Device {
            disk: s.disks[disk].name.clone(),
            part,
        })?;
        let head = s.disks[i].read(start, signatures::PROBE_LEN);
        let u = signatures::superblock_usage(&head).ok_or_else(|| errno(EINVAL))?;
        Ok(Space {
            total: u.total_bytes,
            free: u.free_bytes,
            block: 4096,
        })
    }

    fn mount_of(&self, fd: u64) -> io::Result<MountOf> {
        let s = self.record(format!("mount_of {fd}"));
        let Handle::Dir(path) = s.handle(fd)? else {
            return Err(errno(EINVAL));
        };
        let m = s.mount_holding(&path).ok_or_else(|| errno(ENOENT))?;
        Ok(MountOf {
            id: Some(m.id),
            root: Some(m.point == path),
            dev: m.dev,
        })
    }

    fn xfs_geometry(&self, fd: u64) -> io::Result<XfsGeometry> {
        let mut s = self.record(format!("xfs_geometry {fd}"));
        tools::xfs_geometry(&mut s, fd)
    }

    fn xfs_grow_data(&self, fd: u64, blocks: u64, imaxpct: u32) -> io::Result<()> {
        let mut s = self.record(format!("xfs_grow_data {fd} {blocks} {imaxpct}"));
        tools::grow_mounted(&mut s, fd, "xfs", blocks)
    }

    fn ext4_resize(&self, fd: u64, blocks: u64) -> io::Result<()> {
        let mut s = self.record(format!("ext4_resize {fd} {blocks}"));
        tools::grow_mounted(&mut s, fd, "ext4", blocks)
    }

    fn btrfs_grow_device(&self, fd: u64, devid: u64) -> io::Result<()> {
        let mut s = self.record(format!("btrfs_grow_device {fd} {devid}"));
        tools::grow_mounted(&mut s, fd, "btrfs", devid)
    }

    fn random16(&self) -> io::Result<[u8; 16]> {
        let mut s = self.record("random16".into());
        s.random = s.random.wrapping_add(1);
        let mut b = [0x5a; 16];
        b[15] = s.random;
        Ok(b)
    }

    fn run(&self, program: &str, args: &[&str], limit: Option<Duration>) -> io::Result<Ran> {
        let mut s = self.record(format!("run {program} {}", args.join(" ")));
        if s.hanging.remove(program) {
            // Killed at its limit, as the real seam does; without one it would run for ever.
            assert!(
                limit.is_some(),
                "{program} never ends and was given no time limit"
            );
            return Err(io::ErrorKind::TimedOut.into());
        }
        tools::run(&mut s, program, args)
    }

    fn sleep(&self, d: Duration) {
        drop(self.record(format!("sleep {}ms", d.as_millis())));
    }
}

#[cfg(test)]
mod tests;
