//! The real file and directory primitives ([`FileApi`]): one documented Win32 call (or
//! enumeration idiom) per method. Paths arrive without a terminator; each call gets a
//! NUL-terminated copy.

use super::{SystemWin32, handle, os};
use crate::windows::os::files::{DirEntry, FileApi, FileId};
use crate::windows::os::{OsError, Win32Result, code, open_entry};
use std::ffi::c_void;
use windows::Wdk::Foundation::OBJECT_ATTRIBUTES;
use windows::Wdk::Storage::FileSystem::{
    FILE_OPEN, FILE_OPEN_FOR_BACKUP_INTENT, FILE_OPEN_REPARSE_POINT, FILE_SYNCHRONOUS_IO_NONALERT,
    NtCreateFile,
};
use windows::Win32::Foundation::{
    HANDLE, OBJ_CASE_INSENSITIVE, RtlNtStatusToDosError, UNICODE_STRING,
};
use windows::Win32::Storage::FileSystem::{
    CreateDirectoryW, CreateFileW, CreateSymbolicLinkW, DeleteFileW, FILE_ACCESS_RIGHTS,
    FILE_ATTRIBUTE_TAG_INFO, FILE_BASIC_INFO, FILE_DISPOSITION_INFO, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_FLAGS_AND_ATTRIBUTES, FILE_ID_BOTH_DIR_INFO, FILE_ID_INFO,
    FILE_READ_ATTRIBUTES, FILE_SHARE_DELETE, FILE_SHARE_MODE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    FIND_FIRST_EX_FLAGS, FileAttributeTagInfo, FileBasicInfo, FileDispositionInfo,
    FileIdBothDirectoryInfo, FileIdBothDirectoryRestartInfo, FileIdInfo, FindClose,
    FindExInfoBasic, FindExSearchNameMatch, FindFirstFileExW, GetFileAttributesW,
    GetFileInformationByHandleEx, INVALID_FILE_ATTRIBUTES, MAXIMUM_REPARSE_DATA_BUFFER_SIZE,
    MOVE_FILE_FLAGS, MoveFileExW, OPEN_EXISTING, ReadFile, RemoveDirectoryW, SYMBOLIC_LINK_FLAGS,
    SYNCHRONIZE, SetFileInformationByHandle, WIN32_FIND_DATAW,
};
use windows::Win32::System::IO::{DeviceIoControl, IO_STATUS_BLOCK};
use windows::Win32::System::Ioctl::FSCTL_GET_REPARSE_POINT;
use windows::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows::core::{PCWSTR, s, w};

/// `p` NUL-terminated.
fn nul(p: &[u16]) -> Vec<u16> {
    let mut v = Vec::with_capacity(p.len() + 1);
    v.extend_from_slice(p);
    v.push(0);
    v
}

/// The last error of a call that reports failure through its return value.
fn last_error() -> OsError {
    os(&windows::core::Error::from_thread())
}

/// A find handle from FindFirstFileExW, closed with FindClose on drop.
struct FindHandle(HANDLE);

impl Drop for FindHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful FindFirstFileExW, is owned by this value
        // only, and is closed exactly once here.
        let _ = unsafe { FindClose(self.0) };
    }
}

/// `FindFirstFileExW(name, FindExInfoBasic)`: the find handle and the first entry.
fn find_first(name: &[u16]) -> Win32Result<(FindHandle, WIN32_FIND_DATAW)> {
    let name = nul(name);
    let mut data = WIN32_FIND_DATAW::default();
    // SAFETY: `name` is NUL-terminated and outlives the call, `data` is a writable
    // WIN32_FIND_DATAW as FindExInfoBasic requires, and no search filter is passed.
    let h = unsafe {
        FindFirstFileExW(
            PCWSTR(name.as_ptr()),
            FindExInfoBasic,
            (&raw mut data).cast::<c_void>(),
            FindExSearchNameMatch,
            None,
            FIND_FIRST_EX_FLAGS(0),
        )
    }
    .map_err(|e| os(&e))?;
    Ok((FindHandle(h), data))
}

