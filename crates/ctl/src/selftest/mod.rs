//! `csi-proxy-ctl selftest`: the whole stage flow of a CSI driver, driven through the running
//! daemon, on a VHDX the selftest creates and attaches itself, then detaches and deletes
//! whatever happened.
//!
//! The sequence is one code path over two seams: the daemon's endpoints (a [`Connector`]) and
//! the virtual disk API ([`VirtualDisks`]: `virtdisk.dll` on Windows, the simulated Windows in
//! CI). It acts only on the disk the VHDX it attached became: before every call that changes a
//! disk or volume it asks `GetVirtualDiskPhysicalPath` again and checks the disk number, the
//! disk's page 83 identifier and (for a volume) the volume's disk number.

mod record;

pub use record::{Outcome, Step};

use csi_proxy_client::disk::DiskClient;
use csi_proxy_client::filesystem::FilesystemClient;
use csi_proxy_client::volume::VolumeClient;
use csi_proxy_client::{ClientError, Connector};
use csi_proxy_host::windows::vhd::{CALL_NOT_IMPLEMENTED, VirtualDisks, disk_number_of};
use record::Stop;
use std::time::{Duration, Instant};
use tonic::Status;

/// What the selftest creates, and how long it waits for Windows.
#[derive(Debug, Clone)]
pub struct Options {
    /// The daemon's `--kubelet-path`: the scratch folder is made under it.
    pub kubelet_path: String,
    /// Where the VHDX file is created (it must not exist).
    pub vhdx_path: String,
    /// The VHDX's size in bytes.
    pub size: u64,
    /// The size it is grown to.
    pub grown_size: u64,
    /// How long to wait for a disk or volume to appear or grow.
    pub wait: Duration,
}

/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(100);

/// Runs the selftest; never panics, always cleans up what it made.
pub async fn run(connector: &Connector, vd: &dyn VirtualDisks, opts: &Options) -> Outcome {
    let mut t = Selftest {
        vd,
        opts,
        out: Outcome::default(),
        clients: None,
        handle: None,
        created: false,
        attached: false,
        disk: None,
        page83: String::new(),
        volume: String::new(),
        scratch: false,
        mounted: false,
    };
    let _ = t.flow(connector).await;
    t.clean_up().await;
    t.out
}

struct Clients {
    disk: DiskClient,
    volume: VolumeClient,
    fs: FilesystemClient,
}

struct Selftest<'a> {
    vd: &'a dyn VirtualDisks,
    opts: &'a Options,
    out: Outcome,
    clients: Option<Clients>,
    handle: Option<u64>,
    created: bool,
    attached: bool,
    /// The disk number the VHDX became, and its page 83 identifier when first seen.
    disk: Option<u32>,
    page83: String,
    volume: String,
    scratch: bool,
    mounted: bool,
}

/// A failed call as `<Rpc>: <code>: <message>`.
fn status(rpc: &str, s: &Status) -> String {
    format!("{rpc}: {:?}: {}", s.code(), s.message())
}

