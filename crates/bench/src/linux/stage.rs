//! The stage flow on loop disks (PartitionDisk, FormatVolume, MountVolume) and GetVolumeStats
//! on the mounted volume, through the daemon and directly.

use super::*;

/// A loop device over a sparse file; detached on drop.
pub(super) struct LoopDisk {
    pub(super) dev: String,
    pub(super) file: PathBuf,
}

impl LoopDisk {
    pub(super) fn attach(dir: &Path, name: &str, mib: u64) -> Result<LoopDisk, String> {
        let file = dir.join(name);
        let f = std::fs::File::create(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        f.set_len(mib * 1024 * 1024)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let out = Command::new("losetup")
            .args(["-fP", "--show"])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(LoopDisk { dev, file })
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        // The flows unmount through the API; this only catches what a failed run left.
        for part in [format!("{}p1", self.dev), self.dev.clone()] {
            let _ = Command::new("umount")
                .arg(&part)
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

pub(super) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// Partition, format, mount through the daemon (and the same steps in-process where this build
/// can make them), then GetVolumeStats on the mounted volume.
pub(super) async fn stage_flow(
    a: &Args,
    d: &Daemon,
    direct: &Direct,
    rows: &mut Vec<Row>,
    load: Duration,
) {
    const WHAT: &str = "stage flow (partition, format, mount)";
    if !is_root() {
        na(rows, WHAT, "needs root for loop devices");
        na(rows, "GetVolumeStats", "needs a loop device (root)");
        return;
    }
    let c = d.connector();
    let Ok(mut disk) = DiskClient::connect(&c).await else {
        na(rows, WHAT, "disk endpoint not reachable");
        return;
    };
    if let Err(s) = disk.list_disk_ids().await {
        let why = if s.code() == Code::Unimplemented {
            "the disk/volume hosts are not plugged in on this build".to_string()
        } else {
            format!("ListDiskIDs: {:?}: {}", s.code(), s.message())
        };
        na(rows, WHAT, &why);
        na(rows, "GetVolumeStats", &why);
        return;
    }
    let lo = match LoopDisk::attach(d.dir.path(), "bench-disk.img", a.disk_mib) {
        Ok(l) => l,
        Err(e) => {
            na(rows, WHAT, &e);
            na(rows, "GetVolumeStats", &e);
            return;
        }
    };
    // The same steps in-process, on a second loop disk of the same size.
    let lo2 = LoopDisk::attach(d.dir.path(), "bench-disk-direct.img", a.disk_mib);
    let daemon = daemon_flow(&c, &mut disk, &lo, &d.kubelet()).await;
    let direct_flow = match &lo2 {
        Ok(lo2) => direct_stage(direct, lo2, &d.kubelet()),
        Err(e) => Err(e.clone()),
    };
    let steps = |f: &[Duration; 3]| {
        format!(
            "{} (partition {}, format {}, mount {})",
            fmt_d(f.iter().sum()),
            fmt_d(f[0]),
            fmt_d(f[1]),
            fmt_d(f[2])
        )
    };
    match &daemon {
        Err(e) => {
            na(rows, WHAT, e);
            na(rows, "GetVolumeStats", e);
        }
        Ok((flow, volume_id, _)) => {
            let total = |f: &[Duration; 3]| f.iter().sum::<Duration>().as_secs_f64();
            rows.push(Row {
                what: format!("{WHAT}, {} MiB loop disk", a.disk_mib),
                daemon: steps(flow),
                direct: match &direct_flow {
                    Ok((f, _, _)) => steps(f),
                    Err(e) => format!("n/a: {e}"),
                },
                ratio: match &direct_flow {
                    Ok((f, _, _)) => ratio(total(flow), total(f)),
                    Err(_) => "-".into(),
                },
            });
            volume_stats(a, &c, direct, volume_id, rows, load, d.child.id()).await;
        }
    }
    if let Ok((_, volume_id, target)) = &daemon
        && let Ok(mut v) = VolumeClient::connect(&c).await
    {
        let _ = v.unmount(volume_id, target).await;
    }
    if let Ok((_, volume_id, target)) = &direct_flow {
        let _ = direct.volume.unmount_volume(volume_id, target);
    }
    drop(lo2);
    drop(lo);
}

/// The disk number of a loop device: its serial is its backing file (design §4).
pub(super) fn loop_disk_number(
    ids: &std::collections::BTreeMap<u32, String>,
    lo: &LoopDisk,
) -> Result<u32, String> {
    let file = lo.file.display().to_string();
    ids.iter()
        .find(|(_, serial)| **serial == file)
        .map(|(n, _)| *n)
        .ok_or_else(|| format!("{} ({file}) is not in ListDiskIDs", lo.dev))
}

/// The in-process side of the stage flow: (step times, volume ID, mount target).
pub(super) fn direct_stage(
    direct: &Direct,
    lo: &LoopDisk,
    kubelet: &Path,
) -> Result<([Duration; 3], String, String), String> {
    let ids = direct.disk.list_disk_ids().map_err(|e| e.to_string())?;
    let serials = ids
        .into_iter()
        .map(|(n, id)| (n, id.serial_number))
        .collect();
    let n = loop_disk_number(&serials, lo)?;
    let t = Instant::now();
    direct
        .disk
        .partition_disk(n)
        .map_err(|e| format!("PartitionDisk: {e}"))?;
    let partition = t.elapsed();
    let id = direct
        .volume
        .list_volumes_on_disk(n, 0)
        .map_err(|e| format!("ListVolumesOnDisk: {e}"))?
        .into_iter()
        .next()
        .ok_or("no volume after PartitionDisk")?;
    let t = Instant::now();
    direct
        .volume
        .format_volume(&id)
        .map_err(|e| format!("FormatVolume: {e}"))?;
    let format = t.elapsed();
    let target = kubelet.join("bench-staging-direct");
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let target = target.display().to_string();
    let t = Instant::now();
    direct
        .volume
        .mount_volume(&id, &target)
        .map_err(|e| format!("MountVolume: {e}"))?;
    Ok(([partition, format, t.elapsed()], id, target))
}

/// The daemon side of the stage flow: (step times, volume ID, mount target).
pub(super) async fn daemon_flow(
    c: &Connector,
    disk: &mut DiskClient,
    lo: &LoopDisk,
    kubelet: &Path,
) -> Result<([Duration; 3], String, String), String> {
    let ids = disk.list_disk_ids().await.map_err(|s| s.to_string())?;
    let serials = ids
        .into_iter()
        .map(|(n, id)| (n, id.serial_number))
        .collect();
    let n = loop_disk_number(&serials, lo)?;
    let mut v = VolumeClient::connect(c).await.map_err(|e| e.to_string())?;
    let t = Instant::now();
    disk.partition_disk(n)
        .await
        .map_err(|s| format!("PartitionDisk: {s}"))?;
    let partition = t.elapsed();
    let vols = v
        .list_volumes_on_disk(n, 0)
        .await
        .map_err(|s| format!("ListVolumesOnDisk: {s}"))?;
    let id = vols
        .first()
        .cloned()
        .ok_or("no volume after PartitionDisk")?;
    let t = Instant::now();
    v.format(&id)
        .await
        .map_err(|s| format!("FormatVolume: {s}"))?;
    let format = t.elapsed();
    let target = kubelet.join("bench-staging");
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let target = target.display().to_string();
    let t = Instant::now();
    v.mount(&id, &target)
        .await
        .map_err(|s| format!("MountVolume: {s}"))?;
    Ok(([partition, format, t.elapsed()], id, target))
}

pub(super) async fn volume_stats(
    a: &Args,
    c: &Connector,
    direct: &Direct,
    id: &str,
    rows: &mut Vec<Row>,
    load: Duration,
    pid: u32,
) {
    let Ok(v) = VolumeClient::connect(c).await else {
        na(rows, "GetVolumeStats", "volume endpoint not reachable");
        return;
    };
    let seq = sequential(a.calls / 2, || {
        let (mut v, id) = (v.clone(), id.to_string());
        async move { v.stats(&id).await.map(drop) }
    })
    .await;
    let mut clients = Vec::new();
    for _ in 0..a.clients {
        if let Ok(ch) = c.channel("volume", "v1").await
            && let Some(v) = VolumeClient::from_channel("v1", ch)
        {
            clients.push(v);
        }
    }
    let id2 = id.to_string();
    let par = concurrent(
        clients,
        load,
        move |mut v: VolumeClient| {
            let id = id2.clone();
            async move { v.stats(&id).await.map(drop) }
        },
        pid,
    )
    .await;
    match (seq, par) {
        (Ok(seq), Ok((par, _))) => {
            let dseq = direct_sequential(a.calls / 2, || {
                let _ = std::hint::black_box(direct.volume.get_volume_stats(id));
            });
            let dpar = direct_concurrent(a.clients, load, || {
                let _ = std::hint::black_box(direct.volume.get_volume_stats(id));
            });
            rpc_rows(
                rows,
                "GetVolumeStats",
                a.clients,
                &seq,
                &par,
                Some((&dseq, &dpar)),
            );
        }
        (Err(s), _) | (_, Err(s)) => na(
            rows,
            "GetVolumeStats",
            &format!("{:?}: {}", s.code(), s.message()),
        ),
    }
}