/// Whether this process runs under Wine (`ntdll.dll` exports `wine_get_version`, which no
/// Windows ntdll does). Wine fakes some operations (symbolic links), so tests skip those.
pub fn running_under_wine() -> bool {
    // SAFETY: the module name is a static NUL-terminated UTF-16 string; GetModuleHandleW only
    // looks up a module already loaded (ntdll is mapped into every process) and does not change
    // its reference count, so nothing needs releasing.
    let Ok(ntdll) = (unsafe { GetModuleHandleW(w!("ntdll.dll")) }) else {
        return false;
    };
    // SAFETY: `ntdll` is a valid module handle and the name a static NUL-terminated string;
    // the returned pointer is only tested for presence, never called.
    unsafe { GetProcAddress(ntdll, s!("wine_get_version")) }.is_some()
}

impl FileApi for SystemWin32 {
    fn file_attributes(&self, path: &[u16]) -> Win32Result<u32> {
        let name = nul(path);
        // SAFETY: `name` is NUL-terminated and outlives the call. "If the function fails, the
        // return value is INVALID_FILE_ATTRIBUTES"; GetLastError says why.
        let a = unsafe { GetFileAttributesW(PCWSTR(name.as_ptr())) };
        if a == INVALID_FILE_ATTRIBUTES {
            Err(last_error())
        } else {
            Ok(a)
        }
    }

    fn find_entry(&self, path: &[u16]) -> Win32Result<(u32, u32)> {
        // dwReserved0: "If the dwFileAttributes member includes the
        // FILE_ATTRIBUTE_REPARSE_POINT attribute, this member specifies the reparse tag."
        let (_h, data) = find_first(path)?;
        Ok((data.dwFileAttributes, data.dwReserved0))
    }

    fn open_entry(&self, path: &[u16], access: u32, share: u32, follow: bool) -> Win32Result<u64> {
        let name = nul(path);
        // "You must set this flag to obtain a handle to a directory"; with
        // FILE_FLAG_OPEN_REPARSE_POINT, "normal reparse point processing will not occur".
        let mut flags: FILE_FLAGS_AND_ATTRIBUTES = FILE_FLAG_BACKUP_SEMANTICS;
        if !follow {
            flags |= FILE_FLAG_OPEN_REPARSE_POINT;
        }
        // SAFETY: `name` is NUL-terminated and outlives the call; no security attributes and no
        // template handle are passed.
        let h = unsafe {
            CreateFileW(
                PCWSTR(name.as_ptr()),
                access,
                FILE_SHARE_MODE(share),
                None,
                OPEN_EXISTING,
                flags,
                None,
            )
        }
        .map_err(|e| os(&e))?;
        Ok(h.0 as u64)
    }

    fn attribute_tag(&self, raw: u64) -> Win32Result<(u32, u32)> {
        let mut info = FILE_ATTRIBUTE_TAG_INFO::default();
        // SAFETY: `info` is a writable FILE_ATTRIBUTE_TAG_INFO and its exact size is passed;
        // the handle is open for the duration of the call.
        unsafe {
            GetFileInformationByHandleEx(
                handle(raw),
                FileAttributeTagInfo,
                (&raw mut info).cast::<c_void>(),
                size_of::<FILE_ATTRIBUTE_TAG_INFO>() as u32,
            )
        }
        .map_err(|e| os(&e))?;
        Ok((info.FileAttributes, info.ReparseTag))
    }

    fn file_id(&self, raw: u64) -> Win32Result<FileId> {
        let mut info = FILE_ID_INFO::default();
        // SAFETY: `info` is a writable FILE_ID_INFO and its exact size is passed; the handle is
        // open for the duration of the call. FILE_ID_INFO: "The file identifier and the volume
        // serial number uniquely identify a file on a single computer."
        unsafe {
            GetFileInformationByHandleEx(
                handle(raw),
                FileIdInfo,
                (&raw mut info).cast::<c_void>(),
                size_of::<FILE_ID_INFO>() as u32,
            )
        }
        .map_err(|e| os(&e))?;
        Ok((
            info.VolumeSerialNumber,
            u128::from_le_bytes(info.FileId.Identifier),
        ))
    }

