//! The kernel's own walk over every process's open files and memory mappings, for the in-use
//! rule: two BPF iterator programs (`task_file`, `task_vma`; Documentation/bpf/bpf_iterators.rst)
//! built by `csi_proxy_formats::bpf::program` and placed by the kernel's BTF. The kernel runs
//! them over every descriptor and mapping of every process without a path lookup or a `/proc`
//! entry per descriptor, and they hand back only block devices and the few regular files asked
//! about, so a guarded call no longer costs a system call per descriptor on the node.
//!
//! Three system calls of bpf(2) are made here: `BPF_PROG_LOAD` (a tracing program attached to
//! an iterator by its BTF ID), `BPF_LINK_CREATE` (the iterator link), `BPF_ITER_CREATE` (one
//! walk, read like a file). Where any of this is not offered (no BTF, no `CAP_BPF` and
//! `CAP_PERFMON`, an older kernel, a PID namespace other than the host's) the answer is "not
//! available" and the caller reads `/proc` as before; the reason is logged once.
#![allow(
    unsafe_code,
    reason = "bpf(2) has no safe wrapper; each block says why it is sound"
)]

use csi_proxy_formats::bpf::btf::Btf;
use csi_proxy_formats::bpf::program::{self, Iterates, Layout, Record};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};

/// Where the kernel describes its own types.
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
/// The initial PID namespace's inode (include/linux/proc_ns.h, `PROC_PID_INIT_INO`): the
/// iterators walk the reader's PID namespace and report host PIDs, so they answer for the node,
/// and their PIDs name `/proc` entries, only when the daemon runs in the host's.
const INIT_PID_NS_INO: u64 = 0xEFFF_FFFC;

const BPF_PROG_LOAD: u32 = 5;
const BPF_LINK_CREATE: u32 = 28;
const BPF_ITER_CREATE: u32 = 33;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_ITER: u32 = 28;
/// The programs call `bpf_seq_write`, a GPL-only helper: the few instructions generated here are
/// offered under the GPL as well as the project's licence, as the kernel asks.
const LICENSE: &[u8] = b"Dual BSD/GPL\0";

/// The daemon's one set of iterators: every host handle of the real kernel shares it, so the
/// node is probed and the programs loaded once.
pub fn shared() -> &'static TaskIterators {
    static SHARED: std::sync::OnceLock<TaskIterators> = std::sync::OnceLock::new();
    SHARED.get_or_init(TaskIterators::default)
}

/// The kernel's iterators, probed at first use and kept loaded for the inode numbers last asked
/// about.
#[derive(Debug, Default)]
pub struct TaskIterators {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Untried,
    Unavailable(String),
    Ready {
        layout: Layout,
        files_func: u32,
        maps_func: u32,
        loaded: Option<(Vec<u64>, Arc<Links>)>,
    },
}

/// One iterator link per program; each walk is a new iterator made from a link.
#[derive(Debug)]
struct Links {
    files: OwnedFd,
    maps: OwnedFd,
}

