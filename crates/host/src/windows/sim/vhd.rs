//! Virtual disks on the simulated Windows ([`VirtualDisks`]): a VHDX is a file of the simulated
//! machine; attaching it adds a disk the way Plug and Play surfaces any new disk (RAW, no
//! SCSI address, no volumes until it is partitioned); growing it is seen once Windows re-reads
//! the drive size; detaching it (or closing the handle that attached it) removes the disk.
//! Every call takes the fault queued for it first ([`SimWindows::fail_next`]), under the
//! names `open_virtual_disk`, `create_virtual_disk`, `attach_virtual_disk`,
//! `get_virtual_disk_physical_path`, `resize_virtual_disk`, `detach_virtual_disk`,
//! `delete_vhd_file` and `copy_vhd_file`. A copy of a VHDX file holds what the file held, disk
//! IDs and all (a clone restored beside its source): attached while a disk with one of its IDs
//! is online, it arrives offline (ledger row 71).

use super::*;
use crate::windows::vhd::VirtualDisks;

/// The VHDX files and the handles open on them.
#[derive(Debug, Default)]
pub(super) struct Vhds {
    /// By the file's key.
    files: BTreeMap<String, VhdFile>,
    /// Open handles: the file's key.
    handles: HashMap<u64, String>,
}

#[derive(Debug)]
struct VhdFile {
    /// The virtual size in bytes.
    size: u64,
    /// While attached: the disk number and the handle that attached it.
    attached: Option<(u32, u64)>,
    /// The identifier the disk reports in its device identification page: the VHDX's "Page 83
    /// Data" metadata item, made with the file and kept with it across attaches.
    page83: String,
    /// While detached after an attach: what was written on the disk and the volumes Windows
    /// made for its partitions (which come back, with their GUID paths, on the next attach).
    kept: Option<(Disk, Vec<usize>)>,
}

/// The disk number a volume of a detached VHDX points at: no disk has it, so the volume is
/// seen nowhere until its VHDX is attached again.
const DETACHED: u32 = u32::MAX - 1;

impl State {
    fn vhd_handle(&self, handle: u64) -> Win32Result<String> {
        self.vhds
            .handles
            .get(&handle)
            .cloned()
            .ok_or(OsError::new(code::INVALID_HANDLE))
    }

    fn new_vhd_handle(&mut self, file: String) -> u64 {
        self.next_handle += 4;
        let h = self.next_handle;
        self.vhds.handles.insert(h, file);
        h
    }

    /// Removes an attached VHDX's disk: its volumes leave with it, and so do the mount points
    /// that led to them.
    fn remove_vhd_disk(&mut self, file: &str) {
        let Some(f) = self.vhds.files.get_mut(file) else {
            return;
        };
        let Some((disk, _)) = f.attached.take() else {
            return;
        };
        let kept = self.unplug(disk);
        if let (Some(f), Some(kept)) = (self.vhds.files.get_mut(file), kept) {
            f.kept = Some(kept);
        }
    }

    /// Takes `disk` off the machine as Plug and Play removes a device whose bus went away (a
    /// detach, a logout): its volumes leave with it and so do the mount points that led to
    /// them. Answers the disk and its volumes, kept for its return.
    pub(super) fn unplug(&mut self, disk: u32) -> Option<(Disk, Vec<usize>)> {
        let kept = self.disks.remove(&disk)?;
        self.unsurfaced.remove(&disk);
        self.arrivals.retain(|a| a.disk != disk);
        let gone: BTreeSet<usize> = (0..self.volumes.len())
            .filter(|v| self.volumes[*v].disk == disk)
            .collect();
        for v in &gone {
            self.volumes[*v].disk = DETACHED;
        }
        self.mount_points.retain(|_, (_, v)| !gone.contains(v));
        Some((kept, gone.into_iter().collect()))
    }
}

impl VirtualDisks for SimWindows {
    fn open(&self, path: &str) -> Win32Result<u64> {
        let mut s = self.enter("open_virtual_disk")?;
        let k = key(path);
        if !s.vhds.files.contains_key(&k) {
            return Err(OsError::new(code::FILE_NOT_FOUND));
        }
        Ok(s.new_vhd_handle(k))
    }

