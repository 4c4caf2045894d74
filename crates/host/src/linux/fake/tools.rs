//! The filesystem tools as the fake runs them: each writes or reads real superblock bytes (the
//! fields [`csi_proxy_formats::signatures`] probes and reads sizes from), so what the host finds after a
//! tool is what it would find on a real device. Their refusals follow the real tools: mkfs.xfs
//! refuses an existing signature without `-f` and a device under 300 MB; mke2fs never asks
//! without a terminal; blkid(8) exits 2 when it finds nothing.

use super::{State, errno};
use crate::linux::os::XfsGeometry;
use csi_proxy_formats::signatures;
use std::io;

const BLOCK: u64 = 4096;
/// ext2/3/4 superblock offset.
const EXT: u64 = 1024;

fn ran(code: i32, stdout: &str, stderr: &str) -> Ran {
    Ran {
        code: Some(code),
        stdout: stdout.into(),
        stderr: stderr.into(),
    }
}

use super::super::os::Ran;

/// 16 bytes from `8-4-4-4-12` text.
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The device a tool is pointed at: disk index, start and length in bytes.
fn device(s: &State, node: &str) -> Option<(usize, u64, u64)> {
    let (disk, part) = s.device_at(std::path::Path::new(node))?;
    let name = s.disks[disk].name.clone();
    s.extent(&super::Handle::Device { disk: name, part }).ok()
}

fn head(s: &State, dev: (usize, u64, u64)) -> Vec<u8> {
    s.disks[dev.0].read(dev.1, signatures::PROBE_LEN.min(dev.2 as usize))
}

/// Writes `bytes` at `offset` of the device.
fn put(s: &mut State, dev: (usize, u64, u64), offset: u64, bytes: &[u8]) -> io::Result<()> {
    s.disks[dev.0].write(dev.1 + offset, bytes)
}

/// An ext4 superblock for a device of `len` bytes (4 KiB blocks, 64-bit, extents).
fn ext4(len: u64, uuid: [u8; 16]) -> Vec<u8> {
    let mut sb = vec![0u8; 1024];
    let mut at = |off: usize, bytes: &[u8]| sb[off..off + bytes.len()].copy_from_slice(bytes);
    at(0x18, &2u32.to_le_bytes()); // log2(block size) - 10
    at(56, &0xEF53u16.to_le_bytes());
    at(0x60, &(0x40u32 | 0x80 | 0x200).to_le_bytes());
    at(0x68, &uuid);
    set_ext4_blocks(&mut sb, len / BLOCK);
    sb
}

fn set_ext4_blocks(sb: &mut [u8], blocks: u64) {
    let free = blocks - blocks / 20; // what a fresh filesystem leaves free, roughly
    sb[0x4..0x8].copy_from_slice(&(blocks as u32).to_le_bytes());
    sb[0x150..0x154].copy_from_slice(&((blocks >> 32) as u32).to_le_bytes());
    sb[0xC..0x10].copy_from_slice(&(free as u32).to_le_bytes());
    sb[0x158..0x15C].copy_from_slice(&((free >> 32) as u32).to_le_bytes());
}

/// An xfs superblock (big-endian) for `len` bytes, with an external log (`sb_logstart` 0).
/// Offset of `sb_inprogress` in the xfs superblock: set while mkfs runs.
pub(super) const XFS_INPROGRESS: u64 = 126;

fn xfs(len: u64, uuid: [u8; 16]) -> Vec<u8> {
    let mut sb = vec![0u8; 512];
    sb[0..4].copy_from_slice(b"XFSB");
    sb[4..8].copy_from_slice(&(BLOCK as u32).to_be_bytes());
    sb[32..48].copy_from_slice(&uuid);
    set_xfs_blocks(&mut sb, len / BLOCK);
    sb
}

fn set_xfs_blocks(sb: &mut [u8], blocks: u64) {
    sb[8..16].copy_from_slice(&blocks.to_be_bytes());
    sb[144..152].copy_from_slice(&(blocks - blocks / 20).to_be_bytes());
}

