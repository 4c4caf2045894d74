//! The real [`StateDirOs`]: the state directory's folders created, inspected and restricted
//! through documented security calls, one per method (with the open it needs).

use crate::windows::state_dir::{Facts, Owner, StateDirOs};
use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::{MetadataExt, OpenOptionsExt};
use std::os::windows::io::AsRawHandle;
use std::path::Path;
use windows::Win32::Foundation::{HANDLE, HLOCAL, LocalFree, WIN32_ERROR};
use windows::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, GetSecurityInfo,
    SDDL_REVISION_1, SE_FILE_OBJECT, SetSecurityInfo,
};
use windows::Win32::Security::{
    ACL, DACL_SECURITY_INFORMATION, EqualSid, GetSecurityDescriptorDacl, GetTokenInformation,
    IsWellKnownSid, OWNER_SECURITY_INFORMATION, PROTECTED_DACL_SECURITY_INFORMATION,
    PSECURITY_DESCRIPTOR, PSID, SECURITY_ATTRIBUTES, TOKEN_QUERY, TOKEN_USER, TokenUser,
    WinBuiltinAdministratorsSid, WinLocalSystemSid,
};
use windows::Win32::Storage::FileSystem::{
    CreateDirectoryW, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
};
use windows::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};
use windows::core::{PCWSTR, PWSTR};

/// Full control for SYSTEM and Administrators, inherited by files and folders made inside
/// (OICI), and protected (`P`) from the parent's entries.
const PRIVATE_SDDL: &str = "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)";

/// READ_CONTROL and WRITE_DAC: what reading the owner and setting the DACL through a handle need.
const READ_CONTROL_WRITE_DAC: u32 = 0x0002_0000 | 0x0004_0000;

/// The state directory's Windows calls.
#[derive(Debug, Default)]
pub struct SystemStateDir;

/// A LocalAlloc'ed security descriptor, freed with LocalFree as the functions returning one say.
struct Descriptor(PSECURITY_DESCRIPTOR);

impl Drop for Descriptor {
    fn drop(&mut self) {
        if !self.0.0.is_null() {
            // SAFETY: the descriptor came from a call documenting LocalFree as its release, is
            // owned by this value only, and is freed once.
            unsafe {
                LocalFree(Some(HLOCAL(self.0.0)));
            }
        }
    }
}

fn io_error(e: windows::core::Error) -> io::Error {
    // HRESULT_FROM_WIN32 keeps the Win32 code in its low 16 bits.
    io::Error::from_raw_os_error(e.code().0 & 0xFFFF)
}

fn win32(e: WIN32_ERROR) -> io::Result<()> {
    if e.0 == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(e.0 as i32))
    }
}

/// `ConvertStringSecurityDescriptorToSecurityDescriptorW(PRIVATE_SDDL)`.
fn private_descriptor() -> io::Result<Descriptor> {
    let sddl: Vec<u16> = PRIVATE_SDDL.encode_utf16().chain([0]).collect();
    let mut d = PSECURITY_DESCRIPTOR::default();
    // SAFETY: `sddl` is NUL-terminated and outlives the call; `d` is a valid out-pointer that
    // receives a LocalAlloc'ed descriptor, released by `Descriptor`'s Drop.
    unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            PCWSTR(sddl.as_ptr()),
            SDDL_REVISION_1,
            &mut d,
            None,
        )
    }
    .map_err(io_error)?;
    Ok(Descriptor(d))
}

/// `path` opened for its security, not following a reparse point (FILE_FLAG_OPEN_REPARSE_POINT)
/// and as a folder too (FILE_FLAG_BACKUP_SEMANTICS, which CreateFileW needs for directories).
fn open_for_security(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .access_mode(READ_CONTROL_WRITE_DAC)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS.0 | FILE_FLAG_OPEN_REPARSE_POINT.0)
        .open(path)
}

