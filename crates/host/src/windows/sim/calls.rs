//! The simulated Windows' answers to each [`Win32`] call: every call first takes the fault
//! queued for it ([`SimWindows::fail_next`]) and lets due volume arrivals happen.

use super::wmi::{CIMV2, SMB, STORAGE};
use super::*;

impl Win32 for SimWindows {
    fn open_raw(&self, path: &str, access: Access) -> Win32Result<u64> {
        let mut s = self.enter("open")?;
        s.settle();
        let target = devices::resolve_device(&s, path).ok_or(OsError::new(code::FILE_NOT_FOUND))?;
        if let Target::Volume(v) = target
            && let Some(e) = storage::volume_open_error(&s, v, access)
        {
            return Err(e);
        }
        if let Some(e) = holders::sharing_violation(&s, target, access) {
            return Err(e);
        }
        s.next_handle += 4;
        let h = s.next_handle;
        s.handles.insert(h, Open { target, access });
        Ok(h)
    }

    fn close(&self, handle: u64) {
        let mut s = self.lock();
        s.handles.remove(&handle);
        s.close_entry(handle);
        // "The locked volume remains locked until ... The handle is closed".
        s.volume_locks.retain(|_, holder| *holder != handle);
    }

    fn device_io_control(
        &self,
        handle: u64,
        ioctl: u32,
        input: &[u8],
        out_len: usize,
    ) -> Win32Result<Vec<u8>> {
        let mut s = self.enter_ioctl("device_io_control", Some(ioctl))?;
        s.settle();
        let open = *s
            .handles
            .get(&handle)
            .ok_or(OsError::new(code::INVALID_HANDLE))?;
        let out = match (open.target, ioctl) {
            (Target::Volume(v), csi_proxy_formats::windows_buffers::ioctl::FSCTL_LOCK_VOLUME) => {
                holders::lock_volume(&mut s, handle, v)?
            }
            (Target::Volume(v), csi_proxy_formats::windows_buffers::ioctl::FSCTL_UNLOCK_VOLUME) => {
                holders::unlock_volume(&mut s, handle, v)?
            }
            _ => devices::ioctl(&mut s, open, ioctl, input, out_len)?,
        };
        if out_len > 0 && storage::takes_no_output(ioctl) {
            // Applied, and then a short-buffer answer for the output buffer the page says
            // must be NULL: a caller that retries applies it again.
            return Err(OsError::new(code::MORE_DATA));
        }
        Ok(out)
    }

    fn read_at(&self, handle: u64, offset: u64, len: usize) -> Win32Result<Vec<u8>> {
        let s = self.enter("read")?;
        let open = s.handles.get(&handle).copied();
        // ReadFile needs a handle opened with GENERIC_READ.
        if open.is_some_and(|o| o.access == Access::Query) {
            return Err(OsError::new(code::ACCESS_DENIED));
        }
        match open.map(|o| o.target) {
            Some(Target::Volume(v)) => {
                // A volume's sector is its disk's (File Buffering: "an integer multiple of the
                // volume sector size"): 4096 on a 4Kn disk.
                let sector = s.disks.get(&s.volumes[v].disk).map_or(SECTOR, |d| d.sector);
                if !offset.is_multiple_of(sector) || !(len as u64).is_multiple_of(sector) {
                    return Err(OsError::new(code::INVALID_PARAMETER));
                }
                let head = &s.volumes[v].head;
                let mut out = head.get(offset as usize..).unwrap_or_default().to_vec();
                out.resize(len, 0);
                Ok(out)
            }
            Some(Target::Disk(n)) => {
                let d = s.disks.get(&n).ok_or(OsError::new(code::FILE_NOT_FOUND))?;
                storage::read_disk(d, offset, len)
            }
            None => Err(OsError::new(code::INVALID_HANDLE)),
        }
    }

