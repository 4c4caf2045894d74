//! Steps with a second process ([`super::hold`]) holding the selftest's own volume or an entry
//! of its scratch folder while the daemon (or the provider's format, asked directly) is asked
//! about it: what Windows answers when another process uses an object (ledger rows 19, 57,
//! 58, 82 and 89). The holder is released before each
//! step ends, whatever happened; a step whose answer is not the one the simulated Windows
//! models fails, naming the row, and the next step still runs.

use super::hold::{Hold, Holding};
use super::record::Stop;
use super::{Selftest, ms, status};
use csi_proxy_host::windows::os::{ReturnValue, code};
use std::time::Instant;

/// The steps, in order.
pub const STEPS: &[&str] = &[
    "held volume: PartitionDisk",
    "held volume: MSFT_Volume.Format (forced)",
    "locked volume: FormatVolume",
    "locked volume: MSFT_Volume.Format",
    "held entry: Rmdir, Mkdir",
];

/// `MSFT_Volume.Format`'s "Access denied" (Storage Management API common return codes), what
/// the simulated provider answers for a volume it cannot open (ledger row 58).
const ACCESS_DENIED_40001: u32 = 40001;

/// How an OS error's code shows in the daemon's messages (`OsError`'s display).
fn os_code(c: u32) -> String {
    format!("(os error {c})")
}