/// Whether `sid` is SYSTEM, BUILTIN\Administrators or the user this process runs as.
fn trusted(sid: PSID) -> io::Result<bool> {
    for known in [WinLocalSystemSid, WinBuiltinAdministratorsSid] {
        // SAFETY: `sid` points at a valid SID inside a descriptor the caller keeps alive.
        if unsafe { IsWellKnownSid(sid, known) }.as_bool() {
            return Ok(true);
        }
    }
    let mut token = HANDLE::default();
    // SAFETY: the pseudo-handle of this process and a valid out-pointer; the token handle is
    // closed below through `File`'s ownership.
    unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) }.map_err(io_error)?;
    // SAFETY: `token` is a handle this process just opened and owns alone.
    let _close =
        unsafe { <File as std::os::windows::io::FromRawHandle>::from_raw_handle(token.0 as _) };
    // TOKEN_USER and the SID it points at: 256 bytes hold any SID (at most 68 bytes) and more.
    let mut buf = [0u64; 32];
    let mut len = 0u32;
    // SAFETY: `buf` is writable for its whole size, aligned for TOKEN_USER, and `len` valid.
    unsafe {
        GetTokenInformation(
            token,
            TokenUser,
            Some(buf.as_mut_ptr().cast::<c_void>()),
            std::mem::size_of_val(&buf) as u32,
            &mut len,
        )
    }
    .map_err(io_error)?;
    // SAFETY: GetTokenInformation filled `buf` with a TOKEN_USER whose SID lies inside `buf`.
    let user = unsafe { (*buf.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    // SAFETY: both SIDs are valid for the call's duration.
    Ok(unsafe { EqualSid(sid, user) }.is_ok())
}

/// The SID's string form (`S-1-5-…`), for messages.
fn sid_string(sid: PSID) -> String {
    let mut text = PWSTR::null();
    // SAFETY: `sid` is valid; `text` receives a LocalAlloc'ed string, freed below.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) }.is_err() {
        return "an unknown SID".into();
    }
    // SAFETY: on success `text` is a NUL-terminated UTF-16 string.
    let s = unsafe { text.to_string() }.unwrap_or_default();
    // SAFETY: `text` was LocalAlloc'ed by ConvertSidToStringSidW, which says to LocalFree it.
    unsafe {
        LocalFree(Some(HLOCAL(text.0.cast())));
    }
    s
}

/// The owner of the open `file`, by `GetSecurityInfo(OWNER_SECURITY_INFORMATION)`.
pub fn owner(file: &File) -> io::Result<Owner> {
    let mut sid = PSID::default();
    let mut d = Descriptor(PSECURITY_DESCRIPTOR::default());
    // SAFETY: the handle is open with READ_CONTROL; the out-pointers are valid; the returned
    // descriptor (holding the owner SID) is freed by `d`'s Drop after its last use below.
    win32(unsafe {
        GetSecurityInfo(
            HANDLE(file.as_raw_handle()),
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION,
            Some(&mut sid),
            None,
            None,
            None,
            Some(&mut d.0),
        )
    })?;
    if trusted(sid)? {
        Ok(Owner::Trusted)
    } else {
        Ok(Owner::Other(sid_string(sid)))
    }
}

impl StateDirOs for SystemStateDir {
    /// CreateDirectoryW with the private descriptor: "The lpSecurityDescriptor member of the
    /// structure specifies a security descriptor for the new directory"; ERROR_ALREADY_EXISTS
    /// when something is there.
    fn create_private_dir(&self, path: &Path) -> io::Result<()> {
        let d = private_descriptor()?;
        let sa = SECURITY_ATTRIBUTES {
            nLength: size_of::<SECURITY_ATTRIBUTES>() as u32,
            lpSecurityDescriptor: d.0.0,
            bInheritHandle: false.into(),
        };
        let name: Vec<u16> = path.as_os_str().encode_wide().chain([0]).collect();
        // SAFETY: `name` is NUL-terminated, `sa` and the descriptor it points at outlive the
        // call, which only reads them.
        unsafe { CreateDirectoryW(PCWSTR(name.as_ptr()), Some(&sa)) }.map_err(io_error)
    }

    /// The folder opened without following a reparse point, its attributes
    /// (GetFileInformationByHandle, through std) and its owner (GetSecurityInfo).
    fn facts(&self, path: &Path) -> io::Result<Facts> {
        let file = open_for_security(path)?;
        let attributes = file.metadata()?.file_attributes();
        Ok(Facts {
            owner: owner(&file)?,
            directory: attributes & FILE_ATTRIBUTE_DIRECTORY.0 != 0,
            reparse_point: attributes & FILE_ATTRIBUTE_REPARSE_POINT.0 != 0,
        })
    }

