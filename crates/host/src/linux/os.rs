//! The Linux seam: every OS primitive the Linux disk and volume hosts use, as one narrow trait
//! with plain Rust types.
//!
//! The hosts' logic (naming volumes, checking that a device is still the one resolved, the
//! format/mount/resize rules, retries) is written against [`LinuxOs`]. Two implementations
//! exist: the real one ([`super::kernel::SystemLinux`]), which makes one documented call per
//! method and nothing else, and the fake Linux (`super::fake`, feature `linux-fake`), which
//! keeps disks, sysfs and the mount table in memory so the logic is tested without root.
//! Shaped after youki's `Syscall` trait (see the design's anchors), like the Windows seam.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How [`LinuxOs::open_raw`] (and [`Fd::open`]) opens a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// Read only (a device to probe, a mount point to sync).
    Read,
    /// Read and write; with `exclusive`, `O_EXCL` (a block device then refuses with EBUSY while
    /// it or one of its partitions is claimed).
    Write {
        /// Whether to ask for `O_EXCL`.
        exclusive: bool,
    },
    /// Read only with `O_EXCL`: a block device refuses with EBUSY while it or one of its
    /// partitions is claimed (mounted, stacked on, opened exclusively). Nothing is written, so
    /// closing it wakes no udev watch.
    Claim,
    /// A directory, refusing a final symbolic link (`O_DIRECTORY | O_NOFOLLOW`: ELOOP on a
    /// link), so what is checked is what is mounted on.
    DirNoFollow,
    /// A mount point as the mount table names it (the kernel's name, which passes no link): a
    /// directory (`O_DIRECTORY`, so a FIFO or a device node put there is never opened) reached
    /// without following any symbolic link on the way (ELOOP on one). The caller then checks
    /// with [`LinuxOs::mount_of`] that it is that mount's root.
    MountRoot,
}

/// Which mount an open directory is on ([`LinuxOs::mount_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountOf {
    /// The mount's ID as `/proc/self/mountinfo` numbers it, when the kernel reports it.
    pub id: Option<u64>,
    /// Whether the directory is the root of its mount, when the kernel reports it.
    pub root: Option<bool>,
    /// The device number of its filesystem (`st_dev`).
    pub dev: (u32, u32),
}

/// The BLKPG operations used (include/uapi/linux/blkpg.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blkpg {
    /// `BLKPG_ADD_PARTITION`: tell the kernel about a new partition.
    Add = 1,
    /// `BLKPG_DEL_PARTITION`: the kernel forgets a partition (EBUSY while it is open).
    Delete = 2,
    /// `BLKPG_RESIZE_PARTITION`: a partition's length changed (its start must not); works
    /// while the partition is mounted, unlike BLKRRPART.
    Resize = 3,
}

/// Where a mount or unmount acts: a path, or a directory opened with [`Open::DirNoFollow`]
/// (through its `/proc/self/fd` link, so the directory checked is the one acted on).
#[derive(Debug, Clone, Copy)]
pub enum At<'a> {
    /// A path, resolved by the kernel at the call.
    Path(&'a Path),
    /// An open directory.
    Dir(&'a Fd),
}

/// mount(2) flags and options the hosts use. Every volume mount is `MS_NOSUID | MS_NODEV`: a
/// tenant's filesystem never carries a set-uid program or a device node the host honours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MountFlags {
    /// `MS_NOEXEC` too: nothing on the filesystem is run (the private mounts tools work in).
    pub noexec: bool,
    /// The filesystem's own options (mount(2)'s `data`, e.g. `errors=remount-ro`); empty for
    /// none.
    pub data: &'static str,
}

/// What a finished tool left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ran {
    /// Exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

/// Size and free space of a mounted filesystem (statvfs(3): blocks times fragment size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// `f_blocks * f_frsize`.
    pub total: u64,
    /// `f_bfree * f_frsize`.
    pub free: u64,
    /// `f_frsize`: the unit the filesystem counts its blocks in (ext2/3/4's block size).
    pub block: u64,
}

/// What growing a mounted xfs needs from its geometry (`XFS_IOC_FSGEOMETRY_V1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XfsGeometry {
    /// Filesystem block size in bytes.
    pub block_size: u32,
    /// Data blocks the filesystem spans now.
    pub data_blocks: u64,
    /// The most space inodes may take, in percent; kept as it is when growing.
    pub imaxpct: u32,
}

