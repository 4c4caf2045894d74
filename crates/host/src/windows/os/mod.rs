//! The Win32 seam: every OS primitive the Windows hosts use, as one narrow trait
//! with plain Rust types.
//!
//! The hosts' logic (planning, waiting for Windows to catch up, idempotency, refusals) is written
//! against [`Win32`] and compiles on every platform. Two implementations exist: the real one
//! (`super::win32`, Windows only), which makes one documented call per method and nothing else,
//! and the simulated Windows (`super::sim`), which behaves as Microsoft documents so the logic is
//! tested on Linux. Shaped after youki's `Syscall` trait (see the design's anchors).

pub mod files;
pub mod pool;
pub use crate::probe;

pub use files::FileApi;

use csi_proxy_core::{Error, Kind};
use csi_proxy_formats::windows_buffers::wmi_codes::{describe_hresult, hresult_kind};
use std::fmt;
use std::time::Duration;
use uuid::Uuid;

/// Win32 error codes the logic tells apart (winerror.h).
/// `GetDriveTypeW`'s answers (the ones the host tells apart).
pub mod drive {
    /// DRIVE_NO_ROOT_DIR: "The root path is invalid".
    pub const NO_ROOT_DIR: u32 = 1;
    /// DRIVE_REMOVABLE: "The drive has removable media".
    pub const REMOVABLE: u32 = 2;
    /// DRIVE_FIXED: "The drive has fixed media".
    pub const FIXED: u32 = 3;
    /// DRIVE_CDROM: "The drive is a CD-ROM drive".
    pub const CDROM: u32 = 5;
}

pub mod code {
    /// ERROR_INVALID_FUNCTION: the device does not support the request.
    pub const INVALID_FUNCTION: u32 = 1;
    /// ERROR_FILE_NOT_FOUND.
    pub const FILE_NOT_FOUND: u32 = 2;
    /// ERROR_PATH_NOT_FOUND.
    pub const PATH_NOT_FOUND: u32 = 3;
    /// ERROR_ACCESS_DENIED.
    pub const ACCESS_DENIED: u32 = 5;
    /// ERROR_INVALID_HANDLE.
    pub const INVALID_HANDLE: u32 = 6;
    /// ERROR_NO_MORE_FILES: the end of an enumeration.
    pub const NO_MORE_FILES: u32 = 18;
    /// ERROR_WRITE_PROTECT.
    pub const WRITE_PROTECT: u32 = 19;
    /// ERROR_NOT_READY: the device is not ready (a disk going offline, a volume arriving).
    pub const NOT_READY: u32 = 21;
    /// ERROR_NO_MEDIA_IN_DRIVE: "No media in drive."
    pub const NO_MEDIA_IN_DRIVE: u32 = 1112;
    /// ERROR_SHARING_VIOLATION.
    pub const SHARING_VIOLATION: u32 = 32;
    /// ERROR_NOT_LOCKED: "The segment is already unlocked."
    pub const NOT_LOCKED: u32 = 158;
    /// ERROR_FILE_EXISTS.
    pub const FILE_EXISTS: u32 = 80;
    /// ERROR_INVALID_PARAMETER.
    pub const INVALID_PARAMETER: u32 = 87;
    /// ERROR_INSUFFICIENT_BUFFER: the output buffer is too small for the answer.
    pub const INSUFFICIENT_BUFFER: u32 = 122;
    /// ERROR_DIR_NOT_EMPTY.
    pub const DIR_NOT_EMPTY: u32 = 145;
    /// ERROR_BUSY.
    pub const BUSY: u32 = 170;
    /// ERROR_ALREADY_EXISTS.
    pub const ALREADY_EXISTS: u32 = 183;
    /// ERROR_MORE_DATA: more data is available than the buffer holds.
    pub const MORE_DATA: u32 = 234;
    /// ERROR_UNRECOGNIZED_VOLUME: no filesystem Windows knows is on the volume (RAW).
    pub const UNRECOGNIZED_VOLUME: u32 = 1005;
    /// ERROR_DEVICE_NOT_CONNECTED.
    pub const DEVICE_NOT_CONNECTED: u32 = 1167;
    /// ERROR_DEV_NOT_EXIST: "The specified network resource or device is no longer available"
    /// (STATUS_DEVICE_DOES_NOT_EXIST, what a storage class driver answers once its device is
    /// removed).
    pub const DEV_NOT_EXIST: u32 = 55;
    /// ERROR_NO_SUCH_DEVICE: "A device which does not exist was specified."
    pub const NO_SUCH_DEVICE: u32 = 433;
    /// ERROR_DEVICE_REMOVED: "The device has been removed."
    pub const DEVICE_REMOVED: u32 = 1617;
    /// WBEM_E_NOT_FOUND (an HRESULT): a WMI query or object path matched nothing.
    pub const WBEM_E_NOT_FOUND: u32 = 0x8004_1002;
    /// ERROR_NOT_A_REPARSE_POINT.
    pub const NOT_A_REPARSE_POINT: u32 = 4390;
    /// ERROR_DEPENDENT_SERVICES_RUNNING: other running services depend on the one to stop.
    pub const DEPENDENT_SERVICES_RUNNING: u32 = 1051;
    /// ERROR_SERVICE_ALREADY_RUNNING.
    pub const SERVICE_ALREADY_RUNNING: u32 = 1056;
    /// ERROR_SERVICE_DISABLED.
    pub const SERVICE_DISABLED: u32 = 1058;
    /// ERROR_SERVICE_DOES_NOT_EXIST.
    pub const SERVICE_DOES_NOT_EXIST: u32 = 1060;
    /// ERROR_SERVICE_CANNOT_ACCEPT_CTRL: the service is starting or stopping.
    pub const SERVICE_CANNOT_ACCEPT_CTRL: u32 = 1061;
    /// ERROR_SERVICE_NOT_ACTIVE.
    pub const SERVICE_NOT_ACTIVE: u32 = 1062;
    /// ERROR_SERVICE_MARKED_FOR_DELETE: "The specified service has already been marked for
    /// deletion" (DeleteService; CreateServiceW and StartServiceW answer it too).
    pub const SERVICE_MARKED_FOR_DELETE: u32 = 1072;
    /// ERROR_SERVICE_EXISTS: "The specified service already exists in this database"
    /// (CreateServiceW).
    pub const SERVICE_EXISTS: u32 = 1073;
    /// RPC_X_NULL_REF_POINTER: "A null reference pointer was passed to the stub."
    pub const RPC_X_NULL_REF_POINTER: u32 = 1780;
}

