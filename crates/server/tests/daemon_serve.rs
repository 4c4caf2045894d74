//! The daemon over real Unix sockets with a host that panics and hangs: a panicking request
//! answers INTERNAL and the daemon keeps serving; metadata calls run on an async worker when one
//! is free for them, calls hanging there never stall other requests, and a call whose holder of
//! the worker only waits for a core waits for it instead of starting a thread; a stop request
//! ends the daemon and removes the sockets.
#![cfg(unix)]

use csi_proxy_api::filesystem::v1::filesystem_client::FilesystemClient;
use csi_proxy_api::filesystem::v1::{MkdirRequest, PathExistsRequest};
use csi_proxy_client::Connector;
use csi_proxy_core::filesystem::{FilesystemHost, FilesystemService};
use csi_proxy_core::paths::{Found, Held, PathPolicy, PathStyle, Walker};
use csi_proxy_server::daemon::{self, Listen};
use csi_proxy_server::registry::{self, Hosts, Services};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tonic::Code;

/// PathExists hangs on paths ending in `hang` until released, panics on `panic`, keeps its
/// thread busy for 300 ms on `spin` (as a call whose thread waits for a core), else answers
/// true. The path and the thread it answers on are recorded.
#[derive(Default)]
struct Fs {
    released: Mutex<bool>,
    wake: Condvar,
    threads: Mutex<Vec<(String, String)>>,
}

impl Walker for Fs {
    type Dir = Held;
    fn open_trusted(&self, _: &str, _: bool) -> io::Result<Held> {
        Ok(Box::new(()))
    }
    /// PathExists looks at the final entry here.
    fn look(&self, _: &Held, _: &str, path: &str) -> io::Result<Found<Held>> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.threads.lock().unwrap().push((path.to_string(), name));
        if path.ends_with("panic") {
            panic!("host bug while checking {path}");
        }
        if path.ends_with("spin") {
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                std::hint::spin_loop();
            }
        }
        if path.ends_with("hang") {
            let mut released = self.released.lock().unwrap();
            while !*released {
                released = self.wake.wait(released).unwrap();
            }
        }
        Ok(Found::Dir(Box::new(())))
    }
    fn make_dir(&self, _: &Held, _: &str, _: &str) -> io::Result<()> {
        Ok(())
    }
}

impl FilesystemHost for Fs {
    fn remove(&self, _: &Held, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_all(&self, _: &Held, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_contents(&self, _: &Held) -> io::Result<()> {
        Ok(())
    }
    fn create_symlink(&self, _: &Held, _: &str, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn is_symlink(&self, _: &Held, _: &str) -> io::Result<bool> {
        Ok(false)
    }
    fn held_entry_path(&self, _: &Held, _: &str) -> Option<String> {
        None
    }
    fn held_dir_path(&self, _: &Held) -> Option<String> {
        None
    }
}

fn request(path: &str) -> PathExistsRequest {
    PathExistsRequest {
        path: format!("/var/lib/kubelet/{path}"),
    }
}

/// Lets every hanging call finish when dropped, also when the test fails.
struct Release(Arc<Fs>);

impl Drop for Release {
    fn drop(&mut self) {
        *self.0.released.lock().unwrap() = true;
        self.0.wake.notify_all();
    }
}

/// Runs `test` against a daemon on its own two-worker runtime (the client on another: if the
/// daemon's workers were all held, the client's timeouts still fire), then stops the daemon.
fn on_two_workers<F, Fut>(test: F)
where
    F: FnOnce(FilesystemClient<tonic::transport::Channel>, Arc<Fs>, Connector) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // The inline slots are counted per process: two such daemons at once would share them.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // tokio gives workers and blocking-pool threads the same name; the two workers are the
    // first threads the runtime starts (at build), so name threads by the order they start.
    let started = AtomicUsize::new(0);
    let daemon_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name_fn(move || match started.fetch_add(1, Ordering::Relaxed) {
            n @ 0..2 => format!("daemon-worker-{n}"),
            n => format!("daemon-blocking-{n}"),
        })
        .enable_all()
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let host = Arc::new(Fs::default());
    let services = services(host.clone());
    let dir = tempfile::tempdir().unwrap();
    let sockets = dir.path().join("run");
    let (serving, ready_rx, stop_tx) =
        daemon::serve_in_dir(registry::endpoints(&services), sockets.clone());
    let daemon = daemon_rt.spawn(serving);
    client_rt.block_on(async {
        ready_rx.await.unwrap();
        let connector = Connector::SocketDir(sockets);
        let client = FilesystemClient::new(connector.channel("filesystem", "v1").await.unwrap());
        test(client, host, connector).await;
    });
    stop_tx.send(()).unwrap();
    daemon_rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), daemon).await })
        .expect("stops within 5 s")
        .unwrap()
        .unwrap();
}