    fn flush(&self, handle: u64) -> Win32Result<()> {
        let s = self.enter("flush")?;
        match s.handles.get(&handle) {
            // FlushFileBuffers on a volume needs a handle with write access.
            Some(o) if o.access != Access::ReadWrite => Err(OsError::new(code::ACCESS_DENIED)),
            Some(_) => Ok(()),
            None => Err(OsError::new(code::INVALID_HANDLE)),
        }
    }

    fn volumes(&self) -> Win32Result<Vec<String>> {
        let mut s = self.enter("volumes")?;
        s.settle();
        Ok((0..s.volumes.len())
            .filter(|&v| s.visible(v))
            .map(|v| s.volumes[v].names[0].clone())
            .collect())
    }

    fn volume_name_for_mount_point(&self, mount_point: &str) -> Win32Result<String> {
        let mut s = self.enter("volume_name_for_mount_point")?;
        s.settle();
        if !mount_point.ends_with('\\') {
            return Err(OsError::new(code::INVALID_PARAMETER));
        }
        // Links on the way are followed, the final component is the mount point itself.
        let resolved = s.through_links(mount_point.trim_end_matches('\\'))? + "\\";
        let mount_point = resolved.as_str();
        if let Some(v) = s.volume_at(mount_point) {
            return Ok(s.volumes[v].names[0].clone());
        }
        if s.exists(mount_point) {
            Err(OsError::new(code::NOT_A_REPARSE_POINT))
        } else {
            Err(OsError::new(code::FILE_NOT_FOUND))
        }
    }

    fn volume_path_names(&self, volume: &str, capacity: usize) -> Win32Result<Vec<String>> {
        let mut s = self.enter("volume_path_names")?;
        s.settle();
        let v = s
            .volume_named(volume)
            .ok_or(OsError::new(code::FILE_NOT_FOUND))?;
        let names: Vec<String> = s
            .mount_points
            .values()
            .filter(|(_, m)| *m == v)
            .map(|(t, _)| t.clone())
            .collect();
        // A MULTI_SZ: each name and its NUL, then the final NUL.
        let needed = names
            .iter()
            .map(|n| n.encode_utf16().count() + 1)
            .sum::<usize>()
            + 1;
        if capacity < needed {
            let mut e = OsError::new(code::MORE_DATA);
            e.needed = needed;
            return Err(e);
        }
        Ok(names)
    }

    fn volume_path_name(&self, path: &str) -> Win32Result<String> {
        let s = self.enter("volume_path_name")?;
        let k = mp_key(path);
        s.mount_points
            .iter()
            .filter(|(m, _)| k.starts_with(m.as_str()))
            .max_by_key(|(m, _)| m.len())
            .map(|(_, (t, _))| t.clone())
            .ok_or(OsError::new(code::PATH_NOT_FOUND))
    }

    fn volume_information(&self, root: &str) -> Win32Result<(String, u32)> {
        let s = self.enter("volume_information")?;
        let v = s
            .volume_at(root)
            .ok_or(OsError::new(code::PATH_NOT_FOUND))?;
        if let Some(e) = storage::filesystem_error(&s, v) {
            return Err(e);
        }
        s.volumes[v]
            .fs
            .clone()
            .ok_or(OsError::new(code::UNRECOGNIZED_VOLUME))
    }

    fn drive_type(&self, root: &str) -> Win32Result<u32> {
        let s = self.enter("drive_type")?;
        // GetDriveTypeW: "A trailing backslash is required"; a root it cannot resolve is
        // DRIVE_NO_ROOT_DIR. The kind comes from the device, so an empty drive answers too.
        Ok(match s.volume_at(root).filter(|_| root.ends_with('\\')) {
            None => crate::windows::os::drive::NO_ROOT_DIR,
            Some(v) if s.volumes[v].no_media.is_some() => crate::windows::os::drive::CDROM,
            Some(_) => crate::windows::os::drive::FIXED,
        })
    }

