//! Storage situations a node meets that the simulated machine can be put in: drives without
//! media, volumes locked by another process. Each follows the documentation cited in
//! `LEDGER.md`.

use super::*;

/// The access an I/O control code demands of the handle: the `RequiredAccess` bits of
/// `CTL_CODE` (bit 0 `FILE_READ_ACCESS`, bit 1 `FILE_WRITE_ACCESS`; 0 is `FILE_ANY_ACCESS`).
pub(super) fn required_access(code_: u32) -> u32 {
    (code_ >> 14) & 3
}

/// Whether a handle opened with `access` may send `code_`: the I/O manager checks the
/// handle's granted access against the code's `RequiredAccess` before the driver sees it.
pub(super) fn access_allows(access: Access, code_: u32) -> bool {
    let granted = match access {
        Access::Query => 0,
        Access::Read => 1,
        Access::ReadWrite => 3,
    };
    required_access(code_) & !granted == 0
}

/// Why an open of volume `v` with `access` fails, if it does: a data-access open mounts the
/// filesystem, which a drive without media cannot (ERROR_NOT_READY), and which a volume
/// locked by another handle refuses (ERROR_ACCESS_DENIED). A query open (access 0) reaches
/// the volume device without the filesystem and works in both cases.
pub(super) fn volume_open_error(s: &State, v: usize, access: Access) -> Option<OsError> {
    let vol = s.volumes.get(v)?;
    if access == Access::Query {
        return None;
    }
    if let Some(c) = vol.no_media {
        return Some(OsError::new(c));
    }
    if super::holders::locked(s, v) {
        return Some(OsError::new(code::ACCESS_DENIED));
    }
    None
}

/// Why a filesystem call on volume `v` (`GetVolumeInformationW`, `GetDiskFreeSpaceExW`,
/// which open its root directory) fails, if it does.
pub(super) fn filesystem_error(s: &State, v: usize) -> Option<OsError> {
    volume_open_error(s, v, Access::Read)
}

impl SimWindows {
    /// Adds an optical (or floppy) drive with no media, lettered from D: as Windows letters
    /// it (the empty virtual DVD drive of vSphere and Hyper-V templates); returns its volume
    /// GUID path.
    pub fn add_empty_drive(&self) -> String {
        self.add_empty_drive_answering(code::NOT_READY)
    }

    /// [`add_empty_drive`](Self::add_empty_drive), its driver answering data opens and
    /// requests with `code` instead of ERROR_NOT_READY (ERROR_NO_MEDIA_IN_DRIVE, or any other:
    /// which code an empty drive gives is the driver's choice, ledger row 18).
    pub fn add_empty_drive_answering(&self, code: u32) -> String {
        let mut s = self.lock();
        let name = s.volume_guid_path();
        s.volumes.push(Volume {
            names: vec![name.clone()],
            disk: u32::MAX,
            partition: 0,
            fs: None,
            fs_size: 0,
            head: Vec::new(),
            contents: Vec::new(),
            no_media: Some(code),
            locked: false,
            arrives: Duration::ZERO,
            settles: Duration::ZERO,
        });
        let index = s.volumes.len() - 1;
        s.give_letter(index);
        name
    }

    /// Another process (a format, chkdsk, a backup agent) takes or releases
    /// `FSCTL_LOCK_VOLUME` on `volume`.
    pub fn set_volume_locked(&self, volume: &str, locked: bool) {
        let mut s = self.lock();
        if let Some(v) = s.volume_named(volume) {
            s.volumes[v].locked = locked;
        }
    }
}

impl SimWindows {
    /// Attaches a RAW disk on a shared bus (iSCSI, SAN) as the default SAN policy of Windows
    /// Server (OfflineShared) leaves it: offline and read-only; returns its number.
    pub fn add_san_disk(&self, size: u64, lun: u8) -> u32 {
        let n = self.add_disk(size, lun);
        if let Some(d) = self.lock().disks.get_mut(&n) {
            d.offline = true;
            d.read_only = true;
            d.persisted = (true, true);
        }
        n
    }

    /// Takes a disk offline as another tool would (`offline disk` in diskpart): its volumes
    /// are still surfaced for the arrival delay, then gone.
    pub fn take_offline(&self, disk: u32) {
        let mut s = self.lock();
        let leave = s.clock + s.arrival_delay;
        if let Some(d) = s.disks.get_mut(&disk) {
            d.offline = true;
            d.volumes_leave = leave;
        }
    }

