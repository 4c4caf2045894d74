//! iSCSI on Windows through the iSCSI initiator API of `iscsidsc.dll` — no PowerShell, no WMI.
//!
//! The DLL is loaded at run time (`LoadLibraryExW` limited to System32, then `GetProcAddress`,
//! cached for the life of the process) rather than linked, so a binary still starts where the
//! initiator is absent (Wine, stripped-down images): every RPC there answers FAILED_PRECONDITION.
//! Struct layouts come from the `windows` crate (`Win32_Storage_IscsiDisc`); only the function
//! pointers are resolved here, with the signatures `iscsidsc.h` declares.
//!
//! Pure parts (login options, status codes, string lists) live in
//! [`crate::windows_data::iscsi`]. CHAP secrets only travel in the `ISCSI_LOGIN_OPTIONS` of the
//! login call or the buffer of `SetIScsiInitiatorCHAPSharedSecret`, are wiped after the call and
//! never enter an error or a log line.
//!
//! Logins are not persistent (`IsPersistent = FALSE`): the kubelet stages volumes again after a
//! reboot, and a persistent login would keep the CHAP secret in the initiator's store past
//! DisconnectTarget.

use crate::windows::win::{from_wide, wide};
use crate::windows_data::iscsi::{
    self as data, ERROR_INSUFFICIENT_BUFFER, ERROR_SUCCESS, FILE_DEVICE_DISK,
    ISCSI_ALL_INITIATOR_PORTS, LOGIN_OPTIONS_VERSION, isdsc,
};
use csi_proxy_core::iscsi::{Chap, IscsiHost, Secret, TargetPortal};
use csi_proxy_core::{Error, Kind, Result};
use std::ffi::c_void;
use std::sync::OnceLock;
use windows::Win32::Storage::IscsiDisc::{
    ISCSI_AUTH_TYPES, ISCSI_CONNECTION_INFOW, ISCSI_DEVICE_ON_SESSIONW, ISCSI_LOGIN_OPTIONS,
    ISCSI_SESSION_INFOW, ISCSI_TARGET_PORTAL_INFO_EXW, ISCSI_TARGET_PORTALW,
    ISCSI_UNIQUE_SESSION_ID,
};
use windows::Win32::System::LibraryLoader::{
    GetProcAddress, LOAD_LIBRARY_SEARCH_SYSTEM32, LoadLibraryExW,
};
use windows::core::{PCSTR, w};

/// What an RPC answers where the DLL or one of its functions is missing.
const NOT_AVAILABLE: &str = "the iSCSI initiator (iscsidsc.dll) is not available on this host";

/// How often a size-query-then-fetch call is retried when the data grew in between.
const FETCH_ATTEMPTS: usize = 8;

type AddSendTargetPortalW = unsafe extern "system" fn(
    *const u16,
    u32,
    *mut ISCSI_LOGIN_OPTIONS,
    u64,
    *mut ISCSI_TARGET_PORTALW,
) -> u32;
type RemoveSendTargetPortalW =
    unsafe extern "system" fn(*const u16, u32, *mut ISCSI_TARGET_PORTALW) -> u32;
type ReportSendTargetPortalsExW =
    unsafe extern "system" fn(*mut u32, *mut u32, *mut ISCSI_TARGET_PORTAL_INFO_EXW) -> u32;
type ReportTargetsW = unsafe extern "system" fn(bool, *mut u32, *mut u16) -> u32;
type LoginTargetW = unsafe extern "system" fn(
    *const u16,
    bool,
    *const u16,
    u32,
    *mut ISCSI_TARGET_PORTALW,
    u64,
    *mut c_void,
    *mut ISCSI_LOGIN_OPTIONS,
    u32,
    *const u8,
    bool,
    *mut ISCSI_UNIQUE_SESSION_ID,
    *mut ISCSI_UNIQUE_SESSION_ID,
) -> u32;
type GetSessionListW =
    unsafe extern "system" fn(*mut u32, *mut u32, *mut ISCSI_SESSION_INFOW) -> u32;
