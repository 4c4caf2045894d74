//! The simulated storage stack: device names and the I/O controls of disks and volumes, with
//! the structures laid out as winioctl.h documents them.

use super::{DeviceId, Disk, Open, Part, SECTOR, State, Target};
use crate::windows::os::{OsError, Win32Result, code};
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_formats::windows_buffers::layout::{
    self, ENTRY_SIZE, HEADER_SIZE, STYLE_GPT, STYLE_RAW,
};
use std::time::Duration;
use uuid::Uuid;

/// The device interface path of disk `n` (`GUID_DEVINTERFACE_DISK`); the number in it is
/// not the disk number (Windows' are instance IDs), so the logic must ask the device.
pub(super) fn interface_path(n: u32) -> String {
    format!(
        r"\\?\scsi#disk&ven_sim&prod_disk#{:x}&0&00000{n}#{{53f56307-b6bf-11d0-94f2-00a0c91efb8b}}",
        0x4000 + n * 7
    )
}

/// What a device path opens.
pub(super) fn resolve_device(s: &State, path: &str) -> Option<Target> {
    let target = resolve_any_device(s, path)?;
    match target {
        // A disk Plug and Play has not surfaced yet has no device to open.
        Target::Disk(n)
            if s.unsurfaced.get(&n).is_some_and(|(due, due_real)| {
                *due > s.clock && *due_real > std::time::Instant::now()
            }) =>
        {
            None
        }
        t => Some(t),
    }
}

fn resolve_any_device(s: &State, path: &str) -> Option<Target> {
    let lower = path.to_ascii_lowercase();
    if let Some(n) = lower.strip_prefix(r"\\.\physicaldrive") {
        let n: u32 = n.parse().ok()?;
        return s.disks.contains_key(&n).then_some(Target::Disk(n));
    }
    if lower.starts_with(r"\\?\scsi#") {
        return s
            .disks
            .keys()
            .find(|&&n| interface_path(n).eq_ignore_ascii_case(path))
            .map(|&n| Target::Disk(n));
    }
    // A partition device, `\\.\HarddiskNPartitionM`, once Plug and Play surfaced it.
    if let Some((n, m)) = lower
        .strip_prefix(r"\\.\harddisk")
        .and_then(|r| r.split_once("partition"))
    {
        let (n, m): (u32, u32) = (n.parse().ok()?, m.parse().ok()?);
        let d = s.disks.get(&n)?;
        let arrived = d
            .parts
            .iter()
            .any(|p| p.number == m && (p.gpt_type != layout::MSR || d.msr_due <= s.clock));
        return arrived.then_some(Target::Disk(n));
    }
    // A volume device is `\\.\Volume{GUID}` with no trailing backslash (with one, the root
    // directory would be opened instead).
    if lower.starts_with(r"\\.\volume{") && !lower.ends_with('\\') {
        return s.volume_named(path).map(Target::Volume);
    }
    None
}

/// The partition under volume `v`.
pub(super) fn partition_of(s: &State, v: usize) -> Option<&Part> {
    let vol = s.volumes.get(v)?;
    s.disks
        .get(&vol.disk)?
        .parts
        .iter()
        .find(|p| p.number == vol.partition)
}

/// A `PARTITION_INFORMATION_EX` for `p` on a disk of partition style `style`.
fn entry(p: &Part, style: u32) -> [u8; ENTRY_SIZE] {
    if style == layout::STYLE_MBR {
        return super::mbr::entry(p);
    }
    let mut e = layout::NewEntry {
        start: p.start,
        length: p.length,
        gpt_type: p.gpt_type,
        id: p.id,
        attributes: p.attributes,
    }
    .bytes();
    e[24..28].copy_from_slice(&p.number.to_le_bytes());
    e[28] = 0;
    e
}

/// `DRIVE_LAYOUT_INFORMATION_EX` of a disk.
fn drive_layout(d: &Disk) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_SIZE + d.parts.len() * ENTRY_SIZE];
    out[0..4].copy_from_slice(&d.style.to_le_bytes());
    out[4..8].copy_from_slice(&(d.parts.len() as u32).to_le_bytes());
    if d.style == STYLE_GPT {
        out[8..24].copy_from_slice(&d.disk_id.to_bytes_le());
        out[24..32].copy_from_slice(&(d.usable_start as i64).to_le_bytes());
        out[32..40].copy_from_slice(&(d.usable_length as i64).to_le_bytes());
        out[40..44].copy_from_slice(&128u32.to_le_bytes());
    }
    if d.style == layout::STYLE_MBR {
        // DRIVE_LAYOUT_INFORMATION_MBR: Signature u32 @8.
        out[8..12].copy_from_slice(&d.mbr_signature().to_le_bytes());
    }
    for (i, p) in d.parts.iter().enumerate() {
        out[HEADER_SIZE + i * ENTRY_SIZE..][..ENTRY_SIZE].copy_from_slice(&entry(p, d.style));
    }
    out
}

