//! The Linux disk and volume hosts over the fake Linux: the same logic the loop-device tests
//! drive as root, here without privileges and without touching the machine (only the format
//! records go to a temporary state directory, as they are the daemon's own files).

use super::FakeLinux;
use crate::linux::disk::LinuxDiskHost;
use crate::linux::volume::{FsType, LinuxVolumeHost};
use csi_proxy_core::Kind;
use csi_proxy_core::disk::DiskHost;
use csi_proxy_core::volume::{ResizeTarget, VolumeHost};
use std::sync::Arc;
use std::time::Duration;

const GIB: u64 = 1 << 30;
/// Where the tests mount: a path that exists only inside the fake.
const TARGET: &str = "/csi-fake-root/pods/a/mount";

struct Node {
    fake: Arc<FakeLinux>,
    disks: LinuxDiskHost,
    volumes: LinuxVolumeHost,
    _state: tempfile::TempDir,
}

impl Node {
    fn new(fs: FsType) -> Self {
        let fake = FakeLinux::new();
        let state = tempfile::tempdir().unwrap();
        fake.add_dir(TARGET);
        Node {
            disks: LinuxDiskHost::with_os(fake.clone()),
            volumes: LinuxVolumeHost::with_os(fake.clone(), state.path(), fs),
            fake,
            _state: state,
        }
    }

    /// A new disk partitioned by the disk host: its one volume's ID.
    fn volume(&self, name: &str, size: u64) -> String {
        let n = self.fake.add_disk(name, size);
        self.disks.partition_disk(n).unwrap();
        let ids = self.volumes.list_volumes_on_disk(n, None).unwrap();
        assert_eq!(ids.len(), 1, "{ids:?}");
        ids[0].clone()
    }

    fn ran(&self, program: &str) -> Vec<String> {
        let prefix = format!("run {program} ");
        self.fake
            .calls()
            .into_iter()
            .filter(|c| c.starts_with(&prefix))
            .collect()
    }

    fn count(&self, call: &str) -> usize {
        let prefix = format!("{call} ");
        self.fake
            .calls()
            .iter()
            .filter(|c| c.starts_with(&prefix))
            .count()
    }
}

#[test]
fn a_blank_volume_is_formatted_once_and_a_retry_is_ok() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    assert!(!n.volumes.is_volume_formatted(&id).unwrap());
    n.volumes.format_volume(&id).unwrap();
    assert!(n.volumes.is_volume_formatted(&id).unwrap());
    let mkfs = n.ran("mkfs.ext4");
    assert_eq!(mkfs.len(), 1);
    assert!(
        !mkfs[0].contains(" -F "),
        "a blank volume is not forced: {mkfs:?}"
    );

    n.volumes.format_volume(&id).unwrap();
    assert_eq!(
        n.ran("mkfs.ext4").len(),
        1,
        "the retry found our finished format"
    );
}

/// A mkfs killed mid-way: mkfs.xfs leaves its superblock marked in progress (blkid sees xfs,
/// the kernel refuses to mount it), mke2fs leaves nothing recognisable.
#[test]
fn an_interrupted_format_of_ours_is_finished_by_the_retry() {
    for (fs, tool, force) in [
        (FsType::Ext4, "mkfs.ext4", " -F "),
        (FsType::Xfs, "mkfs.xfs", " -f "),
    ] {
        let n = Node::new(fs);
        let id = n.volume("sda", GIB);
        n.fake.interrupt(tool);
        assert!(n.volumes.format_volume(&id).is_err());
        // Mounting what the killed mkfs left is refused until the format is finished.
        let e = n.volumes.mount_volume(&id, TARGET).unwrap_err();
        assert!(
            e.message().contains("interrupted") || e.message().contains("no filesystem"),
            "{tool}: {}",
            e.message()
        );
        // Drivers format only after IsVolumeFormatted says false: it must, or they mount
        // forever.
        assert!(!n.volumes.is_volume_formatted(&id).unwrap(), "{tool}");

        n.fake.clear_calls();
        n.volumes.format_volume(&id).unwrap();
        let mkfs = n.ran(tool);
        assert_eq!(mkfs.len(), 1);
        assert!(
            mkfs[0].contains(force),
            "our own unfinished format is forced: {mkfs:?}"
        );
        assert!(!n.ran("blkid").is_empty(), "libblkid looked before forcing");
        assert!(n.volumes.is_volume_formatted(&id).unwrap());
        n.volumes.mount_volume(&id, TARGET).unwrap();
    }
}

