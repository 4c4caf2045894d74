//! The real [`Win32`] seam: one documented Win32 (or WMI) call per method, nothing else. Every
//! decision lives above it, in the hosts' logic, where the simulated Windows tests it.
#![allow(
    unsafe_code,
    reason = "the real Win32 seam: its whole job is FFI calls, each with a SAFETY comment"
)]

pub mod console;
mod event_log;
mod files;
mod iscsi;
mod registry;
mod scm;
pub mod state_dir;
pub mod vhd;
mod wmi_calls;

pub use event_log::{EventSource, EventType};
pub use files::running_under_wine;
use wmi_calls::wmi_os;

use super::os::{
    Access, IscsiSession, OsError, PersistentLogin, ReturnValue, StorageDisk, Win32, Win32Result,
    code,
};
use super::win::{from_wide, wide};
use std::ffi::c_void;
use std::time::{Duration, Instant};
use uuid::Uuid;
use windows::Win32::Devices::DeviceAndDriverInstallation::{
    CM_GET_DEVICE_INTERFACE_LIST_PRESENT, CM_Get_Device_Interface_List_SizeW,
    CM_Get_Device_Interface_ListW, CM_LOCATE_DEVNODE_NORMAL, CM_Locate_DevNodeW,
    CM_REENUMERATE_SYNCHRONOUS, CM_Reenumerate_DevNode, CR_BUFFER_SMALL, CR_SUCCESS,
};
use windows::Win32::Foundation::{CloseHandle, GENERIC_READ, GENERIC_WRITE, HANDLE, WIN32_ERROR};
use windows::Win32::Storage::FileSystem::{
    CreateFileW, DeleteVolumeMountPointW, FILE_ATTRIBUTE_NORMAL, FILE_SHARE_READ, FILE_SHARE_WRITE,
    FindFirstVolumeW, FindNextVolumeW, FindVolumeClose, FlushFileBuffers, GetDiskFreeSpaceExW,
    GetDriveTypeW, GetVolumeInformationW, GetVolumeNameForVolumeMountPointW, GetVolumePathNameW,
    GetVolumePathNamesForVolumeNameW, OPEN_EXISTING, ReadFile, SetVolumeMountPointW,
};
use windows::Win32::System::IO::{DeviceIoControl, OVERLAPPED};
use windows::Win32::System::Ioctl::GUID_DEVINTERFACE_DISK;
use windows::Win32::System::SystemInformation::GetSystemDirectoryW;
use windows::core::{GUID, PCWSTR};

// The I/O control codes and structure sizes the logic uses are plain numbers (so it compiles
// everywhere); here they are checked against the `windows` crate's definitions.
const _: () = {
    use csi_proxy_formats::windows_buffers::ioctl as io;
    use windows::Win32::System::Ioctl as w;
    assert!(io::DISK_GET_DRIVE_GEOMETRY_EX == w::IOCTL_DISK_GET_DRIVE_GEOMETRY_EX);
    assert!(io::DISK_GET_DRIVE_LAYOUT_EX == w::IOCTL_DISK_GET_DRIVE_LAYOUT_EX);
    assert!(io::DISK_SET_DRIVE_LAYOUT_EX == w::IOCTL_DISK_SET_DRIVE_LAYOUT_EX);
    assert!(io::DISK_CREATE_DISK == w::IOCTL_DISK_CREATE_DISK);
    assert!(io::DISK_GET_LENGTH_INFO == w::IOCTL_DISK_GET_LENGTH_INFO);
    assert!(io::DISK_GET_PARTITION_INFO_EX == w::IOCTL_DISK_GET_PARTITION_INFO_EX);
    assert!(io::DISK_GROW_PARTITION == w::IOCTL_DISK_GROW_PARTITION);
    assert!(io::DISK_UPDATE_DRIVE_SIZE == w::IOCTL_DISK_UPDATE_DRIVE_SIZE);
    assert!(io::DISK_UPDATE_PROPERTIES == w::IOCTL_DISK_UPDATE_PROPERTIES);
    assert!(io::DISK_GET_DISK_ATTRIBUTES == w::IOCTL_DISK_GET_DISK_ATTRIBUTES);
    assert!(io::DISK_SET_DISK_ATTRIBUTES == w::IOCTL_DISK_SET_DISK_ATTRIBUTES);
    assert!(io::STORAGE_QUERY_PROPERTY == w::IOCTL_STORAGE_QUERY_PROPERTY);
    assert!(io::STORAGE_GET_DEVICE_NUMBER == w::IOCTL_STORAGE_GET_DEVICE_NUMBER);
    assert!(io::FSCTL_EXTEND_VOLUME == w::FSCTL_EXTEND_VOLUME);
    assert!(io::DISK_ATTRIBUTE_OFFLINE == w::DISK_ATTRIBUTE_OFFLINE);
    assert!(io::DISK_ATTRIBUTE_READ_ONLY == w::DISK_ATTRIBUTE_READ_ONLY);
    assert!(io::CREATE_DISK_SIZE == size_of::<w::CREATE_DISK>());
    assert!(io::SET_DISK_ATTRIBUTES_SIZE == size_of::<w::SET_DISK_ATTRIBUTES>());
};