    fn disk_free_space(&self, root: &str) -> Win32Result<(u64, u64)> {
        let s = self.enter("disk_free_space")?;
        let v = s
            .volume_at(root)
            .ok_or(OsError::new(code::PATH_NOT_FOUND))?;
        if let Some(e) = storage::filesystem_error(&s, v) {
            return Err(e);
        }
        let vol = &s.volumes[v];
        match vol.fs {
            // NTFS keeps its metadata in the volume: a fresh one is about 1% used.
            Some(_) => Ok((vol.fs_size, vol.fs_size - vol.fs_size / 100)),
            None => Err(OsError::new(code::UNRECOGNIZED_VOLUME)),
        }
    }

    fn set_volume_mount_point(&self, mount_point: &str, volume: &str) -> Win32Result<()> {
        let mut s = self.enter("set_volume_mount_point")?;
        if !mount_point.ends_with('\\') || !volume.ends_with('\\') {
            return Err(OsError::new(code::INVALID_PARAMETER));
        }
        let resolved = s.through_links(mount_point.trim_end_matches('\\'))? + "\\";
        let mount_point = resolved.as_str();
        let v = s
            .volume_named(volume)
            .ok_or(OsError::new(code::FILE_NOT_FOUND))?;
        let k = key(mount_point);
        if s.mount_points.contains_key(&mp_key(mount_point)) {
            return Err(OsError::new(code::DIR_NOT_EMPTY));
        }
        if !s.dirs.contains_key(&k) {
            return Err(OsError::new(code::PATH_NOT_FOUND));
        }
        if !s.children(&k).is_empty() {
            return Err(OsError::new(code::DIR_NOT_EMPTY));
        }
        s.mount_points
            .insert(mp_key(mount_point), (mount_point.to_string(), v));
        s.show_volume_contents(mount_point, v);
        Ok(())
    }

    fn delete_volume_mount_point(&self, mount_point: &str) -> Win32Result<()> {
        let mut s = self.enter("delete_volume_mount_point")?;
        // DeleteVolumeMountPointW, lpszVolumeMountPoint: "The string must end with a trailing
        // backslash ('\\')" (ledger row 88; the code of a path without one is inferred).
        if !mount_point.ends_with('\\') {
            return Err(OsError::new(code::INVALID_PARAMETER));
        }
        let resolved = s.through_links(mount_point.trim_end_matches('\\'))? + "\\";
        let mount_point = resolved.as_str();
        let (_, v) = s
            .mount_points
            .remove(&mp_key(mount_point))
            .ok_or(OsError::new(code::NOT_A_REPARSE_POINT))?;
        s.hide_volume_contents(mount_point, v);
        Ok(())
    }

    fn system_directory(&self) -> Win32Result<String> {
        drop(self.enter("system_directory")?);
        Ok(r"C:\Windows\system32".into())
    }

    fn new_guid(&self) -> Win32Result<Uuid> {
        let mut s = self.enter("new_guid")?;
        Ok(s.guid())
    }

    fn disk_interfaces(&self) -> Win32Result<Vec<String>> {
        let mut s = self.enter("disk_interfaces")?;
        s.settle();
        let listed = s
            .disks
            .keys()
            .filter(|n| !s.unsurfaced.contains_key(n))
            .map(|&n| devices::interface_path(n))
            .collect();
        Ok(listed)
    }

    fn reenumerate_devices(&self) -> Win32Result<()> {
        let mut s = self.enter("reenumerate_devices")?;
        // A synchronous re-enumeration installs what is due; it does not make Plug and Play
        // surface a disk sooner.
        s.settle();
        Ok(())
    }

    fn page_files(&self) -> Win32Result<Vec<String>> {
        self.wmi_call(CIMV2, "page_files", |s| Ok(s.page_files.clone()))
    }

    fn storage_disks(&self) -> Win32Result<Vec<StorageDisk>> {
        self.wmi_call(STORAGE, "storage_disks", |s| Ok(holders::storage_disks(s)))
    }