impl TaskIterators {
    /// Every block device and every regular file whose inode number is in `inodes` that some
    /// process other than this one holds open or mapped, as the kernel's iterators see them;
    /// `Ok(None)` when this node offers no such iterator ([`TaskIterators::method`] says why).
    pub fn scan(&self, inodes: &[u64]) -> io::Result<Option<Vec<Record>>> {
        let mut inodes = inodes.to_vec();
        inodes.sort_unstable();
        inodes.dedup();
        let links = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(*state, State::Untried) {
                *state = probe();
                // Ready is said once the programs are loaded: the kernel may still refuse them.
                if matches!(*state, State::Unavailable(_)) {
                    log_method(&state);
                }
            }
            match &mut *state {
                State::Untried | State::Unavailable(_) => return Ok(None),
                State::Ready {
                    layout,
                    files_func,
                    maps_func,
                    loaded,
                } => match loaded {
                    Some((at, links)) if *at == inodes => links.clone(),
                    _ => match load(layout, *files_func, *maps_func, &inodes) {
                        Ok(links) => {
                            let first = loaded.is_none();
                            let links = Arc::new(links);
                            *loaded = Some((inodes, links.clone()));
                            if first {
                                log_method(&state);
                            }
                            links
                        }
                        Err(e) => {
                            *state = State::Unavailable(format!(
                                "the kernel refused the iterator programs: {e}"
                            ));
                            log_method(&state);
                            return Ok(None);
                        }
                    },
                },
            }
        };
        // The two walks are independent: one on another thread halves the wait on two cores.
        // A thread that cannot be made (the node out of threads) only means walking in turn.
        let (files, maps) = std::thread::scope(|s| {
            let maps = std::thread::Builder::new()
                .name("in-use-walk".into())
                .spawn_scoped(s, || walk(&links.maps));
            let files = walk(&links.files);
            let maps = match maps {
                Ok(m) => m
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("the mappings' walk panicked"))),
                Err(_) => walk(&links.maps),
            };
            (files, maps)
        });
        let mut bytes = files?;
        bytes.extend(maps?);
        program::records(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// How the in-use rule finds processes on this node, for the start-up log and the
    /// self-test: the iterators, or `/proc` and why.
    pub fn method(&self) -> String {
        // A first scan probes and loads, so what is said is what the next call will do.
        let _ = self.scan(&[]);
        describe(&self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn describe(state: &State) -> String {
    match state {
        State::Ready { .. } => "the kernel's task iterators (BPF task_file and task_vma)".into(),
        State::Unavailable(why) => format!("/proc, one entry per descriptor ({why})"),
        State::Untried => "not probed yet".into(),
    }
}

fn log_method(state: &State) {
    match state {
        State::Ready { .. } => tracing::info!(method = %describe(state), "in-use facts"),
        _ => tracing::warn!(method = %describe(state), "in-use facts"),
    }
}

fn probe() -> State {
    match std::fs::metadata("/proc/self/ns/pid") {
        Ok(m) if m.ino() == INIT_PID_NS_INO => {}
        Ok(_) => return State::Unavailable("the daemon is not in the host's PID namespace".into()),
        Err(e) => return State::Unavailable(format!("/proc/self/ns/pid: {e}")),
    }
    let blob = match std::fs::read(VMLINUX_BTF) {
        Ok(b) => b,
        Err(e) => return State::Unavailable(format!("{VMLINUX_BTF}: {e}")),
    };
    let btf = match Btf::parse(&blob) {
        Ok(b) => b,
        Err(e) => return State::Unavailable(format!("{VMLINUX_BTF}: {e}")),
    };
    let layout = match Layout::from_btf(&btf) {
        Ok(l) => l,
        Err(e) => return State::Unavailable(e),
    };
    let func = |what: Iterates| {
        btf.func(what.attach_func())
            .ok_or_else(|| format!("this kernel has no {} iterator", what.attach_func()))
    };
    match (func(Iterates::Files), func(Iterates::Mappings)) {
        (Ok(files_func), Ok(maps_func)) => State::Ready {
            layout,
            files_func,
            maps_func,
            loaded: None,
        },
        (Err(e), _) | (_, Err(e)) => State::Unavailable(e),
    }
}

fn load(layout: &Layout, files_func: u32, maps_func: u32, inodes: &[u64]) -> io::Result<Links> {
    let link = |what: Iterates, func: u32| -> io::Result<OwnedFd> {
        // The daemon's PID is its host PID: `probe` checked the PID namespace.
        let insns = program::program(layout, what, inodes, std::process::id());
        let prog = load_program(&insns, func)?;
        let mut attr = [0u8; 64];
        put32(&mut attr, 0, prog.as_raw_fd() as u32);
        put32(&mut attr, 8, BPF_TRACE_ITER);
        // The link holds the program; its own descriptor can go.
        bpf(BPF_LINK_CREATE, &mut attr)
    };
    Ok(Links {
        files: link(Iterates::Files, files_func)?,
        maps: link(Iterates::Mappings, maps_func)?,
    })
}

fn load_program(insns: &[u64], attach_btf_id: u32) -> io::Result<OwnedFd> {
    let attempt = |log: &mut [u8]| {
        let mut attr = [0u8; 128];
        put32(&mut attr, 0, BPF_PROG_TYPE_TRACING);
        put32(&mut attr, 4, insns.len() as u32);
        put64(&mut attr, 8, insns.as_ptr() as u64);
        put64(&mut attr, 16, LICENSE.as_ptr() as u64);
        if !log.is_empty() {
            put32(&mut attr, 24, 1);
            put32(&mut attr, 28, log.len() as u32);
            put64(&mut attr, 32, log.as_mut_ptr() as u64);
        }
        attr[48..48 + 14].copy_from_slice(b"csi_proxy_uses");
        put32(&mut attr, 68, BPF_TRACE_ITER);
        put32(&mut attr, 108, attach_btf_id);
        bpf(BPF_PROG_LOAD, &mut attr)
    };
    attempt(&mut []).or_else(|e| {
        // Again with the verifier's log, for a message that says why.
        let mut log = vec![0u8; 1 << 16];
        attempt(&mut log).map_err(|_| {
            let text = String::from_utf8_lossy(log.split(|b| *b == 0).next().unwrap_or_default())
                .trim()
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" / ");
            let why = if text.is_empty() {
                String::new()
            } else {
                format!(" (the verifier: {text})")
            };
            io::Error::new(e.kind(), format!("BPF_PROG_LOAD: {e}{why}"))
        })
    })
}

/// One walk: a new iterator from the link, read to its end.
fn walk(link: &OwnedFd) -> io::Result<Vec<u8>> {
    let mut attr = [0u8; 8];
    put32(&mut attr, 0, link.as_raw_fd() as u32);
    let mut iter = File::from(bpf(BPF_ITER_CREATE, &mut attr)?);
    let mut bytes = Vec::new();
    iter.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// bpf(2): `cmd` with `attr` (a `union bpf_attr` prefix; the kernel reads `attr.len()` bytes and
/// treats what it knows beyond them as zero), answering the new descriptor.
fn bpf(cmd: u32, attr: &mut [u8]) -> io::Result<OwnedFd> {
    // SAFETY: bpf(2) reads `attr.len()` bytes at a valid, live buffer; the pointers inside it
    // (instructions, licence, log) point at buffers the caller keeps alive across the call,
    // with the lengths given beside them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr.as_mut_ptr(),
            attr.len() as libc::c_long,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success these three commands answer a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

fn put32(attr: &mut [u8], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(attr: &mut [u8], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_formats::bpf::program::Found;
    use std::os::unix::fs::FileTypeExt;

    /// This test's process stands for the daemon, which the programs leave out: a child holds the
    /// device instead, by a descriptor and by a mapping, and the iterators must find both.
    #[test]
    fn the_iterators_find_a_child_holding_a_block_device_open_and_mapped() {
        let iters = TaskIterators::default();
        if iters.scan(&[]).unwrap().is_none() {
            let why = iters.method();
            // A program the verifier refuses is this code's fault, not the node's.
            assert!(
                !why.contains("refused") || why.contains("not permitted"),
                "{why}"
            );
            eprintln!("SKIPPED: {why}");
            return;
        }
        let Some(node) = std::fs::read_dir("/dev").unwrap().flatten().find(|e| {
            e.file_type().is_ok_and(|t| t.is_block_device())
                && std::fs::File::open(e.path()).is_ok()
        }) else {
            eprintln!("SKIPPED: no readable block device node in /dev");
            return;
        };
        let rdev = std::fs::metadata(node.path()).unwrap().rdev();
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        let kdev = (major << 20) | minor;
        // A file of this test's own, asked about by inode, and the device: the child keeps a
        // descriptor of the device and maps both (Python's mmap keeps a copy of each descriptor, so
        // the mappings are checked as mappings, by their own records).
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut tmp, &[7u8; 4096]).unwrap();
        let ino = tmp.as_file().metadata().unwrap().ino();
        let script = "import mmap, os, sys\n\
            held = os.open(sys.argv[1], os.O_RDONLY)\n\
            maps = []\n\
            for path in sys.argv[1:]:\n\
            \x20   fd = os.open(path, os.O_RDONLY)\n\
            \x20   maps.append(mmap.mmap(fd, 4096, prot=mmap.PROT_READ))\n\
            \x20   os.close(fd)\n\
            print(held, flush=True)\n\
            sys.stdin.read()\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(node.path())
            .arg(tmp.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let held: u32 = line
            .trim()
            .parse()
            .expect("the child prints its descriptor");
        let found = iters.scan(&[ino]).unwrap().unwrap();
        drop(child.stdin.take());
        child.wait().unwrap();
        let pid = child.id();
        let mine: Vec<_> = found.iter().filter(|r| r.pid == pid).collect();
        let has = |f: &dyn Fn(&Found) -> bool| mine.iter().any(|r| f(&r.found));
        assert!(
            has(&|f| *f
                == Found::FdBlock {
                    fd: held,
                    rdev: kdev
                }),
            "the descriptor: {mine:?}"
        );
        assert!(
            has(&|f| matches!(f, Found::MapBlock { rdev, .. } if *rdev == kdev)),
            "the device's mapping: {mine:?}"
        );
        assert!(
            has(&|f| matches!(f, Found::MapFile { ino: i, .. } if *i == ino)),
            "the file's mapping: {mine:?}"
        );
        assert!(
            found.iter().all(|r| r.pid != std::process::id()),
            "the daemon is left out"
        );
    }
}
