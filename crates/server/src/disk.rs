//! Disk adapters: one thin struct per API version over [`DiskService`].
//!
//! v1beta3 and v1 share one shape (`current_rpcs!`). v1alpha1, v1beta1 and v1beta2 share the legacy
//! base (`legacy_rpcs!`: string `diskID`, string map keys); v1beta1 and v1beta2 add ListDiskIDs /
//! DiskStats (`legacy_ids_rpcs!`), v1beta2 adds Set/GetAttachState and v1alpha1
//! GetDiskNumberByName. Conversions follow upstream's, except that a disk ID that does not fit
//! `u32` is rejected instead of silently truncated.

use crate::{adapter, unary};
use csi_proxy_api::disk::{v1, v1alpha1, v1beta1, v1beta2, v1beta3};
use csi_proxy_core::disk::DiskService;
use csi_proxy_core::{Error, Kind, Result};

/// Parses a legacy string disk ID (`diskID`, `disk_id`) as a decimal `u32` disk number.
///
/// Upstream parses 64 bits and truncates to 32, so `"4294967296"` would address disk 0; here any
/// value that is not a plain decimal `u32` is an InvalidArgument naming the RPC, field and value.
pub(crate) fn parse_disk_id(rpc: &str, field: &str, value: &str) -> Result<u32> {
    // `u32::from_str` also accepts a leading `+`; upstream's ParseUint does not.
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| value.parse().ok()).flatten().ok_or_else(|| {
        Error::invalid(
            rpc,
            format!("{field} {value:?}"),
            "not a decimal disk number from 0 to 4294967295",
        )
    })
}

/// Converts a byte count to the wire's `int64`; a host value beyond `i64::MAX` is a host bug,
/// reported rather than wrapped to a negative size.
pub(crate) fn wire_bytes(rpc: &str, what: &str, n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| {
        Error::new(
            Kind::Internal,
            rpc,
            what,
            format!("{n} bytes does not fit int64"),
        )
    })
}

/// Builds a version's `DiskLocation` from the core one (the field set is the same in every version).
macro_rules! wire_location {
    ($v:ident, $l:expr) => {{
        let l = $l;
        $v::DiskLocation {
            adapter: l.adapter,
            bus: l.bus,
            target: l.target,
            lunid: l.lun_id,
        }
    }};
}

/// The RPCs of v1beta3 and v1 (disks by `uint32` number, `map<uint32, …>`).
macro_rules! current_rpcs {
    ($v:ident) => {
        unary!(disk, $v, list_disk_locations, "ListDiskLocations", ListDiskLocationsRequest => ListDiskLocationsResponse,
            |svc, r| Ok($v::ListDiskLocationsResponse {
                disk_locations: svc.list_disk_locations()?.into_iter()
                    .map(|(n, l)| (n, wire_location!($v, l))).collect(),
            }));
        unary!(disk, $v, partition_disk, "PartitionDisk", PartitionDiskRequest => PartitionDiskResponse,
            on |r| Some(format!("disk {}", r.disk_number)),
            |svc, r| svc.partition_disk(r.disk_number).map(|()| $v::PartitionDiskResponse {}));
        unary!(disk, $v, rescan, "Rescan", RescanRequest => RescanResponse,
            on |r| Some("every disk".to_string()),
            |svc, r| svc.rescan().map(|()| $v::RescanResponse {}));
        unary!(disk, $v, list_disk_i_ds, "ListDiskIDs", ListDiskIDsRequest => ListDiskIDsResponse,
            on |r| Some("every disk".to_string()),
            |svc, r| Ok($v::ListDiskIDsResponse {
                disk_i_ds: svc.list_disk_ids()?.into_iter()
                    .map(|(n, id)| (n, $v::DiskIDs { page83: id.page83, serial_number: id.serial_number }))
                    .collect(),
            }));
        unary!(disk, $v, get_disk_stats, "GetDiskStats", GetDiskStatsRequest => GetDiskStatsResponse,
            on |r| Some(format!("disk {}", r.disk_number)),
            |svc, r| Ok($v::GetDiskStatsResponse {
                total_bytes: wire_bytes("GetDiskStats", "total_bytes", svc.get_disk_stats(r.disk_number)?)?,
            }));
        unary!(disk, $v, set_disk_state, "SetDiskState", SetDiskStateRequest => SetDiskStateResponse,
            on |r| Some(format!("disk {}", r.disk_number)),
            |svc, r| svc.set_disk_state(r.disk_number, r.is_online).map(|()| $v::SetDiskStateResponse {}));
        unary!(disk, $v, get_disk_state, "GetDiskState", GetDiskStateRequest => GetDiskStateResponse,
            |svc, r| Ok($v::GetDiskStateResponse { is_online: svc.get_disk_state(r.disk_number)? }));
    };
}

/// The RPCs common to v1alpha1, v1beta1 and v1beta2 (string `diskID`, `map<string, …>`).
macro_rules! legacy_rpcs {
    ($v:ident) => {
        unary!(disk, $v, list_disk_locations, "ListDiskLocations", ListDiskLocationsRequest => ListDiskLocationsResponse,
            |svc, r| Ok($v::ListDiskLocationsResponse {
                disk_locations: svc.list_disk_locations()?.into_iter()
                    .map(|(n, l)| (n.to_string(), wire_location!($v, l))).collect(),
            }));
        unary!(disk, $v, partition_disk, "PartitionDisk", PartitionDiskRequest => PartitionDiskResponse,
            on |r| Some(format!("disk {}", r.disk_id)),
            |svc, r| svc.partition_disk(parse_disk_id("PartitionDisk", "diskID", &r.disk_id)?)
                .map(|()| $v::PartitionDiskResponse {}));
        unary!(disk, $v, rescan, "Rescan", RescanRequest => RescanResponse,
            on |r| Some("every disk".to_string()),
            |svc, r| svc.rescan().map(|()| $v::RescanResponse {}));
    };
}

