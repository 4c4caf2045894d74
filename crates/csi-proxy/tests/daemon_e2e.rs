//! End-to-end: the real `csi-proxy` binary on Unix sockets in a temp dir, driven with the client
//! crate the way a CSI driver would.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, call_raw, parse_klog_line};
use csi_proxy_client::filesystem::FilesystemClient;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::Code;

/// At -v=4 every request is one log line.
const FLAGS: &[&str] = &["-v=4"];

fn socket_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|r| {
            r.filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".sock")
            })
            .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn all_23_endpoints_answer_empty_requests_with_precise_codes() {
    let d = Daemon::start(FLAGS);
    assert_eq!(socket_count(&d.sockets), 23);
    for group in csi_proxy_api::GROUPS {
        for version in csi_proxy_api::versions(group).unwrap() {
            let ch = d.connector().channel(group, version).await.unwrap();
            // An RPC every version of the group has, sent as an empty message: each names an
            // object, and an empty name is invalid (or, for a disk number, 0 names no disk).
            let method = match *group {
                "filesystem" => "PathExists",
                "disk" => "PartitionDisk",
                "volume" => "IsVolumeFormatted",
                "smb" => "RemoveSmbGlobalMapping",
                "system" => "GetService",
                "iscsi" => "DiscoverTargetPortal",
                _ => unreachable!(),
            };
            let service: String = match *group {
                "smb" => "Smb".into(),
                "iscsi" => "Iscsi".into(),
                g => format!("{}{}", g[..1].to_uppercase(), &g[1..]),
            };
            let path = format!("/{version}.{service}/{method}");
            let status = call_raw(&ch, &path, Vec::new(), None)
                .await
                .expect_err("empty requests are rejected");
            // v1 and v1beta3 take disk numbers; diskseq 0 is never a disk. Older versions take a
            // string disk ID, and "" is not a number.
            let want = if *group == "disk" && (*version == "v1" || *version == "v1beta3") {
                Code::NotFound
            } else {
                Code::InvalidArgument
            };
            assert_eq!(status.code(), want, "{group}/{version}: {status:?}");
            assert!(
                status.message().contains(method),
                "{group}/{version}: the message names the RPC: {}",
                status.message()
            );
            assert_ne!(status.code(), Code::Unknown);
            // A service name of another version is not served on this endpoint.
            let wrong = format!("/v9.{service}/{method}");
            let r = call_raw(&ch, &wrong, Vec::new(), None).await;
            assert_eq!(r.unwrap_err().code(), Code::Unimplemented);
        }
    }
}

