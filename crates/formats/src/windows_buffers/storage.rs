//! Storage IOCTL output buffers: device IDs (VPD page 0x83), device descriptor (serial number),
//! SCSI address, device number and volume disk extents.
//!
//! Layouts (winioctl.h / ntddscsi.h, x64, natural alignment):
//!
//! * `STORAGE_DEVICE_ID_DESCRIPTOR`: `Version` u32 @0, `Size` u32 @4, `NumberOfIdentifiers` u32
//!   @8, `Identifiers` @12. Each `STORAGE_IDENTIFIER`: `CodeSet` u32 @0, `Type` u32 @4,
//!   `IdentifierSize` u16 @8, `NextOffset` u16 @10 (from this identifier to the next),
//!   `Association` u32 @12, `Identifier` bytes @16.
//! * `STORAGE_DEVICE_DESCRIPTOR`: `Version` @0, `Size` @4, `DeviceType` u8 @8, ...,
//!   `VendorIdOffset` u32 @12, `ProductIdOffset` @16, `ProductRevisionOffset` @20,
//!   `SerialNumberOffset` @24 (offsets from the start of the buffer to NUL-terminated ASCII
//!   strings; 0 when the device has none), `BusType` u32 @28.
//! * `SCSI_ADDRESS`: `Length` u32 @0, `PortNumber` u8 @4, `PathId` @5, `TargetId` @6, `Lun` @7.
//! * `STORAGE_DEVICE_NUMBER`: `DeviceType` u32 @0, `DeviceNumber` @4, `PartitionNumber` @8.
//! * `VOLUME_DISK_EXTENTS`: `NumberOfDiskExtents` u32 @0, `Extents` @8 (the array of 8-byte
//!   aligned `DISK_EXTENT`s: `DiskNumber` u32 @0, `StartingOffset` i64 @8, `ExtentLength` i64
//!   @16; 24 bytes each).

use super::bytes::Le;
use std::fmt::Write as _;

/// `STORAGE_IDENTIFIER_CODE_SET`: `StorageIdCodeSetBinary`.
pub const CODE_SET_BINARY: u32 = 1;
/// `STORAGE_IDENTIFIER_CODE_SET`: `StorageIdCodeSetAscii`.
pub const CODE_SET_ASCII: u32 = 2;
/// `STORAGE_ASSOCIATION_TYPE`: `StorageIdAssocDevice` (the identifier names the logical unit).
pub const ASSOC_DEVICE: u32 = 0;

/// One identifier of a `STORAGE_DEVICE_ID_DESCRIPTOR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identifier {
    /// `CodeSet`.
    pub code_set: u32,
    /// `Type` (`STORAGE_IDENTIFIER_TYPE`).
    pub id_type: u32,
    /// `Association`.
    pub association: u32,
    /// The identifier bytes (`IdentifierSize` of them).
    pub value: Vec<u8>,
}

/// Why a buffer could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn short(what: &str) -> ParseError {
    ParseError(format!("{what}: buffer too short"))
}

/// The identifiers of a `STORAGE_DEVICE_ID_DESCRIPTOR` as `IOCTL_STORAGE_QUERY_PROPERTY`
/// (`StorageDeviceIdProperty`) returned it in `buf`. Only the bytes within both `buf` and the
/// descriptor's own `Size` are read.
pub fn parse_device_id_descriptor(buf: &[u8]) -> Result<Vec<Identifier>, ParseError> {
    const WHAT: &str = "STORAGE_DEVICE_ID_DESCRIPTOR";
    let le = Le(buf);
    let size = le.u32(4).ok_or_else(|| short(WHAT))? as usize;
    let count = le.u32(8).ok_or_else(|| short(WHAT))?;
    // The descriptor is truncated to the output buffer when that was too small; never read
    // past either.
    let le = Le(&buf[..size.min(buf.len())]);
    let mut ids = Vec::new();
    let mut at = 12usize;
    for i in 0..count {
        let bad = || ParseError(format!("{WHAT}: identifier {i} of {count} is truncated"));
        let code_set = le.u32(at).ok_or_else(bad)?;
        let id_type = le.u32(at + 4).ok_or_else(bad)?;
        let len = le.u16(at + 8).ok_or_else(bad)? as usize;
        let next = le.u16(at + 10).ok_or_else(bad)? as usize;
        let association = le.u32(at + 12).ok_or_else(bad)?;
        let value = le.bytes(at + 16, len).ok_or_else(bad)?.to_vec();
        ids.push(Identifier {
            code_set,
            id_type,
            association,
            value,
        });
        if i + 1 < count {
            if next == 0 {
                return Err(ParseError(format!(
                    "{WHAT}: identifier {i} of {count} has NextOffset 0"
                )));
            }
            at += next;
        }
    }
    Ok(ids)
}

