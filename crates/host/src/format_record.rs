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

use std::fs::{self, File};
use std::io::{self, Write};
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

    /// The record of volume `key` (a partition GUID: hex digits and dashes), if any. A record
    /// that cannot be read or parsed counts as none: the volume is then treated as not ours,
    /// the safe side.
    pub fn read(&self, key: &str) -> Option<FormatRecord> {
        let path = self.path(key).ok()?;
        let text = fs::read_to_string(path).ok()?;
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
    /// old record, and (on Unix) the directory flushed, so a crash leaves the old or the new
    /// record, never a torn one.
    pub fn write(&self, key: &str, record: &FormatRecord, volume: &str) -> io::Result<()> {
        let path = self.path(key)?;
        fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(".{key}.tmp"));
        let body = format!(
            "fs={}\nuuid={}\nstate={}\nvolume={}\n",
            record.fs,
            record.id,
            if record.done { "done" } else { "pending" },
            volume.replace(['\n', '\r'], " ")
        );
        {
            let mut f = File::create(&tmp)?;
            f.write_all(body.as_bytes())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &path)?;
        // A directory is opened and flushed like a file on Unix; Windows has no such handle
        // without backup semantics, and NTFS journals the rename itself.
        #[cfg(unix)]
        File::open(&self.dir)?.sync_all()?;
        Ok(())
    }

    fn path(&self, key: &str) -> io::Result<PathBuf> {
        let ok = !key.is_empty()
            && key.len() <= 64
            && key.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if ok {
            Ok(self.dir.join(key.to_ascii_lowercase()))
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{key:?} is not a volume GUID"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