/// The threads the calls of `suffix` were answered on.
fn threads_of(host: &Fs, suffix: &str) -> Vec<String> {
    host.threads
        .lock()
        .unwrap()
        .iter()
        .filter(|(path, _)| path.ends_with(suffix))
        .map(|(_, thread)| thread.clone())
        .collect()
}

#[test]
fn hanging_metadata_calls_never_stall_other_requests() {
    on_two_workers(|client, host, _| async move {
        let release = Release(host.clone());
        // Quick calls answer on an async worker, not on the blocking pool.
        client.clone().path_exists(request("a")).await.unwrap();
        let first = threads_of(&host, "a");
        assert!(
            first[0].starts_with("daemon-worker-"),
            "answered on {first:?}"
        );

        // A panic there is still INTERNAL for that request only.
        let e = client
            .clone()
            .path_exists(request("panic"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Internal);
        assert!(e.message().contains("host bug"), "{}", e.message());

        // More hanging calls than workers.
        let hanging: Vec<_> = (0..4)
            .map(|_| {
                let mut c = client.clone();
                tokio::spawn(async move { c.path_exists(request("hang")).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let others = async {
            client.clone().path_exists(request("b")).await.unwrap();
            client
                .clone()
                .mkdir(MkdirRequest {
                    path: "/var/lib/kubelet/c".into(),
                })
                .await
                .unwrap();
        };
        tokio::time::timeout(Duration::from_secs(10), others)
            .await
            .expect("other requests are answered while metadata calls hang");
        // All workers but one may hold a metadata call: here one; the rest went to the pool.
        let on_workers = threads_of(&host, "hang")
            .iter()
            .filter(|t| t.starts_with("daemon-worker-"))
            .count();
        assert_eq!(
            on_workers, 1,
            "hanging calls held {on_workers} of 2 workers"
        );

        drop(release);
        for h in hanging {
            assert!(h.await.unwrap().unwrap().into_inner().exists);
        }
    });
}

#[test]
fn a_call_waits_for_a_holder_that_is_only_busy() {
    // The one inline slot of a two-worker daemon is held for 300 ms by a call whose thread is
    // runnable throughout, as when other processes take the cores. A metadata call arriving
    // meanwhile waits for the slot instead of concluding, after 10 ms without a slot given back,
    // that the holder hangs and going to the blocking pool (where tokio starts a thread for it).
    // Where thread states cannot be read, it still goes to the pool.
    on_two_workers(|client, host, connector| async move {
        let busy = {
            let mut c = client.clone();
            tokio::spawn(async move { c.path_exists(request("spin")).await })
        };
        // Until the busy call holds the slot.
        while threads_of(&host, "spin").is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // On a connection of its own: the busy call's worker serves nothing else meanwhile.
        let mut other = FilesystemClient::new(connector.channel("filesystem", "v1").await.unwrap());
        other.path_exists(request("waiting")).await.unwrap();
        busy.await.unwrap().unwrap();
        let spin = threads_of(&host, "spin");
        assert!(
            spin[0].starts_with("daemon-worker-"),
            "busy call on {spin:?}"
        );
        let waiting = threads_of(&host, "waiting");
        let expected = if cfg!(target_os = "linux") {
            "daemon-worker-"
        } else {
            "daemon-blocking-"
        };
        assert!(
            waiting[0].starts_with(expected),
            "the waiting call ran on {waiting:?}"
        );
    });
}

/// The filesystem group over `host`; the other groups are not exercised here.
fn services(host: Arc<Fs>) -> Services {
    let policy = PathPolicy::new(PathStyle::Posix, "/var/lib/kubelet", &[]).unwrap();
    let hosts = Hosts::all(Arc::new(HeldDisk));
    Services::new(FilesystemService::new(host, Arc::new(policy)), hosts, true)
}

/// A host whose ListVolumesOnDisk of disk 1 holds the call (and so the disk's lock) while
/// [`DISK_HELD`] says so, as a long mkfs or a device that stopped answering does; disk 2 answers
/// at once. Every other RPC of these groups answers UNIMPLEMENTED.
struct HeldDisk;

/// Whether disk 1 is held, and its waiters' wake-up.
static DISK_HELD: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

impl csi_proxy_core::testing::PartialVolumeHost for HeldDisk {
    fn list_volumes_on_disk(
        &self,
        disk: u32,
        _: Option<std::num::NonZeroU32>,
    ) -> csi_proxy_core::Result<Vec<String>> {
        let mut held = DISK_HELD.0.lock().unwrap();
        while disk == 1 && *held {
            held = DISK_HELD.1.wait(held).unwrap();
        }
        Ok(vec![])
    }
    fn volume_disk_number(&self, _: &str) -> csi_proxy_core::Result<u32> {
        Ok(0)
    }
    fn disk_usage(&self, _: u32) -> csi_proxy_core::Result<csi_proxy_core::disk::DiskUsage> {
        Ok(Default::default())
    }
}
impl csi_proxy_core::testing::PartialDiskHost for HeldDisk {
    fn disk_usage(&self, _: u32) -> csi_proxy_core::Result<csi_proxy_core::disk::DiskUsage> {
        Ok(Default::default())
    }
}
impl csi_proxy_core::testing::PartialSmbHost for HeldDisk {}
impl csi_proxy_core::testing::PartialIscsiHost for HeldDisk {}
impl csi_proxy_core::testing::PartialSystemHost for HeldDisk {}

/// Lets disk 1 go when dropped, also when the test fails.
struct LetGo;

impl Drop for LetGo {
    fn drop(&mut self) {
        *DISK_HELD.0.lock().unwrap() = false;
        DISK_HELD.1.notify_all();
    }
}

/// With one disk's lock held and 600 calls on that disk waiting without a deadline, another disk's
/// call and another group's PathExists and Mkdir, from another client, still answer. The waiters
/// past the caps wait without a thread or are refused at once; before the caps, each took a
/// blocking-pool thread and the 512 of them left none for the other calls.
#[test]
fn six_hundred_waiters_on_a_held_disk_leave_other_disks_and_groups_served() {
    use csi_proxy_api::volume::v1::ListVolumesOnDiskRequest;
    use csi_proxy_api::volume::v1::volume_client::VolumeClient;
    on_two_workers(|fs, _, connector| async move {
        *DISK_HELD.0.lock().unwrap() = true;
        let _let_go = LetGo;
        let on = |disk| ListVolumesOnDiskRequest {
            disk_number: disk,
            partition_number: 0,
        };
        // Ten connections: one carries at most 64 calls at once (its streams' limit).
        let mut clients = Vec::new();
        for _ in 0..10 {
            clients.push(VolumeClient::new(
                connector.channel("volume", "v1").await.unwrap(),
            ));
        }
        let waiters: Vec<_> = (0..600)
            .map(|i| {
                let mut c = clients[i % 10].clone();
                tokio::spawn(async move { c.list_volumes_on_disk(on(1)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut other = VolumeClient::new(connector.channel("volume", "v1").await.unwrap());
        let t = std::time::Instant::now();
        let others = async {
            other.list_volumes_on_disk(on(2)).await.unwrap();
            let disk = t.elapsed();
            fs.clone().path_exists(request("b")).await.unwrap();
            let exists = t.elapsed() - disk;
            fs.clone()
                .mkdir(MkdirRequest {
                    path: "/var/lib/kubelet/c".into(),
                })
                .await
                .unwrap();
            (disk, exists, t.elapsed() - disk - exists)
        };
        // The goal is an answer within a second; 5 s keeps a loaded CI machine from failing it, and
        // the figures are printed.
        let (disk, exists, mkdir) = tokio::time::timeout(Duration::from_secs(5), others)
            .await
            .expect("other disks and groups are served while 600 calls wait on a held disk");
        println!("with 600 waiters: disk 2 {disk:?}, PathExists {exists:?}, Mkdir {mkdir:?}");
        drop(_let_go);
        let mut refused = 0;
        for w in waiters {
            match w.await.unwrap() {
                Ok(_) => {}
                Err(e) if e.code() == Code::ResourceExhausted => {
                    if refused == 0 {
                        println!("the first refusal: {}", e.message());
                    }
                    refused += 1;
                }
                Err(e) => panic!("a waiter answered {e:?}"),
            }
        }
        // ListVolumesOnDisk is disk I/O: past its cap per disk the calls wait for a place
        // without a thread (crate admission), so none needs refusing by the lock's waiter cap;
        // either way each ends with an answer.
        println!("{refused} of 600 waiters refused past the caps");
    });
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let sockets = dir.path().join("run");
    let listen = Listen::Unix {
        dir: sockets.clone(),
        gid: None,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(daemon::serve(
        registry::endpoints(&services(Arc::default())),
        listen,
        async move {
            let _ = stop_rx.await;
        },
    ));
    let socket = sockets.join("csi-proxy-filesystem-v1.sock");
    for _ in 0..200 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ch = csi_proxy_client::Connector::SocketDir(sockets.clone())
        .channel("filesystem", "v1")
        .await
        .unwrap();
    let mut c = FilesystemClient::new(ch);
    for _ in 0..3 {
        let e = c.path_exists(request("panic")).await.unwrap_err();
        assert_eq!(e.code(), Code::Internal);
        assert!(e.message().contains("host bug"), "{}", e.message());
    }
    c.mkdir(MkdirRequest {
        path: "/var/lib/kubelet/y".into(),
    })
    .await
    .expect("the daemon keeps serving after panics");

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), daemon)
        .await
        .expect("stops within 5 s")
        .unwrap()
        .unwrap();
    assert_eq!(
        std::fs::read_dir(&sockets).unwrap().count(),
        0,
        "sockets removed"
    );
}