/// A failed OS call: a Win32 error code, or an HRESULT (high bit set) from a COM/WMI call, and
/// what the OS said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsError {
    /// The Win32 error code or the HRESULT, as the OS returned it.
    pub code: u32,
    /// With [`code::MORE_DATA`] from a call that reports it: the length the answer needs.
    pub needed: usize,
    /// The OS's text.
    pub message: String,
    /// With WBEM_E_FAILED from a WMI method: the Win32 code the provider put only in its
    /// extended error object (`MSFT_WmiError.error_Code`), if it gave one.
    pub extended: Option<u32>,
}

impl OsError {
    /// Whether the error says nothing is at the path (ERROR_FILE_NOT_FOUND for the last
    /// component, ERROR_PATH_NOT_FOUND for one before it); any other error says nothing about
    /// whether something is there.
    pub fn names_nothing(&self) -> bool {
        matches!(self.code, code::FILE_NOT_FOUND | code::PATH_NOT_FOUND)
    }

    /// Whether the error says the device has no media in it: ERROR_NOT_READY ("The device is
    /// not ready") or ERROR_NO_MEDIA_IN_DRIVE ("No media in drive"), which of the two depending
    /// on the driver.
    pub fn no_media(&self) -> bool {
        matches!(self.code, code::NOT_READY | code::NO_MEDIA_IN_DRIVE)
    }

    /// An error with this code and the generic text for it.
    pub fn new(code: u32) -> Self {
        Self {
            code,
            needed: 0,
            message: describe(code),
            extended: None,
        }
    }

    /// A failed WMI method: `code` (WBEM_E_FAILED), with the Win32 code its extended error
    /// object carries.
    pub fn with_extended(code: u32, extended: u32, message: impl Into<String>) -> Self {
        Self {
            extended: Some(extended),
            ..Self::with_message(code, message)
        }
    }

    /// An error with this code and text.
    pub fn with_message(code: u32, message: impl Into<String>) -> Self {
        Self {
            code,
            needed: 0,
            message: message.into(),
            extended: None,
        }
    }

    /// Whether this is an HRESULT (a COM or WMI failure) rather than a Win32 error code.
    pub fn is_hresult(&self) -> bool {
        self.code & 0x8000_0000 != 0
    }

    /// The kind a client can act on, as std's Windows error kinds decide it for Win32 codes and
    /// [`hresult_kind`] for HRESULTs.
    pub fn kind(&self) -> Kind {
        if self.is_hresult() {
            return hresult_kind(self.code as i32);
        }
        match self.code {
            code::FILE_NOT_FOUND
            | code::PATH_NOT_FOUND
            | code::DEV_NOT_EXIST
            | code::DEVICE_NOT_CONNECTED
            | code::NO_SUCH_DEVICE
            | code::DEVICE_REMOVED => Kind::NotFound,
            code::ACCESS_DENIED | code::WRITE_PROTECT => Kind::PermissionDenied,
            code::FILE_EXISTS | code::ALREADY_EXISTS => Kind::AlreadyExists,
            code::INVALID_PARAMETER => Kind::InvalidArgument,
            code::DIR_NOT_EMPTY | code::BUSY | code::SHARING_VIOLATION => Kind::FailedPrecondition,
            code::NOT_READY => Kind::Unavailable,
            code::INVALID_FUNCTION => Kind::Unimplemented,
            _ => Kind::Internal,
        }
    }
}

impl fmt::Display for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_hresult() {
            // WMI texts (describe_hresult) already carry the HRESULT.
            f.write_str(&self.message)
        } else {
            write!(f, "{} (os error {})", self.message, self.code)
        }
    }
}