#[test]
fn a_foreign_filesystem_is_never_formatted_over() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    let mut xfs = vec![0u8; 512];
    xfs[..4].copy_from_slice(b"XFSB");
    xfs[4..8].copy_from_slice(&4096u32.to_be_bytes());
    xfs[32..48].copy_from_slice(&[0xAB; 16]);
    n.fake.write_device("sda1", 0, &xfs);
    n.fake.clear_calls();
    let e = n.volumes.format_volume(&id).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    assert!(e.message().contains("xfs"), "{}", e.message());
    assert!(n.ran("mkfs.ext4").is_empty());
    assert_eq!(
        n.count("write_at"),
        0,
        "nothing was written after the table"
    );
}

#[test]
fn mount_is_idempotent_refuses_another_volume_and_a_missing_target() {
    let n = Node::new(FsType::Ext4);
    let a = n.volume("sda", GIB);
    let b = n.volume("sdb", GIB);
    for id in [&a, &b] {
        n.volumes.format_volume(id).unwrap();
    }
    n.volumes.mount_volume(&a, TARGET).unwrap();
    n.volumes.mount_volume(&a, TARGET).unwrap();
    assert_eq!(
        n.count("mount"),
        1,
        "the second MountVolume found it mounted"
    );
    assert_eq!(n.volumes.get_volume_id_from_target_path(TARGET).unwrap(), a);

    let e = n.volumes.mount_volume(&b, TARGET).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    assert!(
        e.message().contains("another filesystem"),
        "{}",
        e.message()
    );

    let e = n
        .volumes
        .mount_volume(&b, "/csi-fake-root/nowhere")
        .unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    assert!(e.message().contains("does not exist"), "{}", e.message());

    n.fake.add_link("/csi-fake-root/link", TARGET);
    let e = n
        .volumes
        .mount_volume(&b, "/csi-fake-root/link")
        .unwrap_err();
    assert!(e.message().contains("symbolic link"), "{}", e.message());

    // A volume that is mounted is never formatted.
    let e = n.volumes.format_volume(&a).unwrap_err();
    assert!(e.message().contains("is mounted"), "{}", e.message());
}

#[test]
fn unmount_takes_only_its_own_volume_away_and_is_idempotent() {
    let n = Node::new(FsType::Ext4);
    let a = n.volume("sda", GIB);
    let b = n.volume("sdb", GIB);
    n.volumes.format_volume(&a).unwrap();
    n.volumes.mount_volume(&a, TARGET).unwrap();

    let e = n.volumes.unmount_volume(&b, TARGET).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    assert!(n.fake.mount_points().iter().any(|p| p == TARGET));

    n.fake.set_busy(TARGET);
    let e = n.volumes.unmount_volume(&a, TARGET).unwrap_err();
    assert!(e.message().contains("busy"), "{}", e.message());
    assert_eq!(n.count("sleep"), 20, "EBUSY is retried for a second first");
    n.fake.lock().busy.clear();

    n.volumes.unmount_volume(&a, TARGET).unwrap();
    assert!(!n.fake.mount_points().iter().any(|p| p == TARGET));
    n.volumes.unmount_volume(&a, TARGET).unwrap();
    n.volumes
        .unmount_volume(&a, "/csi-fake-root/nowhere")
        .unwrap();
}

#[test]
fn resize_grows_the_partition_and_the_filesystem_and_refuses_too_much() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    n.volumes.format_volume(&id).unwrap();
    let before = n.volumes.get_volume_stats(&id).unwrap().total_bytes;
    n.fake.resize_disk("sda", 2 * GIB);

    n.fake.clear_calls();
    let e = n
        .volumes
        .resize_volume(&id, ResizeTarget::Bytes(3 * GIB))
        .unwrap_err();
    assert_eq!(e.kind(), Kind::InvalidArgument, "{}", e.message());
    assert_eq!(n.count("write_at"), 0, "a refused resize writes nothing");
    assert_eq!(n.count("blkpg"), 0);

    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    assert_eq!(n.count("blkpg"), 1, "the kernel was told the new length");
    assert_eq!(n.ran("resize2fs").len(), 1);
    let after = n.volumes.get_volume_stats(&id).unwrap().total_bytes;
    assert!(after > before + GIB - (64 << 20), "{before} -> {after}");

    n.fake.clear_calls();
    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    assert!(
        n.ran("resize2fs").is_empty(),
        "already full size: nothing to do"
    );
}

