//! Confinement while a client races it: a node plugin owns its plugin directory below the kubelet
//! path and can swap any directory there for a link to anywhere, at any instant. One thread
//! exchanges a real directory `a` with a link to a directory outside the kubelet path
//! (`renameat2(RENAME_EXCHANGE)`, as fast as it can) while every path-taking filesystem RPC is
//! called on paths below `a/` over and over, through the real daemon's sockets. Nothing outside the
//! kubelet path may be created, removed, emptied or revealed.
//!
//! With the old resolution (the path checked as a string, then given to the OS again) these
//! calls acted outside in a few percent of the calls; each RPC here makes hundreds of calls.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, run};
use csi_proxy_client::filesystem::FilesystemClient;
use rustix::fs::{CWD, RenameFlags, renameat_with};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long each RPC is raced.
const RACE: Duration = Duration::from_secs(2);

/// A thread exchanging `dir/a` (a real directory) and `dir/a.swap` (a link to `outside`).
struct Swapper {
    stop: Arc<AtomicBool>,
    /// Asks the swapper to leave the real directory at `a` and wait (`paused` says it does).
    pause: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(dir: &Path, outside: &Path) -> Swapper {
        let a = dir.join("a");
        let swap = dir.join("a.swap");
        std::fs::create_dir_all(&a).unwrap();
        std::os::unix::fs::symlink(outside, &swap).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), swaps.clone());
        let (p, pd) = (pause.clone(), paused.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if p.load(Ordering::Acquire) {
                    if std::fs::symlink_metadata(&a).unwrap().is_symlink() {
                        renameat_with(CWD, &a, CWD, &swap, RenameFlags::EXCHANGE).unwrap();
                    }
                    pd.store(true, Ordering::Release);
                    while p.load(Ordering::Acquire) && !s.load(Ordering::Relaxed) {
                        std::thread::yield_now();
                    }
                    pd.store(false, Ordering::Release);
                    continue;
                }
                renameat_with(CWD, &a, CWD, &swap, RenameFlags::EXCHANGE).unwrap();
                n.fetch_add(1, Ordering::Relaxed);
            }
            // Leave the real directory at `a` and the link at `a.swap`.
            if std::fs::symlink_metadata(&a).unwrap().is_symlink() {
                renameat_with(CWD, &a, CWD, &swap, RenameFlags::EXCHANGE).unwrap();
            }
        });
        Swapper {
            stop,
            pause,
            paused,
            swaps,
            thread: Some(thread),
        }
    }

    fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Relaxed)
    }

    /// Runs `f` with the real directory at `a` and no swapping (the test's own clean-up).
    fn paused<T>(&self, f: impl FnOnce() -> T) -> T {
        self.pause.store(true, Ordering::Release);
        while !self.paused.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let out = f();
        self.pause.store(false, Ordering::Release);
        out
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The daemon, the racing swapper and the directory outside the kubelet path.
struct Race {
    // Dropped first: the swapper stops before the daemon's temp dir goes.
    swapper: Swapper,
    fs: FilesystemClient,
    d: Daemon,
    outside: PathBuf,
}

impl Race {
    async fn start() -> Race {
        Race::start_with(|_, _| {}).await
    }

    /// As [`Race::start`], with `prepare(a, outside)` run before the swapping starts.
    async fn start_with(prepare: impl FnOnce(&Path, &Path)) -> Race {
        let d = Daemon::start(&[]);
        let outside = d.dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let plugin = d.kubelet.join("plugins/racer");
        std::fs::create_dir_all(plugin.join("a")).unwrap();
        prepare(&plugin.join("a"), &outside);
        let swapper = Swapper::start(&plugin, &outside);
        let fs = FilesystemClient::connect(&d.connector()).await.unwrap();
        Race {
            swapper,
            fs,
            d,
            outside,
        }
    }

    /// A path below the raced directory.
    fn a(&self, rel: &str) -> String {
        self.d.k(&format!("plugins/racer/a/{rel}"))
    }

    /// Runs `call` for [`RACE`], `check` after each call; returns (calls, escapes).
    async fn race<F, Fut>(&mut self, what: &str, mut call: F) -> (u64, u64)
    where
        F: FnMut(FilesystemClient, u64) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        let swaps0 = self.swapper.swaps();
        let (mut calls, mut escapes) = (0u64, 0u64);
        while (start.elapsed() < RACE || calls < 200) && start.elapsed() < RACE * 30 {
            if call(self.fs.clone(), calls).await {
                escapes += 1;
            }
            calls += 1;
        }
        println!(
            "{what}: {calls} calls, {} swaps meanwhile, {escapes} acted outside the kubelet path",
            self.swapper.swaps() - swaps0
        );
        (calls, escapes)
    }
}

