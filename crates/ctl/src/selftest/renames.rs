//! What the daemon's race tests assume of renames and listings, made on demand in the
//! selftest's scratch folder through the thin Win32 layer: a folder renamed while the selftest
//! holds it without FILE_SHARE_DELETE, and while it holds something below it (ledger rows 37
//! and 86), and a listing read in small pieces while the entries it returned are deleted (row
//! 86). The behaviours are not races; only the tests that rely on them race. Everything made is
//! removed again, and what could not be is named.

use super::Selftest;
use super::record::Stop;
use csi_proxy_host::windows::os::files::{FileId, access, dir_record_len, utf16};
use csi_proxy_host::windows::os::{OsError, Win32, Win32Result, code};
use std::collections::BTreeSet;
use std::time::Instant;

/// The steps, in order.
pub const STEPS: &[&str] = &[
    "rename of a held folder, and of one held below",
    "listing read while its entries are deleted",
];

/// How many folders the listing holds: many reads' worth at [`LISTING_BUFFER`].
const ENTRIES: usize = 48;

/// A listing read's buffer: four records of a name of three characters (`e07`), so the
/// listing takes a dozen reads.
const LISTING_BUFFER: usize = 4 * dir_record_len(3);

/// Sharing read, write and delete: the handle refuses nobody.
const SHARE_ALL: u32 = access::SHARE_READ | access::SHARE_WRITE | access::SHARE_DELETE;

/// What renaming the folder while a handle below it was open answered.
#[derive(Debug)]
pub(super) enum Below {
    /// The rename was refused: a node kinder than the model.
    Refused(OsError),
    /// It moved; what opening `d` through the folder's handle answered, and the identity of
    /// the handle already open on `d` and of what is at the new path's `d`.
    Moved {
        through_handle: Win32Result<FileId>,
        held: Win32Result<FileId>,
        at_new_path: Win32Result<FileId>,
    },
}

/// Whether the two renames answered as ledger rows 37 and 86 model: the first (the folder
/// held without FILE_SHARE_DELETE) refused with ERROR_SHARING_VIOLATION; the second either
/// moved the folder with the handles below following it (the model, the worst reading the
/// daemon is built for) or was refused (kinder: the daemon's races then cannot happen on this
/// node at all, which it handles alike, so a report that settles the question, not a failure).
/// A rename that went through a handle without FILE_SHARE_DELETE, or handles below that did
/// not follow, is worse than the model: the step fails naming the row.
pub(super) fn verdict(held: &Win32Result<()>, below: &Below) -> Result<String, String> {
    let first = match held {
        Err(e) => e.to_string(),
        Ok(()) => "renamed".into(),
    };
    let answer = |second: String| {
        format!(
            "MoveFileExW of a folder the selftest holds without FILE_SHARE_DELETE: {first}; \
             of a folder it holds sharing delete, with a handle open below it: {second}"
        )
    };
    if !matches!(held, Err(e) if e.code == code::SHARING_VIOLATION) {
        let second = match below {
            Below::Refused(e) => e.to_string(),
            Below::Moved { .. } => "renamed".into(),
        };
        return Err(format!(
            "{} (ledger row 37 models ERROR_SHARING_VIOLATION: a rename opens its source for \
             delete)",
            answer(second)
        ));
    }
    match below {
        Below::Refused(e) => Ok(format!(
            "{} (settles ledger row 37: this node refuses renaming a folder with a handle open \
             below it, kinder than the model, which lets it move)",
            answer(e.to_string())
        )),
        Below::Moved {
            through_handle,
            held,
            at_new_path,
        } => {
            let shown = |r: &Win32Result<FileId>| {
                r.as_ref()
                    .map_or_else(|e| e.to_string(), |id| format!("file ID {:#x}", id.1))
            };
            let second = format!(
                "renamed; d opened through the folder's handle: {}; the handle on d: {}; d at \
                 the new path: {}",
                shown(through_handle),
                shown(held),
                shown(at_new_path)
            );
            match (through_handle, held, at_new_path) {
                (Ok(a), Ok(b), Ok(c)) if a == b && b == c => Ok(format!(
                    "{} (settles ledger row 37: the folder moved, the handles below it \
                     following)",
                    answer(second)
                )),
                _ => Err(format!(
                    "{} (ledger rows 37 and 86 model the handles below a moved folder \
                     following it: the same entry through the folder's handle and at the new \
                     path)",
                    answer(second)
                )),
            }
        }
    }
}