/// A mounted ext4 grows through EXT4_IOC_RESIZE_FS on its mount's root, in blocks of the size
/// statvfs reports there; resize2fs (which would look the mount point up by its path) never
/// runs.
#[test]
fn a_mounted_ext4_grows_by_the_kernel_through_its_root() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    n.volumes.format_volume(&id).unwrap();
    n.volumes.mount_volume(&id, TARGET).unwrap();
    n.fake.resize_disk("sda", 2 * GIB);
    n.fake.clear_calls();
    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    assert!(n.ran("resize2fs").is_empty());
    let grown: Vec<String> = (n.fake.calls().into_iter())
        .filter(|c| c.starts_with("ext4_resize "))
        .collect();
    assert_eq!(grown.len(), 1, "{grown:?}");
    let blocks: u64 = grown[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(blocks * 4096 > 2 * GIB - (4 << 20), "{grown:?}");
    assert!(n.volumes.get_volume_stats(&id).unwrap().total_bytes > GIB + GIB / 2);
    // Nothing left to grow: no call at all.
    n.fake.clear_calls();
    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    assert_eq!(n.count("ext4_resize"), 0);
}

#[test]
fn xfs_is_grown_on_a_private_temporary_mount() {
    let n = Node::new(FsType::Xfs);
    let id = n.volume("sda", GIB);
    n.volumes.format_volume(&id).unwrap();
    n.fake.resize_disk("sda", 2 * GIB);
    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    // Named by the whole volume ID (diskseq included), never the PARTUUID alone, which a
    // clone of the disk growing at the same time shares.
    // The kernel grew it through the private mount's root held open; no tool ran.
    assert!(n.ran("xfs_growfs").is_empty());
    let private = format!("{}/{id}", n.volumes_state_mnt());
    let calls = n.fake.calls();
    let held = calls
        .iter()
        .position(|c| *c == format!("open {private} DirNoFollow"))
        .expect("the private mount's root was opened");
    let fd = calls[held + 1..]
        .iter()
        .find_map(|c| c.strip_prefix("xfs_geometry "))
        .expect("the geometry was read through a descriptor")
        .to_string();
    let grow: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("xfs_grow_data "))
        .collect();
    assert_eq!(grow.len(), 1);
    assert!(
        grow[0].starts_with(&format!("xfs_grow_data {fd} ")),
        "{grow:?}"
    );
    assert!(calls.iter().position(|c| c == grow[0]) > Some(held));
    assert_eq!(n.count("make_private"), 1);
    assert_eq!(
        n.fake.mount_points(),
        ["/", n.volumes_state_mnt().as_str()],
        "the temporary mount is gone, the private directory stays"
    );
    assert!(n.volumes.get_volume_stats(&id).unwrap().total_bytes > GIB + GIB / 2);
}

/// Two xfs volumes grown at the same time, each on its own temporary mount: the private
/// directory is made a mount once, not once per grow. Two grows that both found it not yet a
/// mount each bound it onto itself; the second bind covered the first grow's temporary mount,
/// whose unmount then failed with EINVAL ("not mounted") and left the filesystem mounted
/// underneath (clones_e2e saw it 1 run in 6 on loop disks).
#[test]
fn concurrent_grows_make_the_private_directory_a_mount_once() {
    for round in 0..3 {
        let n = Node::new(FsType::Xfs);
        let ids = [n.volume("sda", GIB), n.volume("sdb", GIB)];
        for id in &ids {
            n.volumes.format_volume(id).unwrap();
        }
        n.fake.resize_disk("sda", 2 * GIB);
        n.fake.resize_disk("sdb", 2 * GIB);
        // Both grows read the mount table before either acts on it.
        (n.fake).meet_after("read_file /proc/self/mountinfo", Duration::from_millis(200));
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let grows: Vec<_> = (ids.iter())
                .map(|id| {
                    let (volumes, start) = (&n.volumes, &start);
                    s.spawn(move || {
                        start.wait();
                        volumes.resize_volume(id, ResizeTarget::Maximum)
                    })
                })
                .collect();
            for g in grows {
                let r = g.join().unwrap();
                assert!(r.is_ok(), "round {round}: {r:?}");
            }
        });
        for id in &ids {
            assert!(
                n.volumes.get_volume_stats(id).unwrap().total_bytes > GIB + GIB / 2,
                "round {round}: {id} was not grown"
            );
        }
        assert_eq!(
            n.fake.mount_points(),
            ["/", n.volumes_state_mnt().as_str()],
            "round {round}: one bind of the private directory and no temporary mount left"
        );
    }
}

