//! Calls the daemon never makes, made by the selftest itself through the thin Win32 layer on its
//! own objects only, so a node shows what Windows answers them: `DeleteVolumeMountPointW` of its
//! mount point without the trailing backslash (ledger row 88), a state-changing control sent
//! with an output buffer (row 28), a file link and a folder read as themselves (row 92), and a
//! layout written back with one entry's `RewritePartition` FALSE (row 34); a read of
//! `C:\ProgramData`'s DACL (row 52); and, needing no disk, a persistent iSCSI login of a target
//! name no login has removed with a null initiator (row 26, [`null_initiator`]). Each undoes what it
//! changed and fails, naming the row, when the answer is not the one the simulated Windows
//! models; the next step still runs.

use super::record::{Outcome, Stop};
use super::{Selftest, status};
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_formats::windows_buffers::layout::{ENTRY_SIZE, HEADER_SIZE, gpt_layout_with};
use csi_proxy_formats::windows_buffers::sddl;
use csi_proxy_host::windows::os::files::{access, create_symlink, utf16};
use csi_proxy_host::windows::os::{self, OsError, Win32, code};
use std::time::Instant;

/// The steps, in order.
pub const STEPS: &[&str] = &[
    "DeleteVolumeMountPointW without its backslash",
    "SET_DISK_ATTRIBUTES with an output buffer",
    "a file link and a folder read as themselves",
    "SET_DRIVE_LAYOUT_EX with RewritePartition FALSE",
    "ProgramData: what BUILTIN\\Users may do",
];

/// The step of [`null_initiator`], run whatever became of the VHDX's flow.
pub const NULL_INITIATOR: &str = "RemoveIScsiPersistentTargetW with a null initiator";

/// The folder the daemon's state directory is made in by default (`C:\ProgramData\csi-proxy`).
const PROGRAMDATA: &str = r"C:\ProgramData";

/// A call's answer as recorded.
fn shown<T>(r: &Result<T, OsError>) -> String {
    r.as_ref().map_or_else(|e| e.to_string(), |_| "OK".into())
}