impl Selftest<'_> {
    pub(super) async fn held(&mut self) -> Result<(), Stop> {
        let _ = self.held_volume().await;
        let _ = self.forced_format().await;
        let _ = self.locked_volume().await;
        let _ = self.held_entry().await;
        Ok(())
    }

    /// Another process holds `what`, recorded as `name` when it cannot; `None` then.
    fn hold(&mut self, name: &str, what: Hold) -> Option<Box<dyn Holding>> {
        let t = Instant::now();
        match self.others.hold(&what) {
            Ok(h) => Some(h),
            Err(e) => {
                let _ = self
                    .out
                    .record::<()>(name, t, Err(format!("the second process: {e}")));
                None
            }
        }
    }

    /// Ledger row 57: PartitionDisk locks the disk's volumes first; with another process
    /// holding the volume open (sharing read and write) `FSCTL_LOCK_VOLUME` fails, modelled as
    /// ERROR_ACCESS_DENIED, and the daemon refuses naming the failed lock.
    async fn held_volume(&mut self) -> Result<(), Stop> {
        let name = STEPS[0];
        let t = Instant::now();
        let n = match self.guard_volume().await {
            Ok(n) => n,
            Err(e) => return self.out.record::<()>(name, t, Err(e)),
        };
        let v = self.volume.clone();
        let Some(holder) = self.hold(name, Hold::Open(v.clone())) else {
            return Err(Stop);
        };
        let t = Instant::now();
        let answer = self.c().disk.partition_disk(n).await;
        let released = holder.release();
        let want = os_code(code::ACCESS_DENIED);
        let r = match answer {
            Ok(()) => Err(format!(
                "PartitionDisk of disk {n} succeeded while another process had {v} open: \
                 FSCTL_LOCK_VOLUME did not fail (ledger row 57 models it failing)"
            )),
            Err(s)
                if s.message().contains("FSCTL_LOCK_VOLUME failed")
                    && s.message().contains(&want) =>
            {
                Ok((
                    (),
                    format!(
                        "{} (settles ledger row 57: ERROR_ACCESS_DENIED)",
                        status("PartitionDisk", &s)
                    ),
                ))
            }
            Err(s) => Err(format!(
                "{} (ledger row 57 models a refusal naming FSCTL_LOCK_VOLUME's ERROR_ACCESS_DENIED {want})",
                status("PartitionDisk", &s)
            )),
        };
        self.out.record(name, t, with_release(r, released))
    }

    /// Ledger row 89: the provider's format (Force TRUE, the daemon's only call), asked
    /// directly while another process has the volume open for reading: it formats, and
    /// dismounts the volume under that process, whose handle no longer reads (the model:
    /// Force acts as FSCTL_DISMOUNT_VOLUME). The daemon never gets here (it refuses such a
    /// volume first, row 57); the volume is the selftest's own, formatted anew.
    async fn forced_format(&mut self) -> Result<(), Stop> {
        let name = STEPS[1];
        let t = Instant::now();
        if let Err(e) = self.guard_volume().await {
            return self.out.record::<()>(name, t, Err(e));
        }
        let v = self.volume.clone();
        let Some(holder) = self.hold(name, Hold::Open(v.clone())) else {
            return Err(Stop);
        };
        let t = Instant::now();
        let format = self.os.format_ntfs(&v);
        let r = match (format, holder.release()) {
            (Ok(ReturnValue::Code(0) | ReturnValue::Absent), Ok(last))
                if last.contains("no longer read") =>
            {
                Ok((
                    (),
                    format!("{v}: formatted; the other process {last} (settles ledger row 89)"),
                ))
            }
            (format, last) => Err(format!(
                "{v}: MSFT_Volume.Format {}; the other process: {} (ledger row 89 models the \
                 format succeeding and the other process's handle no longer reading)",
                format.map_or_else(|e| e.to_string(), |r| format!("{r:?}")),
                last.unwrap_or_else(|e| e)
            )),
        };
        self.out.record(name, t, r)
    }

    /// Ledger rows 19 and 58: another process holds `FSCTL_LOCK_VOLUME` on the volume. The
    /// daemon's FormatVolume is refused naming the lock (its data-access open fails, modelled as
    /// ERROR_ACCESS_DENIED), while the FILE_ANY_ACCESS controls still answer: the volume is
    /// listed on its disk and its disk number read. The Storage Management provider's own
    /// format, asked directly, cannot open it (modelled: 40001).
    async fn locked_volume(&mut self) -> Result<(), Stop> {
        let (name, direct) = (STEPS[2], STEPS[3]);
        let t = Instant::now();
        let n = match self.guard_volume().await {
            Ok(n) => n,
            Err(e) => return self.out.record::<()>(name, t, Err(e)),
        };
        let v = self.volume.clone();
        let Some(holder) = self.hold(name, Hold::Lock(v.clone())) else {
            return Err(Stop);
        };
        let t = Instant::now();
        let format = self.c().volume.format(&v).await;
        let listed = self.c().volume.list_volumes_on_disk(n, 0).await;
        let on = self.c().volume.disk_number(&v).await;
        let t2 = Instant::now();
        let provider = self.os.format_ntfs(&v);
        let released = holder.release();

        let want = os_code(code::ACCESS_DENIED);
        let mut wrong = Vec::new();
        let format = match format {
            Ok(()) => {
                wrong.push("FormatVolume succeeded on a locked volume".to_string());
                "FormatVolume: OK".to_string()
            }
            Err(s) => {
                if !(s.message().contains("locked by another process")
                    && s.message().contains(&want))
                {
                    wrong.push(format!("FormatVolume not refused as locked with {want}"));
                }
                status("FormatVolume", &s)
            }
        };
        let listed = match listed {
            Ok(l) if l.iter().any(|x| x.eq_ignore_ascii_case(&v)) => {
                format!("ListVolumesOnDisk lists {v}")
            }
            Ok(l) => {
                wrong.push(format!("ListVolumesOnDisk does not list {v}"));
                format!("ListVolumesOnDisk: {l:?}")
            }
            Err(s) => {
                wrong.push("ListVolumesOnDisk failed".into());
                status("ListVolumesOnDisk", &s)
            }
        };
        let on = match on {
            Ok(d) if d == n => format!("GetDiskNumberFromVolumeID: {d}"),
            Ok(d) => {
                wrong.push(format!("GetDiskNumberFromVolumeID answered disk {d}"));
                format!("GetDiskNumberFromVolumeID: {d}")
            }
            Err(s) => {
                wrong.push("GetDiskNumberFromVolumeID failed".into());
                status("GetDiskNumberFromVolumeID", &s)
            }
        };
        let answer = format!("{format}; {listed}; {on}");
        let r = if wrong.is_empty() {
            Ok((
                (),
                format!("{answer} (settles ledger row 19: ERROR_ACCESS_DENIED)"),
            ))
        } else {
            Err(format!(
                "{answer} (ledger row 19 models otherwise: {})",
                wrong.join("; ")
            ))
        };
        let _ = self.out.record(name, t, r);

        let r = match provider {
            Ok(ReturnValue::Code(ACCESS_DENIED_40001)) => Ok((
                (),
                format!("{v}: ReturnValue 40001, Access denied (settles ledger row 58)"),
            )),
            Ok(other) => Err(format!(
                "{v}: ReturnValue {other:?} (ledger row 58 models 40001, Access denied){}",
                if matches!(other, ReturnValue::Code(0) | ReturnValue::Absent) {
                    "; the selftest's own volume was formatted anew"
                } else {
                    ""
                }
            )),
            Err(e) => Err(format!("{v}: {e} (ledger row 58 models ReturnValue 40001)")),
        };
        let _ = self.out.record(direct, t2, with_release(r, released));
        Ok(())
    }

    /// Ledger row 82: another process holds a folder of the scratch folder open sharing
    /// delete. Rmdir succeeds but, without POSIX deletion, only marks it; Mkdir of the name
    /// then waits the delete-pending name out (the daemon's bound) and, the holder still there,
    /// is refused with ERROR_ACCESS_DENIED; with POSIX deletion (Windows 10 1809 and later on
    /// NTFS, practice) the name is free at once. Once the holder has closed, Mkdir works.
    async fn held_entry(&mut self) -> Result<(), Stop> {
        let name = STEPS[4];
        let dir = self.plain();
        let Some(holder) = self.hold(name, Hold::Entry(dir.clone())) else {
            return Err(Stop);
        };
        let t = Instant::now();
        let rmdir = self.c().fs.rmdir(&dir, false).await;
        let t_mkdir = Instant::now();
        let mkdir = self.c().fs.mkdir(&dir).await;
        let mkdir_ms = ms(t_mkdir.elapsed());
        let released = holder.release();
        let again = self.c().fs.mkdir(&dir).await;
        let want = os_code(code::ACCESS_DENIED);
        let r = match (rmdir, mkdir, again) {
            (Err(s), ..) => Err(format!(
                "{} (ledger row 82 models the removal succeeding, marking the folder)",
                status("Rmdir", &s)
            )),
            (Ok(()), Ok(()), _) => Ok((
                (),
                format!(
                    "Rmdir: OK; Mkdir of the name while it was held: OK after {mkdir_ms} ms: POSIX \
                     deletion, the name freed at once (settles ledger row 82)"
                ),
            )),
            (Ok(()), Err(s), Ok(())) if s.message().contains(&want) => Ok((
                (),
                format!(
                    "Rmdir: OK; Mkdir while held: {} after {mkdir_ms} ms; Mkdir once released: OK \
                     (settles ledger row 82: the name is delete-pending, ERROR_ACCESS_DENIED)",
                    status("Mkdir", &s)
                ),
            )),
            (Ok(()), Err(s), again) => Err(format!(
                "Rmdir: OK; Mkdir while held: {}; Mkdir once released: {} (ledger row 82 models \
                 ERROR_ACCESS_DENIED {want} while held, then success)",
                status("Mkdir", &s),
                again.map_or_else(|s| status("Mkdir", &s), |()| "OK".into())
            )),
        };
        self.out.record(name, t, with_release(r, released))
    }
}

/// A step's result with the holder's release: a release that failed fails the step.
fn with_release(
    r: Result<((), String), String>,
    released: Result<String, String>,
) -> Result<((), String), String> {
    match (r, released) {
        (r, Ok(_)) => r,
        (Ok(((), a)), Err(e)) | (Err(a), Err(e)) => Err(format!("{a}; releasing: {e}")),
    }
}