/// A mounted volume is synced, measured and grown through its mount's root held open and
/// checked; a link swapped in for its mount point (it could lead to a FIFO or a device node)
/// is never followed: the call fails cleanly and does nothing through it.
#[test]
fn a_mounted_volume_is_reached_through_its_root_never_its_path_again() {
    let n = Node::new(FsType::Xfs);
    let id = n.volume("sda", GIB);
    n.volumes.format_volume(&id).unwrap();
    n.volumes.mount_volume(&id, TARGET).unwrap();
    n.fake.resize_disk("sda", 2 * GIB);
    n.fake.clear_calls();
    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    assert!(n.ran("xfs_growfs").is_empty(), "no tool is given the mount");
    assert_eq!(n.count("xfs_grow_data"), 1, "the kernel grew it");
    let opened: Vec<String> = n
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.contains("MountRoot"))
        .collect();
    assert_eq!(opened, [format!("open {TARGET} MountRoot")]);
    assert_eq!(n.count("mount_of"), 1, "checked to be that mount's root");
    n.volumes.write_volume_cache(&id).unwrap();
    assert_eq!(n.count("syncfs"), 1);
    assert!(n.volumes.get_volume_stats(&id).unwrap().total_bytes > GIB + GIB / 2);

    // The mount point's directory is swapped for a link (the mount moved with its parent).
    n.fake.add_link(TARGET, "/dev/sda");
    n.fake.resize_disk("sda", 3 * GIB);
    n.fake.clear_calls();
    for e in [
        n.volumes.write_volume_cache(&id).unwrap_err(),
        n.volumes.get_volume_stats(&id).unwrap_err(),
        n.volumes
            .resize_volume(&id, ResizeTarget::Maximum)
            .unwrap_err(),
    ] {
        assert_eq!(e.kind(), Kind::Aborted, "{}", e.message());
        assert!(
            e.message().contains("mount point changed"),
            "{}",
            e.message()
        );
    }
    assert_eq!(n.count("syncfs"), 0);
    assert_eq!(n.count("statvfs"), 0);
    assert_eq!(n.count("xfs_geometry") + n.count("xfs_grow_data"), 0);
    let through: Vec<String> = (n.fake.calls().into_iter())
        .filter(|c| c.starts_with(&format!("open {TARGET}")))
        .collect();
    assert!(
        through.iter().all(|c| c.ends_with("MountRoot")),
        "the mount point is only ever opened refusing links: {through:?}"
    );
}

impl Node {
    fn volumes_state_mnt(&self) -> String {
        self._state.path().join("mnt").display().to_string()
    }
}

#[test]
fn stats_come_from_the_superblock_unmounted_and_statvfs_mounted() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    let e = n.volumes.get_volume_stats(&id).unwrap_err();
    assert!(e.message().contains("no filesystem"), "{}", e.message());
    n.volumes.format_volume(&id).unwrap();
    let unmounted = n.volumes.get_volume_stats(&id).unwrap();
    assert_eq!(n.count("statvfs"), 0);
    n.volumes.mount_volume(&id, TARGET).unwrap();
    let mounted = n.volumes.get_volume_stats(&id).unwrap();
    assert_eq!(n.count("statvfs"), 1);
    assert_eq!(unmounted, mounted);
    assert!(mounted.total_bytes > GIB - (2 << 20) && mounted.used_bytes > 0);
}

#[test]
fn the_fake_never_touches_the_machine() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    n.volumes.format_volume(&id).unwrap();
    n.volumes.mount_volume(&id, TARGET).unwrap();
    n.volumes.write_volume_cache(&id).unwrap();
    n.volumes.unmount_volume(&id, TARGET).unwrap();
    // Every primitive went to the fake: the real kernel was never asked for on this thread,
    // and the target the volume was mounted on exists only in the fake.
    assert_eq!(crate::linux::os::system_uses_on_this_thread(), 0);
    assert!(
        n.fake
            .calls()
            .iter()
            .any(|c| c.starts_with("open /dev/sda1"))
    );
    assert!(!std::path::Path::new("/csi-fake-root").exists());
}

