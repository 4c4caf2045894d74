//! Who else uses the machine's disks and volumes: other processes' handles with their share
//! modes, volume locks (`FSCTL_LOCK_VOLUME`), what the Storage Management provider says of each
//! disk (boot, system, clustered, in a storage pool) and the crash dump settings. Each follows
//! the documentation cited in `LEDGER.md` (rows 55 to 60).

use super::*;

/// `FILE_SHARE_READ`.
pub const FILE_SHARE_READ: u32 = 1;
/// `FILE_SHARE_WRITE`.
pub const FILE_SHARE_WRITE: u32 = 2;
/// `MSFT_PhysicalDisk.CannotPoolReason` "In a Pool".
pub const IN_A_POOL: u16 = 2;

/// A handle another process holds on a disk or volume device, or on a file of a volume
/// (`target` is then the volume).
#[derive(Debug, Clone, Copy)]
pub(super) struct OtherOpen {
    target: Target,
    access: Access,
    share: u32,
}

/// What the Storage Management provider reports of a disk besides its number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskRoles {
    /// `MSFT_Disk.IsBoot`.
    pub boot: bool,
    /// `MSFT_Disk.IsSystem`.
    pub system: bool,
    /// `MSFT_Disk.IsClustered`.
    pub clustered: bool,
    /// A Storage Spaces pool member: its `MSFT_PhysicalDisk.CannotPoolReason` holds "In a Pool".
    pub pooled: bool,
}

/// Why an open of `target` with `access` fails for the handles other processes hold, if it
/// does. The seam opens devices sharing read and write, so only their share modes can refuse
/// it: an open for reading needs every other data-access handle to share reading, one for
/// writing to share writing too. An open with access 0 is never refused (the share modes are
/// checked against read, write and delete access only).
pub(super) fn sharing_violation(s: &State, target: Target, access: Access) -> Option<OsError> {
    let needs = match access {
        Access::Query => return None,
        Access::Read => FILE_SHARE_READ,
        Access::ReadWrite => FILE_SHARE_READ | FILE_SHARE_WRITE,
    };
    s.others
        .values()
        .any(|o| o.target == target && o.access != Access::Query && o.share & needs != needs)
        .then(|| OsError::new(code::SHARING_VIOLATION))
}

/// Whether volume `v` holds the system directory or a page file.
fn holds_system_files(s: &State, v: usize) -> bool {
    let on_v = |path: &str| {
        let k = mp_key(path);
        s.mount_points
            .iter()
            .filter(|(m, _)| k.starts_with(m.as_str()))
            .max_by_key(|(m, _)| m.len())
            .is_some_and(|(_, (_, at))| *at == v)
    };
    on_v(r"C:\Windows\system32") || s.page_files.iter().any(|f| on_v(f))
}

/// Whether a file or directory handle is open on volume `v` (below one of its mount points).
fn files_open_on(s: &State, v: usize) -> bool {
    s.mount_points
        .iter()
        .filter(|(_, (_, at))| *at == v)
        .any(|(m, _)| {
            s.entries
                .values()
                .any(|e| mp_key(&e.key).starts_with(m.as_str()))
        })
}

/// `FSCTL_LOCK_VOLUME` through handle `h` on volume `v`: "If the specified volume is a system
/// volume or contains a page file, the operation fails. If there are any open files on the
/// volume, this operation will fail." Every data-access handle on the volume but `h` counts,
/// the daemon's own and other processes'; a volume locked already refuses.
pub(super) fn lock_volume(s: &mut State, h: u64, v: usize) -> Win32Result<Vec<u8>> {
    let in_use = s.volumes[v].locked
        || s.volume_locks.get(&v).is_some_and(|&holder| holder != h)
        || holds_system_files(s, v)
        || files_open_on(s, v)
        || s.others
            .values()
            .any(|o| o.target == Target::Volume(v) && o.access != Access::Query)
        || s.handles.iter().any(|(&other, o)| {
            other != h && o.target == Target::Volume(v) && o.access != Access::Query
        });
    if in_use {
        return Err(OsError::new(code::ACCESS_DENIED));
    }
    s.volume_locks.insert(v, h);
    Ok(Vec::new())
}

/// Whether something other than the daemon uses disk `disk`: another process's data-access
/// handle on it or on one of its volumes, a volume locked by another process, or a file open on
/// one of its volumes. What stops a Plug and Play removal of the disk (an iSCSI logout).
pub(super) fn in_use_elsewhere(s: &State, disk: u32) -> bool {
    let opened = |t: Target| {
        s.others
            .values()
            .any(|o| o.target == t && o.access != Access::Query)
    };
    opened(Target::Disk(disk))
        || s.volumes.iter().enumerate().any(|(v, vol)| {
            vol.disk == disk && (vol.locked || opened(Target::Volume(v)) || files_open_on(s, v))
        })
}

/// `FSCTL_UNLOCK_VOLUME` through handle `h` on volume `v`: releases the lock `h` holds.
pub(super) fn unlock_volume(s: &mut State, h: u64, v: usize) -> Win32Result<Vec<u8>> {
    match s.volume_locks.get(&v) {
        Some(&holder) if holder == h => {
            s.volume_locks.remove(&v);
            Ok(Vec::new())
        }
        _ => Err(OsError::new(code::NOT_LOCKED)),
    }
}