#[tokio::test]
async fn filesystem_scenarios_of_upstreams_integration_tests_in_every_version() {
    let d = Daemon::start(FLAGS);
    for version in ["v1alpha1", "v1beta1", "v1beta2", "v1", "v2alpha1"] {
        let mut fs = FilesystemClient::connect_version(&d.connector(), version)
            .await
            .unwrap();
        let base = d.k(&format!("testdir-{version}"));
        // PathExists positive: stage dir, pod dir, link pod\rootvol -> stage, then Rmdir both.
        let stage = format!("{base}/testplugin-a.csi.io/volume1");
        let pod = format!("{base}/test-pod-id/volumes/kubernetes.io~csi/pvc-test1");
        fs.mkdir(&stage).await.unwrap();
        fs.mkdir(&stage).await.unwrap(); // idempotent
        assert!(Path::new(&stage).is_dir());
        assert!(fs.path_exists(&stage).await.unwrap());
        fs.mkdir(&pod).await.unwrap();
        let rootvol = format!("{pod}/rootvol");
        fs.create_symlink(&stage, &rootvol).await.unwrap();
        assert!(fs.path_exists(&rootvol).await.unwrap());
        assert_eq!(
            fs.create_symlink(&stage, &rootvol)
                .await
                .unwrap_err()
                .code(),
            Code::AlreadyExists
        );
        std::fs::write(format!("{stage}/data"), b"keep").unwrap();
        fs.rmdir(&pod, true).await.unwrap();
        assert!(!Path::new(&pod).exists());
        assert_eq!(
            std::fs::read(format!("{stage}/data")).unwrap(),
            b"keep",
            "link target untouched"
        );
        fs.rmdir(&stage, true).await.unwrap();
        assert!(!Path::new(&stage).exists());
        fs.rmdir(&stage, true).await.unwrap(); // missing path with force: success

        // IsMount / IsSymlink.
        let missing = format!("{base}/missing");
        assert_eq!(
            fs.is_symlink(&missing).await.unwrap_err().code(),
            Code::NotFound
        );
        let plain = format!("{base}/plain");
        fs.mkdir(&plain).await.unwrap();
        assert!(!fs.is_symlink(&plain).await.unwrap());
        let tgt = format!("{base}/ln-tgt");
        let ln = format!("{base}/ln");
        fs.mkdir(&tgt).await.unwrap();
        std::os::unix::fs::symlink(&tgt, &ln).unwrap();
        assert!(fs.is_symlink(&ln).await.unwrap());
        std::fs::remove_dir(&tgt).unwrap();
        assert!(
            !fs.is_symlink(&ln).await.unwrap(),
            "dangling link is not a mount"
        );
        assert!(
            fs.path_exists(&ln).await.unwrap(),
            "dangling link exists (lstat)"
        );

        // Rmdir without force on a non-empty dir fails and keeps it.
        let full = format!("{base}/full");
        fs.mkdir(&format!("{full}/child")).await.unwrap();
        assert!(fs.rmdir(&full, false).await.is_err());
        assert!(Path::new(&full).is_dir());

        if version == "v2alpha1" {
            // RmdirContents keeps the dir, removes children, does not follow links.
            let root = format!("{base}/rc");
            for p in ["foo/goo", "foo/bar/baz", "alpha/beta/gamma"] {
                fs.mkdir(&format!("{root}/{p}")).await.unwrap();
            }
            let outside = d.k("outside-target");
            std::fs::write(&outside, b"x").unwrap();
            std::os::unix::fs::symlink(&outside, format!("{root}/source")).unwrap();
            fs.rmdir_contents(&root).await.unwrap();
            assert!(Path::new(&root).is_dir());
            assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
            assert!(Path::new(&outside).exists());
        } else {
            assert_eq!(
                fs.rmdir_contents(&base).await.unwrap_err().code(),
                Code::Unimplemented
            );
        }
        fs.rmdir(&base, true).await.unwrap();
    }
}

#[tokio::test]
async fn hostile_paths_are_refused_and_nothing_is_touched() {
    let d = Daemon::start(FLAGS);
    let outside = d.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"data").unwrap();
    // A link inside the kubelet dir that leads outside it.
    std::os::unix::fs::symlink(&outside, d.kubelet.join("escape")).unwrap();
    let mut fs = FilesystemClient::connect(&d.connector()).await.unwrap();
    assert_eq!(fs.version(), "v1");
    let kubelet = d.kubelet.display().to_string();
    let hostile = [
        String::new(),
        "relative/path".into(),
        outside.display().to_string(),
        format!("{kubelet}-evil/x"),
        format!("{kubelet}/../outside"),
        format!("{kubelet}/a/../../outside"),
        format!("{kubelet}/escape/newdir"),
        format!("{kubelet}/escape/precious"),
        format!("{kubelet}/x\0y"),
        format!("{kubelet}/{}", "a".repeat(256)),
        "/etc".into(),
        "/".into(),
    ];
    for p in &hostile {
        let e = fs.mkdir(p).await.unwrap_err();
        assert!(
            matches!(e.code(), Code::InvalidArgument | Code::PermissionDenied),
            "Mkdir {p:?}: {e:?}"
        );
        assert!(
            e.message().contains("Mkdir"),
            "message names the operation: {}",
            e.message()
        );
        let e = fs.rmdir(p, true).await.unwrap_err();
        assert!(
            matches!(e.code(), Code::InvalidArgument | Code::PermissionDenied),
            "Rmdir {p:?}: {e:?}"
        );
    }
    assert!(!d.dir.path().join("kubelet-evil").exists());
    assert!(!outside.join("newdir").exists());
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"data");
    // The root itself can be checked but not removed.
    assert!(fs.path_exists(&kubelet).await.unwrap());
    assert_eq!(
        fs.rmdir(&kubelet, true).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    assert!(d.kubelet.is_dir());
}