/// What the kernel holds as a loop device's backing file (`LOOP_GET_STATUS64`): its numbers as
/// the kernel took them when the loop was set up, whatever its path names now (another mount
/// namespace's node, a deleted file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopBacking {
    /// `lo_device`: `st_dev` of the backing file (encoded as `huge_encode_dev`).
    pub dev: u64,
    /// `lo_inode`: its inode number.
    pub ino: u64,
    /// `lo_rdevice` as `(major, minor)`: the device a loop set up over a block device node
    /// reaches; `(0, 0)` for a regular file.
    pub rdev: (u32, u32),
}

/// What a path (a process's descriptor under `/proc/<pid>/fd`, a mapping under `map_files/`)
/// is open on, as far as the in-use rule asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenOn {
    /// A block device, by its `st_rdev` as `(major, minor)`.
    Block((u32, u32)),
    /// Anything else, by its `st_dev` (encoded as the kernel's `huge_encode_dev`, as a loop's
    /// `lo_device` is) and `st_ino`: a loop's backing file is matched by these.
    File {
        /// `st_dev`, encoded.
        dev: u64,
        /// `st_ino`.
        ino: u64,
    },
}

/// `(major, minor)` encoded as the kernel's `huge_encode_dev` (`new_encode_dev`): how
/// `LOOP_GET_STATUS64` reports `lo_device`.
pub fn encode_dev(major: u32, minor: u32) -> u64 {
    u64::from(minor & 0xff) | (u64::from(major) << 8) | (u64::from(minor & !0xff) << 12)
}

/// One process holding a file, as the kernel's task iterators report it.
pub use csi_proxy_formats::bpf::program::{Found as Held, Record as TaskHolder};