/// Whether volume `v` is locked, by another process or through one of the daemon's handles:
/// "A locked volume can be accessed only through handles to the file object (*hDevice) that
/// locks the volume", so a new data-access open, and the format the Storage Management
/// provider runs in its own process, are refused.
pub(super) fn locked(s: &State, v: usize) -> bool {
    s.volumes[v].locked || s.volume_locks.contains_key(&v)
}

/// `MSFT_Disk` rows: every disk present and not being removed.
pub(super) fn storage_disks(s: &State) -> Vec<StorageDisk> {
    s.disks
        .iter()
        .filter(|(_, d)| d.removing.is_none())
        .map(|(&number, _)| {
            let r = s.disk_roles.get(&number).copied().unwrap_or_default();
            StorageDisk {
                number,
                is_boot: r.boot,
                is_system: r.system,
                is_clustered: r.clustered,
            }
        })
        .collect()
}

/// `MSFT_PhysicalDisk` rows: the Windows storage provider's `DeviceId` of a physical disk is
/// its disk number.
pub(super) fn physical_disks(s: &State) -> Vec<(String, Vec<u16>)> {
    s.disks
        .keys()
        .map(|&n| {
            let pooled = s.disk_roles.get(&n).is_some_and(|r| r.pooled);
            (n.to_string(), if pooled { vec![IN_A_POOL] } else { vec![] })
        })
        .collect()
}

/// Another process's action on the machine, run once.
type Action = Box<dyn FnOnce(&mut State) + Send>;

/// What tests make happen just before a given seam call of the daemon's: another process acting
/// between two of its calls.
#[derive(Default)]
pub(super) struct BeforeCalls(Vec<(&'static str, Action)>);

impl std::fmt::Debug for BeforeCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(c, _)| c))
            .finish()
    }
}

impl State {
    /// Runs what a test set to happen before `call`.
    pub(super) fn before_call(&mut self, call: &'static str) {
        if let Some(i) = self.before_calls.0.iter().position(|(c, _)| *c == call) {
            let (_, act) = self.before_calls.0.remove(i);
            act(self);
        }
    }
}

impl SimWindows {
    /// Another process takes `FSCTL_LOCK_VOLUME` on `volume` just before the daemon's next
    /// seam call named `call` (e.g. `"format_ntfs"`).
    pub fn lock_volume_before(&self, call: &'static str, volume: &str) {
        let volume = volume.to_string();
        self.lock().before_calls.0.push((
            call,
            Box::new(move |s: &mut State| {
                if let Some(v) = s.volume_named(&volume) {
                    s.volumes[v].locked = true;
                }
            }),
        ));
    }

    /// Another process opens `path` (a disk or volume device, or a file of a volume: pass the
    /// volume's device) with `access` and share mode `share` (`FILE_SHARE_READ`,
    /// `FILE_SHARE_WRITE`); returns what [`Self::close_in_other_process`] takes.
    pub fn open_in_other_process(&self, path: &str, access: Access, share: u32) -> u64 {
        let mut s = self.lock();
        let target = devices::resolve_device(&s, path).expect("a device of the machine");
        s.next_handle += 4;
        let h = s.next_handle;
        s.others.insert(
            h,
            OtherOpen {
                target,
                access,
                share,
            },
        );
        h
    }

    /// The other process closes its handle.
    pub fn close_in_other_process(&self, h: u64) {
        self.lock().others.remove(&h);
    }

    /// Whether another process's handle `h` still works: a forced format dismounted its volume
    /// when it did not ([`dismount_others`]).
    pub fn other_handle_works(&self, h: u64) -> bool {
        self.lock().others.contains_key(&h)
    }
}

/// A forced `MSFT_Volume.Format` dismounts the volume whoever uses it: FSCTL_DISMOUNT_VOLUME
/// "will attempt to dismount a volume regardless of whether or not any other processes are
/// using the volume, which can have unpredictable results for those processes", and "A
/// dismounted volume has the following properties: There are no open files" (ledger row 89;
/// that Format's Force takes this path is inferred). Every other process's data-access handle
/// on volume `v` stops working; a query handle (access 0) is left.
pub(super) fn dismount_others(s: &mut State, v: usize) {
    s.others
        .retain(|_, o| !(o.target == Target::Volume(v) && o.access != Access::Query));
}

impl SimWindows {
    /// What the Storage Management provider reports of `disk` from now on.
    pub fn set_disk_roles(&self, disk: u32, roles: DiskRoles) {
        self.lock().disk_roles.insert(disk, roles);
    }

    /// Sets (or, with `None`, removes) the crash dump setting `name` of
    /// `HKLM\SYSTEM\CurrentControlSet\Control\CrashControl` (`DumpFile`, `DedicatedDumpFile`),
    /// expanded.
    pub fn set_crash_control(&self, name: &str, value: Option<&str>) {
        let mut s = self.lock();
        match value {
            Some(v) => s.crash_control.insert(name.to_string(), v.to_string()),
            None => s.crash_control.remove(name),
        };
    }
}