/// The generic text of a code, for errors the simulator and the logic make up.
fn describe(code: u32) -> String {
    let text = match code {
        code::INVALID_FUNCTION => "Incorrect function.",
        code::FILE_NOT_FOUND => "The system cannot find the file specified.",
        code::PATH_NOT_FOUND => "The system cannot find the path specified.",
        code::ACCESS_DENIED => "Access is denied.",
        code::NO_MORE_FILES => "There are no more files.",
        code::NOT_READY => "The device is not ready.",
        code::WRITE_PROTECT => "The media is write protected.",
        code::INVALID_PARAMETER => "The parameter is incorrect.",
        code::SHARING_VIOLATION => {
            "The process cannot access the file because it is being used by another process."
        }
        code::INSUFFICIENT_BUFFER => "The data area passed to a system call is too small.",
        code::DIR_NOT_EMPTY => "The directory is not empty.",
        code::MORE_DATA => "More data is available.",
        code::UNRECOGNIZED_VOLUME => "The volume does not contain a recognized file system.",
        code::NOT_A_REPARSE_POINT => "The file or directory is not a reparse point.",
        code::NO_SUCH_DEVICE => "A device which does not exist was specified.",
        code::DEVICE_REMOVED => "The device has been removed.",
        code::SERVICE_ALREADY_RUNNING => "An instance of the service is already running.",
        code::SERVICE_DOES_NOT_EXIST => {
            "The specified service does not exist as an installed service."
        }
        code::SERVICE_MARKED_FOR_DELETE => "The specified service has been marked for deletion.",
        code::SERVICE_EXISTS => "The specified service already exists.",
        code::RPC_X_NULL_REF_POINTER => "A null reference pointer was passed to the stub.",
        c if c & 0x8000_0000 != 0 => return describe_hresult(c as i32),
        _ => "The operation failed.",
    };
    text.to_string()
}

/// The access a device is opened with (`CreateFileW`'s `dwDesiredAccess`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// 0: "the application can query certain metadata such as file, directory, or device
    /// attributes without accessing that file or device". Opening a volume this way mounts no
    /// filesystem, so it works on a drive without media and on a volume someone else locked;
    /// I/O controls defined with `FILE_ANY_ACCESS` (volume extents, layout, attributes) work
    /// through it.
    Query,
    /// `GENERIC_READ`.
    Read,
    /// `GENERIC_READ | GENERIC_WRITE`.
    ReadWrite,
}

/// An iSCSI session as the initiator lists it (`ISCSI_SESSION_INFOW`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IscsiSession {
    /// `ISCSI_UNIQUE_SESSION_ID` (`AdapterUnique`, `AdapterSpecific`), opaque.
    pub id: (u64, u64),
    /// `TargetNodeName` (the IQN) and `TargetName`.
    pub names: [String; 2],
    /// `(TargetAddress, TargetSocket)` of each connection.
    pub connections: Vec<(String, u16)>,
}

/// A persistent login as the initiator lists it (`PERSISTENT_ISCSI_LOGIN_INFOW`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentLogin {
    /// `TargetName`, the IQN.
    pub iqn: String,
    /// `InitiatorInstance`: the initiator (HBA) that keeps the login.
    pub initiator: String,
    /// `InitiatorPortNumber`.
    pub initiator_port: u32,
    /// `TargetPortal.Address` and `TargetPortal.Socket`.
    pub portal: (String, u16),
}

/// A disk as the Storage Management provider reports it (`MSFT_Disk`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageDisk {
    /// `Number`: the disk number.
    pub number: u32,
    /// `IsBoot`: the disk holds the boot volume (the running Windows).
    pub is_boot: bool,
    /// `IsSystem`: the disk holds the system partition (what the firmware boots from).
    pub is_system: bool,
    /// `IsClustered`: the disk belongs to a failover cluster.
    pub is_clustered: bool,
}

/// What a WMI method answered in its `ReturnValue` out-parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReturnValue {
    /// The method gave no out-parameters at all: success.
    Absent,
    /// An integer: 0 is success, anything else the method's documented error code.
    Code(u32),
    /// A value of another type (shown as text): never taken for success.
    Unexpected(String),
}

impl ReturnValue {
    /// The code, 0 when absent; an INTERNAL error naming `method` for a value of another type.
    pub fn code(self, op: &str, object: impl fmt::Display, method: &str) -> Result<u32, Error> {
        match self {
            ReturnValue::Absent => Ok(0),
            ReturnValue::Code(n) => Ok(n),
            ReturnValue::Unexpected(v) => Err(Error::new(
                Kind::Internal,
                op,
                object,
                format!(
                    "{method} answered a ReturnValue that is not an integer ({v}); not taken for success"
                ),
            )),
        }
    }
}

/// What a seam call returns.
pub type Win32Result<T> = std::result::Result<T, OsError>;

/// An open device or file, closed when dropped.
pub struct Handle<'a> {
    os: &'a dyn Win32,
    raw: u64,
}

