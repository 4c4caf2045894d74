//! Disk group: disks by number, their locations and IDs, partitioning and online state.
//!
//! [`DiskService`] holds the version-agnostic logic every disk API version is served by; the
//! [`DiskHost`] trait is the thin OS layer implemented per platform in `csi-proxy-host`. Semantics
//! follow upstream's disk API (docs/differences.md lists where they part).

use crate::error::{Error, Kind, Result};
use crate::locks::lock_disk;
use crate::paths::PathPolicy;
use std::collections::BTreeMap;
use std::sync::Arc;

mod in_use;
mod storage;
pub use in_use::{DiskUsage, OpenElsewhere, OtherPath, OwnUse, ask_open_elsewhere, refuse_in_use};
pub use storage::{Reach, StorageId, same_storage, storage_group};

/// Where a disk is attached, as the host reports it. Every field may be empty when the host
/// does not know it (upstream leaves `bus` empty on most hosts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskLocation {
    /// Storage adapter (controller) number.
    pub adapter: String,
    /// Bus number.
    pub bus: String,
    /// Target number.
    pub target: String,
    /// Logical unit number; drivers find their disk by it (AzureDisk, EBS).
    pub lun_id: String,
}

/// The identifiers of one disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskIds {
    /// SCSI VPD page 0x83 device identifier: an ASCII identifier verbatim, a binary one as
    /// lowercase hex, empty when the disk has none.
    pub page83: String,
    /// The disk's serial number, verbatim (may be blanks or end in `.`).
    pub serial_number: String,
}

/// OS primitives of the disk group. Disks are named by their OS disk number.
///
/// Every method is required: each platform's host answers every RPC itself, so a forgotten method
/// is a compile error rather than an UNIMPLEMENTED in production. Test doubles that need only a
/// few methods implement `csi_proxy_core::testing::PartialDiskHost` instead (feature `testing`).
pub trait DiskHost: Send + Sync {
    /// Every disk's location, keyed by disk number; disks without a parsable location are left out.
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>>;

    /// Initialises a raw disk (GPT) and creates one maximum-size data partition unless a
    /// non-reserved partition exists already. Idempotent; never formats.
    fn partition_disk(&self, disk_number: u32) -> Result<()>;

    /// Makes the OS re-enumerate its disks.
    fn rescan(&self) -> Result<()>;

    /// Every disk's identifiers, keyed by disk number; a failure on any disk fails the call.
    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>>;

    /// The disk's size in bytes.
    fn get_disk_size(&self, disk_number: u32) -> Result<u64>;

    /// Brings the disk online or offline; already being in that state is success.
    fn set_disk_online(&self, disk_number: u32, online: bool) -> Result<()>;

    /// Whether the disk is online.
    fn is_disk_online(&self, disk_number: u32) -> Result<bool>;

    /// What the host uses the disk for (see [`DiskUsage`]). Mutating RPCs are refused while this
    /// is unknown, so a host that cannot tell leaves every disk alone.
    fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage>;

    /// The volumes of the disk something else has open ([`OpenElsewhere`]), asked under the
    /// disk's lock only by the RPCs that rewrite or remove what is on it. A host whose
    /// [`Self::disk_usage`] already reports such users (Linux: processes holding the disk and
    /// an `O_EXCL` open) answers none.
    fn volumes_open_elsewhere(&self, disk_number: u32) -> Result<Vec<OpenElsewhere>>;
}

/// The version-agnostic disk service every disk API version is served by.
///
/// Per-disk serialisation and the data-safety checks (docs/security.md) live here, in front of the
/// host calls, so every API version gets them.
#[derive(Clone)]
pub struct DiskService {
    host: Arc<dyn DiskHost>,
    roots: Arc<PathPolicy>,
}

impl DiskService {
    /// A service over `host`; mounts strictly below `roots` are the drivers' own (not a reason
    /// to refuse a disk).
    pub fn new(host: Arc<dyn DiskHost>, roots: Arc<PathPolicy>) -> Self {
        Self { host, roots }
    }

    /// The same service judging mounts by `roots` (a profile's scope, [`crate::profiles`]).
    pub fn with_roots(&self, roots: Arc<PathPolicy>) -> Self {
        Self {
            host: self.host.clone(),
            roots,
        }
    }

    /// Holds the disk and refuses it when the host or someone else uses it; with `opens`, a
    /// volume of it that something else has open counts too.
    fn claim(&self, op: &str, disk_number: u32, opens: bool) -> Result<crate::locks::DiskGuard> {
        let guard = lock_disk(disk_number, op, &format!("disk {disk_number}"))?;
        let mut usage = self
            .host
            .disk_usage(disk_number)
            .map_err(|e| e.context(op))?;
        if opens {
            ask_open_elsewhere(&mut usage, disk_number, |n| {
                self.host
                    .volumes_open_elsewhere(n)
                    .map_err(|e| e.context(op))
            })?;
        }
        refuse_in_use(
            op,
            &format!("disk {disk_number}"),
            &usage,
            OwnUse::MountsBelow(&self.roots),
        )?;
        Ok(guard)
    }