    fn physical_disks(&self) -> Win32Result<Vec<(String, Vec<u16>)>> {
        self.wmi_call(STORAGE, "physical_disks", |s| {
            Ok(holders::physical_disks(s))
        })
    }

    fn crash_control(&self, name: &str) -> Win32Result<Option<String>> {
        let s = self.enter("crash_control")?;
        Ok(s.crash_control.get(name).cloned())
    }

    fn format_ntfs(&self, volume: &str) -> Win32Result<ReturnValue> {
        let volume = volume.to_string();
        self.wmi_call(STORAGE, "format_ntfs", move |s| format_ntfs(s, &volume))
    }

    fn update_host_storage_cache(&self) -> Win32Result<ReturnValue> {
        self.wmi_call(STORAGE, "update_host_storage_cache", |s| {
            if s.provider_cache.is_some() {
                s.provider_cache = Some(s.provider_volumes());
            }
            Ok(ReturnValue::Code(0))
        })
    }

    fn smb_global_mappings(&self) -> Win32Result<Vec<(String, u32)>> {
        self.wmi_call(SMB, "smb_global_mappings", |s| {
            Ok(s.smb_mappings
                .values()
                .map(|m| (m.remote.clone(), smb::status(s, m)))
                .collect())
        })
    }

    fn smb_create_global_mapping(
        &self,
        remote: &str,
        require_privacy: bool,
        credential: Option<&str>,
    ) -> Win32Result<ReturnValue> {
        let (remote, credential) = (remote.to_string(), credential.map(str::to_string));
        let hangs = remote.clone();
        // A server that does not answer holds the Create (and its WMI thread) until it does.
        let blocked = move |s: &State| smb::unc_hangs(s, &hangs);
        self.wmi_call_blocked(SMB, "smb_create_global_mapping", blocked, move |s| {
            if let Some(odd) = s.odd_return.take() {
                return Ok(odd);
            }
            let code = smb::create(s, &remote, require_privacy, credential.as_deref());
            smb::answer(s.smb_encoding, code)
        })
    }

    fn smb_remove_global_mapping(&self, remote: &str) -> Win32Result<ReturnValue> {
        let remote = remote.to_string();
        self.wmi_call(SMB, "smb_remove_global_mapping", move |s| {
            let k = remote.trim_end_matches('\\').to_ascii_lowercase();
            match s.smb_mappings.get(&k) {
                Some(m) if m.remote == remote => {
                    s.smb_mappings.remove(&k);
                    Ok(ReturnValue::Code(0))
                }
                _ => Err(OsError::new(WBEM_E_NOT_FOUND)),
            }
        })
    }

    fn dir_opens(&self, dir: &str) -> Win32Result<()> {
        let mut s = self.lock();
        let fault = s.take_fault("dir_opens");
        // A server that stopped answering holds the open (in real time, the lock released)
        // until it answers again.
        while smb::unc_hangs(&s, dir) {
            drop(s);
            std::thread::sleep(Duration::from_millis(2));
            s = self.lock();
        }
        fault?;
        if s.exists(dir) {
            return Ok(());
        }
        Err(smb::unc_error(&s, dir).unwrap_or(OsError::new(code::PATH_NOT_FOUND)))
    }

    fn links_below(&self, roots: &[String]) -> (Vec<(String, String)>, Option<String>) {
        let s = self.lock();
        let roots: Vec<String> = roots.iter().map(|r| format!("{}\\", key(r))).collect();
        let links = s
            .links
            .iter()
            .filter(|(k, _)| roots.iter().any(|r| k.starts_with(r.as_str())))
            .map(|(_, l)| (l.text.clone(), l.target.clone()))
            .collect();
        (links, s.link_scan_incomplete.clone())
    }

    fn service_state(&self, name: &str) -> Win32Result<u32> {
        let mut s = self.enter("service_state")?;
        services::state(&mut s, name)
    }