/// Removes, in order, each of `paths` that is there (a folder), closing nothing: what could
/// not be removed, with why.
fn remove_folders(os: &dyn Win32, paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .filter(|p| os.file_attributes(&utf16(p)).is_ok())
        .filter_map(|p| {
            os.remove_directory(&utf16(p))
                .err()
                .map(|e| format!("{p}: {e}"))
        })
        .collect()
}

/// `r`, with what was not removed added to its answer (then a failure).
fn with_left(r: Result<String, String>, left: Vec<String>) -> Result<((), String), String> {
    match (r, left.is_empty()) {
        (Ok(a), true) => Ok(((), a)),
        (Ok(a) | Err(a), _) => Err(format!("{a}; NOT removed: {}", left.join("; "))),
    }
}

impl Selftest<'_> {
    pub(super) fn renames(&mut self) -> Result<(), Stop> {
        let _ = self.rename_held();
        let _ = self.listing_while_deleting();
        Ok(())
    }

    /// Ledger rows 37 and 86: in a folder of the scratch folder, `a` with a folder `a\d`.
    /// `a` held without FILE_SHARE_DELETE and renamed to `b` (modelled:
    /// ERROR_SHARING_VIOLATION); then `a` and `a\d` held sharing read, write and delete and
    /// `a` renamed to `b` (modelled: it moves, and `d` opened through `a`'s handle is the
    /// entry the handle on `a\d` is open on, and `b\d`). `d` is a folder: the thin layer makes
    /// no files, and the folders below are what the daemon's removal holds.
    fn rename_held(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let os = self.os;
        let dir = format!(r"{}\renames", self.scratch_dir());
        let mut handles = Vec::new();
        let r = rename_answers(os, &dir, &mut handles);
        for h in handles {
            os.close(h);
        }
        let left = remove_folders(
            os,
            &[r"b\d", "b", r"a\d", "a", ""].map(|p| {
                if p.is_empty() {
                    dir.clone()
                } else {
                    format!(r"{dir}\{p}")
                }
            }),
        );
        self.out.record(STEPS[0], t, with_left(r, left))
    }

    /// Ledger row 86: a folder of [`ENTRIES`] folders, its listing read through its handle in
    /// [`LISTING_BUFFER`]-byte reads; the entries the first read returned deleted, then the
    /// rest read: modelled, every entry not yet returned comes once, none again, then the end.
    fn listing_while_deleting(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let os = self.os;
        let dir = format!(r"{}\listing", self.scratch_dir());
        let names: Vec<String> = (0..ENTRIES).map(|i| format!("e{i:02}")).collect();
        let mut handle = None;
        let r = listing_answers(os, &dir, &names, &mut handle);
        if let Some(h) = handle {
            os.close(h);
        }
        let mut paths: Vec<String> = names.iter().map(|n| format!(r"{dir}\{n}")).collect();
        paths.push(dir);
        let left = remove_folders(os, &paths);
        self.out.record(STEPS[1], t, with_left(r, left))
    }
}