impl Handle<'_> {
    /// The value the seam gave for the open handle.
    pub fn raw(&self) -> u64 {
        self.raw
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        self.os.close(self.raw);
    }
}

impl fmt::Debug for Handle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Handle({})", self.raw)
    }
}

/// The OS primitives of the Windows hosts. Each method is one documented call (or one
/// documented enumeration idiom) of the real OS; see `super::win32` for which. The file and
/// directory primitives are in [`FileApi`].
pub trait Win32: FileApi + Send + Sync {
    /// `CreateFileW(path, access, FILE_SHARE_READ | FILE_SHARE_WRITE, OPEN_EXISTING)`: a
    /// device (`\\.\PhysicalDriveN`, `\\.\Volume{GUID}`, a disk interface path). Returns the
    /// raw handle value; [`open`] and [`open_query`] wrap it.
    fn open_raw(&self, path: &str, access: Access) -> Win32Result<u64>;
    /// `CloseHandle`.
    fn close(&self, handle: u64);
    /// One synchronous `DeviceIoControl` with an output buffer of `out_len` bytes. A short
    /// buffer fails with ERROR_INSUFFICIENT_BUFFER or ERROR_MORE_DATA, as the driver decides;
    /// [`ioctl`] grows it.
    fn device_io_control(
        &self,
        handle: u64,
        code: u32,
        input: &[u8],
        out_len: usize,
    ) -> Win32Result<Vec<u8>>;
    /// `ReadFile` of `len` bytes at byte `offset` (an `OVERLAPPED` offset on a synchronous
    /// handle), into a buffer aligned for noncached disk and volume I/O. On a disk or volume
    /// handle `offset` and `len` must be whole sectors (ERROR_INVALID_PARAMETER otherwise).
    fn read_at(&self, handle: u64, offset: u64, len: usize) -> Win32Result<Vec<u8>>;
    /// `FlushFileBuffers`: on a volume handle, every open file of the volume.
    fn flush(&self, handle: u64) -> Win32Result<()>;
    /// `FindFirstVolumeW` / `FindNextVolumeW` / `FindVolumeClose`: every volume's GUID path,
    /// `\\?\Volume{GUID}\`.
    fn volumes(&self) -> Win32Result<Vec<String>>;
    /// `GetVolumeNameForVolumeMountPointW`: the GUID path of the volume mounted at
    /// `mount_point` (a drive root or mounted folder, with its trailing backslash).
    fn volume_name_for_mount_point(&self, mount_point: &str) -> Win32Result<String>;
    /// `GetVolumePathNamesForVolumeNameW` with a buffer of `capacity` UTF-16 units: the drive
    /// letters and mounted folders of the volume. Too small a buffer fails with
    /// ERROR_MORE_DATA and [`OsError::needed`] set.
    fn volume_path_names(&self, volume: &str, capacity: usize) -> Win32Result<Vec<String>>;
    /// `GetVolumePathNameW`: the mount point (drive root or mounted folder) of the volume that
    /// holds `path`.
    fn volume_path_name(&self, path: &str) -> Win32Result<String>;
    /// `GetVolumeInformationW` on a root: the filesystem name and the volume serial number.
    fn volume_information(&self, root: &str) -> Win32Result<(String, u32)>;
    /// `GetDriveTypeW` on a root (a volume GUID path with its trailing backslash): one of the
    /// `DRIVE_*` values. It reads the device's kind, not its media, so an empty drive answers.
    fn drive_type(&self, root: &str) -> Win32Result<u32>;
    /// `GetDiskFreeSpaceExW` on a root: total and free bytes.
    fn disk_free_space(&self, root: &str) -> Win32Result<(u64, u64)>;
    /// `SetVolumeMountPointW`: mounts `volume` at the empty directory `mount_point`.
    fn set_volume_mount_point(&self, mount_point: &str, volume: &str) -> Win32Result<()>;
    /// `DeleteVolumeMountPointW`: removes the mount point; the directory stays.
    fn delete_volume_mount_point(&self, mount_point: &str) -> Win32Result<()>;
    /// `GetSystemDirectoryW`.
    fn system_directory(&self) -> Win32Result<String>;
    /// `CoCreateGuid`.
    fn new_guid(&self) -> Win32Result<Uuid>;
    /// `CM_Get_Device_Interface_ListW(GUID_DEVINTERFACE_DISK, present devices)`: the device
    /// interface path of every disk present.
    fn disk_interfaces(&self) -> Win32Result<Vec<String>>;
    /// `CM_Locate_DevNodeW(root)` then `CM_Reenumerate_DevNode(SYNCHRONOUS)`: the Plug and Play
    /// manager enumerates the device tree again.
    fn reenumerate_devices(&self) -> Win32Result<()>;
    /// WMI `SELECT Name FROM Win32_PageFileUsage`: the page files in use.
    fn page_files(&self) -> Win32Result<Vec<String>>;
    /// WMI `SELECT Number, IsBoot, IsSystem, IsClustered FROM MSFT_Disk`
    /// (`ROOT\Microsoft\Windows\Storage`): every disk the provider knows.
    fn storage_disks(&self) -> Win32Result<Vec<StorageDisk>>;
    /// WMI `SELECT DeviceId, CannotPoolReason FROM MSFT_PhysicalDisk`
    /// (`ROOT\Microsoft\Windows\Storage`): each physical disk's `DeviceId` and why it cannot
    /// join a pool.
    fn physical_disks(&self) -> Win32Result<Vec<(String, Vec<u16>)>>;
    /// `RegGetValueW(HKEY_LOCAL_MACHINE, SYSTEM\CurrentControlSet\Control\CrashControl, name,
    /// RRF_RT_REG_SZ | RRF_RT_REG_EXPAND_SZ)`: the crash dump setting `name` with environment
    /// strings expanded; `None` when it is not set (ERROR_FILE_NOT_FOUND).
    fn crash_control(&self, name: &str) -> Win32Result<Option<String>>;
    /// WMI `MSFT_Volume.Format` (NTFS, no label, quick, Force) of the volume with this
    /// `UniqueId`: the method's `ReturnValue`.
    fn format_ntfs(&self, volume: &str) -> Win32Result<ReturnValue>;
    /// WMI `MSFT_StorageSetting.UpdateHostStorageCache()` (static): the Storage Management
    /// provider reads the host's storage objects again, so a volume made since its last look
    /// is found by `MSFT_Volume` queries: the method's `ReturnValue`.
    fn update_host_storage_cache(&self) -> Win32Result<ReturnValue>;
    /// WMI `SELECT * FROM MSFT_SmbGlobalMapping` (`ROOT\Microsoft\Windows\SMB`): every
    /// node-wide mapping's `RemotePath` and `Status`.
    fn smb_global_mappings(&self) -> Win32Result<Vec<(String, u32)>>;
    /// WMI `MSFT_SmbGlobalMapping.Create(RemotePath, RequirePrivacy[, Credential])`: the
    /// method's `ReturnValue`.
    fn smb_create_global_mapping(
        &self,
        remote: &str,
        require_privacy: bool,
        credential: Option<&str>,
    ) -> Win32Result<ReturnValue>;
    /// WMI `MSFT_SmbGlobalMapping.Remove(Force = true)` on the mapping listed with `RemotePath`
    /// `remote`: the method's `ReturnValue`; WBEM_E_NOT_FOUND when there is none.
    fn smb_remove_global_mapping(&self, remote: &str) -> Win32Result<ReturnValue>;
    /// `GetFileAttributesExW(dir)`: whether the directory `dir` (a share root, with its
    /// trailing backslash) can be reached, or the error saying why not (e.g. ERROR_LOGON_FAILURE
    /// when the server refuses the mapping's credential, ERROR_BAD_NETPATH when it does not
    /// answer). On a dead server this blocks for long; callers bound the wait
    /// ([`probe::Probes`]).
    fn dir_opens(&self, dir: &str) -> Win32Result<()>;
    /// Every symbolic link at kubelet's staging and publish places below `roots`
    /// ([`crate::smb_scan`]: bounded, links read and not followed), as `(link, target as
    /// stored)`, and why the scan may have missed some, if it may have.
    fn links_below(&self, roots: &[String]) -> (Vec<(String, String)>, Option<String>);
    /// `OpenServiceW(name, SERVICE_QUERY_STATUS)` and `QueryServiceStatusEx`: the service's
    /// `dwCurrentState`.
    fn service_state(&self, name: &str) -> Win32Result<u32>;
    /// `OpenServiceW(name, SERVICE_QUERY_CONFIG)` and `QueryServiceConfigW`: its display name
    /// and `dwStartType`.
    fn service_config(&self, name: &str) -> Win32Result<(String, u32)>;
    /// `OpenServiceW(name, SERVICE_QUERY_CONFIG)` and
    /// `QueryServiceConfig2W(SERVICE_CONFIG_FAILURE_ACTIONS_FLAG)`: the failure-actions flag as
    /// configured (the SCM acts on a change from the next system start only).
    fn service_failure_flag(&self, name: &str) -> Win32Result<bool>;
    /// `OpenServiceW(name, SERVICE_START)` and `StartServiceW` with no arguments.
    fn service_start(&self, name: &str) -> Win32Result<()>;
    /// `OpenServiceW(name, SERVICE_STOP)` and `ControlService(SERVICE_CONTROL_STOP)`.
    fn service_stop(&self, name: &str) -> Win32Result<()>;
    /// `OpenSCManagerW(SC_MANAGER_CREATE_SERVICE)` and `CreateServiceW(name, display name
    /// `name`, SERVICE_WIN32_OWN_PROCESS, SERVICE_DEMAND_START, SERVICE_ERROR_NORMAL,
    /// command_line, LocalSystem)`, its handle closed at once: a service of its own process,
    /// started only when asked. Taken: ERROR_SERVICE_EXISTS, or ERROR_SERVICE_MARKED_FOR_DELETE.
    fn service_create(&self, name: &str, command_line: &str) -> Win32Result<()>;
    /// `OpenServiceW(name, DELETE)` and `DeleteService`: marks the service for deletion; the SCM
    /// removes it once every handle to it is closed and it is not running.
    fn service_delete(&self, name: &str) -> Win32Result<()>;
    /// `OpenServiceW(name, SERVICE_ENUMERATE_DEPENDENTS)` and
    /// `EnumDependentServicesW(SERVICE_ACTIVE)`: the running services that depend on it,
    /// "in the reverse order of the start order" (the order to stop them in).
    fn service_active_dependents(&self, name: &str) -> Win32Result<Vec<String>>;
    /// `GetSystemFirmwareTable('RSMB', 0)`: the raw SMBIOS table; `None` when the firmware
    /// offers none.
    fn smbios_table(&self) -> Win32Result<Option<Vec<u8>>>;
    /// WMI `SELECT SerialNumber FROM Win32_BIOS` (`ROOT\CIMV2`).
    fn wmi_bios_serial(&self) -> Win32Result<String>;
    /// Whether the iSCSI initiator (`iscsidsc.dll` and every function used) could be loaded;
    /// `Err` says what is missing.
    fn iscsi_available(&self) -> std::result::Result<(), String>;
    /// `AddIScsiSendTargetPortalW(NULL, ISCSI_ALL_INITIATOR_PORTS, no login options, 0,
    /// portal)`: the service registers the portal and runs SendTargets discovery on it.
    fn iscsi_add_portal(&self, address: &str, port: u16) -> Win32Result<()>;
    /// `RemoveIScsiSendTargetPortalW(NULL, ISCSI_ALL_INITIATOR_PORTS, portal)`.
    fn iscsi_remove_portal(&self, address: &str, port: u16) -> Win32Result<()>;
    /// `ReportIScsiSendTargetPortalsExW` with room for `capacity` entries: each registered
    /// portal once per initiator port. Too small: ERROR_INSUFFICIENT_BUFFER, `needed` entries.
    fn iscsi_portals(&self, capacity: usize) -> Win32Result<Vec<(String, u16)>>;
    /// `ReportIScsiTargetsW(ForceUpdate, capacity WCHARs)`: every discovered target; with
    /// `force_update` the service first repeats discovery on every portal. Too small:
    /// ERROR_INSUFFICIENT_BUFFER, `needed` WCHARs.
    fn iscsi_targets(&self, force_update: bool, capacity: usize) -> Win32Result<Vec<String>>;
    /// `GetIScsiTargetInformationW(iqn, NULL, DiscoveryMechanisms, capacity bytes)`: how the
    /// target was discovered (`"SendTargets:<address> <port> ..."`).
    fn iscsi_discovery_mechanisms(&self, iqn: &str, capacity: usize) -> Win32Result<Vec<String>>;
    /// `GetIScsiSessionListW` with `capacity` bytes. Too small: ERROR_INSUFFICIENT_BUFFER,
    /// `needed` bytes.
    fn iscsi_sessions(&self, capacity: usize) -> Win32Result<Vec<IscsiSession>>;
    /// `LoginIScsiTargetW(iqn, not informational, any initiator and port, portal, login options
    /// from `auth` with `LoginFlags` `flags`, not persistent)`. The daemon's logins pass no
    /// flags; only the selftest's second path passes ISCSI_LOGIN_FLAG_MULTIPATH_ENABLED.
    fn iscsi_login(
        &self,
        iqn: &str,
        address: &str,
        port: u16,
        auth: &csi_proxy_formats::windows_buffers::iscsi::LoginAuth,
        flags: u32,
    ) -> Win32Result<()>;
    /// `LogoutIScsiTarget(session)`.
    fn iscsi_logout(&self, session: (u64, u64)) -> Win32Result<()>;
    /// `ReportIScsiPersistentLoginsW` with `capacity` bytes: every persistent login. Too small:
    /// ERROR_INSUFFICIENT_BUFFER, `needed` bytes.
    fn iscsi_persistent_logins(&self, capacity: usize) -> Win32Result<Vec<PersistentLogin>>;
    /// `RemoveIScsiPersistentTargetW(InitiatorInstance, InitiatorPortNumber, TargetName,
    /// TargetPortal)` of one listed login, with its own initiator and port: the initiator is
    /// `[in]`, not optional.
    fn iscsi_remove_persistent_target(&self, login: &PersistentLogin) -> Win32Result<()>;
    /// `RemoveIScsiPersistentTargetW(NULL, ISCSI_ALL_INITIATOR_PORTS, iqn, a portal with no
    /// information)`: a call the host never makes (the initiator is `[in]`, not optional); the
    /// selftest's, with a target name no login has, to show what a node answers a null
    /// initiator (ledger row 26).
    fn iscsi_remove_persistent_target_without_initiator(&self, iqn: &str) -> Win32Result<()>;
    /// `GetDevicesForIScsiSessionW(session)` with room for `capacity` entries: each device's
    /// `STORAGE_DEVICE_NUMBER` as `(DeviceType, DeviceNumber)`. Too small:
    /// ERROR_INSUFFICIENT_BUFFER, `needed` entries.
    fn iscsi_session_devices(
        &self,
        session: (u64, u64),
        capacity: usize,
    ) -> Win32Result<Vec<(u32, u32)>>;
    /// `SetIScsiInitiatorCHAPSharedSecret(secret)`.
    fn iscsi_set_chap_secret(&self, secret: &[u8]) -> Win32Result<()>;
    /// Drops the cached WMI connections, so the next WMI call connects again (after `winmgmt`
    /// restarted, an old connection answers RPC_E_DISCONNECTED for ever).
    fn reset_wmi(&self);
    /// Time since an arbitrary start, for deadlines (the simulator's is virtual).
    fn now(&self) -> Duration;
    /// `Sleep`: waits while Windows catches up (the simulator advances its clock instead).
    fn sleep(&self, d: Duration);
}

