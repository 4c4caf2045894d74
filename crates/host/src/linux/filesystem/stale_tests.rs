//! A call kubelet gave up on never undoes work done since, on the Linux host: an unstage's
//! Rmdir stalls inside its removal (an unlinkat or umount that does not return: a hung device
//! or network filesystem) past its caller's deadline, kubelet's retry and the next stage
//! follow, then the stalled removal goes on. It acts on whatever the name holds then, so the
//! later calls on the path wait for it instead.

use super::LinuxFilesystemHost;
use csi_proxy_core::deadline::within;
use csi_proxy_core::filesystem::{FilesystemHost, FilesystemService};
use csi_proxy_core::paths::{Found, Held, LinkProbe, LinkTarget, PathPolicy, PathStyle, Walker};
use csi_proxy_core::{Kind, Result};
use std::io;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The Linux host whose first `remove_all` stalls (says so on `entered`, waits for `go`)
/// before it acts.
struct Stalling {
    host: LinuxFilesystemHost,
    stall: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl Walker for Stalling {
    type Dir = Held;
    fn open_trusted(&self, path: &str, create: bool) -> io::Result<Held> {
        self.host.open_trusted(path, create)
    }
    fn look(&self, dir: &Held, name: &str, at: &str) -> io::Result<Found<Held>> {
        self.host.look(dir, name, at)
    }
    fn make_dir(&self, dir: &Held, name: &str, at: &str) -> io::Result<()> {
        self.host.make_dir(dir, name, at)
    }
}

impl LinkProbe for Stalling {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        self.host.link_target(path)
    }
}

impl FilesystemHost for Stalling {
    fn remove(&self, parent: &Held, name: &str) -> io::Result<()> {
        self.host.remove(parent, name)
    }
    fn remove_all(&self, parent: &Held, name: &str) -> io::Result<()> {
        let stall = self.stall.lock().unwrap().take();
        if let Some((entered, go)) = stall {
            entered.send(()).unwrap();
            go.recv().unwrap();
        }
        self.host.remove_all(parent, name)
    }
    fn remove_contents(&self, dir: &Held) -> io::Result<()> {
        self.host.remove_contents(dir)
    }
    fn create_symlink(&self, parent: &Held, name: &str, target: &str) -> io::Result<()> {
        self.host.create_symlink(parent, name, target)
    }
    fn is_symlink(&self, parent: &Held, name: &str) -> io::Result<bool> {
        self.host.is_symlink(parent, name)
    }
    fn held_entry_path(&self, parent: &Held, name: &str) -> Option<String> {
        self.host.held_entry_path(parent, name)
    }
    fn held_dir_path(&self, dir: &Held) -> Option<String> {
        self.host.held_dir_path(dir)
    }
}

fn soon(ms: u64) -> Option<Instant> {
    Some(Instant::now() + Duration::from_millis(ms))
}

#[test]
fn a_stalled_rmdir_does_not_undo_a_new_stage() {
    let root = tempfile::tempdir().unwrap();
    let kubelet = root.path().to_str().unwrap().to_string();
    let staging = format!("{kubelet}/plugins/driver/01/globalmount");
    let (entered_tx, entered) = channel();
    let (go, go_rx) = channel();
    let host = Stalling {
        host: LinuxFilesystemHost::new(),
        stall: Mutex::new(Some((entered_tx, go_rx))),
    };
    let policy = PathPolicy::new(PathStyle::Posix, &kubelet, &[]).unwrap();
    let fs = FilesystemService::new(Arc::new(host), Arc::new(policy));
    // A stage: the staging directory and what the volume put in it.
    let stage = |fs: &FilesystemService| -> Result<()> {
        fs.mkdir(&staging)?;
        std::fs::write(format!("{staging}/data"), b"staged").unwrap();
        Ok(())
    };
    stage(&fs).unwrap();

    let stale = std::thread::spawn({
        let (fs, staging) = (fs.clone(), staging.clone());
        move || within(soon(20_000), || fs.rmdir(&staging, true))
    });
    entered.recv().unwrap();
    // Kubelet gave up on the unstage and retries it, then stages again.
    let mut staged = false;
    match within(soon(100), || fs.rmdir(&staging, true)) {
        Ok(()) => {
            within(soon(20_000), || stage(&fs)).unwrap();
            staged = true;
        }
        // The retry waited for the stalled call on its path, until its own deadline.
        Err(e) => assert_eq!(e.kind(), Kind::DeadlineExceeded, "{e}"),
    }
    go.send(()).unwrap();
    let _ = stale.join().unwrap();
    if !staged {
        within(soon(20_000), || fs.rmdir(&staging, true)).unwrap();
        within(soon(20_000), || stage(&fs)).unwrap();
    }
    assert!(
        std::path::Path::new(&format!("{staging}/data")).exists(),
        "the stalled unstage undid the stage made since"
    );
}