/// Makes `dir`, `a` and `a\d`, renames as [`Selftest::rename_held`] says (each handle opened
/// pushed to `handles`, for the caller to close), and judges the answers.
fn rename_answers(os: &dyn Win32, dir: &str, handles: &mut Vec<u64>) -> Result<String, String> {
    let (a, b) = (format!(r"{dir}\a"), format!(r"{dir}\b"));
    let (ad, bd) = (format!(r"{a}\d"), format!(r"{b}\d"));
    for d in [dir, &a, &ad] {
        os.create_directory(&utf16(d))
            .map_err(|e| format!("CreateDirectoryW {d}: {e}"))?;
    }
    let mut open = |path: &str, access: u32, share: u32| {
        let h = os
            .open_entry(&utf16(path), access, share, false)
            .map_err(|e| format!("CreateFileW {path}: {e}"))?;
        handles.push(h);
        Ok::<u64, String>(h)
    };
    // Held only across the first rename (it would refuse the second), so closed here.
    let pin = os
        .open_entry(
            &utf16(&a),
            access::READ_ATTRIBUTES,
            access::SHARE_READ | access::SHARE_WRITE,
            false,
        )
        .map_err(|e| format!("CreateFileW {a}: {e}"))?;
    let held = os.rename_entry(&utf16(&a), &utf16(&b));
    os.close(pin);
    if held.is_ok() {
        // Worse than the model already; the second rename needs `a` back.
        os.rename_entry(&utf16(&b), &utf16(&a))
            .map_err(|e| format!("MoveFileExW {b} back to {a}: {e}"))?;
    }
    let ha = open(
        &a,
        access::LIST_DIRECTORY | access::READ_ATTRIBUTES,
        SHARE_ALL,
    )?;
    let hd = open(&ad, access::READ_ATTRIBUTES, SHARE_ALL)?;
    let below = match os.rename_entry(&utf16(&a), &utf16(&b)) {
        Err(e) => Below::Refused(e),
        Ok(()) => {
            let id_at = |h: Win32Result<u64>| {
                h.and_then(|h| {
                    let id = os.file_id(h);
                    os.close(h);
                    id
                })
            };
            Below::Moved {
                through_handle: id_at(os.open_child(
                    ha,
                    &utf16("d"),
                    access::READ_ATTRIBUTES,
                    SHARE_ALL,
                )),
                held: os.file_id(hd),
                at_new_path: id_at(os.open_entry(
                    &utf16(&bd),
                    access::READ_ATTRIBUTES,
                    SHARE_ALL,
                    false,
                )),
            }
        }
    };
    verdict(&held, &below)
}

/// Makes `dir` and its folders `names`, reads and deletes as
/// [`Selftest::listing_while_deleting`] says (the listing's handle put in `handle`, for the
/// caller to close), and judges what came.
fn listing_answers(
    os: &dyn Win32,
    dir: &str,
    names: &[String],
    handle: &mut Option<u64>,
) -> Result<String, String> {
    for d in std::iter::once(dir.to_string()).chain(names.iter().map(|n| format!(r"{dir}\{n}"))) {
        os.create_directory(&utf16(&d))
            .map_err(|e| format!("CreateDirectoryW {d}: {e}"))?;
    }
    let h = os
        .open_entry(&utf16(dir), access::LIST_DIRECTORY, SHARE_ALL, false)
        .map_err(|e| format!("CreateFileW {dir}: {e}"))?;
    *handle = Some(h);
    let read = |restart: bool| -> Result<Vec<String>, String> {
        let got = os
            .read_dir(h, restart, LISTING_BUFFER)
            .map_err(|e| format!("GetFileInformationByHandleEx(FileIdBothDirectoryInfo): {e}"))?;
        Ok(got
            .into_iter()
            .map(|e| String::from_utf16_lossy(&e.name))
            .filter(|n| n != "." && n != "..")
            .collect())
    };
    let mut first = read(true)?;
    // `.` and `..` may fill the first read: read on until entries come.
    let mut reads = 1;
    while first.is_empty() && reads < 3 {
        first = read(false)?;
        reads += 1;
    }
    for n in &first {
        let p = format!(r"{dir}\{n}");
        os.remove_directory(&utf16(&p))
            .map_err(|e| format!("RemoveDirectoryW {p}: {e}"))?;
    }
    let mut rest = Vec::new();
    let mut ended = false;
    // Bounded: a listing that never ends is a wrong answer, not a hang.
    for _ in 0..2 * ENTRIES {
        let got = read(false)?;
        reads += 1;
        if got.is_empty() {
            ended = true;
            break;
        }
        rest.extend(got);
    }
    listing_verdict(names, &first, &rest, ended, reads)
}

