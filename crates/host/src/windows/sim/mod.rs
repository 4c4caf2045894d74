//! The simulated Windows: a stateful, in-memory [`Win32`] that behaves the way Microsoft
//! documents the calls the disk and volume hosts make, including the parts that bite real
//! deployments. The Windows hosts' logic runs over it on Linux, in unit tests and through the
//! daemon's gRPC endpoints.
//!
//! `LEDGER.md` (next to this file) lists every modelled behaviour with the page it follows and
//! the tests that rely on it. In short:
//! - A partition's volume appears *asynchronously* after `IOCTL_DISK_SET_DRIVE_LAYOUT_EX`
//!   (Plug and Play creates the volume device once the partition manager reports the partition;
//!   "Volume arrival" is a PnP event), after a configurable delay ([`SimWindows::set_arrival_delay`]).
//! - A volume can have several GUID paths; `GetVolumeNameForVolumeMountPointW` answers "only the
//!   first one in the mount manager's cache" ([`SimWindows::add_volume_name`]).
//! - Automount gives a new basic volume a drive letter unless its GPT entry carries
//!   `GPT_BASIC_DATA_ATTRIBUTE_NO_DRIVE_LETTER` ("the volume is not assigned a drive letter by
//!   default when the disk is moved to another computer or when the disk is seen for the first
//!   time by a computer"; PARTITION_INFORMATION_GPT).
//! - Short buffers answer ERROR_INSUFFICIENT_BUFFER (layouts) or ERROR_MORE_DATA (volume disk
//!   extents, `GetVolumePathNamesForVolumeNameW`, which also reports the length it needs).
//! - A WMI connection made before `winmgmt` restarted answers RPC_E_DISCONNECTED until the
//!   client connects again ([`SimWindows::restart_wmi`]).
//! - An offline disk's volumes disappear until the disk is online again
//!   (`DISK_ATTRIBUTE_OFFLINE`), and then arrive asynchronously, as after an attach; taken
//!   offline, they stay surfaced for the arrival delay (removal is as asynchronous as arrival).
//! - Drives without media, volumes locked by another process, the SAN policy and read-only
//!   disks, disk contents and 4Kn sectors, surprise removal (`storage.rs`).
//! - WMI calls run on a thread pool per namespace, as the real WMI layer's, and a namespace's
//!   provider can hang ([`SimWindows::hang_wmi_namespace`]); failed SMB mapping methods answer in
//!   each of three encodings ([`SimWindows::set_smb_failure_encoding`]); a dead SMB server holds
//!   opens below its shares ([`SimWindows::set_share_hangs`]).
//! - Partitions are numbered by GPT entry position, as the partition manager reports them
//!   ([`SimWindows::add_gpt_disk`]).
//! - Any call can be made to fail once with a chosen error ([`SimWindows::fail_next`]).
//!
//! Machine at start: disk 0 holds the system (an EFI partition, the MSR and `C:`, NTFS, with
//! `C:\Windows\system32` and `C:\pagefile.sys`).

mod calls;
mod chaos;
mod collision;
pub mod console;
mod devices;
mod filesystem;
pub mod holders;
mod identity;
pub use identity::nvme_serial;
mod iscsi;
mod mbr;
mod races;
pub mod services;
pub use chaos::{CRASHED, Disturbance};
mod smb;
pub use smb::SmbFailureEncoding;
mod storage;
mod vhd;
mod wmi;

use super::os::{
    Access, IscsiSession, OsError, PersistentLogin, ReturnValue, StorageDisk, Win32, Win32Result,
    code,
};
use crate::windows::os::pool::Namespaces;
use csi_proxy_formats::windows_buffers::layout::{
    BASIC_DATA, HIDDEN, MSR, NO_DRIVE_LETTER, STYLE_GPT, STYLE_RAW,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use uuid::Uuid;

/// The EFI system partition type.
const EFI_SYSTEM: Uuid = uuid::uuid!("c12a7328-f81f-11d2-ba4b-00a0c93ec93b");
const MIB: u64 = 1 << 20;
/// Sector size of every simulated disk.
pub const SECTOR: u64 = 512;
/// RPC_E_DISCONNECTED.
const RPC_E_DISCONNECTED: u32 = 0x8001_0108;
use crate::windows::os::code::WBEM_E_NOT_FOUND;

/// One partition of a simulated disk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    number: u32,
    start: u64,
    length: u64,
    gpt_type: Uuid,
    id: Uuid,
    attributes: u64,
}

