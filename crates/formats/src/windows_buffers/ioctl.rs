//! Device I/O control codes and the fixed-size input structures the disk and volume hosts send,
//! as winioctl.h, ntddscsi.h and ntddvol.h define them. Plain numbers and byte layouts, so the
//! logic and the simulated Windows share them on every platform; the real seam checks them
//! against the `windows` crate at compile time.

/// `CTL_CODE(DeviceType, Function, Method, Access)`.
const fn ctl_code(device: u32, function: u32, method: u32, access: u32) -> u32 {
    (device << 16) | (access << 14) | (function << 2) | method
}

const FILE_DEVICE_DISK: u32 = 0x07;
const FILE_DEVICE_FILE_SYSTEM: u32 = 0x09;
const FILE_DEVICE_MASS_STORAGE: u32 = 0x2d;
const FILE_DEVICE_CONTROLLER: u32 = 0x04;
const VOLUME_BASE: u32 = 0x56;
const ANY: u32 = 0;
const READ: u32 = 1;
const READ_WRITE: u32 = 3;

/// Reads the disk's geometry and size (`DISK_GEOMETRY_EX`).
pub const DISK_GET_DRIVE_GEOMETRY_EX: u32 = ctl_code(FILE_DEVICE_DISK, 0x28, 0, ANY);
/// Reads the partition table (`DRIVE_LAYOUT_INFORMATION_EX`).
pub const DISK_GET_DRIVE_LAYOUT_EX: u32 = ctl_code(FILE_DEVICE_DISK, 0x14, 0, ANY);
/// Writes the partition table.
pub const DISK_SET_DRIVE_LAYOUT_EX: u32 = ctl_code(FILE_DEVICE_DISK, 0x15, 0, READ_WRITE);
/// Initialises a RAW disk with an empty partition table (`CREATE_DISK`).
pub const DISK_CREATE_DISK: u32 = ctl_code(FILE_DEVICE_DISK, 0x16, 0, READ_WRITE);
/// The disk's length in bytes (`GET_LENGTH_INFORMATION`).
pub const DISK_GET_LENGTH_INFO: u32 = ctl_code(FILE_DEVICE_DISK, 0x17, 0, READ);
/// The partition under a volume or partition device (`PARTITION_INFORMATION_EX`).
pub const DISK_GET_PARTITION_INFO_EX: u32 = ctl_code(FILE_DEVICE_DISK, 0x12, 0, ANY);
/// Grows a partition in place (`DISK_GROW_PARTITION`).
pub const DISK_GROW_PARTITION: u32 = ctl_code(FILE_DEVICE_DISK, 0x34, 0, READ_WRITE);
/// Re-reads the disk's size.
pub const DISK_UPDATE_DRIVE_SIZE: u32 = ctl_code(FILE_DEVICE_DISK, 0x32, 0, READ_WRITE);
/// Invalidates the cached partition table and re-enumerates the disk's partitions.
pub const DISK_UPDATE_PROPERTIES: u32 = ctl_code(FILE_DEVICE_DISK, 0x50, 0, ANY);
/// The disk's attributes (`GET_DISK_ATTRIBUTES`: offline, read-only).
pub const DISK_GET_DISK_ATTRIBUTES: u32 = ctl_code(FILE_DEVICE_DISK, 0x3c, 0, ANY);
/// Sets the disk's attributes (`SET_DISK_ATTRIBUTES`).
pub const DISK_SET_DISK_ATTRIBUTES: u32 = ctl_code(FILE_DEVICE_DISK, 0x3d, 0, READ_WRITE);
/// A storage property query (`STORAGE_PROPERTY_QUERY`).
pub const STORAGE_QUERY_PROPERTY: u32 = ctl_code(FILE_DEVICE_MASS_STORAGE, 0x500, 0, ANY);
/// The device's type and number (`STORAGE_DEVICE_NUMBER`): `N` of `\\.\PhysicalDriveN`.
pub const STORAGE_GET_DEVICE_NUMBER: u32 = ctl_code(FILE_DEVICE_MASS_STORAGE, 0x420, 0, ANY);
/// The SCSI address of a disk (`SCSI_ADDRESS`).
pub const SCSI_GET_ADDRESS: u32 = ctl_code(FILE_DEVICE_CONTROLLER, 0x406, 0, ANY);
/// The disk extents of a volume (`VOLUME_DISK_EXTENTS`).
pub const VOLUME_GET_VOLUME_DISK_EXTENTS: u32 = ctl_code(VOLUME_BASE, 0, 0, ANY);
/// Extends a mounted filesystem to a number of sectors.
pub const FSCTL_EXTEND_VOLUME: u32 = ctl_code(FILE_DEVICE_FILE_SYSTEM, 60, 0, ANY);
/// Locks a volume "if it is not in use"; fails while any file on it is open.
pub const FSCTL_LOCK_VOLUME: u32 = ctl_code(FILE_DEVICE_FILE_SYSTEM, 6, 0, ANY);
/// Releases the lock `FSCTL_LOCK_VOLUME` took through the same handle.
pub const FSCTL_UNLOCK_VOLUME: u32 = ctl_code(FILE_DEVICE_FILE_SYSTEM, 7, 0, ANY);

