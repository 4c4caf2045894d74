//! Who uses a block device without mounting it, facts of the in-use rule
//! (`csi_proxy_core::disk::refuse_in_use`): loop devices backed by it (kubelet maps every raw
//! block volume through one), processes holding it open or mapped, and exclusive claims. Each check
//! fails closed: what cannot be read is an error, never "free".

use super::os::{Held, LinuxOs, LoopBacking, Open, OpenOn, TaskHolder, encode_dev};
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The daemon's `--skip-unreadable-processes` (set once at start).
static SKIP_UNREADABLE: AtomicBool = AtomicBool::new(false);

/// Makes the in-use facts leave out, instead of failing on, a process whose descriptors the
/// daemon may not read (EACCES: it holds capabilities the daemon lacks, as a sandbox's init
/// does). For sandboxes only: such a process may hold a disk unseen.
pub fn skip_unreadable_processes(skip: bool) {
    SKIP_UNREADABLE.store(skip, Ordering::Relaxed);
}

/// Whether [`skip_unreadable_processes`] was asked for.
pub fn unreadable_processes_skipped() -> bool {
    SKIP_UNREADABLE.load(Ordering::Relaxed)
}

/// The daemon's `--in-use-scan proc` (set once at start).
static PROC_ONLY: AtomicBool = AtomicBool::new(false);

/// Makes the in-use facts read `/proc` even where the kernel's task iterators are offered (an
/// operator's way back should a kernel's iterators misbehave).
pub fn scan_proc_only(only: bool) {
    PROC_ONLY.store(only, Ordering::Relaxed);
}

/// A block device by its `(major, minor)` numbers.
pub type DevNum = (u32, u32);

/// Every bound loop device (`loopN` under `sys_block`) and what the kernel says backs it
/// (`LOOP_GET_STATUS64` on its node under `dev`): the numbers it took when the loop was set up,
/// so a backing node in another mount namespace or deleted since is still found. An unbound
/// loop (ENXIO) is left out; anything else unreadable is an error.
pub fn loop_backings(
    os: &dyn LinuxOs,
    sys_block: &Path,
    dev: &Path,
) -> io::Result<Vec<(String, LoopBacking)>> {
    let mut out = Vec::new();
    for name in os.list_dir(sys_block)? {
        // Only a bound loop has a `loop/` directory with its backing file: the rest are
        // left unopened.
        if !name.starts_with("loop") || !os.exists(&sys_block.join(&name).join("loop")) {
            continue;
        }
        let raw = match os.open_raw(&dev.join(&name), Open::Read) {
            Ok(raw) => raw,
            // Detached and removed meanwhile.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) => continue,
            Err(e) => return Err(io_context(e, &name)),
        };
        let backing = os.loop_backing(raw);
        os.close(raw);
        match backing {
            Ok(b) => out.push((name, b)),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) => {}
            Err(e) => return Err(io_context(e, &name)),
        }
    }
    Ok(out)
}

/// The processes (`pid (comm)`) holding one of `devs`, or one of `files`, open or mapped: asked
/// of the kernel's task iterators where the node offers them ([`LinuxOs::task_holders`]: one
/// walk in the kernel, nothing per descriptor in user space, every process seen whatever its
/// capabilities), else found by the `/proc` pass ([`processes_holding`]), which is also the
/// answer for one call whose walk failed. `except` is for the `/proc` pass: the iterators leave
/// the daemon's own process out themselves.
pub fn holders(
    os: &dyn LinuxOs,
    devs: &[DevNum],
    files: &[BackingFile],
    except: u32,
    skip_unreadable: bool,
) -> io::Result<Vec<(DevNum, String)>> {
    let proc_dir = Path::new("/proc");
    if !PROC_ONLY.load(Ordering::Relaxed) {
        let inodes: Vec<u64> = files.iter().map(|f| f.ino).collect();
        match os.task_holders(&inodes) {
            Ok(Some(found)) => return holders_found(os, proc_dir, &found, devs, files),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the kernel's task iterators failed; this call reads /proc");
            }
        }
    }
    processes_holding(os, proc_dir, devs, files, except, skip_unreadable)
}

