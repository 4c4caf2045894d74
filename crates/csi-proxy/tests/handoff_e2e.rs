//! Hand-off: a daemon started with `--take-over` replaces the serving one without a failed call, on
//! the real binary with its sockets, state and kubelet dirs in a temp dir.
//!
//! The clients are four long-lived channels, as drivers hold, each calling filesystem v1
//! PathExists in a loop. They follow grpc-go's rules (common/go_client.rs): tonic's `Channel`
//! neither retries a call the server never processed nor backs off after a failed dial, and
//! grpc-go, the drivers' client, does both; the test client retries exactly the calls the
//! server never saw (refused by GOAWAY or REFUSED_STREAM, or never sent), never one that reached
//! the server.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Daemon, GoChannel, LoopDisk, VolumeClient, can_use_loop_devices, partition_one, spawn_format,
    v1_clients, wait_for_child, wrap_tool,
};
use csi_proxy_api::volume::v1 as vol;
use csi_proxy_client::filesystem::FilesystemClient;
use csi_proxy_server::daemon::GRACE;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tonic::Code;

/// The pid of the process serving the socket at `path` (SO_PEERCRED of a connection to it).
fn served_by(path: &Path) -> Option<u32> {
    let s = std::os::unix::net::UnixStream::connect(path).ok()?;
    let cred = rustix::net::sockopt::socket_peercred(&s).ok()?;
    Some(cred.pid.as_raw_nonzero().get() as u32)
}

fn sockets(d: &Daemon) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(&d.sockets)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 23);
    v
}

/// Names in the socket dir other than the 23 sockets (a `.new` socket left behind).
fn leftovers(d: &Daemon) -> Vec<String> {
    std::fs::read_dir(&d.sockets)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".sock"))
        .collect()
}

fn identity(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.dev(), m.ino())
}

