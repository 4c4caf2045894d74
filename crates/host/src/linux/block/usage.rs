//! What the host uses a disk for: mounts, swap, stacked devices, loop devices and processes
//! holding it (the data-safety checks of the mutating RPCs and DisconnectTarget).

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

/// What the host uses the disk for: every mount of it, its partitions and the devices stacked on
/// them, plus whether it holds `/`, `/boot`, active swap, or is part of a stacked device.
pub fn usage(os: &Os, disk: &Disk) -> Result<DiskUsage> {
    let op = "disk usage";
    let mut members: Vec<(String, PathBuf)> = vec![(disk.name.clone(), sys_disk(&disk.name))];
    for p in partitions(os, disk) {
        let dir = sys_disk(&disk.name).join(&p.name);
        members.push((p.name, dir));
    }
    let mut stacked = Vec::new();
    for (_, dir) in &members {
        holders(os, dir, &mut stacked)
            .map_err(|e| Error::io(op, format!("holders of {}", dir.display()), &e))?;
    }
    let mut devs = Vec::new();
    let mut nodes = Vec::new();
    for (name, dir) in members
        .iter()
        .cloned()
        .chain(stacked.iter().map(|h| (h.clone(), sys_disk(h))))
    {
        if let Ok(d) = dev_numbers(os, &dir) {
            devs.push(d);
        }
        nodes.push(node(&name).to_string_lossy().into_owned());
    }
    let table =
        mountinfo::read_from(&**os).map_err(|e| Error::io(op, "/proc/self/mountinfo", &e))?;
    let mut mount_points: Vec<String> = table
        .iter()
        .filter(|m| devs.contains(&(m.major, m.minor)) || nodes.contains(&m.source))
        .map(|m| m.mount_point.to_string_lossy().into_owned())
        .collect();
    mount_points.sort();
    mount_points.dedup();
    let swaps = os
        .read_file(Path::new("/proc/swaps"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let swap = swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .find(|dev| nodes.iter().any(|n| n == dev));
    let system_use = if let Some(mp) = mount_points
        .iter()
        .find(|mp| ["/", "/boot", "/boot/efi", "/usr", "/var"].contains(&mp.as_str()))
    {
        Some(format!("holds the host's {mp} filesystem"))
    } else if let Some(dev) = swap {
        Some(format!("holds active swap {dev}"))
    } else if !stacked.is_empty() {
        Some(format!(
            "is in use by the stacked device(s) {} (LVM, RAID or dm-crypt)",
            stacked.join(", ")
        ))
    } else {
        None
    };
    Ok(DiskUsage {
        mount_points,
        system_use,
    })
}

/// Why `disk` is in use, or `None`: a filesystem on it (or on a device stacked on it) is
/// mounted, it backs swap or a stacked device, a loop device is backed by it or one of its
/// partitions (kubelet maps raw block volumes so), a process holds one of them open, or
/// something claims it exclusively (an `O_EXCL` open of the whole disk fails with EBUSY while
/// any of its partitions is claimed). Fails closed: what cannot be read is an error.
pub fn disk_in_use(os: &Os, disk: &Disk) -> Result<Option<String>> {
    const OP: &str = "DisconnectTarget";
    let object = format!("disk {} ({})", disk.number, disk.name);
    let usage = usage(os, disk)?;
    if let Some(why) = usage.system_use {
        return Ok(Some(why));
    }
    if !usage.mount_points.is_empty() {
        return Ok(Some(format!("is mounted at {:?}", usage.mount_points)));
    }
    let mut devs = Vec::new();
    for dir in std::iter::once(sys_disk(&disk.name)).chain(
        partitions(os, disk)
            .into_iter()
            .map(|p| sys_disk(&disk.name).join(p.name)),
    ) {
        devs.push(dev_numbers(os, &dir).map_err(|e| Error::io(OP, &object, &e))?);
    }
    let err = |e: io::Error| Error::io(OP, &object, &e);
    let loops = block_users::loops_backed_by(Path::new("/sys/block"), &devs).map_err(err)?;
    if !loops.is_empty() {
        return Ok(Some(format!(
            "backs loop device(s) {} (a raw block volume, or a mapping of it)",
            loops.join(", ")
        )));
    }
    let open = Fd::open(os, &node(&disk.name), Open::Write { exclusive: true }).map(drop);
    if block_users::exclusively_held(open).map_err(err)? {
        return Ok(Some(
            "is held open exclusively (by a mount in another namespace, a stacked device or a process)"
                .into(),
        ));
    }
    let holders = block_users::processes_holding(Path::new("/proc"), &devs).map_err(err)?;
    if !holders.is_empty() {
        return Ok(Some(format!(
            "is held open by process(es) {}",
            holders.join(", ")
        )));
    }
    Ok(None)
}

/// [`disk_in_use`] on this machine.
pub fn in_use(disk: &Disk) -> Result<Option<String>> {
    disk_in_use(&os::system(), disk)
}