type LogoutTarget = unsafe extern "system" fn(*mut ISCSI_UNIQUE_SESSION_ID) -> u32;
type GetDevicesForSessionW = unsafe extern "system" fn(
    *mut ISCSI_UNIQUE_SESSION_ID,
    *mut u32,
    *mut ISCSI_DEVICE_ON_SESSIONW,
) -> u32;
type RemovePersistentTargetW =
    unsafe extern "system" fn(*const u16, u32, *const u16, *mut ISCSI_TARGET_PORTALW) -> u32;
type SetChapSharedSecret = unsafe extern "system" fn(u32, *mut u8) -> u32;
type GetTargetInformationW =
    unsafe extern "system" fn(*const u16, *const u16, i32, *mut u32, *mut c_void) -> u32;

/// The initiator API functions this host calls.
struct Api {
    add_portal: AddSendTargetPortalW,
    remove_portal: RemoveSendTargetPortalW,
    report_portals: ReportSendTargetPortalsExW,
    report_targets: ReportTargetsW,
    login: LoginTargetW,
    sessions: GetSessionListW,
    logout: LogoutTarget,
    remove_persistent: RemovePersistentTargetW,
    devices: GetDevicesForSessionW,
    set_chap_secret: SetChapSharedSecret,
    target_info: GetTargetInformationW,
}

/// Resolves `name` in `module` as a function of type `F`.
///
/// # Safety
/// `F` must be the function pointer type of `name`'s documented signature.
unsafe fn proc<F: Copy>(module: windows::Win32::Foundation::HMODULE, name: &[u8]) -> Option<F> {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: `name` is NUL-terminated and the module handle is valid (never freed).
    let f = unsafe { GetProcAddress(module, PCSTR(name.as_ptr())) }?;
    debug_assert_eq!(size_of::<F>(), size_of_val(&f));
    // SAFETY: per this function's contract `F` is the function's real signature; both are
    // plain function pointers of the same size.
    Some(unsafe { std::mem::transmute_copy::<_, F>(&f) })
}

impl Api {
    fn load() -> std::result::Result<Api, String> {
        // LOAD_LIBRARY_SEARCH_SYSTEM32: only the system copy, never a DLL planted beside the
        // executable or in the working directory. The module is never freed: the pointers below
        // stay valid for the life of the process.
        // SAFETY: a constant, NUL-terminated name; no other argument.
        let module =
            unsafe { LoadLibraryExW(w!("iscsidsc.dll"), None, LOAD_LIBRARY_SEARCH_SYSTEM32) }
                .map_err(|e| format!("loading iscsidsc.dll: {}", e.message()))?;
        macro_rules! get {
            ($name:literal) => {
                // SAFETY: each type alias above is the signature `iscsidsc.h` declares for it.
                unsafe { proc(module, concat!($name, "\0").as_bytes()) }
                    .ok_or_else(|| format!("iscsidsc.dll has no {}", $name))?
            };
        }
        Ok(Api {
            add_portal: get!("AddIScsiSendTargetPortalW"),
            remove_portal: get!("RemoveIScsiSendTargetPortalW"),
            report_portals: get!("ReportIScsiSendTargetPortalsExW"),
            report_targets: get!("ReportIScsiTargetsW"),
            login: get!("LoginIScsiTargetW"),
            sessions: get!("GetIScsiSessionListW"),
            logout: get!("LogoutIScsiTarget"),
            remove_persistent: get!("RemoveIScsiPersistentTargetW"),
            devices: get!("GetDevicesForIScsiSessionW"),
            set_chap_secret: get!("SetIScsiInitiatorCHAPSharedSecret"),
            target_info: get!("GetIScsiTargetInformationW"),
        })
    }
}

/// The API, loaded once per process; `Err` says what is missing.
fn api_loaded() -> &'static std::result::Result<Api, String> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| {
        let api = Api::load();
        if let Err(why) = &api {
            tracing::warn!(reason = %why, "{NOT_AVAILABLE}");
        }
        api
    })
}

/// The API for operation `op`, or FAILED_PRECONDITION.
fn api(op: &str) -> Result<&'static Api> {
    api_loaded().as_ref().map_err(|why| {
        Error::new(
            Kind::FailedPrecondition,
            op,
            "iSCSI initiator",
            format!("{NOT_AVAILABLE} ({why})"),
        )
    })
}

