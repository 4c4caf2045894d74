//! The real [`LinuxOs`]: one system call (or one libc/std wrapper of one) per method, and the
//! man-page behaviour each relies on. No decisions are taken here.
#![allow(
    unsafe_code,
    reason = "the block-device ioctls have no safe wrapper; each block says why it is sound"
)]

use super::os::{
    At, Blkpg, LinuxOs, LoopBacking, MountFlags, MountOf, Open, OpenOn, Ran, Space, XfsGeometry,
    encode_dev,
};
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// This machine's kernel. Open files are kept in a table keyed by the handle the seam hands
/// out, so a stale or made-up handle is EBADF, never someone else's descriptor.
#[derive(Debug, Default)]
pub struct SystemLinux {
    files: Mutex<HashMap<u64, Arc<File>>>,
    next: AtomicU64,
}

fn ebadf() -> io::Error {
    io::Error::from_raw_os_error(rustix::io::Errno::BADF.raw_os_error())
}

impl SystemLinux {
    fn file(&self, fd: u64) -> io::Result<Arc<File>> {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fd)
            .cloned()
            .ok_or_else(ebadf)
    }

    /// The path that names `at` for the kernel: an open directory through its `/proc/self/fd`
    /// magic link (proc(5): mounting on it acts on the open directory, not on a path lookup).
    /// The file is returned too, to stay open while the path is used.
    fn path(&self, at: At<'_>) -> io::Result<(PathBuf, Option<Arc<File>>)> {
        match at {
            At::Path(p) => Ok((p.to_path_buf(), None)),
            At::Dir(fd) => {
                let f = self.file(fd.raw())?;
                Ok((
                    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())),
                    Some(f),
                ))
            }
        }
    }
}

/// openat2(2) with `RESOLVE_NO_SYMLINKS`: "disallow resolution of symbolic links during path
/// resolution" (ELOOP on one, the final component included); `O_DIRECTORY` fails with ENOTDIR
/// on anything but a directory before it is opened, so a FIFO is never waited on. Kernels
/// before 5.6 lack openat2 (ENOSYS): there only the final component is refused as a link
/// (`O_NOFOLLOW`), and the caller's mount-ID check decides.
fn open_mount_root(path: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let how = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(rustix::fs::CWD, path, flags, Mode::empty(), how) {
        Ok(fd) => Ok(File::from(fd)),
        Err(rustix::io::Errno::NOSYS) => {
            Ok(File::from(rustix::fs::open(path, flags, Mode::empty())?))
        }
        Err(e) => Err(e.into()),
    }
}

impl SystemLinux {
    /// Keeps an open file in the table and hands out its handle.
    fn keep(&self, f: File) -> u64 {
        let fd = self.next.fetch_add(1, Ordering::Relaxed);
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fd, Arc::new(f));
        fd
    }
}

