//! Who uses a block device without mounting it, facts of the in-use rule
//! (`csi_proxy_core::disk::refuse_in_use`): loop devices backed by it (kubelet maps every raw
//! block volume through one), processes holding it open, and exclusive claims. Each check
//! fails closed: what cannot be read is an error, never "free".

use super::os::LinuxOs;
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

/// A block device by its `(major, minor)` numbers.
pub type DevNum = (u32, u32);

/// The loop devices (`loopN`) whose backing file is one of `devs`, from
/// `/sys/block/loopN/loop/backing_file`. A loop without a backing file is unbound; a backing
/// file gone (deleted) is no block device of ours.
pub fn loops_backed_by(
    os: &dyn LinuxOs,
    sys_block: &Path,
    devs: &[DevNum],
) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for name in os.list_dir(sys_block)? {
        if !name.starts_with("loop") {
            continue;
        }
        let backing = match os.read_file(&sys_block.join(&name).join("loop/backing_file")) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // not bound
            Err(e) => return Err(io_context(e, &name)),
        };
        let backing = backing.trim_end_matches('\n');
        match os.block_device_number(Path::new(backing)) {
            Ok(Some(d)) if devs.contains(&d) => out.push(format!("{name} (on {backing})")),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_context(e, backing)),
        }
    }
    out.sort();
    Ok(out)
}

/// The processes (`pid (comm)`) holding one of `devs` open, from `/proc/<pid>/fd`, process
/// `except` (the daemon, whose own reads are under the disk's lock) left out. A process or
/// descriptor gone while it is looked at is skipped; any other error is returned, so a process
/// whose descriptors the daemon may not read (root without `CAP_SYS_PTRACE`) makes the answer
/// an error, never "free", unless `skip_unreadable`.
pub fn processes_holding(
    os: &dyn LinuxOs,
    proc_dir: &Path,
    devs: &[DevNum],
    except: u32,
    skip_unreadable: bool,
) -> io::Result<Vec<String>> {
    let gone = |e: &io::Error| {
        e.kind() == io::ErrorKind::NotFound
            || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error())
    };
    let comm = |pid: &str| {
        os.read_file(&proc_dir.join(pid).join("comm"))
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for pid in os.list_dir(proc_dir)? {
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == except.to_string() {
            continue;
        }
        let fds = proc_dir.join(&pid).join("fd");
        let unreadable = |e: io::Error| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                "; telling whether it holds the disk needs root with CAP_SYS_PTRACE"
            } else {
                ""
            };
            io::Error::new(
                e.kind(),
                format!(
                    "cannot read the descriptors of process {pid} ({}): {e}{hint}",
                    comm(&pid)
                ),
            )
        };
        let skipped =
            |e: &io::Error| e.kind() == io::ErrorKind::PermissionDenied && skip_unreadable;
        let entries = match os.list_dir(&fds) {
            Ok(e) => e,
            Err(e) if gone(&e) || skipped(&e) => continue,
            Err(e) => return Err(unreadable(e)),
        };
        for fd in entries {
            match os.block_device_number(&fds.join(&fd)) {
                Ok(Some(d)) if devs.contains(&d) => {
                    out.push(format!("{pid} ({})", comm(&pid)));
                    break;
                }
                Ok(_) => {}
                Err(e) if gone(&e) => {}
                Err(e) if skipped(&e) => {
                    tracing::debug!(pid, "descriptors not readable; skipped as the flag says");
                    break;
                }
                Err(e) => return Err(unreadable(e)),
            }
        }
    }
    out.sort();
    Ok(out)
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

    /// A fake `/sys/block` and `/proc` over real device nodes: `/dev/null` is a character
    /// device (never a disk), so the "disk" here is whatever block device the machine has.
    #[test]
    fn loops_and_processes_are_found_by_device_number() {
        let os = crate::linux::kernel::SystemLinux::default();
        let tmp = tempfile::tempdir().unwrap();
        let Some((node, dev)) = std::fs::read_dir("/dev")
            .unwrap()
            .flatten()
            .find_map(|e| Some((e.path(), os.block_device_number(&e.path()).ok()??)))
        else {
            eprintln!("SKIPPED: no block device node in /dev");
            return;
        };
        let sys = tmp.path().join("sys");
        for (name, backing) in [
            ("loop0", Some(node.display().to_string())),
            ("loop1", Some("/nonexistent/file.img (deleted)".into())),
            ("loop2", None),
            ("sda", None),
        ] {
            std::fs::create_dir_all(sys.join(name).join("loop")).unwrap();
            if let Some(b) = backing {
                std::fs::write(sys.join(name).join("loop/backing_file"), format!("{b}\n")).unwrap();
            }
        }
        let found = loops_backed_by(&os, &sys, &[dev]).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("loop0 "), "{found:?}");
        assert!(
            loops_backed_by(&os, &sys, &[(9999, 9999)])
                .unwrap()
                .is_empty()
        );

        let proc_dir = tmp.path().join("proc");
        std::fs::create_dir_all(proc_dir.join("42/fd")).unwrap();
        std::fs::create_dir_all(proc_dir.join("43/fd")).unwrap();
        std::fs::create_dir_all(proc_dir.join("self")).unwrap();
        std::os::unix::fs::symlink(&node, proc_dir.join("42/fd/3")).unwrap();
        std::os::unix::fs::symlink("/dev/null", proc_dir.join("42/fd/0")).unwrap();
        std::os::unix::fs::symlink("/gone", proc_dir.join("43/fd/1")).unwrap();
        std::fs::write(proc_dir.join("42/comm"), "dd\n").unwrap();
        assert_eq!(
            processes_holding(&os, &proc_dir, &[dev], 1, false).unwrap(),
            ["42 (dd)"]
        );
        assert!(
            processes_holding(&os, &proc_dir, &[(9999, 9999)], 1, false)
                .unwrap()
                .is_empty()
        );
        assert!(processes_holding(&os, &tmp.path().join("none"), &[dev], 1, false).is_err());
    }
}
