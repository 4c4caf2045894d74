//! Volume group: volumes on disks, format, mount, resize, stats.
//!
//! [`VolumeService`] holds the version-agnostic logic every volume API version is served by
//! (empty-argument checks, size validation, path confinement); the [`VolumeHost`] trait is the thin
//! OS layer implemented per platform in `csi-proxy-host`. Semantics follow upstream's volume API
//! (docs/differences.md lists where they part).
//!
//! Volume IDs are opaque strings the host hands out (`\\?\Volume{GUID}\` on Windows); they must
//! round-trip byte-exact, so nothing here normalises them.

use crate::disk::{DiskUsage, OpenElsewhere, OwnUse, refuse_in_use};
use crate::error::{Error, Kind, Result};
use crate::filesystem::{FilesystemService, HeldPath};
use crate::locks::{DiskGuard, lock_disk};
use std::num::NonZeroU32;
use std::sync::Arc;

pub mod rules;

/// What every NOT_FOUND answer of GetVolumeIDFromTargetPath says. aws-ebs-csi-driver reads a
/// failure of that call as "nothing is mounted there" only when its text contains `because it
/// does not exist` (upstream's PowerShell-era wording); any other text fails its NodeStage and
/// makes its NodeUnstage of a missing path retry forever.
pub const NOT_MOUNTED_TEXT: &str = "no volume is mounted there, because it does not exist";

/// The size a volume is resized to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeTarget {
    /// The largest size the partition can grow to (requested as `size_bytes == 0`).
    Maximum,
    /// This many bytes (always > 0).
    Bytes(u64),
}

/// Capacity of a volume's filesystem.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeStats {
    /// Total size in bytes.
    pub total_bytes: u64,
    /// Bytes in use (total minus free).
    pub used_bytes: u64,
}

/// OS primitives of the volume group. Target paths are already confined to the allowed roots;
/// volume IDs are non-empty and passed verbatim.
///
/// Every method is required: each platform's host answers every RPC itself, so a forgotten method
/// is a compile error rather than an UNIMPLEMENTED in production. Test doubles that need only a
/// few methods implement `csi_proxy_core::testing::PartialVolumeHost` instead (feature `testing`).
pub trait VolumeHost: Send + Sync {
    /// IDs of the volumes on the disk, in partition order; `partition` `None` means every
    /// partition. A disk without volumes yields an empty list; a disk that does not exist is
    /// NOT_FOUND, as for every other disk RPC.
    fn list_volumes_on_disk(
        &self,
        disk_number: u32,
        partition: Option<NonZeroU32>,
    ) -> Result<Vec<String>>;

    /// Mounts the volume at the existing empty directory `target_path`; the same volume already
    /// mounted there is success.
    fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()>;

    /// Flushes the volume and removes the mount point at `target_path`, keeping the directory.
    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()>;

    /// Whether the volume carries any filesystem; an unknown volume is an error.
    fn is_volume_formatted(&self, volume_id: &str) -> Result<bool>;

    /// Quick-formats the volume (NTFS on Windows), unconditionally.
    fn format_volume(&self, volume_id: &str) -> Result<()>;

    /// Grows the volume's partition and filesystem to `target`; a target below the current size
    /// plus 100 MiB is a no-op success (upstream's rule, which also makes shrinking a no-op).
    fn resize_volume(&self, volume_id: &str, target: ResizeTarget) -> Result<()>;

    /// The volume's filesystem capacity and usage.
    fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats>;

    /// The number of the disk holding the volume's (first) partition.
    fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32>;

    /// The ID of the volume mounted at `target_path` (or at the mount point a link there leads
    /// to); an error when it is not a mount point.
    fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String>;

    /// The ID of the volume `target_path` lives on: its own mount, the nearest mounted ancestor,
    /// or the volume of the root it is under.
    fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String>;

    /// Flushes the volume's write cache to disk.
    fn write_volume_cache(&self, volume_id: &str) -> Result<()>;

    /// The number of the disk holding the volume, to serialise on before anything else is
    /// asked. Mutating RPCs are refused while this is unknown.
    fn volume_disk_number(&self, volume_id: &str) -> Result<u32>;

    /// What the host uses the disk for (asked under the disk's lock, once the volume's disk is
    /// known), so the service keeps away from the host's own disks.
    fn disk_usage(&self, disk_number: u32) -> Result<DiskUsage>;