/// The Windows this process runs on.
#[derive(Debug)]
pub struct SystemWin32 {
    start: Instant,
}

impl Default for SystemWin32 {
    fn default() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

/// A `windows` error as the seam's [`OsError`]: the Win32 code inside an HRESULT_FROM_WIN32,
/// else the HRESULT itself.
fn os(e: &windows::core::Error) -> OsError {
    let c = WIN32_ERROR::from_error(e).map_or(e.code().0 as u32, |c| c.0);
    OsError::with_message(c, e.message())
}

/// A UTF-16 MULTI_SZ list (strings separated by NUL, ended by an empty one).
fn multi_sz(buf: &[u16]) -> Vec<String> {
    buf.split(|&c| c == 0)
        .take_while(|p| !p.is_empty())
        .map(String::from_utf16_lossy)
        .collect()
}

fn handle(raw: u64) -> HANDLE {
    HANDLE(raw as usize as *mut c_void)
}

/// A CONFIGRET failure as an OsError (CONFIGRET values are not Win32 codes: CR_ACCESS_DENIED
/// is 0x33, reported as ERROR_ACCESS_DENIED so it reads as PERMISSION_DENIED).
fn configret(call: &str, cr: u32) -> OsError {
    let c = if cr == 0x33 {
        code::ACCESS_DENIED
    } else {
        0x8000_FFFF
    };
    OsError::with_message(c, format!("{call} failed with CONFIGRET {cr}"))
}

impl Win32 for SystemWin32 {
    fn open_raw(&self, path: &str, access: Access) -> Win32Result<u64> {
        let w = wide(path);
        // 0 is "query access": no filesystem is mounted for the open, so a drive without media
        // or a volume locked by another process still answers its FILE_ANY_ACCESS controls.
        let access = match access {
            Access::Query => 0,
            Access::Read => GENERIC_READ.0,
            Access::ReadWrite => GENERIC_READ.0 | GENERIC_WRITE.0,
        };
        // SAFETY: `w` is NUL-terminated and outlives the call. Sharing read and write lets the
        // volume manager and WMI keep working, as CreateFile requires for physical disks ("the
        // dwShareMode parameter must have the FILE_SHARE_WRITE flag").
        let h = unsafe {
            CreateFileW(
                PCWSTR(w.as_ptr()),
                access,
                FILE_SHARE_READ | FILE_SHARE_WRITE,
                None,
                OPEN_EXISTING,
                FILE_ATTRIBUTE_NORMAL,
                None,
            )
        }
        .map_err(|e| os(&e))?;
        Ok(h.0 as usize as u64)
    }

    fn close(&self, raw: u64) {
        // SAFETY: `raw` came from a successful CreateFileW and is closed exactly once (by the
        // seam's Handle drop); a failure to close leaves nothing to do.
        let _ = unsafe { CloseHandle(handle(raw)) };
    }

