//! A copy of the selftest's own VHDX attached beside it (ledger row 71): a snapshot or clone
//! restored on the node its source is on. Windows keeps a disk whose IDs another online disk
//! has offline (documented); whether clearing its offline attribute is refused is what only a
//! node shows. The copy is detached and deleted again whatever happened.

use super::record::Stop;
use super::{Selftest, status};
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_host::windows::os;
use csi_proxy_host::windows::vhd::disk_number_of;
use std::time::Instant;

/// The step's recorded name.
pub const STEP: &str = "disk copy attached beside it";

/// What the step made, to undo.
#[derive(Default)]
struct Made {
    /// The copy's file exists.
    file: bool,
    /// The copy's handle, and whether it is attached.
    handle: Option<u64>,
    attached: bool,
}

impl Selftest<'_> {
    /// The VHDX detached, copied, attached again and brought online as before, then the copy
    /// attached beside it: how the copy arrives (offline, the model), the daemon's answer to
    /// SetDiskState online of it (its collision check refuses), and what
    /// `IOCTL_DISK_SET_DISK_ATTRIBUTES` clearing DISK_ATTRIBUTE_OFFLINE (not persisted) answers
    /// (the model: not refused); a copy that went online is set offline again at once.
    pub(super) async fn disk_copy(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let path = format!("{}.copy.vhdx", self.opts.vhdx_path);
        let mut made = Made::default();
        let r = self.copy_answers(&path, &mut made).await;
        let vd = self.vd;
        let mut undo = Vec::new();
        if let Some(h) = made.handle {
            if made.attached
                && let Err(e) = vd.detach(h)
            {
                undo.push(format!("DetachVirtualDisk of the copy: {e}"));
            }
            vd.close_vhd(h);
        }
        if made.file
            && let Err(e) = vd.delete_vhd_file(&path)
        {
            undo.push(format!("{path} NOT deleted: {e}"));
        }
        let r = match (r, undo.is_empty()) {
            (r, true) => r,
            (Ok(((), a)) | Err(a), false) => Err(format!("{a}; {}", undo.join("; "))),
        };
        self.out.record(STEP, t, r)
    }

    async fn copy_answers(&mut self, path: &str, made: &mut Made) -> Result<((), String), String> {
        let (vd, h) = (self.vd, self.handle.ok_or("no VHDX of this selftest")?);
        let n = self.guard().await?;
        vd.detach(h)
            .map_err(|e| format!("DetachVirtualDisk of disk {n} to copy its VHDX: {e}"))?;
        self.attached = false;
        let copied = vd.copy_vhd_file(&self.opts.vhdx_path, path);
        made.file = copied.is_ok();
        // The source back first, whatever the copy answered.
        vd.attach(h)
            .map_err(|e| format!("AttachVirtualDisk of the VHDX again: {e}"))?;
        self.attached = true;
        copied.map_err(|e| format!("CopyFileW to {path}: {e}"))?;
        let n = self.source_again().await?;
        self.online().await?;

        let c = vd
            .open(path)
            .map_err(|e| format!("OpenVirtualDisk {path}: {e}"))?;
        made.handle = Some(c);
        vd.attach(c)
            .map_err(|e| format!("AttachVirtualDisk {path}: {e}"))?;
        made.attached = true;
        let p = vd
            .physical_path(c)
            .map_err(|e| format!("GetVirtualDiskPhysicalPath of the copy: {e}"))?;
        let m = disk_number_of(&p)
            .filter(|&m| m != n)
            .ok_or(format!("the copy answered {p:?}, not a disk of its own"))?;
        self.listed_ids(m).await?;
        let arrived_offline = !self
            .c()
            .disk
            .is_online(m)
            .await
            .map_err(|s| status("GetDiskState", &s))?;
        let daemon = match self.c().disk.set_online(m, true).await {
            Ok(()) => "SetDiskState online: OK".to_string(),
            Err(s) => status("SetDiskState online", &s),
        };
        let h = os::open(self.os, &format!(r"\\.\PhysicalDrive{m}"), true)
            .map_err(|e| format!("opening disk {m}: {e}"))?;
        let offline = io::DISK_ATTRIBUTE_OFFLINE;
        let cleared = os::ioctl(
            &h,
            io::DISK_SET_DISK_ATTRIBUTES,
            &io::set_disk_attributes(0, offline, false),
            0,
        );
        let online_again = self.c().disk.is_online(m).await.unwrap_or(false);
        // Two online disks with one set of IDs: the copy goes offline again at once.
        let back = os::ioctl(
            &h,
            io::DISK_SET_DISK_ATTRIBUTES,
            &io::set_disk_attributes(offline, offline, false),
            0,
        );
        let answer = format!(
            "disk {m} (the copy of disk {n}) arrived {}; {daemon}; IOCTL_DISK_SET_DISK_ATTRIBUTES \
             clearing DISK_ATTRIBUTE_OFFLINE: {} (GetDiskState then: online {online_again}); set \
             offline again: {}",
            if arrived_offline { "offline" } else { "ONLINE" },
            cleared
                .as_ref()
                .map_or_else(|e| e.to_string(), |_| "OK".into()),
            back.as_ref()
                .map_or_else(|e| e.to_string(), |_| "OK".into()),
        );
        match (arrived_offline, daemon.contains(": OK"), cleared, back) {
            (true, false, Ok(_), Ok(_)) => Ok(((), format!("{answer} (settles ledger row 71)"))),
            _ => Err(format!(
                "{answer} (ledger row 71 models the copy arriving offline, the daemon refusing \
                 to bring it online, the attribute cleared without refusal, and set again)"
            )),
        }
    }

    /// After the VHDX was attached again: the disk it is now, checked by its page 83
    /// identifier before anything acts on it.
    async fn source_again(&mut self) -> Result<u32, String> {
        let h = self.handle.ok_or("no VHDX of this selftest")?;
        let p = self
            .vd
            .physical_path(h)
            .map_err(|e| format!("GetVirtualDiskPhysicalPath again: {e}"))?;
        let n = disk_number_of(&p).ok_or(format!("answered {p:?}, not a disk"))?;
        let id = self.listed_ids(n).await?;
        if id.page83 != self.page83 {
            return Err(format!(
                "refusing disk {n}: its page 83 identifier is {:?}, the VHDX's disk had {:?}",
                id.page83, self.page83
            ));
        }
        self.disk = Some(n);
        Ok(n)
    }
}
