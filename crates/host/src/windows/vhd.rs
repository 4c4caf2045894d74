//! The virtual disk seam: the few `virtdisk.dll` calls `csi-proxy-ctl selftest` makes to give
//! itself a disk of its own (create, attach, grow, detach and delete a VHDX).
//!
//! One documented call per method with plain Rust types, like [`super::os::Win32`]: the real
//! implementation is [`super::win32::vhd::RealVirtualDisks`] (Windows only), the simulated
//! Windows implements it too (`sim/vhd.rs`), where an attached VHDX is a new disk of the
//! simulated machine. Handles are opaque numbers; every handle is closed with [`close_vhd`].
//!
//! [`close_vhd`]: VirtualDisks::close_vhd

use super::os::Win32Result;

/// `ERROR_CALL_NOT_IMPLEMENTED` (120): what a Windows without a virtual disk service (Wine's
/// `virtdisk.dll`) answers `OpenVirtualDisk`.
pub const CALL_NOT_IMPLEMENTED: u32 = 120;

/// The virtual disk API calls the selftest needs.
pub trait VirtualDisks: Send + Sync {
    /// `OpenVirtualDisk` of a VHDX file, version 1 parameters, all access; the handle.
    fn open(&self, path: &str) -> Win32Result<u64>;
    /// `CreateVirtualDisk`: a new dynamically expanding VHDX of `size` bytes at `path` (the
    /// file must not exist); the handle.
    fn create(&self, path: &str, size: u64) -> Win32Result<u64>;
    /// `AttachVirtualDisk` read-write, without drive letters, for the life of the handle.
    fn attach(&self, handle: u64) -> Win32Result<()>;
    /// `GetVirtualDiskPhysicalPath` of an attached disk, e.g. `\\.\PhysicalDrive3`.
    fn physical_path(&self, handle: u64) -> Win32Result<String>;
    /// `ResizeVirtualDisk` to `size` bytes (growing only).
    fn resize(&self, handle: u64, size: u64) -> Win32Result<()>;
    /// `DetachVirtualDisk`.
    fn detach(&self, handle: u64) -> Win32Result<()>;
    /// `CloseHandle`.
    fn close_vhd(&self, handle: u64);
    /// `DeleteFileW` of the VHDX file.
    fn delete_vhd_file(&self, path: &str) -> Win32Result<()>;
    /// `CopyFileW(from, to, bFailIfExists TRUE)`: a copy of a detached VHDX file, block for
    /// block (the same disk IDs inside), at a path where nothing is.
    fn copy_vhd_file(&self, from: &str, to: &str) -> Win32Result<()>;
}

/// The disk number in a physical path `\\.\PhysicalDriveN` (case-insensitive); `None` for any
/// other form.
pub fn disk_number_of(physical_path: &str) -> Option<u32> {
    const PREFIX: &str = r"\\.\physicaldrive";
    let p = physical_path.trim_end_matches('\0');
    let head = p.get(..PREFIX.len())?;
    if !head.eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let digits = &p[PREFIX.len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::disk_number_of;

    #[test]
    fn physical_paths_name_their_disk_number_and_nothing_else_does() {
        assert_eq!(disk_number_of(r"\\.\PhysicalDrive3"), Some(3));
        assert_eq!(disk_number_of(r"\\.\PHYSICALDRIVE12"), Some(12));
        assert_eq!(disk_number_of(r"\\.\PhysicalDrive"), None);
        assert_eq!(disk_number_of(r"\\.\PhysicalDrive1a"), None);
        assert_eq!(disk_number_of(r"\\.\CdRom0"), None);
        assert_eq!(disk_number_of(r"\\?\PhysicalDrive1"), None);
        assert_eq!(disk_number_of(r"\\.\PhysicalDrive99999999999"), None);
    }
}
