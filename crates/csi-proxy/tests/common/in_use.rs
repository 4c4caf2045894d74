//! What the in-use tests share: mounts, loop mappings and processes standing for the host's
//! own users of a disk, undone when dropped, and the refusal they expect.
#![cfg(target_os = "linux")]

use super::LoopDisk;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use tonic::Code;

/// A mount made by the test (standing for the host's own), unmounted when dropped.
pub struct HostMount(pub PathBuf);

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A loop device the test attached over a device, detached when dropped.
pub struct Mapping(pub String);

impl Drop for Mapping {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// A `sleep` holding `dev` open as its standard input, killed when dropped.
pub struct Holder(pub Child);

impl Holder {
    pub fn hold(dev: &Path) -> Holder {
        Holder(
            Command::new("sleep")
                .arg("600")
                .stdin(std::fs::File::open(dev).unwrap())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Asserts that `r` is FAILED_PRECONDITION whose message contains every one of `names`.
pub fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, tonic::Status>, names: &[&str]) {
    let s = r.expect_err(what);
    assert_eq!(s.code(), Code::FailedPrecondition, "{what}: {s:?}");
    for n in names {
        assert!(
            s.message().contains(n),
            "{what}: {n:?} not in {}",
            s.message()
        );
    }
}

/// Raw data with no signature (what a raw block volume holds) at a disk's first and last MiB.
pub fn raw_data(l: &LoopDisk) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/dev/{}", l.name()))
        .unwrap();
    let block: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    f.write_all(&block).unwrap();
    f.seek(SeekFrom::End(-(1 << 20))).unwrap();
    f.write_all(&block).unwrap();
    f.sync_all().unwrap();
}