/// `out` if it fits in `out_len` bytes, else the error a short buffer gets.
fn fit(out: Vec<u8>, out_len: usize, short: u32) -> Win32Result<Vec<u8>> {
    if out.len() > out_len {
        Err(OsError::new(short))
    } else {
        Ok(out)
    }
}

fn le_i64(b: &[u8], at: usize) -> Option<u64> {
    io::le_u64(b, at).filter(|v| i64::try_from(*v).is_ok())
}

/// NTFS's default cluster size.
const NTFS_CLUSTER: u64 = 4096;

/// Sends one I/O control to the device behind `open`.
pub(super) fn ioctl(
    s: &mut State,
    open: Open,
    code_: u32,
    input: &[u8],
    out_len: usize,
) -> Win32Result<Vec<u8>> {
    let invalid = || OsError::new(code::INVALID_PARAMETER);
    if !super::storage::access_allows(open.access, code_) {
        return Err(OsError::new(code::ACCESS_DENIED));
    }
    match open.target {
        Target::Disk(n) => {
            let delay = s.arrival_delay;
            let clock = s.clock;
            let create_disk_msr = s.create_disk_msr;
            let d = s
                .disks
                .get_mut(&n)
                .ok_or(OsError::new(code::FILE_NOT_FOUND))?;
            if let Some(c) = d.removing {
                return Err(OsError::new(c));
            }
            match code_ {
                io::DISK_GET_DRIVE_LAYOUT_EX => {
                    fit(drive_layout(d), out_len, code::INSUFFICIENT_BUFFER)
                }
                io::DISK_GET_DRIVE_GEOMETRY_EX => {
                    let mut g = vec![0u8; 32];
                    g[20..24].copy_from_slice(&(d.sector as u32).to_le_bytes());
                    g[24..32].copy_from_slice(&(d.size as i64).to_le_bytes());
                    fit(g, out_len, code::INSUFFICIENT_BUFFER)
                }
                io::DISK_GET_LENGTH_INFO => fit(
                    d.size.to_le_bytes().to_vec(),
                    out_len,
                    code::INSUFFICIENT_BUFFER,
                ),
                io::DISK_GET_DISK_ATTRIBUTES => {
                    let mut a = vec![0u8; 16];
                    let attrs = if d.offline {
                        io::DISK_ATTRIBUTE_OFFLINE
                    } else {
                        0
                    } | if d.read_only {
                        io::DISK_ATTRIBUTE_READ_ONLY
                    } else {
                        0
                    };
                    a[8..16].copy_from_slice(&attrs.to_le_bytes());
                    fit(a, out_len, code::INSUFFICIENT_BUFFER)
                }
                io::DISK_SET_DISK_ATTRIBUTES => {
                    // SET_DISK_ATTRIBUTES: "Reserved1[3]: Reserved. Must be set to FALSE (0)",
                    // "Reserved2[4]: Reserved. Must be set to 0"; Version is the structure's
                    // size (ledger row 70).
                    if !set_disk_attributes_valid(input) {
                        return Err(invalid());
                    }
                    let attrs = io::le_u64(input, 8).ok_or_else(invalid)?;
                    let mask = io::le_u64(input, 16).ok_or_else(invalid)?;
                    let was_offline = d.offline;
                    if mask & io::DISK_ATTRIBUTE_OFFLINE != 0 {
                        d.offline = attrs & io::DISK_ATTRIBUTE_OFFLINE != 0;
                    }
                    if mask & io::DISK_ATTRIBUTE_READ_ONLY != 0 {
                        d.read_only = attrs & io::DISK_ATTRIBUTE_READ_ONLY != 0;
                    }
                    // Persist: "these settings are persisted across reboots".
                    if input.get(4).is_some_and(|p| *p != 0) {
                        d.persisted = (d.offline, d.read_only);
                    }
                    if !was_offline && d.offline {
                        // The volume devices are removed by Plug and Play, as they are
                        // created: asynchronously (ledger row 81).
                        d.volumes_leave = clock + delay;
                    }
                    if was_offline && !d.offline {
                        s.volumes_arrive(n);
                    }
                    Ok(Vec::new())
                }
                io::STORAGE_GET_DEVICE_NUMBER => {
                    // DeviceType FILE_DEVICE_DISK, DeviceNumber, PartitionNumber -1 (the disk).
                    let mut b = vec![0u8; 12];
                    b[0..4].copy_from_slice(&7u32.to_le_bytes());
                    b[4..8].copy_from_slice(&n.to_le_bytes());
                    b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
                    fit(b, out_len, code::INSUFFICIENT_BUFFER)
                }
                io::SCSI_GET_ADDRESS => {
                    let (port, path, target, lun) =
                        d.scsi.ok_or(OsError::new(code::INVALID_FUNCTION))?;
                    fit(
                        vec![8, 0, 0, 0, port, path, target, lun],
                        out_len,
                        code::INSUFFICIENT_BUFFER,
                    )
                }
                io::STORAGE_QUERY_PROPERTY => {
                    let out = match io::le_u32(input, 0).ok_or_else(invalid)? {
                        io::STORAGE_DEVICE_ID_PROPERTY => device_id_descriptor(&d.page83),
                        io::STORAGE_DEVICE_PROPERTY => device_descriptor(&d.serial),
                        _ => return Err(OsError::new(code::INVALID_FUNCTION)),
                    };
                    // A short buffer gets the descriptor's first bytes, successfully: its
                    // header's `Size` says how much the whole needs.
                    Ok(out[..out.len().min(out_len)].to_vec())
                }
                // "If the disk is READONLY, disk data and metadata can be read, but writes to the
                // disk will fail."
                io::DISK_CREATE_DISK | io::DISK_SET_DRIVE_LAYOUT_EX | io::DISK_GROW_PARTITION
                    if d.read_only =>
                {
                    Err(OsError::new(code::WRITE_PROTECT))
                }
                io::DISK_CREATE_DISK => {
                    if io::le_u32(input, 0) != Some(STYLE_GPT) {
                        return Err(invalid());
                    }
                    let mut id = [0u8; 16];
                    id.copy_from_slice(input.get(4..20).ok_or_else(invalid)?);
                    d.style = STYLE_GPT;
                    d.disk_id = Uuid::from_bytes_le(id);
                    // LBA 0 protective MBR, LBA 1 header, 16 KiB of entries; the same at the
                    // end for the backup.
                    let (start, end) = d.gpt_usable();
                    d.usable_start = start;
                    d.usable_length = end - start;
                    d.parts.clear();
                    d.write_gpt_headers();
                    if create_disk_msr {
                        // "an application should wait for the MSR partition arrival before
                        // sending the IOCTL_DISK_SET_DRIVE_LAYOUT_EX control code"
                        d.parts.push(Part {
                            number: 1,
                            start,
                            length: layout::MSR_SIZE,
                            gpt_type: layout::MSR,
                            id: Uuid::from_bytes_le(id),
                            attributes: 0,
                        });
                        d.msr_due = clock + delay;
                    }
                    Ok(Vec::new())
                }
                // The table is still being surfaced (inferred: how an early write fails).
                io::DISK_SET_DRIVE_LAYOUT_EX if d.msr_due > clock => {
                    Err(OsError::new(code::NOT_READY))
                }
                io::DISK_SET_DRIVE_LAYOUT_EX => {
                    let new = set_layout(d, input)?;
                    for number in new {
                        s.arrivals.push(super::Arrival {
                            due: clock + delay,
                            disk: n,
                            partition: number,
                        });
                    }
                    Ok(Vec::new())
                }
                io::DISK_GROW_PARTITION => {
                    let number = io::le_u32(input, 0).ok_or_else(invalid)?;
                    let grow = le_i64(input, 8).ok_or_else(invalid)?;
                    // The documented way into space a grown disk added: partmgr writes the table
                    // back with its backup at the disk's end, so the usable area follows the
                    // disk (unless the simulation keeps the old one: `keep_usable_area`).
                    let limit = if d.style != STYLE_GPT {
                        d.size
                    } else if d.keep_usable {
                        d.usable_start + d.usable_length
                    } else {
                        d.gpt_usable().1
                    };
                    let p = d
                        .parts
                        .iter()
                        .find(|p| p.number == number)
                        .ok_or_else(invalid)?;
                    let end = p.start + p.length + grow;
                    let next = d
                        .parts
                        .iter()
                        .filter(|q| q.start > p.start)
                        .map(|q| q.start)
                        .min()
                        .unwrap_or(limit);
                    if end > next.min(limit) {
                        return Err(invalid());
                    }
                    let number = p.number;
                    if let Some(p) = d.parts.iter_mut().find(|p| p.number == number) {
                        p.length += grow;
                    }
                    if d.style == STYLE_GPT {
                        d.usable_length = limit - d.usable_start;
                    }
                    // The volume on it re-reads its size: briefly not ready.
                    let settles = clock + Duration::from_millis(300);
                    for v in s
                        .volumes
                        .iter_mut()
                        .filter(|v| v.disk == n && v.partition == number)
                    {
                        v.settles = settles;
                    }
                    Ok(Vec::new())
                }
                io::DISK_UPDATE_DRIVE_SIZE => {
                    if let Some(size) = d.pending_size.take() {
                        // The backup GPT stays where it was: nothing documents that re-reading
                        // the size rewrites the table, so the usable area is the old one.
                        d.size = size;
                    }
                    fit(vec![0u8; 32], out_len.max(32), code::INSUFFICIENT_BUFFER)
                }
                io::DISK_UPDATE_PROPERTIES => Ok(Vec::new()),
                _ => Err(OsError::new(code::INVALID_FUNCTION)),
            }
        }
        // A drive without media answers every request with its driver's code for it ("the
        // device is not ready" unless a test picks another).
        Target::Volume(v) if s.volumes[v].no_media.is_some() => Err(OsError::new(
            s.volumes[v].no_media.unwrap_or(code::NOT_READY),
        )),
        // A volume on a disk being removed goes with it.
        Target::Volume(v)
            if s.disks
                .get(&s.volumes[v].disk)
                .is_some_and(|d| d.removing.is_some()) =>
        {
            Err(OsError::new(
                s.disks[&s.volumes[v].disk]
                    .removing
                    .unwrap_or(code::DEVICE_REMOVED),
            ))
        }
        Target::Volume(v) => match code_ {
            io::VOLUME_GET_VOLUME_DISK_EXTENTS => {
                let p = partition_of(s, v).ok_or(OsError::new(code::FILE_NOT_FOUND))?;
                let mut b = vec![0u8; 32];
                b[0..4].copy_from_slice(&1u32.to_le_bytes());
                b[8..12].copy_from_slice(&s.volumes[v].disk.to_le_bytes());
                b[16..24].copy_from_slice(&(p.start as i64).to_le_bytes());
                b[24..32].copy_from_slice(&(p.length as i64).to_le_bytes());
                fit(b, out_len, code::MORE_DATA)
            }
            io::DISK_GET_PARTITION_INFO_EX => {
                let p = partition_of(s, v).ok_or(OsError::new(code::FILE_NOT_FOUND))?;
                let style = s
                    .disks
                    .get(&s.volumes[v].disk)
                    .map_or(STYLE_GPT, |d| d.style);
                fit(entry(p, style).to_vec(), out_len, code::INSUFFICIENT_BUFFER)
            }
            io::FSCTL_EXTEND_VOLUME if s.volumes[v].settles > s.clock => {
                Err(OsError::new(code::NOT_READY))
            }
            // "If the disk is READONLY, disk data and metadata can be read, but writes to the
            // disk will fail" (ledger row 21).
            io::FSCTL_EXTEND_VOLUME
                if s.disks.get(&s.volumes[v].disk).is_some_and(|d| d.read_only) =>
            {
                Err(OsError::new(code::WRITE_PROTECT))
            }
            io::FSCTL_EXTEND_VOLUME => {
                let sectors = le_i64(input, 0).ok_or_else(invalid)?;
                let length = partition_of(s, v).map_or(0, |p| p.length);
                let sector = s.disks.get(&s.volumes[v].disk).map_or(SECTOR, |d| d.sector);
                let vol = &mut s.volumes[v];
                let bytes = sectors.checked_mul(sector).ok_or_else(invalid)?;
                // "This control code is supported on NTFS, RAW, and ReFS file systems": on a RAW
                // volume there is nothing to grow but the size must fit the partition.
                if vol.fs.is_none() {
                    return if bytes > length {
                        Err(invalid())
                    } else {
                        Ok(Vec::new())
                    };
                }
                // NTFS keeps its backup boot sector in the sector after the volume, so the
                // volume ends one sector short of its partition; growing needs at least one
                // more cluster (4 KiB by default).
                if bytes > length.saturating_sub(sector) || bytes < vol.fs_size + NTFS_CLUSTER {
                    return Err(invalid());
                }
                vol.fs_size = bytes;
                Ok(Vec::new())
            }
            _ => Err(OsError::new(code::INVALID_FUNCTION)),
        },
    }
}