/// ListDiskIDs (an `identifiers` map per disk) and DiskStats of v1beta1 and v1beta2.
macro_rules! legacy_ids_rpcs {
    ($v:ident) => {
        unary!(disk, $v, list_disk_i_ds, "ListDiskIDs", ListDiskIDsRequest => ListDiskIDsResponse,
            on |r| Some("every disk".to_string()),
            |svc, r| Ok($v::ListDiskIDsResponse {
                disk_i_ds: svc.list_disk_ids()?.into_iter()
                    .map(|(n, id)| (n.to_string(), $v::DiskIDs {
                        identifiers: [
                            ("page83".to_string(), id.page83),
                            ("serialNumber".to_string(), id.serial_number),
                        ].into(),
                    }))
                    .collect(),
            }));
        unary!(disk, $v, disk_stats, "DiskStats", DiskStatsRequest => DiskStatsResponse,
            on |r| Some(format!("disk {}", r.disk_id)),
            |svc, r| Ok($v::DiskStatsResponse {
                disk_size: wire_bytes("DiskStats", "diskSize",
                    svc.get_disk_stats(parse_disk_id("DiskStats", "diskID", &r.disk_id)?)?)?,
            }));
    };
}

adapter!(
    /// `v1alpha1.Disk`.
    DiskV1alpha1, DiskService, disk::v1alpha1::disk_server::DiskServer
);
impl v1alpha1::disk_server::Disk for DiskV1alpha1 {
    legacy_rpcs!(v1alpha1);
    unary!(disk, v1alpha1, get_disk_number_by_name, "GetDiskNumberByName", GetDiskNumberByNameRequest => GetDiskNumberByNameResponse,
    |svc, r| Ok(v1alpha1::GetDiskNumberByNameResponse {
        disk_number: svc.get_disk_number_by_name(&r.disk_name)?.to_string(),
    }));
}

adapter!(
    /// `v1beta1.Disk`.
    DiskV1beta1, DiskService, disk::v1beta1::disk_server::DiskServer
);
impl v1beta1::disk_server::Disk for DiskV1beta1 {
    legacy_rpcs!(v1beta1);
    legacy_ids_rpcs!(v1beta1);
}

adapter!(
    /// `v1beta2.Disk`: v1beta1 plus Set/GetAttachState.
    DiskV1beta2, DiskService, disk::v1beta2::disk_server::DiskServer
);
impl v1beta2::disk_server::Disk for DiskV1beta2 {
    legacy_rpcs!(v1beta2);
    legacy_ids_rpcs!(v1beta2);
    unary!(disk, v1beta2, set_attach_state, "SetAttachState", SetAttachStateRequest => SetAttachStateResponse,
        on |r| Some(format!("disk {}", r.disk_id)),
        |svc, r| svc.set_disk_state(parse_disk_id("SetAttachState", "diskID", &r.disk_id)?, r.is_online)
            .map(|()| v1beta2::SetAttachStateResponse {}));
    unary!(disk, v1beta2, get_attach_state, "GetAttachState", GetAttachStateRequest => GetAttachStateResponse,
    |svc, r| Ok(v1beta2::GetAttachStateResponse {
        is_online: svc.get_disk_state(parse_disk_id("GetAttachState", "diskID", &r.disk_id)?)?,
    }));
}

adapter!(
    /// `v1beta3.Disk`.
    DiskV1beta3, DiskService, disk::v1beta3::disk_server::DiskServer
);
impl v1beta3::disk_server::Disk for DiskV1beta3 {
    current_rpcs!(v1beta3);
}

adapter!(
    /// `v1.Disk`.
    DiskV1, DiskService, disk::v1::disk_server::DiskServer
);
impl v1::disk_server::Disk for DiskV1 {
    current_rpcs!(v1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_ids_parse_as_decimal_u32_only() {
        assert_eq!(parse_disk_id("R", "diskID", "0"), Ok(0));
        assert_eq!(parse_disk_id("R", "diskID", "007"), Ok(7));
        assert_eq!(parse_disk_id("R", "diskID", "4294967295"), Ok(u32::MAX));
        for bad in [
            "",
            "4294967296",
            "-1",
            "+1",
            " 1",
            "1 ",
            "x",
            "0x10",
            "18446744073709551617",
        ] {
            let e = parse_disk_id("PartitionDisk", "diskID", bad).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{bad:?}");
            let want = format!("PartitionDisk diskID {bad:?}");
            assert!(e.message().starts_with(&want), "{}", e.message());
        }
    }

    #[test]
    fn oversized_byte_counts_are_internal_errors() {
        assert_eq!(wire_bytes("R", "x", 5), Ok(5));
        let e = wire_bytes("GetDiskStats", "total_bytes", u64::MAX).unwrap_err();
        assert_eq!(e.kind(), Kind::Internal);
        assert!(e.message().starts_with("GetDiskStats total_bytes"));
    }
}