    fn service_config(&self, name: &str) -> Win32Result<(String, u32)> {
        let mut s = self.enter("service_config")?;
        services::config(&mut s, name)
    }

    fn service_failure_flag(&self, name: &str) -> Win32Result<bool> {
        let mut s = self.enter("service_failure_flag")?;
        services::failure_flag(&mut s, name)
    }

    fn service_start(&self, name: &str) -> Win32Result<()> {
        let mut s = self.enter("service_start")?;
        services::start(&mut s, name)
    }

    fn service_stop(&self, name: &str) -> Win32Result<()> {
        let mut s = self.enter("service_stop")?;
        services::stop(&mut s, name)
    }

    fn service_create(&self, name: &str, command_line: &str) -> Win32Result<()> {
        let mut s = self.enter("service_create")?;
        services::create(&mut s, name, command_line)
    }

    fn service_delete(&self, name: &str) -> Win32Result<()> {
        let mut s = self.enter("service_delete")?;
        services::delete(&mut s, name)
    }

    fn service_active_dependents(&self, name: &str) -> Win32Result<Vec<String>> {
        let mut s = self.enter("service_active_dependents")?;
        services::active_dependents(&mut s, name)
    }

    fn smbios_table(&self) -> Win32Result<Option<Vec<u8>>> {
        let s = self.enter("smbios_table")?;
        Ok(s.smbios.clone())
    }

    fn wmi_bios_serial(&self) -> Win32Result<String> {
        self.wmi_call(CIMV2, "wmi_bios_serial", |s| Ok(s.wmi_serial.clone()))
    }

    fn iscsi_available(&self) -> std::result::Result<(), String> {
        iscsi::available(&self.lock())
    }

    fn iscsi_add_portal(&self, address: &str, port: u16) -> Win32Result<()> {
        let mut s = self.enter("iscsi_add_portal")?;
        iscsi::add_portal(&mut s, address, port)
    }

    fn iscsi_remove_portal(&self, address: &str, port: u16) -> Win32Result<()> {
        let mut s = self.enter("iscsi_remove_portal")?;
        iscsi::remove_portal(&mut s, address, port)
    }

    fn iscsi_portals(&self, capacity: usize) -> Win32Result<Vec<(String, u16)>> {
        let mut s = self.enter("iscsi_portals")?;
        iscsi::portals(&mut s, capacity)
    }

    fn iscsi_targets(&self, force_update: bool, capacity: usize) -> Win32Result<Vec<String>> {
        let mut s = self.enter("iscsi_targets")?;
        iscsi::targets(&mut s, force_update, capacity)
    }

    fn iscsi_discovery_mechanisms(&self, iqn: &str, capacity: usize) -> Win32Result<Vec<String>> {
        let mut s = self.enter("iscsi_discovery_mechanisms")?;
        iscsi::mechanisms(&mut s, iqn, capacity)
    }

    fn iscsi_sessions(&self, capacity: usize) -> Win32Result<Vec<IscsiSession>> {
        let mut s = self.enter("iscsi_sessions")?;
        iscsi::sessions(&mut s, capacity)
    }

    fn iscsi_login(
        &self,
        iqn: &str,
        address: &str,
        port: u16,
        auth: &csi_proxy_formats::windows_buffers::iscsi::LoginAuth,
        flags: u32,
    ) -> Win32Result<()> {
        let mut s = self.enter("iscsi_login")?;
        iscsi::login(&mut s, iqn, address, port, auth, flags)
    }

    fn iscsi_logout(&self, session: (u64, u64)) -> Win32Result<()> {
        let mut s = self.enter("iscsi_logout")?;
        iscsi::logout(&mut s, session)
    }

    fn iscsi_persistent_logins(&self, capacity: usize) -> Win32Result<Vec<PersistentLogin>> {
        let mut s = self.enter("iscsi_persistent_logins")?;
        iscsi::persistent_logins(&mut s, capacity)
    }