#[tokio::test]
async fn sigterm_stops_within_5s_and_removes_sockets() {
    let mut d = Daemon::start(FLAGS);
    let mut fs = FilesystemClient::connect(&d.connector()).await.unwrap();
    fs.mkdir(&d.k("a")).await.unwrap();
    let t = Instant::now();
    d.signal("-TERM");
    let status = d.wait_exit(Duration::from_secs(5));
    assert!(status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(socket_count(&d.sockets), 0, "sockets removed");
    // At -v=4 every request is one log line with group, version, method, duration and code.
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("method=\"Mkdir\""))
        .unwrap_or_else(|| panic!("no request line for Mkdir in:\n{log}"));
    for field in [
        "group=\"filesystem\"",
        "version=\"v1\"",
        "profile=\"\"",
        "duration_ms=",
        "code=Ok",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    assert!(log.contains("SIGTERM received"), "{log}");
}

#[tokio::test]
async fn a_second_daemon_fails_clearly_and_a_crashed_ones_sockets_are_reused() {
    let mut d = Daemon::start(FLAGS);
    // Second daemon on the same socket dir: exits non-zero, names the problem, first keeps serving.
    let second = Command::new(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("--kubelet-path={}", d.kubelet.display()))
        .arg(format!("--socket-dir={}", d.sockets.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("another csi-proxy"), "{err}");
    assert_eq!(socket_count(&d.sockets), 23);
    let mut fs = FilesystemClient::connect(&d.connector()).await.unwrap();
    assert!(fs.path_exists(&d.k("")).await.unwrap());

    // SIGKILL leaves stale sockets; a new daemon replaces them.
    d.signal("-KILL");
    d.wait_exit(Duration::from_secs(5));
    assert_eq!(
        socket_count(&d.sockets),
        23,
        "stale sockets left by the crash"
    );
    d.restart();
    let mut fs = FilesystemClient::connect(&d.connector()).await.unwrap();
    assert!(fs.path_exists(&d.k("")).await.unwrap());
}

#[tokio::test]
async fn clients_made_before_a_restart_keep_working() {
    let mut d = Daemon::start(FLAGS);
    let ch = d.connector().lazy_channel("filesystem", "v1");
    let mut fs = FilesystemClient::from_channel("v1", ch).unwrap();
    assert!(fs.path_exists(&d.k("")).await.unwrap());
    d.signal("-TERM");
    d.wait_exit(Duration::from_secs(5));
    d.restart();
    // The first call after the restart may race the reconnect; the channel redials by itself.
    let mut ok = false;
    for _ in 0..50 {
        if fs.path_exists(&d.k("")).await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the old client works after the restart");
}

/// IsSymlink answers about the link, never about whether a path outside the roots exists: links in
/// the client's directory to an existing and to an absent file inside a 0700 directory outside the
/// kubelet path answer alike, whatever form the link takes (absolute, relative with `..`, through a
/// directory link). Links whose targets lie inside the roots keep upstream's answer: true when the
/// direct target exists (a link to a dangling link included), false when it does not.
#[tokio::test]
async fn is_symlink_never_tells_whether_a_path_outside_the_roots_exists() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let d = Daemon::start(FLAGS);
    let mut fs = FilesystemClient::connect_version(&d.connector(), "v1")
        .await
        .unwrap();
    let secret = d.dir.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("present"), b"x").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let base = d.k("plugins/evil");
    std::fs::create_dir_all(&base).unwrap();
    // `plugins/evil` is three levels below the daemon's temp dir, where `secret` is.
    let up = "../../../secret";
    let pairs = [
        ("abs", secret.join("present"), secret.join("absent")),
        (
            "rel",
            format!("{up}/present").into(),
            format!("{up}/absent").into(),
        ),
    ];
    symlink(&secret, format!("{base}/dirlink")).unwrap();
    let mut answers = Vec::new();
    for (form, present, absent) in
        pairs
            .into_iter()
            .chain([("via", "dirlink/present".into(), "dirlink/absent".into())])
    {
        let (p, a) = (format!("{base}/{form}-p"), format!("{base}/{form}-a"));
        symlink(&present, &p).unwrap();
        symlink(&absent, &a).unwrap();
        let (rp, ra) = (fs.is_symlink(&p).await, fs.is_symlink(&a).await);
        let shown = |r: &Result<bool, tonic::Status>| match r {
            Ok(b) => format!("{b}"),
            Err(s) => format!("{:?}", s.code()),
        };
        assert_eq!(
            shown(&rp),
            shown(&ra),
            "{form}: a link to an existing and to an absent file outside the roots answer alike"
        );
        answers.push((form, shown(&rp)));
    }
    // The answer is about the link: it is one.
    for (form, a) in &answers {
        assert_eq!(a, "true", "{form}");
    }
    // Inside the roots, upstream's answer stays: the direct target's existence.
    std::fs::create_dir(format!("{base}/stage")).unwrap();
    symlink(format!("{base}/stage"), format!("{base}/publish")).unwrap();
    symlink(format!("{base}/gone"), format!("{base}/dangling")).unwrap();
    symlink(format!("{base}/dangling"), format!("{base}/to-dangling")).unwrap();
    assert!(fs.is_symlink(&format!("{base}/publish")).await.unwrap());
    assert!(!fs.is_symlink(&format!("{base}/dangling")).await.unwrap());
    assert!(
        fs.is_symlink(&format!("{base}/to-dangling")).await.unwrap(),
        "only the link's direct target is looked at (it exists: a link)"
    );
}

/// Every flag upstream's csi-proxy.exe accepts: its own, and those `klog.InitFlags(nil)`
/// registers (klog v2.140). A bool never takes a separate-word value in Go (`-f true` ends the
/// flags), so bools are given alone or with `=`.
const UPSTREAM_FLAGS: &[(&str, Option<&str>)] = &[
    ("kubelet-path", None),
    ("working-dir", None),
    ("require-privacy", Some("bool")),
    ("metrics-bind-address", Some("127.0.0.1:0")),
    ("add_dir_header", Some("bool")),
    ("alsologtostderr", Some("bool")),
    ("alsologtostderrthreshold", Some("WARNING")),
    ("legacy_stderr_threshold_behavior", Some("bool")),
    ("log_backtrace_at", Some("main.go:42")),
    ("log_dir", None),
    ("log_file", None),
    ("log_file_max_size", Some("10")),
    ("logtostderr", Some("bool")),
    ("one_output", Some("bool")),
    ("skip_headers", Some("bool")),
    ("skip_log_headers", Some("bool")),
    ("stderrthreshold", Some("ERROR")),
    ("v", Some("3")),
    ("vmodule", Some("server*=4,disk=2")),
];

/// The command lines Go's flag package accepts for flag `name` with `value`: `-f`, `--f`, with
/// `=v` or a separate `v`; bools alone or with `=true`, `=false`, `=1`, `=0`.
fn go_spellings(name: &str, value: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for dash in ["-", "--"] {
        if value == "bool" {
            out.push(vec![format!("{dash}{name}")]);
            for v in ["true", "false", "1", "0"] {
                out.push(vec![format!("{dash}{name}={v}")]);
            }
        } else {
            out.push(vec![format!("{dash}{name}={value}")]);
            out.push(vec![format!("{dash}{name}"), value.to_string()]);
        }
    }
    out
}

#[tokio::test]
async fn every_flag_upstream_accepts_starts_the_daemon_in_every_go_spelling() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = |n: &str| {
        let p = scratch.path().join(n);
        std::fs::create_dir_all(&p).unwrap();
        p.display().to_string()
    };
    let (other_kubelet, extra_root, log_dir) = (dir("kubelet2"), dir("extra"), dir("logs"));
    let log_file = format!("{log_dir}/csi-proxy.log");
    for (name, value) in UPSTREAM_FLAGS {
        let value = match *name {
            // Given after the harness's own: Go takes the last value.
            "kubelet-path" => other_kubelet.as_str(),
            "working-dir" => extra_root.as_str(),
            "log_dir" => log_dir.as_str(),
            "log_file" => log_file.as_str(),
            _ => value.unwrap(),
        };
        for line in go_spellings(name, value) {
            let args: Vec<&str> = line.iter().map(String::as_str).collect();
            // -logtostderr=false without a directory writes klog's files to the temp dir.
            let d = Daemon::start_env(&args, &[("TMPDIR", log_dir.as_str())]);
            let root = match *name {
                "kubelet-path" => other_kubelet.clone(),
                "working-dir" => extra_root.clone(),
                _ => d.k(""),
            };
            let mut fs = FilesystemClient::connect(&d.connector()).await.unwrap();
            assert!(
                fs.path_exists(&root).await.unwrap(),
                "the daemon started with {line:?} serves inside {root}"
            );
        }
    }
}