    fn basic_attributes(&self, raw: u64) -> Win32Result<u32> {
        let mut info = FILE_BASIC_INFO::default();
        // SAFETY: `info` is a writable FILE_BASIC_INFO and its exact size is passed.
        unsafe {
            GetFileInformationByHandleEx(
                handle(raw),
                FileBasicInfo,
                (&raw mut info).cast::<c_void>(),
                size_of::<FILE_BASIC_INFO>() as u32,
            )
        }
        .map_err(|e| os(&e))?;
        Ok(info.FileAttributes)
    }

    fn set_basic_attributes(&self, raw: u64, attributes: u32) -> Win32Result<()> {
        // Zero times mean "keep the file's current value" (FILE_BASIC_INFORMATION).
        let update = FILE_BASIC_INFO {
            FileAttributes: attributes,
            ..Default::default()
        };
        // SAFETY: `update` is a readable FILE_BASIC_INFO and its exact size is passed.
        unsafe {
            SetFileInformationByHandle(
                handle(raw),
                FileBasicInfo,
                (&raw const update).cast::<c_void>(),
                size_of::<FILE_BASIC_INFO>() as u32,
            )
        }
        .map_err(|e| os(&e))
    }

    fn reparse_data(&self, path: &[u16]) -> Win32Result<Vec<u8>> {
        let share = FILE_SHARE_READ.0 | FILE_SHARE_WRITE.0 | FILE_SHARE_DELETE.0;
        let h = open_entry(self, path, FILE_READ_ATTRIBUTES.0, share, false)?;
        // The buffer is MAXIMUM_REPARSE_DATA_BUFFER_SIZE, the most the control can return.
        let mut buf = vec![0u8; MAXIMUM_REPARSE_DATA_BUFFER_SIZE as usize];
        let mut returned = 0u32;
        // SAFETY: the output buffer is writable for the length passed, `returned` is a valid
        // out pointer, and the handle was opened without FILE_FLAG_OVERLAPPED so the call is
        // synchronous with no OVERLAPPED structure.
        unsafe {
            DeviceIoControl(
                handle(h.raw()),
                FSCTL_GET_REPARSE_POINT,
                None,
                0,
                Some(buf.as_mut_ptr().cast::<c_void>()),
                buf.len() as u32,
                Some(&raw mut returned),
                None,
            )
        }
        .map_err(|e| os(&e))?;
        buf.truncate(returned as usize);
        Ok(buf)
    }

    fn create_directory(&self, path: &[u16]) -> Win32Result<()> {
        let name = nul(path);
        // SAFETY: `name` is NUL-terminated and outlives the call; default security.
        unsafe { CreateDirectoryW(PCWSTR(name.as_ptr()), None) }.map_err(|e| os(&e))
    }

    fn remove_directory(&self, path: &[u16]) -> Win32Result<()> {
        let name = nul(path);
        // SAFETY: `name` is NUL-terminated and outlives the call. "When lpPathName refers to a
        // directory junction, RemoveDirectory will remove the specified link regardless of
        // whether the target directory is empty or not."
        unsafe { RemoveDirectoryW(PCWSTR(name.as_ptr())) }.map_err(|e| os(&e))
    }

    fn delete_file(&self, path: &[u16]) -> Win32Result<()> {
        let name = nul(path);
        // SAFETY: `name` is NUL-terminated and outlives the call. "If the path points to a
        // symbolic link, the symbolic link is deleted, not the target."
        unsafe { DeleteFileW(PCWSTR(name.as_ptr())) }.map_err(|e| os(&e))
    }

    fn rename_entry(&self, from: &[u16], to: &[u16]) -> Win32Result<()> {
        let (from, to) = (nul(from), nul(to));
        // SAFETY: both strings are NUL-terminated and outlive the call. Flags 0: no
        // MOVEFILE_REPLACE_EXISTING (an entry at `to` fails the call), no MOVEFILE_COPY_ALLOWED
        // (a move to another volume fails rather than copying).
        unsafe {
            MoveFileExW(
                PCWSTR(from.as_ptr()),
                PCWSTR(to.as_ptr()),
                MOVE_FILE_FLAGS(0),
            )
        }
        .map_err(|e| os(&e))
    }

