//! A host whose chosen call hangs: [`Hanging`] wraps any host of the disk, volume, SMB, iSCSI
//! and system groups (the fake Linux host, the simulated Windows one, a test double) and makes
//! the one call its [`HangPlan`] names block until released, as a device, portal or server
//! that stopped answering does.
//!
//! The wrapper's trait impls are written by one macro from one list of the host traits'
//! methods, and [`HOST_CALLS`] is made from the same list: every method of those traits is
//! required, so a method added to a trait is a compile error here until it is listed, and then
//! it is in [`HOST_CALLS`], which the hang matrix tests enumerate.

use crate::Result;
use crate::disk::{DiskHost, DiskIds, DiskLocation, DiskUsage, OpenElsewhere};
use crate::iscsi::{Chap, IscsiHost, Secret, TargetPortal};
use crate::smb::{MappingState, SmbHost, SmbMapping, SmbUsers};
use crate::system::{ServiceInfo, SystemHost};
use crate::volume::{ResizeTarget, VolumeHost, VolumeStats};
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// One method of a host trait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCall {
    /// The trait, e.g. `DiskHost`.
    pub host: &'static str,
    /// The method, e.g. `partition_disk`.
    pub method: &'static str,
}

/// The disk a hung call never hangs for: the disk the other client's calls use while the
/// matrix floods a call on another one.
pub const SPARED_DISK: u32 = 2;

/// Which call hangs, until when.
#[derive(Debug, Default)]
pub struct HangPlan {
    hanging: Mutex<Option<HostCall>>,
    wake: Condvar,
    entered: AtomicUsize,
}

impl HangPlan {
    /// From now on `call` hangs (on every object but [`SPARED_DISK`]) until [`Self::release`].
    pub fn hang(&self, call: HostCall) {
        self.entered.store(0, Ordering::SeqCst);
        *self.hanging.lock().unwrap_or_else(|p| p.into_inner()) = Some(call);
    }

    /// Lets every hung call go on, and no later one hang.
    pub fn release(&self) {
        *self.hanging.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.wake.notify_all();
    }

    /// How many calls have hung since [`Self::hang`] (those still hanging and those let go).
    pub fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }

    /// Hangs the calling thread while `call` is the hanging call, unless it acts on `disk`
    /// [`SPARED_DISK`].
    fn point(&self, call: HostCall, disk: Option<u32>) {
        if disk == Some(SPARED_DISK) {
            return;
        }
        let mut hanging = self.hanging.lock().unwrap_or_else(|p| p.into_inner());
        if *hanging != Some(call) {
            return;
        }
        self.entered.fetch_add(1, Ordering::SeqCst);
        while *hanging == Some(call) {
            hanging = self.wake.wait(hanging).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A host of one group (`H`: `Arc<dyn DiskHost>` and the like) whose calls hang as `plan`
/// says, and otherwise go to `inner`.
pub struct Hanging<H: ?Sized> {
    inner: Arc<H>,
    plan: Arc<HangPlan>,
}

impl<H: ?Sized> Hanging<H> {
    /// `inner`, hanging as `plan` says.
    pub fn new(inner: Arc<H>, plan: Arc<HangPlan>) -> Arc<Self> {
        Arc::new(Hanging { inner, plan })
    }
}

/// The disk a method's `disk_number`/`number` argument names, if it has one.
macro_rules! disk_of {
    () => {
        None
    };
    ($d:ident) => {
        Some($d)
    };
}

/// Writes each trait's impl for [`Hanging`] and the list of every method, from one list.
macro_rules! hanging_hosts {
    ($(
        $host:ident {
            $( fn $m:ident(&self $(, $a:ident: $t:ty)*) -> $ret:ty $(; disk $d:ident)?; )*
        }
    )*) => {
        $(
            impl $host for Hanging<dyn $host> {
                $(
                    fn $m(&self $(, $a: $t)*) -> $ret {
                        self.plan.point(
                            HostCall { host: stringify!($host), method: stringify!($m) },
                            disk_of!($($d)?),
                        );
                        self.inner.$m($($a),*)
                    }
                )*
            }
        )*

        /// Every method of the disk, volume, SMB, iSCSI and system host traits.
        pub const HOST_CALLS: &[HostCall] = &[
            $($( HostCall { host: stringify!($host), method: stringify!($m) }, )*)*
        ];
    };
}

hanging_hosts! {
    DiskHost {
        fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>>;
        fn partition_disk(&self, disk_number: u32) -> Result<()>; disk disk_number;
        fn rescan(&self) -> Result<()>;
        fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>>;
        fn get_disk_size(&self, disk_number: u32) -> Result<u64>; disk disk_number;
        fn set_disk_online(&self, disk_number: u32, online: bool) -> Result<()>; disk disk_number;
        fn is_disk_online(&self, disk_number: u32) -> Result<bool>; disk disk_number;
        fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage>; disk disk_number;
        fn volumes_open_elsewhere(&self, disk_number: u32) -> Result<Vec<OpenElsewhere>>; disk disk_number;
    }
    VolumeHost {
        fn list_volumes_on_disk(&self, disk_number: u32, partition: Option<NonZeroU32>) -> Result<Vec<String>>; disk disk_number;
        fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()>;
        fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()>;
        fn is_volume_formatted(&self, volume_id: &str) -> Result<bool>;
        fn format_volume(&self, volume_id: &str) -> Result<()>;
        fn resize_volume(&self, volume_id: &str, target: ResizeTarget) -> Result<()>;
        fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats>;
        fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32>;
        fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String>;
        fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String>;
        fn write_volume_cache(&self, volume_id: &str) -> Result<()>;
        fn volume_disk_number(&self, volume_id: &str) -> Result<u32>;
        fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage>; disk disk_number;
        fn volumes_open_elsewhere(&self, disk_number: u32) -> Result<Vec<OpenElsewhere>>; disk disk_number;
    }
    SmbHost {
        fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()>;
        fn new_smb_link(&self, mapping: &SmbMapping, remote_path: &str, local_path: &str) -> Result<()>;
        fn remove_smb_global_mapping(&self, root: &str) -> Result<()>;
        fn remove_credential_mapping(&self, mapping: &SmbMapping) -> Result<()>;
        fn smb_global_mapping(&self, root: &str) -> Result<MappingState>;
        fn credential_mapping(&self, mapping: &SmbMapping) -> Result<Option<MappingState>>;
        fn smb_global_mappings(&self) -> Result<Vec<String>>;
        fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<SmbUsers>;
    }
    IscsiHost {
        fn add_target_portal(&self, portal: &TargetPortal) -> Result<()>;
        fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>>;
        fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()>;
        fn list_target_portals(&self) -> Result<Vec<TargetPortal>>;
        fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()>;
        fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()>;
        fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>>;
        fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()>;
        fn target_disk_usage(&self, number: u32) -> Result<Option<DiskUsage>>; disk number;
    }
    SystemHost {
        fn bios_serial_number(&self) -> Result<String>;
        fn get_service(&self, name: &str) -> Result<ServiceInfo>;
        fn start_service(&self, name: &str) -> Result<()>;
        fn stop_service(&self, name: &str, force: bool) -> Result<()>;
    }
}