    /// ListDiskLocations: every disk's location by disk number (empty when there are none).
    pub fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        self.host.list_disk_locations()
    }

    /// PartitionDisk: initialise and partition the disk, idempotently.
    pub fn partition_disk(&self, disk_number: u32) -> Result<()> {
        let _held = self.claim("PartitionDisk", disk_number, true)?;
        self.host.partition_disk(disk_number)
    }

    /// Rescan: re-enumerate the host's disks.
    pub fn rescan(&self) -> Result<()> {
        self.host.rescan()
    }

    /// ListDiskIDs: every disk's page 0x83 ID and serial number by disk number.
    pub fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        self.host.list_disk_ids()
    }

    /// GetDiskStats: the disk's size in bytes.
    pub fn get_disk_stats(&self, disk_number: u32) -> Result<u64> {
        self.host.get_disk_size(disk_number)
    }

    /// SetDiskState: bring the disk online or offline (idempotent).
    pub fn set_disk_state(&self, disk_number: u32, is_online: bool) -> Result<()> {
        // Taking a disk offline removes its volumes from under whoever has them open.
        let _held = self.claim("SetDiskState", disk_number, !is_online)?;
        self.host.set_disk_online(disk_number, is_online)
    }

    /// GetDiskState: whether the disk is online.
    pub fn get_disk_state(&self, disk_number: u32) -> Result<bool> {
        self.host.is_disk_online(disk_number)
    }

    /// GetDiskNumberByName (disk v1alpha1): the lowest-numbered disk whose page 0x83 ID equals
    /// `page83` exactly.
    pub fn get_disk_number_by_name(&self, page83: &str) -> Result<u32> {
        const OP: &str = "GetDiskNumberByName";
        // Disks without a page 0x83 ID report "", so an empty name would pick an arbitrary disk.
        if page83.is_empty() {
            return Err(Error::invalid(OP, "disk_name", "must not be empty"));
        }
        let ids = self.host.list_disk_ids().map_err(|e| e.context(OP))?;
        ids.into_iter()
            .find(|(_, id)| id.page83 == page83)
            .map(|(number, _)| number)
            .ok_or_else(|| {
                Error::new(
                    Kind::NotFound,
                    OP,
                    format!("disk_name {page83:?}"),
                    "no disk has this page 0x83 ID",
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PartialDiskHost;

    struct TwoDisks;

    impl PartialDiskHost for TwoDisks {
        fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
            let id = |p: &str| DiskIds {
                page83: p.into(),
                serial_number: String::new(),
            };
            Ok(BTreeMap::from([
                (3, id("")),
                (1, id("pd-a")),
                (7, id("pd-a")),
            ]))
        }
    }

    fn svc(host: impl DiskHost + 'static) -> DiskService {
        DiskService::new(
            Arc::new(host),
            crate::testing::kubelet_fs().policy().clone(),
        )
    }

    /// Reports a fixed usage and records whether the host was asked to change anything.
    struct Used(DiskUsage, std::sync::Mutex<Vec<&'static str>>);

    impl PartialDiskHost for Used {
        fn disk_usage(&self, _: u32) -> Result<DiskUsage> {
            Ok(self.0.clone())
        }
        fn partition_disk(&self, _: u32) -> Result<()> {
            self.1.lock().unwrap().push("partition");
            Ok(())
        }
        fn set_disk_online(&self, _: u32, _: bool) -> Result<()> {
            self.1.lock().unwrap().push("state");
            Ok(())
        }
    }

    #[test]
    fn disks_the_host_uses_are_refused_before_the_host_is_asked() {
        let mounts = |m: &[&str]| DiskUsage {
            mount_points: m.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let refused = [
            mounts(&["/"]),
            mounts(&["/var/lib/kubelet/pods/x", "/home"]),
            mounts(&["/var/lib/kubelet"]), // the root itself is the admin's, not a driver's
            mounts(&["/var/lib/kubelet-evil/x"]),
            DiskUsage {
                system_use: Some("holds active swap".into()),
                ..Default::default()
            },
            DiskUsage {
                processes: vec!["42 (sleep)".into()],
                ..Default::default()
            },
        ];
        for usage in refused {
            let host = Arc::new(Used(usage.clone(), Default::default()));
            let s = DiskService::new(host.clone(), crate::testing::kubelet_fs().policy().clone());
            for e in [
                s.partition_disk(7).unwrap_err(),
                s.set_disk_state(7, false).unwrap_err(),
            ] {
                assert_eq!(e.kind(), Kind::FailedPrecondition, "{usage:?}");
                assert!(e.message().contains("disk 7: refused"), "{}", e.message());
            }
            assert!(host.1.lock().unwrap().is_empty(), "{usage:?}");
        }
        let host = Arc::new(Used(
            mounts(&["/var/lib/kubelet/plugins/kubernetes.io/csi/x/globalmount"]),
            Default::default(),
        ));
        let s = DiskService::new(host.clone(), crate::testing::kubelet_fs().policy().clone());
        s.partition_disk(7).unwrap();
        s.set_disk_state(7, true).unwrap();
        assert_eq!(*host.1.lock().unwrap(), ["partition", "state"]);
    }

    /// A data disk Windows lettered by itself (D:) is a driver's to use, as upstream has it; a
    /// folder mount outside the roots and the host's own disks stay refused.
    #[test]
    fn a_drive_letter_alone_does_not_make_a_windows_disk_the_hosts() {
        let policy = crate::paths::PathPolicy::new(
            crate::paths::PathStyle::Windows,
            r"C:\var\lib\kubelet",
            &[],
        )
        .unwrap();
        let usage = |m: &[&str], system: Option<&str>| DiskUsage {
            mount_points: m.iter().map(|s| s.to_string()).collect(),
            system_use: system.map(str::to_string),
            ..Default::default()
        };
        for ok in [
            usage(&[r"D:\"], None),
            usage(&["E:", r"C:\var\lib\kubelet\plugins\x\globalmount\"], None),
        ] {
            refuse_in_use("PartitionDisk", "disk 2", &ok, OwnUse::MountsBelow(&policy)).unwrap();
        }
        for refused in [
            usage(&[r"C:\data\"], None),
            usage(&[r"D:\"], Some("holds a page file (D:\\pagefile.sys)")),
            usage(&[r"C:\"], Some("holds the Windows system volume")),
            usage(&[r"D:\x"], None),
        ] {
            let e = refuse_in_use(
                "PartitionDisk",
                "disk 2",
                &refused,
                OwnUse::MountsBelow(&policy),
            )
            .unwrap_err();
            assert_eq!(e.kind(), Kind::FailedPrecondition, "{refused:?}");
        }
        // On Linux a path like "D:" is no drive at all.
        let linux = crate::testing::kubelet_fs().policy().clone();
        assert!(
            refuse_in_use(
                "PartitionDisk",
                "disk 2",
                &usage(&["D:"], None),
                OwnUse::MountsBelow(&linux)
            )
            .is_err()
        );
        assert!(crate::paths::is_drive_root("z:"));
        assert!(!crate::paths::is_drive_root(r"\\?\Volume{x}\"));
        assert!(!crate::paths::is_drive_root("1:"));
    }

    #[test]
    fn a_host_that_cannot_tell_usage_changes_nothing() {
        struct Blind;
        impl PartialDiskHost for Blind {
            fn partition_disk(&self, _: u32) -> Result<()> {
                panic!("must not be reached")
            }
        }
        let e = svc(Blind).partition_disk(3).unwrap_err();
        assert_eq!(e.kind(), Kind::FailedPrecondition);
        assert!(
            e.message().starts_with("PartitionDisk: disk 3"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn disk_number_by_name_takes_the_lowest_match() {
        assert_eq!(svc(TwoDisks).get_disk_number_by_name("pd-a"), Ok(1));
    }

    #[test]
    fn disk_number_by_name_not_found_and_empty() {
        let e = svc(TwoDisks).get_disk_number_by_name("pd-b").unwrap_err();
        assert_eq!(e.kind(), Kind::NotFound);
        assert!(
            e.message().contains("GetDiskNumberByName"),
            "{}",
            e.message()
        );
        assert!(e.message().contains("pd-b"), "{}", e.message());
        let e = svc(TwoDisks).get_disk_number_by_name("").unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument);
        assert!(e.message().contains("disk_name"), "{}", e.message());
    }

    #[test]
    fn an_empty_host_answers_unimplemented_per_rpc() {
        let s = svc(crate::testing::UnimplementedHost);
        let results = [
            ("ListDiskLocations", s.list_disk_locations().map(drop)),
            ("PartitionDisk", s.partition_disk(1)),
            ("Rescan", s.rescan()),
            ("ListDiskIDs", s.list_disk_ids().map(drop)),
            ("GetDiskStats", s.get_disk_stats(1).map(drop)),
            ("SetDiskState", s.set_disk_state(1, true)),
            ("GetDiskState", s.get_disk_state(1).map(drop)),
            ("ListDiskIDs", s.get_disk_number_by_name("x").map(drop)),
        ];
        for (rpc, r) in results {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), Kind::Unimplemented);
            assert!(
                e.message().contains(&format!("disk {rpc}")),
                "{}",
                e.message()
            );
        }
    }
}