/// Upstream's page 0x83 rule: the first identifier associated with the device whose code set is
/// binary or ASCII; ASCII is taken as the raw bytes, binary as lowercase hex; none gives `""`.
/// The identifier type is deliberately not checked (upstream does not either, and drivers match
/// on what it returns).
pub fn page83(ids: &[Identifier]) -> String {
    let Some(id) = ids.iter().find(|id| {
        id.association == ASSOC_DEVICE && matches!(id.code_set, CODE_SET_BINARY | CODE_SET_ASCII)
    }) else {
        return String::new();
    };
    if id.code_set == CODE_SET_ASCII {
        // Raw bytes as a string; identifiers are ASCII by definition, anything else is replaced
        // rather than dropped so the length stays recognisable.
        String::from_utf8_lossy(&id.value).into_owned()
    } else {
        id.value.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

/// The serial number of a `STORAGE_DEVICE_DESCRIPTOR` (`StorageDeviceProperty`), verbatim up to
/// its NUL; `""` when the device reports none (offset 0) or the offset is outside the buffer.
pub fn device_descriptor_serial(buf: &[u8]) -> Result<String, ParseError> {
    const WHAT: &str = "STORAGE_DEVICE_DESCRIPTOR";
    let le = Le(buf);
    let size = le.u32(4).ok_or_else(|| short(WHAT))? as usize;
    let off = le.u32(24).ok_or_else(|| short(WHAT))? as usize;
    let end = size.min(buf.len());
    // Some drivers report 0xFFFFFFFF or an offset past the returned data for "no serial".
    if off == 0 || off >= end {
        return Ok(String::new());
    }
    let s = &buf[off..end];
    let s = s.iter().position(|&b| b == 0).map_or(s, |n| &s[..n]);
    Ok(String::from_utf8_lossy(s).into_owned())
}

/// A disk's SCSI address (`IOCTL_SCSI_GET_ADDRESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScsiAddress {
    /// `PortNumber`: the adapter.
    pub port: u8,
    /// `PathId`: the bus.
    pub path: u8,
    /// `TargetId`.
    pub target: u8,
    /// `Lun`.
    pub lun: u8,
}

/// Parses a `SCSI_ADDRESS`.
pub fn parse_scsi_address(buf: &[u8]) -> Result<ScsiAddress, ParseError> {
    let b = Le(buf).bytes(4, 4).ok_or_else(|| short("SCSI_ADDRESS"))?;
    Ok(ScsiAddress {
        port: b[0],
        path: b[1],
        target: b[2],
        lun: b[3],
    })
}

/// Parses a `STORAGE_DEVICE_NUMBER`: `(DeviceNumber, PartitionNumber)`.
pub fn parse_device_number(buf: &[u8]) -> Result<(u32, u32), ParseError> {
    let le = Le(buf);
    let what = || short("STORAGE_DEVICE_NUMBER");
    Ok((le.u32(4).ok_or_else(what)?, le.u32(8).ok_or_else(what)?))
}

/// One extent of a volume (`DISK_EXTENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskExtent {
    /// The disk's number (`PhysicalDriveN`).
    pub disk_number: u32,
    /// Byte offset of the extent on the disk.
    pub starting_offset: u64,
    /// Length of the extent in bytes.
    pub length: u64,
}