/// What one operation asked of the OS, by kind.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    sysfs_reads: usize,
    sysfs_lists: usize,
    opens: usize,
    /// Reads of the GPT header: 17 KiB from the start of the whole disk.
    gpt_reads: usize,
    mountinfo_reads: usize,
    total: usize,
}

impl Cost {
    fn of(calls: &[String]) -> Cost {
        let n = |f: &dyn Fn(&str) -> bool| calls.iter().filter(|c| f(c)).count();
        Cost {
            sysfs_reads: n(&|c| c.starts_with("read_file /sys/")),
            sysfs_lists: n(&|c| c.starts_with("list_dir /sys/")),
            opens: n(&|c| c.starts_with("open ")),
            gpt_reads: n(&|c| c.starts_with("read_at ") && c.ends_with(" 0 17408")),
            mountinfo_reads: n(&|c| c.starts_with("read_file /proc/self/mountinfo")),
            total: n(&|c| !c.starts_with("close ")),
        }
    }
}

#[test]
fn os_calls_per_mount_and_format() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    // Other disks on the node: finding the volume's disk must not read all of theirs.
    for other in ["sdb", "sdc", "sdd"] {
        n.fake.add_disk(other, GIB);
    }
    n.fake.clear_calls();
    n.volumes.format_volume(&id).unwrap();
    let format = Cost::of(&n.fake.calls());
    n.fake.clear_calls();
    n.volumes.mount_volume(&id, TARGET).unwrap();
    let mount = Cost::of(&n.fake.calls());
    eprintln!("FormatVolume: {format:?}\nMountVolume: {mount:?}");
    // Each operation resolves the ID once: /sys/block and the disk's directory listed once,
    // one diskseq read per disk plus the disk's size, the partition's size and dev, and the
    // sector size; the volume and its disk opened once (mount also opens the target). The
    // GPT is read three times: to name the volume, and through the held disk handle right
    // before and after mkfs or mount(2) to check it is still the same partition.
    // Before (every step naming the volume again): FormatVolume 66 sysfs reads, 3 listings,
    // 4 opens, 89 calls; MountVolume 66, 3, 5, 86. Naming a partition also reads the disk's
    // ends (its table and whatever lies outside the partitions it lists) and the partition's
    // start: a partition device the table does not list is no volume. MountVolume reads the
    // volume's end too (its length and last 128 KiB): a filesystem whose volume keeps md or
    // DRBD metadata past it is a member, never mounted directly. Both read the disk's page
    // 0x83 ID and serial number once (six sysfs attributes when the disk has neither): the
    // format record is kept under the disk's identity too, not the PARTUUID alone.
    let expected = |opens, total| Cost {
        sysfs_reads: 15,
        sysfs_lists: 2,
        opens,
        gpt_reads: 3,
        mountinfo_reads: 1,
        total,
    };
    assert_eq!(format, expected(2, 37));
    assert_eq!(mount, expected(3, 36));
}

/// SetDiskState holds the disk's `device/state` attribute and checks the disk's identity
/// once it is open: a disk detached and another attached under the same name, at any moment
/// of the request, is never written (NOT_FOUND). Before: the state was written by path, to
/// whichever disk had the name by then.
#[test]
fn set_disk_state_never_writes_a_disk_attached_in_its_place() {
    let n = Node::new(FsType::Ext4);
    let mut seq = n.fake.add_scsi_disk("sdb", GIB);
    n.disks.set_disk_online(seq, false).unwrap();
    assert_eq!(n.fake.scsi_state("sdb").as_deref(), Some("offline"));
    n.disks.set_disk_online(seq, true).unwrap();
    assert_eq!(n.fake.scsi_state("sdb").as_deref(), Some("running"));
    for after in [
        "exists /sys/block/sdb/device/state",
        "open /sys/block/sdb/device/state",
        "read_at ",
    ] {
        n.fake.replace_disk_at(after, "sdb");
        let e = n.disks.set_disk_online(seq, false).unwrap_err();
        assert_eq!(e.kind(), Kind::NotFound, "{after}: {}", e.message());
        assert_eq!(
            n.fake.scsi_state("sdb").as_deref(),
            Some("running"),
            "{after}: the disk attached in its place was not taken offline"
        );
        seq += 1; // the disk now named sdb
        n.disks.set_disk_online(seq, true).unwrap();
    }
}