impl LinuxOs for SystemLinux {
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn write_file(&self, path: &Path, text: &str) -> io::Result<()> {
        fs::write(path, text)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        fs::canonicalize(path)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        fs::read_link(path)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn open_on(&self, path: &Path) -> io::Result<OpenOn> {
        // statx(2) asking for the type and inode alone (the device numbers always come with
        // them), and no filesystem asked to bring sizes or times up to date
        // (AT_STATX_DONT_SYNC).
        let st = rustix::fs::statx(
            rustix::fs::CWD,
            path,
            rustix::fs::AtFlags::STATX_DONT_SYNC,
            rustix::fs::StatxFlags::TYPE | rustix::fs::StatxFlags::INO,
        )?;
        let mode = u32::from(st.stx_mode);
        if rustix::fs::FileType::from_raw_mode(mode) == rustix::fs::FileType::BlockDevice {
            return Ok(OpenOn::Block((st.stx_rdev_major, st.stx_rdev_minor)));
        }
        Ok(OpenOn::File {
            dev: encode_dev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
        })
    }

    fn create_dir_all(&self, path: &Path, mode: u32) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn open_raw(&self, path: &Path, how: Open) -> io::Result<u64> {
        if how == Open::MountRoot {
            let f = open_mount_root(path)?;
            return Ok(self.keep(f));
        }
        let mut o = fs::OpenOptions::new();
        o.read(true);
        match how {
            Open::Read => {}
            // open(2): "on Linux 2.6 and later, O_EXCL can be used without O_CREAT" on a block
            // device, which then fails with EBUSY while the device is in use.
            Open::Write { exclusive } => {
                o.write(true);
                if exclusive {
                    o.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32);
                }
            }
            Open::Claim => {
                o.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32);
            }
            // open(2): with O_NOFOLLOW a final symbolic link fails with ELOOP; O_DIRECTORY
            // fails with ENOTDIR on anything but a directory.
            Open::DirNoFollow | Open::MountRoot => {
                o.custom_flags(
                    (rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW).bits() as i32,
                );
            }
        }
        Ok(self.keep(o.open(path)?))
    }

    fn close(&self, fd: u64) {
        // The descriptor closes when the last user of the Arc is done with it.
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fd);
    }

    fn device_number(&self, fd: u64) -> io::Result<(u32, u32)> {
        let st = rustix::fs::fstat(&*self.file(fd)?)?;
        Ok((rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)))
    }

    fn read_at(&self, fd: u64, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let f = self.file(fd)?;
        let mut buf = vec![0u8; len];
        let mut done = 0;
        // pread(2) may return fewer bytes than asked; 0 is the end of the device.
        while done < len {
            match f.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    fn write_at(&self, fd: u64, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file(fd)?.write_all_at(bytes, offset)
    }

    fn fsync(&self, fd: u64) -> io::Result<()> {
        self.file(fd)?.sync_all()
    }

    fn syncfs(&self, fd: u64) -> io::Result<()> {
        Ok(rustix::fs::syncfs(&*self.file(fd)?)?)
    }

    fn device_len(&self, fd: u64) -> io::Result<u64> {
        // lseek(2) to SEEK_END on a block device gives its size; reads use pread, so the moved
        // offset is never used.
        Ok(rustix::fs::seek(
            &*self.file(fd)?,
            rustix::fs::SeekFrom::End(0),
        )?)
    }

    fn diskseq(&self, fd: u64) -> io::Result<u64> {
        const BLKGETDISKSEQ: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<u64>(0x12, 128);
        let f = self.file(fd)?;
        // SAFETY: BLKGETDISKSEQ is `_IOR(0x12, 128, __u64)` (include/uapi/linux/fs.h): the
        // kernel writes one u64, which the Getter provides.
        unsafe { rustix::ioctl::ioctl(&*f, rustix::ioctl::Getter::<BLKGETDISKSEQ, u64>::new()) }
            .map_err(io::Error::from)
    }

    fn reread_partitions(&self, fd: u64) -> io::Result<()> {
        const BLKRRPART: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(0x12, 95);
        let f = self.file(fd)?;
        // SAFETY: BLKRRPART takes no argument (include/uapi/linux/fs.h: `_IO(0x12,95)`).
        unsafe { rustix::ioctl::ioctl(&*f, rustix::ioctl::NoArg::<BLKRRPART>::new()) }
            .map_err(io::Error::from)
    }

    fn blkpg(&self, fd: u64, op: Blkpg, number: u32, start: u64, length: u64) -> io::Result<()> {
        const BLKPG: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(0x12, 105);
        let invalid = |_| io::Error::from(io::ErrorKind::InvalidInput);
        let mut part = BlkpgPartition {
            start: i64::try_from(start).map_err(invalid)?,
            length: i64::try_from(length).map_err(invalid)?,
            pno: i32::try_from(number).map_err(invalid)?,
            devname: [0; 64],
            volname: [0; 64],
        };
        let arg = BlkpgIoctlArg {
            op: op as i32,
            flags: 0,
            datalen: size_of::<BlkpgPartition>() as i32,
            data: &mut part,
        };
        let f = self.file(fd)?;
        // SAFETY: BLKPG is `_IO(0x12,105)` taking a pointer to `struct blkpg_ioctl_arg`, whose
        // `data` points at a `struct blkpg_partition`; both are repr(C) copies of the uapi
        // structs, and `part` outlives the call.
        unsafe {
            rustix::ioctl::ioctl(&*f, rustix::ioctl::Setter::<BLKPG, BlkpgIoctlArg>::new(arg))
        }
        .map_err(io::Error::from)
    }

    fn loop_set_capacity(&self, fd: u64) -> io::Result<()> {
        const LOOP_SET_CAPACITY: rustix::ioctl::Opcode = 0x4C07;
        let f = self.file(fd)?;
        // SAFETY: LOOP_SET_CAPACITY takes no argument (include/uapi/linux/loop.h).
        unsafe { rustix::ioctl::ioctl(&*f, rustix::ioctl::NoArg::<LOOP_SET_CAPACITY>::new()) }
            .map_err(io::Error::from)
    }

    fn loop_backing(&self, fd: u64) -> io::Result<LoopBacking> {
        const LOOP_GET_STATUS64: rustix::ioctl::Opcode = 0x4C05;
        let f = self.file(fd)?;
        // SAFETY: LOOP_GET_STATUS64 writes one `struct loop_info64` (include/uapi/linux/loop.h,
        // 232 bytes, mirrored by LoopInfo64), which the Getter provides.
        let info = unsafe {
            rustix::ioctl::ioctl(
                &*f,
                rustix::ioctl::Getter::<LOOP_GET_STATUS64, LoopInfo64>::new(),
            )
        }?;
        // loop(4): lo_device and lo_inode are the backing file's st_dev and st_ino, lo_rdevice
        // its st_rdev, each as the kernel's huge_encode_dev (new_encode_dev in 32 bits).
        let rdev = info.lo_rdevice as u32;
        Ok(LoopBacking {
            dev: info.lo_device,
            ino: info.lo_inode,
            rdev: (
                (rdev & 0xfff00) >> 8,
                (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
            ),
        })
    }

    fn task_holders(&self, inodes: &[u64]) -> io::Result<Option<Vec<super::os::TaskHolder>>> {
        super::task_iter::shared().scan(inodes)
    }

    fn dir_is_empty(&self, fd: u64) -> io::Result<bool> {
        let f = self.file(fd)?;
        // proc(5): listing the /proc/self/fd link lists the open directory itself.
        let listed = fs::read_dir(format!("/proc/self/fd/{}", f.as_raw_fd()))?;
        Ok(listed.into_iter().next().is_none())
    }

    fn mount(
        &self,
        source: &Path,
        target: At<'_>,
        fs_type: &str,
        flags: MountFlags,
    ) -> io::Result<()> {
        let (target, _held) = self.path(target)?;
        let mut f = rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV;
        if flags.noexec {
            f |= rustix::mount::MountFlags::NOEXEC;
        }
        let data = std::ffi::CString::new(flags.data)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let data = (!flags.data.is_empty()).then_some(data.as_c_str());
        Ok(rustix::mount::mount(source, &target, fs_type, f, data)?)
    }

    fn bind_onto_itself(&self, dir: &Path) -> io::Result<()> {
        Ok(rustix::mount::mount_bind(dir, dir)?)
    }

    fn make_private(&self, dir: &Path) -> io::Result<()> {
        Ok(rustix::mount::mount_change(
            dir,
            rustix::mount::MountPropagationFlags::PRIVATE,
        )?)
    }

    fn unmount(&self, target: At<'_>, nofollow: bool) -> io::Result<()> {
        let (target, _held) = self.path(target)?;
        let flags = if nofollow {
            rustix::mount::UnmountFlags::NOFOLLOW
        } else {
            rustix::mount::UnmountFlags::empty()
        };
        Ok(rustix::mount::unmount(&target, flags)?)
    }

    fn statvfs(&self, fd: u64) -> io::Result<Space> {
        let s = rustix::fs::fstatvfs(&*self.file(fd)?)?;
        Ok(Space {
            total: s.f_blocks.saturating_mul(s.f_frsize),
            free: s.f_bfree.saturating_mul(s.f_frsize),
            block: s.f_frsize,
        })
    }

    fn mount_of(&self, fd: u64) -> io::Result<MountOf> {
        use rustix::fs::{AtFlags, StatxAttributes, StatxFlags};
        let f = self.file(fd)?;
        // statx(2): STATX_MNT_ID since Linux 5.8 (stx_mask says whether it was filled in);
        // STATX_ATTR_MOUNT_ROOT likewise, through stx_attributes_mask.
        let s = rustix::fs::statx(&*f, c"", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)?;
        Ok(MountOf {
            id: (s.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(s.stx_mnt_id),
            root: s
                .stx_attributes_mask
                .contains(StatxAttributes::MOUNT_ROOT)
                .then(|| s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)),
            dev: (s.stx_dev_major, s.stx_dev_minor),
        })
    }

    fn xfs_geometry(&self, fd: u64) -> io::Result<XfsGeometry> {
        // ioctl_xfs_fsgeometry(2): `XFS_IOC_FSGEOMETRY_V1` is `_IOR('X', 100, struct
        // xfs_fsop_geom_v1)`; the oldest form, answered by every kernel, and holding all that
        // growing needs.
        const XFS_IOC_FSGEOMETRY_V1: rustix::ioctl::Opcode =
            rustix::ioctl::opcode::read::<XfsFsopGeomV1>(b'X', 100);
        let f = self.file(fd)?;
        // SAFETY: the kernel writes one `struct xfs_fsop_geom_v1`, of which `XfsFsopGeomV1` is
        // a repr(C) copy (its size is in the opcode, so a mismatch is ENOTTY, never a short
        // or long write).
        let g = unsafe {
            rustix::ioctl::ioctl(
                &*f,
                rustix::ioctl::Getter::<XFS_IOC_FSGEOMETRY_V1, XfsFsopGeomV1>::new(),
            )
        }?;
        Ok(XfsGeometry {
            block_size: g.blocksize,
            data_blocks: g.datablocks,
            imaxpct: g.imaxpct,
        })
    }

    fn xfs_grow_data(&self, fd: u64, blocks: u64, imaxpct: u32) -> io::Result<()> {
        // fs/xfs/libxfs/xfs_fs.h: `XFS_IOC_FSGROWFSDATA` is `_IOW('X', 110, struct
        // xfs_growfs_data)`; the kernel grows the mounted data section to `newblocks` (never
        // shrinks it: a smaller count is EINVAL) in its own transactions.
        const XFS_IOC_FSGROWFSDATA: rustix::ioctl::Opcode =
            rustix::ioctl::opcode::write::<XfsGrowfsData>(b'X', 110);
        let f = self.file(fd)?;
        let arg = XfsGrowfsData {
            newblocks: blocks,
            imaxpct,
        };
        // SAFETY: the kernel reads one `struct xfs_growfs_data`, of which `XfsGrowfsData` is a
        // repr(C) copy, from the pointer the Setter passes.
        unsafe {
            rustix::ioctl::ioctl(
                &*f,
                rustix::ioctl::Setter::<XFS_IOC_FSGROWFSDATA, XfsGrowfsData>::new(arg),
            )
        }
        .map_err(io::Error::from)
    }

    fn ext4_resize(&self, fd: u64, blocks: u64) -> io::Result<()> {
        // Documentation/filesystems/ext4 (ioctls): "EXT4_IOC_RESIZE_FS: Resize the filesystem
        // to a new size. The number of blocks of resized filesystem is passed in via 64 bit
        // integer argument"; `_IOW('f', 16, __u64)`. The kernel allocates what the new groups
        // need itself (what resize2fs does online).
        const EXT4_IOC_RESIZE_FS: rustix::ioctl::Opcode =
            rustix::ioctl::opcode::write::<u64>(b'f', 16);
        let f = self.file(fd)?;
        // SAFETY: the kernel reads one u64 from the pointer the Setter passes.
        unsafe {
            rustix::ioctl::ioctl(
                &*f,
                rustix::ioctl::Setter::<EXT4_IOC_RESIZE_FS, u64>::new(blocks),
            )
        }
        .map_err(io::Error::from)
    }

    fn btrfs_grow_device(&self, fd: u64, devid: u64) -> io::Result<()> {
        // include/uapi/linux/btrfs.h and btrfs-ioctl(2): `BTRFS_IOC_RESIZE` is `_IOW(0x94, 3,
        // struct btrfs_ioctl_vol_args)`, whose `name` is `[<devid>:]<size>|max`: "max" grows
        // that device of the mounted filesystem to the size of its block device.
        const BTRFS_IOC_RESIZE: rustix::ioctl::Opcode =
            rustix::ioctl::opcode::write::<BtrfsIoctlVolArgs>(0x94, 3);
        let f = self.file(fd)?;
        let mut arg = BtrfsIoctlVolArgs {
            fd: 0,
            name: [0; 4088],
        };
        let name = format!("{devid}:max");
        // At most 20 digits and ":max": always fits, NUL-terminated by the zeros after it.
        arg.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: the kernel copies one `struct btrfs_ioctl_vol_args` (4096 bytes, of which
        // `BtrfsIoctlVolArgs` is a repr(C) copy) from the pointer the Setter passes, and reads
        // `name` up to its NUL.
        unsafe {
            rustix::ioctl::ioctl(
                &*f,
                rustix::ioctl::Setter::<BTRFS_IOC_RESIZE, BtrfsIoctlVolArgs>::new(arg),
            )
        }
        .map_err(io::Error::from)
    }

    fn random16(&self) -> io::Result<[u8; 16]> {
        let mut b = [0u8; 16];
        File::open("/dev/urandom")?.read_exact(&mut b)?;
        Ok(b)
    }

    fn run(&self, program: &str, args: &[&str], limit: Option<Duration>) -> io::Result<Ran> {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("LC_ALL", "C");
        super::tool::child_setup(&mut cmd);
        let done = super::tool::finish(cmd.spawn()?, limit)?;
        Ok(Ran {
            code: done.status.code(),
            stdout: done.stdout,
            stderr: done.stderr,
        })
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// `struct blkpg_partition` (include/uapi/linux/blkpg.h); offsets and lengths in bytes.
#[repr(C)]
struct BlkpgPartition {
    start: i64,
    length: i64,
    pno: i32,
    devname: [u8; 64],
    volname: [u8; 64],
}

/// `struct blkpg_ioctl_arg`.
#[repr(C)]
struct BlkpgIoctlArg {
    op: i32,
    flags: i32,
    datalen: i32,
    data: *mut BlkpgPartition,
}

/// `struct xfs_fsop_geom_v1` (fs/xfs/libxfs/xfs_fs.h, ioctl_xfs_fsgeometry(2)): 112 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct XfsFsopGeomV1 {
    blocksize: u32,
    rtextsize: u32,
    agblocks: u32,
    agcount: u32,
    logblocks: u32,
    sectsize: u32,
    inodesize: u32,
    imaxpct: u32,
    datablocks: u64,
    rtblocks: u64,
    rtextents: u64,
    logstart: u64,
    uuid: [u8; 16],
    sunit: u32,
    swidth: u32,
    version: i32,
    flags: u32,
    logsectsize: u32,
    rtsectsize: u32,
    dirblocksize: u32,
}

/// `struct xfs_growfs_data` (fs/xfs/libxfs/xfs_fs.h): 16 bytes.
#[repr(C)]
struct XfsGrowfsData {
    newblocks: u64,
    imaxpct: u32,
}

/// `struct btrfs_ioctl_vol_args` (include/uapi/linux/btrfs.h): 4096 bytes.
#[repr(C)]
struct BtrfsIoctlVolArgs {
    fd: i64,
    name: [u8; 4088],
}

const _: () = {
    assert!(size_of::<XfsFsopGeomV1>() == 112);
    assert!(size_of::<XfsGrowfsData>() == 16);
    assert!(size_of::<BtrfsIoctlVolArgs>() == 4096);
};

/// `struct loop_info64` (include/uapi/linux/loop.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

const _: () = assert!(size_of::<LoopInfo64>() == 232);