/// Asks `f` every [`POLL`] until it answers something or `wait` has passed (`None`).
async fn poll<T>(
    wait: Duration,
    mut f: impl AsyncFnMut() -> Result<Option<T>, String>,
) -> Result<Option<T>, String> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(v) = f().await? {
            return Ok(Some(v));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

async fn connect(c: &Connector) -> Result<Clients, ClientError> {
    Ok(Clients {
        disk: DiskClient::connect(c).await?,
        volume: VolumeClient::connect(c).await?,
        fs: FilesystemClient::connect(c).await?,
    })
}

impl Selftest<'_> {
    fn c(&mut self) -> &mut Clients {
        self.clients.as_mut().expect("connected before any call")
    }

    fn scratch_dir(&self) -> String {
        format!(
            r"{}\csi-proxy-selftest-{}",
            self.opts.kubelet_path.trim_end_matches('\\'),
            std::process::id()
        )
    }

    fn target(&self) -> String {
        format!(r"{}\mount", self.scratch_dir())
    }

    fn plain(&self) -> String {
        format!(r"{}\plain", self.scratch_dir())
    }

    /// The disk the VHDX is now, checked to be the one it was: the same number from
    /// `GetVirtualDiskPhysicalPath`, the same page 83 identifier in ListDiskIDs.
    async fn guard(&mut self) -> Result<u32, String> {
        let (Some(n), Some(h)) = (self.disk, self.handle) else {
            return Err("no disk of this selftest to act on".into());
        };
        let p = self
            .vd
            .physical_path(h)
            .map_err(|e| format!("GetVirtualDiskPhysicalPath: {e}"))?;
        if disk_number_of(&p) != Some(n) {
            return Err(format!(
                "the VHDX is now {p}, not disk {n}; refusing to act on disk {n}"
            ));
        }
        let ids = self
            .c()
            .disk
            .list_disk_ids()
            .await
            .map_err(|s| status("ListDiskIDs", &s))?;
        match ids.get(&n) {
            Some(id) if id.page83 == self.page83 => Ok(n),
            other => Err(format!(
                "disk {n} no longer has the page 83 identifier {:?} the VHDX's disk had (now {:?}); refusing to act on it",
                self.page83,
                other.map(|i| &i.page83)
            )),
        }
    }

    /// [`guard`](Self::guard), and the volume is on that disk.
    async fn guard_volume(&mut self) -> Result<u32, String> {
        let n = self.guard().await?;
        let v = self.volume.clone();
        let on = self
            .c()
            .volume
            .disk_number(&v)
            .await
            .map_err(|s| status("GetDiskNumberFromVolumeID", &s))?;
        if on != n {
            return Err(format!(
                "volume {v} is on disk {on}, not on the VHDX's disk {n}; refusing to act on it"
            ));
        }
        Ok(n)
    }

    /// One call on the test volume, once [`guard_volume`](Self::guard_volume) has passed,
    /// recorded as `name`; the answer is the volume followed by `what`.
    async fn on_volume(
        &mut self,
        name: &str,
        rpc: &str,
        what: &str,
        mut call: impl AsyncFnMut(&mut VolumeClient, &str) -> Result<(), Status>,
    ) -> Result<(), Stop> {
        let t = Instant::now();
        let r = async {
            self.guard_volume().await?;
            let v = self.volume.clone();
            call(&mut self.c().volume, &v)
                .await
                .map_err(|s| status(rpc, &s))?;
            Ok(((), format!("{v}{what}")))
        }
        .await;
        self.out.record(name, t, r)
    }

    async fn flow(&mut self, connector: &Connector) -> Result<(), Stop> {
        // What this machine lacks is said before anything else (Wine has no daemon either).
        self.probe_service()?;
        let t = Instant::now();
        let r = connect(connector)
            .await
            .map(|c| {
                let v = (c.disk.version(), c.volume.version(), c.fs.version());
                (
                    c,
                    format!("disk {}, volume {}, filesystem {}", v.0, v.1, v.2),
                )
            })
            .map_err(|e| format!("the daemon is not reachable: {e}"));
        self.clients = Some(self.out.record("connect", t, r)?);
        self.create_and_attach()?;
        self.find_disk().await?;
        self.partition_and_format().await?;
        self.mount().await?;
        self.grow().await?;
        self.unmount().await?;
        self.offline_online().await
    }

    /// `OpenVirtualDisk` of a file that does not exist: any answer but "not implemented" means
    /// the virtual disk service is there.
    fn probe_service(&mut self) -> Result<(), Stop> {
        let vd = self.vd;
        let t = Instant::now();
        let probe = format!("{}.probe", self.opts.vhdx_path);
        let r = match vd.open(&probe) {
            Ok(h) => {
                vd.close_vhd(h);
                Ok(((), format!("OpenVirtualDisk opened {probe}")))
            }
            Err(e) if e.code == CALL_NOT_IMPLEMENTED => Err(format!(
                "this Windows has no virtual disk service: OpenVirtualDisk answered {e} \
                 (as Wine's stub virtdisk.dll does); run the selftest on a real Windows node"
            )),
            Err(e) => Ok((
                (),
                format!("present (OpenVirtualDisk of a missing file: {e})"),
            )),
        };
        self.out.record("virtual disk service", t, r)
    }

    fn create_and_attach(&mut self) -> Result<(), Stop> {
        let (vd, path) = (self.vd, self.opts.vhdx_path.clone());
        let t = Instant::now();
        let r = vd
            .create(&path, self.opts.size)
            .map(|h| (h, format!("{path}: {} bytes, dynamic VHDX", self.opts.size)))
            .map_err(|e| format!("{path}: {e}"));
        self.handle = Some(self.out.record("CreateVirtualDisk", t, r)?);
        self.created = true;
        let h = self.handle.expect("created");

        let t = Instant::now();
        let r = vd
            .attach(h)
            .map(|()| ((), "attached, no drive letters".to_string()))
            .map_err(|e| format!("{path}: {e}"));
        self.out.record("AttachVirtualDisk", t, r)?;
        self.attached = true;

        let t = Instant::now();
        let r = match vd.physical_path(h) {
            Ok(p) => match disk_number_of(&p) {
                Some(n) => Ok((n, p)),
                None => Err(format!("answered {p:?}, not a \\\\.\\PhysicalDriveN path")),
            },
            Err(e) => Err(e.to_string()),
        };
        self.disk = Some(self.out.record("GetVirtualDiskPhysicalPath", t, r)?);
        Ok(())
    }

    /// ListDiskIDs and ListDiskLocations list the new disk; it is the VHDX's size and empty.
    async fn find_disk(&mut self) -> Result<(), Stop> {
        let n = self.disk.expect("attached");
        let wait = self.opts.wait;
        let t = Instant::now();
        let disk = &mut self.c().disk;
        let r = poll(wait, async || {
            let ids = disk
                .list_disk_ids()
                .await
                .map_err(|s| status("ListDiskIDs", &s))?;
            Ok(ids.get(&n).cloned())
        })
        .await
        .and_then(|id| {
            let id = id.ok_or(format!("disk {n} is not listed after {wait:?}"))?;
            let answer = format!(
                "disk {n} listed after {} ms: page83 {:?}, serial {:?}",
                ms(t.elapsed()),
                id.page83,
                id.serial_number
            );
            Ok((id.page83, answer))
        });
        self.page83 = self.out.record("ListDiskIDs", t, r)?;

        let t = Instant::now();
        let r = match self.c().disk.list_disk_locations().await {
            Ok(l) => Ok((
                (),
                match l.get(&n) {
                    Some(l) => format!(
                        "disk {n}: adapter {:?} bus {:?} target {:?} LUN {:?}",
                        l.adapter, l.bus, l.target, l.lun
                    ),
                    None => format!("disk {n} not listed (it has no SCSI address)"),
                },
            )),
            Err(s) => Err(status("ListDiskLocations", &s)),
        };
        self.out.record("ListDiskLocations", t, r)?;

        // Refuse any disk that is not plainly the new VHDX: its size, and nothing on it.
        let t = Instant::now();
        let size = self.opts.size;
        let c = self.c();
        let r = async {
            let got = c
                .disk
                .disk_size(n)
                .await
                .map_err(|s| status("GetDiskStats", &s))?;
            if u64::try_from(got) != Ok(size) {
                return Err(format!(
                    "refusing disk {n}: it is {got} bytes, the VHDX this selftest attached is {size}"
                ));
            }
            let vols = c
                .volume
                .list_volumes_on_disk(n, 0)
                .await
                .map_err(|s| status("ListVolumesOnDisk", &s))?;
            if !vols.is_empty() {
                return Err(format!(
                    "refusing disk {n}: it holds volumes {vols:?}, the new VHDX holds none"
                ));
            }
            Ok(((), format!("disk {n} is the new VHDX: {got} bytes, no volumes")))
        }
        .await;
        self.out.record("own disk", t, r)
    }

    async fn partition_and_format(&mut self) -> Result<(), Stop> {
        let started = Instant::now();
        let r = async {
            let n = self.guard().await?;
            self.c()
                .disk
                .partition_disk(n)
                .await
                .map_err(|s| status("PartitionDisk", &s))?;
            Ok(((), format!("disk {n}: GPT with one basic data partition")))
        }
        .await;
        self.out.record("PartitionDisk", started, r)?;
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

    async fn mount(&mut self) -> Result<(), Stop> {
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

        let at = format!(" at {target}");
        for name in ["MountVolume", "MountVolume again"] {
            let r = self
                .on_volume(name, "MountVolume", &at, async |c, v| {
                    c.mount(v, &target).await
                })
                .await;
            self.mounted |= r.is_ok();
            r?;
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

    async fn grow(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = self
            .stats()
            .await
            .map(|s| (s, format!("total {} bytes, used {} bytes", s.0, s.1)));
        let before = self.out.record("GetVolumeStats", t, r)?;

        let (h, grown) = (self.handle.expect("created"), self.opts.grown_size);
        let t = Instant::now();
        let r = async {
            self.guard().await?;
            self.vd
                .resize(h, grown)
                .map_err(|e| format!("ResizeVirtualDisk to {grown} bytes: {e}"))?;
            Ok(((), format!("{grown} bytes")))
        }
        .await;
        self.out.record("ResizeVirtualDisk", t, r)?;

        let t = Instant::now();
        let r = self
            .c()
            .disk
            .rescan()
            .await
            .map(|()| ((), "done".to_string()))
            .map_err(|s| status("Rescan", &s));
        self.out.record("Rescan", t, r)?;

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
        Ok(())
    }

    async fn unmount(&mut self) -> Result<(), Stop> {
        let target = self.target();
        let from = format!(" from {target}");
        for name in ["UnmountVolume", "UnmountVolume again"] {
            let r = self
                .on_volume(name, "UnmountVolume", &from, async |c, v| {
                    c.unmount(v, &target).await
                })
                .await;
            self.mounted &= r.is_err();
            r?;
        }
        Ok(())
    }

    async fn offline_online(&mut self) -> Result<(), Stop> {
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
                let n = self.guard().await?;
                self.c()
                    .disk
                    .set_online(n, true)
                    .await
                    .map_err(|s| status("SetDiskState", &s))?;
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

        let t = Instant::now();
        let r = async {
            let n = self.guard().await?;
            self.c()
                .disk
                .partition_disk(n)
                .await
                .map_err(|s| status("PartitionDisk", &s))?;
            Ok(((), format!("disk {n}: already partitioned, success")))
        }
        .await;
        self.out.record("PartitionDisk again", t, r)
    }

    /// Undoes what the flow made, whatever happened: the mount, the scratch folder, the
    /// attachment and the file. Each is a step of its own.
    async fn clean_up(&mut self) {
        if self.mounted {
            let (v, target) = (self.volume.clone(), self.target());
            let t = Instant::now();
            let r = self
                .c()
                .volume
                .unmount(&v, &target)
                .await
                .map(|()| ((), format!("{v} from {target}")))
                .map_err(|s| status("UnmountVolume", &s));
            self.mounted = r.is_err();
            let _ = self.out.record("clean-up: UnmountVolume", t, r);
        }
        // Never remove a folder something may still be mounted on.
        if self.scratch && !self.mounted {
            let dirs = [self.target(), self.plain(), self.scratch_dir()];
            let t = Instant::now();
            let r = async {
                for d in &dirs {
                    match self.c().fs.rmdir(d, false).await {
                        Ok(()) => {}
                        Err(s) if s.code() == tonic::Code::NotFound => {}
                        Err(s) => return Err(status(&format!("Rmdir {d}"), &s)),
                    }
                }
                Ok(((), format!("removed {}", dirs[2])))
            }
            .await;
            let _ = self.out.record("clean-up: Rmdir", t, r);
        }
        if let Some(h) = self.handle.take() {
            if self.attached {
                let t = Instant::now();
                let r = self
                    .vd
                    .detach(h)
                    .map(|()| ((), "detached".to_string()))
                    .map_err(|e| e.to_string());
                let _ = self.out.record("clean-up: DetachVirtualDisk", t, r);
            }
            // Closing the last handle also detaches a disk attached without a permanent
            // lifetime, should the detach above have failed.
            self.vd.close_vhd(h);
        }
        if self.created {
            let path = self.opts.vhdx_path.clone();
            let t = Instant::now();
            let r = self
                .vd
                .delete_vhd_file(&path)
                .map(|()| ((), format!("deleted {path}")))
                .map_err(|e| format!("{path}: {e}"));
            let _ = self.out.record("clean-up: delete VHDX", t, r);
        }
    }
}