/// Whether `iscsidsc.dll` and every function this host needs could be loaded.
pub fn available() -> bool {
    api_loaded().is_ok()
}

/// An [`Error`] for initiator call `call` of operation `op` on `object` returning `code`.
fn failed(op: &str, object: impl std::fmt::Display, call: &str, code: u32) -> Error {
    let (kind, what) = data::failure(code);
    Error::new(kind, op, object, format!("{call}: {what}"))
}

/// `ISCSI_TARGET_PORTALW` for `portal` (no symbolic name).
fn portal_struct(op: &str, portal: &TargetPortal) -> Result<ISCSI_TARGET_PORTALW> {
    let addr = data::portal_address(portal)
        .map_err(|why| Error::invalid(op, format!("portal {portal}"), why))?;
    let mut p = ISCSI_TARGET_PORTALW::default();
    p.Address[..addr.len()].copy_from_slice(&addr);
    p.Socket = portal.port;
    Ok(p)
}

/// A UTF-16 string the API put into one of its buffers.
///
/// # Safety
/// `p` is null or points to a NUL-terminated UTF-16 string that stays valid while read.
unsafe fn pwstr(p: *const u16) -> String {
    if p.is_null() {
        return String::new();
    }
    let mut n = 0;
    // SAFETY: per the contract the string ends with a NUL, which stops the walk.
    while unsafe { *p.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: the `n` units before the NUL were just read.
    String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(p, n) })
}

/// One active session as `GetIScsiSessionListW` reports it.
struct Session {
    id: ISCSI_UNIQUE_SESSION_ID,
    /// `TargetNodeName` (the IQN) and `TargetName`.
    names: [String; 2],
    /// `(TargetAddress, TargetSocket)` of each connection.
    connections: Vec<(String, u16)>,
}

impl Session {
    /// Whether this is a session with target `iqn` through `portal`. A session whose connections
    /// are all gone (being re-established) counts by its IQN alone.
    fn is(&self, portal: &TargetPortal, iqn: &str) -> bool {
        self.names.iter().any(|n| n == iqn)
            && (self.connections.is_empty()
                || self
                    .connections
                    .iter()
                    .any(|(a, p)| data::is_portal(a, *p, portal)))
    }
}