    fn device_io_control(
        &self,
        raw: u64,
        ioctl: u32,
        input: &[u8],
        out_len: usize,
    ) -> Win32Result<Vec<u8>> {
        // u64 storage keeps the output 8-byte aligned like the structures it receives.
        let mut buf = vec![0u64; out_len.div_ceil(8)];
        let mut returned = 0u32;
        // SAFETY: input and output point to live buffers of the sizes passed; the handle was
        // opened without FILE_FLAG_OVERLAPPED, so the call is synchronous.
        unsafe {
            DeviceIoControl(
                handle(raw),
                ioctl,
                (!input.is_empty()).then_some(input.as_ptr().cast::<c_void>()),
                u32::try_from(input.len()).unwrap_or(u32::MAX),
                (out_len > 0).then_some(buf.as_mut_ptr().cast::<c_void>()),
                u32::try_from(out_len).unwrap_or(u32::MAX),
                Some(&mut returned),
                None,
            )
        }
        .map_err(|e| os(&e))?;
        // SAFETY: `buf` holds at least `out_len` initialised bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), out_len) };
        Ok(bytes[..(returned as usize).min(out_len)].to_vec())
    }

    fn read_at(&self, raw: u64, offset: u64, len: usize) -> Win32Result<Vec<u8>> {
        // Disk and volume handles do noncached I/O, whose buffers must be aligned to the
        // physical sector ("File Buffering"); 4 KiB covers 512-byte, 512e and 4Kn disks.
        const ALIGN: usize = 4096;
        let mut storage = vec![0u8; len + ALIGN];
        let pad = storage.as_ptr().align_offset(ALIGN).min(ALIGN);
        let buf = &mut storage[pad..pad + len];
        let mut overlapped = OVERLAPPED::default();
        overlapped.Anonymous.Anonymous.Offset = offset as u32;
        overlapped.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
        let mut got = 0u32;
        // SAFETY: `buf` is writable for its length and outlives the call; the handle was opened
        // without FILE_FLAG_OVERLAPPED, so with an OVERLAPPED "the read operation starts at the
        // offset that is specified in the OVERLAPPED structure" and completes before returning.
        unsafe {
            ReadFile(
                handle(raw),
                Some(buf),
                Some(&raw mut got),
                Some(&raw mut overlapped),
            )
        }
        .map_err(|e| os(&e))?;
        Ok(storage[pad..pad + (got as usize).min(len)].to_vec())
    }

    fn flush(&self, raw: u64) -> Win32Result<()> {
        // SAFETY: a live handle; on a volume opened for write, FlushFileBuffers "flushes all
        // open files on the volume".
        unsafe { FlushFileBuffers(handle(raw)) }.map_err(|e| os(&e))
    }

    fn volumes(&self) -> Win32Result<Vec<String>> {
        let mut out = Vec::new();
        let mut buf = [0u16; 64];
        // SAFETY: `buf` is writable for its length (a volume GUID path is 49 units with NUL).
        let find = unsafe { FindFirstVolumeW(&mut buf) }.map_err(|e| os(&e))?;
        loop {
            out.push(from_wide(&buf));
            // SAFETY: `find` is live; `buf` is writable. ERROR_NO_MORE_FILES after the last.
            if let Err(e) = unsafe { FindNextVolumeW(find, &mut buf) } {
                // SAFETY: closes the handle FindFirstVolumeW returned, once.
                let _ = unsafe { FindVolumeClose(find) };
                let e = os(&e);
                return if e.code == code::NO_MORE_FILES {
                    Ok(out)
                } else {
                    Err(e)
                };
            }
        }
    }

    fn volume_name_for_mount_point(&self, mount_point: &str) -> Win32Result<String> {
        let mp = wide(mount_point);
        let mut buf = [0u16; 64];
        // SAFETY: `mp` is NUL-terminated and ends in a backslash as the function requires;
        // 50 units are documented as enough for a volume GUID path.
        unsafe { GetVolumeNameForVolumeMountPointW(PCWSTR(mp.as_ptr()), &mut buf) }
            .map_err(|e| os(&e))?;
        Ok(from_wide(&buf))
    }