/// Whether a `SET_DISK_ATTRIBUTES` input is one the disk driver takes: the whole structure
/// (40 bytes), `Version` its size and the reserved bytes zero.
fn set_disk_attributes_valid(input: &[u8]) -> bool {
    input.len() == io::SET_DISK_ATTRIBUTES_SIZE
        && io::le_u32(input, 0) == Some(io::SET_DISK_ATTRIBUTES_SIZE as u32)
        && input[5..8].iter().all(|b| *b == 0)
        && input[24..40].iter().all(|b| *b == 0)
}

/// Applies an `IOCTL_DISK_SET_DRIVE_LAYOUT_EX` input to a GPT disk: entries without
/// `RewritePartition` must be the partitions as they are; entries with it are new partitions,
/// numbered by their position. Returns the new partitions' numbers.
fn set_layout(d: &mut Disk, input: &[u8]) -> Win32Result<Vec<u32>> {
    let invalid = || OsError::new(code::INVALID_PARAMETER);
    if d.style == STYLE_RAW {
        return Err(OsError::new(code::NOT_READY));
    }
    let l = layout::parse_drive_layout(input).map_err(|_| invalid())?;
    if l.style != STYLE_GPT {
        return Err(invalid());
    }
    let end = d.usable_start + d.usable_length;
    let mut parts = Vec::new();
    let mut new = Vec::new();
    for p in &l.partitions {
        // "RewritePartition: ... The value of this parameter should be set to TRUE"; the
        // system "uses this member to determine which partitions have changed and need their
        // information rewritten": an entry left FALSE is taken as one not to write (the worst
        // reading; inferred).
        if p.raw.get(28).copied().unwrap_or(0) == 0 {
            continue;
        }
        let number = parts.len() as u32 + 1;
        let gpt_type = p.gpt_type.ok_or_else(invalid)?;
        let id = p
            .raw
            .get(48..64)
            .and_then(|b| b.try_into().ok())
            .map(Uuid::from_bytes_le)
            .ok_or_else(invalid)?;
        let attributes = io::le_u64(&p.raw, 64).ok_or_else(invalid)?;
        let q = Part {
            number,
            start: p.start,
            length: p.length,
            gpt_type,
            id,
            attributes,
        };
        let kept = d
            .parts
            .iter()
            .any(|e| e.start == q.start && e.length == q.length && e.id == q.id);
        if q.start < d.usable_start || q.start + q.length > end || !q.start.is_multiple_of(d.sector)
        {
            return Err(invalid());
        }
        if parts
            .iter()
            .any(|o: &Part| q.start < o.start + o.length && o.start < q.start + q.length)
        {
            return Err(invalid());
        }
        if !kept {
            new.push(number);
        }
        parts.push(q);
    }
    d.parts = parts;
    Ok(new)
}