impl Api {
    /// Every registered SendTargets portal (`ReportIScsiSendTargetPortalsExW`), deduplicated
    /// (one portal is reported once per initiator port it was added on).
    fn portals(&self, op: &str) -> Result<Vec<TargetPortal>> {
        let elem = size_of::<ISCSI_TARGET_PORTAL_INFO_EXW>();
        let mut bytes = 0u32;
        for _ in 0..FETCH_ATTEMPTS {
            // u64 elements: the structures contain u64 fields and need 8-byte alignment.
            let mut buf = vec![0u64; (bytes as usize).div_ceil(8)];
            let mut count = (bytes as usize / elem) as u32;
            let mut size = bytes;
            let ptr = if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr().cast()
            };
            // SAFETY: `ptr` is null with size 0, or `size` writable, aligned bytes.
            let code = unsafe { (self.report_portals)(&mut count, &mut size, ptr) };
            match code {
                ERROR_SUCCESS => {
                    let n = (count as usize).min(buf.len() * 8 / elem);
                    if n == 0 {
                        return Ok(Vec::new());
                    }
                    // SAFETY: the call filled `count` structures at the start of `buf`, and `n`
                    // is capped to what `buf` holds.
                    let infos = unsafe { std::slice::from_raw_parts(ptr.cast_const(), n) };
                    let mut out: Vec<TargetPortal> = Vec::new();
                    for i in infos {
                        let p = TargetPortal {
                            address: from_wide(&i.Address),
                            port: i.Socket,
                        };
                        if !out.contains(&p) {
                            out.push(p);
                        }
                    }
                    return Ok(out);
                }
                // Documented: on ERROR_INSUFFICIENT_BUFFER the size parameter is what is
                // needed; the count is used too in case only it was set.
                ERROR_INSUFFICIENT_BUFFER => {
                    bytes = size
                        .max(count.saturating_mul(elem as u32))
                        .max(bytes.saturating_mul(2))
                        .max(elem as u32);
                }
                c => {
                    return Err(failed(
                        op,
                        "target portals",
                        "ReportIScsiSendTargetPortalsExW",
                        c,
                    ));
                }
            }
        }
        Err(Error::new(
            Kind::Unavailable,
            op,
            "target portals",
            "the portal list kept growing while it was read",
        ))
    }

    /// Every target the initiator has discovered (`ReportIScsiTargetsW`); with `refresh` the
    /// service first repeats discovery on its portals (documented `ForceUpdate`).
    fn targets(&self, op: &str, refresh: bool) -> Result<Vec<String>> {
        // BufferSize counts WCHARs here (the list is a REG_MULTI_SZ-style character buffer).
        let mut chars = 0u32;
        for attempt in 0..FETCH_ATTEMPTS {
            // ForceUpdate on the first call only: each forced call repeats discovery on every
            // portal, and the sizing answer is followed by a plain fetch of the same list.
            let refresh = refresh && attempt == 0;
            let mut buf = vec![0u16; chars as usize];
            let mut size = chars;
            let ptr = if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr()
            };
            // SAFETY: `ptr` is null with size 0, or `size` writable WCHARs.
            let code = unsafe { (self.report_targets)(refresh, &mut size, ptr) };
            match code {
                ERROR_SUCCESS => return Ok(data::parse_multi_sz(&buf)),
                ERROR_INSUFFICIENT_BUFFER => {
                    chars = size.max(chars.saturating_mul(2)).max(256);
                }
                c => return Err(failed(op, "discovered targets", "ReportIScsiTargetsW", c)),
            }
        }
        Err(Error::new(
            Kind::Unavailable,
            op,
            "discovered targets",
            "the target list kept growing while it was read",
        ))
    }

    /// The discovery mechanisms of target `iqn` (`GetIScsiTargetInformationW` with
    /// `DiscoveryMechanisms`: a double-NUL-terminated list, size in bytes), or `None` when the
    /// initiator cannot say.
    fn mechanisms(&self, iqn: &str) -> Option<Vec<String>> {
        let name = wide(iqn);
        let mut bytes = 0u32;
        for _ in 0..FETCH_ATTEMPTS {
            let mut buf = vec![0u16; (bytes as usize).div_ceil(2)];
            let mut size = bytes;
            let ptr: *mut c_void = if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr().cast()
            };
            // SAFETY: `name` is NUL-terminated; no mechanism filter (null); `ptr` is null with
            // size 0, or `size` writable bytes.
            let code = unsafe {
                (self.target_info)(
                    name.as_ptr(),
                    std::ptr::null(),
                    data::TARGET_INFO_DISCOVERY_MECHANISMS,
                    &mut size,
                    ptr,
                )
            };
            match code {
                ERROR_SUCCESS => return Some(data::parse_multi_sz(&buf)),
                ERROR_INSUFFICIENT_BUFFER => {
                    bytes = size.max(bytes.saturating_mul(2)).max(512);
                }
                c => {
                    tracing::debug!(target = %iqn, code = %format_args!("{c:#x}"), "no discovery mechanisms");
                    return None;
                }
            }
        }
        None
    }

    /// Every active session (`GetIScsiSessionListW`).
    fn sessions(&self, op: &str) -> Result<Vec<Session>> {
        let mut bytes = 0u32;
        for _ in 0..FETCH_ATTEMPTS {
            let mut buf = vec![0u64; (bytes as usize).div_ceil(8)];
            let mut size = bytes;
            let mut count = 0u32;
            let ptr: *mut ISCSI_SESSION_INFOW = if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr().cast()
            };
            // SAFETY: `ptr` is null with size 0, or `size` writable, 8-byte aligned bytes.
            let code = unsafe { (self.sessions)(&mut size, &mut count, ptr) };
            match code {
                ERROR_SUCCESS => {
                    let cap = buf.len() * 8 / size_of::<ISCSI_SESSION_INFOW>();
                    let n = (count as usize).min(cap);
                    let mut out = Vec::with_capacity(n);
                    for i in 0..n {
                        // SAFETY: `count` structures were written at the start of `buf`; their
                        // string and connection pointers point into `buf` (documented: one
                        // caller-allocated buffer holds everything), which is alive here.
                        let s = unsafe { &*ptr.add(i) };
                        let conns: &[ISCSI_CONNECTION_INFOW] =
                            if s.Connections.is_null() || s.ConnectionCount == 0 {
                                &[]
                            } else {
                                // SAFETY: as above, `ConnectionCount` entries at `Connections`.
                                unsafe {
                                    std::slice::from_raw_parts(
                                        s.Connections,
                                        s.ConnectionCount as usize,
                                    )
                                }
                            };
                        out.push(Session {
                            id: s.SessionId,
                            // SAFETY: NUL-terminated strings inside `buf` (or null).
                            names: unsafe { [pwstr(s.TargetNodeName.0), pwstr(s.TargetName.0)] },
                            connections: conns
                                .iter()
                                // SAFETY: as above.
                                .map(|c| (unsafe { pwstr(c.TargetAddress.0) }, c.TargetSocket))
                                .collect(),
                        });
                    }
                    return Ok(out);
                }
                ERROR_INSUFFICIENT_BUFFER => {
                    bytes = size.max(bytes.saturating_mul(2)).max(1024);
                }
                c => return Err(failed(op, "iSCSI sessions", "GetIScsiSessionListW", c)),
            }
        }
        Err(Error::new(
            Kind::Unavailable,
            op,
            "iSCSI sessions",
            "the session list kept growing while it was read",
        ))
    }

    /// Disk numbers of session `id` (`GetDevicesForIScsiSessionW`): the
    /// `STORAGE_DEVICE_NUMBER.DeviceNumber` of each device that is a disk, which is the `N` of
    /// `\\.\PhysicalDriveN` the disk group names disks by.
    fn session_disks(
        &self,
        op: &str,
        object: &str,
        id: ISCSI_UNIQUE_SESSION_ID,
    ) -> Result<Vec<u32>> {
        let mut cap = 4u32;
        for _ in 0..FETCH_ATTEMPTS {
            let mut devices = vec![ISCSI_DEVICE_ON_SESSIONW::default(); cap as usize];
            let mut count = cap;
            let mut id = id;
            // SAFETY: `devices` holds `count` structures.
            let code = unsafe { (self.devices)(&mut id, &mut count, devices.as_mut_ptr()) };
            match code {
                ERROR_SUCCESS => {
                    return Ok(devices[..(count.min(cap)) as usize]
                        .iter()
                        .filter(|d| d.StorageDeviceNumber.DeviceType == FILE_DEVICE_DISK)
                        .map(|d| d.StorageDeviceNumber.DeviceNumber)
                        .collect());
                }
                // The count then says how many elements are needed, or (as documented) only
                // what the buffer held: grow at least twofold either way.
                ERROR_INSUFFICIENT_BUFFER => cap = count.max(cap.saturating_mul(2)),
                // The session ended between listing and asking: it has no disks now.
                isdsc::INVALID_SESSION_ID => return Ok(Vec::new()),
                c => return Err(failed(op, object, "GetDevicesForIScsiSessionW", c)),
            }
        }
        Err(Error::new(
            Kind::Unavailable,
            op,
            object,
            "the device list kept growing while it was read",
        ))
    }
}