/// Runs `program` against the fake's devices.
pub(super) fn run(s: &mut State, program: &str, args: &[&str]) -> io::Result<Ran> {
    // An offline resize2fs killed mid-way has not finished growing: the superblock keeps its
    // old size and the resize inode is left invalid. Online, the kernel grows the mounted
    // filesystem (EXT4_IOC_RESIZE_FS) and a kill of the tool leaves it consistent: that case
    // takes the generic path below.
    let node = args.last().copied().unwrap_or_default().to_string();
    let mounted = s.mounts.iter().any(|m| m.source == node);
    if program == "resize2fs" && !mounted && s.interrupted.remove(program) {
        s.interrupts_landed += 1;
        s.resize_damaged.insert(node);
        return Ok(Ran {
            code: None,
            ..ran(0, "", "")
        });
    }
    // A mkfs killed mid-way leaves what it wrote by then (see `mkfs`).
    if program.starts_with("mkfs.") && s.interrupted.remove(program) {
        s.interrupts_landed += 1;
        let done = mkfs(s, program, args, true)?;
        return Ok(Ran { code: None, ..done });
    }
    let done = match program {
        "mkfs.ext4" | "mkfs.xfs" => mkfs(s, program, args, false)?,
        "resize2fs"
            if s.resize_damaged
                .contains(args.last().copied().unwrap_or_default()) =>
        {
            ran(1, "", "Please run 'e2fsck -f /dev/x' first.")
        }
        "resize2fs" => resize2fs(s, args)?,
        "e2fsck" => e2fsck(s, args),
        "blkid" => blkid(s, args),
        _ => return Err(errno(super::ENOENT)), // not installed
    };
    // A tool asked to be interrupted did its work and was then killed.
    if s.interrupted.remove(program) {
        s.interrupts_landed += 1;
        return Ok(Ran { code: None, ..done });
    }
    Ok(done)
}

/// mkfs.ext4 or mkfs.xfs on the device `args` names; `killed`: the tool is killed mid-way,
/// after wiping the old signatures: mkfs.xfs has written its primary superblock with
/// `sb_inprogress` set (it clears the flag last), mke2fs nothing more (it writes its
/// superblock when it closes the new filesystem, last).
fn mkfs(s: &mut State, program: &str, args: &[&str], killed: bool) -> io::Result<Ran> {
    let node = args.last().copied().unwrap_or_default();
    let Some(dev) = device(s, node) else {
        return Ok(ran(
            1,
            "",
            &format!("{program}: cannot open {node}: No such file or directory"),
        ));
    };
    let uuid_arg = args
        .windows(2)
        .find_map(|w| match w[0] {
            "-U" => Some(w[1]),
            "-m" => w[1].strip_prefix("uuid="),
            _ => None,
        })
        .and_then(uuid_bytes)
        .unwrap_or([0x11; 16]);
    let sb = if program == "mkfs.xfs" {
        if let Some(found) = signatures::probe(&head(s, dev))
            && !args.contains(&"-f")
        {
            let why = format!(
                "mkfs.xfs: {node} appears to contain an existing filesystem ({}).",
                found.kind
            );
            return Ok(ran(1, "", &why));
        }
        if dev.2 < 300 << 20 {
            return Ok(ran(1, "", "Filesystem must be larger than 300MB."));
        }
        let mut sb = xfs(dev.2, uuid_arg);
        sb[XFS_INPROGRESS as usize] = u8::from(killed);
        (0, sb)
    } else {
        (EXT, ext4(dev.2, uuid_arg))
    };
    // Both tools wipe the old signatures at the start of the device first.
    put(
        s,
        dev,
        0,
        &vec![0; signatures::PROBE_LEN.min(dev.2 as usize)],
    )?;
    if !(killed && program == "mkfs.ext4") {
        put(s, dev, sb.0, &sb.1)?;
    }
    Ok(ran(0, "", ""))
}

/// resize2fs on a device node: the ext2/3/4 grows to fill its device.
fn resize2fs(s: &mut State, args: &[&str]) -> io::Result<Ran> {
    let node = args.last().copied().unwrap_or_default();
    let Some(dev) = device(s, node) else {
        return Ok(ran(
            1,
            "",
            &format!("resize2fs: No such file or directory while opening {node}"),
        ));
    };
    let head = head(s, dev);
    if !matches!(
        signatures::probe(&head).map(|sig| sig.kind),
        Some("ext2" | "ext3" | "ext4")
    ) {
        return Ok(ran(1, "", "resize2fs: bad magic number in super-block"));
    }
    let mut sb = head[EXT as usize..EXT as usize + 1024].to_vec();
    set_ext4_blocks(&mut sb, dev.2 / BLOCK);
    put(s, dev, EXT, &sb)?;
    Ok(ran(0, "", ""))
}