/// A simulated disk.
#[derive(Debug, Clone)]
struct Disk {
    size: u64,
    /// A size the disk was grown to that Windows has not re-read yet.
    pending_size: Option<u64>,
    style: u32,
    disk_id: Uuid,
    usable_start: u64,
    usable_length: u64,
    parts: Vec<Part>,
    offline: bool,
    /// Until when an offline disk's volumes are still surfaced: taken offline, they go as
    /// asynchronously as they arrive (Plug and Play removes the volume devices after the
    /// arrival delay).
    volumes_leave: Duration,
    /// `DISK_ATTRIBUTE_READ_ONLY`: writes fail ERROR_WRITE_PROTECT.
    read_only: bool,
    /// `(offline, read_only)` as persisted: what the disk comes back with when it is seen
    /// again (a reboot, a re-attach).
    persisted: (bool, bool),
    /// `IOCTL_DISK_GROW_PARTITION` stays within the GPT's recorded usable area (a partition
    /// manager that does not relocate the backup GPT).
    keep_usable: bool,
    /// When the MSR that `IOCTL_DISK_CREATE_DISK` made arrives (its partition device exists).
    msr_due: Duration,
    /// Surprise-removed: Plug and Play still lists it, but every request fails with this code
    /// (ERROR_DEVICE_REMOVED unless a test picks another, ledger row 27).
    removing: Option<u32>,
    /// Logical sector size: 512 (512n, 512e) or 4096 (4Kn).
    sector: u64,
    /// What is written on the disk, sparse: sector index to its bytes (absent is zeros).
    data: BTreeMap<u64, Vec<u8>>,
    /// `(port, path, target, lun)`; `None` for a disk that is not SCSI-addressed.
    scsi: Option<(u8, u8, u8, u8)>,
    page83: DeviceId,
    serial: String,
}

/// What a disk's device identification page (`StorageDeviceIdProperty`) reports.
#[derive(Debug, Clone)]
enum DeviceId {
    /// One ASCII SCSI name string associated with the device.
    Ascii(String),
    /// One binary NAA identifier associated with the device (VMware with `disk.EnableUUID`).
    Naa(Vec<u8>),
    /// One binary EUI-64 identifier associated with the device (an NVMe namespace).
    Eui64(Vec<u8>),
    /// No identifier (VMware without `disk.EnableUUID`).
    None,
}

/// A simulated volume (a basic volume on one partition).
#[derive(Debug, Clone)]
struct Volume {
    /// Its GUID paths, `\\?\Volume{GUID}\`, the mount manager's first one first.
    names: Vec<String>,
    disk: u32,
    partition: u32,
    /// The filesystem and its serial number; `None` is RAW.
    fs: Option<(String, u32)>,
    /// The filesystem's size in bytes.
    fs_size: u64,
    /// The volume's first bytes (what a signature probe reads).
    head: Vec<u8>,
    /// Directories and files on the volume while no folder shows them, as paths relative to
    /// its root (`None` for a directory, a file's contents otherwise).
    contents: Vec<(String, Option<Vec<u8>>)>,
    /// An optical drive with no media in it, and the code its driver answers every data open
    /// and request with: on no disk, and only query opens work.
    no_media: Option<u32>,
    /// Another process holds `FSCTL_LOCK_VOLUME` on it: only query opens work.
    locked: bool,
    /// When Plug and Play surfaces it again after its disk came online or was attached; it
    /// does not exist before.
    arrives: Duration,
    /// Until when it answers filesystem controls with ERROR_NOT_READY, its partition having
    /// just grown underneath it.
    settles: Duration,
}

/// What an open handle refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Disk(u32),
    Volume(usize),
}

