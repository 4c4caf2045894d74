//! FormatVolume and PartitionDisk refuse content the probe of a volume's first bytes does not
//! see, through the daemon's endpoints on real loop disks: md RAID members whose superblock is
//! at the end (0.90 and 1.0), a filesystem only libblkid knows, and a volume too small for
//! xfs, which is a precondition stated in one line. Needs root (loop devices); skipped with the
//! reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, v1_clients};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::os::unix::fs::FileExt;
use std::path::Path;
use tonic::Code;

const MD_MAGIC: u32 = 0xa92b_4efc;

fn write(dev: &Path, at: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
    f.write_all_at(bytes, at).unwrap();
    f.sync_all().unwrap();
}

fn len_of(dev: &Path) -> u64 {
    let name = dev.file_name().unwrap().to_string_lossy().into_owned();
    let sys = std::fs::read_dir("/sys/class/block")
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy() == name)
        .unwrap()
        .path();
    std::fs::read_to_string(sys.join("size"))
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap()
        * 512
}

/// An md 0.90 superblock: 64 KiB-aligned, 64 KiB before the end of the device.
fn put_md_090(dev: &Path) {
    let at = (len_of(dev) & !0xFFFF) - 0x1_0000;
    let mut sb = MD_MAGIC.to_le_bytes().to_vec();
    sb.extend_from_slice(&0u32.to_le_bytes()); // major_version
    sb.extend_from_slice(&90u32.to_le_bytes()); // minor_version
    write(dev, at, &sb);
}

/// An md 1.0 superblock: 8 KiB before the end, rounded down to 4 KiB, naming its own sector.
fn put_md_10(dev: &Path) {
    let at = ((len_of(dev) / 512 - 16) & !7) * 512;
    let mut sb = vec![0u8; 256];
    sb[..4].copy_from_slice(&MD_MAGIC.to_le_bytes());
    sb[4..8].copy_from_slice(&1u32.to_le_bytes());
    sb[144..152].copy_from_slice(&(at / 512).to_le_bytes()); // super_offset
    write(dev, at, &sb);
}

async fn format(vc: &mut common::VolumeClient, id: &str) -> Result<(), tonic::Status> {
    vc.format_volume(v1::FormatVolumeRequest {
        volume_id: id.into(),
    })
    .await
    .map(drop)
}

fn refused(r: Result<(), tonic::Status>) -> String {
    let s = r.expect_err("expected a refusal");
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    s.message().to_string()
}

/// A RAID member keeps its data from sector 0 and its md superblock at the end: the first
/// bytes of a fresh array are blank. Before, FormatVolume formatted over both kinds.
#[tokio::test(flavor = "multi_thread")]
async fn raid_members_with_their_superblock_at_the_end_are_never_formatted_over() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    for (name, put) in [("md090", put_md_090 as fn(&Path)), ("md10", put_md_10)] {
        let l = LoopDisk::new(d.dir.path(), name, 64).unwrap();
        let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
        let part = l.partition(1);
        put(&part);
        let before = l.fingerprint();
        let msg = refused(format(&mut vc, &id).await);
        assert!(
            msg.contains("FormatVolume") && msg.contains("linux_raid_member"),
            "{name}: {msg}"
        );
        assert_eq!(l.fingerprint(), before, "{name}: nothing was written");
        assert!(
            common::is_formatted(&mut vc, &id).await,
            "{name}: a RAID member is not an empty volume"
        );
    }
}

/// A whole disk that is a blank md 0.90 member gets no partition table written over its
/// superblock.
#[tokio::test(flavor = "multi_thread")]
async fn a_whole_disk_raid_member_is_never_partitioned() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, _) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "wholemd", 64).unwrap();
    put_md_090(&l.dev);
    let before = l.fingerprint();
    let msg = refused(
        dc.partition_disk(d1::PartitionDiskRequest {
            disk_number: l.disk_number(),
        })
        .await
        .map(drop),
    );
    assert!(
        msg.contains("PartitionDisk") && msg.contains("linux_raid_member metadata at its end"),
        "{msg}"
    );
    assert_eq!(l.fingerprint(), before, "nothing was written");
}