/// [`holders`] from what the iterators reported. A block device is matched by its number. A
/// regular file is reported by inode number and its filesystem's device, which is the number a
/// loop took for its backing file except where the filesystem reports another (btrfs
/// subvolumes, overlayfs): such a file is confirmed with one `statx` of its `/proc` entry
/// (a descriptor, or a mapping under `map_files/`), the same numbers the loop took; a process
/// gone meanwhile holds nothing, and an entry that cannot be read is an error (fail closed).
fn holders_found(
    os: &dyn LinuxOs,
    proc_dir: &Path,
    found: &[TaskHolder],
    devs: &[DevNum],
    files: &[BackingFile],
) -> io::Result<Vec<(DevNum, String)>> {
    let kernel_dev = |d: u32| (d >> 20, d & 0xF_FFFF);
    let mut held: Vec<(u32, DevNum)> = Vec::new();
    for r in found {
        let (ino, sb_dev, entry) = match r.found {
            Held::FdBlock { rdev, .. } | Held::MapBlock { rdev, .. } => {
                let d = kernel_dev(rdev);
                if devs.contains(&d) {
                    held.push((r.pid, d));
                }
                continue;
            }
            Held::FdFile { fd, ino, sb_dev } => (ino, sb_dev, format!("fd/{fd}")),
            Held::MapFile {
                start,
                end,
                ino,
                sb_dev,
            } => (ino, sb_dev, format!("map_files/{start:x}-{end:x}")),
        };
        let (major, minor) = kernel_dev(sb_dev);
        for f in files.iter().filter(|f| f.ino == ino) {
            let same = f.dev == encode_dev(major, minor)
                || match os.open_on(&proc_dir.join(r.pid.to_string()).join(&entry)) {
                    Ok(OpenOn::File { dev, ino }) => f.dev == dev && f.ino == ino,
                    Ok(OpenOn::Block(_)) => false,
                    Err(e) if is_gone(&e) => false,
                    Err(e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("cannot tell what process {} holds as {entry}: {e}", r.pid),
                        ));
                    }
                };
            if same {
                held.push((r.pid, f.loop_dev));
            }
        }
    }
    held.sort_unstable();
    held.dedup();
    let mut out: Vec<(DevNum, String)> = held
        .into_iter()
        .map(|(pid, d)| {
            (
                d,
                format!("{pid} ({})", comm(os, proc_dir, &pid.to_string())),
            )
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error())
}

/// A process's name (`/proc/<pid>/comm`), empty when it cannot be read.
fn comm(os: &dyn LinuxOs, proc_dir: &Path, pid: &str) -> String {
    os.read_file(&proc_dir.join(pid).join("comm"))
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default()
}