#[derive(Debug, Clone, Copy)]
struct Open {
    target: Target,
    access: Access,
}

/// A volume the partition manager has reported that Plug and Play has not created yet.
#[derive(Debug, Clone)]
struct Arrival {
    due: Duration,
    disk: u32,
    partition: u32,
}

#[derive(Debug, Default)]
struct State {
    clock: Duration,
    arrival_delay: Duration,
    automount: bool,
    disks: BTreeMap<u32, Disk>,
    volumes: Vec<Volume>,
    arrivals: Vec<Arrival>,
    handles: HashMap<u64, Open>,
    next_handle: u64,
    next_guid: u32,
    next_serial: u32,
    /// Mount points (`X:\` or a folder, with the trailing backslash), keyed lower-case, with
    /// the text as set and the volume.
    mount_points: BTreeMap<String, (String, usize)>,
    /// Directories, keyed lower-case without a trailing backslash, with the text as created.
    dirs: BTreeMap<String, String>,
    /// Files, keyed lower-case, with their contents (`ReadFile`; empty unless a test put some).
    files: BTreeMap<String, Vec<u8>>,
    /// Symbolic links, keyed lower-case.
    links: BTreeMap<String, filesystem::Link>,
    /// Entries with FILE_ATTRIBUTE_READONLY, keyed lower-case.
    readonly: BTreeSet<String>,
    /// DACLs (SDDL) set on entries, keyed lower-case (`set_dacl_sddl`).
    dacls: BTreeMap<String, String>,
    /// Handles open on files and directories.
    entries: HashMap<u64, filesystem::OpenEntry>,
    /// File IDs (`FileIdInfo`) of the entries asked about, by key; they move with renames.
    ids: BTreeMap<String, u64>,
    next_id: u64,
    /// The most handles `entries` held at once, and the most entries one listing read
    /// returned, since a test reset them (`peaks`).
    entry_handles_peak: usize,
    dir_batch_peak: usize,
    /// Entries marked for deletion while handles sharing delete were open on them (keys):
    /// deleted at the last close, delete-pending until then.
    delete_pending: BTreeSet<String>,
    /// Handles another process holds, with when it closes them.
    closes: Vec<(Duration, u64)>,
    page_files: Vec<String>,
    /// Handles other processes hold on devices (`holders.rs`), by an id of the test's.
    others: HashMap<u64, holders::OtherOpen>,
    /// What tests make happen just before given calls (`holders.rs`).
    before_calls: holders::BeforeCalls,
    /// Volumes locked through one of the daemon's handles (`FSCTL_LOCK_VOLUME`), with it.
    volume_locks: HashMap<usize, u64>,
    /// What the Storage Management provider reports of each disk (none: nothing).
    disk_roles: BTreeMap<u32, holders::DiskRoles>,
    /// The values of `HKLM\SYSTEM\CurrentControlSet\Control\CrashControl` that are set.
    crash_control: BTreeMap<String, String>,
    /// SMB servers' shares, keyed by lower-cased `\\server\share`.
    shares: BTreeMap<String, smb::Share>,
    /// Node-wide SMB mappings, keyed by lower-cased root.
    smb_mappings: BTreeMap<String, smb::Mapping>,
    /// How failed SMB mapping methods answer.
    smb_encoding: smb::SmbFailureEncoding,
    /// Why the scan for links below the allowed roots misses some (a directory it cannot
    /// list), if it does.
    link_scan_incomplete: Option<String>,
    /// What a WMI connection made before `winmgmt` restarted answers (RPC_E_DISCONNECTED, or
    /// another "server gone" code); `None` while connected.
    wmi_gone: Option<u32>,
    /// WMI namespaces whose provider hangs: their calls never answer.
    wmi_hung: BTreeSet<&'static str>,
    /// `IOCTL_DISK_CREATE_DISK` (GPT) makes the Microsoft Reserved partition itself.
    create_disk_msr: bool,
    /// What the next WMI method call answers instead of doing its work.
    odd_return: Option<ReturnValue>,
    /// When the Storage Management provider answers `MSFT_Volume` from a cache
    /// (`set_storage_provider_cache`): the volumes it held at its last refresh, by first name.
    provider_cache: Option<BTreeSet<String>>,
    /// Services, keyed lower-case (service names are case-insensitive).
    services: BTreeMap<String, services::Service>,
    /// The programs the simulated SCM models, and answers a test makes it give.
    scm: services::Scm,
    /// The iSCSI initiator.
    iscsi: iscsi::Initiator,
    /// The raw SMBIOS table the firmware offers.
    smbios: Option<Vec<u8>>,
    /// What WMI's Win32_BIOS reports.
    wmi_serial: String,
    faults: HashMap<String, VecDeque<OsError>>,
    calls: BTreeMap<&'static str, u64>,
    /// Two entries a test has exchanged before every seam call (`races.rs`), and how many
    /// exchanges were made.
    swapping: Option<(String, String)>,
    swaps: u64,
    /// The draws deciding before which seam calls the exchange happens (xorshift64).
    race_draw: u64,
    /// A test's hook over every seam call (`chaos.rs`).
    chaos: chaos::Chaos,
    /// Virtual disk files and handles (`vhd.rs`).
    vhds: vhd::Vhds,
    /// Disks attached that Plug and Play has not surfaced yet, with when they are: until then
    /// no enumeration lists them and their device paths do not open, however often one asks
    /// (the arrival delay after the attach, on the simulated clock or in real time, whichever
    /// passes first: a caller polling in real time sees the disk as one on a node would).
    unsurfaced: BTreeMap<u32, (Duration, std::time::Instant)>,
    /// SAN policy OfflineAll: every newly discovered disk arrives offline and read-only.
    san_offline_all: bool,
    /// A LUN's second path arrives online (a knob: ledger row 91 models it offline).
    redundant_paths_online: bool,
    /// Server names the SMB client counts as one for error 1219 (a knob: ledger row 12 models
    /// the name as written).
    smb_same_server: Vec<(String, String)>,
}