/// Declares a Windows host over the seam: the struct holding its [`Win32`] (and any state of
/// its own, given as `{ field: Type }`, made with `Default`), `new()` acting on this machine
/// (Windows only) and `with_os` acting through any seam (the simulated Windows in tests).
macro_rules! seam_host {
    ($(#[$doc:meta])* $name:ident $({ $($field:ident: $ty:ty),* $(,)? })?) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name {
            os: std::sync::Arc<dyn $crate::windows::os::Win32>,
            $($($field: $ty,)*)?
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(stringify!($name))
            }
        }

        #[cfg(windows)]
        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $name {
            /// A host acting on this machine.
            #[cfg(windows)]
            pub fn new() -> Self {
                Self::with_os(std::sync::Arc::new(
                    $crate::windows::win32::SystemWin32::default(),
                ))
            }

            /// A host acting through `os` (the real Windows, or the simulated one in tests).
            pub fn with_os(os: std::sync::Arc<dyn $crate::windows::os::Win32>) -> Self {
                Self {
                    os,
                    $($($field: Default::default(),)*)?
                }
            }
        }
    };
}
pub(crate) use seam_host;

/// Opens a device through the seam with `access`.
pub fn open_with<'a>(os: &'a dyn Win32, path: &str, access: Access) -> Win32Result<Handle<'a>> {
    os.open_raw(path, access).map(|raw| Handle { os, raw })
}

