//! Recognising what a block device holds from its first bytes: filesystems, RAID/LVM/crypto
//! members, swap, partition tables. Pure; the hosts read the bytes.
//!
//! Used for data safety: anything recognised here is never formatted over. Offsets and magic
//! numbers are the ones each format documents (and the ones `blkid` checks).

/// Bytes to read from the start of a device for [`probe`]: ZFS's labels 0 and 1, 256 KiB each.
pub const PROBE_LEN: usize = 512 << 10;

/// What was found on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Short name: `ext4`, `xfs`, `btrfs`, `vfat`, `ntfs`, `swap`, `LVM2_member`, `crypto_LUKS`,
    /// `gpt`, `dos` (MBR table), …
    pub kind: &'static str,
    /// The filesystem type to give `mount(2)`, for filesystems Linux can mount.
    pub mount_type: Option<&'static str>,
    /// The filesystem UUID where the format has one at a known place.
    pub uuid: Option<[u8; 16]>,
}

fn at(buf: &[u8], off: usize, magic: &[u8]) -> bool {
    buf.get(off..off + magic.len()) == Some(magic)
}

fn le16(buf: &[u8], off: usize) -> u16 {
    buf.get(off..off + 2)
        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
}

fn le32(buf: &[u8], off: usize) -> u32 {
    buf.get(off..off + 4)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
}

fn le64(buf: &[u8], off: usize) -> u64 {
    buf.get(off..off + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
}

fn be32(buf: &[u8], off: usize) -> u32 {
    buf.get(off..off + 4)
        .map_or(0, |b| u32::from_be_bytes(b.try_into().unwrap_or([0; 4])))
}

fn be64(buf: &[u8], off: usize) -> u64 {
    buf.get(off..off + 8)
        .map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])))
}

fn uuid(buf: &[u8], off: usize) -> Option<[u8; 16]> {
    buf.get(off..off + 16)?.try_into().ok()
}

fn sig(kind: &'static str, mount_type: Option<&'static str>, uuid: Option<[u8; 16]>) -> Signature {
    Signature {
        kind,
        mount_type,
        uuid,
    }
}

/// ext2/3/4 superblock at 1024; magic 0xEF53 at +56 (`s_magic`).
const EXT_SB: usize = 1024;

