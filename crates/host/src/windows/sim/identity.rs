//! Disk identities drivers match on, settable per disk: the serial number a storage device
//! descriptor carries (aws-ebs finds its NVMe disk by `vol…` in it), the identifier its
//! device identification page carries (vSphere matches the NAA ID as hex), and NVMe namespaces'
//! identities (gce-pd finds a Hyperdisk by the EUI-64 in its serial). See `LEDGER.md`.

use super::*;

impl SimWindows {
    /// Sets the serial number disk `disk` reports in its `STORAGE_DEVICE_DESCRIPTOR`
    /// (an EBS NVMe volume reports its volume ID without the dash, `vol0123…`).
    pub fn set_disk_serial(&self, disk: u32, serial: &str) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.serial = serial.into();
        }
    }

    /// Makes disk `disk` report one binary NAA identifier in its device identification page,
    /// as a VMware virtual disk does with `disk.EnableUUID` (`6000c29…`, 16 bytes).
    pub fn set_disk_naa(&self, disk: u32, naa: &[u8]) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.page83 = DeviceId::Naa(naa.to_vec());
        }
    }

    /// Makes disk `disk` report no identifier at all in its device identification page (a
    /// VMware virtual disk without `disk.EnableUUID`).
    pub fn clear_disk_page83(&self, disk: u32) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.page83 = DeviceId::None;
        }
    }

    /// Makes disk `disk` an NVMe namespace with the EUI-64 `eui64` (ledger rows 65–66): its
    /// device identification page carries one binary EUI-64 designator, and its
    /// `STORAGE_DEVICE_DESCRIPTOR` serial is [`nvme_serial`] of it.
    pub fn make_disk_nvme(&self, disk: u32, eui64: [u8; 8]) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.page83 = DeviceId::Eui64(eui64.to_vec());
            d.serial = nvme_serial(&eui64);
        }
    }
}

/// The serial Windows reports for an NVMe namespace identified by `eui64` (ledger row 66,
/// inferred): the 16-byte identifier (the EUI-64, then zeros) as upper-case hex in groups of
/// four digits joined by `_`, ending in `.` — `10CC_9636_B6E3_CE3B_0000_0000_0000_0000.`.
pub fn nvme_serial(eui64: &[u8; 8]) -> String {
    let mut bytes = eui64.to_vec();
    bytes.resize(16, 0);
    let groups: Vec<String> = bytes
        .chunks(2)
        .map(|g| format!("{:02X}{:02X}", g[0], g[1]))
        .collect();
    format!("{}.", groups.join("_"))
}
