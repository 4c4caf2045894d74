//! The real [`VirtualDisks`]: one `virtdisk.dll` call per method (linked by the `windows`
//! crate; every Windows since 7 and Server Core ship the DLL, and Wine's has every export, as
//! stubs). Wine answers `OpenVirtualDisk` with ERROR_CALL_NOT_IMPLEMENTED and ends the process
//! in the others, so the selftest asks `OpenVirtualDisk` first.

use super::{handle, os};
use crate::windows::os::Win32Result;
use crate::windows::vhd::VirtualDisks;
use crate::windows::win::{from_wide, wide};
use windows::Win32::Foundation::{CloseHandle, ERROR_SUCCESS, HANDLE, WIN32_ERROR};
use windows::Win32::Storage::FileSystem::{CopyFileW, DeleteFileW};
use windows::Win32::Storage::Vhd::{
    ATTACH_VIRTUAL_DISK_FLAG_NO_DRIVE_LETTER, ATTACH_VIRTUAL_DISK_PARAMETERS,
    ATTACH_VIRTUAL_DISK_VERSION_1, AttachVirtualDisk, CREATE_VIRTUAL_DISK_FLAG_NONE,
    CREATE_VIRTUAL_DISK_PARAMETERS, CREATE_VIRTUAL_DISK_VERSION_2, CreateVirtualDisk,
    DETACH_VIRTUAL_DISK_FLAG_NONE, DetachVirtualDisk, GetVirtualDiskPhysicalPath,
    OPEN_VIRTUAL_DISK_FLAG_NONE, OPEN_VIRTUAL_DISK_PARAMETERS, OPEN_VIRTUAL_DISK_VERSION_1,
    OpenVirtualDisk, RESIZE_VIRTUAL_DISK_FLAG_NONE, RESIZE_VIRTUAL_DISK_PARAMETERS,
    RESIZE_VIRTUAL_DISK_VERSION_1, ResizeVirtualDisk, VIRTUAL_DISK_ACCESS_ALL,
    VIRTUAL_DISK_ACCESS_NONE, VIRTUAL_STORAGE_TYPE, VIRTUAL_STORAGE_TYPE_DEVICE_VHDX,
    VIRTUAL_STORAGE_TYPE_VENDOR_MICROSOFT,
};
use windows::core::{PCWSTR, PWSTR};

/// The virtual disk API of this Windows.
#[derive(Debug, Default)]
pub struct RealVirtualDisks;

/// VIRTUAL_STORAGE_TYPE of a VHDX from Microsoft.
fn vhdx() -> VIRTUAL_STORAGE_TYPE {
    VIRTUAL_STORAGE_TYPE {
        DeviceId: VIRTUAL_STORAGE_TYPE_DEVICE_VHDX,
        VendorId: VIRTUAL_STORAGE_TYPE_VENDOR_MICROSOFT,
    }
}

/// The virtdisk functions return a Win32 code ("If the function succeeds, the return value is
/// ERROR_SUCCESS").
fn status(e: WIN32_ERROR) -> Win32Result<()> {
    if e == ERROR_SUCCESS {
        Ok(())
    } else {
        Err(os(&windows::core::Error::from(e.to_hresult())))
    }
}

fn raw(h: HANDLE) -> u64 {
    h.0 as usize as u64
}

impl VirtualDisks for RealVirtualDisks {
    fn open(&self, path: &str) -> Win32Result<u64> {
        // OpenVirtualDisk (learn.microsoft.com/windows/win32/api/virtdisk/nf-virtdisk-openvirtualdisk):
        // "If the function succeeds, the return value is ERROR_SUCCESS and the Handle parameter
        // contains a valid pointer to the new virtual disk object."
        let path = wide(path);
        let mut params = OPEN_VIRTUAL_DISK_PARAMETERS {
            Version: OPEN_VIRTUAL_DISK_VERSION_1,
            ..Default::default()
        };
        params.Anonymous.Version1.RWDepth = 1;
        let mut h = HANDLE::default();
        // SAFETY: NUL-terminated path, initialised parameters and an out-handle, all live for
        // the call.
        status(unsafe {
            OpenVirtualDisk(
                &vhdx(),
                PCWSTR(path.as_ptr()),
                VIRTUAL_DISK_ACCESS_ALL,
                OPEN_VIRTUAL_DISK_FLAG_NONE,
                Some(&params),
                &mut h,
            )
        })?;
        Ok(raw(h))
    }

    fn create(&self, path: &str, size: u64) -> Win32Result<u64> {
        // CreateVirtualDisk (…/nf-virtdisk-createvirtualdisk): a VHDX needs version 2
        // parameters, and with them "VirtualDiskAccessMask must be VIRTUAL_DISK_ACCESS_NONE";
        // zero block and sector sizes take the defaults; without
        // CREATE_VIRTUAL_DISK_FLAG_FULL_PHYSICAL_ALLOCATION the file grows as it is written.
        let path = wide(path);
        let mut params = CREATE_VIRTUAL_DISK_PARAMETERS {
            Version: CREATE_VIRTUAL_DISK_VERSION_2,
            ..Default::default()
        };
        params.Anonymous.Version2.MaximumSize = size;
        let mut h = HANDLE::default();
        // SAFETY: as in `open`; no parent or source path, no overlapped I/O (synchronous).
        status(unsafe {
            CreateVirtualDisk(
                &vhdx(),
                PCWSTR(path.as_ptr()),
                VIRTUAL_DISK_ACCESS_NONE,
                None,
                CREATE_VIRTUAL_DISK_FLAG_NONE,
                0,
                &params,
                None,
                &mut h,
            )
        })?;
        Ok(raw(h))
    }