/// The simulated Windows. Cheap to share: all state is behind one lock.
pub struct SimWindows {
    /// Shared with the WMI threads.
    state: Arc<Mutex<State>>,
    /// The WMI namespaces' thread pools, as the real WMI layer has them.
    wmi: Namespaces<()>,
    /// Where calls the chaos hook hangs wait, the machine unlocked (`chaos.rs`).
    gate: Arc<Condvar>,
}

impl std::fmt::Debug for SimWindows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimWindows")
    }
}

/// The state behind `state`; a poisoned lock only means a test thread panicked holding it.
fn lock_state(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Default for SimWindows {
    fn default() -> Self {
        Self::new()
    }
}

/// `path` as a lookup key: lower-case (Windows paths are case-insensitive), `/` as `\`, no
/// trailing backslash except on a drive root's.
fn key(path: &str) -> String {
    let p = path.replace('/', "\\").to_ascii_lowercase();
    let t = p.trim_end_matches('\\');
    if t.len() == 2 && t.as_bytes()[1] == b':' {
        format!("{t}\\")
    } else {
        t.to_string()
    }
}

/// A mount point's key: always with one trailing backslash.
fn mp_key(path: &str) -> String {
    let mut k = key(path).trim_end_matches('\\').to_string();
    k.push('\\');
    k
}

/// The parent directory's key, if any.
fn parent_key(k: &str) -> Option<String> {
    let t = k.trim_end_matches('\\');
    let i = t.rfind('\\')?;
    let p = &t[..i];
    Some(if p.len() == 2 && p.as_bytes()[1] == b':' {
        format!("{p}\\")
    } else {
        p.to_string()
    })
}

impl State {
    fn guid(&mut self) -> Uuid {
        self.next_guid += 1;
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.next_guid.to_le_bytes());
        b[6] = 0x40; // version 4, as CoCreateGuid's
        b[8] = 0x80;
        b[15] = 0x5a;
        Uuid::from_bytes_le(b)
    }

    fn volume_guid_path(&mut self) -> String {
        format!(r"\\?\Volume{{{}}}\", self.guid())
    }

    /// Creates the volumes whose arrival is due.
    fn settle(&mut self) {
        self.luns_arrive();
        let (now, real) = (self.clock, std::time::Instant::now());
        self.unsurfaced
            .retain(|_, (due, due_real)| *due > now && *due_real > real);
        let now = self.clock;
        let (due, later): (Vec<_>, Vec<_>) = self.arrivals.drain(..).partition(|a| a.due <= now);
        self.arrivals = later;
        for a in due {
            self.create_volume(a.disk, a.partition);
        }
        let (due, later): (Vec<_>, Vec<_>) = self.closes.drain(..).partition(|c| c.0 <= now);
        self.closes = later;
        for (_, h) in due {
            self.close_entry(h);
        }
    }

    /// The volume of a partition appears: a basic-data partition gets a RAW volume with a new
    /// GUID path, and a drive letter when automount is on and the entry does not forbid one.
    /// A hidden one gets none ("the partition is not detected by the mount manager. As a
    /// result, the partition does not receive a drive letter, does not receive a volume GUID
    /// path ... and is not enumerated by calls to FindFirstVolume and FindNextVolume",
    /// PARTITION_INFORMATION_GPT, GPT_BASIC_DATA_ATTRIBUTE_HIDDEN).
    fn create_volume(&mut self, disk: u32, partition: u32) -> Option<usize> {
        let d = self.disks.get(&disk)?;
        let p = d.parts.iter().find(|p| p.number == partition)?.clone();
        if p.gpt_type != BASIC_DATA || p.attributes & HIDDEN != 0 {
            return None;
        }
        let name = self.volume_guid_path();
        self.volumes.push(Volume {
            names: vec![name],
            disk,
            partition,
            fs: None,
            fs_size: 0,
            head: Vec::new(),
            contents: Vec::new(),
            no_media: None,
            locked: false,
            arrives: Duration::ZERO,
            settles: Duration::ZERO,
        });
        let index = self.volumes.len() - 1;
        if self.automount && p.attributes & NO_DRIVE_LETTER == 0 {
            self.give_letter(index);
        }
        Some(index)
    }

    /// Mounts volume `index` at the first free drive letter from D:.
    fn give_letter(&mut self, index: usize) {
        let taken: BTreeSet<String> = self.mount_points.keys().cloned().collect();
        if let Some(letter) = ('D'..='Z').find(|l| !taken.contains(&mp_key(&format!("{l}:")))) {
            let text = format!(r"{letter}:\");
            self.mount_points.insert(mp_key(&text), (text, index));
        }
    }

    /// What the Storage Management provider finds when it looks: the visible volumes.
    fn provider_volumes(&self) -> BTreeSet<String> {
        (0..self.volumes.len())
            .filter(|&v| self.visible(v))
            .map(|v| self.volumes[v].names[0].to_ascii_lowercase())
            .collect()
    }

    /// Whether the volume can be seen: a drive without media always is; a partition's volume
    /// while its disk is online and still has its partition, not hidden (see `create_volume`).
    fn visible(&self, v: usize) -> bool {
        self.volumes.get(v).is_some_and(|vol| {
            vol.no_media.is_some()
                || vol.arrives <= self.clock
                    && self.disks.get(&vol.disk).is_some_and(|d| {
                        (!d.offline || self.clock < d.volumes_leave)
                            && d.parts
                                .iter()
                                .any(|p| p.number == vol.partition && p.attributes & HIDDEN == 0)
                    })
        })
    }

    /// The volume one of whose GUID paths (or device paths) is `name`.
    fn volume_named(&self, name: &str) -> Option<usize> {
        let k = name.to_ascii_lowercase().replacen(r"\\.\", r"\\?\", 1);
        let k = k.trim_end_matches('\\');
        (0..self.volumes.len()).find(|&i| {
            self.visible(i)
                && self.volumes[i]
                    .names
                    .iter()
                    .any(|n| n.to_ascii_lowercase().trim_end_matches('\\') == k)
        })
    }

    /// The volume mounted at the mount point `path`, or named by it.
    fn volume_at(&self, path: &str) -> Option<usize> {
        if let Some(v) = self.volume_named(path) {
            return Some(v);
        }
        self.mount_points
            .get(&mp_key(path))
            .map(|(_, v)| *v)
            .filter(|v| self.visible(*v))
    }

    fn take_fault(&mut self, call: &'static str) -> Win32Result<()> {
        *self.calls.entry(call).or_default() += 1;
        self.before_call(call);
        self.race();
        match self.faults.get_mut(call).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => self.disturb(call),
        }
    }

    /// Whether anything is at `path`: a directory, file, link, mount point or drive root.
    fn exists(&self, path: &str) -> bool {
        self.entry(path).is_some()
    }
}

impl SimWindows {
    /// A machine with only its system disk (disk 0, `C:`), automount on, volumes arriving
    /// 300 ms after a layout write.
    pub fn new() -> Self {
        let sim = Self {
            wmi: wmi::namespaces(),
            gate: Arc::default(),
            state: Arc::new(Mutex::new(State {
                arrival_delay: Duration::from_millis(300),
                automount: true,
                next_serial: 0x1a2b_3c4d,
                ..State::default()
            })),
        };
        {
            let mut s = sim.lock();
            let size = 64 << 30;
            let efi = s.guid();
            let msr = s.guid();
            let os = s.guid();
            let disk_id = s.guid();
            s.disks.insert(
                0,
                Disk {
                    style: STYLE_GPT,
                    disk_id,
                    usable_start: 34 * SECTOR,
                    usable_length: size - 67 * SECTOR,
                    parts: vec![
                        part(1, MIB, 100 * MIB, EFI_SYSTEM, efi, 0),
                        part(2, 101 * MIB, 16 * MIB, MSR, msr, 0),
                        part(3, 117 * MIB, size - 118 * MIB, BASIC_DATA, os, 0),
                    ],
                    ..Disk::blank(size, 0, "system-disk", "SIM-SYSTEM")
                },
            );
            let automount = s.automount;
            s.automount = true;
            let c = s.create_volume(0, 3).expect("the system volume");
            s.automount = automount;
            // The first letter automount gives is D:, but the system volume is C:.
            s.mount_points.clear();
            s.mount_points.insert(mp_key("C:"), (r"C:\".into(), c));
            let serial = s.next_serial;
            s.volumes[c].fs = Some(("NTFS".into(), serial));
            s.volumes[c].fs_size = size - 118 * MIB;
            s.next_serial += 1;
            for d in [r"C:\Windows", r"C:\Windows\system32"] {
                s.dirs.insert(key(d), d.into());
            }
            s.files.insert(key(r"C:\pagefile.sys"), Vec::new());
            s.page_files = vec![r"C:\pagefile.sys".into()];
            // Disk 0 holds the running Windows and the partition the firmware boots from.
            s.disk_roles.insert(
                0,
                holders::DiskRoles {
                    boot: true,
                    system: true,
                    ..Default::default()
                },
            );
        }
        sim
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock_state(&self.state)
    }

    /// Attaches a new RAW disk of `size` bytes at SCSI LUN `lun` (port 0, target 0), and
    /// returns its number.
    pub fn add_disk(&self, size: u64, lun: u8) -> u32 {
        self.lock().new_disk(size, lun)
    }

    /// Sets the SAN policy to OfflineAll (`san policy=OfflineAll`): every disk discovered from
    /// now on arrives offline and read-only; or back to the default.
    pub fn set_san_offline_all(&self, on: bool) {
        self.lock().san_offline_all = on;
    }

    /// Makes the disk not SCSI-addressed (a virtual disk, a Storage Spaces disk): its
    /// `IOCTL_SCSI_GET_ADDRESS` fails.
    pub fn unplace_disk(&self, disk: u32) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.scsi = None;
        }
    }

    /// Grows a disk underneath Windows (a cloud disk expanded): Windows sees the new size after
    /// `IOCTL_DISK_UPDATE_DRIVE_SIZE`.
    pub fn grow_disk(&self, disk: u32, size: u64) {
        if let Some(d) = self.lock().disks.get_mut(&disk) {
            d.pending_size = Some(size);
        }
    }

    /// How long after a layout write a new partition's volume appears.
    pub fn set_arrival_delay(&self, d: Duration) {
        self.lock().arrival_delay = d;
    }

    /// Turns automount (drive letters for new basic volumes) on or off (`mountvol /N`).
    pub fn set_automount(&self, on: bool) {
        self.lock().automount = on;
    }

    /// Makes the Storage Management provider answer `MSFT_Volume` from its cache: a volume
    /// that arrived after the last `UpdateHostStorageCache` is not found until the next one.
    pub fn set_storage_provider_cache(&self, on: bool) {
        let mut s = self.lock();
        s.provider_cache = on.then(|| s.provider_volumes());
    }

    /// Gives `volume` a new GUID path that the mount manager lists first from now on (as after
    /// a reboot that reordered its cache); returns it. The old one keeps working.
    pub fn add_volume_name(&self, volume: &str) -> Option<String> {
        let mut s = self.lock();
        let v = s.volume_named(volume)?;
        let name = s.volume_guid_path();
        s.volumes[v].names.insert(0, name.clone());
        Some(name)
    }

    /// Writes `bytes` at the start of the volume (a signature another OS left).
    pub fn write_head(&self, volume: &str, bytes: &[u8]) {
        let mut s = self.lock();
        if let Some(v) = s.volume_named(volume) {
            s.volumes[v].head = bytes.to_vec();
        }
    }

    /// Makes the next WMI method call (Format, SMB Create) answer `r` without doing its work, as
    /// a provider answering a ReturnValue of an unexpected type would.
    pub fn answer_next_method_with(&self, r: ReturnValue) {
        self.lock().odd_return = Some(r);
    }

    /// Restarts the WMI service: connections made before answer RPC_E_DISCONNECTED.
    pub fn restart_wmi(&self) {
        self.restart_wmi_with(RPC_E_DISCONNECTED);
    }

    /// Restarts the WMI service, connections made before answering `code` (RPC_S_CALL_FAILED,
    /// RPC_E_SERVER_DIED, ...: how a call finds its server gone depends on when it died).
    pub fn restart_wmi_with(&self, code: u32) {
        self.lock().wmi_gone = Some(code);
    }

    /// Makes the next call of `call` (a [`Win32`] method name, e.g. `"volume_path_names"`)
    /// fail with `e`; several calls queue up.
    pub fn fail_next(&self, call: &str, e: OsError) {
        self.lock()
            .faults
            .entry(call.to_string())
            .or_default()
            .push_back(e);
    }

    /// Makes `path` (and its parents) a directory.
    pub fn mkdir(&self, path: &str) {
        self.lock().mkdir_all(path);
    }

    /// Puts a file at `path` (its directory must exist); one already there keeps its contents.
    pub fn add_file(&self, path: &str) {
        self.lock().files.entry(key(path)).or_default();
    }

    /// Puts a file at `path` holding `contents` (its directory must exist), replacing the
    /// contents of one already there (another process writing it, as kubelet writes its
    /// per-volume records).
    pub fn put_file(&self, path: &str, contents: &[u8]) {
        self.lock().files.insert(key(path), contents.to_vec());
    }

    /// Sets the page files Windows uses.
    pub fn set_page_files(&self, files: &[&str]) {
        self.lock().page_files = files.iter().map(|f| f.to_string()).collect();
    }

    /// The mount points, as `(mount point, volume's first GUID path)`.
    pub fn mount_points(&self) -> Vec<(String, String)> {
        let s = self.lock();
        s.mount_points
            .values()
            .map(|(t, v)| (t.clone(), s.volumes[*v].names[0].clone()))
            .collect()
    }

    /// The filesystem on a volume and its size, if any.
    pub fn filesystem_of(&self, volume: &str) -> Option<(String, u64)> {
        let s = self.lock();
        let v = s.volume_named(volume)?;
        s.volumes[v]
            .fs
            .as_ref()
            .map(|(f, _)| (f.clone(), s.volumes[v].fs_size))
    }

    /// The disk a volume is on, if the volume is there.
    pub fn volume_disk(&self, volume: &str) -> Option<u32> {
        let s = self.lock();
        s.volume_named(volume).map(|v| s.volumes[v].disk)
    }

    /// The serial number of the filesystem on a volume (a new one with every format), if any.
    pub fn filesystem_serial(&self, volume: &str) -> Option<u32> {
        let s = self.lock();
        let v = s.volume_named(volume)?;
        s.volumes[v].fs.as_ref().map(|(_, serial)| *serial)
    }

    /// The partitions of a disk as `(number, start, length, type)`.
    pub fn partitions(&self, disk: u32) -> Vec<(u32, u64, u64, Uuid)> {
        self.lock().disks.get(&disk).map_or_else(Vec::new, |d| {
            d.parts
                .iter()
                .map(|p| (p.number, p.start, p.length, p.gpt_type))
                .collect()
        })
    }

    /// How many times each seam method was called.
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.lock().calls.clone()
    }

    /// The simulated time.
    pub fn clock(&self) -> Duration {
        self.lock().clock
    }
}

fn part(number: u32, start: u64, length: u64, gpt_type: Uuid, id: Uuid, attributes: u64) -> Part {
    Part {
        number,
        start,
        length,
        gpt_type,
        id,
        attributes,
    }
}

#[cfg(test)]
mod console_tests;
#[cfg(test)]
mod content_tests;
#[cfg(test)]
mod filesystem_tests;
#[cfg(test)]
mod in_use_tests;
#[cfg(test)]
mod iscsi_tests;
#[cfg(test)]
mod ledger_tests;
#[cfg(test)]
mod path_tests;
#[cfg(test)]
mod race_tests;
#[cfg(test)]
mod read_file_tests;
#[cfg(test)]
mod removal_tests;
#[cfg(test)]
mod service_tests;
#[cfg(test)]
mod smb_tests;
#[cfg(test)]
mod stale_tests;
#[cfg(test)]
mod storage_tests;
#[cfg(test)]
mod strict_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vhd_tests;
#[cfg(test)]
mod wmi_tests;

impl Disk {
    /// A new, empty (RAW) disk of `size` bytes at SCSI LUN `lun`, online and writable, with
    /// its page 83 identifier and serial number.
    fn blank(size: u64, lun: u8, page83: &str, serial: &str) -> Disk {
        Disk {
            size,
            pending_size: None,
            style: STYLE_RAW,
            disk_id: Uuid::nil(),
            usable_start: 0,
            usable_length: 0,
            parts: Vec::new(),
            offline: false,
            read_only: false,
            persisted: (false, false),
            volumes_leave: Duration::ZERO,
            sector: SECTOR,
            keep_usable: false,
            removing: None,
            msr_due: Duration::ZERO,
            data: BTreeMap::new(),
            scsi: Some((0, 0, 0, lun)),
            page83: DeviceId::Ascii(page83.into()),
            serial: serial.into(),
        }
    }
}

impl State {
    /// [`SimWindows::add_disk`] with the state already held.
    pub(super) fn new_disk(&mut self, size: u64, lun: u8) -> u32 {
        // A LUN parked off the machine (its target not logged in to) keeps its number: a new
        // disk never takes it, or the LUN's arrival would replace that disk.
        let n = self
            .disks
            .keys()
            .chain(self.iscsi.parked_numbers())
            .max()
            .map_or(0, |n| n + 1);
        self.disks.insert(
            n,
            Disk::blank(size, lun, &format!("sim-disk-{n}"), &format!("SIM{n:04}")),
        );
        if self.san_offline_all
            && let Some(d) = self.disks.get_mut(&n)
        {
            // "offlineAll. Specifies that all new disks are left offline by default"; "Disks
            // that are left offline are read-only by default".
            (d.offline, d.read_only) = (true, true);
            d.persisted = (true, true);
        }
        n
    }
}