/// Recognises the content of a device from its first bytes (ideally [`PROBE_LEN`]; a shorter
/// buffer only finds what lies within it). `None` means nothing known was found, which is
/// what an all-zero, never-used device gives.
pub fn probe(buf: &[u8]) -> Option<Signature> {
    // Order: formats whose magic sits inside another's reserved area first (LUKS, RAID and LVM
    // headers can sit in front of data that still looks like a filesystem).
    if at(buf, 0, b"LUKS\xba\xbe") || at(buf, 0x4000, b"SKUL\xba\xbe") {
        return Some(sig("crypto_LUKS", None, None));
    }
    for off in [0usize, 4096] {
        if le32(buf, off) == 0xa92b_4efc {
            return Some(sig("linux_raid_member", None, None));
        }
    }
    for s in 0..4 {
        if at(buf, s * 512, b"LABELONE") && at(buf, s * 512 + 24, b"LVM2 001") {
            return Some(sig("LVM2_member", None, None));
        }
    }
    if at(buf, 4096 + 24, &BCACHE_MAGIC) {
        return Some(sig("bcache", None, None));
    }
    if le16(buf, EXT_SB + 56) == 0xEF53 {
        let compat = le32(buf, EXT_SB + 0x5C);
        let incompat = le32(buf, EXT_SB + 0x60);
        // EXTENTS (0x40), 64BIT (0x80) or FLEX_BG (0x200) need ext4; HAS_JOURNAL (0x4) is ext3.
        let kind = if incompat & (0x40 | 0x80 | 0x200) != 0 {
            "ext4"
        } else if compat & 0x4 != 0 {
            "ext3"
        } else {
            "ext2"
        };
        // The ext4 driver mounts all three.
        return Some(sig(kind, Some("ext4"), uuid(buf, EXT_SB + 0x68)));
    }
    if at(buf, 0, b"XFSB") {
        return Some(sig("xfs", Some("xfs"), uuid(buf, 32)));
    }
    if at(buf, 65536 + 64, b"_BHRfS_M") {
        return Some(sig("btrfs", Some("btrfs"), uuid(buf, 65536 + 32)));
    }
    if le32(buf, 1024) == 0xF2F5_2010 {
        return Some(sig("f2fs", Some("f2fs"), None));
    }
    if at(buf, 0, b"hsqs") {
        return Some(sig("squashfs", Some("squashfs"), None));
    }
    if at(buf, 3, b"NTFS    ") {
        return Some(sig("ntfs", Some("ntfs3"), None));
    }
    if at(buf, 3, b"EXFAT   ") {
        return Some(sig("exfat", Some("exfat"), None));
    }
    if at(buf, 3, b"ReFS\0\0\0\0") {
        return Some(sig("refs", None, None));
    }
    if at(buf, 3, b"-FVE-FS-") {
        return Some(sig("BitLocker", None, None));
    }
    if le16(buf, 510) == 0xAA55
        && (at(buf, 54, b"FAT12   ") || at(buf, 54, b"FAT16   ") || at(buf, 82, b"FAT32   "))
    {
        return Some(sig("vfat", Some("vfat"), None));
    }
    for page in [4096usize, 8192, 16384, 65536] {
        if at(buf, page - 10, b"SWAPSPACE2") || at(buf, page - 10, b"SWAP-SPACE") {
            return Some(sig("swap", None, None));
        }
    }
    if at(buf, 32768, b"JFS1") {
        return Some(sig("jfs", Some("jfs"), uuid(buf, 32768 + 136)));
    }
    // ReiserFS 3.6 and later keep the superblock at 64 KiB, 3.5 at 8 KiB; magic at +52.
    for base in [65536usize, 8192] {
        if [&b"ReIsErFs"[..], b"ReIsEr2Fs", b"ReIsEr3Fs", b"ReIsEr4"]
            .iter()
            .any(|m| at(buf, base + 52, m))
        {
            return Some(sig("reiserfs", None, None));
        }
    }
    // GFS2: metadata header (magic 0x01161970, type 1 = superblock) at 64 KiB.
    if be32(buf, 65536) == 0x0116_1970 && be32(buf, 65536 + 4) == 1 {
        return Some(sig("gfs2", None, None));
    }
    // OCFS2: the superblock inode is block 2, for every block size the format allows.
    for block in [512usize, 1024, 2048, 4096] {
        if at(buf, 2 * block, b"OCFSV2") {
            return Some(sig("ocfs2", None, None));
        }
    }
    if at(buf, 0, b"bluestore block device") {
        return Some(sig("ceph_bluestore", None, None));
    }
    if at(buf, 32769, b"CD001") {
        return Some(sig("iso9660", Some("iso9660"), None));
    }
    // ZFS labels 0 and 1 (a pool member, imported or not, destroyed or a spare).
    if [0, ZFS_LABEL].into_iter().any(|at| zfs_label_at(buf, at)) {
        return Some(sig("zfs_member", None, None));
    }
    for sector in [512usize, 4096] {
        if at(buf, sector, b"EFI PART") {
            return Some(sig("gpt", None, None));
        }
    }
    if !crate::gpt::mbr_partitions(buf).is_empty() {
        return Some(sig("dos", None, None));
    }
    None
}

/// Bytes to read from the end of a device for [`probe_tail`]: md's 0.90 superblock lies
/// between 64 and 128 KiB before the end, ZFS's labels 2 and 3 in the last 512 KiB of the
/// device's length rounded down to 256 KiB.
pub const TAIL_PROBE_LEN: usize = 768 << 10;

/// The size of a ZFS vdev label; a vdev keeps four, two at its start and two at its end.
const ZFS_LABEL: usize = 256 << 10;

/// Whether a ZFS vdev label starts at `at` of `buf`: its configuration nvlist (at +16 KiB, XDR,
/// naming the vdev's or the pool's GUID) or an uberblock (magic 0x00bab10c, in either byte
/// order, in the ring of 1 KiB slots at +128 KiB). A label outside `buf` is not found.
fn zfs_label_at(buf: &[u8], at: usize) -> bool {
    let Some(label) = buf.get(at..at.saturating_add(ZFS_LABEL)) else {
        return false;
    };
    let ring = (0..128).any(|slot| {
        let m = le64(label, (128 << 10) + slot * 1024);
        m == 0x00ba_b10c || m == 0x0cb1_ba00_0000_0000
    });
    ring || zfs_config_names_a_guid(&label[16 << 10..128 << 10])
}