    fn create_symbolic_link(&self, link: &[u16], target: &[u16], flags: u32) -> Win32Result<()> {
        let (link, target) = (nul(link), nul(target));
        // SAFETY: both strings are NUL-terminated and outlive the call. The return is a
        // BOOLEAN; on failure GetLastError says why.
        let ok = unsafe {
            CreateSymbolicLinkW(
                PCWSTR(link.as_ptr()),
                PCWSTR(target.as_ptr()),
                SYMBOLIC_LINK_FLAGS(flags),
            )
        };
        if ok { Ok(()) } else { Err(last_error()) }
    }

    fn open_child(&self, dir: u64, name: &[u16], access: u32, share: u32) -> Win32Result<u64> {
        let bytes =
            u16::try_from(name.len() * 2).map_err(|_| OsError::new(code::INVALID_PARAMETER))?;
        let name_string = UNICODE_STRING {
            Length: bytes,
            MaximumLength: bytes,
            Buffer: windows::core::PWSTR(name.as_ptr().cast_mut()),
        };
        let attributes = OBJECT_ATTRIBUTES {
            Length: size_of::<OBJECT_ATTRIBUTES>() as u32,
            RootDirectory: handle(dir),
            ObjectName: &raw const name_string,
            Attributes: OBJ_CASE_INSENSITIVE,
            ..Default::default()
        };
        let mut h = HANDLE::default();
        let mut status_block = IO_STATUS_BLOCK::default();
        // FILE_OPEN_REPARSE_POINT: "Open a file with a reparse point and bypass normal reparse
        // point processing for the file"; FILE_OPEN_FOR_BACKUP_INTENT opens a directory as
        // FILE_FLAG_BACKUP_SEMANTICS does; SYNCHRONIZE with FILE_SYNCHRONOUS_IO_NONALERT makes
        // the handle synchronous, as CreateFileW's are.
        let options =
            FILE_OPEN_REPARSE_POINT | FILE_OPEN_FOR_BACKUP_INTENT | FILE_SYNCHRONOUS_IO_NONALERT;
        // SAFETY: every pointer (the handle out, the attributes, the name they point to, the
        // status block) is valid for the call; the name is not read past `Length`; no
        // allocation size and no extended attributes are passed.
        let status = unsafe {
            NtCreateFile(
                &raw mut h,
                FILE_ACCESS_RIGHTS(access) | SYNCHRONIZE,
                &raw const attributes,
                &raw mut status_block,
                None,
                FILE_FLAGS_AND_ATTRIBUTES(0),
                FILE_SHARE_MODE(share),
                FILE_OPEN,
                options,
                None,
                0,
            )
        };
        if status.is_err() {
            // SAFETY: a pure conversion of a status code.
            return Err(OsError::new(unsafe { RtlNtStatusToDosError(status) }));
        }
        Ok(h.0 as u64)
    }

    fn read_dir(&self, dir: u64, restart: bool, buffer: usize) -> Win32Result<Vec<DirEntry>> {
        let class = if restart {
            FileIdBothDirectoryRestartInfo
        } else {
            FileIdBothDirectoryInfo
        };
        // u64s keep the records 8-byte aligned, as the structure needs.
        let mut buf = vec![0u64; buffer.div_ceil(8)];
        let len =
            u32::try_from(buf.len() * 8).map_err(|_| OsError::new(code::INVALID_PARAMETER))?;
        // SAFETY: the buffer is writable for `len` bytes and the handle is open.
        let r = unsafe {
            GetFileInformationByHandleEx(handle(dir), class, buf.as_mut_ptr().cast::<c_void>(), len)
        }
        .map_err(|e| os(&e));
        match r {
            // The listing is done.
            Err(e) if e.code == code::NO_MORE_FILES => return Ok(Vec::new()),
            Err(e) => return Err(e),
            Ok(()) => {}
        }
        let bytes: &[u8] = bytemuck_bytes(&buf);
        let name_at = std::mem::offset_of!(FILE_ID_BOTH_DIR_INFO, FileName);
        let mut entries = Vec::new();
        let mut at = 0usize;
        loop {
            let Some(record) = bytes.get(at..at + name_at) else {
                return Err(OsError::new(code::INVALID_PARAMETER));
            };
            // SAFETY: `record` holds the fixed part of one FILE_ID_BOTH_DIR_INFO, read unaligned.
            let info: FILE_ID_BOTH_DIR_INFO =
                unsafe { std::ptr::read_unaligned(record.as_ptr().cast()) };
            let start = at + name_at;
            let Some(name) = bytes.get(start..start + info.FileNameLength as usize) else {
                return Err(OsError::new(code::INVALID_PARAMETER));
            };
            entries.push(DirEntry {
                name: name
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
                attributes: info.FileAttributes,
                file_id: info.FileId as u64,
            });
            // "Contains zero (0) if no other entries follow this one."
            if info.NextEntryOffset == 0 {
                return Ok(entries);
            }
            at += info.NextEntryOffset as usize;
        }
    }

