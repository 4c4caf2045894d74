//! The daemon over real Unix sockets with a host that panics: the panicking request answers
//! INTERNAL, the daemon keeps serving, and a stop request ends it and removes the sockets.
#![cfg(unix)]

use csi_proxy_api::filesystem::v1::filesystem_client::FilesystemClient;
use csi_proxy_api::filesystem::v1::{MkdirRequest, PathExistsRequest};
use csi_proxy_core::filesystem::{FilesystemHost, FilesystemService};
use csi_proxy_core::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
use csi_proxy_server::daemon::{self, Listen};
use csi_proxy_server::registry::{self, Services};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

/// PathExists panics; Mkdir succeeds.
struct PanickyFs;

impl LinkProbe for PanickyFs {
    fn link_target(&self, _: &str) -> io::Result<Option<LinkTarget>> {
        Ok(None)
    }
}

impl FilesystemHost for PanickyFs {
    fn path_exists(&self, path: &str) -> io::Result<bool> {
        panic!("host bug while checking {path}")
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

fn services() -> Services {
    let policy = PathPolicy::new(PathStyle::Posix, "/var/lib/kubelet", &[]).unwrap();
    let fs = FilesystemService::new(Arc::new(PanickyFs), Arc::new(policy));
    Services::with_pending_groups(fs, true)
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
        registry::endpoints(&services()),
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
        let e = c
            .path_exists(PathExistsRequest {
                path: "/var/lib/kubelet/x".into(),
            })
            .await
            .unwrap_err();
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