/// `DISK_ATTRIBUTE_OFFLINE`.
pub const DISK_ATTRIBUTE_OFFLINE: u64 = 1;
/// `DISK_ATTRIBUTE_READ_ONLY`: "The disk is read-only."
pub const DISK_ATTRIBUTE_READ_ONLY: u64 = 2;
/// `STORAGE_PROPERTY_ID` StorageDeviceProperty.
pub const STORAGE_DEVICE_PROPERTY: u32 = 0;
/// `STORAGE_PROPERTY_ID` StorageDeviceIdProperty.
pub const STORAGE_DEVICE_ID_PROPERTY: u32 = 2;
/// The size of `CREATE_DISK`: PartitionStyle u32, then the larger union member
/// `CREATE_DISK_GPT` (DiskId GUID, MaxPartitionCount u32).
pub const CREATE_DISK_SIZE: usize = 24;
/// The size of `SET_DISK_ATTRIBUTES`.
pub const SET_DISK_ATTRIBUTES_SIZE: usize = 40;

/// `STORAGE_PROPERTY_QUERY` for a standard query of `property` (PropertyId u32, QueryType u32
/// = PropertyStandardQuery 0, AdditionalParameters 1 byte, padded).
pub fn property_query(property: u32) -> [u8; 12] {
    let mut q = [0u8; 12];
    q[0..4].copy_from_slice(&property.to_le_bytes());
    q
}

/// `CREATE_DISK` for a GPT disk with `disk_id` and room for 128 entries (the UEFI minimum and
/// Windows' default).
pub fn create_gpt_disk(disk_id: uuid::Uuid) -> [u8; CREATE_DISK_SIZE] {
    let mut b = [0u8; CREATE_DISK_SIZE];
    b[0..4].copy_from_slice(&super::layout::STYLE_GPT.to_le_bytes());
    b[4..20].copy_from_slice(&disk_id.to_bytes_le());
    b[20..24].copy_from_slice(&128u32.to_le_bytes());
    b
}

/// `SET_DISK_ATTRIBUTES` persistently ("If TRUE, these settings are persisted across
/// reboots", as `MSFT_Disk.Online/Offline` make them): offline sets DISK_ATTRIBUTE_OFFLINE
/// only; online clears it and DISK_ATTRIBUTE_READ_ONLY too, because a disk the SAN policy left
/// offline is read-only as well ("Disks that are left offline are read-only by default") and
/// an online disk that cannot be written is of no use to a driver. Version u32 @0, Persist
/// BOOLEAN @4, Attributes u64 @8, AttributesMask u64 @16.
pub fn set_offline(offline: bool) -> [u8; SET_DISK_ATTRIBUTES_SIZE] {
    if offline {
        set_disk_attributes(DISK_ATTRIBUTE_OFFLINE, DISK_ATTRIBUTE_OFFLINE, true)
    } else {
        set_disk_attributes(0, DISK_ATTRIBUTE_OFFLINE | DISK_ATTRIBUTE_READ_ONLY, true)
    }
}