/// Opens a device through the seam for reading, and writing with `write`.
pub fn open<'a>(os: &'a dyn Win32, path: &str, write: bool) -> Win32Result<Handle<'a>> {
    let access = if write {
        Access::ReadWrite
    } else {
        Access::Read
    };
    open_with(os, path, access)
}

/// Opens a device through the seam for queries only ([`Access::Query`]).
pub fn open_query<'a>(os: &'a dyn Win32, path: &str) -> Win32Result<Handle<'a>> {
    open_with(os, path, Access::Query)
}

/// Opens a file or directory through the seam ([`FileApi::open_entry`]).
pub fn open_entry<'a>(
    os: &'a dyn Win32,
    path: &[u16],
    access: u32,
    share: u32,
    follow: bool,
) -> Win32Result<Handle<'a>> {
    os.open_entry(path, access, share, follow)
        .map(|raw| Handle { os, raw })
}

/// Opens the entry `name` of the directory `dir` is open on, as itself
/// ([`FileApi::open_child`]).
pub fn open_child<'a>(
    os: &'a dyn Win32,
    dir: &Handle<'_>,
    name: &[u16],
    access: u32,
    share: u32,
) -> Win32Result<Handle<'a>> {
    os.open_child(dir.raw, name, access, share)
        .map(|raw| Handle { os, raw })
}