/// A tool a tenant's filesystem keeps busy is stopped at its time limit, freeing the disk:
/// UNAVAILABLE naming the tool and what the stop may have left. Before: resize2fs and e2fsck
/// had no limit and held the disk for ever.
#[test]
fn a_hanging_resize2fs_is_stopped_and_reported() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    n.volumes.format_volume(&id).unwrap();
    n.fake.resize_disk("sda", 2 * GIB);
    n.fake.hang("resize2fs");
    let e = n
        .volumes
        .resize_volume(&id, ResizeTarget::Maximum)
        .unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable, "{}", e.message());
    assert!(
        e.message().contains("ResizeVolume")
            && e.message()
                .contains("resize2fs did not finish within 3600 s")
            && e.message().contains("e2fsck -f"),
        "{}",
        e.message()
    );
    // The retry grows the filesystem.
    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    assert_eq!(n.ran("resize2fs").len(), 2);
}

/// A resize2fs of ours killed mid-way can leave an invalid resize inode, which `e2fsck -p`
/// refuses to repair (seen in crash_mid_operation about once in six runs): the retry knows the
/// damage is its own unfinished work and finishes it with `e2fsck -f -y`. The same damage
/// without our marker (not our resize) is still refused.
#[test]
fn a_killed_resize2fs_of_ours_is_finished_by_the_retry() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("sda", GIB);
    n.volumes.format_volume(&id).unwrap();
    n.fake.resize_disk("sda", 2 * GIB);
    n.fake.interrupt("resize2fs");
    assert!(n.volumes.resize_volume(&id, ResizeTarget::Maximum).is_err());
    n.fake.clear_calls();
    n.volumes.resize_volume(&id, ResizeTarget::Maximum).unwrap();
    let fsck = n.ran("e2fsck");
    assert!(
        fsck.iter().any(|c| c.contains(" -y ")),
        "the retry repaired what its killed resize2fs left: {fsck:?}"
    );
    assert!(n.volumes.get_volume_stats(&id).unwrap().total_bytes > GIB + (512 << 20));

    // Damage the daemon did not cause: refused, never repaired with -y.
    let other = n.volume("sdb", GIB);
    n.volumes.format_volume(&other).unwrap();
    n.fake.resize_disk("sdb", 2 * GIB);
    n.fake.interrupt("resize2fs");
    assert!(
        n.volumes
            .resize_volume(&other, ResizeTarget::Maximum)
            .is_err()
    );
    for f in std::fs::read_dir(n._state.path()).unwrap() {
        let f = f.unwrap();
        if f.file_name().to_string_lossy().starts_with("resizing-") {
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    n.fake.clear_calls();
    let e = n
        .volumes
        .resize_volume(&other, ResizeTarget::Maximum)
        .unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
    assert!(!n.ran("e2fsck").iter().any(|c| c.contains(" -y ")));
}

/// The in-use facts over the fake: the driver's own mount explains its partition's claim (so
/// MountVolume again and online growth go ahead), a claim no mount explains is named, and the
/// disk is free again once it ends. The daemon's own descriptors never count.
#[test]
fn a_claim_counts_only_when_no_mount_explains_it() {
    let n = Node::new(FsType::Ext4);
    let id = n.volume("vdb", GIB);
    let number = n.volumes.volume_disk_number(&id).unwrap();
    n.volumes.format_volume(&id).unwrap();
    let free = n.volumes.disk_usage(number).unwrap();
    assert_eq!(free, Default::default(), "a fresh disk is free");

    n.volumes.mount_volume(&id, TARGET).unwrap();
    let own = n.volumes.disk_usage(number).unwrap();
    assert_eq!(own.mount_points, [TARGET]);
    assert!(
        own.claimed.is_empty(),
        "the mount explains its claim: {own:?}"
    );
    n.volumes.unmount_volume(&id, TARGET).unwrap();

    for claimed in ["vdb1", "vdb"] {
        n.fake.claim(claimed);
        let u = n.volumes.disk_usage(number).unwrap();
        n.fake.release(claimed);
        assert_eq!(u.claimed, [claimed], "{u:?}");
        assert!(u.mount_points.is_empty());
    }
    assert_eq!(n.disks.disk_usage(number).unwrap(), Default::default());
}