/// Parses `VOLUME_DISK_EXTENTS`. Fails when the buffer holds fewer extents than it announces
/// (the caller then retries with a larger buffer, as `ERROR_MORE_DATA` asks).
pub fn parse_volume_disk_extents(buf: &[u8]) -> Result<Vec<DiskExtent>, ParseError> {
    const WHAT: &str = "VOLUME_DISK_EXTENTS";
    let le = Le(buf);
    let n = le.u32(0).ok_or_else(|| short(WHAT))?;
    (0..n as usize)
        .map(|i| {
            let at = 8 + i * 24;
            let bad = || ParseError(format!("{WHAT}: extent {i} of {n} is truncated"));
            let neg = || {
                ParseError(format!(
                    "{WHAT}: extent {i} has a negative offset or length"
                ))
            };
            Ok(DiskExtent {
                disk_number: le.u32(at).ok_or_else(bad)?,
                starting_offset: u64::try_from(le.i64(at + 8).ok_or_else(bad)?)
                    .map_err(|_| neg())?,
                length: u64::try_from(le.i64(at + 16).ok_or_else(bad)?).map_err(|_| neg())?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a `STORAGE_DEVICE_ID_DESCRIPTOR` with the identifiers given as
    /// `(code_set, type, association, bytes)`, each padded to 4 bytes as storport does.
    fn id_descriptor(ids: &[(u32, u32, u32, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, (cs, ty, assoc, v)) in ids.iter().enumerate() {
            let len = 16 + v.len();
            let padded = len.div_ceil(4) * 4;
            let next = if i + 1 < ids.len() { padded } else { 0 };
            body.extend_from_slice(&cs.to_le_bytes());
            body.extend_from_slice(&ty.to_le_bytes());
            body.extend_from_slice(&(v.len() as u16).to_le_bytes());
            body.extend_from_slice(&(next as u16).to_le_bytes());
            body.extend_from_slice(&assoc.to_le_bytes());
            body.extend_from_slice(v);
            body.resize(body.len() + padded - len, 0);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&1u32.to_le_bytes()); // Version
        out.extend_from_slice(&((12 + body.len()) as u32).to_le_bytes()); // Size
        out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn page83_takes_the_first_device_binary_or_ascii_identifier() {
        // A port-associated identifier first (skipped), then a vendor-specific ASCII one of the
        // device, as GCE persistent disks report it, then an NAA binary one.
        let buf = id_descriptor(&[
            (CODE_SET_BINARY, 3, 1, &[0xAA, 0xBB]),
            (
                CODE_SET_ASCII,
                0,
                ASSOC_DEVICE,
                b"Google  persistent-disk-0",
            ),
            (CODE_SET_BINARY, 3, ASSOC_DEVICE, &[0x60, 0x02, 0x24]),
        ]);
        let ids = parse_device_id_descriptor(&buf).unwrap();
        assert_eq!(ids.len(), 3);
        assert_eq!(page83(&ids), "Google  persistent-disk-0");
        // Hyper-V style: binary only, lowercase hex.
        let buf = id_descriptor(&[
            (3, 8, ASSOC_DEVICE, b"utf8-ignored"),
            (CODE_SET_BINARY, 1, ASSOC_DEVICE, b"MSFT  \x0a\xff"),
        ]);
        assert_eq!(
            page83(&parse_device_id_descriptor(&buf).unwrap()),
            "4d53465420200aff"
        );
        // None qualifies.
        let buf = id_descriptor(&[(CODE_SET_ASCII, 1, 2, b"target")]);
        assert_eq!(page83(&parse_device_id_descriptor(&buf).unwrap()), "");
        assert_eq!(
            page83(&parse_device_id_descriptor(&id_descriptor(&[])).unwrap()),
            ""
        );
    }

    #[test]
    fn truncated_id_descriptors_are_errors_not_panics() {
        let buf = id_descriptor(&[
            (CODE_SET_ASCII, 1, 0, b"abcdefgh"),
            (CODE_SET_ASCII, 1, 0, b"ijkl"),
        ]);
        for n in 0..buf.len() {
            let _ = parse_device_id_descriptor(&buf[..n]);
        }
        assert!(parse_device_id_descriptor(&buf[..30]).is_err());
        // A Size smaller than the buffer limits what is read.
        let mut small = buf.clone();
        small[4..8].copy_from_slice(&20u32.to_le_bytes());
        assert!(parse_device_id_descriptor(&small).is_err());
        // NextOffset 0 before the last identifier would loop forever: refused.
        let mut looped = buf;
        looped[12 + 10..12 + 12].copy_from_slice(&0u16.to_le_bytes());
        let e = parse_device_id_descriptor(&looped).unwrap_err();
        assert!(e.0.contains("NextOffset 0"), "{e}");
    }

    #[test]
    fn device_descriptor_serial_number() {
        let mut buf = vec![0u8; 40];
        buf[0..4].copy_from_slice(&40u32.to_le_bytes());
        let serial = b"  WD-123456789.\0";
        let off = buf.len() as u32;
        buf.extend_from_slice(b"Vendor\0");
        let serial_off = buf.len() as u32;
        buf.extend_from_slice(serial);
        let size = buf.len() as u32;
        buf[4..8].copy_from_slice(&size.to_le_bytes());
        buf[12..16].copy_from_slice(&off.to_le_bytes());
        buf[24..28].copy_from_slice(&serial_off.to_le_bytes());
        assert_eq!(device_descriptor_serial(&buf).unwrap(), "  WD-123456789.");
        buf[24..28].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(device_descriptor_serial(&buf).unwrap(), "");
        buf[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(device_descriptor_serial(&buf).unwrap(), "");
        assert!(device_descriptor_serial(&buf[..10]).is_err());
    }

    #[test]
    fn scsi_address_device_number_and_extents() {
        let a = parse_scsi_address(&[8, 0, 0, 0, 1, 0, 2, 9]).unwrap();
        assert_eq!((a.port, a.path, a.target, a.lun), (1, 0, 2, 9));
        assert!(parse_scsi_address(&[8, 0, 0, 0, 1]).is_err());

        let mut dn = Vec::new();
        for v in [7u32, 3, 0] {
            dn.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(parse_device_number(&dn).unwrap(), (3, 0));

        let mut ext = vec![0u8; 8];
        ext[0..4].copy_from_slice(&2u32.to_le_bytes());
        for (disk, off, len) in [(0u32, 1_048_576i64, 4096i64), (5, 0, 1 << 40)] {
            let mut e = [0u8; 24];
            e[0..4].copy_from_slice(&disk.to_le_bytes());
            e[8..16].copy_from_slice(&off.to_le_bytes());
            e[16..24].copy_from_slice(&len.to_le_bytes());
            ext.extend_from_slice(&e);
        }
        let v = parse_volume_disk_extents(&ext).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].disk_number, 5);
        assert_eq!(v[1].length, 1 << 40);
        assert!(parse_volume_disk_extents(&ext[..40]).is_err());
    }
}