/// `SET_DISK_ATTRIBUTES` setting the `mask` bits to those of `attributes`, persisted across
/// reboots with `persist`. Version u32 @0 (the structure's size), Persist BOOLEAN @4,
/// Attributes u64 @8, AttributesMask u64 @16.
pub fn set_disk_attributes(
    attributes: u64,
    mask: u64,
    persist: bool,
) -> [u8; SET_DISK_ATTRIBUTES_SIZE] {
    let mut b = [0u8; SET_DISK_ATTRIBUTES_SIZE];
    b[0..4].copy_from_slice(&(SET_DISK_ATTRIBUTES_SIZE as u32).to_le_bytes());
    b[4] = u8::from(persist);
    b[8..16].copy_from_slice(&attributes.to_le_bytes());
    b[16..24].copy_from_slice(&mask.to_le_bytes());
    b
}

/// `DISK_GROW_PARTITION`: PartitionNumber u32 @0, BytesToGrow i64 @8.
pub fn grow_partition(number: u32, bytes: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&number.to_le_bytes());
    b[8..16].copy_from_slice(&(bytes as i64).to_le_bytes());
    b
}

/// A little-endian integer at `at` of an output buffer, if the buffer holds it.
pub fn le_u64(buf: &[u8], at: usize) -> Option<u64> {
    buf.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

/// A little-endian u32 at `at`, if the buffer holds it.
pub fn le_u32(buf: &[u8], at: usize) -> Option<u32> {
    buf.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_published_values() {
        // Values as printed in Microsoft's headers.
        assert_eq!(DISK_GET_DRIVE_LAYOUT_EX, 0x0007_0050);
        assert_eq!(DISK_SET_DRIVE_LAYOUT_EX, 0x0007_C054);
        assert_eq!(DISK_GET_LENGTH_INFO, 0x0007_405C);
        assert_eq!(STORAGE_QUERY_PROPERTY, 0x002D_1400);
        assert_eq!(STORAGE_GET_DEVICE_NUMBER, 0x002D_1080);
        assert_eq!(SCSI_GET_ADDRESS, 0x0004_1018);
        assert_eq!(VOLUME_GET_VOLUME_DISK_EXTENTS, 0x0056_0000);
        assert_eq!(FSCTL_EXTEND_VOLUME, 0x0009_00F0);
        assert_eq!(FSCTL_LOCK_VOLUME, 0x0009_0018);
        assert_eq!(FSCTL_UNLOCK_VOLUME, 0x0009_001C);
    }

    #[test]
    fn set_disk_attributes_lays_out_version_persist_attributes_and_mask() {
        let b = set_disk_attributes(DISK_ATTRIBUTE_READ_ONLY, DISK_ATTRIBUTE_READ_ONLY, false);
        assert_eq!(le_u32(&b, 0), Some(40));
        assert_eq!(b[4], 0);
        assert_eq!(le_u64(&b, 8), Some(DISK_ATTRIBUTE_READ_ONLY));
        assert_eq!(le_u64(&b, 16), Some(DISK_ATTRIBUTE_READ_ONLY));
        let online = set_offline(false);
        assert_eq!(online[4], 1);
        assert_eq!(le_u64(&online, 8), Some(0));
        assert_eq!(
            le_u64(&online, 16),
            Some(DISK_ATTRIBUTE_OFFLINE | DISK_ATTRIBUTE_READ_ONLY)
        );
        assert_eq!(le_u64(&set_offline(true), 8), Some(DISK_ATTRIBUTE_OFFLINE));
    }
}