    fn create(&self, path: &str, size: u64) -> Win32Result<u64> {
        let mut s = self.enter("create_virtual_disk")?;
        let k = key(path);
        if s.exists(path) {
            return Err(OsError::new(code::FILE_EXISTS));
        }
        if !parent_key(&k).is_some_and(|p| s.exists(&p)) {
            return Err(OsError::new(code::PATH_NOT_FOUND));
        }
        // CREATE_VIRTUAL_DISK_PARAMETERS: "MaximumSize ... must be a multiple of 512".
        if size == 0 || !size.is_multiple_of(SECTOR) {
            return Err(OsError::new(code::INVALID_PARAMETER));
        }
        s.files.insert(k.clone(), Vec::new());
        let page83 = format!("vhd-{}", s.guid());
        s.vhds.files.insert(
            k.clone(),
            VhdFile {
                size,
                attached: None,
                page83,
                kept: None,
            },
        );
        Ok(s.new_vhd_handle(k))
    }

    fn attach(&self, handle: u64) -> Win32Result<()> {
        let (size, kept, page83) = {
            let mut s = self.enter("attach_virtual_disk")?;
            let file = s.vhd_handle(handle)?;
            let f = s.vhds.files.get_mut(&file).expect("a handle's file exists");
            if f.attached.is_some() {
                return Err(OsError::new(code::SHARING_VIOLATION));
            }
            (f.size, f.kept.take(), f.page83.clone())
        };
        // A disk of the VHDX's size, as any newly discovered disk (the SAN policy applies).
        let disk = self.add_disk(size, 0);
        let mut s = self.lock();
        if let Some((mut d, volumes)) = kept {
            // What was written on it is there again, at its size now (resized while detached:
            // the GPT's backup stays where it was written, as on any grown disk).
            let fresh = s.disks.get(&disk).map(|f| (f.offline, f.read_only));
            d.size = size;
            d.pending_size = None;
            if let Some(attrs) = fresh.filter(|_| s.san_offline_all) {
                (d.offline, d.read_only) = attrs;
            } else {
                (d.offline, d.read_only) = d.persisted;
            }
            s.disks.insert(disk, d);
            // VDSDiskOfflineReasonCollision: a disk whose disk ID, signature or a partition GUID
            // another online disk has is kept offline (ledger row 71).
            if s.collides(disk)
                && let Some(d) = s.disks.get_mut(&disk)
            {
                d.offline = true;
            }
            for v in &volumes {
                s.volumes[*v].disk = disk;
            }
            // A copy's partitions have no volumes of this machine yet: each gets one, as any
            // partition of a new disk does (none for the reserved or a hidden one).
            let numbers: Vec<u32> = s.disks[&disk].parts.iter().map(|p| p.number).collect();
            for number in numbers {
                if !volumes.iter().any(|&v| s.volumes[v].partition == number) {
                    s.create_volume(disk, number);
                }
            }
            s.volumes_arrive(disk);
        }
        if let Some(d) = s.disks.get_mut(&disk) {
            // A file-backed virtual disk sits on no SCSI adapter (inferred, LEDGER) and
            // reports no serial number.
            d.scsi = None;
            d.serial = String::new();
            d.page83 = DeviceId::Ascii(page83);
        }
        // AttachVirtualDisk returns before Plug and Play has surfaced the disk (ledger row 72):
        // it is, after the arrival delay.
        let due = (
            s.clock + s.arrival_delay,
            std::time::Instant::now() + s.arrival_delay,
        );
        s.unsurfaced.insert(disk, due);
        let file = s.vhd_handle(handle)?;
        if let Some(f) = s.vhds.files.get_mut(&file) {
            f.attached = Some((disk, handle));
        }
        Ok(())
    }

    fn physical_path(&self, handle: u64) -> Win32Result<String> {
        let s = self.enter("get_virtual_disk_physical_path")?;
        let file = s.vhd_handle(handle)?;
        match s.vhds.files[&file].attached {
            Some((disk, _)) => Ok(format!(r"\\.\PhysicalDrive{disk}")),
            None => Err(OsError::new(code::NOT_READY)),
        }
    }