/// Whether `phys` (a label's `vdev_phys` area) starts with an XDR-packed nvlist holding a
/// `guid` or `pool_guid` uint64, as every label of a pool member or spare does. Bounded: at
/// most [`ZFS_MAX_PAIRS`] pairs, each skipped by the size it states, which must lie inside
/// `phys`; anything malformed is no label.
fn zfs_config_names_a_guid(phys: &[u8]) -> bool {
    // nvs_header_t: encoding 1 (NV_ENCODE_XDR), endian 0 or 1, two reserved bytes; then the
    // XDR nvlist: version 0, flags; then the pairs.
    if phys.len() < 12 || phys[0] != 1 || phys[1] > 1 || be32(phys, 4) != 0 {
        return false;
    }
    let mut at = 12usize;
    for _ in 0..ZFS_MAX_PAIRS {
        // A pair: encoded size, decoded size, name (length, bytes padded to 4), type, count,
        // value. Two zero sizes end the list.
        let size = be32(phys, at) as usize;
        if size == 0 {
            return false;
        }
        let Some(pair) = phys.get(at..at.saturating_add(size)) else {
            return false;
        };
        if !size.is_multiple_of(4) || size < 20 {
            return false;
        }
        let name_len = be32(pair, 8) as usize;
        let Some(name) = pair.get(12..12usize.saturating_add(name_len)) else {
            return false;
        };
        let after_name = 12 + name_len.div_ceil(4) * 4;
        // DATA_TYPE_UINT64 is 8, with one element.
        if matches!(name, b"guid" | b"pool_guid")
            && be32(pair, after_name) == 8
            && be32(pair, after_name + 4) == 1
            && pair.len() >= after_name + 16
        {
            return true;
        }
        at += size;
    }
    false
}

/// The most nvlist pairs [`zfs_config_names_a_guid`] reads; a label's top level has about 15.
const ZFS_MAX_PAIRS: usize = 64;

/// md RAID superblock magic (`MD_SB_MAGIC`), little-endian in 1.x and on x86 0.90 members.
const MD_MAGIC: u32 = 0xa92b_4efc;

/// Recognises what a device keeps at its end, where [`probe`] does not look: md RAID 0.90 and
/// 1.0 members (a 1.0 member's data starts at sector 0, and an array's first sectors may be
/// blank), ZFS's labels 2 and 3 (a pool member whose start was overwritten) and DRBD's
/// internal metadata. `tail` is the device's last bytes (ideally
/// [`TAIL_PROBE_LEN`]) and `device_len` its length in bytes; a shorter tail only finds what
/// lies within it.
pub fn probe_tail(tail: &[u8], device_len: u64) -> Option<Signature> {
    metadata_at_end(tail, device_len).map(|(sig, _)| sig)
}

/// DRBD's internal metadata magics (`DRBD_MD_MAGIC_08`, `_84_UNCLEAN`, `_09`), big-endian at
/// +60 of the metadata block (`struct md_on_disk_08` and `meta_data_on_disk_9` alike).
const DRBD_MAGICS: [u32; 3] = [0x8374_026b, 0x8374_026c, 0x8374_026d];

