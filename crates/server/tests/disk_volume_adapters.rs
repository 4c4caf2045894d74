//! Every RPC of every disk and volume API version, called directly on its adapter over a
//! recording fake host: the versioned request is converted for the service, the host receives
//! what the request meant, and the answer is converted back into the version's shape.

use csi_proxy_api::disk::{v1 as d1, v1alpha1 as d1alpha1, v1beta1 as d1beta1};
use csi_proxy_api::disk::{v1beta2 as d1beta2, v1beta3 as d1beta3};
use csi_proxy_api::volume::{v1 as vol1, v1alpha1 as vol1alpha1, v1beta1 as vol1beta1};
use csi_proxy_api::volume::{v1beta2 as vol1beta2, v1beta3 as vol1beta3, v2alpha1 as vol2alpha1};
use csi_proxy_core::Result;
use csi_proxy_core::disk::{
    DiskHost, DiskIds, DiskLocation, DiskService, DiskUsage, OpenElsewhere,
};
// A host that implements no RPC (only the usage facts the service checks first): every RPC must
// answer UNIMPLEMENTED.
use csi_proxy_core::testing::UnimplementedHost as Bare;
use csi_proxy_core::volume::{ResizeTarget, VolumeHost, VolumeService, VolumeStats};
use csi_proxy_server::disk::*;
use csi_proxy_server::volume::*;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use tonic::{Code, Request, Response, Status};

const GIB: u64 = 1 << 30;
const PAGE83_1: &str = "Google  persistent-disk-1";
const PAGE83_2: &str = "4d534654202020";
const MOUNT: &str = "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/x/globalmount";
const OUTSIDE: &str = "/etc/ssl";

/// The calls a fake host received, one line each.
#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Log {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Two disks, 1 and 2, with locations and IDs; disk 1 is online and 10 GiB.
#[derive(Default)]
struct FakeDisks(Log);

impl DiskHost for FakeDisks {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        self.0.push("ListDiskLocations".into());
        let loc = |target: &str, lun: &str| DiskLocation {
            adapter: "0".into(),
            bus: String::new(),
            target: target.into(),
            lun_id: lun.into(),
        };
        Ok(BTreeMap::from([(1, loc("1", "0")), (2, loc("2", "3"))]))
    }

    fn partition_disk(&self, disk_number: u32) -> Result<()> {
        self.0.push(format!("PartitionDisk {disk_number}"));
        Ok(())
    }

    fn rescan(&self) -> Result<()> {
        self.0.push("Rescan".into());
        Ok(())
    }

    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        self.0.push("ListDiskIDs".into());
        let ids = |page83: &str, serial: &str| DiskIds {
            page83: page83.into(),
            serial_number: serial.into(),
        };
        Ok(BTreeMap::from([
            (1, ids(PAGE83_1, "SN1")),
            (2, ids(PAGE83_2, "    ")),
        ]))
    }

    fn get_disk_size(&self, disk_number: u32) -> Result<u64> {
        self.0.push(format!("GetDiskSize {disk_number}"));
        Ok(10 * GIB)
    }

    fn set_disk_online(&self, disk_number: u32, online: bool) -> Result<()> {
        self.0.push(format!("SetDiskOnline {disk_number} {online}"));
        Ok(())
    }

    fn is_disk_online(&self, disk_number: u32) -> Result<bool> {
        self.0.push(format!("IsDiskOnline {disk_number}"));
        Ok(disk_number == 1)
    }

    /// Not logged: the service asks it before every mutating call.
    fn disk_usage(&self, _: u32) -> Result<DiskUsage> {
        Ok(DiskUsage::default())
    }

    fn volumes_open_elsewhere(&self, _: u32) -> Result<Vec<OpenElsewhere>> {
        Ok(Vec::new())
    }
}

/// A volume host that answers from the request, so conversions can be checked end to end.
#[derive(Default)]
struct FakeVolumes(Log);

impl VolumeHost for FakeVolumes {
    fn list_volumes_on_disk(
        &self,
        disk: u32,
        partition: Option<NonZeroU32>,
    ) -> Result<Vec<String>> {
        self.0
            .push(format!("ListVolumesOnDisk {disk} {partition:?}"));
        Ok(vec![format!("vol-{disk}a"), format!("vol-{disk}b")])
    }

    fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.0
            .push(format!("MountVolume {volume_id} {target_path}"));
        Ok(())
    }

    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.0
            .push(format!("UnmountVolume {volume_id} {target_path}"));
        Ok(())
    }

    fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        self.0.push(format!("IsVolumeFormatted {volume_id}"));
        Ok(volume_id == "formatted")
    }

    fn format_volume(&self, volume_id: &str) -> Result<()> {
        self.0.push(format!("FormatVolume {volume_id}"));
        Ok(())
    }

    fn resize_volume(&self, volume_id: &str, target: ResizeTarget) -> Result<()> {
        self.0.push(format!("ResizeVolume {volume_id} {target:?}"));
        Ok(())
    }

    fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        self.0.push(format!("GetVolumeStats {volume_id}"));
        Ok(VolumeStats {
            total_bytes: 10 * GIB,
            used_bytes: GIB,
        })
    }

    fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32> {
        self.0
            .push(format!("GetDiskNumberFromVolumeID {volume_id}"));
        Ok(u32::MAX)
    }

    fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        self.0
            .push(format!("GetVolumeIDFromTargetPath {target_path}"));
        Ok("vol-mounted".into())
    }

    fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        self.0
            .push(format!("GetClosestVolumeIDFromTargetPath {target_path}"));
        Ok("vol-closest".into())
    }

    fn write_volume_cache(&self, volume_id: &str) -> Result<()> {
        self.0.push(format!("WriteVolumeCache {volume_id}"));
        Ok(())
    }

    /// Not logged: the service asks these before every mutating call.
    fn volume_disk_number(&self, _: &str) -> Result<u32> {
        Ok(9)
    }

    fn disk_usage(&self, _: u32) -> Result<DiskUsage> {
        Ok(DiskUsage::default())
    }

    fn volumes_open_elsewhere(&self, _: u32) -> Result<Vec<OpenElsewhere>> {
        Ok(Vec::new())
    }
}

fn disk_service(host: Arc<dyn DiskHost>) -> DiskService {
    DiskService::new(host, csi_proxy_core::testing::kubelet_fs().policy().clone())
}

fn volume_service(host: Arc<dyn VolumeHost>) -> VolumeService {
    VolumeService::new(host, csi_proxy_core::testing::kubelet_fs())
}

fn ok<T>(r: std::result::Result<Response<T>, Status>) -> T {
    match r {
        Ok(resp) => resp.into_inner(),
        Err(s) => panic!("unexpected status {:?}: {}", s.code(), s.message()),
    }
}

/// Asserts a failure with `code` whose message contains every one of `parts`.
fn fails<T: std::fmt::Debug>(
    r: std::result::Result<Response<T>, Status>,
    code: Code,
    parts: &[&str],
) {
    let s = r.map(Response::into_inner).unwrap_err();
    assert_eq!(s.code(), code, "{}", s.message());
    for p in parts {
        assert!(s.message().contains(p), "{:?} lacks {p:?}", s.message());
    }
}

/// Asserts UNIMPLEMENTED naming `group` and the service-level `rpc`.
fn unimplemented<T: std::fmt::Debug>(
    r: std::result::Result<Response<T>, Status>,
    group: &str,
    rpc: &str,
) {
    fails(r, Code::Unimplemented, &[&format!("{group} {rpc}")]);
}

/// Asserts a target path outside the allowed roots was refused by `rpc`.
fn refused_outside<T: std::fmt::Debug>(r: std::result::Result<Response<T>, Status>, rpc: &str) {
    let s = r.map(Response::into_inner).unwrap_err();
    assert!(
        matches!(s.code(), Code::PermissionDenied | Code::InvalidArgument),
        "{rpc}: {:?} {}",
        s.code(),
        s.message()
    );
    assert!(s.message().contains(rpc), "{}", s.message());
}