/// `systemctl restart` with csi-proxy.socket, replayed without systemd: this process plays
/// systemd's part (binds every endpoint's socket, mode 0660, and keeps it), and each daemon
/// gets the sockets as systemd passes them (descriptors 3.., `LISTEN_FDS`, `LISTEN_PID` its
/// own pid). Four clients, one long-lived channel each as drivers hold, call PathExists in a
/// loop while the daemon gets SIGTERM and a new one starts: no call fails, since a client
/// connecting meanwhile waits in the socket's queue; the sockets stay where systemd bound them.
#[tokio::test]
async fn a_restart_with_systemd_passed_sockets_loses_no_call() {
    let dir = tempfile::tempdir().unwrap();
    let (run, kubelet, state) = (
        dir.path().join("run"),
        dir.path().join("kubelet"),
        dir.path().join("state"),
    );
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(kubelet.join("x")).unwrap();
    let names = endpoint_socket_names();
    assert_eq!(names.len(), 23);
    let held: Vec<std::os::unix::net::UnixListener> = names
        .iter()
        .map(|n| {
            let path = run.join(n);
            let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o660))
                .unwrap();
            l
        })
        .collect();
    let start = || {
        activated(
            &held,
            &run,
            &kubelet,
            &state,
            &dir.path().join("daemon.log"),
        )
    };

    let mut first = start();
    let connector = csi_proxy_client::Connector::SocketDir(run.clone());
    let target = kubelet.join("x").display().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let ch = connector.lazy_channel("filesystem", "v1");
            let (target, stop) = (target.clone(), stop.clone());
            tokio::spawn(async move {
                let mut fs = FilesystemClient::from_channel("v1", ch).unwrap();
                let (mut ok, mut failed, mut gap) = (0u32, Vec::new(), Duration::ZERO);
                let mut last = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // A daemon that does not take the passed sockets leaves calls queued forever.
                    let call =
                        tokio::time::timeout(Duration::from_secs(10), fs.path_exists(&target));
                    match call.await {
                        Ok(Ok(true)) => ok += 1,
                        other => failed.push(format!("{other:?}")),
                    }
                    gap = gap.max(last.elapsed());
                    last = Instant::now();
                }
                (ok, failed, gap)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || first.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    for n in &names {
        assert!(
            run.join(n).exists(),
            "{n}: a passed socket is systemd's, never removed"
        );
    }
    let mut second = start();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut longest = Duration::ZERO;
    for c in clients {
        let (ok, failed, gap) = c.await.unwrap();
        assert!(
            failed.is_empty(),
            "failed calls across the restart: {failed:?}"
        );
        assert!(ok > 0);
        longest = longest.max(gap);
    }
    println!("restart with passed sockets: 0 failed calls, longest wait for an answer {longest:?}");
    let _ = second.kill();
    let _ = second.wait();
}