/// Sends `code` with `input`, growing the output buffer (from `initial` bytes, up to 1 MiB) while
/// the driver answers ERROR_INSUFFICIENT_BUFFER or ERROR_MORE_DATA, as variable-length outputs
/// (layouts, descriptors, extents) require. With `initial` 0 the control returns nothing (and
/// changes state: CREATE_DISK, SET_DRIVE_LAYOUT_EX, GROW_PARTITION, SET_DISK_ATTRIBUTES,
/// FSCTL_EXTEND_VOLUME): it is sent once with no output buffer, as their pages specify, and
/// never repeated, since a repeat of one that applied would apply it twice.
pub fn ioctl(h: &Handle<'_>, code: u32, input: &[u8], initial: usize) -> Win32Result<Vec<u8>> {
    if initial == 0 {
        return h.os.device_io_control(h.raw, code, input, 0);
    }
    let mut size = initial;
    loop {
        match h.os.device_io_control(h.raw, code, input, size) {
            Err(e)
                if matches!(e.code, code::INSUFFICIENT_BUFFER | code::MORE_DATA)
                    && size < (1 << 20) =>
            {
                size *= 4;
            }
            other => return other,
        }
    }
}

/// Runs `attempt` until it says there is nothing to wait for (its `bool` is false), `limit` has
/// passed on the seam's clock, or the caller's deadline has; answers its last result. For what
/// Windows finishes after a call has returned (a delete-pending name, a new session's LUNs).
pub fn retry_within<T>(
    os: &dyn Win32,
    limit: Duration,
    pause: Duration,
    mut attempt: impl FnMut() -> (T, bool),
) -> T {
    let until = os.now() + limit;
    loop {
        let (result, wait) = attempt();
        let deadline_passed =
            csi_proxy_core::deadline::current().is_some_and(|d| std::time::Instant::now() >= d);
        if !wait || os.now() >= until || deadline_passed {
            return result;
        }
        os.sleep(pause);
    }
}

