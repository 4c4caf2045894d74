//! What the selftest's tests over the simulated Windows share: its options, the simulator's
//! model of another process as the selftest's second process, and what "nothing left" means.
// Each test binary uses a part of it.
#![allow(dead_code, unused_imports)]

use crate::common::{KUBELET, SimDaemon};
use csi_proxy_ctl::selftest::hold::{Hold, Holding, OtherProcess};
use csi_proxy_ctl::selftest::{self, Machine, Options, Outcome};
use csi_proxy_host::windows::disk::volume_device;
use csi_proxy_host::windows::os::{Access, Win32};
use csi_proxy_host::windows::sim::SimWindows;
use csi_proxy_host::windows::sim::holders::{FILE_SHARE_READ, FILE_SHARE_WRITE};
use csi_proxy_host::windows::vhd::VirtualDisks;
use std::sync::Arc;
use std::time::Duration;

pub const MIB: u64 = 1 << 20;
pub const VHDX: &str = r"C:\selftest\node.vhdx";

pub fn options() -> Options {
    Options {
        kubelet_path: KUBELET.into(),
        vhdx_path: VHDX.into(),
        size: 1024 * MIB,
        grown_size: 1536 * MIB,
        wait: Duration::from_secs(5),
        failure_flag: None,
        iscsi: None,
        smb_server: None,
        program: Some(PROGRAM.into()),
    }
}

/// The program the selftest's scratch service is made with in these tests; the simulated SCM
/// models its process (`hold_stop_for_program`).
pub const PROGRAM: &str = r"C:\selftest\csi-proxy-ctl.exe";

pub async fn run_over(d: &SimDaemon, vd: &dyn VirtualDisks) -> Outcome {
    d.sim.mkdir(r"C:\selftest");
    run_with(d, vd, &options()).await
}

/// The simulated Windows' model of another process (handles that are not the daemon's), as the
/// selftest's second process: what `csi-proxy-ctl selftest-hold` holds on a node.
pub struct SimOthers(pub Arc<SimWindows>);

pub enum SimHeld {
    /// A device handle of the other process.
    Device(Arc<SimWindows>, u64),
    /// A volume it locked.
    Lock(Arc<SimWindows>, String),
    /// An entry it holds.
    Entry(Arc<SimWindows>, u64),
}

impl OtherProcess for SimOthers {
    fn hold(&self, what: &Hold) -> Result<Box<dyn Holding>, String> {
        let sim = self.0.clone();
        let share = FILE_SHARE_READ | FILE_SHARE_WRITE;
        Ok(Box::new(match what {
            Hold::Open(v) => {
                let h = sim.open_in_other_process(&volume_device(v), Access::Read, share);
                SimHeld::Device(sim, h)
            }
            Hold::Disk(d) => {
                let h = sim.open_in_other_process(d, Access::Read, share);
                SimHeld::Device(sim, h)
            }
            Hold::Lock(v) => {
                sim.set_volume_locked(v, true);
                SimHeld::Lock(sim, v.clone())
            }
            Hold::Entry(p) => {
                let h = sim.hold_entry(p, Duration::from_secs(3600));
                SimHeld::Entry(sim, h)
            }
        }))
    }
}

impl Holding for SimHeld {
    fn release(self: Box<Self>) -> Result<String, String> {
        Ok(match *self {
            SimHeld::Device(sim, h) => {
                let works = sim.other_handle_works(h);
                sim.close_in_other_process(h);
                if works {
                    "released: its handle still read".into()
                } else {
                    "released: its handle no longer read: the volume was dismounted".into()
                }
            }
            SimHeld::Lock(sim, v) => {
                sim.set_volume_locked(&v, false);
                "released: its handle still read".into()
            }
            SimHeld::Entry(sim, h) => {
                Win32::close(sim.as_ref(), h);
                "released".into()
            }
        })
    }
}

/// The selftest over the simulated Windows: its own calls are the simulator's, its second
/// process the simulator's model of another process.
pub async fn run_with(d: &SimDaemon, vd: &dyn VirtualDisks, opts: &Options) -> Outcome {
    d.sim.hold_stop_for_program(PROGRAM);
    let others = SimOthers(d.sim.clone());
    let machine = Machine {
        vd,
        os: d.sim.as_ref(),
        others: &others,
    };
    selftest::run(&d.connector, machine, opts).await
}

/// The names of the steps that ran and failed, in order.
pub fn failed_steps(o: &Outcome) -> Vec<&str> {
    o.steps
        .iter()
        .filter(|s| s.ran && !s.ok)
        .map(|s| s.name.as_str())
        .collect()
}

/// The step recorded as `name`.
pub fn step<'a>(o: &'a Outcome, name: &str) -> &'a csi_proxy_ctl::selftest::Step {
    o.steps
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no step {name:?} in {:?}", names(o)))
}

pub fn names(o: &Outcome) -> Vec<&str> {
    o.steps.iter().map(|s| s.name.as_str()).collect()
}

/// Nothing of the selftest is left on the machine: no VHDX file, no disk beyond the system
/// disk, no scratch folder, no mount point but `C:`.
pub fn nothing_left(sim: &SimWindows) {
    assert_eq!(sim.vhd_files(), vec![], "the VHDX file is deleted");
    assert!(sim.partitions(1).is_empty(), "the VHDX's disk is gone");
    let mps: Vec<String> = sim.mount_points().into_iter().map(|m| m.0).collect();
    assert_eq!(mps, vec![r"C:\".to_string()]);
    let scratch = format!(r"{KUBELET}\csi-proxy-selftest-{}", std::process::id());
    assert!(!sim.entry_exists(&scratch), "{scratch} is removed");
}

pub const PORTAL: &str = "10.0.0.9";
pub const IQN: &str = "iqn.2026-01.test:selftest";

pub fn iscsi_options() -> Options {
    Options {
        iscsi: Some(selftest::IscsiTarget {
            portal: csi_proxy_client::iscsi::Portal {
                address: PORTAL.into(),
                port: 3260,
            },
            iqn: IQN.into(),
        }),
        ..options()
    }
}

pub fn print(o: &Outcome) {
    for s in &o.steps {
        println!(
            "{:<40} ran {:<5} ok {:<5} {:>6} ms  {}",
            s.name,
            s.ran,
            s.ok,
            s.time.as_millis(),
            s.answer
        );
    }
}