    /// Makes a disk read-only (`DISK_ATTRIBUTE_READ_ONLY`) or writable, as an administrator's
    /// `attributes disk set readonly` would, persistently.
    pub fn set_disk_read_only(&self, disk: u32, read_only: bool) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.read_only = read_only;
            d.persisted.1 = read_only;
        }
    }

    /// The disk is seen again (the node rebooted, or the disk was detached and attached): its
    /// attributes are the persisted ones.
    /// Its volumes arrive again asynchronously, as after any attach.
    pub fn reattach_disk(&self, disk: u32) {
        let mut s = self.lock();
        if let Some(d) = s.disks.get_mut(&disk) {
            (d.offline, d.read_only) = d.persisted;
            d.volumes_leave = Duration::ZERO;
        }
        s.volumes_arrive(disk);
    }

    /// The disk's `(offline, read_only)` attributes.
    pub fn disk_attributes(&self, disk: u32) -> Option<(bool, bool)> {
        self.lock()
            .disks
            .get(&disk)
            .map(|d| (d.offline, d.read_only))
    }
}

impl Disk {
    /// The GPT's usable area for this disk's size and sector: after the protective MBR, the
    /// header and 16 KiB of entries; before the backup entries and header.
    pub(super) fn gpt_usable(&self) -> (u64, u64) {
        let entries = (16 << 10) / self.sector;
        (
            (2 + entries) * self.sector,
            self.size - (1 + entries) * self.sector,
        )
    }

    /// `len` bytes at byte `offset` (zeros where nothing was written; short at the end).
    pub(super) fn read_bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        let end = (offset + len as u64).min(self.size);
        let mut out = vec![0u8; end.saturating_sub(offset) as usize];
        for (lba, bytes) in self
            .data
            .range(offset / self.sector..end.div_ceil(self.sector))
        {
            let at = lba * self.sector;
            for (i, b) in bytes.iter().enumerate() {
                let pos = at + i as u64;
                if (offset..end).contains(&pos) {
                    out[(pos - offset) as usize] = *b;
                }
            }
        }
        out
    }

    /// Writes `bytes` at byte `offset`.
    pub(super) fn write_bytes(&mut self, offset: u64, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            let pos = offset + i as u64;
            let sector = self.sector;
            let s = self
                .data
                .entry(pos / sector)
                .or_insert_with(|| vec![0; sector as usize]);
            s[(pos % sector) as usize] = *b;
        }
    }

    /// What `IOCTL_DISK_CREATE_DISK` writes for GPT: a protective MBR (one 0xEE entry) at LBA
    /// 0, the header ("EFI PART") at LBA 1 and the backup header at the last LBA.
    pub(super) fn write_gpt_headers(&mut self) {
        let mut mbr = vec![0u8; 512];
        mbr[446 + 4] = 0xEE;
        mbr[510] = 0x55;
        mbr[511] = 0xAA;
        self.write_bytes(0, &mbr);
        self.write_bytes(self.sector, b"EFI PART");
        self.write_bytes(self.size - self.sector, b"EFI PART");
    }
}

/// `ReadFile` at `offset` on a disk: whole sectors only, as noncached disk I/O requires.
pub(super) fn read_disk(d: &Disk, offset: u64, len: usize) -> Win32Result<Vec<u8>> {
    if !offset.is_multiple_of(d.sector) || !(len as u64).is_multiple_of(d.sector) {
        return Err(OsError::new(code::INVALID_PARAMETER));
    }
    Ok(d.read_bytes(offset, len))
}

impl SimWindows {
    /// Attaches a new RAW disk like [`SimWindows::add_disk`] with a logical sector of `sector`
    /// bytes (4096: a 4Kn disk).
    pub fn add_disk_with_sector(&self, size: u64, lun: u8, sector: u64) -> u32 {
        let n = self.add_disk(size, lun);
        if let Some(d) = self.lock().disks.get_mut(&n) {
            d.sector = sector;
        }
        n
    }

