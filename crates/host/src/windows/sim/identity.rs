//! Disk identities drivers match on, settable per disk: the serial number a storage device
//! descriptor carries (aws-ebs finds its NVMe disk by `vol…` in it), and the identifier its
//! device identification page carries (vSphere matches the NAA ID as hex). See `LEDGER.md`.

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
}