    fn attach(&self, h: u64) -> Win32Result<()> {
        // AttachVirtualDisk (…/nf-virtdisk-attachvirtualdisk). Without
        // ATTACH_VIRTUAL_DISK_FLAG_PERMANENT_LIFETIME (ATTACH_VIRTUAL_DISK_FLAG: that flag
        // "decouples the virtual disk lifetime from that of the VirtualDiskHandle") the disk
        // lives as long as the handle, so a selftest that dies leaves no disk behind;
        // ATTACH_VIRTUAL_DISK_FLAG_NO_DRIVE_LETTER: "No drive letters are assigned to the
        // disk's volumes".
        let params = ATTACH_VIRTUAL_DISK_PARAMETERS {
            Version: ATTACH_VIRTUAL_DISK_VERSION_1,
            ..Default::default()
        };
        // SAFETY: a handle from `create`/`open`; initialised parameters; default security.
        status(unsafe {
            AttachVirtualDisk(
                handle(h),
                None,
                ATTACH_VIRTUAL_DISK_FLAG_NO_DRIVE_LETTER,
                0,
                Some(&params),
                None,
            )
        })
    }

    fn physical_path(&self, h: u64) -> Win32Result<String> {
        // GetVirtualDiskPhysicalPath (…/nf-virtdisk-getvirtualdiskphysicalpath): "the path to
        // the physical device object that contains a virtual disk", e.g. \\.\PhysicalDrive3;
        // DiskPathSizeInBytes is the buffer's size in bytes.
        let mut buf = vec![0u16; 512];
        let mut bytes = (buf.len() * 2) as u32;
        // SAFETY: the buffer holds `bytes` bytes and lives for the call.
        status(unsafe {
            GetVirtualDiskPhysicalPath(handle(h), &mut bytes, PWSTR(buf.as_mut_ptr()))
        })?;
        Ok(from_wide(&buf))
    }

    fn resize(&self, h: u64, size: u64) -> Win32Result<()> {
        // ResizeVirtualDisk (…/nf-virtdisk-resizevirtualdisk), version 1 NewSize. With
        // RESIZE_VIRTUAL_DISK_FLAG_NONE a smaller size is checked against the partition table
        // (RESIZE_VIRTUAL_DISK_FLAG: ALLOW_UNSAFE_VIRTUAL_SIZE would "skip checking the virtual
        // disk's partition table"); the selftest only grows.
        let mut params = RESIZE_VIRTUAL_DISK_PARAMETERS {
            Version: RESIZE_VIRTUAL_DISK_VERSION_1,
            ..Default::default()
        };
        params.Anonymous.Version1.NewSize = size;
        // SAFETY: a valid handle and initialised parameters; synchronous.
        status(unsafe {
            ResizeVirtualDisk(handle(h), RESIZE_VIRTUAL_DISK_FLAG_NONE, &params, None)
        })
    }

    fn detach(&self, h: u64) -> Win32Result<()> {
        // DetachVirtualDisk (…/nf-virtdisk-detachvirtualdisk): "All other open handles to the
        // virtual disk must be closed before the DetachVirtualDisk function can succeed"; the
        // selftest holds only this one.
        // SAFETY: a valid handle.
        status(unsafe { DetachVirtualDisk(handle(h), DETACH_VIRTUAL_DISK_FLAG_NONE, 0) })
    }

    fn close_vhd(&self, h: u64) {
        // CloseHandle (…/handleapi/nf-handleapi-closehandle): the virtual disk object's
        // handle; a failure leaves nothing to do.
        // SAFETY: the handle came from `create`/`open` and is closed once.
        let _ = unsafe { CloseHandle(handle(h)) };
    }

    fn delete_vhd_file(&self, path: &str) -> Win32Result<()> {
        // DeleteFileW (…/fileapi/nf-fileapi-deletefilew): "Deletes an existing file."
        let path = wide(path);
        // SAFETY: a NUL-terminated path that lives for the call.
        unsafe { DeleteFileW(PCWSTR(path.as_ptr())) }.map_err(|e| os(&e))
    }

    fn copy_vhd_file(&self, from: &str, to: &str) -> Win32Result<()> {
        // CopyFileW (…/winbase/nf-winbase-copyfilew): "Copies an existing file to a new file";
        // bFailIfExists: "If this parameter is TRUE and the new file specified by
        // lpNewFileName already exists, the function fails."
        let (from, to) = (wide(from), wide(to));
        // SAFETY: two NUL-terminated paths that live for the call.
        unsafe { CopyFileW(PCWSTR(from.as_ptr()), PCWSTR(to.as_ptr()), true) }.map_err(|e| os(&e))
    }
}

// The one code the selftest reads from these calls, checked against the `windows` crate.
const _: () = assert!(
    crate::windows::vhd::CALL_NOT_IMPLEMENTED
        == windows::Win32::Foundation::ERROR_CALL_NOT_IMPLEMENTED.0
);

#[cfg(test)]
mod tests {
    use super::RealVirtualDisks;
    use crate::windows::vhd::{CALL_NOT_IMPLEMENTED, VirtualDisks};
    use crate::windows::win32::running_under_wine;

    /// The selftest's probe: Wine's `OpenVirtualDisk` is not implemented; a real Windows
    /// answers a missing file with something else.
    #[test]
    fn open_virtual_disk_of_a_missing_file_tells_whether_the_service_exists() {
        let path = std::env::temp_dir().join("csi-proxy-no-such-disk.vhdx");
        let e = RealVirtualDisks
            .open(&path.display().to_string())
            .expect_err("the file does not exist");
        if running_under_wine() {
            assert_eq!(e.code, CALL_NOT_IMPLEMENTED, "{e}");
        } else {
            assert_ne!(e.code, CALL_NOT_IMPLEMENTED, "{e}");
        }
    }
}