/// romfs is not among the daemon's own signatures; libblkid knows it. Before, mkfs.ext4 ran
/// with its force flag and the romfs was gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_filesystem_only_libblkid_knows_is_never_formatted_over() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "romfs", 64).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    write(&l.partition(1), 0, b"-rom1fs-\0\0\x10\0");
    let before = l.fingerprint();
    let msg = refused(format(&mut vc, &id).await);
    assert!(
        msg.contains("FormatVolume") && msg.contains("already holds romfs (found by libblkid)"),
        "{msg}"
    );
    assert_eq!(l.fingerprint(), before, "nothing was written");

    // A blank volume next to it is still formatted, and a retry is the OK no-op.
    let l2 = LoopDisk::new(d.dir.path(), "blank", 64).unwrap();
    let id2 = common::partition_one(&mut dc, &mut vc, l2.disk_number()).await;
    format(&mut vc, &id2).await.unwrap();
    format(&mut vc, &id2).await.unwrap();
}

/// mkfs.xfs refuses a volume under 300 MB and prints its usage text after the reason: the
/// answer is FAILED_PRECONDITION carrying the reason alone (before: INTERNAL with 28 lines).
#[tokio::test(flavor = "multi_thread")]
async fn xfs_on_a_too_small_volume_is_a_precondition_in_one_line() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&["-format-filesystem=xfs"]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "smallxfs", 200).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    let msg = refused(format(&mut vc, &id).await);
    assert!(
        msg.contains("FormatVolume") && msg.contains("larger than 300MB"),
        "{msg}"
    );
    assert!(
        !msg.contains("Usage") && !msg.contains("blocksize"),
        "{msg}"
    );
}

/// ext4 is made without blocks reserved for root, as Kubernetes' mount-utils makes it: pods
/// are not root, and 5 % reserved would give them ENOSPC early. Before: 5 % was reserved.
#[tokio::test(flavor = "multi_thread")]
async fn ext4_is_made_with_no_blocks_reserved_for_root() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "reserved", 64).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    format(&mut vc, &id).await.unwrap();
    let out = std::process::Command::new("dumpe2fs")
        .arg("-h")
        .arg(l.partition(1))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let reserved = text
        .lines()
        .find_map(|l| l.strip_prefix("Reserved block count:"))
        .map(str::trim);
    assert_eq!(reserved, Some("0"), "{text}");
}

/// A tool that prints without end (a tenant's content can make a checker do so) never puts
/// more than a few KiB of it in the status message: its first and last bytes, with how much
/// was left out. Before: the whole output went into the message.
#[tokio::test(flavor = "multi_thread")]
async fn a_tools_output_in_a_status_message_is_bounded() {
    if !can_use_loop_devices() {
        return;
    }
    let wrappers = tempfile::tempdir().unwrap();
    let path = common::wrap_tool(
        wrappers.path(),
        "mkfs.ext4",
        "echo 'mkfs.ext4: the first words' >&2; head -c 1048576 /dev/zero | tr '\\0' 'x' >&2; \
         echo; echo 'the last words' >&2; exit 1",
    );
    let d = Daemon::start_env(&[], &[("PATH", &path)]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "chatty", 64).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    let s = format(&mut vc, &id).await.expect_err("mkfs failed");
    assert_eq!(
        s.code(),
        Code::Internal,
        "{}",
        &s.message()[..200.min(s.message().len())]
    );
    let msg = s.message();
    assert!(msg.len() < 4096, "{} bytes", msg.len());
    assert!(
        msg.contains("FormatVolume")
            && msg.contains("mkfs.ext4 failed")
            && msg.contains("the first words")
            && msg.contains("bytes left out")
            && msg.contains("the last words"),
        "{msg}"
    );
}