    /// The volumes of the disk something else has open, as
    /// [`crate::disk::DiskHost::volumes_open_elsewhere`] answers (asked by FormatVolume only).
    fn volumes_open_elsewhere(&self, disk_number: u32) -> Result<Vec<OpenElsewhere>>;
}

/// How much of a disk's use an RPC on one of its volumes checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Nothing: the RPC leaves the disk as it is (UnmountVolume removes the caller's own
    /// mount, WriteVolumeCache flushes).
    Nothing,
    /// The facts [`VolumeHost::disk_usage`] reports (MountVolume, ResizeVolume).
    Facts,
    /// Those, and volumes something else has open (FormatVolume, which rewrites the volume).
    FactsAndOpens,
}

/// The version-agnostic volume service every volume API version is served by.
///
/// Per-volume serialisation and the data-safety checks (docs/security.md, e.g. refusing to format a
/// volume that holds data) belong here, in front of the host calls, so every API version gets them.
#[derive(Clone)]
pub struct VolumeService {
    host: Arc<dyn VolumeHost>,
    fs: FilesystemService,
}

/// Rejects an empty required string argument, naming the RPC and the field (upstream rejects
/// these too, before touching the host).
fn required(op: &str, field: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(op, field, "must not be empty"));
    }
    Ok(())
}

impl VolumeService {
    /// A service over `host`; target paths are confined by `fs`'s path policy.
    pub fn new(host: Arc<dyn VolumeHost>, fs: FilesystemService) -> Self {
        Self { host, fs }
    }

    /// The same service confining paths with `fs` (a profile's scope, [`crate::profiles`]).
    pub fn with_fs(&self, fs: FilesystemService) -> Self {
        Self {
            host: self.host.clone(),
            fs,
        }
    }

    /// Holds the disk of the volume and refuses it, as `guard` says, when the host or someone else
    /// uses the disk.
    fn claim(&self, op: &str, volume_id: &str, guard: Guard) -> Result<DiskGuard> {
        let disk = self
            .host
            .volume_disk_number(volume_id)
            .map_err(|e| e.context(op))?;
        let held = lock_disk(disk, op, &format!("volume {volume_id:?} on disk {disk}"))?;
        if guard != Guard::Nothing {
            // Asked under the lock: mounts may have changed while waiting for it.
            let mut usage = self.host.disk_usage(disk).map_err(|e| e.context(op))?;
            if guard == Guard::FactsAndOpens {
                crate::disk::ask_open_elsewhere(&mut usage, disk, |n| {
                    self.host
                        .volumes_open_elsewhere(n)
                        .map_err(|e| e.context(op))
                })?;
            }
            refuse_in_use(
                op,
                &format!("volume {volume_id:?} on disk {disk}"),
                &usage,
                OwnUse::MountsBelow(self.fs.policy()),
            )?;
        }
        Ok(held)
    }

    /// Checks that `target_path` is given and may be a mount target
    /// ([`FilesystemService::check_target`]), before the call waits for its disk.
    fn check_target(&self, op: &str, target_path: &str) -> Result<()> {
        required(op, "target_path", target_path)?;
        self.fs.check_target(op, target_path).map(drop)
    }

    /// Confines `target_path` to the allowed roots and holds it, once the call holds its disk (the
    /// lock order, [`crate::locks`]: never a path while waiting for a disk): the host is given a
    /// path that names the checked entry through held directories, so a component swapped for a
    /// link meanwhile cannot redirect it. The path is also held against other changes of it (a
    /// stale call's late act must not undo them).
    fn target(&self, op: &str, target_path: &str) -> Result<Option<HeldPath>> {
        self.fs.hold_to_change(op, target_path)
    }

    /// ListVolumesOnDisk: volume IDs on the disk; `partition_number == 0` means all partitions.
    ///
    /// Holds the disk: listing may bring the kernel's view of the disk's partitions in line
    /// with its table (Linux: BLKRRPART, BLKPG), which must never interleave with a table write,
    /// a format or a resize of the same disk.
    pub fn list_volumes_on_disk(
        &self,
        disk_number: u32,
        partition_number: u32,
    ) -> Result<Vec<String>> {
        const OP: &str = "ListVolumesOnDisk";
        let _held = lock_disk(disk_number, OP, &format!("disk {disk_number}"))?;
        self.host
            .list_volumes_on_disk(disk_number, NonZeroU32::new(partition_number))
    }

