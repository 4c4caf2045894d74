//! Durable records of FormatVolume's work, one file per volume, so that a retry (after a lost
//! answer, or a daemon killed in the middle of a format) can tell a filesystem this daemon made
//! from one it must never format over. Shared by the Linux and Windows volume hosts.
//!
//! A record is written as `pending` before the format starts and as `done`, with the new
//! filesystem's identity, once it finished:
//! - `done` and the volume carries that very filesystem: the format happened, the retry is OK;
//! - `pending`: the format was cut off; whatever the volume holds now is its unfinished work
//!   (FormatVolume refuses volumes that hold anything), so formatting again is safe;
//! - no record, or another identity: the filesystem is not ours, and is refused.

use std::io;
use std::path::{Path, PathBuf};

pub use csi_proxy_core::volume::rules::FormatRecord;

/// The records under one directory (`<state-dir>/format`).
#[derive(Debug, Clone)]
pub struct FormatRecords {
    dir: PathBuf,
}

impl FormatRecords {
    /// Records kept in `dir` (created on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FormatRecords { dir: dir.into() }
    }

    /// The directory holding the records.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The record of volume `key` (a GUID, on Linux followed by the disk's identity: hex
    /// digits and dashes), if any. A record
    /// that cannot be read or parsed counts as none: the volume is then treated as not ours,
    /// the safe side.
    pub fn read(&self, key: &str) -> Option<FormatRecord> {
        let text = self.read_text(key).ok()?;
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(str::to_string)
        };
        Some(FormatRecord {
            fs: field("fs")?,
            id: field("uuid")?,
            done: match field("state")?.as_str() {
                "done" => true,
                "pending" => false,
                _ => return None,
            },
        })
    }

    /// Writes the record of volume `key` durably: a temporary file, flushed, renamed over the
    /// old record, and (on Linux) the directory flushed, so a crash leaves the old or the new
    /// record, never a torn one.
    pub fn write(&self, key: &str, record: &FormatRecord, volume: &str) -> io::Result<()> {
        let name = Self::name(key)?;
        let body = format!(
            "fs={}\nuuid={}\nstate={}\nvolume={}\n",
            record.fs,
            record.id,
            if record.done { "done" } else { "pending" },
            volume.replace(['\n', '\r'], " ")
        );
        self.write_text(&name, body.as_bytes())
    }

    fn write_text(&self, name: &str, body: &[u8]) -> io::Result<()> {
        write_state_file(&self.dir, name, body)
    }

    fn read_text(&self, key: &str) -> io::Result<String> {
        let bytes = read_state_file(&self.dir, &Self::name(key)?)?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// The record's file name: the key in lower case.
    fn name(key: &str) -> io::Result<String> {
        let ok = !key.is_empty()
            && key.len() <= 64
            && key.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if ok {
            Ok(key.to_ascii_lowercase())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{key:?} is not a volume GUID"),
            ))
        }
    }
}

/// Writes file `name` of the state directory `dir` (made when missing) atomically and durably:
/// on Linux through the directory's handle, never following a link (see `linux::state_dir`).
#[cfg(target_os = "linux")]
pub fn write_state_file(dir: &Path, name: &str, body: &[u8]) -> io::Result<()> {
    crate::linux::state_dir::write_file(dir, name, body, 0o600)
}

/// On Windows the state directory (under `C:\ProgramData`) is writable by administrators
/// only, who need no link to reach anything; NTFS journals the rename itself.
#[cfg(not(target_os = "linux"))]
pub fn write_state_file(dir: &Path, name: &str, body: &[u8]) -> io::Result<()> {
    use std::fs::File;
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(name))
}

/// The daemon's default `--state-dir`, also where `csi-proxy-ctl profiles` looks by default.
#[cfg(not(windows))]
pub const DEFAULT_STATE_DIR: &str = "/var/lib/csi-proxy";
/// The daemon's default `--state-dir`, also where `csi-proxy-ctl profiles` looks by default.
#[cfg(windows)]
pub const DEFAULT_STATE_DIR: &str = r"C:\ProgramData\csi-proxy";

/// The content of file `name` of the state directory `dir`, `None` when either is missing.
#[cfg(target_os = "linux")]
pub fn read_state_file(dir: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    crate::linux::state_dir::read_file(dir, name)
}

/// As on Linux; a file some other user owns (planted before the folder was made private) is
/// not ours: refused.
#[cfg(not(target_os = "linux"))]
pub fn read_state_file(dir: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut file = match std::fs::File::open(dir.join(name)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        r => r?,
    };
    #[cfg(windows)]
    if let crate::windows::state_dir::Owner::Other(sid) =
        crate::windows::win32::state_dir::owner(&file)?
    {
        tracing::warn!(file = %dir.join(name).display(), owner = %sid, "ignoring a state file another user owns");
        return Err(io::ErrorKind::PermissionDenied.into());
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn records_round_trip_replace_each_other_and_refuse_odd_keys() {
        let dir = tempfile::tempdir().unwrap();
        let r = FormatRecords::new(dir.path().join("format"));
        let key = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
        assert_eq!(r.read(key), None);
        let pending = FormatRecord {
            fs: "NTFS".into(),
            id: String::new(),
            done: false,
        };
        r.write(key, &pending, "vol\nume").unwrap();
        assert_eq!(r.read(key), Some(pending));
        // Keys are case-insensitive GUIDs.
        let done = FormatRecord {
            fs: "NTFS".into(),
            id: "1A2B3C4D".into(),
            done: true,
        };
        r.write(&key.to_lowercase(), &done, "v").unwrap();
        assert_eq!(r.read(key), Some(done));
        assert_eq!(
            fs::read_dir(r.dir()).unwrap().count(),
            1,
            "no temporary left"
        );
        for bad in ["", "../x", "a/b", "x.y", &"a".repeat(65)] {
            assert!(
                r.write(
                    bad,
                    &FormatRecord {
                        fs: "x".into(),
                        id: "y".into(),
                        done: true
                    },
                    "v"
                )
                .is_err()
            );
            assert_eq!(r.read(bad), None);
        }
        // A torn or foreign record counts as none.
        fs::write(r.dir().join("abcd"), "fs=ext4\nstate=maybe\n").unwrap();
        assert_eq!(r.read("abcd"), None);
    }

    /// The records directory and its files are reached without following links: one planted at
    /// the temporary name, at a record or as the directory is never written through.
    #[cfg(target_os = "linux")]
    #[test]
    fn records_never_follow_planted_links() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::write(&outside, "untouched").unwrap();
        let r = FormatRecords::new(dir.path().join("format"));
        let key = "abcd-01";
        let rec = FormatRecord {
            fs: "ext4".into(),
            id: "u".into(),
            done: false,
        };
        r.write(key, &rec, "v").unwrap();
        symlink(&outside, r.dir().join(".abcd-01.tmp")).unwrap();
        r.write(key, &rec, "v").unwrap();
        fs::remove_file(r.dir().join(key)).unwrap();
        symlink(&outside, r.dir().join(key)).unwrap();
        assert_eq!(r.read(key), None, "a link is no record");
        r.write(key, &rec, "v").unwrap();
        assert_eq!(r.read(key), Some(rec.clone()));
        let linked = FormatRecords::new(dir.path().join("linked"));
        symlink(dir.path(), linked.dir()).unwrap();
        assert!(linked.write("abcd", &rec, "v").is_err());
        assert!(!dir.path().join("abcd").exists());
        assert_eq!(fs::read_to_string(&outside).unwrap(), "untouched");
    }
}
