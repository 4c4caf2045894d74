//! Disk copies attached beside their source (a snapshot or clone restored on the same node):
//! the copy carries the source's GPT disk GUID and partition GUIDs (or its MBR signature), and
//! Windows keeps it offline for the collision (VDS_DISK_OFFLINE_REASON,
//! VDSDiskOfflineReasonCollision; ledger row 71). Clearing `DISK_ATTRIBUTE_OFFLINE` on it is
//! not refused (the worst reading: nothing documents a refusal), so a caller that only clears
//! the attribute has two online disks, and two volumes, with one unique ID.

use super::*;
use csi_proxy_formats::windows_buffers::layout::STYLE_MBR;

impl Disk {
    /// `DRIVE_LAYOUT_INFORMATION_MBR.Signature` of an MBR disk: its ID's first four bytes.
    pub(super) fn mbr_signature(&self) -> u32 {
        let b = self.disk_id.to_bytes_le();
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The unique IDs Windows tells disks and their volumes apart by: the GPT disk GUID and
    /// partition GUIDs, or the MBR signature. None for a RAW disk.
    fn unique_ids(&self) -> BTreeSet<Uuid> {
        let mut ids = BTreeSet::new();
        if self.style == STYLE_MBR {
            ids.insert(Uuid::from_u128(u128::from(self.mbr_signature())));
        } else if self.style == STYLE_GPT {
            ids.insert(self.disk_id);
            ids.extend(self.parts.iter().map(|p| p.id));
        }
        ids.remove(&Uuid::nil());
        ids
    }
}

impl State {
    /// Whether `disk` shares a unique ID with another online disk.
    pub(super) fn collides(&self, disk: u32) -> bool {
        let Some(d) = self.disks.get(&disk) else {
            return false;
        };
        let mine = d.unique_ids();
        self.disks
            .iter()
            .any(|(n, o)| *n != disk && !o.offline && !o.unique_ids().is_disjoint(&mine))
    }
}

impl State {
    /// [`SimWindows::add_disk_copy`] with the state held; `None` when `source` is not on the
    /// machine.
    pub(super) fn copy_disk(&mut self, source: u32, lun: u8) -> Option<u32> {
        let src = self.disks.get(&source).cloned()?;
        let n = self.new_disk(src.size, lun);
        let s = self;
        let collides = {
            let d = s.disks.get_mut(&n).expect("just added");
            d.style = src.style;
            d.disk_id = src.disk_id;
            (d.usable_start, d.usable_length) = (src.usable_start, src.usable_length);
            d.parts = src.parts.clone();
            d.data = src.data.clone();
            d.sector = src.sector;
            s.collides(n)
        };
        if let Some(d) = s.disks.get_mut(&n) {
            d.offline = collides;
        }
        let numbers: Vec<u32> = src.parts.iter().map(|p| p.number).collect();
        for number in numbers {
            let from = (0..s.volumes.len())
                .find(|&v| s.volumes[v].disk == source && s.volumes[v].partition == number);
            if let (Some(v), Some(from)) = (s.create_volume(n, number), from) {
                let (fs, fs_size, head) = {
                    let f = &s.volumes[from];
                    (f.fs.clone(), f.fs_size, f.head.clone())
                };
                (s.volumes[v].fs, s.volumes[v].fs_size, s.volumes[v].head) = (fs, fs_size, head);
            }
        }
        Some(n)
    }

    /// [`SimWindows::add_disk_path`] with the state held; `None` when `source` is not on the
    /// machine.
    pub(super) fn surface_path(&mut self, source: u32, lun: u8) -> Option<u32> {
        let (page83, serial, online) = self
            .disks
            .get(&source)
            .map(|d| (d.page83.clone(), d.serial.clone(), !d.offline))?;
        let n = self.copy_disk(source, lun)?;
        if let Some(d) = self.disks.get_mut(&n) {
            (d.page83, d.serial) = (page83, serial);
            // A knob's Windows that does not keep the redundant path offline (what the
            // selftest's second path would show; ledger row 91) surfaces it online.
            d.offline = !self.redundant_paths_online && (d.offline || online);
        }
        Some(n)
    }
}

impl SimWindows {
    /// Attaches a block-for-block copy of disk `source` at `lun` (a snapshot or clone of it
    /// restored on this node): the same layout, IDs and contents, its volumes formatted as the
    /// source's were. It arrives offline when it collides with an online disk, as Windows
    /// keeps it. Returns its number.
    pub fn add_disk_copy(&self, source: u32, lun: u8) -> u32 {
        self.lock().copy_disk(source, lun).unwrap_or(u32::MAX)
    }

    /// Surfaces disk `source`'s LUN a second time at `lun`: another path to the same storage
    /// without MPIO (an iSCSI target logged in to through a second portal). The disk reports
    /// the LUN's identity (device identification page, serial number) and what is on it, and
    /// arrives offline while `source` is online, as Windows keeps a redundant path
    /// (VDSDiskOfflineReasonRedundantPath; ledger row 91). Clearing its offline attribute is
    /// not refused (the worst reading). The two disks' contents are the same at arrival; the
    /// model does not mirror later writes of one into the other. Returns its number.
    pub fn add_disk_path(&self, source: u32, lun: u8) -> u32 {
        self.lock().surface_path(source, lun).unwrap_or(u32::MAX)
    }

    /// From now on a LUN's second path arrives online (or, by default, offline while the
    /// first is online): a Windows other than the one ledger row 91 models.
    pub fn set_redundant_paths_online(&self, online: bool) {
        self.lock().redundant_paths_online = online;
    }

    /// Pairs of online disks that share a unique ID (GPT disk or partition GUID, MBR
    /// signature): what must never be.
    pub fn online_id_collisions(&self) -> Vec<(u32, u32)> {
        let s = self.lock();
        let online: Vec<(u32, BTreeSet<Uuid>)> = s
            .disks
            .iter()
            .filter(|(_, d)| !d.offline)
            .map(|(n, d)| (*n, d.unique_ids()))
            .collect();
        let mut out = Vec::new();
        for (i, (a, ia)) in online.iter().enumerate() {
            for (b, ib) in &online[i + 1..] {
                if !ia.is_disjoint(ib) {
                    out.push((*a, *b));
                }
            }
        }
        out
    }
}