    /// The folder's entries, as std lists them (FindFirstFileExW / FindNextFileW).
    fn entries(&self, dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.path()))
            .collect()
    }

    /// DeleteFileW through std: "If the path points to a symbolic link, the symbolic link is
    /// deleted, not the target"; an administrator may delete any file of a folder granting
    /// Administrators full control (FILE_DELETE_CHILD), whoever owns the file.
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    /// SetSecurityInfo(DACL | PROTECTED_DACL) with the private DACL: "the system imposes the
    /// current inheritance model on the ACLs of all objects in the hierarchy below the target
    /// object" (Automatic Propagation of Inheritable ACEs), so what is inside gets it too.
    fn make_private(&self, path: &Path) -> io::Result<()> {
        let d = private_descriptor()?;
        let (mut present, mut defaulted) = (false.into(), false.into());
        let mut dacl: *mut ACL = std::ptr::null_mut();
        // SAFETY: `d` is a valid descriptor; the out-pointers are valid locals.
        unsafe { GetSecurityDescriptorDacl(d.0, &mut present, &mut dacl, &mut defaulted) }
            .map_err(io_error)?;
        let file = open_for_security(path)?;
        // SAFETY: the handle is open with WRITE_DAC; `dacl` points into `d`, alive until after
        // the call.
        win32(unsafe {
            SetSecurityInfo(
                HANDLE(file.as_raw_handle()),
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
                None,
                None,
                Some(dacl.cast_const()),
                None,
            )
        })
    }
}

/// The real calls, under wine in CI (and on Windows).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::state_dir::{FORMAT_DIR, prepare};

    #[test]
    fn the_state_directory_is_created_private_and_a_foreign_owner_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("csi-proxy");
        let os = SystemStateDir;
        prepare(&os, &dir).unwrap();
        for folder in [dir.clone(), dir.join(FORMAT_DIR)] {
            let facts = os.facts(&folder).unwrap();
            assert_eq!(facts.owner, Owner::Trusted, "{folder:?}");
            assert!(facts.directory && !facts.reparse_point, "{facts:?}");
        }
        // Again: already there, ours, kept.
        prepare(&os, &dir).unwrap();
        // Its DACL read as the selftest reads ProgramData's (`FileApi::dacl_sddl`): full
        // control for SYSTEM (wine keeps its own DACL rather than the private one, so only
        // what both give is checked).
        let path: Vec<u16> = dir.as_os_str().encode_wide().collect();
        let dacl = crate::windows::os::files::FileApi::dacl_sddl(
            &crate::windows::win32::SystemWin32::default(),
            &path,
        )
        .unwrap();
        let system = csi_proxy_formats::windows_buffers::sddl::allowed_rights(&dacl, "SY");
        assert!(dacl.starts_with("D:"), "{dacl}");
        assert_eq!(system & 0x001F_01FF, 0x001F_01FF, "{dacl}");

        // A format folder made by BUILTIN\Users (S-1-5-32-545), as a non-administrator could
        // have made it before this release.
        let planted = parent.path().join("planted");
        std::fs::create_dir_all(planted.join(FORMAT_DIR)).unwrap();
        let users: Vec<u16> = "S-1-5-32-545".encode_utf16().chain([0]).collect();
        let mut sid = PSID::default();
        // SAFETY: NUL-terminated input, valid out-pointer; the SID is LocalFree'd below.
        unsafe {
            windows::Win32::Security::Authorization::ConvertStringSidToSidW(
                PCWSTR(users.as_ptr()),
                &mut sid,
            )
        }
        .unwrap();
        let file = OpenOptions::new()
            .access_mode(READ_CONTROL_WRITE_DAC | 0x0008_0000) // WRITE_OWNER
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS.0)
            .open(planted.join(FORMAT_DIR))
            .unwrap();
        // SAFETY: the handle is open with WRITE_OWNER and `sid` is valid.
        let set = win32(unsafe {
            SetSecurityInfo(
                HANDLE(file.as_raw_handle()),
                SE_FILE_OBJECT,
                OWNER_SECURITY_INFORMATION,
                Some(sid),
                None,
                None,
                None,
            )
        });
        // SAFETY: allocated by ConvertStringSidToSidW, whose page says to LocalFree it.
        unsafe {
            LocalFree(Some(HLOCAL(sid.0)));
        }
        drop(file);
        if let Err(e) = set {
            eprintln!("SKIPPED (the refusal): this system will not make Users an owner: {e}");
            return;
        }
        if os.facts(&planted.join(FORMAT_DIR)).unwrap().owner == Owner::Trusted {
            eprintln!("SKIPPED (the refusal): this system (wine) keeps no owner it was given");
            return;
        }
        let err = prepare(&os, &planted).unwrap_err();
        assert!(err.contains("is owned by S-1-5-32-545"), "{err}");
    }
}
