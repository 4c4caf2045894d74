//! What the fake kernel shows in its pseudo filesystems: sysfs block attributes, the
//! `/sys/dev/block` links, `/proc/self/mountinfo` and `/proc/swaps`, rendered from the state
//! at each read (as the kernel does).

use super::{ENOENT, State, errno};
use std::io;
use std::path::{Path, PathBuf};

/// mountinfo's octal escapes (proc_pid_mountinfo(5): space, tab, newline and backslash).
fn escape(p: &Path) -> String {
    let mut out = String::new();
    for c in p.display().to_string().chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => out.push_str(&format!("\\{:03o}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn mountinfo(s: &State) -> String {
    s.mounts
        .iter()
        .map(|m| {
            format!(
                "{} {} {}:{} / {} rw,relatime - {} {} rw\n",
                m.id,
                m.parent,
                m.dev.0,
                m.dev.1,
                escape(&m.point),
                m.fs_type,
                m.source
            )
        })
        .collect()
}

/// The contents of a readable pseudo file.
pub(super) fn read(s: &State, path: &Path) -> io::Result<String> {
    if path == Path::new(crate::linux::mountinfo::PATH) {
        return Ok(mountinfo(s));
    }
    if path == Path::new("/proc/swaps") {
        return Ok("Filename\tType\tSize\tUsed\tPriority\n".into());
    }
    let rel = path.strip_prefix("/sys/block").map_err(|_| errno(ENOENT))?;
    let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
    let (disk, rest) = parts.split_first().ok_or_else(|| errno(ENOENT))?;
    let d = s
        .disks
        .iter()
        .find(|d| d.name == *disk)
        .ok_or_else(|| errno(ENOENT))?;
    let text = match rest {
        ["size"] => (d.size / 512).to_string(),
        ["diskseq"] => d.seq.to_string(),
        ["dev"] => format!("{}:{}", d.major, d.minor),
        ["ro"] => "0".into(),
        ["queue", "logical_block_size"] => d.sector.to_string(),
        ["device", "state"] => d.scsi_state.clone().ok_or_else(|| errno(ENOENT))?,
        [part, attr] => {
            let p = d
                .parts
                .iter()
                .find(|p| d.part_name(p.number) == *part)
                .ok_or_else(|| errno(ENOENT))?;
            match *attr {
                "partition" => p.number.to_string(),
                "size" => (p.len / 512).to_string(),
                "start" => (p.start / 512).to_string(),
                "dev" => format!("{}:{}", d.major, d.minor + p.number),
                _ => return Err(errno(ENOENT)),
            }
        }
        _ => return Err(errno(ENOENT)),
    };
    Ok(text + "\n")
}

/// A disk's `device/vpd_pg83` (binary, so not among [`read`]'s text attributes); `None` for
/// any other path.
pub(super) fn vpd83(s: &State, path: &Path) -> Option<io::Result<Vec<u8>>> {
    let rel = path.strip_prefix("/sys/block").ok()?;
    let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
    let [disk, "device", "vpd_pg83"] = parts.as_slice() else {
        return None;
    };
    let page = s
        .disks
        .iter()
        .find(|d| d.name == *disk)
        .and_then(|d| d.vpd83.clone());
    Some(page.ok_or_else(|| errno(ENOENT)))
}

/// The names in a sysfs directory.
pub(super) fn list(s: &State, path: &Path) -> io::Result<Vec<String>> {
    if path == Path::new("/sys/block") {
        return Ok(s.disks.iter().map(|d| d.name.clone()).collect());
    }
    if path == Path::new("/proc") {
        return Ok(Vec::new()); // no process holds a fake disk
    }
    if path.ends_with("holders") {
        return Ok(Vec::new()); // nothing is stacked on a fake disk
    }
    let disk = path
        .strip_prefix("/sys/block")
        .ok()
        .and_then(|r| r.to_str())
        .and_then(|name| s.disks.iter().find(|d| d.name == name))
        .ok_or_else(|| errno(ENOENT))?;
    // What a loop disk's sysfs directory lists besides its partitions.
    let mut names: Vec<String> = [
        "alignment_offset",
        "bdi",
        "capability",
        "dev",
        "discard_alignment",
        "diskseq",
        "events",
        "events_async",
        "events_poll_msecs",
        "ext_range",
        "hidden",
        "holders",
        "inflight",
        "mq",
        "power",
        "queue",
        "range",
        "removable",
        "ro",
        "size",
        "slaves",
        "stat",
        "subsystem",
        "trace",
        "uevent",
    ]
    .map(String::from)
    .into();
    names.extend(disk.parts.iter().map(|p| disk.part_name(p.number)));
    Ok(names)
}

/// Where `/sys/dev/block/M:m` leads: the device's directory under `/sys/block` (the real link
/// leads under `/sys/devices`, with the same last two components).
pub(super) fn sys_dev_link(s: &State, path: &Path) -> Option<PathBuf> {
    let (major, minor) = path
        .strip_prefix("/sys/dev/block")
        .ok()?
        .to_str()?
        .split_once(':')?;
    let dev: (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    s.disks.iter().find_map(|d| {
        let dir = Path::new("/sys/block").join(&d.name);
        if (d.major, d.minor) == dev {
            return Some(dir);
        }
        d.parts
            .iter()
            .find(|p| (d.major, d.minor + p.number) == dev)
            .map(|p| dir.join(d.part_name(p.number)))
    })
}