    fn volume_path_names(&self, volume: &str, capacity: usize) -> Win32Result<Vec<String>> {
        let w = wide(volume);
        let mut buf = vec![0u16; capacity.max(1)];
        let mut needed = 0u32;
        // SAFETY: `w` is NUL-terminated with the trailing backslash the function requires;
        // `needed` receives the length required when the buffer is too small (ERROR_MORE_DATA).
        match unsafe {
            GetVolumePathNamesForVolumeNameW(PCWSTR(w.as_ptr()), Some(&mut buf), &mut needed)
        } {
            Ok(()) => Ok(multi_sz(&buf)),
            Err(e) => {
                let mut e = os(&e);
                e.needed = needed as usize;
                Err(e)
            }
        }
    }

    fn volume_path_name(&self, path: &str) -> Win32Result<String> {
        let w = wide(path);
        // The answer is a prefix of the path plus at most a separator.
        let mut root = vec![0u16; path.len() + 64];
        // SAFETY: `w` is NUL-terminated; `root` is writable for its length.
        unsafe { GetVolumePathNameW(PCWSTR(w.as_ptr()), &mut root) }.map_err(|e| os(&e))?;
        Ok(from_wide(&root))
    }

    fn volume_information(&self, root: &str) -> Win32Result<(String, u32)> {
        let w = wide(root);
        let mut fs = [0u16; 64];
        let mut serial = 0u32;
        // SAFETY: `w` is a NUL-terminated root with its trailing backslash; `fs` is writable
        // (filesystem names are short; a longer one fails rather than overflows).
        unsafe {
            GetVolumeInformationW(
                PCWSTR(w.as_ptr()),
                None,
                Some(&mut serial),
                None,
                None,
                Some(&mut fs),
            )
        }
        .map_err(|e| os(&e))?;
        Ok((from_wide(&fs), serial))
    }

    fn drive_type(&self, root: &str) -> Win32Result<u32> {
        let w = wide(root);
        // SAFETY: `w` is NUL-terminated. GetDriveTypeW cannot fail: a root it cannot resolve is
        // DRIVE_NO_ROOT_DIR ("The root path is invalid"), an unknown kind DRIVE_UNKNOWN.
        Ok(unsafe { GetDriveTypeW(PCWSTR(w.as_ptr())) })
    }

    fn disk_free_space(&self, root: &str) -> Win32Result<(u64, u64)> {
        let w = wide(root);
        let (mut total, mut free) = (0u64, 0u64);
        // SAFETY: `w` is NUL-terminated (a volume GUID path works unmounted too); the outputs
        // are valid u64s. Total free bytes are asked for, not the caller's quota.
        unsafe {
            GetDiskFreeSpaceExW(
                PCWSTR(w.as_ptr()),
                None,
                Some(&raw mut total),
                Some(&raw mut free),
            )
        }
        .map_err(|e| os(&e))?;
        Ok((total, free))
    }

    fn set_volume_mount_point(&self, mount_point: &str, volume: &str) -> Win32Result<()> {
        let (mp, vol) = (wide(mount_point), wide(volume));
        // SAFETY: both NUL-terminated and ending in a backslash ("the string must end with a
        // trailing backslash"). A non-empty directory fails with ERROR_DIR_NOT_EMPTY.
        unsafe { SetVolumeMountPointW(PCWSTR(mp.as_ptr()), PCWSTR(vol.as_ptr())) }
            .map_err(|e| os(&e))
    }

    fn delete_volume_mount_point(&self, mount_point: &str) -> Win32Result<()> {
        let mp = wide(mount_point);
        // SAFETY: NUL-terminated with the trailing backslash the function requires.
        unsafe { DeleteVolumeMountPointW(PCWSTR(mp.as_ptr())) }.map_err(|e| os(&e))
    }

    fn system_directory(&self) -> Win32Result<String> {
        let mut dir = [0u16; 260];
        // SAFETY: the buffer is writable for its length; the return is the length copied.
        let n = unsafe { GetSystemDirectoryW(Some(&mut dir)) } as usize;
        if n == 0 || n >= dir.len() {
            return Err(OsError::with_message(
                0x8000_FFFF,
                "GetSystemDirectoryW failed",
            ));
        }
        Ok(from_wide(&dir))
    }

    fn new_guid(&self) -> Win32Result<Uuid> {
        let g = GUID::new().map_err(|e| os(&e))?;
        Ok(Uuid::from_fields(g.data1, g.data2, g.data3, &g.data4))
    }

