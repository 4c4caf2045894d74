//! `csi-proxy-ctl selftest`: the whole stage flow of a CSI driver, driven through the running
//! daemon, on a VHDX the selftest creates and attaches itself, then detaches and deletes
//! whatever happened.
//!
//! The sequence is one code path over the daemon's endpoints (a [`Connector`]) and a
//! [`Machine`]: the virtual disk API ([`VirtualDisks`]: `virtdisk.dll` on Windows, the
//! simulated Windows in CI), the thin Win32 layer for the conditions the daemon's API cannot
//! make, and a second process ([`hold`]). It acts only on the disk the VHDX it attached became:
//! before every call that changes a disk or volume it asks `GetVirtualDiskPhysicalPath` again
//! and checks the disk number, the disk's page 83 identifier and (for a volume) the volume's
//! disk number.

mod calls;
mod cleanup;
mod copy;
mod create;
mod direct;
mod drives;
mod held;
pub mod hold;
mod iscsi;
mod paths;
mod record;
mod renames;
mod scm;
pub mod service;
mod smb;
mod smb_names;
mod stage;

pub use iscsi::IscsiTarget;
pub use record::{Outcome, Step};
pub use smb::{SmbServer, smb_server, smb_server_with};

use csi_proxy_client::disk::DiskClient;
use csi_proxy_client::filesystem::FilesystemClient;
use csi_proxy_client::volume::VolumeClient;
use csi_proxy_client::{ClientError, Connector};
use csi_proxy_host::windows::os::{Win32, code};
use csi_proxy_host::windows::vhd::{VirtualDisks, disk_number_of};
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
    /// The `csiproxy` service's failure-actions flag as configured ([`failure_flag`]); `None`
    /// when there is no such service (a HostProcess pod, a daemon in the foreground).
    pub failure_flag: Option<Result<bool, String>>,
    /// A test target to log in to and out of (`--iscsi-portal`, `--iscsi-target`); without it
    /// the iSCSI steps are listed as not run.
    pub iscsi: Option<IscsiTarget>,
    /// An SMB server to ask for a share that does not exist (`--smb-server`, with the node's
    /// mappings of it and its address from [`smb_server`]): one the node does not map runs the
    /// step of ledger row 38, one it maps the step of row 12; without it both are listed as not
    /// run.
    pub smb_server: Option<SmbServer>,
    /// This program's path: the program of the scratch service (`selftest-service`, ledger row
    /// 40), whose release folder is the VHDX's path with `.release` added. Without it that step
    /// is listed as not run.
    pub program: Option<String>,
}

/// The failure-actions flag of service `name` as `QueryServiceConfig2` answers it: `None` when
/// the service does not exist. The flag acts from the next system start after it was set
/// (SERVICE_FAILURE_ACTIONS_FLAG); no call says whether it does yet.
pub fn failure_flag(os: &dyn Win32, name: &str) -> Option<Result<bool, String>> {
    match os.service_failure_flag(name) {
        Ok(on) => Some(Ok(on)),
        Err(e) if e.code == code::SERVICE_DOES_NOT_EXIST => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(100);

/// What the selftest acts through besides the daemon: the virtual disk API, this Windows' own
/// calls (made only on the selftest's own disk, volume and scratch folder: the conditions the
/// daemon's API cannot make, ledger rows 21, 36, 37, 53 and 86) and a second process
/// ([`hold::OtherProcess`]: rows 19, 57, 58 and 82).
#[derive(Clone, Copy)]
pub struct Machine<'a> {
    /// `virtdisk.dll`, or the simulated Windows.
    pub vd: &'a dyn VirtualDisks,
    /// The thin Win32 layer, or the simulated Windows.
    pub os: &'a dyn Win32,
    /// Starts the second process.
    pub others: &'a dyn hold::OtherProcess,
}

/// Runs the selftest; never panics, always cleans up what it made.
pub async fn run(connector: &Connector, machine: Machine<'_>, opts: &Options) -> Outcome {
    let mut t = Selftest {
        vd: machine.vd,
        os: machine.os,
        others: machine.others,
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
    let mut out = t.out;
    // Independent of the VHDX's flow; only a daemon that answered at all is asked.
    if out.steps.iter().any(|s| s.name == "connect" && s.ok) {
        calls::null_initiator(&mut out, machine.os);
        let release = format!("{}.release", opts.vhdx_path);
        scm::run(
            &mut out,
            machine.os,
            opts.program.as_deref(),
            &release,
            opts.wait,
        );
        iscsi::run(
            &mut out,
            connector,
            opts.iscsi.as_ref(),
            opts.wait,
            machine.os,
            machine.others,
        )
        .await;
        smb::run(&mut out, connector, opts.smb_server.as_ref()).await;
        smb_names::run(&mut out, machine.os, opts.smb_server.as_ref());
        drives::run(&mut out, machine.os);
    }
    out
}

struct Clients {
    disk: DiskClient,
    volume: VolumeClient,
    fs: FilesystemClient,
}

struct Selftest<'a> {
    vd: &'a dyn VirtualDisks,
    os: &'a dyn Win32,
    others: &'a dyn hold::OtherProcess,
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

    /// Reports the service's failure-actions flag (a report, never a failed step: a node may
    /// run the daemon as a HostProcess pod, with no service at all).
    fn report_failure_flag(&mut self) {
        let answer = match &self.opts.failure_flag {
            None => "no csiproxy service (a HostProcess pod or a daemon in the foreground)".into(),
            Some(Ok(true)) => "set: the service manager restarts a failure the daemon reports, \
                               from the first boot after the flag was set (it cannot say whether \
                               this node has rebooted since)"
                .into(),
            Some(Ok(false)) => "NOT set: only a crash of the daemon is restarted; run \
                                `sc.exe failureflag csiproxy 1` and reboot the node"
                .into(),
            Some(Err(e)) => format!("cannot be read: {e}"),
        };
        let _ = self
            .out
            .record("recovery flag", Instant::now(), Ok(((), answer)));
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
        self.report_failure_flag();
        self.create_and_attach()?;
        self.create_refusals()?;
        self.find_disk().await?;
        // Under SAN policy OfflineAll the new disk arrives offline and read-only: online first,
        // as a driver stages a disk.
        self.bring_online("SetDiskState online (attached)").await?;
        self.partition_and_format().await?;
        self.mount().await?;
        self.unmount().await?;
        self.offline_online().await?;
        // Resizing a VHDX outside a VM is an offline operation: detached, resized, attached
        // again, and the volume grown on the disk it became.
        self.grow().await?;
        // What Windows answers in conditions the daemon's API cannot make, made on the
        // selftest's own objects; last, so an answer the model did not expect (a failed step)
        // leaves every step of the stage flow run. Each cleans up after itself.
        self.held().await?;
        self.direct().await
    }
}