    /// Writes `bytes` on disk `disk` at byte `offset` (what another OS or a previous owner
    /// left there); Windows still sees the disk as it saw it before (RAW stays RAW).
    pub fn write_disk(&self, disk: u32, offset: u64, bytes: &[u8]) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.write_bytes(offset, bytes);
        }
    }

    /// `len` bytes of disk `disk` at byte `offset`.
    pub fn disk_bytes(&self, disk: u32, offset: u64, len: usize) -> Vec<u8> {
        self.lock()
            .disks
            .get(&disk)
            .map_or_else(Vec::new, |d| d.read_bytes(offset, len))
    }
}

impl State {
    /// The volumes of `disk` are surfaced again by Plug and Play, after the arrival delay: what
    /// happens when a disk comes online or is attached ("When a disk is online, one or more
    /// volume devices are installed for the disk").
    pub(super) fn volumes_arrive(&mut self, disk: u32) {
        let due = self.clock + self.arrival_delay;
        for v in self.volumes.iter_mut().filter(|v| v.disk == disk) {
            v.arrives = due;
        }
    }
}

impl SimWindows {
    /// Gives `volume` the next free drive letter (as automount or an administrator would).
    pub fn assign_letter(&self, volume: &str) {
        let mut s = self.lock();
        if let Some(v) = s.volume_named(volume) {
            s.give_letter(v);
        }
    }
}

impl SimWindows {
    /// Makes `IOCTL_DISK_GROW_PARTITION` on `disk` stay within the usable area its GPT records,
    /// as a partition manager that never relocates the backup GPT would: after the disk grew,
    /// the new space cannot be grown into.
    pub fn keep_usable_area(&self, disk: u32) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.keep_usable = true;
        }
    }
}

impl SimWindows {
    /// Starts a surprise removal of `disk` (detached from the VM): Plug and Play still lists
    /// its interface and volumes for a moment, and opens still work, but every request fails
    /// ERROR_DEVICE_REMOVED.
    pub fn start_removing_disk(&self, disk: u32) {
        self.start_removing_disk_answering(disk, code::DEVICE_REMOVED);
    }

    /// [`start_removing_disk`](Self::start_removing_disk), its requests failing with `code`:
    /// which code a removed device's driver gives no page says (ERROR_DEVICE_REMOVED,
    /// ERROR_NO_SUCH_DEVICE, ERROR_DEV_NOT_EXIST, ERROR_DEVICE_NOT_CONNECTED).
    pub fn start_removing_disk_answering(&self, disk: u32, code: u32) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.removing = Some(code);
        }
    }
}

/// The controls whose pages give no output buffer ("lpOutBuffer: NULL, nOutBufferSize: 0") and
/// that change state.
pub(super) fn takes_no_output(code_: u32) -> bool {
    use csi_proxy_formats::windows_buffers::ioctl as io;
    matches!(
        code_,
        io::DISK_CREATE_DISK
            | io::DISK_SET_DRIVE_LAYOUT_EX
            | io::DISK_GROW_PARTITION
            | io::DISK_SET_DISK_ATTRIBUTES
            | io::DISK_UPDATE_PROPERTIES
            | io::FSCTL_EXTEND_VOLUME
            | io::FSCTL_LOCK_VOLUME
            | io::FSCTL_UNLOCK_VOLUME
    )
}

impl SimWindows {
    /// Sets the SCSI name string disk `disk` reports in its device identification page.
    pub fn set_disk_page83(&self, disk: u32, id: &str) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.page83 = DeviceId::Ascii(id.into());
        }
    }
}

impl SimWindows {
    /// Sets the GPT attributes of partition `number` of `disk` in its table (as another
    /// machine, or a shadow-copy clone, left them); a hidden partition's volume is not seen from
    /// then on.
    pub fn set_partition_attributes(&self, disk: u32, number: u32, attributes: u64) {
        let mut s = self.lock();
        if let Some(p) = s
            .disks
            .get_mut(&disk)
            .and_then(|d| d.parts.iter_mut().find(|p| p.number == number))
        {
            p.attributes = attributes;
        }
    }

    /// Makes `IOCTL_DISK_CREATE_DISK` (GPT) create the Microsoft Reserved partition itself,
    /// its partition device arriving after the arrival delay; a layout written before then
    /// fails ERROR_NOT_READY.
    pub fn set_create_disk_makes_msr(&self, on: bool) {
        self.lock().create_disk_msr = on;
    }
}