    fn disk_interfaces(&self) -> Win32Result<Vec<String>> {
        // The list can grow between the size query and the fetch; the documented answer is
        // CR_BUFFER_SMALL, and the pair is repeated.
        for _ in 0..8 {
            let mut len = 0u32;
            // SAFETY: `len` is a valid out pointer; the GUID is a static.
            let cr = unsafe {
                CM_Get_Device_Interface_List_SizeW(
                    &mut len,
                    &GUID_DEVINTERFACE_DISK,
                    PCWSTR::null(),
                    CM_GET_DEVICE_INTERFACE_LIST_PRESENT,
                )
            };
            if cr != CR_SUCCESS {
                return Err(configret("CM_Get_Device_Interface_List_SizeW", cr.0));
            }
            let mut buf = vec![0u16; len.max(1) as usize];
            // SAFETY: `buf` is writable for the length the size call gave.
            let cr = unsafe {
                CM_Get_Device_Interface_ListW(
                    &GUID_DEVINTERFACE_DISK,
                    PCWSTR::null(),
                    &mut buf,
                    CM_GET_DEVICE_INTERFACE_LIST_PRESENT,
                )
            };
            if cr == CR_BUFFER_SMALL {
                continue;
            }
            if cr != CR_SUCCESS {
                return Err(configret("CM_Get_Device_Interface_ListW", cr.0));
            }
            return Ok(multi_sz(&buf));
        }
        Err(configret(
            "CM_Get_Device_Interface_ListW",
            CR_BUFFER_SMALL.0,
        ))
    }

    fn reenumerate_devices(&self) -> Win32Result<()> {
        let mut root = 0u32;
        // SAFETY: `root` is a valid out pointer; a null device ID "supplies a device instance
        // handle to the device at the root of the device tree".
        let cr =
            unsafe { CM_Locate_DevNodeW(&raw mut root, PCWSTR::null(), CM_LOCATE_DEVNODE_NORMAL) };
        if cr != CR_SUCCESS {
            return Err(configret("CM_Locate_DevNodeW", cr.0));
        }
        // SAFETY: `root` is the devnode just located. CM_REENUMERATE_SYNCHRONOUS returns once
        // the subtree is enumerated (new disks may still be starting).
        let cr = unsafe { CM_Reenumerate_DevNode(root, CM_REENUMERATE_SYNCHRONOUS) };
        if cr != CR_SUCCESS {
            return Err(configret("CM_Reenumerate_DevNode", cr.0));
        }
        Ok(())
    }

    fn page_files(&self) -> Win32Result<Vec<String>> {
        wmi_calls::page_files()
    }

    fn storage_disks(&self) -> Win32Result<Vec<StorageDisk>> {
        wmi_calls::storage_disks()
    }

    fn physical_disks(&self) -> Win32Result<Vec<(String, Vec<u16>)>> {
        wmi_calls::physical_disks()
    }

    fn crash_control(&self, name: &str) -> Win32Result<Option<String>> {
        registry::crash_control(name)
    }

    fn format_ntfs(&self, volume: &str) -> Win32Result<ReturnValue> {
        wmi_calls::format_ntfs(volume)
    }

    fn update_host_storage_cache(&self) -> Win32Result<ReturnValue> {
        wmi_calls::update_host_storage_cache()
    }

    fn smb_global_mappings(&self) -> Win32Result<Vec<(String, u32)>> {
        wmi_calls::smb_global_mappings()
    }

    fn smb_create_global_mapping(
        &self,
        remote: &str,
        require_privacy: bool,
        credential: Option<&str>,
    ) -> Win32Result<ReturnValue> {
        wmi_calls::smb_create_global_mapping(remote, require_privacy, credential)
    }

    fn smb_remove_global_mapping(&self, remote: &str) -> Win32Result<ReturnValue> {
        wmi_calls::smb_remove_global_mapping(remote)
    }

    fn dir_opens(&self, dir: &str) -> Win32Result<()> {
        // std's metadata is GetFileAttributesExW (then CreateFileW for a link): it fails when
        // the path cannot be reached, with the Win32 error as its raw OS error.
        std::fs::metadata(dir)
            .map(drop)
            .map_err(|e| OsError::new(e.raw_os_error().unwrap_or(0) as u32))
    }