/// As [`probe_tail`], with the byte offset on the device where the metadata found starts:
/// what a filesystem at the device's start must end before for the metadata not to be its
/// own content.
pub fn metadata_at_end(tail: &[u8], device_len: u64) -> Option<(Signature, u64)> {
    let tail_start = device_len.checked_sub(tail.len() as u64)?;
    let rel = |abs: u64| usize::try_from(abs.checked_sub(tail_start)?).ok();
    // 0.90: a 64 KiB block, 64 KiB-aligned, at least 64 KiB before the end.
    let md090 = (device_len & !0xFFFF).checked_sub(0x1_0000);
    // 1.0: 8 KiB before the end, rounded down to 4 KiB; `super_offset` (le64 at +144, after
    // `data_offset` and `data_size`; md_p.h `struct mdp_superblock_1`) in sectors names that
    // very place.
    let md10 = (device_len / 512).checked_sub(16).map(|s| (s & !7) * 512);
    // DRBD (internal metadata): the last whole 4 KiB block; never on a device under 64 KiB.
    let drbd = (device_len & !0xFFF)
        .checked_sub(0x1000)
        .filter(|_| device_len >= 0x1_0000);
    let found090 = md090.filter(|&abs| {
        rel(abs).is_some_and(|o| {
            (le32(tail, o) == MD_MAGIC && le32(tail, o + 4) == 0)
                || (be32(tail, o) == MD_MAGIC && be32(tail, o + 4) == 0)
        })
    });
    let found10 = md10.filter(|&abs| {
        rel(abs).is_some_and(|o| {
            le32(tail, o) == MD_MAGIC && le32(tail, o + 4) == 1 && le64(tail, o + 144) == abs / 512
        })
    });
    let raid = found090
        .or(found10)
        .map(|at| (sig("linux_raid_member", None, None), at));
    // ZFS labels 2 and 3: the last two 256 KiB labels of the length rounded down to 256 KiB.
    let aligned = device_len & !(ZFS_LABEL as u64 - 1);
    let zfs = [2u64, 1]
        .into_iter()
        .filter_map(|n| aligned.checked_sub(n * ZFS_LABEL as u64))
        .find(|&abs| rel(abs).is_some_and(|o| zfs_label_at(tail, o)))
        .map(|at| (sig("zfs_member", None, None), at));
    raid.or(zfs).or_else(|| {
        drbd.filter(|&abs| rel(abs).is_some_and(|o| DRBD_MAGICS.contains(&be32(tail, o + 60))))
            .map(|at| (sig("drbd", None, None), at))
    })
}

const BCACHE_MAGIC: [u8; 16] = [
    0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81,
];

/// Size and free space of a filesystem, read from its superblock: for volumes that are not
/// mounted (a mounted one is asked with `statvfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuperblockUsage {
    /// Filesystem size in bytes.
    pub total_bytes: u64,
    /// Free bytes as the superblock records them.
    pub free_bytes: u64,
}

/// Size and free space from the superblock of an ext2/3/4, xfs or btrfs filesystem; `None` for
/// other formats.
pub fn superblock_usage(buf: &[u8]) -> Option<SuperblockUsage> {
    let s = probe(buf)?;
    match s.kind {
        "ext2" | "ext3" | "ext4" => {
            let block = 1024u64.checked_shl(le32(buf, EXT_SB + 0x18))?;
            let is64 = le32(buf, EXT_SB + 0x60) & 0x80 != 0;
            let hi = |off| {
                if is64 {
                    u64::from(le32(buf, off)) << 32
                } else {
                    0
                }
            };
            let blocks = u64::from(le32(buf, EXT_SB + 0x4)) | hi(EXT_SB + 0x150);
            let free = u64::from(le32(buf, EXT_SB + 0xC)) | hi(EXT_SB + 0x158);
            Some(SuperblockUsage {
                total_bytes: blocks.checked_mul(block)?,
                free_bytes: free.checked_mul(block)?,
            })
        }
        "xfs" => {
            let block = u64::from(be32(buf, 4));
            // An internal log (sb_logstart != 0) lives in the data blocks; statvfs leaves it
            // out of the size, so do the same to report one number mounted or not.
            let log = if be64(buf, 48) != 0 {
                u64::from(be32(buf, 96))
            } else {
                0
            };
            Some(SuperblockUsage {
                total_bytes: be64(buf, 8).checked_sub(log)?.checked_mul(block)?,
                free_bytes: be64(buf, 144).checked_mul(block)?,
            })
        }
        "btrfs" => {
            let total = le64(buf, 65536 + 0x70);
            let used = le64(buf, 65536 + 0x78);
            Some(SuperblockUsage {
                total_bytes: total,
                free_bytes: total.saturating_sub(used),
            })
        }
        _ => None,
    }
}