/// systemd's own tool for running a socket-activated service by hand binds every endpoint's
/// socket and passes them (`LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`); the daemon serves on
/// them, and leaves them in place when it stops.
#[tokio::test]
async fn the_daemon_serves_on_sockets_systemd_socket_activate_passes() {
    let Ok(tool) = which("systemd-socket-activate") else {
        println!("SKIPPED: systemd-socket-activate is not installed");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (run, kubelet) = (dir.path().join("run"), dir.path().join("kubelet"));
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(&kubelet).unwrap();
    let names = endpoint_socket_names();
    let mut cmd = Command::new(tool);
    for n in &names {
        cmd.arg(format!("--listen={}", run.join(n).display()));
    }
    cmd.arg(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("--kubelet-path={}", kubelet.display()))
        .arg(format!("--socket-dir={}", run.display()))
        .arg(format!(
            "--state-dir={}",
            dir.path().join("state").display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("daemon.log")).unwrap());
    if !common::every_process_readable() {
        cmd.arg("--skip-unreadable-processes");
    }
    let mut daemon = cmd.spawn().unwrap();
    // The tool binds the sockets before it starts the daemon; once they exist a connection
    // waits in the queue until the daemon accepts it.
    let t = Instant::now();
    while socket_count(&run) < names.len() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the tool bound no sockets"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let connector = csi_proxy_client::Connector::SocketDir(run.clone());
    let mut fs = FilesystemClient::connect(&connector).await.unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        fs.path_exists(&kubelet.display().to_string()),
    )
    .await;
    let log = || std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();
    assert!(
        matches!(answer, Ok(Ok(true))),
        "{answer:?}; log:\n{}",
        log()
    );
    assert!(
        log().contains("listening sockets passed by systemd sockets=23"),
        "{}",
        log()
    );
    // The endpoints served, not the socket names this daemon owns (none here): it said 0.
    // The line comes once every endpoint's server is spawned, which a client on a passed
    // socket (already listening) can beat: it is waited for.
    let said = Instant::now() + Duration::from_secs(10);
    while !log().contains("serving endpoints=23") && Instant::now() < said {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(log().contains("serving endpoints=23"), "{}", log());
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    assert!(daemon.wait().unwrap().success());
    assert_eq!(socket_count(&run), 23, "passed sockets are left in place");
}

fn which(tool: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or(())
}

/// The socket file names of the 23 endpoints, as the daemon names them.
fn endpoint_socket_names() -> Vec<String> {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/linux/csi-proxy.socket"),
    )
    .unwrap();
    unit.lines()
        .filter_map(|l| l.strip_prefix("ListenStream=/run/csi-proxy/"))
        .map(str::to_string)
        .collect()
}