/// The RPC runtime's own status codes (the `RPC_S_*` and `EPT_S_*` names of winerror.h, System
/// Error Codes 1700-3999), as ranges: the codes a call through a broken RPC binding can answer.
/// The other codes in 1700-1999 (`RPC_X_*` stub errors, printer, password and domain errors)
/// are not the transport's and stay out.
const RPC_RUNTIME: [(u32, u32); 10] = [
    (1700, 1730),
    (1732, 1737),
    (1739, 1771),
    (1791, 1791),
    (1806, 1806),
    (1816, 1826),
    (1833, 1836),
    (1898, 1900),
    (1913, 1915),
    (1922, 1929),
];

/// Whether a WMI failure means the connection may be dead (`winmgmt` restarted, its RPC server
/// gone) and a fresh connection may answer. Microsoft documents the class, not the code:
/// breaking WMI's connections "results in remote procedure call (RPC) errors from active COM
/// connections to WMI—until new connections are established" (IWbemBackupRestore::Restore,
/// Remarks), and which one a call sees depends on when the server went. So every RPC error
/// counts: an HRESULT of FACILITY_RPC (the `RPC_E_*` codes of COM's channel), the RPC
/// runtime's status codes as HRESULT_FROM_WIN32 ([`RPC_RUNTIME`]), CO_E_OBJNOTCONNECTED (a
/// proxy whose object is gone), and WMI's own WBEM_E_TRANSPORT_FAILURE and
/// WBEM_E_SHUTTING_DOWN. Taking a code outside the class for a broken connection costs one
/// reconnect and one repeat; missing one inside it would fail every WMI call until the daemon
/// restarts (ledger row 5). One RPC error stays out: RPC_E_TIMEOUT, a call that outlived its
/// wait (the code [`pool::as_os_error`] gives a call past its deadline too): its server may
/// still be working on it, and calling again would only wait twice.
pub fn wmi_disconnected(e: &OsError) -> bool {
    const FACILITY_RPC: u32 = 0x8001_0000;
    const FACILITY_WIN32: u32 = 0x8007_0000;
    const RPC_E_TIMEOUT: u32 = 0x8001_011F;
    let c = e.code;
    (c & 0xFFFF_0000 == FACILITY_RPC && c != RPC_E_TIMEOUT)
        || (c & 0xFFFF_0000 == FACILITY_WIN32
            && RPC_RUNTIME
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&(c & 0xFFFF))))
        || matches!(
            c,
            0x8004_01FD // CO_E_OBJNOTCONNECTED
                | 0x8004_1015 // WBEM_E_TRANSPORT_FAILURE
                | 0x8004_1033 // WBEM_E_SHUTTING_DOWN
        )
}

/// Makes a WMI call, connecting again and repeating it once when the connection was dropped.
pub fn wmi_retrying<T>(os: &dyn Win32, call: impl Fn() -> Win32Result<T>) -> Win32Result<T> {
    match call() {
        Err(e) if wmi_disconnected(&e) => {
            tracing::warn!("WMI connection lost ({e}); connecting again");
            os.reset_wmi();
            call()
        }
        other => other,
    }
}

/// An [`Error`] for a failed seam call in operation `op` on `object`; `overrides` maps specific
/// codes to kinds first (e.g. ERROR_DIR_NOT_EMPTY is FAILED_PRECONDITION with its own words).
pub fn os_error(
    op: &str,
    object: impl fmt::Display,
    e: &OsError,
    overrides: &[(u32, Kind)],
) -> Error {
    let kind = overrides
        .iter()
        .find(|(c, _)| *c == e.code)
        .map_or_else(|| e.kind(), |(_, k)| *k);
    Error::new(kind, op, object, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_kinds_clients_act_on() {
        assert_eq!(OsError::new(code::FILE_NOT_FOUND).kind(), Kind::NotFound);
        assert_eq!(
            OsError::new(code::ACCESS_DENIED).kind(),
            Kind::PermissionDenied
        );
        assert_eq!(OsError::new(code::NOT_READY).kind(), Kind::Unavailable);
        assert_eq!(OsError::new(4242).kind(), Kind::Internal);
        // WBEM_E_NOT_FOUND is an HRESULT, judged as one.
        let e = OsError::new(0x8004_1002);
        assert!(e.is_hresult());
        assert_eq!(e.kind(), Kind::NotFound);
        assert!(e.to_string().ends_with("(0x80041002)"), "{e}");
        let e = os_error("Op", "thing", &OsError::new(code::DIR_NOT_EMPTY), &[]);
        assert_eq!(e.kind(), Kind::FailedPrecondition);
        assert!(e.message().starts_with("Op thing"), "{}", e.message());
    }
}