/// Asserts that `call` rejects every malformed legacy disk ID as InvalidArgument naming `rpc`,
/// `field` and the value (upstream would truncate "4294967296" to disk 0).
async fn rejects_bad_disk_ids<T, F, Fut>(rpc: &str, field: &str, call: F)
where
    T: std::fmt::Debug,
    F: Fn(String) -> Fut,
    Fut: Future<Output = std::result::Result<Response<T>, Status>>,
{
    for bad in ["abc", "4294967296", "-1", "+1", " 1", ""] {
        let named = format!("{field} {bad:?}");
        fails(
            call(bad.to_string()).await,
            Code::InvalidArgument,
            &[rpc, &named],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Disk

/// The location of the fake disk on `target` in version `$v`.
macro_rules! location {
    ($v:ident, $target:literal, $lun:literal) => {
        $v::DiskLocation {
            adapter: "0".into(),
            bus: String::new(),
            target: $target.into(),
            lunid: $lun.into(),
        }
    };
}

/// A disk-addressing request in a version's style: `legacy` versions carry the disk number as
/// a decimal string `disk_id` (`diskID` on the wire), `current` ones as `disk_number`.
macro_rules! disk_req {
    (legacy, $v:ident::$req:ident($d:expr) $($rest:tt)*) => {
        $v::$req { disk_id: $d.to_string() $($rest)* }
    };
    (current, $v:ident::$req:ident($d:expr) $($rest:tt)*) => {
        $v::$req { disk_number: $d $($rest)* }
    };
}

/// How a disk number appears as a map key in a version's style.
macro_rules! disk_key {
    (legacy, $n:expr) => {
        $n.to_string()
    };
    (current, $n:expr) => {
        $n
    };
}

/// Statements only for `legacy` versions (those with string disk IDs); dropped unexpanded for
/// `current` ones, whose requests have no such field.
macro_rules! legacy_only {
    (legacy, $($body:tt)*) => {
        $($body)*
    };
    (current, $($body:tt)*) => {};
}

/// ListDiskLocations, PartitionDisk and Rescan, in every version.
macro_rules! disk_base_test {
    ($test:ident, $v:ident, $adapter:ident, $style:ident) => {
        #[tokio::test]
        async fn $test() {
            use $v::disk_server::Disk as _;
            let host = Arc::new(FakeDisks::default());
            let a = $adapter::new(disk_service(host.clone()));
            let partition = |d: u32| Request::new(disk_req!($style, $v::PartitionDiskRequest(d)));
            let list = || Request::new($v::ListDiskLocationsRequest {});
            let rescan = || Request::new($v::RescanRequest {});
            let locations = ok(a.list_disk_locations(list()).await).disk_locations;
            let want = [
                (disk_key!($style, 1u32), location!($v, "1", "0")),
                (disk_key!($style, 2u32), location!($v, "2", "3")),
            ];
            assert_eq!(locations, HashMap::from(want));
            ok(a.partition_disk(partition(2)).await);
            ok(a.partition_disk(partition(u32::MAX)).await);
            ok(a.rescan(rescan()).await);
            let want = ["ListDiskLocations", "PartitionDisk 2", "PartitionDisk 4294967295", "Rescan"];
            assert_eq!(host.0.take(), want);
            legacy_only!($style, rejects_bad_disk_ids("PartitionDisk", "diskID", |disk_id| {
                a.partition_disk(Request::new($v::PartitionDiskRequest { disk_id }))
            }).await;);
            assert!(host.0.take().is_empty(), "bad IDs never reach the host");

            let bare = $adapter::new(disk_service(Arc::new(Bare)));
            unimplemented(bare.list_disk_locations(list()).await, "disk", "ListDiskLocations");
            unimplemented(bare.partition_disk(partition(1)).await, "disk", "PartitionDisk");
            unimplemented(bare.rescan(rescan()).await, "disk", "Rescan");
        }
    };
}

disk_base_test!(disk_v1alpha1_base_rpcs, d1alpha1, DiskV1alpha1, legacy);
disk_base_test!(disk_v1beta1_base_rpcs, d1beta1, DiskV1beta1, legacy);
disk_base_test!(disk_v1beta2_base_rpcs, d1beta2, DiskV1beta2, legacy);
disk_base_test!(disk_v1beta3_base_rpcs, d1beta3, DiskV1beta3, current);
disk_base_test!(disk_v1_base_rpcs, d1, DiskV1, current);

/// A version's `DiskIDs` as v1beta1's `{"page83", "serialNumber"}` identifiers map.
macro_rules! disk_identifiers {
    (legacy, $e:expr) => {
        $e.identifiers.clone()
    };
    (current, $e:expr) => {
        HashMap::from([
            ("page83".to_string(), $e.page83.clone()),
            ("serialNumber".to_string(), $e.serial_number.clone()),
        ])
    };
}

/// ListDiskIDs and the disk size RPC (DiskStats `diskSize` / GetDiskStats `total_bytes`),
/// v1beta1 onwards.
macro_rules! disk_ids_and_size_test {
    ($test:ident, $v:ident, $adapter:ident, legacy) => {
        disk_ids_and_size_test!(@ $test, $v, $adapter, legacy, disk_stats(DiskStatsRequest) -> disk_size);
    };
    ($test:ident, $v:ident, $adapter:ident, current) => {
        disk_ids_and_size_test!(@ $test, $v, $adapter, current,
            get_disk_stats(GetDiskStatsRequest) -> total_bytes);
    };
    (@ $test:ident, $v:ident, $adapter:ident, $style:ident, $size_rpc:ident($size_req:ident) -> $size:ident) => {
        #[tokio::test]
        async fn $test() {
            use $v::disk_server::Disk as _;
            let host = Arc::new(FakeDisks::default());
            let a = $adapter::new(disk_service(host.clone()));
            let size_req = |d: u32| Request::new(disk_req!($style, $v::$size_req(d)));
            let list = || Request::new($v::ListDiskIDsRequest {});
            let listed = ok(a.list_disk_i_ds(list()).await).disk_i_ds;
            let want = |page83: &str, serial: &str| {
                HashMap::from([("page83".into(), page83.into()), ("serialNumber".into(), serial.into())])
            };
            assert_eq!(listed.len(), 2);
            assert_eq!(disk_identifiers!($style, listed[&disk_key!($style, 1u32)]), want(PAGE83_1, "SN1"));
            assert_eq!(disk_identifiers!($style, listed[&disk_key!($style, 2u32)]), want(PAGE83_2, "    "));
            assert_eq!(ok(a.$size_rpc(size_req(1)).await).$size, 10 << 30);
            assert_eq!(host.0.take(), ["ListDiskIDs", "GetDiskSize 1"]);
            legacy_only!($style, rejects_bad_disk_ids("DiskStats", "diskID", |disk_id| {
                a.$size_rpc(Request::new($v::$size_req { disk_id }))
            }).await;);
            assert!(host.0.take().is_empty(), "bad IDs never reach the host");

            let bare = $adapter::new(disk_service(Arc::new(Bare)));
            unimplemented(bare.list_disk_i_ds(list()).await, "disk", "ListDiskIDs");
            unimplemented(bare.$size_rpc(size_req(1)).await, "disk", "GetDiskStats");
        }
    };
}

disk_ids_and_size_test!(disk_v1beta1_ids_and_stats, d1beta1, DiskV1beta1, legacy);
disk_ids_and_size_test!(disk_v1beta2_ids_and_stats, d1beta2, DiskV1beta2, legacy);
disk_ids_and_size_test!(disk_v1beta3_ids_and_stats, d1beta3, DiskV1beta3, current);
disk_ids_and_size_test!(disk_v1_ids_and_stats, d1, DiskV1, current);

/// Set/GetAttachState (v1beta2) and Set/GetDiskState (v1beta3, v1).
macro_rules! disk_state_test {
    ($test:ident, $v:ident, $adapter:ident, legacy) => {
        disk_state_test!(@ $test, $v, $adapter, legacy,
            set_attach_state(SetAttachStateRequest), get_attach_state(GetAttachStateRequest));
    };
    ($test:ident, $v:ident, $adapter:ident, current) => {
        disk_state_test!(@ $test, $v, $adapter, current,
            set_disk_state(SetDiskStateRequest), get_disk_state(GetDiskStateRequest));
    };
    (@ $test:ident, $v:ident, $adapter:ident, $style:ident,
     $set:ident($set_req:ident), $get:ident($get_req:ident)) => {
        #[tokio::test]
        async fn $test() {
            use $v::disk_server::Disk as _;
            let host = Arc::new(FakeDisks::default());
            let a = $adapter::new(disk_service(host.clone()));
            let set = |d: u32, on: bool| Request::new(disk_req!($style, $v::$set_req(d), is_online: on));
            let get = |d: u32| Request::new(disk_req!($style, $v::$get_req(d)));
            ok(a.$set(set(2, false)).await);
            assert!(ok(a.$get(get(1)).await).is_online);
            assert!(!ok(a.$get(get(2)).await).is_online);
            assert_eq!(host.0.take(), ["SetDiskOnline 2 false", "IsDiskOnline 1", "IsDiskOnline 2"]);
            legacy_only!($style,
                rejects_bad_disk_ids("SetAttachState", "diskID", |disk_id| {
                    a.$set(Request::new($v::$set_req { disk_id, is_online: true }))
                }).await;
                rejects_bad_disk_ids("GetAttachState", "diskID", |disk_id| {
                    a.$get(Request::new($v::$get_req { disk_id }))
                }).await;
            );
            assert!(host.0.take().is_empty(), "bad IDs never reach the host");

            let bare = $adapter::new(disk_service(Arc::new(Bare)));
            unimplemented(bare.$set(set(1, true)).await, "disk", "SetDiskState");
            unimplemented(bare.$get(get(1)).await, "disk", "GetDiskState");
        }
    };
}

disk_state_test!(disk_v1beta2_attach_state, d1beta2, DiskV1beta2, legacy);
disk_state_test!(disk_v1beta3_disk_state, d1beta3, DiskV1beta3, current);
disk_state_test!(disk_v1_disk_state, d1, DiskV1, current);

#[tokio::test]
async fn disk_v1alpha1_get_disk_number_by_name() {
    use d1alpha1::disk_server::Disk as _;
    let host = Arc::new(FakeDisks::default());
    let a = DiskV1alpha1::new(disk_service(host.clone()));
    let by_name = |name: &str| {
        Request::new(d1alpha1::GetDiskNumberByNameRequest {
            disk_name: name.into(),
        })
    };
    let r = a.get_disk_number_by_name(by_name(PAGE83_2)).await;
    assert_eq!(ok(r).disk_number, "2");
    let r = a
        .get_disk_number_by_name(by_name("Google  persistent-disk-9"))
        .await;
    fails(
        r,
        Code::NotFound,
        &["GetDiskNumberByName", "persistent-disk-9"],
    );
    let r = a.get_disk_number_by_name(by_name("")).await;
    fails(r, Code::InvalidArgument, &["GetDiskNumberByName disk_name"]);
    assert_eq!(host.0.take(), ["ListDiskIDs", "ListDiskIDs"]);

    let bare = DiskV1alpha1::new(disk_service(Arc::new(Bare)));
    let r = bare.get_disk_number_by_name(by_name(PAGE83_1)).await;
    fails(
        r,
        Code::Unimplemented,
        &["GetDiskNumberByName", "disk ListDiskIDs"],
    );
}

// ---------------------------------------------------------------------------------------------
// Volume

/// In every version: IsVolumeFormatted, FormatVolume, ListVolumesOnDisk, MountVolume, the
/// unmount RPC (DismountVolume / UnmountVolume) and ResizeVolume. `legacy` versions name a disk
/// by decimal string `disk_id` (all partitions), the target path `path` and the size `size`;
/// `current` ones ask for partition 3 of the disk.
macro_rules! volume_base_test {
    ($test:ident, $v:ident, $adapter:ident, legacy) => {
        volume_base_test!(@ $test, $v, $adapter, legacy, |d| ListVolumesOnDiskRequest { disk_id: d.to_string() } => "None",
            dismount_volume(DismountVolumeRequest), path, size);
    };
    ($test:ident, $v:ident, $adapter:ident, current) => {
        volume_base_test!(@ $test, $v, $adapter, current,
            |d| ListVolumesOnDiskRequest { disk_number: d, partition_number: 3 } => "Some(3)",
            unmount_volume(UnmountVolumeRequest), target_path, size_bytes);
    };
    (@ $test:ident, $v:ident, $adapter:ident, $style:ident,
     |$d:ident| $list_req:ident { $($list:tt)* } => $partition:literal,
     $unmount:ident($unmount_req:ident), $path:ident, $size:ident) => {
        #[tokio::test]
        async fn $test() {
            use $v::volume_server::Volume as _;
            let host = Arc::new(FakeVolumes::default());
            let a = $adapter::new(volume_service(host.clone()));
            let formatted = |id: &str| Request::new($v::IsVolumeFormattedRequest { volume_id: id.into() });
            let format = |id: &str| Request::new($v::FormatVolumeRequest { volume_id: id.into() });
            let list = |$d: u32| Request::new($v::$list_req { $($list)* });
            let mount = |id: &str, p: &str| Request::new($v::MountVolumeRequest { volume_id: id.into(), $path: p.into() });
            let unmount = |id: &str, p: &str| Request::new($v::$unmount_req { volume_id: id.into(), $path: p.into() });
            let resize = |id: &str, n: i64| Request::new($v::ResizeVolumeRequest { volume_id: id.into(), $size: n });

            assert!(ok(a.is_volume_formatted(formatted("formatted")).await).formatted);
            assert!(!ok(a.is_volume_formatted(formatted("raw")).await).formatted);
            ok(a.format_volume(format("raw")).await);
            assert_eq!(ok(a.list_volumes_on_disk(list(2)).await).volume_ids, ["vol-2a", "vol-2b"]);
            ok(a.mount_volume(mount("vol-2a", MOUNT)).await);
            ok(a.$unmount(unmount("vol-2a", MOUNT)).await);
            ok(a.resize_volume(resize("vol-2a", 0)).await);
            ok(a.resize_volume(resize("vol-2a", 1 << 30)).await);
            assert_eq!(
                host.0.take(),
                [
                    "IsVolumeFormatted formatted".to_string(),
                    "IsVolumeFormatted raw".into(),
                    "FormatVolume raw".into(),
                    concat!("ListVolumesOnDisk 2 ", $partition).into(),
                    format!("MountVolume vol-2a {MOUNT}"),
                    format!("UnmountVolume vol-2a {MOUNT}"),
                    "ResizeVolume vol-2a Maximum".into(),
                    "ResizeVolume vol-2a Bytes(1073741824)".into(),
                ]
            );

            let invalid = Code::InvalidArgument;
            fails(a.is_volume_formatted(formatted("")).await, invalid, &["IsVolumeFormatted volume_id"]);
            fails(a.format_volume(format("")).await, invalid, &["FormatVolume volume_id"]);
            fails(a.mount_volume(mount("", MOUNT)).await, invalid, &["MountVolume volume_id"]);
            fails(a.mount_volume(mount("v", "")).await, invalid, &["MountVolume target_path"]);
            refused_outside(a.mount_volume(mount("v", OUTSIDE)).await, "MountVolume");
            fails(a.$unmount(unmount("", MOUNT)).await, invalid, &["UnmountVolume volume_id"]);
            fails(a.$unmount(unmount("v", "")).await, invalid, &["UnmountVolume target_path"]);
            refused_outside(a.$unmount(unmount("v", OUTSIDE)).await, "UnmountVolume");
            fails(a.resize_volume(resize("", 1)).await, invalid, &["ResizeVolume volume_id"]);
            fails(a.resize_volume(resize("v", -1)).await, invalid, &["ResizeVolume size_bytes -1"]);
            legacy_only!($style, rejects_bad_disk_ids("ListVolumesOnDisk", "disk_id", |disk_id| {
                a.list_volumes_on_disk(Request::new($v::ListVolumesOnDiskRequest { disk_id }))
            }).await;);
            assert!(host.0.take().is_empty(), "invalid requests never reach the host");

            let bare = $adapter::new(volume_service(Arc::new(Bare)));
            unimplemented(bare.is_volume_formatted(formatted("v")).await, "volume", "IsVolumeFormatted");
            unimplemented(bare.format_volume(format("v")).await, "volume", "FormatVolume");
            unimplemented(bare.list_volumes_on_disk(list(1)).await, "volume", "ListVolumesOnDisk");
            unimplemented(bare.mount_volume(mount("v", MOUNT)).await, "volume", "MountVolume");
            unimplemented(bare.$unmount(unmount("v", MOUNT)).await, "volume", "UnmountVolume");
            unimplemented(bare.resize_volume(resize("v", 0)).await, "volume", "ResizeVolume");
        }
    };
}

volume_base_test!(
    volume_v1alpha1_base_rpcs,
    vol1alpha1,
    VolumeV1alpha1,
    legacy
);
volume_base_test!(volume_v1beta1_base_rpcs, vol1beta1, VolumeV1beta1, legacy);
volume_base_test!(volume_v1beta2_base_rpcs, vol1beta2, VolumeV1beta2, legacy);
volume_base_test!(volume_v1beta3_base_rpcs, vol1beta3, VolumeV1beta3, current);
volume_base_test!(volume_v1_base_rpcs, vol1, VolumeV1, current);
volume_base_test!(
    volume_v2alpha1_base_rpcs,
    vol2alpha1,
    VolumeV2alpha1,
    current
);

/// v1beta1 onwards: the stats RPC (VolumeStats / GetVolumeStats), the disk number RPC
/// (GetVolumeDiskNumber int64 / GetDiskNumberFromVolumeID uint32) and the volume-by-path RPC
/// (GetVolumeIDFromMount `mount` / GetVolumeIDFromTargetPath `target_path`).
macro_rules! volume_lookup_test {
    ($test:ident, $v:ident, $adapter:ident, legacy) => {
        volume_lookup_test!(@ $test, $v, $adapter,
            volume_stats(VolumeStatsRequest) -> (volume_size, volume_used_size),
            get_volume_disk_number(VolumeDiskNumberRequest),
            get_volume_id_from_mount(VolumeIdFromMountRequest { mount }));
    };
    ($test:ident, $v:ident, $adapter:ident, current) => {
        volume_lookup_test!(@ $test, $v, $adapter,
            get_volume_stats(GetVolumeStatsRequest) -> (total_bytes, used_bytes),
            get_disk_number_from_volume_id(GetDiskNumberFromVolumeIdRequest),
            get_volume_id_from_target_path(GetVolumeIdFromTargetPathRequest { target_path }));
    };
    (@ $test:ident, $v:ident, $adapter:ident,
     $stats:ident($stats_req:ident) -> ($total:ident, $used:ident),
     $number:ident($number_req:ident),
     $by_path:ident($by_path_req:ident { $by_path_field:ident })) => {
        #[tokio::test]
        async fn $test() {
            use $v::volume_server::Volume as _;
            let host = Arc::new(FakeVolumes::default());
            let a = $adapter::new(volume_service(host.clone()));
            let stats = |id: &str| Request::new($v::$stats_req { volume_id: id.into() });
            let number = |id: &str| Request::new($v::$number_req { volume_id: id.into() });
            let by_path = |p: &str| Request::new($v::$by_path_req { $by_path_field: p.into() });

            let s = ok(a.$stats(stats("vol-1a")).await);
            assert_eq!((s.$total, s.$used), (10 << 30, 1 << 30));
            let n = ok(a.$number(number("vol-1a")).await).disk_number;
            assert_eq!(i64::from(n), i64::from(u32::MAX), "never truncated or sign-flipped");
            assert_eq!(ok(a.$by_path(by_path(MOUNT)).await).volume_id, "vol-mounted");
            assert_eq!(
                host.0.take(),
                [
                    "GetVolumeStats vol-1a".to_string(),
                    "GetDiskNumberFromVolumeID vol-1a".into(),
                    format!("GetVolumeIDFromTargetPath {MOUNT}"),
                ]
            );

            let invalid = Code::InvalidArgument;
            fails(a.$stats(stats("")).await, invalid, &["GetVolumeStats volume_id"]);
            fails(a.$number(number("")).await, invalid, &["GetDiskNumberFromVolumeID volume_id"]);
            fails(a.$by_path(by_path("")).await, invalid, &["GetVolumeIDFromTargetPath target_path"]);
            refused_outside(a.$by_path(by_path(OUTSIDE)).await, "GetVolumeIDFromTargetPath");
            assert!(host.0.take().is_empty(), "invalid requests never reach the host");

            let bare = $adapter::new(volume_service(Arc::new(Bare)));
            unimplemented(bare.$stats(stats("v")).await, "volume", "GetVolumeStats");
            unimplemented(bare.$number(number("v")).await, "volume", "GetDiskNumberFromVolumeID");
            unimplemented(bare.$by_path(by_path(MOUNT)).await, "volume", "GetVolumeIDFromTargetPath");
        }
    };
}

volume_lookup_test!(volume_v1beta1_lookups, vol1beta1, VolumeV1beta1, legacy);
volume_lookup_test!(volume_v1beta2_lookups, vol1beta2, VolumeV1beta2, legacy);
volume_lookup_test!(volume_v1beta3_lookups, vol1beta3, VolumeV1beta3, current);
volume_lookup_test!(volume_v1_lookups, vol1, VolumeV1, current);
volume_lookup_test!(volume_v2alpha1_lookups, vol2alpha1, VolumeV2alpha1, current);

/// WriteVolumeCache, v1beta2 onwards.
macro_rules! volume_write_cache_test {
    ($test:ident, $v:ident, $adapter:ident) => {
        #[tokio::test]
        async fn $test() {
            use $v::volume_server::Volume as _;
            let host = Arc::new(FakeVolumes::default());
            let a = $adapter::new(volume_service(host.clone()));
            let flush = |id: &str| {
                Request::new($v::WriteVolumeCacheRequest {
                    volume_id: id.into(),
                })
            };
            ok(a.write_volume_cache(flush("vol-1a")).await);
            let r = a.write_volume_cache(flush("")).await;
            fails(r, Code::InvalidArgument, &["WriteVolumeCache volume_id"]);
            assert_eq!(host.0.take(), ["WriteVolumeCache vol-1a"]);
            let bare = $adapter::new(volume_service(Arc::new(Bare)));
            unimplemented(
                bare.write_volume_cache(flush("v")).await,
                "volume",
                "WriteVolumeCache",
            );
        }
    };
}

volume_write_cache_test!(volume_v1beta2_write_cache, vol1beta2, VolumeV1beta2);
volume_write_cache_test!(volume_v1beta3_write_cache, vol1beta3, VolumeV1beta3);
volume_write_cache_test!(volume_v1_write_cache, vol1, VolumeV1);
volume_write_cache_test!(volume_v2alpha1_write_cache, vol2alpha1, VolumeV2alpha1);

#[tokio::test]
async fn volume_v2alpha1_get_closest_volume_id() {
    use vol2alpha1::volume_server::Volume as _;
    let host = Arc::new(FakeVolumes::default());
    let a = VolumeV2alpha1::new(volume_service(host.clone()));
    let closest = |p: &str| {
        Request::new(vol2alpha1::GetClosestVolumeIdFromTargetPathRequest {
            target_path: p.into(),
        })
    };
    let sub = format!("{MOUNT}/data");
    let r = a
        .get_closest_volume_id_from_target_path(closest(&sub))
        .await;
    assert_eq!(ok(r).volume_id, "vol-closest");
    let r = a.get_closest_volume_id_from_target_path(closest("")).await;
    fails(
        r,
        Code::InvalidArgument,
        &["GetClosestVolumeIDFromTargetPath target_path"],
    );
    let r = a
        .get_closest_volume_id_from_target_path(closest(OUTSIDE))
        .await;
    refused_outside(r, "GetClosestVolumeIDFromTargetPath");
    assert_eq!(
        host.0.take(),
        [format!("GetClosestVolumeIDFromTargetPath {sub}")]
    );

    let bare = VolumeV2alpha1::new(volume_service(Arc::new(Bare)));
    let r = bare
        .get_closest_volume_id_from_target_path(closest(MOUNT))
        .await;
    unimplemented(r, "volume", "GetClosestVolumeIDFromTargetPath");
}