    /// MountVolume: mount the volume at `target_path` (confined; the directory must exist).
    pub fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        const OP: &str = "MountVolume";
        required(OP, "volume_id", volume_id)?;
        self.check_target(OP, target_path)?;
        let _held = self.claim(OP, volume_id, Guard::Facts)?;
        let Some(target) = self.target(OP, target_path)? else {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                format!("volume {volume_id:?} at {target_path:?}"),
                "a directory above the target path does not exist",
            ));
        };
        self.host
            .mount_volume(volume_id, &target.os_path)
            .map_err(|e| e.shown_as(&target.os_path, &target.normalised))
    }

    /// UnmountVolume: flush the volume and remove its mount point at `target_path` (confined).
    pub fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        const OP: &str = "UnmountVolume";
        required(OP, "volume_id", volume_id)?;
        self.check_target(OP, target_path)?;
        // A volume that cannot be found (its disk was detached by force) may still have a stale
        // mount on the target: the host decides whether what is there is that mount. With the
        // disk gone, there is no disk to hold.
        let _held = match self.claim(OP, volume_id, Guard::Nothing) {
            Ok(held) => Some(held),
            Err(e) if e.kind() == Kind::NotFound => None,
            Err(e) => return Err(e),
        };
        let target = self.target(OP, target_path)?;
        // Where nothing exists, nothing is mounted: success, as for any path that is not a
        // mount point.
        let Some(target) = target else {
            return Ok(());
        };
        self.host
            .unmount_volume(volume_id, &target.os_path)
            .map_err(|e| e.shown_as(&target.os_path, &target.normalised))
    }

    /// IsVolumeFormatted: whether the volume has any filesystem.
    pub fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        required("IsVolumeFormatted", "volume_id", volume_id)?;
        self.host.is_volume_formatted(volume_id)
    }

    /// FormatVolume: quick-format the volume.
    pub fn format_volume(&self, volume_id: &str) -> Result<()> {
        required("FormatVolume", "volume_id", volume_id)?;
        let _held = self.claim("FormatVolume", volume_id, Guard::FactsAndOpens)?;
        self.host.format_volume(volume_id)
    }

    /// ResizeVolume: grow the volume to `size_bytes`; 0 means the maximum, negative is invalid.
    pub fn resize_volume(&self, volume_id: &str, size_bytes: i64) -> Result<()> {
        const OP: &str = "ResizeVolume";
        required(OP, "volume_id", volume_id)?;
        let target = match u64::try_from(size_bytes) {
            Ok(0) => ResizeTarget::Maximum,
            Ok(n) => ResizeTarget::Bytes(n),
            Err(_) => {
                return Err(Error::invalid(
                    OP,
                    format!("size_bytes {size_bytes}"),
                    "must not be negative",
                ));
            }
        };
        let _held = self.claim(OP, volume_id, Guard::Facts)?;
        self.host.resize_volume(volume_id, target)
    }

    /// GetVolumeStats: the volume's filesystem capacity and usage.
    pub fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        required("GetVolumeStats", "volume_id", volume_id)?;
        self.host.get_volume_stats(volume_id)
    }

    /// GetDiskNumberFromVolumeID: the disk holding the volume.
    pub fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32> {
        required("GetDiskNumberFromVolumeID", "volume_id", volume_id)?;
        self.host.get_disk_number_from_volume_id(volume_id)
    }

    /// GetVolumeIDFromTargetPath: the volume mounted at `target_path` (confined).
    pub fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        // Drivers ask through links to mount points (publish paths), so the link is followed;
        // where it leads must be inside the roots too.
        const OP: &str = "GetVolumeIDFromTargetPath";
        required(OP, "target_path", target_path)?;
        self.fs
            .hold(OP, target_path, true)
            .and_then(|target| match target {
                Some(t) => self.host.get_volume_id_from_target_path(&t.os_path),
                None => Err(Error::io(
                    OP,
                    format!("target_path {target_path:?}"),
                    &std::io::Error::from(std::io::ErrorKind::NotFound),
                )),
            })
            .map_err(|e| match e.kind() {
                Kind::NotFound => {
                    Error::with_message(e.kind(), format!("{}: {NOT_MOUNTED_TEXT}", e.message()))
                }
                _ => e,
            })
    }

    /// GetClosestVolumeIDFromTargetPath (volume v2alpha1): the volume `target_path` (confined)
    /// lives on.
    pub fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        const OP: &str = "GetClosestVolumeIDFromTargetPath";
        required(OP, "target_path", target_path)?;
        // The closest volume of a path that does not exist is that of its nearest existing
        // ancestor: the normalised path is looked up in the mount table as text then.
        match self.fs.hold(OP, target_path, true)? {
            Some(t) => self.host.get_closest_volume_id_from_target_path(&t.os_path),
            None => {
                let path = self.fs.confine_following(OP, target_path)?;
                self.host.get_closest_volume_id_from_target_path(&path)
            }
        }
    }

    /// WriteVolumeCache: flush the volume's write cache.
    pub fn write_volume_cache(&self, volume_id: &str) -> Result<()> {
        required("WriteVolumeCache", "volume_id", volume_id)?;
        let _held = self.claim("WriteVolumeCache", volume_id, Guard::Nothing)?;
        self.host.write_volume_cache(volume_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PartialVolumeHost;

    use std::sync::Mutex;

    /// Records the resize target and the paths the host was given.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl PartialVolumeHost for Recorder {
        fn volume_disk_number(&self, id: &str) -> Result<u32> {
            Ok(if id == "on-root" { 2 } else { 1 })
        }

        fn disk_usage(&self, disk: u32) -> Result<DiskUsage> {
            let mount_points = match disk {
                2 => vec!["/".to_string()],
                _ => vec!["/var/lib/kubelet/plugins/x".to_string()],
            };
            Ok(DiskUsage {
                mount_points,
                ..Default::default()
            })
        }
        fn list_volumes_on_disk(&self, d: u32, p: Option<NonZeroU32>) -> Result<Vec<String>> {
            self.0.lock().unwrap().push(format!("list {d} {p:?}"));
            Ok(vec![])
        }
        fn resize_volume(&self, id: &str, target: ResizeTarget) -> Result<()> {
            self.0
                .lock()
                .unwrap()
                .push(format!("resize {id} {target:?}"));
            Ok(())
        }
        fn mount_volume(&self, id: &str, target: &str) -> Result<()> {
            self.0.lock().unwrap().push(format!("mount {id} {target}"));
            Ok(())
        }
    }

    fn service(host: Arc<dyn VolumeHost>) -> VolumeService {
        VolumeService::new(host, crate::testing::kubelet_fs())
    }

    fn calls(r: &Recorder) -> Vec<String> {
        r.0.lock().unwrap().clone()
    }

    #[test]
    fn resize_size_zero_is_maximum_and_negative_is_invalid() {
        let rec = Arc::new(Recorder::default());
        let s = service(rec.clone());
        s.resize_volume("v", 0).unwrap();
        s.resize_volume("v", 5 << 30).unwrap();
        let e = s.resize_volume("v", -1).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument);
        assert!(
            e.message().contains("ResizeVolume size_bytes -1"),
            "{}",
            e.message()
        );
        assert_eq!(
            calls(&rec),
            ["resize v Maximum", "resize v Bytes(5368709120)"]
        );
    }

    #[test]
    fn volumes_on_the_hosts_own_disks_are_refused() {
        let rec = Arc::new(Recorder::default());
        let s = service(rec.clone());
        let p = "/var/lib/kubelet/plugins/y";
        for e in [
            s.format_volume("on-root").unwrap_err(),
            s.resize_volume("on-root", 0).unwrap_err(),
            s.mount_volume("on-root", p).unwrap_err(),
        ] {
            assert_eq!(e.kind(), Kind::FailedPrecondition);
            assert!(e.message().contains("refused"), "{}", e.message());
            assert!(e.message().contains("\"/\""), "{}", e.message());
        }
        assert!(calls(&rec).is_empty());
    }

    #[test]
    fn partition_zero_means_all_partitions() {
        let rec = Arc::new(Recorder::default());
        let s = service(rec.clone());
        s.list_volumes_on_disk(2, 0).unwrap();
        s.list_volumes_on_disk(2, 3).unwrap();
        assert_eq!(calls(&rec), ["list 2 None", "list 2 Some(3)"]);
    }

    #[test]
    fn empty_arguments_are_rejected_before_the_host() {
        let rec = Arc::new(Recorder::default());
        let s = service(rec.clone());
        let p = "/var/lib/kubelet/plugins/x";
        let cases = [
            ("MountVolume volume_id", s.mount_volume("", p)),
            ("MountVolume target_path", s.mount_volume("v", "")),
            ("UnmountVolume volume_id", s.unmount_volume("", p)),
            ("UnmountVolume target_path", s.unmount_volume("v", "")),
            (
                "IsVolumeFormatted volume_id",
                s.is_volume_formatted("").map(drop),
            ),
            ("FormatVolume volume_id", s.format_volume("")),
            ("ResizeVolume volume_id", s.resize_volume("", 0)),
            ("GetVolumeStats volume_id", s.get_volume_stats("").map(drop)),
            (
                "GetDiskNumberFromVolumeID volume_id",
                s.get_disk_number_from_volume_id("").map(drop),
            ),
            (
                "GetVolumeIDFromTargetPath target_path",
                s.get_volume_id_from_target_path("").map(drop),
            ),
            (
                "GetClosestVolumeIDFromTargetPath target_path",
                s.get_closest_volume_id_from_target_path("").map(drop),
            ),
            ("WriteVolumeCache volume_id", s.write_volume_cache("")),
        ];
        for (want, r) in cases {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{want}");
            assert!(e.message().starts_with(want), "{want}: {}", e.message());
        }
        assert!(calls(&rec).is_empty());
    }

    #[test]
    fn target_paths_are_confined() {
        let rec = Arc::new(Recorder::default());
        let s = service(rec.clone());
        s.mount_volume("v", "/var/lib/kubelet/plugins/x").unwrap();
        let e = s.mount_volume("v", "/etc").unwrap_err();
        assert_ne!(e.kind(), Kind::Unimplemented);
        let e = s.get_volume_id_from_target_path("/etc").unwrap_err();
        assert_ne!(e.kind(), Kind::Unimplemented, "rejected before the host");
        assert_eq!(calls(&rec), ["mount v /var/lib/kubelet/plugins/x"]);
    }

    /// A host with nothing mounted anywhere.
    struct NothingMounted;

    impl PartialVolumeHost for NothingMounted {
        fn get_volume_id_from_target_path(&self, target: &str) -> Result<String> {
            Err(Error::new(
                Kind::NotFound,
                "GetVolumeIDFromTargetPath",
                target,
                "is not a mount point",
            ))
        }
    }

    #[test]
    fn not_mounted_answers_carry_the_text_aws_ebs_matches() {
        let s = service(Arc::new(NothingMounted));
        let e = s
            .get_volume_id_from_target_path("/var/lib/kubelet/plugins/x/globalmount")
            .unwrap_err();
        assert_eq!(e.kind(), Kind::NotFound);
        // The driver's test: a regular expression whose second branch is this literal text.
        assert!(
            e.message().contains("because it does not exist"),
            "{}",
            e.message()
        );
        assert!(e.message().contains("is not a mount point"));
        // Other failures keep their own text: the driver must not take them for "not mounted".
        let e = s.get_volume_id_from_target_path("/etc").unwrap_err();
        assert!(!e.message().contains("because it does not exist"));
    }

    #[test]
    fn an_empty_host_answers_unimplemented_per_rpc() {
        let s = service(Arc::new(crate::testing::UnimplementedHost));
        let p = "/var/lib/kubelet/x";
        let results = [
            ("ListVolumesOnDisk", s.list_volumes_on_disk(0, 0).map(drop)),
            ("MountVolume", s.mount_volume("v", p)),
            ("UnmountVolume", s.unmount_volume("v", p)),
            ("IsVolumeFormatted", s.is_volume_formatted("v").map(drop)),
            ("FormatVolume", s.format_volume("v")),
            ("ResizeVolume", s.resize_volume("v", 0)),
            ("GetVolumeStats", s.get_volume_stats("v").map(drop)),
            (
                "GetDiskNumberFromVolumeID",
                s.get_disk_number_from_volume_id("v").map(drop),
            ),
            (
                "GetVolumeIDFromTargetPath",
                s.get_volume_id_from_target_path(p).map(drop),
            ),
            (
                "GetClosestVolumeIDFromTargetPath",
                s.get_closest_volume_id_from_target_path(p).map(drop),
            ),
            ("WriteVolumeCache", s.write_volume_cache("v")),
        ];
        for (rpc, r) in results {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), Kind::Unimplemented);
            assert!(
                e.message().contains(&format!("volume {rpc}")),
                "{}",
                e.message()
            );
        }
    }
}