    fn links_below(&self, roots: &[String]) -> (Vec<(String, String)>, Option<String>) {
        let scan = crate::smb_scan::links_using(roots, |_, _| true);
        let links = scan
            .links
            .into_iter()
            .map(|(link, target)| (link, target.to_string_lossy().into_owned()))
            .collect();
        (links, scan.incomplete)
    }

    fn service_state(&self, name: &str) -> Win32Result<u32> {
        scm::service_state(name)
    }

    fn service_config(&self, name: &str) -> Win32Result<(String, u32)> {
        scm::service_config(name)
    }

    fn service_failure_flag(&self, name: &str) -> Win32Result<bool> {
        scm::service_failure_flag(name)
    }

    fn service_start(&self, name: &str) -> Win32Result<()> {
        scm::service_start(name)
    }

    fn service_stop(&self, name: &str) -> Win32Result<()> {
        scm::service_stop(name)
    }

    fn service_create(&self, name: &str, command_line: &str) -> Win32Result<()> {
        scm::service_create(name, command_line)
    }

    fn service_delete(&self, name: &str) -> Win32Result<()> {
        scm::service_delete(name)
    }

    fn service_active_dependents(&self, name: &str) -> Win32Result<Vec<String>> {
        scm::service_active_dependents(name)
    }

    fn smbios_table(&self) -> Win32Result<Option<Vec<u8>>> {
        scm::smbios_table()
    }

    fn wmi_bios_serial(&self) -> Win32Result<String> {
        scm::wmi_bios_serial()
    }

    fn iscsi_available(&self) -> std::result::Result<(), String> {
        iscsi::available()
    }

    fn iscsi_add_portal(&self, address: &str, port: u16) -> Win32Result<()> {
        iscsi::add_portal(address, port)
    }

    fn iscsi_remove_portal(&self, address: &str, port: u16) -> Win32Result<()> {
        iscsi::remove_portal(address, port)
    }

    fn iscsi_portals(&self, capacity: usize) -> Win32Result<Vec<(String, u16)>> {
        iscsi::portals(capacity)
    }

    fn iscsi_targets(&self, force_update: bool, capacity: usize) -> Win32Result<Vec<String>> {
        iscsi::targets(force_update, capacity)
    }

    fn iscsi_discovery_mechanisms(&self, iqn: &str, capacity: usize) -> Win32Result<Vec<String>> {
        iscsi::discovery_mechanisms(iqn, capacity)
    }

    fn iscsi_sessions(&self, capacity: usize) -> Win32Result<Vec<IscsiSession>> {
        iscsi::sessions(capacity)
    }

    fn iscsi_login(
        &self,
        iqn: &str,
        address: &str,
        port: u16,
        auth: &csi_proxy_formats::windows_buffers::iscsi::LoginAuth,
        flags: u32,
    ) -> Win32Result<()> {
        iscsi::login(iqn, address, port, auth, flags)
    }

    fn iscsi_logout(&self, session: (u64, u64)) -> Win32Result<()> {
        iscsi::logout(session)
    }

    fn iscsi_persistent_logins(&self, capacity: usize) -> Win32Result<Vec<PersistentLogin>> {
        iscsi::persistent_logins(capacity)
    }

    fn iscsi_remove_persistent_target(&self, login: &PersistentLogin) -> Win32Result<()> {
        iscsi::remove_persistent_target(login)
    }

    fn iscsi_remove_persistent_target_without_initiator(&self, iqn: &str) -> Win32Result<()> {
        iscsi::remove_persistent_target_without_initiator(iqn)
    }

    fn iscsi_session_devices(
        &self,
        session: (u64, u64),
        capacity: usize,
    ) -> Win32Result<Vec<(u32, u32)>> {
        iscsi::session_devices(session, capacity)
    }

    fn iscsi_set_chap_secret(&self, secret: &[u8]) -> Win32Result<()> {
        iscsi::set_chap_secret(secret)
    }

    fn reset_wmi(&self) {
        super::wmi::reset();
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}
