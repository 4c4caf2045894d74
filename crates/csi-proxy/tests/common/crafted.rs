//! Content crafted to the on-disk formats, where this kernel lacks the driver or the tool that
//! would make it (md members need the md driver for mdadm to create an array; DRBD its tools).

use std::path::Path;

/// Writes `bytes` at byte `at` of `dev`, durably.
pub fn write_at(dev: &Path, at: u64, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dev)
        .map_err(|e| e.to_string())?;
    f.write_all_at(bytes, at).map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())
}

/// The length of `dev` in bytes.
pub fn len_of(dev: &Path) -> u64 {
    use std::io::Seek;
    std::fs::File::open(dev)
        .unwrap()
        .seek(std::io::SeekFrom::End(0))
        .unwrap()
}

/// md's superblock magic (`MD_SB_MAGIC`).
pub const MD_MAGIC: u32 = 0xa92b_4efc;

/// An md 1.x superblock (md_p.h `struct mdp_superblock_1`, a RAID1 of two) that says it sits
/// at sector `super_offset`, with its checksum, as `mdadm --examine` accepts it.
pub fn md1_superblock(super_offset: u64, data_offset: u64) -> Vec<u8> {
    let mut sb = vec![0u8; 512];
    let mut put = |at: usize, b: &[u8]| sb[at..at + b.len()].copy_from_slice(b);
    put(0, &MD_MAGIC.to_le_bytes());
    put(4, &1u32.to_le_bytes()); // major_version
    put(16, &[0x5a; 16]); // set_uuid
    put(32, b"tenant:0");
    put(72, &1u32.to_le_bytes()); // level
    put(80, &8192u64.to_le_bytes()); // size
    put(92, &2u32.to_le_bytes()); // raid_disks
    put(128, &data_offset.to_le_bytes());
    put(136, &8192u64.to_le_bytes()); // data_size
    put(144, &super_offset.to_le_bytes());
    put(220, &2u32.to_le_bytes()); // max_dev
    // The 1.x checksum: 32-bit words of the 256-byte header and the roles, folded.
    let sum: u64 = sb[..260]
        .chunks(4)
        .map(|w| u64::from(u32::from_le_bytes(w.try_into().unwrap())))
        .sum();
    let csum = ((sum & 0xffff_ffff) + (sum >> 32)) as u32;
    sb[216..220].copy_from_slice(&csum.to_le_bytes());
    sb
}

/// mdadm needs the md driver (absent here) to create an array: members are crafted.
pub fn md090(dev: &Path, _: &Path) -> Result<(), String> {
    let mut sb = vec![0u8; 4096];
    let words: [(usize, u32); 8] = [
        (0, MD_MAGIC),
        (8, 90), // minor_version
        (20, 0x1234_5678),
        (28, 1),    // level
        (32, 8192), // size
        (36, 2),    // nr_disks
        (40, 2),    // raid_disks
        (52, 0x9abc_def0),
    ];
    for (at, v) in words {
        sb[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    let sum: u64 = sb
        .chunks(4)
        .map(|w| u64::from(u32::from_le_bytes(w.try_into().unwrap())))
        .sum();
    let csum = ((sum & 0xffff_ffff) + (sum >> 32)) as u32;
    sb[152..156].copy_from_slice(&csum.to_le_bytes()); // sb_csum
    write_at(dev, (len_of(dev) & !0xFFFF) - 0x1_0000, &sb)
}

pub fn md10(dev: &Path, _: &Path) -> Result<(), String> {
    let at = ((len_of(dev) / 512 - 16) & !7) * 512;
    write_at(dev, at, &md1_superblock(at / 512, 0))
}

pub fn md12(dev: &Path, _: &Path) -> Result<(), String> {
    write_at(dev, 4096, &md1_superblock(8, 2048))
}

/// DRBD 8.4 internal metadata (drbdmeta's `struct md_on_disk_08`, big-endian) in the last
/// 4 KiB block of `dev`, as `drbdadm create-md` leaves it: the magic at +60 and the metadata
/// size in sectors after it.
pub fn drbd84(dev: &Path, _: &Path) -> Result<(), String> {
    let mut md = vec![0u8; 4096];
    md[0..8].copy_from_slice(&(len_of(dev) / 512 - 8).to_be_bytes()); // la_size_sect
    md[8..16].copy_from_slice(&0x1234_5678_9abc_def1u64.to_be_bytes()); // current UUID
    md[60..64].copy_from_slice(&0x8374_026bu32.to_be_bytes()); // DRBD_MD_MAGIC_08
    md[64..68].copy_from_slice(&8u32.to_be_bytes()); // md_size_sect
    write_at(dev, (len_of(dev) & !0xFFF) - 0x1000, &md)
}

/// Intel Matrix Storage (IMSM) fakeraid metadata as the firmware leaves it: its signature and
/// version in the second-to-last sector of the whole disk.
pub fn imsm(dev: &Path, _: &Path) -> Result<(), String> {
    let mut mpb = vec![0u8; 512];
    mpb[..30].copy_from_slice(b"Intel Raid ISM Cfg Sig. 1.3.00");
    mpb[36..40].copy_from_slice(&512u32.to_le_bytes()); // mpb_size
    write_at(dev, (len_of(dev) / 512 - 2) * 512, &mpb)
}

/// SNIA DDF fakeraid metadata: the anchor header (big-endian magic, revision 01.02.00) in the
/// last sector of the whole disk, pointing at no primary copy.
pub fn ddf(dev: &Path, _: &Path) -> Result<(), String> {
    let mut anchor = vec![0xFFu8; 512];
    anchor[0..4].copy_from_slice(&0xDE11_DE11u32.to_be_bytes());
    anchor[4..8].copy_from_slice(&[0; 4]); // crc
    anchor[8..32].copy_from_slice(b"csi-proxy-test-ddf-guid!");
    anchor[32..40].copy_from_slice(b"01.02.00");
    anchor[96..104].copy_from_slice(&0u64.to_be_bytes()); // primary_lba
    anchor[104..112].copy_from_slice(&0u64.to_be_bytes()); // secondary_lba
    write_at(dev, len_of(dev) / 512 * 512 - 512, &anchor)
}
