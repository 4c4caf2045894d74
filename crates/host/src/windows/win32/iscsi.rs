//! The iSCSI initiator calls of the real seam, through `iscsidsc.dll`.
//!
//! The DLL is loaded at run time (`LoadLibraryExW` limited to System32, then `GetProcAddress`,
//! cached for the life of the process) rather than linked, so a binary still starts where the
//! initiator is absent (Wine, stripped-down images). Struct layouts come from the `windows`
//! crate (`Win32_Storage_IscsiDisc`); only the function pointers are resolved here, with the
//! signatures `iscsidsc.h` declares. Each function below is one initiator call.

use super::{OsError, Win32Result};
use crate::windows::os::{IscsiSession, PersistentLogin, code};
use crate::windows::win::from_wide;
use csi_proxy_formats::windows_buffers::iscsi::{self as data, ISCSI_ALL_INITIATOR_PORTS};
use std::ffi::c_void;
use std::sync::OnceLock;
use windows::Win32::Storage::IscsiDisc::{
    ISCSI_AUTH_TYPES, ISCSI_CONNECTION_INFOW, ISCSI_DEVICE_ON_SESSIONW, ISCSI_LOGIN_OPTIONS,
    ISCSI_SESSION_INFOW, ISCSI_TARGET_PORTAL_INFO_EXW, ISCSI_TARGET_PORTALW,
    ISCSI_UNIQUE_SESSION_ID, PERSISTENT_ISCSI_LOGIN_INFOW,
};
use windows::Win32::System::LibraryLoader::{
    GetProcAddress, LOAD_LIBRARY_SEARCH_SYSTEM32, LoadLibraryExW,
};
use windows::core::{PCSTR, w};

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
type ReportPersistentLoginsW =
    unsafe extern "system" fn(*mut u32, *mut PERSISTENT_ISCSI_LOGIN_INFOW, *mut u32) -> u32;
type RemovePersistentTargetW =
    unsafe extern "system" fn(*const u16, u32, *const u16, *mut ISCSI_TARGET_PORTALW) -> u32;
type SetChapSharedSecret = unsafe extern "system" fn(u32, *mut u8) -> u32;
type GetTargetInformationW =
    unsafe extern "system" fn(*const u16, *const u16, i32, *mut u32, *mut c_void) -> u32;

/// The initiator API functions the seam calls.
struct Api {
    add_portal: AddSendTargetPortalW,
    remove_portal: RemoveSendTargetPortalW,
    report_portals: ReportSendTargetPortalsExW,
    report_targets: ReportTargetsW,
    login: LoginTargetW,
    sessions: GetSessionListW,
    logout: LogoutTarget,
    report_persistent: ReportPersistentLoginsW,
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
            report_persistent: get!("ReportIScsiPersistentLoginsW"),
            remove_persistent: get!("RemoveIScsiPersistentTargetW"),
            devices: get!("GetDevicesForIScsiSessionW"),
            set_chap_secret: get!("SetIScsiInitiatorCHAPSharedSecret"),
            target_info: get!("GetIScsiTargetInformationW"),
        })
    }
}

/// The API, loaded once per process; `Err` says what is missing.
fn loaded() -> &'static std::result::Result<Api, String> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(Api::load)
}

/// The API, or the error every call answers where it is missing.
fn api() -> Win32Result<&'static Api> {
    loaded()
        .as_ref()
        .map_err(|why| OsError::with_message(code::INVALID_FUNCTION, why.clone()))
}

/// A call's status: the ISDSC or Win32 code as an [`OsError`], with the size it needs.
fn status(code: u32, needed: usize) -> Win32Result<()> {
    if data::succeeded(code) {
        return Ok(());
    }
    let mut e = OsError::with_message(code, data::failure(code).1);
    e.needed = needed;
    Err(e)
}