/// Starts the daemon with `held` passed as systemd passes sockets. bash moves them to
/// descriptors 3.. (first out of the way, to 500 and up, so no move overwrites a socket not yet
/// moved) and execs the daemon with `LISTEN_PID` set to its own pid, which exec keeps.
fn activated(
    held: &[std::os::unix::net::UnixListener],
    run: &Path,
    kubelet: &Path,
    state: &Path,
    log: &Path,
) -> std::process::Child {
    use std::os::fd::AsRawFd;
    let mut script = String::new();
    for (i, l) in held.iter().enumerate() {
        // Inherited across exec only without close-on-exec.
        rustix::io::fcntl_setfd(l, rustix::io::FdFlags::empty()).unwrap();
        script += &format!("exec {}<&{} {}<&-; ", 500 + i, l.as_raw_fd(), l.as_raw_fd());
    }
    for i in 0..held.len() {
        script += &format!("exec {}<&{} {}<&-; ", 3 + i, 500 + i, 500 + i);
    }
    script += &format!("LISTEN_PID=$$ LISTEN_FDS={} exec \"$0\" \"$@\"", held.len());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("--kubelet-path={}", kubelet.display()))
        .arg(format!("--socket-dir={}", run.display()))
        .arg(format!("--state-dir={}", state.display()))
        .arg("-v=2")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    if !common::every_process_readable() {
        cmd.arg("--skip-unreadable-processes");
    }
    let child = cmd.spawn().unwrap();
    for l in held {
        rustix::io::fcntl_setfd(l, rustix::io::FdFlags::CLOEXEC).unwrap();
    }
    child
}

