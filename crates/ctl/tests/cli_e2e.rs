//! The CLI against a real daemon (the workspace's `csi-proxy` binary) on Unix sockets.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The daemon binary of this workspace. `cargo test --workspace` builds it next to the CLI; a
/// test of this package alone cannot name it through `CARGO_BIN_EXE_*`, so then it is built into
/// a target dir of its own (the running cargo holds the lock of the main one).
fn daemon_binary() -> PathBuf {
    let ctl = PathBuf::from(env!("CARGO_BIN_EXE_csi-proxy-ctl"));
    let bin = ctl.with_file_name("csi-proxy");
    if bin.exists() {
        return bin;
    }
    let own = ctl
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("ctl-test-daemon");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "-p", "csi-proxy", "--target-dir"])
        .arg(&own)
        .status()
        .unwrap()
        .success();
    assert!(ok, "building the daemon failed");
    own.join("debug/csi-proxy")
}

struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

/// Whether PID 1's descriptors cannot be read by this (root) process.
fn init_unreadable() -> bool {
    let denied = |e: std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    match std::fs::read_dir("/proc/1/fd") {
        Ok(mut fds) => fds
            .next()
            .and_then(Result::ok)
            .is_some_and(|fd| std::fs::read_link(fd.path()).is_err_and(denied)),
        Err(e) => denied(e),
    }
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = dir.path().join("kubelet");
        std::fs::create_dir_all(&kubelet).unwrap();
        let mut cmd = Command::new(daemon_binary());
        // The daemon's in-use check reads every process's descriptors and refuses every write
        // when it may not (this VM's init holds a capability its root lacks): skip those here.
        if init_unreadable() {
            cmd.arg("--skip-unreadable-processes");
        }
        let child = cmd
            .arg(format!("-kubelet-path={}", kubelet.display()))
            .arg(format!("--socket-dir={}", dir.path().join("run").display()))
            .arg(format!(
                "--state-dir={}",
                dir.path().join("state").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let last = dir.path().join("run/csi-proxy-iscsi-v1alpha2.sock");
        let t = Instant::now();
        while !last.exists() {
            assert!(t.elapsed() < Duration::from_secs(20), "no sockets");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, dir }
    }

    fn sockets(&self) -> PathBuf {
        self.dir.path().join("run")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ctl(sockets: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_csi-proxy-ctl"))
        .arg(format!("--socket-dir={}", sockets.display()))
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn health_lists_all_23_endpoints_serving() {
    let d = Daemon::start();
    let out = ctl(&d.sockets(), &["health", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let doc = json(&out);
    let eps = doc["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 23);
    assert!(eps.iter().all(|e| e["status"] == "SERVING"), "{doc}");
    assert_eq!(doc["errors"], serde_json::json!([]));

    let table = ctl(&d.sockets(), &["health"]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.starts_with("GROUP"), "{text}");
    assert_eq!(text.lines().count(), 24, "{text}");
}

/// Disk and volume listings: whatever this build's hosts support, the output is well-formed JSON,
/// and a daemon error gives exit code 1 with a message naming the RPC and the code.
#[test]
fn disk_and_volume_listings_are_json_or_name_the_failing_call() {
    let d = Daemon::start();
    for args in [
        &["disks", "-o", "json"][..],
        &["volumes", "-o", "json"],
        &["iscsi", "portals", "-o", "json"],
        &["iscsi", "sessions", "-o", "json"],
    ] {
        let out = ctl(&d.sockets(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => {
                let doc = json(&out);
                assert!(doc["errors"].as_array().unwrap().is_empty(), "{doc}");
            }
            Some(1) => {
                // UNIMPLEMENTED where this platform's host is not plugged in yet, or a host
                // error: either way the message names the RPC, group, version and code.
                assert!(
                    err.contains("(disk v1)")
                        || err.contains("(volume v1)")
                        || err.contains("(iscsi v1alpha2)"),
                    "{args:?}: {err}"
                );
            }
            other => panic!("{args:?}: exit {other:?}: {err}"),
        }
    }
}

#[test]
fn smb_mappings_reads_the_node_mount_table() {
    let d = Daemon::start();
    let out = ctl(&d.sockets(), &["smb", "mappings", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let doc = json(&out);
    assert_eq!(doc["smb_api"], "v1");
    assert!(doc["mappings"].is_array());
}

#[test]
fn a_daemon_that_is_down_gives_exit_code_3_and_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["disks"][..], &["health"], &["volumes", "--disk", "0"]] {
        let out = ctl(dir.path(), args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("daemon not reachable"), "{err}");
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn bad_usage_is_exit_code_2() {
    let out = ctl(Path::new("/nonexistent"), &["nonsense"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `selftest` needs Windows' virtual disk API: elsewhere it is one failed step saying so, in
/// both output formats, with exit code 1 (the step sequence itself is tested over the simulated
/// Windows: crates/csi-proxy/tests/selftest_windows_sim.rs).
#[test]
fn selftest_off_windows_is_one_failed_step_saying_why() {
    let out = ctl(Path::new("/nonexistent"), &["selftest", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let doc = json(&out);
    assert_eq!(doc["passed"], false, "{doc}");
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{doc}");
    assert_eq!(steps[0]["step"], "virtual disk service");
    assert_eq!(steps[0]["result"], "FAILED");
    assert!(
        steps[0]["answer"].as_str().unwrap().contains("Windows"),
        "{doc}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("selftest failed at virtual disk service"),
        "{err}"
    );

    let table = ctl(Path::new("/nonexistent"), &["selftest"]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.starts_with("STEP"), "{text}");
    assert!(text.contains("FAILED"), "{text}");
}

/// A loop device over a sparse file; detached on drop.
struct LoopDisk {
    dev: String,
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|u| u.split_whitespace().next() == Some("0"))
}

#[test]
fn disks_and_volumes_show_a_loop_disk_through_the_stage_flow() {
    if !is_root() {
        eprintln!("SKIPPED: loop devices need root");
        return;
    }
    let d = Daemon::start();
    let file = d.dir.path().join("ctl-disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let out = match Command::new("losetup")
        .args(["-fP", "--show"])
        .arg(&file)
        .output()
    {
        Ok(o) if o.status.success() => o,
        other => {
            eprintln!("SKIPPED: losetup cannot attach a loop device here: {other:?}");
            return;
        }
    };
    let _lo = LoopDisk {
        dev: String::from_utf8(out.stdout).unwrap().trim().to_string(),
    };

    let out = ctl(&d.sockets(), &["disks", "-o", "json"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    if out.status.code() == Some(1) && err.contains("Unimplemented") {
        eprintln!("SKIPPED: the disk host is not plugged in on this platform: {err}");
        return;
    }
    let doc = json(&out);
    let file_s = file.display().to_string();
    let disk = doc["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["serial"] == file_s.as_str())
        .unwrap_or_else(|| panic!("loop disk not listed: {doc}"))
        .clone();
    assert_eq!(disk["size"], 64 << 20, "{disk}");
    assert_eq!(disk["online"], true, "{disk}");
    let n = u32::try_from(disk["number"].as_u64().unwrap()).unwrap();

    // Partition, format and mount through the daemon, checking the listing after each step.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = csi_proxy_client::Connector::SocketDir(d.sockets());
    let target = d.dir.path().join("kubelet/ctl-target");
    std::fs::create_dir_all(&target).unwrap();
    let target = target.display().to_string();
    let volume = rt.block_on(async {
        let mut dc = csi_proxy_client::disk::DiskClient::connect(&c)
            .await
            .unwrap();
        dc.partition_disk(n).await.unwrap();
        let mut vc = csi_proxy_client::volume::VolumeClient::connect(&c)
            .await
            .unwrap();
        vc.list_volumes_on_disk(n, 0).await.unwrap().remove(0)
    });
    let nd = n.to_string();
    let out = ctl(&d.sockets(), &["volumes", "--disk", &nd, "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let doc = json(&out);
    let row = &doc["volumes"][0];
    assert_eq!(row["id"], volume.as_str(), "{doc}");
    assert_eq!(row["disk"], n, "{doc}");
    assert_eq!(row["partition"], 1, "{doc}");
    assert_eq!(row["formatted"], false, "{doc}");

    rt.block_on(async {
        let mut vc = csi_proxy_client::volume::VolumeClient::connect(&c)
            .await
            .unwrap();
        vc.format(&volume).await.unwrap();
        vc.mount(&volume, &target).await.unwrap();
    });
    let out = ctl(&d.sockets(), &["volumes", "--disk", &nd, "-o", "json"]);
    let doc = json(&out);
    let row = &doc["volumes"][0];
    let unmount = || {
        rt.block_on(async {
            let mut vc = csi_proxy_client::volume::VolumeClient::connect(&c)
                .await
                .unwrap();
            vc.unmount(&volume, &target).await
        })
    };
    let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(out.status.success(), "{out:?}");
        assert_eq!(row["formatted"], true, "{doc}");
        assert!(row["size"].as_i64().unwrap() > 32 << 20, "{doc}");
        assert!(row["used"].as_i64().unwrap() >= 0, "{doc}");
        // Mount points: the node's block-device mounts resolved with GetVolumeIDFromTargetPath.
        assert_eq!(row["filesystem"], "ext4", "{doc}");
        assert_eq!(
            row["mount_points"],
            serde_json::json!([target.clone()]),
            "{doc}"
        );
        let table =
            String::from_utf8(ctl(&d.sockets(), &["volumes", "--disk", &nd]).stdout).unwrap();
        assert!(table.starts_with("ID"), "{table}");
        assert!(table.contains(&volume), "{table}");
    }));
    unmount().unwrap();
    if let Err(p) = checks {
        std::panic::resume_unwind(p);
    }
}
