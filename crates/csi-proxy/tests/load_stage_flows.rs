//! Load: 1,000 client connections held open while 64 stage flows run on 64 loop disks, with one
//! more disk's FormatVolume frozen mid-way (its mkfs stopped with SIGSTOP) the whole time. Every
//! flow succeeds, the frozen disk blocks no other disk, and the daemon's memory stays bounded and
//! returns near idle. The daemon, started from a soft open-file limit of 1,024, has raised it
//! itself for the connections. Needs root, losetup and a hard open-file limit above what the load
//! needs; skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Daemon, LoopDisk, Thaw, call_raw, nofile_limits, partition_one, put_bytes, set_soft_nofile,
    spawn_format, v1_clients, wait_for_child,
};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

const CONNECTIONS: usize = 1000;
const FLOWS: usize = 64;
/// Open files the daemon needs: one per connection, and room for its sockets, loop disks and
/// the tools it runs.
const NOFILE_NEEDED: u64 = CONNECTIONS as u64 + 256;

/// Partition, format, mount, write, stat, unmount: the node-stage half of a CSI driver's work.
/// Returns how many times UnmountVolume answered "busy" before it succeeded.
async fn stage_flow(d: Arc<Daemon>, n: u32, i: usize) -> Result<u32, String> {
    let err = |what: &str, s: tonic::Status| format!("flow {i} (disk {n}) {what}: {s:?}");
    let (mut dc, mut vc) = v1_clients(&d).await;
    dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
        .await
        .map_err(|s| err("PartitionDisk", s))?;
    let ids = vc
        .list_volumes_on_disk(v1::ListVolumesOnDiskRequest {
            disk_number: n,
            partition_number: 0,
        })
        .await
        .map_err(|s| err("ListVolumesOnDisk", s))?
        .into_inner()
        .volume_ids;
    let id = ids.first().cloned().ok_or(format!("flow {i}: no volume"))?;
    vc.format_volume(v1::FormatVolumeRequest {
        volume_id: id.clone(),
    })
    .await
    .map_err(|s| err("FormatVolume", s))?;
    let stage = d.k(&format!("plugins/load/pv{i}/globalmount"));
    std::fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
    vc.mount_volume(v1::MountVolumeRequest {
        volume_id: id.clone(),
        target_path: stage.clone(),
    })
    .await
    .map_err(|s| err("MountVolume", s))?;
    std::fs::write(Path::new(&stage).join("f"), format!("flow {i}")).map_err(|e| e.to_string())?;
    let stats = vc
        .get_volume_stats(v1::GetVolumeStatsRequest {
            volume_id: id.clone(),
        })
        .await
        .map_err(|s| err("GetVolumeStats", s))?
        .into_inner();
    if stats.total_bytes <= 0 {
        return Err(format!("flow {i}: total_bytes {}", stats.total_bytes));
    }
    // Nothing uses the filesystem now, so "busy" can only be transient; it is retried (as
    // kubelet would) and counted, and the test fails on any at the end, after the figures.
    let mut busy = 0;
    loop {
        let r = vc
            .unmount_volume(v1::UnmountVolumeRequest {
                volume_id: id.clone(),
                target_path: stage.clone(),
            })
            .await;
        match r {
            Ok(_) => break,
            Err(s) if s.message().contains("busy") && busy < 40 => {
                busy += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => return Err(err("UnmountVolume", s)),
        }
    }
    Ok(busy)
}

/// Opens [`CONNECTIONS`] connections spread over the endpoints, and uses every filesystem v1 one.
async fn open_connections(
    d: &Daemon,
    probe: &[u8],
) -> Vec<((&'static str, &'static str), tonic::transport::Channel)> {
    let t0 = Instant::now();
    let groups: Vec<(&str, &str)> = csi_proxy_api::GROUPS
        .iter()
        .flat_map(|g| {
            csi_proxy_api::versions(g)
                .unwrap()
                .iter()
                .map(move |v| (*g, *v))
        })
        .collect();
    let mut held = Vec::with_capacity(CONNECTIONS);
    for i in 0..CONNECTIONS {
        // Half on filesystem v1 (probed below), the rest spread over every endpoint.
        let (g, v) = if i % 2 == 0 {
            ("filesystem", "v1")
        } else {
            groups[i % groups.len()]
        };
        held.push(((g, v), d.connector().channel(g, v).await.unwrap()));
    }
    probe_all(&held, probe).await;
    eprintln!(
        "{CONNECTIONS} connections open and used in {:?}",
        t0.elapsed()
    );
    held
}

/// One PathExists on every held filesystem v1 connection, all at once.
async fn probe_all(held: &[((&str, &str), tonic::transport::Channel)], probe: &[u8]) {
    let mut probes = JoinSet::new();
    for (_, ch) in held.iter().filter(|(gv, _)| *gv == ("filesystem", "v1")) {
        let (ch, body) = (ch.clone(), probe.to_vec());
        probes.spawn(async move {
            call_raw(
                &ch,
                "/v1.Filesystem/PathExists",
                body,
                Some(Duration::from_secs(60)),
            )
            .await
        });
    }
    while let Some(r) = probes.join_next().await {
        assert_eq!(r.unwrap().unwrap(), vec![0x08, 0x01]);
    }
}

/// The daemon's thread count (`/proc/<pid>/status`).
fn threads(d: &Daemon) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", d.child.id()))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Extra resident memory the daemon may keep once settled after the load.
const NEAR_IDLE_KIB: u64 = 16 * 1024;

/// The daemon's RSS once it settles: its connections closed, the blocking threads of the load
/// gone (tokio lets an idle blocking thread live 10 s), and the freed heap given back (the
/// daemon does that after 5 to 10 s without requests), or after 20 s each.
async fn settled_rss(d: &Daemon, idle_threads: u64, idle_rss: u64) -> u64 {
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", d.child.id()))
            .map(|r| r.count())
            .unwrap_or(0)
    };
    let (fds_before, threads_before) = (fds(), threads(d));
    let t = Instant::now();
    while threads(d) > idle_threads + 2 && t.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let t2 = Instant::now();
    while d.rss_kib() > idle_rss + NEAR_IDLE_KIB && t2.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "daemon settled in {:?}: fds {fds_before} -> {}, threads {threads_before} -> {}",
        t.elapsed(),
        fds(),
        threads(d)
    );
    d.rss_kib()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_connections_and_64_stage_flows_with_one_frozen_disk() {
    // The daemon starts from the usual soft limit of 1,024 (systemd's, a login shell's), so the
    // check below sees the daemon's own raise and not a limit it inherited from this shell.
    let me = std::process::id();
    let (my_soft, my_hard) = nofile_limits(me).expect("/proc/self/limits");
    let _ = set_soft_nofile(me, my_soft.min(1024));
    let d = Daemon::start_env(&[], &[("MALLOC_ARENA_MAX", "2")]);
    let _ = set_soft_nofile(me, my_soft);
    let dir = d.dir.path().to_path_buf();
    // The frozen disk first: if loop disks cannot be made, skip before anything heavy.
    let Some(frozen) = LoopDisk::or_skip(&dir, "frozen", 64) else {
        return;
    };
    // The daemon raises its soft open-file limit to its hard limit at start-up; with the hard
    // limit below what the load needs, neither the daemon nor this test can have enough.
    let (soft, hard) = nofile_limits(d.child.id()).expect("/proc/<daemon>/limits");
    if hard.min(my_hard) < NOFILE_NEEDED {
        eprintln!(
            "SKIPPED: the hard open-file limit (daemon {hard}, test {my_hard}) is below the \
             {NOFILE_NEEDED} the load needs"
        );
        return;
    }
    assert!(
        soft >= NOFILE_NEEDED,
        "the daemon raised its soft open-file limit for {CONNECTIONS} connections: soft {soft}, \
         hard {hard}, needed {NOFILE_NEEDED}"
    );
    // This process holds the client side of every connection.
    if my_soft < NOFILE_NEEDED
        && let Err(why) = set_soft_nofile(me, my_hard.min(8192))
    {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let mut disks = Vec::new();
    for i in 0..FLOWS {
        disks.push(LoopDisk::new(&dir, &format!("load{i}"), 64).unwrap());
    }
    let d = Arc::new(d);
    let probe = {
        let mut b = Vec::new();
        put_bytes(&mut b, 1, d.kubelet.display().to_string().as_bytes());
        b
    };

    // Warm up every path once, then take the idle figure.
    stage_flow(d.clone(), disks[0].disk_number(), 0)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    let idle = d.rss_kib();
    let idle_threads = threads(&d);

    // Memory sampler: the peak while the load runs.
    let peak = Arc::new(AtomicU64::new(idle));
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (d, peak, running) = (d.clone(), peak.clone(), running.clone());
        tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                peak.fetch_max(d.rss_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // 1,000 connections, each used once and then held open.
    let held = open_connections(&d, &probe).await;

    // Freeze one disk's FormatVolume mid-way: its mkfs is stopped until the flows are done.
    let n = frozen.disk_number();
    let (mut dc, mut vc) = v1_clients(&d).await;
    let frozen_id = partition_one(&mut dc, &mut vc, n).await;
    let slow = spawn_format(&vc, &frozen_id);
    let (mkfs, _) = wait_for_child(d.child.id(), &["mkfs", "mke2fs"], Duration::from_secs(20))
        .await
        .expect("FormatVolume runs mkfs");
    let thaw = Thaw::stop(mkfs);

    // 64 stage flows at once, on the other disks.
    let t1 = Instant::now();
    let mut flows = JoinSet::new();
    for (i, disk) in disks.iter().enumerate().skip(1) {
        flows.spawn(stage_flow(d.clone(), disk.disk_number(), i));
    }
    // The warm-up flow used disk 0; one more flow on it keeps the count at 64 (idempotent).
    flows.spawn(stage_flow(d.clone(), disks[0].disk_number(), 0));
    let mut failures = Vec::new();
    let mut ok = 0;
    let mut busy = 0;
    while let Some(r) = flows.join_next().await {
        match r.unwrap() {
            Ok(b) => {
                ok += 1;
                busy += b;
            }
            Err(e) => failures.push(e),
        }
    }
    let flows_took = t1.elapsed();
    assert!(failures.is_empty(), "failed flows: {failures:#?}");
    assert_eq!(ok, FLOWS);
    assert!(
        !slow.is_finished(),
        "the frozen FormatVolume cannot have finished while its mkfs is stopped"
    );
    eprintln!("{FLOWS} stage flows done in {flows_took:?} while disk {n} stayed frozen");

    // Every held connection still answers.
    probe_all(&held, &probe).await;

    // Thaw: the frozen format completes.
    drop(thaw);
    slow.await
        .unwrap()
        .expect("the frozen FormatVolume completes once thawed");
    assert!(
        vc.is_volume_formatted(v1::IsVolumeFormattedRequest {
            volume_id: frozen_id
        })
        .await
        .unwrap()
        .into_inner()
        .formatted
    );

    // Close everything and let the daemon settle.
    drop(held);
    let after = settled_rss(&d, idle_threads, idle).await;

    // More rounds on the same disks (every step is idempotent). Memory that leaks per
    // connection or per flow grows every round; allocator pages kept for reuse stop growing.
    let mut rounds = vec![after];
    for _ in 0..2 {
        let held = open_connections(&d, &probe).await;
        let mut flows = JoinSet::new();
        for (i, disk) in disks.iter().enumerate() {
            flows.spawn(stage_flow(d.clone(), disk.disk_number(), i));
        }
        while let Some(r) = flows.join_next().await {
            busy += r.unwrap().unwrap();
        }
        drop(held);
        rounds.push(settled_rss(&d, idle_threads, idle).await);
    }
    running.store(false, Ordering::Relaxed);
    sampler.await.unwrap();
    let peak = peak.load(Ordering::Relaxed);
    eprintln!("daemon RSS: idle {idle} KiB, peak {peak} KiB, after each round {rounds:?} KiB");
    assert!(
        peak < idle + 512 * 1024,
        "memory is bounded under load: idle {idle} KiB, peak {peak} KiB"
    );
    assert!(
        after <= idle + NEAR_IDLE_KIB,
        "memory returns near idle: idle {idle} KiB, after {after} KiB (peak {peak} KiB)"
    );
    let (second, third) = (rounds[1], rounds[2]);
    assert!(
        third < second + 8 * 1024,
        "no growth per round: after each round {rounds:?} KiB"
    );
    assert_eq!(
        busy, 0,
        "UnmountVolume answered \"busy\" {busy} times under load although nothing used the \
         filesystems (every retry succeeded): a transient reference, such as a directory fd \
         copied into a child the daemon was spawning at that moment"
    );
    drop(disks);
    drop(frozen);
}