    fn resize(&self, handle: u64, size: u64) -> Win32Result<()> {
        let mut s = self.enter("resize_virtual_disk")?;
        let file = s.vhd_handle(handle)?;
        let f = s.vhds.files.get_mut(&file).expect("a handle's file exists");
        // "Resize-VHD is an offline operation; the virtual hard disk must not be attached when
        // the operation is initiated" (ledger row 46; inferred: the code).
        if f.attached.is_some() {
            return Err(OsError::new(code::BUSY));
        }
        // RESIZE_VIRTUAL_DISK_FLAG_NONE: a smaller size is checked against the partition
        // table, and a GPT keeps its backup at the end (**inferred**: the code of a
        // truncation refused).
        let cut = f.kept.as_ref().is_some_and(|(d, _)| {
            d.usable_length > 0 || d.parts.iter().any(|p| p.start + p.length > size)
        });
        if size == 0 || !size.is_multiple_of(SECTOR) || size < f.size && cut {
            return Err(OsError::new(code::INVALID_PARAMETER));
        }
        f.size = size;
        Ok(())
    }

    fn detach(&self, handle: u64) -> Win32Result<()> {
        let mut s = self.enter("detach_virtual_disk")?;
        let file = s.vhd_handle(handle)?;
        if s.vhds.files[&file].attached.is_none() {
            return Err(OsError::new(code::NOT_READY));
        }
        s.remove_vhd_disk(&file);
        Ok(())
    }

    fn close_vhd(&self, handle: u64) {
        let mut s = self.lock();
        let Some(file) = s.vhds.handles.remove(&handle) else {
            return;
        };
        // ATTACH_VIRTUAL_DISK_FLAG_PERMANENT_LIFETIME "decouples the virtual disk lifetime from
        // that of the VirtualDiskHandle": without it, closing the handle detaches the disk.
        if s.vhds.files[&file]
            .attached
            .is_some_and(|(_, by)| by == handle)
        {
            s.remove_vhd_disk(&file);
        }
    }

    fn delete_vhd_file(&self, path: &str) -> Win32Result<()> {
        let mut s = self.enter("delete_vhd_file")?;
        let k = key(path);
        if !s.files.contains_key(&k) {
            return Err(OsError::new(code::FILE_NOT_FOUND));
        }
        // An open virtual disk keeps its file open without FILE_SHARE_DELETE (inferred).
        if s.vhds.handles.values().any(|f| *f == k) {
            return Err(OsError::new(code::SHARING_VIOLATION));
        }
        s.files.remove(&k);
        s.ids.remove(&k);
        s.vhds.files.remove(&k);
        Ok(())
    }

    fn copy_vhd_file(&self, from: &str, to: &str) -> Win32Result<()> {
        let mut s = self.enter("copy_vhd_file")?;
        let (kf, kt) = (key(from), key(to));
        let Some(f) = s.vhds.files.get(&kf) else {
            return Err(OsError::new(code::FILE_NOT_FOUND));
        };
        // An attached VHDX's file is open in the virtual disk driver without sharing writes
        // (inferred): it is copied detached.
        if f.attached.is_some() {
            return Err(OsError::new(code::SHARING_VIOLATION));
        }
        // bFailIfExists TRUE: "the function fails" when the new file exists.
        if s.exists(to) {
            return Err(OsError::new(code::FILE_EXISTS));
        }
        if !parent_key(&kt).is_some_and(|p| s.exists(&p)) {
            return Err(OsError::new(code::PATH_NOT_FOUND));
        }
        let copy = VhdFile {
            size: f.size,
            attached: None,
            page83: f.page83.clone(),
            // What is written on it, without the source's volumes (they are this machine's).
            kept: f.kept.as_ref().map(|(d, _)| (d.clone(), Vec::new())),
        };
        let bytes = s.files.get(&kf).cloned().unwrap_or_default();
        s.files.insert(kt.clone(), bytes);
        s.vhds.files.insert(kt, copy);
        Ok(())
    }
}

impl SimWindows {
    /// The VHDX files on the simulated machine, with whether each is attached.
    pub fn vhd_files(&self) -> Vec<(String, bool)> {
        self.lock()
            .vhds
            .files
            .iter()
            .map(|(k, f)| (k.clone(), f.attached.is_some()))
            .collect()
    }
}