/// Whether a listing of `names` answered as ledger row 86 models, the entries `first`
/// returned deleted before `rest` was read (in `reads` reads in all, the last empty when
/// `ended`): each entry not yet returned once, none again, nothing else, then the end.
pub(super) fn listing_verdict(
    names: &[String],
    first: &[String],
    rest: &[String],
    ended: bool,
    reads: usize,
) -> Result<String, String> {
    let all: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let returned: BTreeSet<&str> = first.iter().map(String::as_str).collect();
    let mut seen = BTreeSet::new();
    let repeated: Vec<&str> = rest
        .iter()
        .map(String::as_str)
        .filter(|n| returned.contains(n) || !seen.insert(*n))
        .collect();
    let unknown: Vec<&str> = rest
        .iter()
        .map(String::as_str)
        .filter(|n| !all.contains(n))
        .collect();
    let missing: Vec<&str> = all
        .iter()
        .filter(|n| !returned.contains(*n) && !seen.contains(*n))
        .copied()
        .collect();
    let answer = format!(
        "FileIdBothDirectoryInfo in {LISTING_BUFFER}-byte reads of {} folders: the first \
         entries returned ({}) deleted, then {} entries in {reads} reads in all, {}; repeated: \
         {repeated:?}, never returned: {missing:?}, not made: {unknown:?}",
        names.len(),
        first.join(", "),
        rest.len(),
        if ended { "then the end" } else { "NO end" },
    );
    if !first.is_empty() && ended && repeated.is_empty() && missing.is_empty() && unknown.is_empty()
    {
        Ok(format!("{answer} (settles ledger row 86)"))
    } else {
        Err(format!(
            "{answer} (ledger row 86 models the resume point surviving the entries before it \
             being deleted: each entry not yet returned once, then the end)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Win32Result<FileId> {
        Ok((1, n))
    }

    #[test]
    fn a_kinder_node_settles_and_a_worse_one_fails_naming_the_row() {
        let sharing = Err(OsError::new(code::SHARING_VIOLATION));
        let moved = |a, b, c| Below::Moved {
            through_handle: a,
            held: b,
            at_new_path: c,
        };
        // The model.
        let ok = verdict(&sharing, &moved(id(7), id(7), id(7))).unwrap();
        assert!(ok.contains("settles ledger row 37"), "{ok}");
        // Kinder: refused while something below is open.
        let kind = verdict(&sharing, &Below::Refused(OsError::new(code::ACCESS_DENIED))).unwrap();
        assert!(
            kind.contains("settles ledger row 37") && kind.contains("kinder"),
            "{kind}"
        );
        // Worse: the handle below does not follow.
        let lost = moved(Err(OsError::new(code::FILE_NOT_FOUND)), id(7), id(7));
        let e = verdict(&sharing, &lost).unwrap_err();
        assert!(e.contains("ledger rows 37 and 86 model"), "{e}");
        let other = verdict(&sharing, &moved(id(8), id(7), id(7))).unwrap_err();
        assert!(other.contains("ledger rows 37 and 86 model"), "{other}");
        // Worse: renamed through a handle that does not share delete; another refusal code.
        for held in [Ok(()), Err(OsError::new(code::ACCESS_DENIED))] {
            let e = verdict(&held, &moved(id(7), id(7), id(7))).unwrap_err();
            assert!(
                e.contains("ledger row 37 models ERROR_SHARING_VIOLATION"),
                "{e}"
            );
        }
    }
}
