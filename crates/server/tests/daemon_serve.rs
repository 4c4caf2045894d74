//! The daemon over real Unix sockets with a host that panics and hangs: a panicking request
//! answers INTERNAL and the daemon keeps serving; metadata calls run on an async worker when one
//! is free for them, and calls hanging there never stall other requests; a stop request ends
//! the daemon and removes the sockets.
#![cfg(unix)]

use csi_proxy_api::filesystem::v1::filesystem_client::FilesystemClient;
use csi_proxy_api::filesystem::v1::{MkdirRequest, PathExistsRequest};
use csi_proxy_core::filesystem::{FilesystemHost, FilesystemService};
use csi_proxy_core::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
use csi_proxy_server::daemon::{self, Listen};
use csi_proxy_server::registry::{self, Hosts, Services};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tonic::Code;

/// PathExists hangs on paths ending in `hang` until released, panics on `panic`, else answers
/// true. The path and the thread it answers on are recorded.
#[derive(Default)]
struct Fs {
    released: Mutex<bool>,
    wake: Condvar,
    threads: Mutex<Vec<(String, String)>>,
}

impl LinkProbe for Fs {
    fn link_target(&self, _: &str) -> io::Result<Option<LinkTarget>> {
        Ok(None)
    }
}

impl FilesystemHost for Fs {
    fn path_exists(&self, path: &str) -> io::Result<bool> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.threads.lock().unwrap().push((path.to_string(), name));
        if path.ends_with("panic") {
            panic!("host bug while checking {path}");
        }
        if path.ends_with("hang") {
            let mut released = self.released.lock().unwrap();
            while !*released {
                released = self.wake.wait(released).unwrap();
            }
        }
        Ok(true)
    }
    fn mkdir_all(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_all(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn remove_contents(&self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn create_symlink(&self, _: &str, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn is_symlink(&self, _: &str) -> io::Result<bool> {
        Ok(false)
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

#[test]
fn hanging_metadata_calls_never_stall_other_requests() {
    // The daemon on its own two-worker runtime, the client on another: if the daemon's workers
    // were all held, the client's timeout below still fires.
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
    let release = Release(host.clone());
    let services = services(host.clone());
    let dir = tempfile::tempdir().unwrap();
    let sockets = dir.path().join("run");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = daemon_rt.spawn(daemon::serve_and_tell(
        registry::endpoints(&services),
        Listen::Unix {
            dir: sockets.clone(),
            gid: None,
        },
        move || {
            let _ = ready_tx.send(());
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    client_rt.block_on(async {
        ready_rx.await.unwrap();
        let connector = csi_proxy_client::Connector::SocketDir(sockets);
        let client = FilesystemClient::new(connector.channel("filesystem", "v1").await.unwrap());

        // Quick calls answer on an async worker, not on the blocking pool.
        client.clone().path_exists(request("a")).await.unwrap();
        let (_, first) = host.threads.lock().unwrap()[0].clone();
        assert!(first.starts_with("daemon-worker-"), "answered on {first:?}");

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
        let on_workers = host
            .threads
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, thread)| path.ends_with("hang") && thread.starts_with("daemon-worker-"))
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
    stop_tx.send(()).unwrap();
    daemon_rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), daemon).await })
        .expect("stops within 5 s")
        .unwrap()
        .unwrap();
}

/// The filesystem group over `host`; the other groups are not exercised here.
fn services(host: Arc<Fs>) -> Services {
    let policy = PathPolicy::new(PathStyle::Posix, "/var/lib/kubelet", &[]).unwrap();
    let hosts = Hosts::all(Arc::new(csi_proxy_core::testing::UnimplementedHost));
    Services::new(FilesystemService::new(host, Arc::new(policy)), hosts, true)
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
