//! A disk's identifiers and location as sysfs shows them: SCSI address, serial number, VPD
//! pages 0x80 and 0x83, the SCSI device state attribute.

use super::*;

/// SCSI `H:C:T:L` of a disk, from the name of its `device` link target.
pub fn scsi_address(os: &Os, disk: &Disk) -> Option<[String; 4]> {
    let dev = os.canonicalize(&sys_disk(&disk.name).join("device")).ok()?;
    parse_hctl(&dev.file_name()?.to_string_lossy())
}

/// Parses `H:C:T:L` (four decimal numbers).
pub fn parse_hctl(s: &str) -> Option<[String; 4]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 4
        || !parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some([0, 1, 2, 3].map(|i| parts[i].to_string()))
}

/// The disk's serial number: a loop device's backing file, else what the driver exposes
/// (virtio `serial`, NVMe `device/serial`, SCSI VPD page 0x80).
pub fn serial(os: &Os, disk: &Disk) -> String {
    let dir = sys_disk(&disk.name);
    let line = |f: &str| {
        os.read_file(&dir.join(f)).map(|b| {
            String::from_utf8_lossy(&b)
                .trim_end_matches('\n')
                .to_string()
        })
    };
    if let Ok(backing) = line("loop/backing_file") {
        return backing;
    }
    for f in ["serial", "device/serial"] {
        if let Ok(s) = line(f) {
            return s;
        }
    }
    os.read_file(&dir.join("device/vpd_pg80"))
        .ok()
        .and_then(|b| parse_vpd_pg80(&b))
        .unwrap_or_default()
}

/// The page 0x83 identifier (upstream's rule, see [`parse_vpd_pg83`]); NVMe namespaces, which
/// have no VPD pages, report their `wwid` (`eui.…`, `nvme.…`).
pub fn page83(os: &Os, disk: &Disk) -> String {
    let dir = sys_disk(&disk.name);
    if let Some(id) = os
        .read_file(&dir.join("device/vpd_pg83"))
        .ok()
        .and_then(|b| parse_vpd_pg83(&b))
    {
        return id;
    }
    os::read_text(&**os, &dir.join("wwid")).unwrap_or_default()
}

/// The unit serial number from VPD page 0x80 (SPC-4 §7.8.19): header, then ASCII.
pub fn parse_vpd_pg80(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x80 {
        return None;
    }
    let len = u16::from_be_bytes([page[2], page[3]]) as usize;
    let body = page.get(4..4 + len).unwrap_or(&page[4..]);
    Some(String::from_utf8_lossy(body).into_owned())
}

/// The identifier drivers match disks by, from VPD page 0x83 (SPC-4 §7.8.6): the first
/// designation descriptor whose association is the logical unit (0) and whose code set is
/// binary (1) or ASCII (2); ASCII verbatim, binary as lowercase hex. This is upstream's rule over
/// `STORAGE_DEVICE_ID_DESCRIPTOR`, applied to the same SCSI data.
pub fn parse_vpd_pg83(page: &[u8]) -> Option<String> {
    csi_proxy_formats::scsi_vpd::page83(page)
        .filter(|d| d.association == 0)
        .find_map(|d| match d.code_set {
            2 => Some(String::from_utf8_lossy(d.id).into_owned()),
            1 => Some(d.id.iter().map(|b| format!("{b:02x}")).collect()),
            _ => None,
        })
}

/// The SCSI device state file (`running`, `offline`, …), where the disk has one.
pub fn scsi_state_file(os: &Os, disk: &Disk) -> Option<PathBuf> {
    let f = sys_disk(&disk.name).join("device/state");
    os.exists(&f).then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpd_83_takes_the_first_lun_ascii_or_binary_designator() {
        // Page header, then: a target-port (association 1) ASCII id to skip, a LUN NAA binary
        // id (code set 1), then a LUN ASCII id that comes too late.
        let mut page = vec![0x00, 0x83, 0x00, 0x00];
        page.extend([0x02, 0x10 | 0x08, 0x00, 0x03]);
        page.extend(b"TPx");
        page.extend([0x01, 0x03, 0x00, 0x04, 0x60, 0x0A, 0xBC, 0xFF]);
        page.extend([0x02, 0x01, 0x00, 0x04]);
        page.extend(b"late");
        let len = (page.len() - 4) as u16;
        page[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(parse_vpd_pg83(&page).as_deref(), Some("600abcff"));

        let mut ascii = vec![0x00, 0x83, 0x00, 25, 0x02, 0x01, 0x00, 21];
        ascii.extend(b"Google  persistent-d0");
        assert_eq!(
            parse_vpd_pg83(&ascii).as_deref(),
            Some("Google  persistent-d0")
        );
        // UTF-8 code set (3) is not taken; a truncated descriptor ends the walk.
        assert_eq!(
            parse_vpd_pg83(&[0, 0x83, 0, 6, 0x03, 0, 0, 2, b'a', b'b']),
            None
        );
        assert_eq!(
            parse_vpd_pg83(&[0, 0x83, 0, 8, 0x02, 0, 0, 200, b'a']),
            None
        );
        assert_eq!(parse_vpd_pg83(&[0, 0x80, 0, 0]), None);
        assert_eq!(parse_vpd_pg83(&[]), None);
    }

    #[test]
    fn vpd_80_and_hctl() {
        assert_eq!(
            parse_vpd_pg80(&[0, 0x80, 0, 4, b'S', b'N', b'1', b' ']).as_deref(),
            Some("SN1 ")
        );
        assert_eq!(parse_vpd_pg80(&[0, 0x83, 0, 0]), None);
        assert_eq!(
            parse_hctl("2:0:1:7"),
            Some(["2".into(), "0".into(), "1".into(), "7".into()])
        );
        for bad in ["virtio3", "1:2:3", "1:2:3:x", "1::3:4", "0:0:0:0:0"] {
            assert_eq!(parse_hctl(bad), None, "{bad}");
        }
    }
}
