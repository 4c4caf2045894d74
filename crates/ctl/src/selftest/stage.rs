//! The stage flow on the selftest's disk: partition, format, mount, grow, unmount, offline and
//! online, with the repeats a driver's retries make.

use super::record::Stop;
use super::{Selftest, ms, poll, status};
use std::time::Instant;

impl Selftest<'_> {
    pub(super) async fn partition_and_format(&mut self) -> Result<(), Stop> {
        let started = Instant::now();
        self.partition("PartitionDisk", "GPT with one basic data partition")
            .await?;
        let partitioned = started.elapsed();

        let (n, wait) = (self.disk.expect("attached"), self.opts.wait);
        let t = Instant::now();
        let volume = &mut self.c().volume;
        let r = poll(wait, async || {
            let v = volume
                .list_volumes_on_disk(n, 0)
                .await
                .map_err(|s| status("ListVolumesOnDisk", &s))?;
            Ok(v.into_iter().next())
        })
        .await
        .and_then(|v| {
            let v = v.ok_or(format!("no volume on disk {n} after {wait:?}"))?;
            let a = format!(
                "{v} listed {} ms after PartitionDisk began (PartitionDisk took {} ms)",
                ms(started.elapsed()),
                ms(partitioned)
            );
            Ok((v, a))
        });
        self.volume = self.out.record("ListVolumesOnDisk", t, r)?;

        self.expect_formatted(false).await?;
        for name in ["FormatVolume", "FormatVolume again"] {
            self.on_volume(name, "FormatVolume", ": NTFS", async |c, v| {
                c.format(v).await
            })
            .await?;
        }
        self.expect_formatted(true).await
    }

    async fn expect_formatted(&mut self, want: bool) -> Result<(), Stop> {
        let t = Instant::now();
        let v = self.volume.clone();
        let r = match self.c().volume.is_formatted(&v).await {
            Ok(f) if f == want => Ok(((), format!("formatted: {f}"))),
            Ok(f) => Err(format!("{v}: formatted is {f}, expected {want}")),
            Err(s) => Err(status("IsVolumeFormatted", &s)),
        };
        self.out.record("IsVolumeFormatted", t, r)
    }

    pub(super) async fn mount(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let (target, plain) = (self.target(), self.plain());
        let r = async {
            for d in [&target, &plain] {
                self.c()
                    .fs
                    .mkdir(d)
                    .await
                    .map_err(|s| status("Mkdir", &s))?;
            }
            Ok(((), format!("{target}, {plain}")))
        }
        .await;
        self.scratch = true;
        self.out.record("Mkdir", t, r)?;

        for name in ["MountVolume", "MountVolume again"] {
            self.mount_target(name).await?;
        }

        let t = Instant::now();
        let v = self.volume.clone();
        let r = match self.c().volume.volume_id_from_target_path(&target).await {
            Ok(id) if id.eq_ignore_ascii_case(&v) => Ok(((), id)),
            Ok(id) => Err(format!("answered {id}, the volume mounted there is {v}")),
            Err(s) => Err(status("GetVolumeIDFromTargetPath", &s)),
        };
        self.out.record("GetVolumeIDFromTargetPath", t, r)?;

        // What Windows answers for a directory no volume is mounted on (only a real node
        // settles it); wrong only if it names the test volume.
        let t = Instant::now();
        let r = match self.c().volume.volume_id_from_target_path(&plain).await {
            Ok(id) if id.eq_ignore_ascii_case(&v) => {
                Err(format!("a plain directory answered the test volume {id}"))
            }
            Ok(id) => Ok(((), format!("a plain directory answered {id}"))),
            Err(s) => Ok((
                (),
                format!("a plain directory answered {:?}: {}", s.code(), s.message()),
            )),
        };
        self.out
            .record("GetVolumeIDFromTargetPath (plain directory)", t, r)
    }

    async fn stats(&mut self) -> Result<(i64, i64), String> {
        let v = self.volume.clone();
        self.c()
            .volume
            .stats(&v)
            .await
            .map_err(|s| status("GetVolumeStats", &s))
    }

    /// Grows the VHDX the only way a VHDX outside a VM grows: "Resize-VHD is an offline
    /// operation; the virtual hard disk must not be attached when the operation is initiated".
    /// Detached, resized, attached again (a new disk number, perhaps; the same page 83 ID, the
    /// VHDX's own), brought online, mounted, and the volume grown into the new space.
    pub(super) async fn grow(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = self
            .stats()
            .await
            .map(|s| (s, format!("total {} bytes, used {} bytes", s.0, s.1)));
        let before = self.out.record("GetVolumeStats", t, r)?;

        let (vd, h, grown) = (self.vd, self.handle.expect("created"), self.opts.grown_size);
        let t = Instant::now();
        let r = async {
            let n = self.guard().await?;
            vd.detach(h)
                .map_err(|e| format!("DetachVirtualDisk: {e}"))?;
            Ok(((), format!("disk {n} detached to resize its VHDX")))
        }
        .await;
        self.out.record("DetachVirtualDisk", t, r)?;
        self.attached = false;

        let t = Instant::now();
        let r = vd
            .resize(h, grown)
            .map(|()| ((), format!("{grown} bytes")))
            .map_err(|e| format!("ResizeVirtualDisk to {grown} bytes: {e}"));
        self.out.record("ResizeVirtualDisk", t, r)?;

        let t = Instant::now();
        let r = vd
            .attach(h)
            .map(|()| ((), "attached again, no drive letters".to_string()))
            .map_err(|e| format!("AttachVirtualDisk: {e}"));
        self.out.record("AttachVirtualDisk again", t, r)?;
        self.attached = true;
        self.find_again().await?;
        self.bring_online("SetDiskState online (attached again)")
            .await?;

        let (n, wait) = (self.disk.expect("attached"), self.opts.wait);
        let t = Instant::now();
        let disk = &mut self.c().disk;
        let r = poll(wait, async || {
            let s = disk
                .disk_size(n)
                .await
                .map_err(|s| status("GetDiskStats", &s))?;
            Ok((u64::try_from(s) == Ok(grown)).then_some(s))
        })
        .await
        .and_then(|s| {
            let s = s.ok_or(format!("disk {n} is not {grown} bytes after {wait:?}"))?;
            Ok(((), format!("{s} bytes after {} ms", ms(t.elapsed()))))
        });
        self.out.record("GetDiskStats", t, r)?;
        // The new space after the partition is what the extend step needs (ledger row 21); its
        // answer, whatever it is, does not stop the flow, and it leaves the disk writable.
        let _ = self.read_only_extend().await;

        // Grown while mounted, as a driver's NodeExpandVolume grows it.
        self.mount_target("MountVolume (attached again)").await?;
        for name in ["ResizeVolume(0)", "ResizeVolume(0) again"] {
            let t = Instant::now();
            let r = async {
                self.guard_volume().await?;
                let v = self.volume.clone();
                self.c()
                    .volume
                    .resize(&v, 0)
                    .await
                    .map_err(|s| status("ResizeVolume", &s))?;
                let after = self.stats().await?;
                if after.0 <= before.0 {
                    return Err(format!(
                        "{v} still {} bytes (was {} before the disk grew)",
                        after.0, before.0
                    ));
                }
                Ok(((), format!("total {} -> {} bytes", before.0, after.0)))
            }
            .await;
            self.out.record(name, t, r)?;
        }
        self.unmount_target("UnmountVolume (attached again)").await
    }

    /// After the VHDX was attached again: the disk it is now, which must carry the page 83 ID
    /// it had (the VHDX's own) before anything acts on it.
    async fn find_again(&mut self) -> Result<(), Stop> {
        let n = self.physical_disk("GetVirtualDiskPhysicalPath again")?;
        let t = Instant::now();
        let page83 = self.page83.clone();
        let r = self.listed_ids(n).await.and_then(|id| {
            if id.page83 != page83 {
                return Err(format!(
                    "refusing disk {n}: its page 83 identifier is {:?}, the VHDX's disk had {page83:?}",
                    id.page83
                ));
            }
            Ok(((), format!("disk {n} listed after {} ms, page83 {page83:?}", ms(t.elapsed()))))
        });
        self.out.record("ListDiskIDs again", t, r)?;
        self.disk = Some(n);
        Ok(())
    }

    /// SetDiskState(online) on the VHDX's disk once [`guard`](Self::guard) has passed: a disk
    /// just attached may be offline and read-only (SAN policy OfflineAll).
    pub(super) async fn bring_online(&mut self, name: &str) -> Result<(), Stop> {
        let t = Instant::now();
        let r = self
            .online()
            .await
            .map(|n| ((), format!("disk {n} online and writable")));
        self.out.record(name, t, r)
    }

    /// SetDiskState(online) of the VHDX's disk, [`guard`](Self::guard)ed: its number.
    pub(super) async fn online(&mut self) -> Result<u32, String> {
        let n = self.guard().await?;
        self.c()
            .disk
            .set_online(n, true)
            .await
            .map_err(|s| status("SetDiskState", &s))?;
        Ok(n)
    }

    pub(super) async fn unmount(&mut self) -> Result<(), Stop> {
        for name in ["UnmountVolume", "UnmountVolume again"] {
            self.unmount_target(name).await?;
        }
        Ok(())
    }

    /// MountVolume of the test volume at the scratch target, recorded as `name`.
    async fn mount_target(&mut self, name: &str) -> Result<(), Stop> {
        let target = self.target();
        let at = format!(" at {target}");
        let r = self
            .on_volume(name, "MountVolume", &at, async |c, v| {
                c.mount(v, &target).await
            })
            .await;
        self.mounted |= r.is_ok();
        r
    }

    /// UnmountVolume of the test volume from the scratch target, recorded as `name`.
    async fn unmount_target(&mut self, name: &str) -> Result<(), Stop> {
        let target = self.target();
        let from = format!(" from {target}");
        let r = self
            .on_volume(name, "UnmountVolume", &from, async |c, v| {
                c.unmount(v, &target).await
            })
            .await;
        self.mounted &= r.is_err();
        r
    }

    pub(super) async fn offline_online(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = async {
            let n = self.guard().await?;
            let c = self.c();
            c.disk
                .set_online(n, false)
                .await
                .map_err(|s| status("SetDiskState", &s))?;
            let online = c
                .disk
                .is_online(n)
                .await
                .map_err(|s| status("GetDiskState", &s))?;
            let vols = c
                .volume
                .list_volumes_on_disk(n, 0)
                .await
                .map_err(|s| status("ListVolumesOnDisk", &s))?;
            if online {
                return Err(format!("disk {n} still online"));
            }
            Ok((
                (),
                format!("offline; volumes listed while offline: {vols:?}"),
            ))
        }
        .await;
        self.out.record("SetDiskState offline", t, r)?;

        for name in ["SetDiskState online", "SetDiskState online again"] {
            let t = Instant::now();
            let r = async {
                let n = self.online().await?;
                let returned = t.elapsed();
                let (v, wait) = (self.volume.clone(), self.opts.wait);
                let volume = &mut self.c().volume;
                let back = poll(wait, async || {
                    let vols = volume
                        .list_volumes_on_disk(n, 0)
                        .await
                        .map_err(|s| status("ListVolumesOnDisk", &s))?;
                    Ok(vols.into_iter().find(|x| x.eq_ignore_ascii_case(&v)))
                })
                .await?;
                match back {
                    Some(_) => Ok((
                        (),
                        format!(
                            "online; SetDiskState returned after {} ms, {v} listed after {} ms",
                            ms(returned),
                            ms(t.elapsed())
                        ),
                    )),
                    None => Err(format!("{v} not back on disk {n} after {wait:?}")),
                }
            }
            .await;
            self.out.record(name, t, r)?;
        }

        self.partition("PartitionDisk again", "already partitioned, success")
            .await
    }

    /// PartitionDisk on the VHDX's disk once [`guard`](Self::guard) has passed.
    async fn partition(&mut self, name: &str, what: &str) -> Result<(), Stop> {
        let t = Instant::now();
        let r = async {
            let n = self.guard().await?;
            self.c()
                .disk
                .partition_disk(n)
                .await
                .map_err(|s| status("PartitionDisk", &s))?;
            Ok(((), format!("disk {n}: {what}")))
        }
        .await;
        self.out.record(name, t, r)
    }
}