/// `ISCSI_TARGET_PORTALW` for a portal (no symbolic name); the address is checked by the logic.
fn portal(address: &str, port: u16) -> Win32Result<ISCSI_TARGET_PORTALW> {
    let addr = data::portal_address(&csi_proxy_core::iscsi::TargetPortal {
        address: address.into(),
        port,
    })
    .map_err(|why| OsError::with_message(code::INVALID_PARAMETER, why))?;
    let mut p = ISCSI_TARGET_PORTALW::default();
    p.Address[..addr.len()].copy_from_slice(&addr);
    p.Socket = port;
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

fn session_id(id: (u64, u64)) -> ISCSI_UNIQUE_SESSION_ID {
    ISCSI_UNIQUE_SESSION_ID {
        AdapterUnique: id.0,
        AdapterSpecific: id.1,
    }
}

pub(super) fn available() -> std::result::Result<(), String> {
    loaded().as_ref().map(drop).map_err(Clone::clone)
}

pub(super) fn add_portal(address: &str, port: u16) -> Win32Result<()> {
    let api = api()?;
    let mut p = portal(address, port)?;
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
    status(code, 0)
}

pub(super) fn remove_portal(address: &str, port: u16) -> Win32Result<()> {
    let api = api()?;
    let mut p = portal(address, port)?;
    // SAFETY: `p` is a valid, writable portal structure; the instance pointer is null.
    let code = unsafe { (api.remove_portal)(std::ptr::null(), ISCSI_ALL_INITIATOR_PORTS, &mut p) };
    status(code, 0)
}

pub(super) fn portals(capacity: usize) -> Win32Result<Vec<(String, u16)>> {
    let api = api()?;
    let elem = size_of::<ISCSI_TARGET_PORTAL_INFO_EXW>();
    // u64 elements: the structures contain u64 fields and need 8-byte alignment.
    let mut buf = vec![0u64; (capacity * elem).div_ceil(8)];
    let mut count = capacity as u32;
    let mut size = (capacity * elem) as u32;
    let ptr = if buf.is_empty() {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast::<ISCSI_TARGET_PORTAL_INFO_EXW>()
    };
    // SAFETY: `ptr` is null with size 0, or `size` writable, aligned bytes.
    let code = unsafe { (api.report_portals)(&mut count, &mut size, ptr) };
    // Documented: on ERROR_INSUFFICIENT_BUFFER the size parameter is what is needed.
    status(code, (size as usize).div_ceil(elem).max(count as usize))?;
    let n = (count as usize).min(capacity);
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the call filled `count` structures at the start of `buf`, capped to its size.
    let infos = unsafe { std::slice::from_raw_parts(ptr.cast_const(), n) };
    Ok(infos
        .iter()
        .map(|i| (from_wide(&i.Address), i.Socket))
        .collect())
}

pub(super) fn targets(force_update: bool, capacity: usize) -> Win32Result<Vec<String>> {
    let api = api()?;
    // BufferSize counts WCHARs here (the list is a REG_MULTI_SZ-style character buffer).
    let mut buf = vec![0u16; capacity];
    let mut size = capacity as u32;
    let ptr = if buf.is_empty() {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr()
    };
    // SAFETY: `ptr` is null with size 0, or `size` writable WCHARs.
    let code = unsafe { (api.report_targets)(force_update, &mut size, ptr) };
    status(code, size as usize)?;
    Ok(data::parse_multi_sz(&buf))
}

pub(super) fn discovery_mechanisms(iqn: &str, capacity: usize) -> Win32Result<Vec<String>> {
    let api = api()?;
    let name: Vec<u16> = iqn.encode_utf16().chain([0]).collect();
    let mut buf = vec![0u16; capacity.div_ceil(2)];
    let mut size = capacity as u32;
    let ptr: *mut c_void = if buf.is_empty() {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: `name` is NUL-terminated; no mechanism filter (null); `ptr` is null with size 0,
    // or `size` writable bytes.
    let code = unsafe {
        (api.target_info)(
            name.as_ptr(),
            std::ptr::null(),
            data::TARGET_INFO_DISCOVERY_MECHANISMS,
            &mut size,
            ptr,
        )
    };
    status(code, size as usize)?;
    Ok(data::parse_multi_sz(&buf))
}

pub(super) fn sessions(capacity: usize) -> Win32Result<Vec<IscsiSession>> {
    let api = api()?;
    let mut buf = vec![0u64; capacity.div_ceil(8)];
    let mut size = capacity as u32;
    let mut count = 0u32;
    let ptr: *mut ISCSI_SESSION_INFOW = if buf.is_empty() {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: `ptr` is null with size 0, or `size` writable, 8-byte aligned bytes.
    let code = unsafe { (api.sessions)(&mut size, &mut count, ptr) };
    status(code, size as usize)?;
    let cap = buf.len() * 8 / size_of::<ISCSI_SESSION_INFOW>();
    let n = (count as usize).min(cap);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `count` structures were written at the start of `buf`; their string and
        // connection pointers point into `buf` (documented: one caller-allocated buffer holds
        // everything), which is alive here.
        let s = unsafe { &*ptr.add(i) };
        let conns: &[ISCSI_CONNECTION_INFOW] = if s.Connections.is_null() || s.ConnectionCount == 0
        {
            &[]
        } else {
            // SAFETY: as above, `ConnectionCount` entries at `Connections`.
            unsafe { std::slice::from_raw_parts(s.Connections, s.ConnectionCount as usize) }
        };
        out.push(IscsiSession {
            id: (s.SessionId.AdapterUnique, s.SessionId.AdapterSpecific),
            // SAFETY: NUL-terminated strings inside `buf` (or null).
            names: unsafe { [pwstr(s.TargetNodeName.0), pwstr(s.TargetName.0)] },
            connections: conns
                .iter()
                // SAFETY: as above.
                .map(|c| (unsafe { pwstr(c.TargetAddress.0) }, c.TargetSocket))
                .collect(),
        });
    }
    Ok(out)
}

pub(super) fn login(
    iqn: &str,
    address: &str,
    port: u16,
    auth: &data::LoginAuth,
    flags: u32,
) -> Win32Result<()> {
    let api = api()?;
    let name: Vec<u16> = iqn.encode_utf16().chain([0]).collect();
    let mut p = portal(address, port)?;
    // The API takes mutable pointers; these copies are wiped right after the call.
    let mut username = auth.username.clone();
    let mut secret = auth.secret.clone();
    let mut options = ISCSI_LOGIN_OPTIONS {
        Version: data::LOGIN_OPTIONS_VERSION,
        InformationSpecified: auth.info_specified,
        // ISCSI_LOGIN_OPTIONS.LoginFlags: "A bitwise OR of login flags"; 0 for the daemon.
        LoginFlags: flags,
        AuthType: ISCSI_AUTH_TYPES(auth.auth_type),
        ..Default::default()
    };
    if !username.is_empty() {
        options.UsernameLength = username.len() as u32;
        options.Username = username.as_mut_ptr();
    }
    if !secret.is_empty() {
        options.PasswordLength = secret.len() as u32;
        options.Password = secret.as_mut_ptr();
    }
    let mut session = ISCSI_UNIQUE_SESSION_ID::default();
    let mut connection = ISCSI_UNIQUE_SESSION_ID::default();
    // Not informational (the LUNs are reported to PnP, so disks appear); any initiator and
    // port; through this portal; not persistent. The target must be in the discovered list
    // (documented), else ISDSC_TARGET_NOT_FOUND.
    // SAFETY: every pointer is valid for the call: `name` is NUL-terminated, `p`, `options`,
    // `session` and `connection` are live locals, and the user name and secret buffers
    // `options` points at are live locals too.
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
    data::wipe(&mut secret);
    data::wipe(&mut username);
    status(code, 0)
}

pub(super) fn logout(session: (u64, u64)) -> Win32Result<()> {
    let api = api()?;
    let mut id = session_id(session);
    // SAFETY: `id` is a live local holding a session ID the service reported.
    let code = unsafe { (api.logout)(&mut id) };
    status(code, 0)
}

pub(super) fn persistent_logins(capacity: usize) -> Win32Result<Vec<PersistentLogin>> {
    let api = api()?;
    let mut buf = vec![0u64; capacity.div_ceil(8)];
    let mut size = capacity as u32;
    let mut count = 0u32;
    let ptr: *mut PERSISTENT_ISCSI_LOGIN_INFOW = if buf.is_empty() {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: `ptr` is null with size 0, or `size` writable, 8-byte aligned bytes.
    let code = unsafe { (api.report_persistent)(&mut count, ptr, &mut size) };
    status(code, size as usize)?;
    let cap = buf.len() * 8 / size_of::<PERSISTENT_ISCSI_LOGIN_INFOW>();
    Ok((0..(count as usize).min(cap))
        .map(|i| {
            // SAFETY: `count` structures were written at the start of `buf`; the fields read
            // are inline arrays and integers.
            let l = unsafe { &*ptr.add(i) };
            PersistentLogin {
                iqn: from_wide(&l.TargetName),
                initiator: from_wide(&l.InitiatorInstance),
                initiator_port: l.InitiatorPortNumber,
                portal: (from_wide(&l.TargetPortal.Address), l.TargetPortal.Socket),
            }
        })
        .collect())
}

pub(super) fn remove_persistent_target(login: &PersistentLogin) -> Win32Result<()> {
    let mut p = ISCSI_TARGET_PORTALW::default();
    let address: Vec<u16> = login.portal.0.encode_utf16().collect();
    if address.len() >= p.Address.len() {
        return Err(OsError::new(code::INVALID_PARAMETER));
    }
    p.Address[..address.len()].copy_from_slice(&address);
    p.Socket = login.portal.1;
    let initiator: Vec<u16> = login.initiator.encode_utf16().chain([0]).collect();
    // The initiator and port are the ones the login was listed with.
    remove_persistent(initiator.as_ptr(), login.initiator_port, &login.iqn, &mut p)
}

/// `RemoveIScsiPersistentTargetW(NULL, ISCSI_ALL_INITIATOR_PORTS, iqn, a portal with no
/// information)`: the initiator is `[in]`, not optional, so the call shows what the initiator
/// service answers a null one (ledger row 26). A portal that "contains no information" stands
/// for every portal, as the page says, so only the initiator is missing.
pub(super) fn remove_persistent_target_without_initiator(iqn: &str) -> Win32Result<()> {
    let mut p = ISCSI_TARGET_PORTALW::default();
    remove_persistent(std::ptr::null(), ISCSI_ALL_INITIATOR_PORTS, iqn, &mut p)
}

/// `RemoveIScsiPersistentTargetW(initiator, port, iqn, portal)`; `initiator` is null or a
/// NUL-terminated string.
fn remove_persistent(
    initiator: *const u16,
    port: u32,
    iqn: &str,
    portal: &mut ISCSI_TARGET_PORTALW,
) -> Win32Result<()> {
    let api = api()?;
    let name: Vec<u16> = iqn.encode_utf16().chain([0]).collect();
    // SAFETY: `initiator` is null or NUL-terminated and outlives the call (the callers keep
    // it); `name` is NUL-terminated and `portal` a live portal structure, both outliving it.
    let code = unsafe { (api.remove_persistent)(initiator, port, name.as_ptr(), portal) };
    status(code, 0)
}

pub(super) fn session_devices(
    session: (u64, u64),
    capacity: usize,
) -> Win32Result<Vec<(u32, u32)>> {
    let api = api()?;
    let mut devices = vec![ISCSI_DEVICE_ON_SESSIONW::default(); capacity];
    let mut count = capacity as u32;
    let mut id = session_id(session);
    // SAFETY: `devices` holds `count` structures.
    let code = unsafe { (api.devices)(&mut id, &mut count, devices.as_mut_ptr()) };
    status(code, count as usize)?;
    Ok(devices[..(count as usize).min(capacity)]
        .iter()
        .map(|d| {
            (
                d.StorageDeviceNumber.DeviceType,
                d.StorageDeviceNumber.DeviceNumber,
            )
        })
        .collect())
}

pub(super) fn set_chap_secret(secret: &[u8]) -> Win32Result<()> {
    let api = api()?;
    let mut bytes = secret.to_vec();
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
    status(code, 0)
}
