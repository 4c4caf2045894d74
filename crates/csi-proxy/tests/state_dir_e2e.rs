//! The daemon's state lives in `--state-dir`, never in the socket directory every client
//! container mounts: links a client plants in the socket directory are never followed, no
//! state or secret file appears there, an unsafe state directory stops the start-up, and a
//! client reaches the sockets through a read-only mount of their directory.
#![cfg(target_os = "linux")]

mod common;

use common::Daemon;
use csi_proxy_api::iscsi::v1alpha2 as iscsi2;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Command, Stdio};

const MUTUAL_SECRET: &str = "State-Dir-Mutual-S3cret";

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Every entry below `dir` that is not a socket, relative to it.
fn non_sockets(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::FileTypeExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            }
            if !t.is_socket() {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn links_planted_in_the_socket_directory_are_never_followed() {
    let d = Daemon::start(&[]);
    let outside = d.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("victim");
    std::fs::write(&victim, "untouched\n").unwrap();
    // What a client container with the socket directory mounted read-write could plant where
    // earlier versions kept their state.
    let planted = d.sockets.join("iscsi");
    std::fs::create_dir_all(&planted).unwrap();
    for name in [".portals.tmp", ".mutual-chap.tmp", "portals", "mutual-chap"] {
        symlink(&victim, planted.join(name)).unwrap();
    }
    let before = non_sockets(&d.sockets);

    let ch = d.connector().channel("iscsi", "v1alpha2").await.unwrap();
    let mut c = iscsi2::iscsi_client::IscsiClient::new(ch);
    c.add_target_portal(iscsi2::AddTargetPortalRequest {
        target_portal: Some(iscsi2::TargetPortal {
            target_address: "10.0.0.1".into(),
            target_port: 3260,
        }),
    })
    .await
    .unwrap();
    c.set_mutual_chap_secret(iscsi2::SetMutualChapSecretRequest {
        mutual_chap_secret: MUTUAL_SECRET.into(),
    })
    .await
    .unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    let listed = c
        .list_target_portals(iscsi2::ListTargetPortalsRequest {})
        .await
        .unwrap()
        .into_inner()
        .target_portals;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        non_sockets(&d.sockets),
        before,
        "the daemon wrote nothing but sockets into the socket directory"
    );
    // The state is where no client reaches it, the secret readable by root alone.
    assert_eq!(mode(&d.state), 0o700);
    assert_eq!(mode(&d.state.join("iscsi/mutual-chap")), 0o600);
    assert_eq!(
        std::fs::read_to_string(d.state.join("iscsi/mutual-chap")).unwrap(),
        MUTUAL_SECRET
    );
    assert!(
        std::fs::read_to_string(d.state.join("iscsi/portals"))
            .unwrap()
            .contains("10.0.0.1 3260")
    );
}

/// Runs the daemon with `--state-dir=state` (and the harness's other flags) and returns its
/// stderr once it exited; a daemon that starts anyway is killed and the test fails.
fn refused_start(dir: &Path, state: &Path) -> String {
    let kubelet = dir.join("kubelet");
    std::fs::create_dir_all(&kubelet).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("--kubelet-path={}", kubelet.display()))
        .arg(format!("--socket-dir={}", dir.join("run").display()))
        .arg(format!("--state-dir={}", state.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "it must not start: {stderr}");
    assert!(
        !dir.join("run/csi-proxy-disk-v1.sock").exists(),
        "no socket is served"
    );
    stderr
}

#[test]
fn an_unsafe_state_directory_stops_the_start_up() {
    if !common::is_root() {
        eprintln!("SKIPPED: ownership checks need root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = refused_start(dir, &open);
    assert!(e.contains("--state-dir") && e.contains("chmod 0700"), "{e}");

    let real = dir.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.join("link");
    symlink(&real, &link).unwrap();
    let e = refused_start(dir, &link);
    assert!(e.contains("symbolic link"), "{e}");

    let foreign = dir.join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700)).unwrap();
    Command::new("chown")
        .args(["4242", &foreign.display().to_string()])
        .status()
        .unwrap();
    let e = refused_start(dir, &foreign);
    assert!(e.contains("owned by uid 4242"), "{e}");

    // Refused before anything is made: neither the directory nor a parent of it.
    for (inside, first_made) in [
        (dir.join("run/state"), dir.join("run")),
        (dir.join("kubelet/a/state"), dir.join("kubelet/a")),
        (dir.join("new/../kubelet/b/state"), dir.join("new")),
    ] {
        let e = refused_start(dir, &inside);
        assert!(e.contains("which clients reach"), "{e}");
        assert!(!first_made.exists(), "{} was created", first_made.display());
    }
}

/// Deploy manifests mount the socket directory into client containers read-only: a client
/// connects to a Unix socket on a read-only mount (connect(2) needs write permission on the
/// socket, which a read-only mount does not take away), and cannot create or change anything
/// in the directory.
#[tokio::test]
async fn clients_reach_the_sockets_through_a_read_only_mount() {
    if !common::is_root() {
        eprintln!("SKIPPED: bind mounts need root");
        return;
    }
    let d = Daemon::start(&[]);
    let view = d.dir.path().join("client-view");
    std::fs::create_dir_all(&view).unwrap();
    let run = |args: &[&str]| {
        let ok = Command::new("mount").args(args).status().unwrap().success();
        assert!(ok, "mount {args:?}");
    };
    let (src, dst) = (d.sockets.display().to_string(), view.display().to_string());
    run(&["--bind", &src, &dst]);
    run(&["-o", "remount,bind,ro", &dst]);

    let e = std::fs::write(view.join("planted"), "x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(30), "EROFS: {e}");
    let connector = csi_proxy_client::Connector::SocketDir(view.clone());
    let mut fs = csi_proxy_client::filesystem::FilesystemClient::connect(&connector)
        .await
        .unwrap();
    assert!(fs.path_exists(&d.k("")).await.unwrap());
    let _ = Command::new("umount").arg(&view).status();
}

/// A portal address is a host name or an IP address: free text (a cron line, as a client
/// could once have had written into a file through a planted link) is INVALID_ARGUMENT naming
/// the RPC, and nothing is kept.
#[tokio::test]
async fn a_portal_address_that_is_no_host_name_is_refused() {
    let d = Daemon::start(&[]);
    let ch = d.connector().channel("iscsi", "v1alpha2").await.unwrap();
    let mut c = iscsi2::iscsi_client::IscsiClient::new(ch);
    for bad in [
        "10.0.0.1 3260\n* * * * * root touch /tmp/owned",
        "host\tname",
        "a/b",
    ] {
        let s = c
            .add_target_portal(iscsi2::AddTargetPortalRequest {
                target_portal: Some(iscsi2::TargetPortal {
                    target_address: bad.into(),
                    target_port: 3260,
                }),
            })
            .await
            .unwrap_err();
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{bad:?}: {s:?}");
        assert!(
            s.message().contains("AddTargetPortal") && s.message().contains("target_address"),
            "{s:?}"
        );
    }
    let listed = c
        .list_target_portals(iscsi2::ListTargetPortalsRequest {})
        .await
        .unwrap()
        .into_inner()
        .target_portals;
    assert!(listed.is_empty(), "{listed:?}");
    assert!(!d.state.join("iscsi/portals").exists());
}