fn skip_unless_root() -> bool {
    if !common::is_root() {
        println!("SKIPPED: the daemon must run as root to act on any directory");
        return true;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_never_creates_outside_while_a_component_is_swapped() {
    if skip_unless_root() {
        return;
    }
    let mut r = Race::start().await;
    let outside = r.outside.clone();
    let base = r.a("");
    let (calls, escapes) = r
        .race("Mkdir", |mut fs, i| {
            let path = format!("{base}m{i}/x");
            let outside = outside.clone();
            async move {
                let _ = fs.mkdir(&path).await;
                outside.join(format!("m{i}")).exists()
            }
        })
        .await;
    assert!(calls > 100, "too few calls to mean anything: {calls}");
    assert_eq!(
        escapes, 0,
        "Mkdir created directories outside the kubelet path"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_symlink_never_links_outside_while_a_component_is_swapped() {
    if skip_unless_root() {
        return;
    }
    let mut r = Race::start().await;
    let outside = r.outside.clone();
    let base = r.a("");
    let source = r.d.k("plugins/racer/source");
    let (calls, escapes) = r
        .race("CreateSymlink", |mut fs, i| {
            let link = format!("{base}l{i}");
            let (outside, source) = (outside.clone(), source.clone());
            async move {
                let _ = fs.create_symlink(&source, &link).await;
                std::fs::symlink_metadata(outside.join(format!("l{i}"))).is_ok()
            }
        })
        .await;
    assert!(calls > 100, "too few calls to mean anything: {calls}");
    assert_eq!(
        escapes, 0,
        "CreateSymlink made links outside the kubelet path"
    );
}

/// Fills `dir/victim` outside with a file, so a removal or emptying there shows.
fn plant_victim(outside: &Path, name: &str) -> PathBuf {
    let victim = outside.join(name);
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), b"tenant data").unwrap();
    victim.join("keep")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_never_removes_outside_while_a_component_is_swapped() {
    if skip_unless_root() {
        return;
    }
    let mut r = Race::start().await;
    let outside = r.outside.clone();
    let base = r.a("");
    for force in [true, false] {
        let keep = plant_victim(&outside, "victim");
        let empty = outside.join("empty");
        let (calls, escapes) = r
            .race(&format!("Rmdir(force={force})"), |mut fs, _| {
                let (keep, empty) = (keep.clone(), empty.clone());
                let path = format!("{base}{}", if force { "victim" } else { "empty" });
                async move {
                    std::fs::create_dir_all(&empty).unwrap();
                    let _ = fs.rmdir(&path, force).await;
                    let gone = if force {
                        !keep.exists()
                    } else {
                        !empty.exists()
                    };
                    if gone {
                        // Put it back so that every further escape is counted too.
                        plant_victim(keep.parent().unwrap().parent().unwrap(), "victim");
                    }
                    gone
                }
            })
            .await;
        assert!(calls > 100, "too few calls to mean anything: {calls}");
        assert_eq!(
            escapes, 0,
            "Rmdir removed a directory outside the kubelet path"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_contents_never_empties_outside_while_a_component_is_swapped() {
    if skip_unless_root() {
        return;
    }
    let mut r = Race::start().await;
    let outside = r.outside.clone();
    let base = r.a("");
    let keep = plant_victim(&outside, "victim");
    // RmdirContents exists only in filesystem v2alpha1.
    r.fs = FilesystemClient::connect_version(&r.d.connector(), "v2alpha1")
        .await
        .unwrap();
    let (calls, escapes) = r
        .race("RmdirContents", |mut fs, _| {
            let keep = keep.clone();
            let path = format!("{base}victim");
            let outside = outside.clone();
            async move {
                if let Err(e) = fs.rmdir_contents(&path).await {
                    assert_ne!(e.code(), tonic::Code::Unimplemented, "{e}");
                }
                let gone = !keep.exists();
                if gone {
                    plant_victim(&outside, "victim");
                }
                gone
            }
        })
        .await;
    assert!(calls > 100, "too few calls to mean anything: {calls}");
    assert_eq!(
        escapes, 0,
        "RmdirContents emptied a directory outside the kubelet path"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_exists_and_is_symlink_never_reveal_outside_while_a_component_is_swapped() {
    if skip_unless_root() {
        return;
    }
    let mut r = Race::start().await;
    // Only the outside directory has these; inside `a` they do not exist.
    std::fs::write(r.outside.join("secret"), b"x").unwrap();
    std::os::unix::fs::symlink("/", r.outside.join("slink")).unwrap();
    let (secret, slink) = (r.a("secret"), r.a("slink"));
    let (calls, escapes) = r
        .race("PathExists", |mut fs, _| {
            let secret = secret.clone();
            async move { fs.path_exists(&secret).await.unwrap_or(false) }
        })
        .await;
    assert!(calls > 100, "too few calls to mean anything: {calls}");
    assert_eq!(
        escapes, 0,
        "PathExists answered about a path outside the kubelet path"
    );
    let (calls, escapes) = r
        .race("IsSymlink", |mut fs, _| {
            let slink = slink.clone();
            // Inside, the path does not exist: any answer but an error is about the outside.
            async move { fs.is_symlink(&slink).await.is_ok() }
        })
        .await;
    assert!(calls > 100, "too few calls to mean anything: {calls}");
    assert_eq!(
        escapes, 0,
        "IsSymlink answered about a path outside the kubelet path"
    );
}

/// Volume RPCs are slow (a mount, a probe of the disk): each race runs for [`RACE`] and at least
/// 40 calls, at most 60 s, so a loaded machine still makes enough calls to mean something.
fn volume_race_goes_on(start: Instant, calls: u64) -> bool {
    let t = start.elapsed();
    (t < RACE || calls < 40) && t < Duration::from_secs(60)
}

/// A race over a formatted volume on a loop disk: `a/mnt`, `a/held` and `a/probe` exist inside
/// and outside; with `mounted_outside`, the volume is also mounted on `outside/held` and
/// `outside/probe`, where a swapped link leads (MountVolume would refuse a volume the host uses
/// outside the roots, so its race has none).
struct VolumeRace {
    r: Race,
    vc: csi_proxy_api::volume::v1::volume_client::VolumeClient<tonic::transport::Channel>,
    id: String,
    dev: String,
    _disk: common::LoopDisk,
}

impl VolumeRace {
    async fn start(mounted_outside: bool) -> Option<VolumeRace> {
        use common::{LoopDisk, format_ok, partition_one, v1_clients};
        if skip_unless_root() {
            return None;
        }
        let r = Race::start_with(|a, outside| {
            for dir in ["mnt", "held", "probe"] {
                std::fs::create_dir_all(a.join(dir)).unwrap();
                std::fs::create_dir_all(outside.join(dir)).unwrap();
            }
        })
        .await;
        let disk = LoopDisk::or_skip(r.d.dir.path(), "race", 64)?;
        let (mut dc, mut vc) = v1_clients(&r.d).await;
        let id = partition_one(&mut dc, &mut vc, disk.disk_number()).await;
        format_ok(&mut vc, &id).await;
        let dev = disk.partition(1).display().to_string();
        if mounted_outside {
            for dir in ["held", "probe"] {
                run("mount", &[&dev, r.outside.join(dir).to_str().unwrap()]);
            }
        }
        Some(VolumeRace {
            r,
            vc,
            id,
            dev,
            _disk: disk,
        })
    }
}

impl Drop for VolumeRace {
    fn drop(&mut self) {
        for dir in ["mnt", "held", "probe"] {
            let _ = std::process::Command::new("umount")
                .arg(self.r.outside.join(dir))
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_volume_never_mounts_outside_while_a_component_is_swapped() {
    use common::is_mounted;
    use csi_proxy_api::volume::v1 as vol;
    let Some(mut v) = VolumeRace::start(false).await else {
        return;
    };
    let outside = v.r.outside.clone();
    let real_a = v.r.d.kubelet.join("plugins/racer/a");
    let target = v.r.a("mnt");
    let start = Instant::now();
    let (mut calls, mut escapes) = (0u64, 0u64);
    while volume_race_goes_on(start, calls) {
        let answer =
            v.vc.mount_volume(vol::MountVolumeRequest {
                volume_id: v.id.clone(),
                target_path: target.clone(),
            })
            .await;
        calls += 1;
        v.r.swapper.paused(|| {
            if is_mounted(&outside.join("mnt")) {
                escapes += 1;
                run("umount", &[outside.join("mnt").to_str().unwrap()]);
            }
            if answer.is_ok() && is_mounted(&real_a.join("mnt")) {
                run("umount", &[real_a.join("mnt").to_str().unwrap()]);
            }
        });
    }
    println!("MountVolume: {calls} calls, {escapes} mounted outside the kubelet path");
    assert!(calls > 20, "too few calls to mean anything: {calls}");
    assert_eq!(escapes, 0, "MountVolume mounted outside the kubelet path");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmount_volume_never_unmounts_outside_while_a_component_is_swapped() {
    use common::is_mounted;
    use csi_proxy_api::volume::v1 as vol;
    let Some(mut v) = VolumeRace::start(true).await else {
        return;
    };
    let held = v.r.outside.join("held");
    // Nothing is mounted on `a/held` inside.
    let target = v.r.a("held");
    let start = Instant::now();
    let (mut calls, mut escapes) = (0u64, 0u64);
    while volume_race_goes_on(start, calls) {
        let _ =
            v.vc.unmount_volume(vol::UnmountVolumeRequest {
                volume_id: v.id.clone(),
                target_path: target.clone(),
            })
            .await;
        calls += 1;
        if !is_mounted(&held) {
            escapes += 1;
            run("mount", &[&v.dev, held.to_str().unwrap()]);
        }
    }
    println!("UnmountVolume: {calls} calls, {escapes} unmounted outside the kubelet path");
    assert!(calls > 20, "too few calls to mean anything: {calls}");
    assert_eq!(
        escapes, 0,
        "UnmountVolume unmounted outside the kubelet path"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_volume_id_never_reveals_outside_while_a_component_is_swapped() {
    use csi_proxy_api::volume::v1 as vol;
    let Some(mut v) = VolumeRace::start(true).await else {
        return;
    };
    // Not a mount point inside: any ID answered is about the mount outside.
    let target = v.r.a("probe");
    let start = Instant::now();
    let (mut calls, mut escapes) = (0u64, 0u64);
    while volume_race_goes_on(start, calls) {
        let answer =
            v.vc.get_volume_id_from_target_path(vol::GetVolumeIdFromTargetPathRequest {
                target_path: target.clone(),
            })
            .await;
        calls += 1;
        escapes += u64::from(answer.is_ok());
    }
    println!("GetVolumeIDFromTargetPath: {calls} calls, {escapes} revealed a mount outside");
    assert!(calls > 20, "too few calls to mean anything: {calls}");
    assert_eq!(
        escapes, 0,
        "GetVolumeIDFromTargetPath revealed a mount outside"
    );
}
