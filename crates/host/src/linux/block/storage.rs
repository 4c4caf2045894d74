//! Which disks reach which storage, as the kernel tells: what each disk says about itself
//! (SCSI VPD page 0x83 designators, an NVMe namespace's `wwid`, vendor, model and serial
//! number; for a loop device the device and inode numbers of what backs it), and what it is
//! built on (a loop device set up over a disk or partition, a stacked device's `slaves/`).
//! `csi_proxy_core::disk::storage_group` decides from these which disks are one storage.

use super::*;
use crate::linux::block_users::DevNum;
use crate::linux::os::LoopBacking;
use csi_proxy_core::disk::{Reach, StorageId};
use csi_proxy_formats::scsi_vpd;

/// Every disk in `all` as the in-use rule sees it. `loops` are the bound loop devices and what
/// backs each ([`block_users::loop_backings`]). Fails closed on a `slaves/` directory that
/// exists but cannot be listed.
pub(super) fn storage_reach(
    os: &Os,
    all: &[Disk],
    loops: &[(String, LoopBacking)],
) -> io::Result<Vec<Reach>> {
    let mut out = Vec::with_capacity(all.len());
    for d in all {
        let mut over = Vec::new();
        let ids = match loops.iter().find(|(name, _)| *name == d.name) {
            Some((_, b)) => {
                if b.rdev != (0, 0) {
                    over.extend(whose(os, b.rdev.0, b.rdev.1).map(|(under, _)| under.number));
                }
                vec![StorageId::Backing {
                    dev: b.dev,
                    ino: b.ino,
                }]
            }
            None => identity(os, d),
        };
        built_on(os, &sys_disk(&d.name), &mut over, 0)?;
        over.retain(|n| *n != d.number);
        over.sort_unstable();
        over.dedup();
        out.push(Reach {
            number: d.number,
            name: d.name.clone(),
            ids,
            over,
        });
    }
    Ok(out)
}

/// The disks reaching the same storage as `disk` (`csi_proxy_core::disk::storage_group`,
/// `disk` first), and whether `disk` says anything about itself (one that does not stands
/// alone, and cannot be told apart from any other).
pub fn storage_of(os: &Os, disk: &Disk) -> Result<(Vec<u32>, bool)> {
    const OP: &str = "disk identity";
    let err = |e: io::Error| Error::io(OP, format!("disk {} ({})", disk.number, disk.name), &e);
    let all = disks(os)?;
    let loops =
        crate::linux::block_users::loop_backings(&**os, Path::new(SYS_BLOCK), Path::new(DEV))
            .map_err(err)?;
    let reach = storage_reach(os, &all, &loops).map_err(err)?;
    let known = reach
        .iter()
        .any(|r| r.number == disk.number && !r.ids.is_empty());
    let group = storage_group(disk.number, &reach);
    Ok((group, known))
}

/// What a disk that is no loop device says about its storage.
fn identity(os: &Os, d: &Disk) -> Vec<StorageId> {
    let dir = sys_disk(&d.name);
    let text = |f: &str| {
        os::read_text(&**os, &dir.join(f))
            .map(|t| t.trim().to_string())
            .unwrap_or_default()
    };
    let mut ids = os
        .read_file(&dir.join("device/vpd_pg83"))
        .map(|p| {
            // The logical unit's designators (association 0), of any code set; a port's or
            // a target's name a path, not the storage.
            scsi_vpd::page83(&p)
                .filter(|d| d.association == 0)
                .filter_map(|d| StorageId::designator(d.kind, d.id))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if d.name.starts_with("nvme") {
        // The kernel's name for the namespace: its EUI-64, NGUID or UUID when it has one,
        // else the controller's vendor, serial and model with the namespace ID.
        let wwid = text("wwid");
        if !wwid.is_empty() {
            ids.push(StorageId::Nvme(wwid));
        }
        return ids;
    }
    let serial = serial(os, d).trim().to_string();
    if !serial.is_empty() {
        ids.push(StorageId::Serial {
            vendor: text("device/vendor"),
            model: text("device/model"),
            serial,
        });
    }
    ids
}

/// The disks under the stacked device at `sys_entry` (its `slaves/`, recursively through
/// devices that are no disk of ours). A depth bound keeps a malformed sysfs from looping.
fn built_on(os: &Os, sys_entry: &Path, out: &mut Vec<u32>, depth: u32) -> io::Result<()> {
    let names = match os.list_dir(&sys_entry.join("slaves")) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("{}: {e}", sys_entry.display()),
            ));
        }
    };
    for name in names {
        let entry = Path::new("/sys/class/block").join(&name);
        let under = dev_numbers(os, &entry)
            .ok()
            .and_then(|(major, minor)| whose(os, major, minor));
        match under {
            Some((disk, _)) => out.push(disk.number),
            None if depth < 16 => built_on(os, &sys_disk(&name), out, depth + 1)?,
            None => {}
        }
    }
    Ok(())
}

/// The loop devices set up over one of `devs` (a disk and its partitions), as
/// `loopN (over NAME)`.
pub(super) fn loops_over(os: &Os, loops: &[(String, LoopBacking)], devs: &[DevNum]) -> Vec<String> {
    let mut out: Vec<String> = loops
        .iter()
        .filter(|(_, b)| devs.contains(&b.rdev))
        .map(|(name, b)| {
            let under = os
                .canonicalize(&Path::new(SYS_DEV_BLOCK).join(format!("{}:{}", b.rdev.0, b.rdev.1)))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| format!("{}:{}", b.rdev.0, b.rdev.1));
            format!("{name} (over {under})")
        })
        .collect();
    out.sort();
    out
}