/// The processes (`pid (comm)`) holding one of `devs` open, by a descriptor (`/proc/<pid>/fd`)
/// or a memory mapping that outlives its descriptor (`/proc/<pid>/maps`), each with the device
/// it holds; a process holding a loop's backing file (`files`: its `st_dev` and `st_ino` as
/// the kernel took them, with the loop device it backs) counts as holding that loop, since
/// what it writes there is what the loop's readers read. Process `except` (the daemon, whose
/// own reads are under the disk's lock) is left out. One pass over `/proc`: each descriptor
/// costs one type-and-inode `statx`, and each mapped file one per distinct file (by the device
/// and inode `maps` shows) across all processes, through `map_files/`, so a node in another
/// mount namespace or deleted is still seen. A process or descriptor gone while it is looked
/// at is skipped; any other error is returned, so a process the daemon may not read (root
/// without `CAP_SYS_PTRACE`) makes the answer an error, never "free", unless `skip_unreadable`.
pub fn processes_holding(
    os: &dyn LinuxOs,
    proc_dir: &Path,
    devs: &[DevNum],
    files: &[BackingFile],
    except: u32,
    skip_unreadable: bool,
) -> io::Result<Vec<(DevNum, String)>> {
    let except = except.to_string();
    let pids: Vec<String> = os
        .list_dir(proc_dir)?
        .into_iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && *p != except)
        .collect();
    // The processes are split among the cores: the reads are independent, and the kernel
    // answers them in parallel.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(pids.len().div_ceil(64))
        .max(1);
    let chunk = pids.len().div_ceil(threads).max(1);
    if threads == 1 {
        let mut out = scan(os, proc_dir, &pids, devs, files, skip_unreadable)?;
        out.sort_by(|a, b| a.1.cmp(&b.1));
        return Ok(out);
    }
    let mut out = Vec::new();
    std::thread::scope(|scope| {
        let parts: Vec<_> = pids
            .chunks(chunk)
            .map(|part| scope.spawn(move || scan(os, proc_dir, part, devs, files, skip_unreadable)))
            .collect();
        for part in parts {
            out.extend(part.join().expect("a /proc scan thread panicked")?);
        }
        Ok::<(), io::Error>(())
    })?;
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// [`processes_holding`] over the processes `pids`.
fn scan(
    os: &dyn LinuxOs,
    proc_dir: &Path,
    pids: &[String],
    devs: &[DevNum],
    files: &[BackingFile],
    skip_unreadable: bool,
) -> io::Result<Vec<(DevNum, String)>> {
    let backs = |dev: u64, ino: u64| {
        files
            .iter()
            .find(|f| f.dev == dev && f.ino == ino)
            .map(|f| f.loop_dev)
    };
    let gone = is_gone;
    let comm = |pid: &str| comm(os, proc_dir, pid);
    // What each mapped file is, by the (device, inode) `maps` shows: a library mapped by
    // every process is looked at once.
    let mut mapped: HashMap<(String, u64), Option<DevNum>> = HashMap::new();
    let mut out = Vec::new();
    for pid in pids {
        let dir = proc_dir.join(pid);
        let unreadable = |e: io::Error| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                "; telling whether it holds the disk needs root with CAP_SYS_PTRACE"
            } else {
                ""
            };
            io::Error::new(
                e.kind(),
                format!(
                    "cannot read the descriptors and mappings of process {pid} ({}): {e}{hint}",
                    comm(pid)
                ),
            )
        };
        let denied = |e: &io::Error| {
            e.kind() == io::ErrorKind::PermissionDenied
                || e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error())
        };
        let skipped = |e: &io::Error| denied(e) && skip_unreadable;
        let mut held: Vec<DevNum> = Vec::new();
        let mut found = |d: DevNum| {
            if devs.contains(&d) && !held.contains(&d) {
                held.push(d);
            }
        };
        let fds = dir.join("fd");
        let entries = match os.list_dir(&fds) {
            Ok(e) => e,
            Err(e) if gone(&e) || skipped(&e) => continue,
            Err(e) => return Err(unreadable(e)),
        };
        let mut skip_rest = false;
        for fd in entries {
            match os.open_on(&fds.join(&fd)) {
                Ok(OpenOn::Block(d)) => found(d),
                Ok(OpenOn::File { dev, ino }) => {
                    if let Some(d) = backs(dev, ino) {
                        found(d);
                    }
                }
                Err(e) if gone(&e) => {}
                Err(e) if skipped(&e) => {
                    tracing::debug!(pid, "descriptors not readable; skipped as the flag says");
                    skip_rest = true;
                    break;
                }
                Err(e) => return Err(unreadable(e)),
            }
        }
        if !skip_rest {
            let maps = match os.read_file(&dir.join("maps")) {
                Ok(m) => m,
                Err(e) if gone(&e) || skipped(&e) => Vec::new(),
                Err(e) => return Err(unreadable(e)),
            };
            for (range, file) in file_mappings(&maps) {
                // A mapped backing file is known by the numbers `maps` shows.
                if let Some(d) = maps_numbers(&file).and_then(|(dev, ino)| backs(dev, ino)) {
                    found(d);
                    continue;
                }
                let kind = match mapped.get(&file) {
                    Some(k) => *k,
                    None => match os.open_on(&dir.join("map_files").join(range)) {
                        Ok(on) => *mapped.entry(file).or_insert(match on {
                            OpenOn::Block(d) => Some(d),
                            OpenOn::File { .. } => None,
                        }),
                        Err(e) if gone(&e) => continue,
                        Err(e) if skipped(&e) => break,
                        Err(e) => return Err(unreadable(e)),
                    },
                };
                if let Some(d) = kind {
                    found(d);
                }
            }
        }
        if !held.is_empty() {
            let who = format!("{pid} ({})", comm(pid));
            out.extend(held.into_iter().map(|d| (d, who.clone())));
        }
    }
    Ok(out)
}

/// A loop's backing file, as [`processes_holding`] matches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackingFile {
    /// `st_dev` as the kernel's `huge_encode_dev` (a loop's `lo_device`).
    pub dev: u64,
    /// `st_ino` (a loop's `lo_inode`).
    pub ino: u64,
    /// The loop device it backs.
    pub loop_dev: DevNum,
}

/// The `st_dev` (encoded as a loop's `lo_device`) and `st_ino` of a `maps` line's file: its
/// device field is `major:minor` in hexadecimal (proc_pid_maps(5)).
fn maps_numbers((dev, ino): &(String, u64)) -> Option<(u64, u64)> {
    let (major, minor) = dev.split_once(':')?;
    let major = u32::from_str_radix(major, 16).ok()?;
    let minor = u32::from_str_radix(minor, 16).ok()?;
    Some((encode_dev(major, minor), *ino))
}

/// The file mappings of a `/proc/<pid>/maps` (proc_pid_maps(5): `start-end perms offset
/// dev inode path`): each mapping's address range (its name under `map_files/`) and the
/// (device, inode) of the file it maps. Anonymous mappings (inode 0) are left out.
fn file_mappings(maps: &[u8]) -> impl Iterator<Item = (&str, (String, u64))> {
    maps.split(|b| *b == b'\n').filter_map(|line| {
        let line = std::str::from_utf8(line).ok()?;
        let mut f = line.split_ascii_whitespace();
        let range = f.next()?;
        let (_perms, _offset, dev) = (f.next()?, f.next()?, f.next()?);
        let inode: u64 = f.next()?.parse().ok()?;
        (inode != 0).then(|| (range, (dev.to_string(), inode)))
    })
}