/// The lines of `text` past the header block klog writes at the top of a file.
fn klog_lines(text: &str) -> Vec<&str> {
    let body = text.split_once("] msg\n").map_or(text, |(_, rest)| rest);
    body.lines().collect()
}

/// klog's flags as upstream's daemon takes them: `-log_dir` with `-logtostderr=false` makes
/// klog's `<program>.<host>.<user>.log.INFO.<time>.<pid>` file and its `<program>.INFO` link
/// (the directory used to be left unmade and the log went to stderr), `-alsologtostderr`
/// writes stderr too (it used to be dropped), and every line of both parses in klog's format.
#[tokio::test]
async fn klog_flags_write_klogs_files_and_lines() {
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path().display().to_string();
    let d = Daemon::start(&[
        "-logtostderr=false",
        &format!("-log_dir={dir}"),
        "-alsologtostderr",
    ]);
    let mut fs = FilesystemClient::connect(&d.connector()).await.unwrap();
    let _ = fs.path_exists(&d.k("missing")).await;
    let pid = d.child.id();
    let target = std::fs::read_link(logs.path().join("csi-proxy.INFO")).expect("INFO link");
    let name = target.display().to_string();
    let parts: Vec<&str> = name.split('.').collect();
    assert_eq!(parts.len(), 7, "{name}");
    assert_eq!(
        (parts[0], parts[3], parts[4]),
        ("csi-proxy", "log", "INFO"),
        "{name}"
    );
    assert_eq!(parts[6], pid.to_string(), "{name}");
    let file = std::fs::read_to_string(logs.path().join(&target)).unwrap();
    assert!(file.starts_with("Log file created at: "), "{file}");
    for (what, text) in [("file", file.clone()), ("stderr", d.log())] {
        let lines = klog_lines(&text);
        assert!(
            lines.iter().any(|l| l.contains("starting csi-proxy")),
            "{what}: {text}"
        );
        for l in lines {
            let (_, line_pid, ..) = parse_klog_line(l).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(line_pid, pid, "{what}: {l}");
        }
    }

    // -log_file with -alsologtostderr: both outputs get every line (stderr used to get none).
    let file = logs.path().join("one.log");
    let d = Daemon::start(&[
        "-logtostderr=false",
        &format!("-log_file={}", file.display()),
        "-alsologtostderr=1",
    ]);
    let text = std::fs::read_to_string(&file).unwrap();
    for (what, text) in [("file", text), ("stderr", d.log())] {
        let lines = klog_lines(&text);
        assert!(
            lines.iter().any(|l| l.contains("starting csi-proxy")),
            "{what}: {text}"
        );
        assert!(
            lines.iter().all(|l| parse_klog_line(l).is_ok()),
            "{what}: {text}"
        );
    }
}