/// The Windows iSCSI host.
#[derive(Debug, Default)]
pub struct WindowsIscsiHost;

impl WindowsIscsiHost {
    /// The host. `iscsidsc.dll` is loaded on first use, not here.
    pub fn new() -> Self {
        Self
    }
}

fn target_object(iqn: &str, portal: &TargetPortal) -> String {
    format!("target {iqn:?} at portal {portal}")
}

fn check_iqn(op: &str, iqn: &str, portal: &TargetPortal) -> Result<Vec<u16>> {
    data::check_iqn(iqn).map_err(|why| Error::invalid(op, target_object(iqn, portal), why))?;
    Ok(wide(iqn))
}

impl IscsiHost for WindowsIscsiHost {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        const OP: &str = "AddTargetPortal";
        let api = api(OP)?;
        let mut p = portal_struct(OP, portal)?;
        if api.portals(OP)?.contains(portal) {
            return Ok(());
        }
        // InitiatorInstance NULL + ISCSI_ALL_INITIATOR_PORTS: the service picks the initiator
        // and uses every port (documented defaults). No login options: discovery without CHAP,
        // as the RPC carries none. The service runs SendTargets discovery on the new portal.
        // SAFETY: `p` is a valid, writable portal structure; the other pointers are null.
        let code = unsafe {
            (api.add_portal)(
                std::ptr::null(),
                ISCSI_ALL_INITIATOR_PORTS,
                std::ptr::null_mut(),
                0,
                &mut p,
            )
        };
        if data::succeeded(code)
            || code == isdsc::TARGET_PORTAL_ALREADY_EXISTS
            || code == isdsc::TARGET_ADDRESS_ALREADY_EXISTS
        {
            tracing::info!(portal = %portal, "iSCSI target portal added");
            return Ok(());
        }
        Err(failed(
            OP,
            format!("portal {portal}"),
            "AddIScsiSendTargetPortalW",
            code,
        ))
    }

    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        const OP: &str = "DiscoverTargetPortal";
        let api = api(OP)?;
        if !api.portals(OP)?.contains(portal) {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                format!("portal {portal}"),
                "no such target portal",
            ));
        }
        // ForceUpdate: the service repeats SendTargets discovery before answering, so targets
        // added on the array since the portal was registered are seen. The list covers every
        // portal; each target's discovery mechanisms say which portal found it.
        let targets = api.targets(OP, true)?;
        Ok(targets
            .into_iter()
            .filter(|t| {
                api.mechanisms(t)
                    .is_none_or(|m| data::discovered_through(&m, portal))
            })
            .collect())
    }

    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        const OP: &str = "RemoveTargetPortal";
        let api = api(OP)?;
        let mut p = portal_struct(OP, portal)?;
        if !api.portals(OP)?.contains(portal) {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                format!("portal {portal}"),
                "no such target portal",
            ));
        }
        // NULL initiator + ISCSI_ALL_INITIATOR_PORTS: remove it wherever it was added.
        // SAFETY: `p` is a valid, writable portal structure; the instance pointer is null.
        let code =
            unsafe { (api.remove_portal)(std::ptr::null(), ISCSI_ALL_INITIATOR_PORTS, &mut p) };
        if data::succeeded(code) {
            tracing::info!(portal = %portal, "iSCSI target portal removed");
            return Ok(());
        }
        Err(failed(
            OP,
            format!("portal {portal}"),
            "RemoveIScsiSendTargetPortalW",
            code,
        ))
    }

    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        const OP: &str = "ListTargetPortals";
        api(OP)?.portals(OP)
    }

    fn connect_target(&self, portal: &TargetPortal, iqn: &str, chap: &Chap) -> Result<()> {
        const OP: &str = "ConnectTarget";
        let api = api(OP)?;
        let object = target_object(iqn, portal);
        let name = check_iqn(OP, iqn, portal)?;
        let mut p = portal_struct(OP, portal)?;
        let mut auth = data::login_auth(chap).map_err(|why| Error::invalid(OP, &object, why))?;
        if api.sessions(OP)?.iter().any(|s| s.is(portal, iqn)) {
            return Ok(());
        }
        let mut options = ISCSI_LOGIN_OPTIONS {
            Version: LOGIN_OPTIONS_VERSION,
            InformationSpecified: auth.info_specified,
            AuthType: ISCSI_AUTH_TYPES(auth.auth_type),
            ..Default::default()
        };
        if !auth.username.is_empty() {
            options.UsernameLength = auth.username.len() as u32;
            options.Username = auth.username.as_mut_ptr();
        }
        if !auth.secret.is_empty() {
            options.PasswordLength = auth.secret.len() as u32;
            options.Password = auth.secret.as_mut_ptr();
        }
        let mut session = ISCSI_UNIQUE_SESSION_ID::default();
        let mut connection = ISCSI_UNIQUE_SESSION_ID::default();
        // Not informational (the LUNs are reported to PnP, so disks appear); any initiator and
        // port; through this portal; not persistent (see the module comment). The target must be
        // in the discovered list (documented), else ISDSC_TARGET_NOT_FOUND.
        // SAFETY: every pointer is valid for the call: `name` is NUL-terminated, `p`, `options`,
        // `session` and `connection` are live locals, and the user name and secret buffers
        // `options` points at live in `auth`, which outlives the call.
        let code = unsafe {
            (api.login)(
                name.as_ptr(),
                false,
                std::ptr::null(),
                ISCSI_ALL_INITIATOR_PORTS,
                &mut p,
                0,
                std::ptr::null_mut(),
                &mut options,
                0,
                std::ptr::null(),
                false,
                &mut session,
                &mut connection,
            )
        };
        // The secret is not needed past the call: wipe it now (dropping `auth` would too).
        data::wipe(&mut auth.secret);
        drop(auth);
        if data::succeeded(code) {
            tracing::info!(target = %iqn, portal = %portal, "iSCSI session logged in");
            return Ok(());
        }
        if code == isdsc::TARGET_ALREADY_LOGGED_IN || code == isdsc::SESSION_ALREADY_EXISTS {
            return Ok(());
        }
        Err(failed(OP, &object, "LoginIScsiTargetW", code))
    }

    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        const OP: &str = "DisconnectTarget";
        let api = api(OP)?;
        let object = target_object(iqn, portal);
        check_iqn(OP, iqn, portal)?;
        for s in api.sessions(OP)?.into_iter().filter(|s| s.is(portal, iqn)) {
            let mut id = s.id;
            // SAFETY: `id` is a live local holding a session ID the service reported.
            let code = unsafe { (api.logout)(&mut id) };
            // A session that ended meanwhile is what was asked for.
            if data::succeeded(code) || code == isdsc::INVALID_SESSION_ID {
                tracing::info!(target = %iqn, portal = %portal, "iSCSI session logged out");
                continue;
            }
            return Err(failed(OP, &object, "LogoutIScsiTarget", code));
        }
        // A persistent login of this target through this portal (one upstream or an operator
        // made) would log in again at the next boot: it goes too, as upstream's disconnect
        // removes it. This host's own logins are never persistent, so usually there is none.
        let mut p = portal_struct(OP, portal)?;
        let name: Vec<u16> = iqn.encode_utf16().chain([0]).collect();
        // SAFETY: a null initiator instance means any initiator; `name` is NUL-terminated and
        // `p` a live portal structure, both outliving the call.
        let code = unsafe {
            (api.remove_persistent)(
                std::ptr::null(),
                data::ISCSI_ALL_INITIATOR_PORTS,
                name.as_ptr(),
                &mut p,
            )
        };
        if data::succeeded(code) {
            tracing::info!(target = %iqn, portal = %portal, "iSCSI persistent login removed");
        } else if code != isdsc::TARGET_NOT_FOUND && code != 2 {
            // ERROR_FILE_NOT_FOUND (2) or ISDSC_TARGET_NOT_FOUND: there was none.
            return Err(failed(OP, &object, "RemoveIScsiPersistentTargetW", code));
        }
        Ok(())
    }

    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        const OP: &str = "GetTargetDisks";
        let api = api(OP)?;
        let object = target_object(iqn, portal);
        check_iqn(OP, iqn, portal)?;
        let mut disks = Vec::new();
        for s in api.sessions(OP)?.into_iter().filter(|s| s.is(portal, iqn)) {
            disks.extend(api.session_disks(OP, &object, s.id)?);
        }
        disks.sort_unstable();
        disks.dedup();
        Ok(disks)
    }

    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        const OP: &str = "SetMutualChapSecret";
        let api = api(OP)?;
        let mut bytes = secret.expose().as_bytes().to_vec();
        let ptr = if bytes.is_empty() {
            std::ptr::null_mut()
        } else {
            bytes.as_mut_ptr()
        };
        // The initiator's node-wide secret used to check the target in mutual CHAP; the API
        // documents 12 to 16 bytes (it answers ISDSC_INVALID_CHAP_SECRET otherwise).
        // SAFETY: `ptr` is null with length 0, or `bytes.len()` readable bytes.
        let code = unsafe { (api.set_chap_secret)(bytes.len() as u32, ptr) };
        data::wipe(&mut bytes);
        if data::succeeded(code) {
            tracing::info!("iSCSI initiator mutual CHAP secret set");
            return Ok(());
        }
        Err(failed(
            OP,
            "mutual CHAP secret",
            "SetIScsiInitiatorCHAPSharedSecret",
            code,
        ))
    }
}
