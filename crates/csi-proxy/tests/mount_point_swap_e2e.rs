//! A mount point swapped under the volume RPCs that act on a mounted volume: a client mounts its
//! own volume at `evil/a/mnt`, makes a FIFO at `evil/b/mnt` and exchanges `a` and `b`
//! (`renameat2(RENAME_EXCHANGE)`, as fast as it can) while WriteVolumeCache, GetVolumeStats and
//! ResizeVolume (a step larger each time, so every call grows the filesystem) are called over and
//! over through the real daemon's socket, on a real loop disk with a real xfs.
//!
//! With the mount point's path read from the mount table and opened again, WriteVolumeCache
//! opened the FIFO within a few calls and blocked in it holding the disk's lock: every later call
//! on the disk ran into its deadline. ResizeVolume did the same through `xfs_growfs`, even when
//! handed the root held open: the tool looks the mount point up in the mount table itself and
//! opens that path (strace: `openat(AT_FDCWD, "<mount point>", O_RDONLY)`). Now each call acts
//! on the mount's root held open and checked to be that mount (growth by the kernel's ioctl on
//! it), or fails cleanly; none waits past its deadline, and the disk still answers afterwards.
//! Needs root (loop devices, mount); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, is_mounted};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1 as vol1;
use rustix::fs::{CWD, FileType, Mode, OFlags, RenameFlags, mknodat, renameat_with};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::Code;
use vol1::volume_client::VolumeClient;

/// How long the calls are raced against the swapping.
const RACE: Duration = Duration::from_secs(3);
/// Each call's deadline (sent as grpc-timeout); the client waits a little longer for the answer.
const DEADLINE: Duration = Duration::from_secs(15);

const MIB: i64 = 1 << 20;
/// The disk's size once grown for the race (a sparse file); each ResizeVolume asks for [`STEP`]
/// more, the least growth the daemon acts on, so that every call reaches the filesystem.
const DISK_MIB: u64 = 8192;
const STEP: i64 = 100 * MIB;