/// How many bytes of its device a filesystem spans, from its superblock: what it must be grown
/// past. For xfs this includes the internal log, which [`superblock_usage`] leaves out (as
/// statvfs does); an xfs filling its partition is then never taken for a smaller one.
pub fn filesystem_bytes(buf: &[u8]) -> Option<u64> {
    let usage = superblock_usage(buf)?;
    match probe(buf)?.kind {
        "xfs" => be64(buf, 8).checked_mul(u64::from(be32(buf, 4))),
        _ => Some(usage.total_bytes),
    }
}

/// The ID of the device a btrfs superblock belongs to within its filesystem (`dev_item.devid`,
/// the first field of the `dev_item` at +0xc9 of the superblock at 64 KiB): what
/// `BTRFS_IOC_RESIZE` names the device to grow by. `None` when `buf` holds no btrfs.
pub fn btrfs_devid(buf: &[u8]) -> Option<u64> {
    const SB: usize = 65536;
    (probe(buf)?.kind == "btrfs").then(|| le64(buf, SB + 0xc9))
}

/// A filesystem UUID as text (`8-4-4-4-12`, lowercase, bytes in order).
pub fn uuid_string(u: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*u).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blank() -> Vec<u8> {
        vec![0u8; PROBE_LEN]
    }

    fn put(buf: &mut [u8], off: usize, bytes: &[u8]) {
        buf[off..off + bytes.len()].copy_from_slice(bytes);
    }

    #[test]
    fn md_members_are_found_at_the_end_of_a_device() {
        let len: u64 = (100 << 20) + 5 * 512; // not a multiple of 4 KiB or 64 KiB
        let blank_tail = vec![0u8; TAIL_PROBE_LEN];
        assert_eq!(probe_tail(&blank_tail, len), None);
        let tail_start = len - TAIL_PROBE_LEN as u64;
        // 0.90: 64 KiB-aligned, 64 KiB before the end.
        let mut t = blank_tail.clone();
        let at090 = ((len & !0xFFFF) - 0x10000 - tail_start) as usize;
        put(&mut t, at090, &0xa92b4efcu32.to_le_bytes());
        assert_eq!(
            probe_tail(&t, len).map(|s| s.kind),
            Some("linux_raid_member")
        );
        // 1.0: 8 KiB before the end rounded down to 4 KiB, naming its own sector.
        let abs10 = ((len / 512 - 16) & !7) * 512;
        let mut t = blank_tail.clone();
        let o = (abs10 - tail_start) as usize;
        put(&mut t, o, &0xa92b4efcu32.to_le_bytes());
        put(&mut t, o + 4, &1u32.to_le_bytes());
        put(&mut t, o + 144, &(abs10 / 512).to_le_bytes());
        assert_eq!(
            probe_tail(&t, len).map(|s| s.kind),
            Some("linux_raid_member")
        );
        // A 1.x superblock naming another offset is not a 1.0 member at the end.
        put(&mut t, o + 144, &8u64.to_le_bytes());
        assert_eq!(probe_tail(&t, len), None);
        // Short or oversized inputs never panic.
        assert_eq!(probe_tail(&t, 10), None);
        assert_eq!(probe_tail(&[], len), None);
        assert_eq!(probe_tail(&[0xFF; 100], 100), None);
    }

    #[test]
    fn drbd_metadata_is_found_in_the_last_4k_block_with_its_offset() {
        let len: u64 = (100 << 20) + 5 * 512;
        let tail_start = len - TAIL_PROBE_LEN as u64;
        let abs = (len & !0xFFF) - 0x1000;
        for magic in [0x8374_026bu32, 0x8374_026c, 0x8374_026d] {
            let mut t = vec![0u8; TAIL_PROBE_LEN];
            put(
                &mut t,
                (abs - tail_start) as usize + 60,
                &magic.to_be_bytes(),
            );
            let (sig, at) = metadata_at_end(&t, len).unwrap();
            assert_eq!((sig.kind, at), ("drbd", abs));
            // Little-endian, or one block off, is not DRBD's.
            let mut t = vec![0u8; TAIL_PROBE_LEN];
            put(
                &mut t,
                (abs - tail_start) as usize + 60,
                &magic.to_le_bytes(),
            );
            put(
                &mut t,
                (abs - 4096 - tail_start) as usize + 60,
                &magic.to_be_bytes(),
            );
            assert_eq!(metadata_at_end(&t, len), None);
        }
        // A device under 64 KiB is never DRBD.
        let mut t = vec![0u8; 0x8000];
        put(&mut t, 0x7000 + 60, &0x8374_026bu32.to_be_bytes());
        assert_eq!(metadata_at_end(&t, 0x8000), None);
    }

    /// An XDR nvlist as a ZFS label's `vdev_phys` starts: header, version, flags, then pairs
    /// of (name, type, value bytes), then the two zero sizes that end it.
    fn nvlist(pairs: &[(&str, u32, &[u8])]) -> Vec<u8> {
        let mut out = vec![1, 1, 0, 0];
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&1u32.to_be_bytes());
        for (name, kind, value) in pairs {
            let mut pair = Vec::new();
            pair.extend_from_slice(&(name.len() as u32).to_be_bytes());
            pair.extend_from_slice(name.as_bytes());
            pair.resize(pair.len().div_ceil(4) * 4, 0);
            pair.extend_from_slice(&kind.to_be_bytes());
            pair.extend_from_slice(&1u32.to_be_bytes());
            pair.extend_from_slice(value);
            pair.resize(pair.len().div_ceil(4) * 4, 0);
            let size = (pair.len() + 8) as u32;
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(&pair);
        }
        out.extend_from_slice(&[0; 8]);
        out
    }

    fn zfs_config() -> Vec<u8> {
        let name = [&5u32.to_be_bytes()[..], b"tank\0\0\0\0"].concat();
        nvlist(&[
            ("version", 8, &5000u64.to_be_bytes()),
            ("name", 9, &name),
            ("state", 8, &1u64.to_be_bytes()),
            ("pool_guid", 8, &0x1234_5678_9abc_def0u64.to_be_bytes()),
        ])
    }

    /// A pool member is found by any one of its four labels' configuration, without any
    /// uberblock (a pool never written, or its rings wiped): labels 0 and 1 at the start,
    /// 2 and 3 in the last 512 KiB of its length rounded down to 256 KiB.
    #[test]
    fn zfs_labels_are_found_by_their_configuration_at_either_end() {
        let config = zfs_config();
        for label in [0usize, 256 << 10] {
            let mut b = blank();
            put(&mut b, label + (16 << 10), &config);
            assert_eq!(probe(&b).map(|s| s.kind), Some("zfs_member"), "{label}");
            // An uberblock alone in label 1's ring too.
            let mut b = blank();
            put(
                &mut b,
                label + (128 << 10) + 3 * 1024,
                &0x00bab10cu64.to_be_bytes(),
            );
            assert_eq!(probe(&b).map(|s| s.kind), Some("zfs_member"), "{label}");
        }
        let len: u64 = (100 << 20) + (100 << 10) + 512; // not a multiple of 256 KiB
        let aligned = len & !((256 << 10) - 1);
        let tail_start = len - TAIL_PROBE_LEN as u64;
        for abs in [aligned - (512 << 10), aligned - (256 << 10)] {
            let mut t = vec![0u8; TAIL_PROBE_LEN];
            put(&mut t, (abs - tail_start) as usize + (16 << 10), &config);
            assert_eq!(
                metadata_at_end(&t, len).map(|(s, at)| (s.kind, at)),
                Some(("zfs_member", abs))
            );
        }
        // A label one sector off its place is not one.
        let mut t = vec![0u8; TAIL_PROBE_LEN];
        let abs = aligned - (256 << 10) + 512;
        put(&mut t, (abs - tail_start) as usize + (16 << 10), &config);
        assert_eq!(probe_tail(&t, len), None);
    }

    /// A configuration that names no GUID, or is malformed anywhere the parser looks, is no
    /// label; no input makes it panic or read past its buffer.
    #[test]
    fn a_malformed_zfs_configuration_is_no_label_and_never_panics() {
        let phys = |c: &[u8]| {
            let mut p = vec![0u8; 112 << 10];
            put(&mut p, 0, c);
            zfs_config_names_a_guid(&p)
        };
        assert!(phys(&zfs_config()));
        assert!(phys(&nvlist(&[("guid", 8, &7u64.to_be_bytes())])));
        assert!(!phys(&nvlist(&[("version", 8, &5000u64.to_be_bytes())])));
        // The GUID as a string, or as an array, is not the label's.
        assert!(!phys(&nvlist(&[("guid", 9, &7u64.to_be_bytes())])));
        let mut c = zfs_config();
        c[0] = 2; // native encoding
        assert!(!phys(&c));
        // A pair stating a size past the area, unaligned, or too small.
        for size in [u32::MAX, 0x7fff_fff0, 21, 4] {
            let mut c = zfs_config();
            put(&mut c, 12, &size.to_be_bytes());
            assert!(!phys(&c), "{size}");
        }
        // A name longer than its pair.
        let mut c = zfs_config();
        put(&mut c, 20, &u32::MAX.to_be_bytes());
        assert!(!phys(&c));
        // Every truncation and a sweep of pseudo-random bytes: an answer, never a panic.
        let c = zfs_config();
        for n in 0..c.len() {
            let _ = zfs_config_names_a_guid(&c[..n]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut p = c.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % p.len();
                p[i] = (x >> 32) as u8;
            }
            let _ = zfs_config_names_a_guid(&p);
        }
        // A pair list that never ends stops at the bound.
        let many: Vec<(&str, u32, &[u8])> = (0..200).map(|_| ("x", 8, &[0u8; 8][..])).collect();
        assert!(!phys(&nvlist(&many)));
    }

    #[test]
    fn nothing_on_a_blank_device() {
        assert_eq!(probe(&blank()), None);
        assert_eq!(probe(&[]), None);
        assert_eq!(probe(&[0xFF; 100]), None);
    }

    /// Writes one format's magic into a blank buffer.
    type Maker = Box<dyn Fn(&mut Vec<u8>)>;

    #[test]
    fn every_known_format_is_recognised() {
        let cases: Vec<(&str, Maker)> = vec![
            ("ext2", Box::new(|b| put(b, 1024 + 56, &[0x53, 0xEF]))),
            (
                "ext3",
                Box::new(|b| {
                    put(b, 1024 + 56, &[0x53, 0xEF]);
                    put(b, 1024 + 0x5C, &4u32.to_le_bytes());
                }),
            ),
            (
                "ext4",
                Box::new(|b| {
                    put(b, 1024 + 56, &[0x53, 0xEF]);
                    put(b, 1024 + 0x60, &0x40u32.to_le_bytes());
                }),
            ),
            ("xfs", Box::new(|b| put(b, 0, b"XFSB"))),
            ("btrfs", Box::new(|b| put(b, 65536 + 64, b"_BHRfS_M"))),
            (
                "f2fs",
                Box::new(|b| put(b, 1024, &0xF2F52010u32.to_le_bytes())),
            ),
            ("squashfs", Box::new(|b| put(b, 0, b"hsqs"))),
            ("ntfs", Box::new(|b| put(b, 3, b"NTFS    "))),
            ("exfat", Box::new(|b| put(b, 3, b"EXFAT   "))),
            ("refs", Box::new(|b| put(b, 3, b"ReFS\0\0\0\0"))),
            ("BitLocker", Box::new(|b| put(b, 3, b"-FVE-FS-"))),
            (
                "vfat",
                Box::new(|b| {
                    put(b, 82, b"FAT32   ");
                    put(b, 510, &[0x55, 0xAA]);
                }),
            ),
            ("swap", Box::new(|b| put(b, 4096 - 10, b"SWAPSPACE2"))),
            ("swap", Box::new(|b| put(b, 65536 - 10, b"SWAPSPACE2"))),
            (
                "LVM2_member",
                Box::new(|b| {
                    put(b, 512, b"LABELONE");
                    put(b, 512 + 24, b"LVM2 001");
                }),
            ),
            ("crypto_LUKS", Box::new(|b| put(b, 0, b"LUKS\xba\xbe"))),
            ("crypto_LUKS", Box::new(|b| put(b, 0x4000, b"SKUL\xba\xbe"))),
            (
                "linux_raid_member",
                Box::new(|b| put(b, 4096, &0xa92b4efcu32.to_le_bytes())),
            ),
            ("bcache", Box::new(|b| put(b, 4096 + 24, &BCACHE_MAGIC))),
            ("iso9660", Box::new(|b| put(b, 32769, b"CD001"))),
            ("jfs", Box::new(|b| put(b, 32768, b"JFS1"))),
            ("reiserfs", Box::new(|b| put(b, 65536 + 52, b"ReIsEr2Fs"))),
            ("reiserfs", Box::new(|b| put(b, 8192 + 52, b"ReIsErFs"))),
            (
                "gfs2",
                Box::new(|b| {
                    put(b, 65536, &0x01161970u32.to_be_bytes());
                    put(b, 65536 + 4, &1u32.to_be_bytes());
                }),
            ),
            ("ocfs2", Box::new(|b| put(b, 2 * 4096, b"OCFSV2"))),
            ("ocfs2", Box::new(|b| put(b, 2 * 1024, b"OCFSV2"))),
            (
                "ceph_bluestore",
                Box::new(|b| put(b, 0, b"bluestore block device")),
            ),
            (
                "zfs_member",
                Box::new(|b| put(b, (128 << 10) + 5 * 1024, &0x00bab10cu64.to_le_bytes())),
            ),
            ("gpt", Box::new(|b| put(b, 512, b"EFI PART"))),
            (
                "dos",
                Box::new(|b| {
                    put(b, 510, &[0x55, 0xAA]);
                    put(b, 446 + 4, &[0x83]);
                    put(b, 446 + 12, &100u32.to_le_bytes());
                }),
            ),
        ];
        for (want, make) in cases {
            let mut b = blank();
            make(&mut b);
            assert_eq!(probe(&b).map(|s| s.kind), Some(want), "{want}");
        }
    }

    #[test]
    fn ext4_usage_and_uuid_from_the_superblock() {
        let mut b = blank();
        put(&mut b, 1024 + 56, &[0x53, 0xEF]);
        put(&mut b, 1024 + 0x60, &(0x40u32 | 0x80).to_le_bytes());
        put(&mut b, 1024 + 0x18, &2u32.to_le_bytes()); // 4 KiB blocks
        put(&mut b, 1024 + 0x4, &1000u32.to_le_bytes());
        put(&mut b, 1024 + 0x150, &1u32.to_le_bytes()); // + 2^32 blocks
        put(&mut b, 1024 + 0xC, &250u32.to_le_bytes());
        put(&mut b, 1024 + 0x68, &[7; 16]);
        let s = probe(&b).unwrap();
        assert_eq!(s.mount_type, Some("ext4"));
        assert_eq!(s.uuid, Some([7; 16]));
        assert_eq!(
            superblock_usage(&b),
            Some(SuperblockUsage {
                total_bytes: ((1u64 << 32) + 1000) * 4096,
                free_bytes: 250 * 4096
            })
        );
        // A hostile shift does not overflow.
        put(&mut b, 1024 + 0x18, &200u32.to_le_bytes());
        assert_eq!(superblock_usage(&b), None);
    }

    #[test]
    fn xfs_usage_is_big_endian() {
        let mut b = blank();
        put(&mut b, 0, b"XFSB");
        put(&mut b, 4, &4096u32.to_be_bytes());
        put(&mut b, 8, &262144u64.to_be_bytes());
        put(&mut b, 144, &1000u64.to_be_bytes());
        put(&mut b, 32, &[9; 16]);
        assert_eq!(probe(&b).unwrap().uuid, Some([9; 16]));
        assert_eq!(
            superblock_usage(&b),
            Some(SuperblockUsage {
                total_bytes: 1 << 30,
                free_bytes: 4096 * 1000
            })
        );
        // Its span includes the internal log (sb_logstart != 0, sb_logblocks 100).
        put(&mut b, 48, &1u64.to_be_bytes());
        put(&mut b, 96, &100u32.to_be_bytes());
        assert_eq!(
            superblock_usage(&b).unwrap().total_bytes,
            (262144 - 100) * 4096
        );
        assert_eq!(filesystem_bytes(&b), Some(1 << 30));
        assert_eq!(
            uuid_string(&[0xAB; 16]),
            "abababab-abab-abab-abab-abababababab"
        );
    }
}