/// Waits until every path in `paths` names another file than it did (`before`): renamed over.
fn wait_renamed(paths: &[PathBuf], before: &[(u64, u64)], new: &mut Child, log: &Path) {
    let t = Instant::now();
    while paths.iter().zip(before).any(|(p, b)| identity(p) == *b) {
        if let Ok(Some(s)) = new.try_wait() {
            panic!(
                "the new daemon exited ({s}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the paths were never taken over"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(t.elapsed() < limit, "did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the looping clients saw.
#[derive(Debug, Default)]
struct Report {
    answers: u64,
    failures: Vec<String>,
    longest_gap: Duration,
    transparent_retries: u64,
}

/// Four clients calling PathExists in a loop until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<Report>>,
}

impl Load {
    fn start(d: &Daemon) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..4u64)
            .map(|i| {
                let socket = d.sockets.join("csi-proxy-filesystem-v1.sock");
                let (stop, path) = (stop.clone(), d.k(""));
                tokio::spawn(async move {
                    let mut ch = GoChannel::new(socket, i + 1);
                    let mut r = Report::default();
                    let mut last = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        let got = ch
                            .call(|c| {
                                let path = path.clone();
                                async move {
                                    let mut fs = FilesystemClient::from_channel("v1", c).unwrap();
                                    fs.path_exists(&path).await
                                }
                            })
                            .await;
                        match got {
                            Ok(true) => {
                                r.longest_gap = r.longest_gap.max(last.elapsed());
                                last = Instant::now();
                                r.answers += 1;
                            }
                            Ok(false) => r.failures.push("the kubelet dir does not exist?".into()),
                            Err(s) => r.failures.push(format!("{:?}: {}", s.code(), s.message())),
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    r.transparent_retries = ch.transparent_retries;
                    r
                })
            })
            .collect();
        Load { stop, clients }
    }

    async fn finish(self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Report::default();
        for c in self.clients {
            let r = c.await.unwrap();
            all.answers += r.answers;
            all.failures.extend(r.failures);
            all.longest_gap = all.longest_gap.max(r.longest_gap);
            all.transparent_retries += r.transparent_retries;
        }
        all
    }
}

/// The surge order: a new daemon with --take-over while the old one serves four looping
/// clients. No call fails, the old daemon exits 0 within GRACE + 1 s of the paths being taken
/// over, and every path is then served by the new daemon; nothing is left beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_take_over_under_load_fails_no_call() {
    let mut d = Daemon::start(&[]);
    let paths = sockets(&d);
    let before: Vec<_> = paths.iter().map(|p| identity(p)).collect();
    let load = Load::start(&d);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new = d.spawn_another(&["--take-over"], "new.log");
    let new_pid = new.id();
    let log = d.dir.path().join("new.log");
    wait_renamed(&paths, &before, &mut new, &log);
    let renamed = Instant::now();
    let mut old = std::mem::replace(&mut d.child, new);
    let status = wait_exit(
        &mut old,
        GRACE + Duration::from_secs(1) + Duration::from_millis(100),
    );
    assert!(status.success(), "the old daemon exits 0: {status}");
    println!(
        "old daemon exited {:?} after the paths were taken over",
        renamed.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = load.finish().await;
    println!(
        "take-over under load: {} answers, {} failed, longest gap {:?}, {} transparent retries",
        r.answers,
        r.failures.len(),
        r.longest_gap,
        r.transparent_retries
    );
    assert!(r.failures.is_empty(), "failed calls: {:#?}", r.failures);
    assert!(r.answers > 0);
    for p in &paths {
        assert_eq!(
            served_by(p),
            Some(new_pid),
            "{} is the new daemon's",
            p.display()
        );
    }
    assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
    assert!(d.alive(), "the new daemon serves on");
    assert!(
        d.log().contains("took over the endpoints"),
        "the old daemon says why it stops:\n{}",
        d.log_tail()
    );
    assert!(
        !d.state.join("take-over").exists(),
        "the request is removed"
    );
}

/// A take-over that fails at start (after the lock check, mid-way through binding: the last
/// endpoint's beside name is taken by a directory) removes what it bound, names the cause, and
/// leaves the old daemon serving: no call fails, the paths stay the old daemon's, no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_take_over_that_fails_at_start_leaves_the_old_one_serving() {
    let mut d = Daemon::start(&[]);
    let old_pid = d.child.id();
    let paths = sockets(&d);
    let blocker = d.sockets.join(".csi-proxy-iscsi-v1alpha2.sock.new");
    std::fs::create_dir(&blocker).unwrap();
    let load = Load::start(&d);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new = d.spawn_another(&["--take-over"], "new.log");
    let status = wait_exit(&mut new, Duration::from_secs(60));
    assert!(!status.success());
    let log = std::fs::read_to_string(d.dir.path().join("new.log")).unwrap();
    assert!(
        log.contains("cannot listen for iscsi v1alpha2")
            && log.contains(".csi-proxy-iscsi-v1alpha2.sock.new")
            && log.contains("not a socket"),
        "{log}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = load.finish().await;
    println!(
        "failed take-over under load: {} answers, {} failed, longest gap {:?}",
        r.answers,
        r.failures.len(),
        r.longest_gap
    );
    assert!(r.failures.is_empty(), "failed calls: {:#?}", r.failures);
    for p in &paths {
        assert_eq!(
            served_by(p),
            Some(old_pid),
            "{} is still the old daemon's",
            p.display()
        );
    }
    assert_eq!(leftovers(&d), [".csi-proxy-iscsi-v1alpha2.sock.new"]);
    assert!(d.alive());
    assert!(!d.state.join("take-over").exists(), "no request was made");
}

/// A second daemon without --take-over is refused before it binds anything, naming the pid
/// of the serving one and the flag; the serving one is untouched.
#[tokio::test]
async fn a_second_start_without_take_over_is_refused_naming_the_pid() {
    let mut d = Daemon::start(&[]);
    let old_pid = d.child.id();
    let paths = sockets(&d);
    let before: Vec<_> = paths.iter().map(|p| identity(p)).collect();
    let mut second = d.spawn_another(&[], "second.log");
    let status = wait_exit(&mut second, Duration::from_secs(30));
    assert!(!status.success());
    let log = std::fs::read_to_string(d.dir.path().join("second.log")).unwrap();
    assert!(
        log.contains(&format!("pid {old_pid}")) && log.contains("--take-over"),
        "{log}"
    );
    let after: Vec<_> = paths.iter().map(|p| identity(p)).collect();
    assert_eq!(before, after);
    assert!(d.alive());
    assert_eq!(served_by(&paths[0]), Some(old_pid));
    assert!(leftovers(&d).is_empty());
}

/// A format running in the old daemon (its mkfs.ext4 held by a wrapper until the test lets it
/// go, whatever the machine's speed) when the hand-off starts finishes there with OK;
/// meanwhile the new daemon's call on the same disk waits for the old one to exit (here until
/// its 1 s deadline: DEADLINE_EXCEEDED naming the previous daemon), and goes through once it
/// has.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_format_in_flight_finishes_on_the_old_daemon_and_the_new_one_waits() {
    if !can_use_loop_devices() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = LoopDisk::or_skip(dir.path(), "handoff", 64) else {
        return;
    };
    let gate = dir.path().join("gate");
    std::fs::write(&gate, b"").unwrap();
    let path = wrap_tool(
        dir.path(),
        "mkfs.ext4",
        &format!("while [ -e '{}' ]; do sleep 0.02; done", gate.display()),
    );
    let mut d = Daemon::start_env(&[], &[("PATH", &path)]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let id = partition_one(&mut dc, &mut vc, disk.disk_number()).await;
    let slow = spawn_format(&vc, &id);
    wait_for_child(d.child.id(), &["mkfs"], Duration::from_secs(20))
        .await
        .expect("FormatVolume runs mkfs.ext4");
    let paths = sockets(&d);
    let before: Vec<_> = paths.iter().map(|p| identity(p)).collect();
    let mut new = d.spawn_another(&["--take-over"], "new.log");
    wait_renamed(&paths, &before, &mut new, &d.dir.path().join("new.log"));
    let mut old = std::mem::replace(&mut d.child, new);

    let mut vc2 = VolumeClient::new(d.connector().channel("volume", "v1").await.unwrap());
    let mut req = tonic::Request::new(vol::FormatVolumeRequest {
        volume_id: id.clone(),
    });
    req.set_timeout(Duration::from_secs(1));
    let e = vc2.format_volume(req).await.unwrap_err();
    // The gate's own answer names the previous daemon; the call layer's answer at the same
    // deadline may come first (both: nothing was done). Without the gate the format ran beside
    // the old one's and was refused, the disk being held open by the old daemon.
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(
        e.message().contains("previous csi-proxy") || e.message().contains("deadline"),
        "{e:?}"
    );
    assert!(!slow.is_finished(), "the old daemon's format is still held");

    std::fs::remove_file(&gate).unwrap();
    slow.await
        .unwrap()
        .expect("the format in flight finishes with OK on the old daemon");
    let status = wait_exit(&mut old, GRACE + Duration::from_secs(1));
    assert!(status.success(), "{status}");
    let formatted = vc2
        .is_volume_formatted(vol::IsVolumeFormattedRequest { volume_id: id })
        .await
        .unwrap()
        .into_inner()
        .formatted;
    assert!(formatted);
}

/// A take-over with `--metrics-bind-address` starts while the old daemon holds the address,
/// and binds it once the old one has exited: /metrics then answers from the new daemon.
#[tokio::test]
async fn the_metrics_address_passes_to_the_new_daemon() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let flag = format!("--metrics-bind-address=127.0.0.1:{port}");
    let mut d = Daemon::start(&[&flag]);
    let paths = sockets(&d);
    let before: Vec<_> = paths.iter().map(|p| identity(p)).collect();
    let mut new = d.spawn_another(&["--take-over"], "new.log");
    let log = d.dir.path().join("new.log");
    wait_renamed(&paths, &before, &mut new, &log);
    let mut old = std::mem::replace(&mut d.child, new);
    assert!(wait_exit(&mut old, GRACE + Duration::from_secs(1)).success());
    let t = Instant::now();
    loop {
        use std::io::{Read, Write};
        if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut body = String::new();
            let _ = c.read_to_string(&mut body);
            assert!(body.starts_with("HTTP/1.1 200"), "{body}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the new daemon never bound the metrics address:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(d.alive());
}

/// `--wait-after-hand-off` (the HostProcess DaemonSet's: its pod would be restarted after an
/// exit, and would take the endpoints back): after the hand-off the old process lives on,
/// holding nothing (the new one gets the lock and says it serves alone), and exits 0 at once
/// when stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_wait_after_hand_off_the_old_daemon_lets_go_and_waits_to_be_stopped() {
    let mut d = Daemon::start(&["--wait-after-hand-off"]);
    let mut new = start_until_it_serves(&d, &["--take-over"]);
    let log = d.dir.path().join("next.log");
    let t = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("serves alone")
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the new daemon never got the lock:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(d.alive(), "the old daemon waits to be stopped");
    assert!(
        d.log().contains("waiting to be stopped"),
        "{}",
        d.log_tail()
    );
    let paths = sockets(&d);
    assert_eq!(served_by(&paths[0]), Some(new.id()));
    d.signal("-TERM");
    assert!(wait_exit(&mut d.child, Duration::from_secs(5)).success());
    assert_eq!(
        served_by(&paths[0]),
        Some(new.id()),
        "the paths stay the new one's"
    );
    let _ = new.kill();
    let _ = new.wait();
}

/// Starts another daemon on `d`'s directories with `extra`, again every 10 ms while it exits
/// at start (as a DaemonSet or service manager restarts a pod or unit that failed), until one
/// serves; returns it.
fn start_until_it_serves(d: &Daemon, extra: &[&str]) -> Child {
    let last = d.sockets.join("csi-proxy-iscsi-v1alpha2.sock");
    let t = Instant::now();
    loop {
        let mut c = d.spawn_another(extra, "next.log");
        loop {
            if let Ok(Some(_)) = c.try_wait() {
                break;
            }
            if served_by(&last) == Some(c.id()) {
                return c;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no start served");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One way of replacing the daemon under the four looping clients: what they saw.
async fn replace_under_load(order: &str) -> Report {
    let d = Daemon::start(&[]);
    let load = Load::start(&d);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old_pid = d.child.id();
    let d = Arc::new(std::sync::Mutex::new(d));
    let dd = d.clone();
    let order = order.to_string();
    tokio::task::spawn_blocking(move || {
        let mut d = dd.lock().unwrap();
        let new = match order.as_str() {
            "take-over" => start_until_it_serves(&d, &["--take-over"]),
            "surge" => {
                let killer = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(1500));
                    common::signal(old_pid, "-TERM");
                });
                let c = start_until_it_serves(&d, &[]);
                killer.join().unwrap();
                c
            }
            _ => {
                d.signal("-TERM");
                d.wait_exit(Duration::from_secs(30));
                start_until_it_serves(&d, &[])
            }
        };
        let mut old = std::mem::replace(&mut d.child, new);
        let _ = wait_exit(&mut old, Duration::from_secs(30));
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = load.finish().await;
    drop(d);
    r
}

/// The figures of BENCHMARKS.md ("Upgrade without a failed call"), not a test: run by
/// scripts/bench-upgrade.sh. Four grpc-go-like clients call PathExists every 2 ms while the
/// daemon is replaced: with --take-over (the hand-off); start the new one, SIGTERM the old one
/// 1.5 s later (a surge without the hand-off, the new one restarted every 10 ms while the old
/// one holds the state dir); SIGTERM the old one, then start the new one (`systemctl restart`
/// without socket activation). Nothing here asserts a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: scripts/bench-upgrade.sh"]
async fn upgrade_figures() {
    let runs: usize = std::env::var("UPGRADE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    println!(
        "| how the new daemon replaces the old | run | answers | failed calls | longest gap |"
    );
    println!("|---|---|---|---|---|");
    for (order, what) in [
        ("take-over", "start the new one with --take-over"),
        (
            "surge",
            "start the new one, SIGTERM the old one 1.5 s later",
        ),
        ("restart", "SIGTERM the old one, then start the new one"),
    ] {
        for run in 1..=runs {
            let r = replace_under_load(order).await;
            println!(
                "| {what} | {run} | {} | {} | {} ms |",
                r.answers,
                r.failures.len(),
                r.longest_gap.as_millis()
            );
        }
    }
}