/// A thread exchanging `evil/a` and `evil/b` until stopped.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(a: PathBuf, b: PathBuf) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), swaps.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                renameat_with(CWD, &a, CWD, &b, RenameFlags::EXCHANGE).unwrap();
                n.fetch_add(1, Ordering::Relaxed);
            }
        });
        Swapper {
            stop,
            swaps,
            thread: Some(thread),
        }
    }

    fn stop(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Opens the FIFO at `path` for writing without blocking: a reader blocked in opening it (the
/// old daemon) is released, so a failed run still ends and cleans up.
fn release_readers(path: &Path) {
    let _ = rustix::fs::open(path, OFlags::WRONLY | OFlags::NONBLOCK, Mode::empty());
}

/// What one call answered.
enum Answer {
    Ok,
    /// Failed cleanly, with this code and message.
    Failed(Code, String),
    /// Ran into its deadline (or past it).
    Hung(String),
}

fn answer<T>(
    r: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
) -> Answer {
    match r {
        Err(_) => Answer::Hung("no answer past the deadline".into()),
        Ok(Ok(_)) => Answer::Ok,
        Ok(Err(s)) if s.code() == Code::DeadlineExceeded => Answer::Hung(s.message().into()),
        Ok(Err(s)) => Answer::Failed(s.code(), s.message().into()),
    }
}

fn timed<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(DEADLINE);
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_swapped_in_for_the_mount_point_never_blocks_the_disk() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&["--format-filesystem", "xfs"]);
    let l = LoopDisk::new(d.dir.path(), "swap", 400).unwrap();
    let c = d.connector();
    let mut disk = d1::disk_client::DiskClient::new(c.channel("disk", "v1").await.unwrap());
    let mut vol = VolumeClient::new(c.channel("volume", "v1").await.unwrap());
    let serial = l.serial();
    let found = common::disks_by_serial(&mut disk, |s| s == serial).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let n = found[0];
    disk.partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .unwrap();
    let id = vol
        .list_volumes_on_disk(vol1::ListVolumesOnDiskRequest {
            disk_number: n,
            partition_number: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .volume_ids
        .remove(0);
    vol.format_volume(vol1::FormatVolumeRequest {
        volume_id: id.clone(),
    })
    .await
    .unwrap();

    // The client's own volume at evil/a/mnt, a FIFO at evil/b/mnt.
    let evil = PathBuf::from(d.k("plugins/evil"));
    let (a, b) = (evil.join("a"), evil.join("b"));
    std::fs::create_dir_all(a.join("mnt")).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    mknodat(
        CWD,
        b.join("mnt"),
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let mnt = a.join("mnt");
    vol.mount_volume(vol1::MountVolumeRequest {
        volume_id: id.clone(),
        target_path: mnt.display().to_string(),
    })
    .await
    .unwrap();
    assert!(is_mounted(&mnt));
    // Room to grow, so ResizeVolume reaches the filesystem on every call of the race.
    l.grow_to(DISK_MIB);
    disk.rescan(d1::RescanRequest {}).await.unwrap();
    // Measured before the swaps start: during them GetVolumeStats may rightly answer ABORTED.
    let first_size = stats_total(&mut vol, &id).await;

    let mut swapper = Swapper::start(a.clone(), b.clone());
    let start = Instant::now();
    let (mut calls, mut ok, mut hung) = (0u32, 0u32, Vec::new());
    let mut failed: Vec<(Code, String)> = Vec::new();
    // The disk's size before it grew: more than the partition, so every call grows.
    let (mut size, mut grown) = (400 * MIB, 0u32);
    'race: while start.elapsed() < RACE {
        let v = id.clone();
        size = (size + STEP).min(DISK_MIB as i64 * MIB - 2 * MIB);
        let limit = DEADLINE + Duration::from_secs(5);
        let answers = [
            (
                "WriteVolumeCache",
                answer(
                    tokio::time::timeout(
                        limit,
                        vol.write_volume_cache(timed(vol1::WriteVolumeCacheRequest {
                            volume_id: v.clone(),
                        })),
                    )
                    .await,
                ),
            ),
            (
                "GetVolumeStats",
                match tokio::time::timeout(
                    limit,
                    vol.get_volume_stats(timed(vol1::GetVolumeStatsRequest {
                        volume_id: v.clone(),
                    })),
                )
                .await
                {
                    // Only the volume's own figures: never those of the filesystem the FIFO
                    // is on (the host's).
                    Ok(Ok(r)) => {
                        let total = r.into_inner().total_bytes;
                        assert!(
                            total > 300 * MIB && total <= DISK_MIB as i64 * MIB,
                            "GetVolumeStats answered about another filesystem: {total} bytes"
                        );
                        Answer::Ok
                    }
                    other => answer(other),
                },
            ),
            (
                "ResizeVolume",
                match answer(
                    tokio::time::timeout(
                        limit,
                        vol.resize_volume(timed(vol1::ResizeVolumeRequest {
                            volume_id: v.clone(),
                            size_bytes: size,
                        })),
                    )
                    .await,
                ) {
                    Answer::Ok => {
                        grown += 1;
                        Answer::Ok
                    }
                    other => other,
                },
            ),
        ];
        for (rpc, a) in answers {
            calls += 1;
            match a {
                Answer::Ok => ok += 1,
                Answer::Failed(code, msg) => failed.push((code, format!("{rpc}: {msg}"))),
                Answer::Hung(msg) => {
                    hung.push(format!("{rpc}: {msg}"));
                    break 'race;
                }
            }
        }
    }
    let swaps = swapper.stop();
    release_readers(&a.join("mnt"));
    release_readers(&b.join("mnt"));
    eprintln!(
        "{calls} calls during {swaps} swaps: {ok} acted on the volume ({grown} grew it), {} failed cleanly, {} hung",
        failed.len(),
        hung.len()
    );
    assert!(hung.is_empty(), "calls ran into their deadline: {hung:?}");
    // The only clean failure: the mount point no longer led to the mount when the daemon
    // opened it (nothing was done through it).
    for (code, msg) in &failed {
        let moved = *code == Code::Aborted && msg.contains("mount point changed");
        assert!(moved, "{code:?}: {msg}");
    }
    assert!(swaps > 0);
    assert!(
        grown > 0,
        "no ResizeVolume reached the filesystem during the race"
    );

    // The disk still answers: nothing holds its lock.
    let mounted_at = [a.join("mnt"), b.join("mnt")]
        .into_iter()
        .find(|p| is_mounted(p))
        .expect("the volume is still mounted");
    let t = Instant::now();
    let r = tokio::time::timeout(
        DEADLINE,
        vol.write_volume_cache(timed(vol1::WriteVolumeCacheRequest {
            volume_id: id.clone(),
        })),
    )
    .await;
    assert!(
        matches!(r, Ok(Ok(_))),
        "WriteVolumeCache after the race: {r:?} after {:?}",
        t.elapsed()
    );
    let stats = vol
        .get_volume_stats(timed(vol1::GetVolumeStatsRequest {
            volume_id: id.clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(stats.total_bytes > 300 * MIB, "{stats:?}");
    // What the race's successful calls grew is the volume's own filesystem.
    assert!(
        stats.total_bytes > first_size,
        "{stats:?}, {first_size} before"
    );
    vol.unmount_volume(vol1::UnmountVolumeRequest {
        volume_id: id,
        target_path: mounted_at.display().to_string(),
    })
    .await
    .unwrap();
}

/// The volume's filesystem size (GetVolumeStats).
async fn stats_total(vol: &mut VolumeClient<tonic::transport::Channel>, id: &str) -> i64 {
    vol.get_volume_stats(timed(vol1::GetVolumeStatsRequest {
        volume_id: id.into(),
    }))
    .await
    .unwrap()
    .into_inner()
    .total_bytes
}