/// The device (disk index, start, length) of the mounted filesystem an open directory is on,
/// and its first bytes.
fn mounted_device(s: &State, fd: u64) -> io::Result<((usize, u64, u64), Vec<u8>)> {
    let super::Handle::Dir(dir) = s.handle(fd)? else {
        return Err(errno(super::ENOTTY));
    };
    let m = s.mount_holding(&dir).ok_or_else(|| errno(super::ENOTTY))?;
    let dev = device(s, &m.source).ok_or_else(|| errno(super::ENOTTY))?;
    Ok((dev, head(s, dev)))
}

/// `XFS_IOC_FSGEOMETRY_V1` as the kernel answers it: from the mounted xfs's superblock;
/// ENOTTY on any other filesystem.
pub(super) fn xfs_geometry(s: &mut State, fd: u64) -> io::Result<XfsGeometry> {
    let (_, head) = mounted_device(s, fd)?;
    if signatures::probe(&head).map(|sig| sig.kind) != Some("xfs") {
        return Err(errno(super::ENOTTY));
    }
    let be = |at: usize, n: usize| {
        head[at..at + n]
            .iter()
            .fold(0u64, |v, b| v << 8 | *b as u64)
    };
    Ok(XfsGeometry {
        block_size: be(4, 4) as u32,
        data_blocks: be(8, 8),
        imaxpct: 25,
    })
}

/// The grow ioctls on a mounted filesystem of `kind`: xfs and ext4 to `arg` blocks (EINVAL
/// past the device or below the current size, as the kernel answers), btrfs's device `arg`
/// to fill its device (ENODEV for another devid); ENOTTY on another filesystem.
pub(super) fn grow_mounted(s: &mut State, fd: u64, kind: &str, arg: u64) -> io::Result<()> {
    let (dev, head) = mounted_device(s, fd)?;
    let found = signatures::probe(&head).map(|sig| sig.kind);
    let fs_blocks = signatures::filesystem_bytes(&head).unwrap_or(0) / BLOCK;
    match (kind, found) {
        ("xfs", Some("xfs")) | ("ext4", Some("ext2" | "ext3" | "ext4")) => {
            if arg > dev.2 / BLOCK || arg < fs_blocks {
                return Err(errno(super::EINVAL));
            }
            if kind == "xfs" {
                let mut sb = head[..512].to_vec();
                set_xfs_blocks(&mut sb, arg);
                put(s, dev, 0, &sb)
            } else {
                let mut sb = head[EXT as usize..EXT as usize + 1024].to_vec();
                set_ext4_blocks(&mut sb, arg);
                put(s, dev, EXT, &sb)
            }
        }
        ("btrfs", Some("btrfs")) => {
            const SB: usize = 65536;
            let devid =
                u64::from_le_bytes(head[SB + 0xc9..SB + 0xd1].try_into().unwrap_or_default());
            if devid != arg {
                return Err(errno(super::ENODEV));
            }
            let total = dev.2 / BLOCK * BLOCK;
            put(s, dev, SB as u64 + 0x70, &total.to_le_bytes())
        }
        _ => Err(errno(super::ENOTTY)),
    }
}

/// e2fsck: a filesystem a killed resize2fs left is repaired only by `-y`; `-p` stops at it.
fn e2fsck(s: &mut State, args: &[&str]) -> Ran {
    let node = args.last().copied().unwrap_or_default();
    if !s.resize_damaged.contains(node) {
        return ran(0, "", "");
    }
    if args.contains(&"-y") {
        s.resize_damaged.remove(node);
        return ran(1, "Resize inode not valid.  Recreate? yes", "");
    }
    ran(
        4,
        &format!(
            "{node}: Resize inode not valid.\n\n{node}: UNEXPECTED INCONSISTENCY; RUN fsck MANUALLY."
        ),
        "",
    )
}

/// `blkid -p -o export <node>`: what the probe finds, as `KEY=value` lines.
fn blkid(s: &State, args: &[&str]) -> Ran {
    let node = args.last().copied().unwrap_or_default();
    let Some(dev) = device(s, node) else {
        return ran(2, "", "");
    };
    match signatures::probe(&head(s, dev)) {
        None => ran(2, "", ""),
        Some(sig) => {
            let mut out = format!("DEVNAME={node}\n");
            if let Some(u) = sig.uuid {
                out += &format!("UUID={}\n", signatures::uuid_string(&u));
            }
            // libblkid names partition tables PTTYPE, everything else TYPE.
            let key = if matches!(sig.kind, "gpt" | "dos") {
                "PTTYPE"
            } else {
                "TYPE"
            };
            out += &format!("{key}={}\n", sig.kind);
            ran(0, &out, "")
        }
    }
}