/// A `STORAGE_DEVICE_ID_DESCRIPTOR` with the identifier `id` names, associated with the device
/// (none for [`DeviceId::None`]).
fn device_id_descriptor(id: &DeviceId) -> Vec<u8> {
    // (code set, identifier type, value): StorageIdCodeSetAscii with
    // StorageIdTypeScsiNameString, or StorageIdCodeSetBinary with StorageIdTypeFCPHName (NAA) or StorageIdTypeEUI64.
    let (code_set, id_type, value) = match id {
        DeviceId::Ascii(s) => (2u32, 8u32, s.as_bytes()),
        DeviceId::Naa(v) => (1, 3, v.as_slice()),
        // StorageIdTypeEUI64.
        DeviceId::Eui64(v) => (1, 2, v.as_slice()),
        DeviceId::None => {
            let mut b = vec![0u8; 12];
            b[0..4].copy_from_slice(&1u32.to_le_bytes());
            b[4..8].copy_from_slice(&12u32.to_le_bytes());
            return b;
        }
    };
    let mut b = vec![0u8; 12 + 16 + value.len()];
    let size = b.len() as u32;
    b[0..4].copy_from_slice(&1u32.to_le_bytes());
    b[4..8].copy_from_slice(&size.to_le_bytes());
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&code_set.to_le_bytes());
    b[16..20].copy_from_slice(&id_type.to_le_bytes());
    b[20..22].copy_from_slice(&(value.len() as u16).to_le_bytes());
    b[22..24].copy_from_slice(&0u16.to_le_bytes());
    b[24..28].copy_from_slice(&0u32.to_le_bytes()); // StorageIdAssocDevice
    b[28..].copy_from_slice(value);
    b
}

/// A `STORAGE_DEVICE_DESCRIPTOR` whose serial number is `serial`.
fn device_descriptor(serial: &str) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    b[24..28].copy_from_slice(&40u32.to_le_bytes());
    b.extend_from_slice(serial.as_bytes());
    b.push(0);
    let size = b.len() as u32;
    b[0..4].copy_from_slice(&1u32.to_le_bytes());
    b[4..8].copy_from_slice(&size.to_le_bytes());
    b
}