    fn delete_on_close(&self, raw: u64) -> Win32Result<()> {
        let info = FILE_DISPOSITION_INFO { DeleteFile: true };
        // SAFETY: `info` is a readable FILE_DISPOSITION_INFO and its exact size is passed. "A
        // file marked for deletion is not actually deleted until all open handles for the file
        // object have been closed".
        unsafe {
            SetFileInformationByHandle(
                handle(raw),
                FileDispositionInfo,
                (&raw const info).cast::<c_void>(),
                size_of::<FILE_DISPOSITION_INFO>() as u32,
            )
        }
        .map_err(|e| os(&e))
    }

    fn read_handle(&self, raw: u64, max: usize) -> Win32Result<Vec<u8>> {
        // nNumberOfBytesToRead is a DWORD.
        let mut buf = vec![0u8; max.min(u32::MAX as usize)];
        let mut got = 0u32;
        // SAFETY: `buf` is writable for its length and outlives the call, `got` is a valid out
        // pointer; the handle was opened without FILE_FLAG_OVERLAPPED and no OVERLAPPED is
        // passed, so the read is synchronous, from the handle's file pointer, which it
        // advances.
        unsafe { ReadFile(handle(raw), Some(&mut buf), Some(&raw mut got), None) }
            .map_err(|e| os(&e))?;
        // At the end of the file, "ReadFile returns TRUE and sets *lpNumberOfBytesRead to
        // zero".
        buf.truncate(got as usize);
        Ok(buf)
    }

    fn dacl_sddl(&self, path: &[u16]) -> Win32Result<String> {
        use windows::Win32::Foundation::{HLOCAL, LocalFree};
        use windows::Win32::Security::Authorization::{
            ConvertSecurityDescriptorToStringSecurityDescriptorW, GetNamedSecurityInfoW,
            SDDL_REVISION_1, SE_FILE_OBJECT,
        };
        use windows::Win32::Security::{DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR};
        let name = nul(path);
        let mut sd = PSECURITY_DESCRIPTOR::default();
        // SAFETY: `name` is NUL-terminated and outlives the call; `sd` receives a descriptor
        // "you must call the LocalFree function to free", freed below.
        let e = unsafe {
            GetNamedSecurityInfoW(
                PCWSTR(name.as_ptr()),
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION,
                None,
                None,
                None,
                None,
                &mut sd,
            )
        };
        if e.0 != 0 {
            return Err(OsError::new(e.0));
        }
        let mut text = windows::core::PWSTR::null();
        // SAFETY: `sd` is the descriptor just returned; `text` receives a LocalAlloc'ed string
        // ("To free the returned buffer, call the LocalFree function"), freed below.
        let r = unsafe {
            ConvertSecurityDescriptorToStringSecurityDescriptorW(
                sd,
                SDDL_REVISION_1,
                DACL_SECURITY_INFORMATION,
                &mut text,
                None,
            )
        };
        // SAFETY: `text` is NUL-terminated when the conversion succeeded, and read before it
        // is freed.
        let out = r.map(|()| unsafe { text.to_string() }.unwrap_or_default());
        // SAFETY: both buffers came from calls documenting LocalFree as their release, and each
        // is freed once, after its last use.
        unsafe {
            if !text.is_null() {
                LocalFree(Some(HLOCAL(text.0.cast())));
            }
            LocalFree(Some(HLOCAL(sd.0)));
        }
        out.map_err(|e| os(&e))
    }
}

/// The bytes of a buffer of `u64`s.
fn bytemuck_bytes(buf: &[u64]) -> &[u8] {
    // SAFETY: any initialised u64 slice is a valid byte slice of 8 times its length, with the
    // same lifetime.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * 8) }
}