impl Selftest<'_> {
    pub(super) async fn calls(&mut self) -> Result<(), Stop> {
        let _ = self.bare_mount_point().await;
        let _ = self.output_buffer().await;
        let _ = self.read_as_themselves();
        // Last: the volume may come back under another GUID path.
        let _ = self.rewrite_false().await;
        let _ = self.programdata();
        Ok(())
    }

    /// Ledger row 52: `C:\ProgramData`'s DACL, read (nothing is changed): whether its allow
    /// entries let BUILTIN\Users create files and folders in it, as the page the model follows
    /// says (a Windows Vista page). A report, never a failed step: a node stricter than the
    /// model is one the daemon handles alike (it makes its state directory private either way).
    fn programdata(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = self
            .os
            .dacl_sddl(&utf16(PROGRAMDATA))
            .map(|dacl| {
                let bu = sddl::allowed_rights(&dacl, "BU");
                let may = sddl::may_create(bu);
                let answer = format!(
                    "{PROGRAMDATA}: {dacl}; BUILTIN\\Users {} create files and folders in it \
                     (rights {bu:#x}) (settles ledger row 52{})",
                    if may { "may" } else { "may NOT" },
                    if may {
                        ""
                    } else {
                        ": this node is stricter than the model"
                    }
                );
                ((), answer)
            })
            .map_err(|e| format!("reading the DACL of {PROGRAMDATA}: {e}"));
        self.out.record(STEPS[4], t, r)
    }

    /// Ledger row 88: the volume mounted at the scratch target by the daemon, then
    /// `DeleteVolumeMountPointW` of the target without its trailing backslash (the page: "The
    /// string must end with a trailing backslash"); modelled: ERROR_INVALID_PARAMETER, the
    /// mount point staying. The daemon unmounts it again.
    async fn bare_mount_point(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = async {
            self.guard_volume().await?;
            let (v, target) = (self.volume.clone(), self.target());
            self.c()
                .volume
                .mount(&v, &target)
                .await
                .map_err(|s| status("MountVolume", &s))?;
            self.mounted = true;
            let bare = self
                .os
                .delete_volume_mount_point(target.trim_end_matches('\\'));
            let still = self
                .c()
                .volume
                .volume_id_from_target_path(&target)
                .await
                .is_ok_and(|id| id.eq_ignore_ascii_case(&v));
            let unmounted = self.c().volume.unmount(&v, &target).await;
            self.mounted = still && unmounted.is_err();
            let answer = format!(
                "DeleteVolumeMountPointW {target:?}: {}; the mount point {}",
                shown(&bare),
                if still { "stayed" } else { "was removed" }
            );
            unmounted.map_err(|s| format!("{answer}; {}", status("UnmountVolume", &s)))?;
            match bare {
                Err(e) if e.code == code::INVALID_PARAMETER && still => Ok((
                    (),
                    format!("{answer} (settles ledger row 88: ERROR_INVALID_PARAMETER)"),
                )),
                _ => Err(format!(
                    "{answer} (ledger row 88 models ERROR_INVALID_PARAMETER, the mount point \
                     staying)"
                )),
            }
        }
        .await;
        self.out.record(STEPS[0], t, r)
    }

    /// Ledger row 28: `IOCTL_DISK_SET_DISK_ATTRIBUTES` clearing DISK_ATTRIBUTE_READ_ONLY (clear
    /// already: it changes nothing), not persisted, sent with a 64-byte output buffer where the
    /// page gives none; modelled (the worst case): applied, then ERROR_MORE_DATA.
    async fn output_buffer(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = async {
            let n = self.guard().await?;
            let disk = format!(r"\\.\PhysicalDrive{n}");
            let h = os::open(self.os, &disk, true).map_err(|e| format!("opening {disk}: {e}"))?;
            let ro = io::DISK_ATTRIBUTE_READ_ONLY;
            let input = io::set_disk_attributes(0, ro, false);
            let got = self
                .os
                .device_io_control(h.raw(), io::DISK_SET_DISK_ATTRIBUTES, &input, 64);
            let answer = format!(
                "IOCTL_DISK_SET_DISK_ATTRIBUTES on disk {n} with a 64-byte output buffer: {}",
                shown(&got)
            );
            match got {
                Err(e) if e.code == code::MORE_DATA => Ok((
                    (),
                    format!("{answer} (settles ledger row 28: ERROR_MORE_DATA)"),
                )),
                _ => Err(format!("{answer} (ledger row 28 models ERROR_MORE_DATA)")),
            }
        }
        .await;
        self.out.record(STEPS[1], t, r)
    }

    /// Ledger row 92: in a folder of the scratch folder, a file symbolic link (to a name that
    /// does not exist) opened as itself with FILE_READ_DATA and read (modelled: no data), and
    /// the folder opened so and read (modelled: ERROR_INVALID_FUNCTION). Both removed again.
    fn read_as_themselves(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let os = self.os;
        let dir = format!(r"{}\reads", self.scratch_dir());
        let link = format!(r"{dir}\link");
        let mut made = (false, false);
        let r = (|| {
            os.create_directory(&utf16(&dir))
                .map_err(|e| format!("CreateDirectoryW {dir}: {e}"))?;
            made.0 = true;
            create_symlink(os, &utf16(&link), &utf16("missing"), false)
                .map_err(|e| format!("CreateSymbolicLinkW {link}: {e}"))?;
            made.1 = true;
            let share = access::SHARE_READ | access::SHARE_WRITE | access::SHARE_DELETE;
            let read = |path: &str| {
                let h = os.open_entry(&utf16(path), access::READ_DATA, share, false)?;
                let r = os.read_handle(h, 64);
                os.close(h);
                r
            };
            let (l, d) = (read(&link), read(&dir));
            let answer = format!(
                "ReadFile through the link opened as itself: {}; through the folder: {}",
                l.as_ref()
                    .map_or_else(|e| e.to_string(), |b| format!("{} bytes", b.len())),
                shown(&d)
            );
            match (l, d) {
                (Ok(b), Err(e)) if b.is_empty() && e.code == code::INVALID_FUNCTION => {
                    Ok(((), format!("{answer} (settles ledger row 92)")))
                }
                _ => Err(format!(
                    "{answer} (ledger row 92 models no data, and ERROR_INVALID_FUNCTION)"
                )),
            }
        })();
        let mut left = Vec::new();
        if made.1
            && let Err(e) = os.delete_file(&utf16(&link))
        {
            left.push(format!("{link}: {e}"));
        }
        if made.0
            && let Err(e) = os.remove_directory(&utf16(&dir))
        {
            left.push(format!("{dir}: {e}"));
        }
        let r = match (r, left.is_empty()) {
            (r, true) => r,
            (Ok(((), a)) | Err(a), false) => Err(format!("{a}; NOT removed: {}", left.join("; "))),
        };
        self.out.record(STEPS[2], t, r)
    }

    /// Ledger row 34: the layout written back as read, but the data partition's entry with
    /// `RewritePartition` FALSE; modelled (the worst reading): that entry is left out of the
    /// table. Whatever happened, the layout as read is written again, and the volume on the
    /// partition is waited for (and taken as the selftest's volume from then on).
    async fn rewrite_false(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = async {
            let (n, h) = self.own_disk().await?;
            let l = super::direct::read_layout(&h)?;
            let i = super::direct::data_partition(&l)?;
            let p = l.partitions[i].clone();
            let mut input = gpt_layout_with(&l, &[]);
            input[HEADER_SIZE + i * ENTRY_SIZE + 28] = 0;
            let set = os::ioctl(&h, io::DISK_SET_DRIVE_LAYOUT_EX, &input, 0);
            let after = super::direct::read_layout(&h)?;
            let kept = after
                .partitions
                .iter()
                .any(|q| q.start == p.start && q.gpt_id() == p.gpt_id());
            os::ioctl(
                &h,
                io::DISK_SET_DRIVE_LAYOUT_EX,
                &gpt_layout_with(&l, &[]),
                0,
            )
            .map_err(|e| format!("IOCTL_DISK_SET_DRIVE_LAYOUT_EX as read, again: {e}"))?;
            let (was, wait) = (self.volume.clone(), self.opts.wait);
            let (back, took) = self.volume_back(n).await?.ok_or(format!(
                "no volume on disk {n} {wait:?} after the layout was written again"
            ))?;
            let answer = format!(
                "IOCTL_DISK_SET_DRIVE_LAYOUT_EX with partition {} FALSE: {}; the entry {} the \
                 table; written again as read, a volume listed after {} ms ({})",
                p.number,
                shown(&set),
                if kept { "stayed in" } else { "was left out of" },
                took,
                if back.eq_ignore_ascii_case(&was) {
                    "the same GUID path".to_string()
                } else {
                    format!("{back}, was {was}")
                },
            );
            self.volume = back;
            match (set, kept) {
                (Ok(_), false) => Ok(((), format!("{answer} (settles ledger row 34)"))),
                _ => Err(format!(
                    "{answer} (ledger row 34 models the entry left FALSE left out of the table)"
                )),
            }
        }
        .await;
        self.out.record(STEPS[3], t, r)
    }
}