/// The OS primitives of the Linux disk and volume hosts. Each method is one documented call of
/// the real OS; see [`super::kernel::SystemLinux`] for which.
pub trait LinuxOs: Send + Sync {
    /// read(2) of a whole file of the kernel's pseudo filesystems (a sysfs attribute,
    /// `/proc/swaps`, `/proc/self/mountinfo`).
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// write(2) of `text` to a sysfs attribute (a rescan, a SCSI device state).
    fn write_file(&self, path: &Path, text: &str) -> io::Result<()>;
    /// getdents(2): the names in a directory (sysfs), without `.` and `..`.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// realpath(3): `path` with every link resolved (`/sys/dev/block/M:m`, a target's parents).
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
    /// readlink(2) of `path` itself: the kernel's name for a held descriptor
    /// (`/proc/self/fd/N`), which is not resolved again.
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// stat(2) succeeds: something is at `path` (a device node, a sysfs entry).
    fn exists(&self, path: &Path) -> bool;
    /// stat(2) of `path`, following links (`/proc/<pid>/fd/N`, a loop's backing file): what
    /// it is open on, a block device by its `st_rdev`, anything else by its `st_dev` and
    /// `st_ino`.
    fn open_on(&self, path: &Path) -> io::Result<OpenOn>;
    /// mkdir(2) of `path` and its missing parents, new ones with `mode`.
    fn create_dir_all(&self, path: &Path, mode: u32) -> io::Result<()>;
    /// rmdir(2).
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// open(2) as `how` says; the handle is closed when the [`Fd`] is dropped.
    fn open_raw(&self, path: &Path, how: Open) -> io::Result<u64>;
    /// close(2).
    fn close(&self, fd: u64);
    /// fstat(2): the device number (`st_rdev`) of an open device node.
    fn device_number(&self, fd: u64) -> io::Result<(u32, u32)>;
    /// pread(2) until `len` bytes or the end of the device (short at the end).
    fn read_at(&self, fd: u64, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// pwrite(2) of all of `bytes` at `offset`.
    fn write_at(&self, fd: u64, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// fsync(2): on a block device, the dirty pages and then the device's volatile cache.
    fn fsync(&self, fd: u64) -> io::Result<()>;
    /// syncfs(2) of the filesystem an open file is on.
    fn syncfs(&self, fd: u64) -> io::Result<()>;
    /// lseek(2) to `SEEK_END`: a block device's size in bytes.
    fn device_len(&self, fd: u64) -> io::Result<u64>;
    /// `BLKGETDISKSEQ`: the diskseq of the disk an open device belongs to.
    fn diskseq(&self, fd: u64) -> io::Result<u64>;
    /// `BLKRRPART`: the kernel re-reads the partition table (EBUSY while a partition is open).
    fn reread_partitions(&self, fd: u64) -> io::Result<()>;
    /// `BLKPG`: partition `number` at `start` with `length` (bytes).
    fn blkpg(&self, fd: u64, op: Blkpg, number: u32, start: u64, length: u64) -> io::Result<()>;
    /// `LOOP_SET_CAPACITY`: a loop device picks up a new size of its backing file.
    fn loop_set_capacity(&self, fd: u64) -> io::Result<()>;
    /// `LOOP_GET_STATUS64`: what backs the open loop device (ENXIO when nothing does).
    fn loop_backing(&self, fd: u64) -> io::Result<LoopBacking>;
    /// The kernel's task iterators (BPF `task_file` and `task_vma`, `super::task_iter`): every
    /// block device, and every regular file whose inode number is in `inodes`, that a process
    /// other than the daemon holds open or mapped, by the host PID. `Ok(None)` when the node
    /// offers no such iterator; the in-use rule then reads `/proc` itself. The fake Linux has
    /// none.
    fn task_holders(&self, inodes: &[u64]) -> io::Result<Option<Vec<TaskHolder>>> {
        let _ = inodes;
        Ok(None)
    }
    /// Whether the directory opened as `fd` has no entries (getdents(2) of its `/proc/self/fd`
    /// link).
    fn dir_is_empty(&self, fd: u64) -> io::Result<bool>;
    /// mount(2) of the block device `source` holding `fs_type` at `target`, with
    /// `MS_NOSUID | MS_NODEV` and `flags`.
    fn mount(
        &self,
        source: &Path,
        target: At<'_>,
        fs_type: &str,
        flags: MountFlags,
    ) -> io::Result<()>;
    /// mount(2) with `MS_BIND` of `dir` onto itself, making it a mount of its own.
    fn bind_onto_itself(&self, dir: &Path) -> io::Result<()>;
    /// mount(2) with `MS_PRIVATE`: mounts under `dir` never propagate to other namespaces.
    fn make_private(&self, dir: &Path) -> io::Result<()>;
    /// umount2(2); with `nofollow`, `UMOUNT_NOFOLLOW` (a link at `target` is not followed).
    fn unmount(&self, target: At<'_>, nofollow: bool) -> io::Result<()>;
    /// fstatvfs(3) of the filesystem an open file is on.
    fn statvfs(&self, fd: u64) -> io::Result<Space>;
    /// statx(2) of an open file (`AT_EMPTY_PATH`, `STATX_MNT_ID`): the mount it is on.
    fn mount_of(&self, fd: u64) -> io::Result<MountOf>;
    /// `XFS_IOC_FSGEOMETRY_V1` on an open file of a mounted xfs: its geometry.
    fn xfs_geometry(&self, fd: u64) -> io::Result<XfsGeometry>;
    /// `XFS_IOC_FSGROWFSDATA` on an open file of a mounted xfs: its data section grows to
    /// `blocks` filesystem blocks, inodes keeping `imaxpct`.
    fn xfs_grow_data(&self, fd: u64, blocks: u64, imaxpct: u32) -> io::Result<()>;
    /// `EXT4_IOC_RESIZE_FS` on an open file of a mounted ext4: it grows to `blocks` blocks.
    fn ext4_resize(&self, fd: u64, blocks: u64) -> io::Result<()>;
    /// `BTRFS_IOC_RESIZE` with `<devid>:max` on an open file of a mounted btrfs: its device
    /// `devid` grows to fill that device.
    fn btrfs_grow_device(&self, fd: u64, devid: u64) -> io::Result<()>;
    /// 16 bytes from the kernel's random generator (`/dev/urandom`).
    fn random16(&self) -> io::Result<[u8; 16]>;
    /// Starts `program` with `args` (`LC_ALL=C`, no input, dying with the daemon) and waits for
    /// it, for at most `limit`: `TimedOut` past it (the tool is then killed), `NotFound` when it
    /// is not installed.
    fn run(&self, program: &str, args: &[&str], limit: Option<Duration>) -> io::Result<Ran>;
    /// Waits while the kernel catches up (devtmpfs nodes, a busy unmount).
    fn sleep(&self, d: Duration);
}

/// The seam as the hosts hold it.
pub type Os = Arc<dyn LinuxOs>;

/// An open file, directory or device, closed when dropped.
pub struct Fd {
    os: Os,
    raw: u64,
}

impl Fd {
    /// Opens `path` through `os`.
    pub fn open(os: &Os, path: &Path, how: Open) -> io::Result<Fd> {
        os.open_raw(path, how).map(|raw| Fd {
            os: os.clone(),
            raw,
        })
    }

    /// The value the seam gave for the handle.
    pub fn raw(&self) -> u64 {
        self.raw
    }

    /// See [`LinuxOs::read_at`].
    pub fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.os.read_at(self.raw, offset, len)
    }

    /// See [`LinuxOs::write_at`].
    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.os.write_at(self.raw, offset, bytes)
    }

    /// See [`LinuxOs::fsync`].
    pub fn fsync(&self) -> io::Result<()> {
        self.os.fsync(self.raw)
    }

    /// See [`LinuxOs::syncfs`].
    pub fn syncfs(&self) -> io::Result<()> {
        self.os.syncfs(self.raw)
    }

    /// See [`LinuxOs::device_len`].
    pub fn device_len(&self) -> io::Result<u64> {
        self.os.device_len(self.raw)
    }

    /// See [`LinuxOs::loop_backing`].
    pub fn loop_backing(&self) -> io::Result<LoopBacking> {
        self.os.loop_backing(self.raw)
    }

    /// See [`LinuxOs::device_number`].
    pub fn device_number(&self) -> io::Result<(u32, u32)> {
        self.os.device_number(self.raw)
    }

    /// See [`LinuxOs::diskseq`].
    pub fn diskseq(&self) -> io::Result<u64> {
        self.os.diskseq(self.raw)
    }

    /// See [`LinuxOs::reread_partitions`].
    pub fn reread_partitions(&self) -> io::Result<()> {
        self.os.reread_partitions(self.raw)
    }

    /// See [`LinuxOs::blkpg`].
    pub fn blkpg(&self, op: Blkpg, number: u32, start: u64, length: u64) -> io::Result<()> {
        self.os.blkpg(self.raw, op, number, start, length)
    }

    /// See [`LinuxOs::statvfs`].
    pub fn statvfs(&self) -> io::Result<Space> {
        self.os.statvfs(self.raw)
    }

    /// See [`LinuxOs::mount_of`].
    pub fn mount_of(&self) -> io::Result<MountOf> {
        self.os.mount_of(self.raw)
    }

    /// See [`LinuxOs::xfs_geometry`].
    pub fn xfs_geometry(&self) -> io::Result<XfsGeometry> {
        self.os.xfs_geometry(self.raw)
    }

    /// See [`LinuxOs::xfs_grow_data`].
    pub fn xfs_grow_data(&self, blocks: u64, imaxpct: u32) -> io::Result<()> {
        self.os.xfs_grow_data(self.raw, blocks, imaxpct)
    }

    /// See [`LinuxOs::ext4_resize`].
    pub fn ext4_resize(&self, blocks: u64) -> io::Result<()> {
        self.os.ext4_resize(self.raw, blocks)
    }

    /// See [`LinuxOs::btrfs_grow_device`].
    pub fn btrfs_grow_device(&self, devid: u64) -> io::Result<()> {
        self.os.btrfs_grow_device(self.raw, devid)
    }

    /// See [`LinuxOs::dir_is_empty`].
    pub fn dir_is_empty(&self) -> io::Result<bool> {
        self.os.dir_is_empty(self.raw)
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        self.os.close(self.raw);
    }
}

impl fmt::Debug for Fd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fd({})", self.raw)
    }
}

#[cfg(test)]
thread_local! {
    static SYSTEM_USES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The seam acting on this machine.
pub fn system() -> Os {
    #[cfg(test)]
    SYSTEM_USES.with(|n| n.set(n.get() + 1));
    Arc::new(super::kernel::SystemLinux::default())
}

/// How often [`system`] was asked for on this thread: tests over the fake prove with it that
/// nothing reached the real kernel.
#[cfg(test)]
pub(crate) fn system_uses_on_this_thread() -> usize {
    SYSTEM_USES.with(|n| n.get())
}

/// Reads a text attribute, trimmed.
pub fn read_text(os: &dyn LinuxOs, path: &Path) -> io::Result<String> {
    Ok(String::from_utf8_lossy(&os.read_file(path)?)
        .trim()
        .to_string())
}

/// Reads a decimal attribute.
pub fn read_u64(os: &dyn LinuxOs, path: &Path) -> io::Result<u64> {
    read_text(os, path)?
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, path.display().to_string()))
}
