//! Who uses a disk: the Linux facts of the one in-use rule (`csi_proxy_core::disk::
//! refuse_in_use`, in front of every RPC that writes a disk or mounts, grows or offlines a
//! volume, and of DisconnectTarget): mounts, swap, stacked devices, the other members of a
//! multi-device filesystem, loop devices, processes holding it and exclusive claims. What
//! cannot be read is an error (fail closed); core decides.

use super::storage::{loops_over, storage_reach};
use super::*;
use crate::linux::block_users;
use crate::linux::mountinfo;

/// Devices stacked on `name` (dm, md), recursively, by kernel name. Fails closed: a
/// `holders` directory that exists but cannot be listed is an error, never "none".
fn holders(os: &Os, sys_entry: &Path, out: &mut Vec<String>) -> io::Result<()> {
    let names = match os.list_dir(&sys_entry.join("holders")) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names {
        if !out.contains(&name) {
            out.push(name.clone());
            holders(os, &sys_disk(&name), out)?;
        }
    }
    Ok(())
}

/// Where mounted btrfs filesystems list their member devices (by kernel name) under
/// `<fsid>/devices/`; absent while the btrfs module is not loaded, when none can be mounted.
const SYS_FS_BTRFS: &str = "/sys/fs/btrfs";

/// The other members of every mounted multi-device filesystem one of `names` belongs to
/// (btrfs: each member is claimed by the filesystem, but the mount table names one member
/// only, under an anonymous device number). md RAID members are seen as stacked devices
/// instead (`holders/`).
fn btrfs_members(os: &Os, names: &[String]) -> io::Result<Vec<String>> {
    let fsids = match os.list_dir(Path::new(SYS_FS_BTRFS)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for fsid in fsids {
        let dir = Path::new(SYS_FS_BTRFS).join(&fsid).join("devices");
        let devices = match os.list_dir(&dir) {
            Ok(d) => d,
            // `features`, or a filesystem unmounted meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
        };
        if devices.iter().any(|d| names.contains(d)) {
            out.extend(devices.into_iter().filter(|d| !names.contains(d)));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The disk and its partitions: kernel name and sysfs directory.
fn own_devices(os: &Os, disk: &Disk) -> Vec<(String, PathBuf)> {
    let mut out = vec![(disk.name.clone(), sys_disk(&disk.name))];
    for p in partitions(os, disk) {
        let dir = sys_disk(&disk.name).join(&p.name);
        out.push((p.name, dir));
    }
    out
}

/// The mount table and `/proc/swaps`, read once for every disk of a storage.
struct Tables {
    mounts: Vec<mountinfo::MountInfo>,
    swaps: String,
}

impl Tables {
    fn read(os: &Os) -> Result<Tables> {
        let mounts = mountinfo::read_from(&**os)
            .map_err(|e| Error::io("disk usage", "/proc/self/mountinfo", &e))?;
        let swaps = os
            .read_file(Path::new("/proc/swaps"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        Ok(Tables { mounts, swaps })
    }
}

/// What [`usage`] reads, and which of the disk's own devices a mount in the table explains
/// (their exclusive claim is that mount's).
fn mounts_and_system_use(
    os: &Os,
    disk: &Disk,
    tables: &Tables,
) -> Result<(DiskUsage, Vec<String>)> {
    let op = "disk usage";
    let own = own_devices(os, disk);
    let own_names: Vec<String> = own.iter().map(|(n, _)| n.clone()).collect();
    let mut stacked = Vec::new();
    for (_, dir) in &own {
        holders(os, dir, &mut stacked)
            .map_err(|e| Error::io(op, format!("holders of {}", dir.display()), &e))?;
    }
    let other_members =
        btrfs_members(os, &own_names).map_err(|e| Error::io(op, SYS_FS_BTRFS, &e))?;
    // Each device whose mounts count, with its device number and node.
    let mut devices = Vec::new();
    for (name, dir) in own.iter().cloned().chain(
        stacked
            .iter()
            .chain(&other_members)
            .map(|h| (h.clone(), sys_disk(h))),
    ) {
        let num = dev_numbers(os, &dir).ok();
        devices.push((name.clone(), num, node(&name)));
    }
    let mut mount_points = Vec::new();
    let mut explained = Vec::new();
    for m in &tables.mounts {
        // btrfs names a member by the path it was registered under (a /dev/disk/by-* link
        // too), and shows an anonymous device number.
        let source = Path::new(&m.source);
        let canonical = (m.fs_type == "btrfs" && source.starts_with(DEV))
            .then(|| os.canonicalize(source).ok())
            .flatten();
        for (name, num, node) in &devices {
            if *num == Some((m.major, m.minor))
                || source == node
                || canonical.as_deref() == Some(node.as_path())
            {
                mount_points.push(m.mount_point.to_string_lossy().into_owned());
                explained.push(name.clone());
            }
        }
    }
    mount_points.sort();
    mount_points.dedup();
    let swap = tables
        .swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .find(|dev| devices.iter().any(|(_, _, n)| n.as_os_str() == *dev));
    let system_use = if let Some(mp) = mount_points
        .iter()
        .find(|mp| ["/", "/boot", "/boot/efi", "/usr", "/var"].contains(&mp.as_str()))
    {
        Some(format!("holds the host's {mp} filesystem"))
    } else {
        swap.map(|dev| format!("holds active swap {dev}"))
    };
    let usage = DiskUsage {
        mount_points,
        system_use,
        stacked,
        other_members,
        ..Default::default()
    };
    Ok((usage, explained))
}

/// What the mount table, swap and sysfs tell of the disk: every mount of it, its partitions,
/// the devices stacked on them and the multi-device filesystems they belong to, and whether it
/// holds `/`, `/boot`, active swap. Cheap: what a read RPC consults before touching the
/// kernel's view of a disk.
pub fn usage(os: &Os, disk: &Disk) -> Result<DiskUsage> {
    mounts_and_system_use(os, disk, &Tables::read(os)?).map(|(u, _)| u)
}

/// How often, and how long apart, the processes holding a disk and its claims are looked for
/// again before they count (see [`in_use_facts`]).
const PROBE_RETRIES: u32 = 4;
const PROBE_WAIT: Duration = Duration::from_millis(50);

/// One disk of the storage, and its facts as they are gathered.
struct Member<'a> {
    disk: &'a Disk,
    usage: DiskUsage,
    /// Which of its devices a mount explains (see [`mounts_and_system_use`]).
    explained: Vec<String>,
    own: Vec<(String, PathBuf)>,
    devs: Vec<block_users::DevNum>,
}

/// Every fact of the in-use rule, of the storage the disk reaches: the disk and each other
/// disk reaching the same storage ([`storage_group`]: another path to the LUN, a loop device
/// over the same image or over the disk, a device built on it), each with [`usage`], the loop
/// devices set up over it or a partition (kubelet maps raw block volumes so; what backs a loop
/// is asked of the kernel, `LOOP_GET_STATUS64`), the processes holding one of its devices by a
/// descriptor or a memory mapping, or holding the backing file of one that is a loop (the
/// daemon excepted; one pass over `/proc` for all of them), and the devices claimed exclusively (an `O_EXCL` open fails with EBUSY) that no
/// mount in the table explains. The other disks' facts are in
/// [`DiskUsage::other_paths`]. Fails closed: what cannot be read is an error.
pub fn in_use_facts(os: &Os, disk: &Disk) -> Result<DiskUsage> {
    const OP: &str = "disk usage";
    let object = format!("disk {} ({})", disk.number, disk.name);
    let err = |e: io::Error| Error::io(OP, &object, &e);
    let all = disks(os)?;
    let loops =
        block_users::loop_backings(&**os, Path::new(SYS_BLOCK), Path::new(DEV)).map_err(err)?;
    let reach = storage_reach(os, &all, &loops).map_err(err)?;
    let own_ids = reach
        .iter()
        .find(|r| r.number == disk.number)
        .map(|r| r.ids.clone())
        .unwrap_or_default();
    let mut group: Vec<&Disk> = storage_group(disk.number, &reach)
        .iter()
        .filter_map(|n| all.iter().find(|d| d.number == *n))
        .collect();
    if group.is_empty() {
        group.push(disk); // detached meanwhile: its own facts still answer
    }
    let tables = Tables::read(os)?;
    let mut members = Vec::new();
    for d in group {
        let (mut usage, explained) = mounts_and_system_use(os, d, &tables)?;
        let own = own_devices(os, d);
        let mut devs = Vec::new();
        for (_, dir) in &own {
            devs.push(dev_numbers(os, dir).map_err(err)?);
        }
        usage.loops = loops_over(os, &loops, &devs);
        members.push(Member {
            disk: d,
            usage,
            explained,
            own,
            devs,
        });
    }
    let devs: Vec<_> = members
        .iter()
        .flat_map(|m| m.devs.iter().copied())
        .collect();
    // A loop of the storage over a regular file: a process writing the file writes the loop.
    let files: Vec<block_users::BackingFile> = members
        .iter()
        .filter_map(|m| {
            let (_, b) = loops.iter().find(|(name, _)| *name == m.disk.name)?;
            let at = m.own.iter().position(|(name, _)| *name == m.disk.name)?;
            (b.rdev == (0, 0)).then(|| block_users::BackingFile {
                dev: b.dev,
                ino: b.ino,
                loop_dev: m.devs[at],
            })
        })
        .collect();
    // A prober (udev, blkid, `losetup -f` looking for a free loop device, the kernel
    // re-reading a partition table, another daemon asking a loop what backs it) opens or
    // claims a disk for a moment; a user holds it. Only a holder or a claim still there a
    // little later counts.
    for attempt in 0.. {
        let held = block_users::holders(
            &**os,
            &devs,
            &files,
            std::process::id(),
            block_users::unreadable_processes_skipped(),
        )
        .map_err(err)?;
        let mut busy = false;
        for m in &mut members {
            m.usage.processes = held
                .iter()
                .filter(|(d, _)| m.devs.contains(d))
                .map(|(_, who)| who.clone())
                .collect();
            m.usage.processes.sort();
            m.usage.processes.dedup();
            m.usage.claimed = unexplained_claims(os, m.disk, &m.own, &m.explained).map_err(err)?;
            busy |= !m.usage.processes.is_empty() || !m.usage.claimed.is_empty();
        }
        if !busy || attempt == PROBE_RETRIES {
            break;
        }
        os.sleep(PROBE_WAIT);
    }
    let mut members = members.into_iter();
    let mut usage = members.next().map(|m| m.usage).unwrap_or_default();
    usage.storage = own_ids;
    for m in members {
        let mut theirs = m.usage;
        // A device stacked on, or a loop set up over, the other path that is this very disk
        // is not someone else's use of the storage.
        theirs.stacked.retain(|s| *s != disk.name);
        theirs
            .loops
            .retain(|l| l.split(' ').next() != Some(disk.name.as_str()));
        usage.other_paths.push(OtherPath {
            disk: m.disk.number,
            name: m.disk.name.clone(),
            usage: theirs,
        });
    }
    Ok(usage)
}

/// The devices of the disk (`own`) claimed exclusively (an `O_EXCL` open fails with EBUSY)
/// that no mount in the table explains. A partition's claim makes the whole disk's `O_EXCL`
/// open fail too: the disk counts as claimed by itself only when none of its partitions is.
fn unexplained_claims(
    os: &Os,
    disk: &Disk,
    own: &[(String, PathBuf)],
    explained: &[String],
) -> io::Result<Vec<String>> {
    let claimed = |name: &str| {
        block_users::exclusively_held(Fd::open(os, &node(name), Open::Claim).map(drop))
    };
    let mut out = Vec::new();
    let mut part_claimed = false;
    for (name, _) in own.iter().skip(1) {
        if claimed(name)? {
            part_claimed = true;
            if !explained.contains(name) {
                out.push(name.clone());
            }
        }
    }
    if !part_claimed && !explained.contains(&disk.name) && claimed(&disk.name)? {
        out.push(disk.name.clone());
    }
    Ok(out)
}

/// [`in_use_facts`] on this machine.
pub fn in_use(disk: &Disk) -> Result<DiskUsage> {
    in_use_facts(&os::system(), disk)
}