/// Ledger row 26: `RemoveIScsiPersistentTargetW` with a null `InitiatorInstance` (`[in]`, not
/// optional), ISCSI_ALL_INITIATOR_PORTS, every portal, and a target name of the selftest's own
/// that no login has, so nothing can be removed whatever the answer; modelled:
/// RPC_X_NULL_REF_POINTER. Listed as not run where the initiator service is not available.
pub(super) fn null_initiator(out: &mut Outcome, os: &dyn Win32) {
    if let Err(why) = os.iscsi_available() {
        out.not_run(
            NULL_INITIATOR,
            format!("not run: the iSCSI initiator is not available: {why}"),
        );
        return;
    }
    let t = Instant::now();
    let iqn = format!(
        "iqn.2026-12.io.csi-proxy.selftest:none-{}",
        std::process::id()
    );
    let got = os.iscsi_remove_persistent_target_without_initiator(&iqn);
    let answer = format!(
        "RemoveIScsiPersistentTargetW(NULL, ISCSI_ALL_INITIATOR_PORTS, {iqn}, every portal): {}",
        shown(&got)
    );
    let r = match got {
        Err(e) if e.code == code::RPC_X_NULL_REF_POINTER => Ok((
            (),
            format!("{answer} (settles ledger row 26: RPC_X_NULL_REF_POINTER)"),
        )),
        _ => Err(format!(
            "{answer} (ledger row 26 models RPC_X_NULL_REF_POINTER)"
        )),
    };
    let _ = out.record(NULL_INITIATOR, t, r);
}