/// What an exclusive open of a disk (`O_EXCL` on a block device claims it) tells: `Ok(true)`
/// when something holds the disk (EBUSY), `Ok(false)` when nothing does or the device is gone
/// (ENXIO, ENODEV, ENOENT: nothing to take from anyone), and any other failure as the error
/// (fail closed).
pub fn exclusively_held(open: io::Result<()>) -> io::Result<bool> {
    use rustix::io::Errno;
    match open {
        Ok(()) => Ok(false),
        Err(e) => match e.raw_os_error() {
            Some(n) if n == Errno::BUSY.raw_os_error() => Ok(true),
            Some(n)
                if [Errno::NXIO, Errno::NODEV, Errno::NOENT]
                    .iter()
                    .any(|g| g.raw_os_error() == n) =>
            {
                Ok(false)
            }
            _ => Err(e),
        },
    }
}

fn io_context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_open_fails_closed() {
        let errno = |n: rustix::io::Errno| Err(io::Error::from_raw_os_error(n.raw_os_error()));
        assert!(!exclusively_held(Ok(())).unwrap());
        assert!(exclusively_held(errno(rustix::io::Errno::BUSY)).unwrap());
        assert!(!exclusively_held(errno(rustix::io::Errno::NXIO)).unwrap());
        assert!(!exclusively_held(errno(rustix::io::Errno::NOENT)).unwrap());
        for other in [
            rustix::io::Errno::ACCESS,
            rustix::io::Errno::IO,
            rustix::io::Errno::ROFS,
            rustix::io::Errno::MFILE,
        ] {
            assert!(exclusively_held(errno(other)).is_err(), "{other:?}");
        }
    }

    /// A fake `/proc` over real device nodes: `/dev/null` is a character device (never a
    /// disk), so the "disk" here is whatever block device the machine has. One process holds
    /// it by a descriptor, another by a mapping only (its `map_files/` entry), a third maps a
    /// regular file twice (looked at once).
    #[test]
    fn processes_are_found_by_descriptor_and_by_mapping() {
        let os = crate::linux::kernel::SystemLinux::default();
        let tmp = tempfile::tempdir().unwrap();
        let Some((node, dev)) = std::fs::read_dir("/dev")
            .unwrap()
            .flatten()
            .find_map(|e| match os.open_on(&e.path()).ok()? {
                OpenOn::Block(d) => Some((e.path(), d)),
                OpenOn::File { .. } => None,
            })
        else {
            eprintln!("SKIPPED: no block device node in /dev");
            return;
        };
        let proc_dir = tmp.path().join("proc");
        for pid in ["42", "43", "44"] {
            std::fs::create_dir_all(proc_dir.join(pid).join("fd")).unwrap();
            std::fs::create_dir_all(proc_dir.join(pid).join("map_files")).unwrap();
        }
        std::fs::create_dir_all(proc_dir.join("self")).unwrap();
        std::os::unix::fs::symlink(&node, proc_dir.join("42/fd/3")).unwrap();
        std::os::unix::fs::symlink("/dev/null", proc_dir.join("42/fd/0")).unwrap();
        std::os::unix::fs::symlink("/gone", proc_dir.join("43/fd/1")).unwrap();
        std::fs::write(proc_dir.join("42/comm"), "dd\n").unwrap();
        std::fs::write(proc_dir.join("43/comm"), "mapper\n").unwrap();
        std::fs::write(
            proc_dir.join("43/maps"),
            "7f00-7f10 rw-s 00000000 00:06 93 /dev/sdq (deleted)\n7f20-7f30 rw-p 00000000 00:00 0 \n",
        )
        .unwrap();
        std::os::unix::fs::symlink(&node, proc_dir.join("43/map_files/7f00-7f10")).unwrap();
        std::fs::write(
            proc_dir.join("44/maps"),
            "1000-2000 r-xp 00000000 08:01 77 /usr/lib/libc.so\n3000-4000 r--p 00001000 08:01 77 /usr/lib/libc.so\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/null", proc_dir.join("44/map_files/1000-2000")).unwrap();
        // The second mapping of the same file has no entry: it must not be looked at.
        let held = processes_holding(&os, &proc_dir, &[dev], &[], 1, false).unwrap();
        assert_eq!(
            held,
            [
                (dev, "42 (dd)".to_string()),
                (dev, "43 (mapper)".to_string())
            ]
        );
        assert!(
            processes_holding(&os, &proc_dir, &[(9999, 9999)], &[], 1, false)
                .unwrap()
                .is_empty()
        );
        assert!(processes_holding(&os, &tmp.path().join("none"), &[dev], &[], 1, false).is_err());
    }
}
