//! Client deadlines and daemon restarts: a deadline that passes answers DEADLINE_EXCEEDED and
//! leaves the host in a state a retry completes; clients made before a restart keep working.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Daemon, LoopDisk, VolumeClient, call_raw, partition_one, put_bytes, retry_unavailable,
    v1_clients, volumes_on, wrap_tool,
};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::volume::v1;
use std::time::{Duration, Instant};
use tonic::Code;

fn with_deadline<T>(msg: T, t: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(t);
    r
}

/// How long a retry may find the object still held by the work a deadline cut off.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// FormatVolume, retried while the format a deadline cut off still holds the volume.
async fn format_retried(vc: &VolumeClient, id: &str) {
    retry_unavailable("FormatVolume", RETRY_FOR, || {
        let (mut vc, volume_id) = (vc.clone(), id.to_string());
        async move {
            vc.format_volume(v1::FormatVolumeRequest { volume_id })
                .await
        }
    })
    .await;
}

/// Checks the status of a call whose deadline `t` passed.
///
/// The daemon answers DEADLINE_EXCEEDED a little before the deadline (a tenth of it, 5 to
/// 100 ms, at most half of it; the server crate's `spec_status`). A tonic client also enforces the deadline itself and,
/// when its own timer wins (short deadlines, or a loaded machine delaying the daemon's answer
/// past the deadline), reports tonic's CANCELLED "Timeout expired" without waiting for the
/// daemon; grpc-go clients report DEADLINE_EXCEEDED locally then. `daemon_must_win` is for
/// deadlines long enough that the daemon's answer always arrives first.
fn assert_deadline(what: &str, t: Duration, s: &tonic::Status, daemon_must_win: bool) {
    let local = s.code() == Code::Cancelled && s.message() == "Timeout expired";
    if local && !daemon_must_win {
        return;
    }
    assert_eq!(s.code(), Code::DeadlineExceeded, "{what} with {t:?}: {s:?}");
    assert!(
        s.message().contains("deadline"),
        "{what}: the message says why: {}",
        s.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_deadline_is_deadline_exceeded_and_a_retry_completes() {
    let d = Daemon::start(&[]);
    let ch = d.connector().channel("filesystem", "v1").await.unwrap();
    let mut fs = f1::filesystem_client::FilesystemClient::new(ch.clone());
    // Slow host work: removing a tree of 6,000 entries takes far longer than 20 ms.
    let tree = d.kubelet.join("pods/big");
    for i in 0..60 {
        let dir = tree.join(format!("d{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for j in 0..100 {
            std::fs::write(dir.join(format!("f{j}")), b"x").unwrap();
        }
    }
    let target = tree.display().to_string();
    let t = Duration::from_millis(20);
    let started = Instant::now();
    let r = fs
        .rmdir(with_deadline(
            f1::RmdirRequest {
                path: target.clone(),
                force: true,
            },
            t,
        ))
        .await;
    let took = started.elapsed();
    let s = r.expect_err("removing 6,000 entries takes longer than 20 ms");
    assert_deadline("Rmdir", t, &s, false);
    assert!(
        took < t + Duration::from_millis(500),
        "the answer came {took:?} after the call, not at the deadline"
    );
    // The retry, without a deadline, completes (waiting for the work still running, or
    // finishing what it left), and the tree is gone.
    retry_unavailable("Rmdir", RETRY_FOR, || {
        let (mut fs, path) = (fs.clone(), target.clone());
        async move { fs.rmdir(f1::RmdirRequest { path, force: true }).await }
    })
    .await;
    assert!(!tree.exists(), "the retried Rmdir removed the tree");

    // Tiny deadlines: the client may give up before anything is sent; a retry still works.
    let dir = d.k("plugins/x/deep/dir");
    for t in [Duration::from_nanos(1), Duration::from_millis(1)] {
        if let Err(s) = fs
            .mkdir(with_deadline(f1::MkdirRequest { path: dir.clone() }, t))
            .await
        {
            assert_deadline("Mkdir", t, &s, false);
        }
    }
    fs.mkdir(f1::MkdirRequest { path: dir.clone() })
        .await
        .unwrap();
    assert!(std::path::Path::new(&dir).is_dir());
    let target = dir;

    // A generous deadline is no deadline: the call completes normally.
    fs.path_exists(with_deadline(
        f1::PathExistsRequest {
            path: target.clone(),
        },
        Duration::from_secs(30),
    ))
    .await
    .unwrap();

    // A raw `grpc-timeout` as grpc-go sends it ("<n><unit>") behaves the same.
    let mut body = Vec::new();
    put_bytes(&mut body, 1, target.as_bytes());
    let r = call_raw(
        &ch,
        "/v1.Filesystem/PathExists",
        body,
        Some(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(r.unwrap(), vec![0x08, 0x01]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_during_disk_work_leave_a_state_the_retry_completes() {
    // mkfs.ext4 goes through a wrapper that waits while a gate file exists: an operation held
    // up for as long as the test wants, whatever the machine's speed.
    let wrappers = tempfile::tempdir().unwrap();
    let gate = wrappers.path().join("gate");
    let path = wrap_tool(
        wrappers.path(),
        "mkfs.ext4",
        &format!("while [ -e '{}' ]; do sleep 0.02; done", gate.display()),
    );
    let d = Daemon::start_env(&[], &[("PATH", &path)]);
    let Some(disk) = LoopDisk::or_skip(d.dir.path(), "deadline", 128) else {
        return;
    };
    let (mut dc, mut vc) = v1_clients(&d).await;
    let n = disk.disk_number();

    for t in [1u64, 3, 10] {
        let r = dc
            .partition_disk(with_deadline(
                d1::PartitionDiskRequest { disk_number: n },
                Duration::from_millis(t),
            ))
            .await;
        if let Err(s) = r {
            assert_deadline("PartitionDisk", Duration::from_millis(t), &s, false);
        }
    }
    retry_unavailable("PartitionDisk", RETRY_FOR, || {
        let mut dc = dc.clone();
        async move {
            dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
                .await
        }
    })
    .await;
    let ids = volumes_on(&mut vc, n).await;
    assert_eq!(ids.len(), 1, "one partition after retries: {ids:?}");
    let id = ids[0].clone();

    let mut exceeded = 0;
    for t in [1u64, 30] {
        let r = vc
            .format_volume(with_deadline(
                v1::FormatVolumeRequest {
                    volume_id: id.clone(),
                },
                Duration::from_millis(t),
            ))
            .await;
        if let Err(s) = r {
            assert_deadline("FormatVolume", Duration::from_millis(t), &s, false);
            exceeded += 1;
        }
    }
    assert!(exceeded >= 1, "mkfs takes longer than 1 ms");
    format_retried(&vc, &id).await;
    assert!(common::is_formatted(&mut vc, &id).await);
    // A deadline long enough that the daemon's answer always arrives first, on an operation
    // held up for sure (its mkfs waits at the gate): DEADLINE_EXCEEDED comes from the daemon.
    let disk2 = LoopDisk::new(d.dir.path(), "deadline2", 64).unwrap();
    let id2 = partition_one(&mut dc, &mut vc, disk2.disk_number()).await;
    let t = Duration::from_secs(2);
    std::fs::write(&gate, b"").unwrap();
    let started = Instant::now();
    let s = vc
        .format_volume(with_deadline(
            v1::FormatVolumeRequest {
                volume_id: id2.clone(),
            },
            t,
        ))
        .await
        .expect_err("mkfs waits at the gate: the deadline passes");
    assert_deadline("FormatVolume (mkfs held)", t, &s, true);
    assert!(
        started.elapsed() < t,
        "the daemon answered before the deadline, after {:?}",
        started.elapsed()
    );
    // The format the deadline cut off goes on in the background once mkfs may run.
    std::fs::remove_file(&gate).unwrap();
    format_retried(&vc, &id2).await;

    // The filesystem is whole: it mounts and takes data.
    let stage = d.k("plugins/deadline/globalmount");
    std::fs::create_dir_all(&stage).unwrap();
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .unwrap();
    std::fs::write(format!("{stage}/f"), b"ok").unwrap();
    vc.unmount_volume(v1::UnmountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_every_group_made_before_a_restart_keep_working() {
    let mut d = Daemon::start(&[]);
    let c = d.connector();
    // Both kinds of channel the client crate makes: dialled now, and dialled on first use.
    let mut fs =
        f1::filesystem_client::FilesystemClient::new(c.channel("filesystem", "v1").await.unwrap());
    let mut fs_lazy =
        f1::filesystem_client::FilesystemClient::new(c.lazy_channel("filesystem", "v1"));
    let mut dc = d1::disk_client::DiskClient::new(c.channel("disk", "v1").await.unwrap());
    let probe = || f1::PathExistsRequest { path: d.k("") };
    let p = probe();
    fs.path_exists(p.clone()).await.unwrap();
    fs_lazy.path_exists(p.clone()).await.unwrap();
    dc.list_disk_locations(d1::ListDiskLocationsRequest {})
        .await
        .unwrap();

    for round in 0..3 {
        // SIGKILL: no GOAWAY, the connections just die.
        d.restart();
        let mut first_failures = Vec::new();
        for (name, r) in [
            ("eager", fs.path_exists(p.clone()).await.map(drop)),
            ("lazy", fs_lazy.path_exists(p.clone()).await.map(drop)),
            (
                "disk",
                dc.list_disk_locations(d1::ListDiskLocationsRequest {})
                    .await
                    .map(drop),
            ),
        ] {
            if let Err(s) = r {
                first_failures.push(format!("{name}: {:?} {}", s.code(), s.message()));
            }
        }
        assert!(
            first_failures.is_empty(),
            "round {round}: clients made before the restart failed their first call: \
             {first_failures:?}"
        );
    }
}
