//! Disk identities drivers match on, settable per disk: the serial number a storage device
//! descriptor carries (aws-ebs finds its NVMe disk by `vol…` in it). See `LEDGER.md`.

use super::*;

impl SimWindows {
    /// Sets the serial number disk `disk` reports in its `STORAGE_DEVICE_DESCRIPTOR`
    /// (an EBS NVMe volume reports its volume ID without the dash, `vol0123…`).
    pub fn set_disk_serial(&self, disk: u32, serial: &str) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.serial = serial.into();
        }
    }
}
