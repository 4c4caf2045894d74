//! The node's own drives without media, read (nothing is changed): what an optical or removable
//! drive with nothing in it answers a data open and a request through a query open (ledger row
//! 18). The daemon meets such a drive in every disk call, since it goes through every volume
//! to tell which are on a disk; it tells an optical drive by its kind (`GetDriveTypeW`), and a
//! removable one by its no-media code. A node without such a drive lists the step as not run.

use super::record::Outcome;
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_host::windows::disk::volume_device;
use csi_proxy_host::windows::os::{self, OsError, Win32, code, drive};
use std::time::Instant;

/// The step's recorded name.
pub const STEP: &str = "drives without media";

/// What one drive without media answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmptyDrive {
    /// Its volume GUID path.
    pub volume: String,
    /// `GetDriveTypeW`'s answer: [`drive::CDROM`] or [`drive::REMOVABLE`].
    pub kind: u32,
    /// What a data-access open (GENERIC_READ) failed with.
    pub data_open: OsError,
    /// What `IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS` through a query open (access 0) answered:
    /// `Ok` when it listed extents, else the open's or the request's failure.
    pub through_query: Result<(), OsError>,
}

/// The step's verdict on the drives found: the answer, or why the daemon would be wrong on
/// this node (a failed step naming the row).
pub fn judge(drives: &[EmptyDrive]) -> Result<String, String> {
    let mut lines = Vec::new();
    let mut wrong = Vec::new();
    for d in drives {
        let kind = if d.kind == drive::CDROM {
            "optical"
        } else {
            "removable"
        };
        let query = match &d.through_query {
            Ok(()) => "extents listed".to_string(),
            Err(e) => e.to_string(),
        };
        lines.push(format!(
            "{} ({kind}): data open {}; the extents through a query open: {query}",
            d.volume, d.data_open
        ));
        let modelled = d.data_open.code == code::NOT_READY
            && d.through_query.as_ref().err().map(|e| e.code) == Some(code::NOT_READY);
        // What the daemon depends on: an optical drive is told by its kind, so any answer
        // does; a removable drive only by a no-media code (or "incorrect function").
        let understood = d.kind == drive::CDROM
            || d.through_query
                .as_ref()
                .is_err_and(|e| e.no_media() || e.code == code::INVALID_FUNCTION);
        if !understood {
            wrong.push(format!(
                "{}: a removable drive without media answering {query}, which the daemon \
                 does not take for no media: every disk call would fail on this node",
                d.volume
            ));
        } else if !modelled {
            lines.push(format!(
                "{}: not the model's ERROR_NOT_READY; the daemon does not depend on it here",
                d.volume
            ));
        }
    }
    let answer = lines.join("; ");
    if wrong.is_empty() {
        Ok(format!("{answer} (settles ledger row 18)"))
    } else {
        Err(format!("{answer}; {} (ledger row 18)", wrong.join("; ")))
    }
}

/// The node's optical and removable drives that answer a data open with a failure (no media),
/// and what each answered.
fn empty_drives(os: &dyn Win32) -> Result<Vec<EmptyDrive>, String> {
    let volumes = os
        .volumes()
        .map_err(|e| format!("FindFirstVolumeW/FindNextVolumeW: {e}"))?;
    let mut out = Vec::new();
    for volume in volumes {
        let root = format!(r"{}\", volume.trim_end_matches('\\'));
        let kind = os
            .drive_type(&root)
            .map_err(|e| format!("GetDriveTypeW {root}: {e}"))?;
        if kind != drive::CDROM && kind != drive::REMOVABLE {
            continue;
        }
        let device = volume_device(&volume);
        let Err(data_open) = os::open(os, &device, false) else {
            continue; // it has media
        };
        let through_query = os::open_query(os, &device).and_then(|h| {
            os::ioctl(&h, io::VOLUME_GET_VOLUME_DISK_EXTENTS, &[], 8 + 24 * 4).map(drop)
        });
        out.push(EmptyDrive {
            volume,
            kind,
            data_open,
            through_query,
        });
    }
    Ok(out)
}

/// Runs the step, or lists it as not run on a node without such a drive.
pub(super) fn run(out: &mut Outcome, os: &dyn Win32) {
    let t = Instant::now();
    match empty_drives(os) {
        Ok(d) if d.is_empty() => out.not_run(
            STEP,
            "not run: this node has no optical or removable drive without media",
        ),
        Ok(d) => {
            let _ = out.record(STEP, t, judge(&d).map(|a| ((), a)));
        }
        Err(e) => {
            let _ = out.record::<()>(STEP, t, Err(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty(kind: u32, open: u32, query: u32) -> EmptyDrive {
        EmptyDrive {
            volume: r"\\?\Volume{d}\".into(),
            kind,
            data_open: OsError::new(open),
            through_query: Err(OsError::new(query)),
        }
    }

    #[test]
    fn the_models_answer_settles_the_row() {
        let a = judge(&[empty(drive::CDROM, code::NOT_READY, code::NOT_READY)]).unwrap();
        assert!(a.ends_with("(settles ledger row 18)"), "{a}");
        assert!(!a.contains("not the model's"), "{a}");
    }

    #[test]
    fn an_optical_drive_may_answer_anything() {
        let a = judge(&[empty(drive::CDROM, 1117, 1117)]).unwrap();
        assert!(a.contains("not the model's ERROR_NOT_READY"), "{a}");
    }

    #[test]
    fn a_removable_drive_must_answer_no_media() {
        judge(&[empty(drive::REMOVABLE, 21, code::NO_MEDIA_IN_DRIVE)]).unwrap();
        let e = judge(&[empty(drive::REMOVABLE, 21, 1117)]).unwrap_err();
        assert!(
            e.contains("every disk call would fail") && e.contains("ledger row 18"),
            "{e}"
        );
    }
}