    fn iscsi_remove_persistent_target(&self, login: &PersistentLogin) -> Win32Result<()> {
        let mut s = self.enter("iscsi_remove_persistent_target")?;
        iscsi::remove_persistent(&mut s, login)
    }

    fn iscsi_remove_persistent_target_without_initiator(&self, iqn: &str) -> Win32Result<()> {
        let mut s = self.enter("iscsi_remove_persistent_target_without_initiator")?;
        iscsi::remove_persistent_without_initiator(&mut s, iqn)
    }

    fn iscsi_session_devices(
        &self,
        session: (u64, u64),
        capacity: usize,
    ) -> Win32Result<Vec<(u32, u32)>> {
        let mut s = self.enter("iscsi_session_devices")?;
        iscsi::session_devices(&mut s, session, capacity)
    }

    fn iscsi_set_chap_secret(&self, secret: &[u8]) -> Win32Result<()> {
        let mut s = self.enter("iscsi_set_chap_secret")?;
        iscsi::set_chap_secret(&mut s, secret)
    }

    fn reset_wmi(&self) {
        let mut s = self.lock();
        *s.calls.entry("reset_wmi").or_default() += 1;
        s.wmi_gone = None;
    }

    fn now(&self) -> Duration {
        self.lock().clock
    }

    fn sleep(&self, d: Duration) {
        let mut s = self.lock();
        s.clock += d;
        s.settle();
    }
}

/// `MSFT_Volume.Format`'s return value for a volume of a read-only disk (the method's page and
/// the Storage Management API's common return codes: 43006).
pub(super) const FORMAT_READ_ONLY: u32 = 43006;

/// `MSFT_Volume.Format` (NTFS, quick) of the volume whose `UniqueId` is `volume`.
fn format_ntfs(s: &mut State, volume: &str) -> Win32Result<ReturnValue> {
    if let Some(odd) = s.odd_return.take() {
        return Ok(odd);
    }
    // MSFT_Volume.UniqueId is the volume's first GUID path. The provider answers from its
    // cache: a volume that arrived after its last refresh is not found (ledger row 54).
    let v = (0..s.volumes.len())
        .find(|&v| {
            s.visible(v)
                && s.volumes[v].names[0].eq_ignore_ascii_case(volume)
                && s.provider_cache
                    .as_ref()
                    .is_none_or(|known| known.contains(&s.volumes[v].names[0].to_ascii_lowercase()))
        })
        .ok_or(OsError::new(WBEM_E_NOT_FOUND))?;
    // A format writes the volume: on a read-only disk "writes to the disk will fail", which
    // MSFT_Volume.Format answers with its documented 43006, "Cannot perform the requested
    // operation when the drive is read only" (ledger row 21).
    if s.disks.get(&s.volumes[v].disk).is_some_and(|d| d.read_only) {
        return Ok(ReturnValue::Code(FORMAT_READ_ONLY));
    }
    // A locked volume "can be accessed only through handles to the file object (*hDevice) that
    // locks the volume": the provider's format cannot open it (ledger row 58).
    if holders::locked(s, v) {
        return Ok(ReturnValue::Code(40001));
    }
    // Force is TRUE (the host's only call): the volume is dismounted under whoever has it open.
    holders::dismount_others(s, v);
    let length = devices::partition_of(s, v).map_or(0, |p| p.length);
    let sector = s.disks.get(&s.volumes[v].disk).map_or(SECTOR, |d| d.sector);
    let serial = s.next_serial;
    s.next_serial += 1;
    let vol = &mut s.volumes[v];
    vol.fs = Some(("NTFS".into(), serial));
    // NTFS leaves the partition's last sector to its backup boot sector.
    vol.fs_size = length - sector;
    // An NTFS boot sector: what a later signature probe finds.
    let mut head = vec![0u8; 512];
    head[3..11].copy_from_slice(b"NTFS    ");
    head[510] = 0x55;
    head[511] = 0xaa;
    vol.head = head;
    Ok(ReturnValue::Code(0))
}
