//! `--log_file` with `--log_file_max_size`: a log file that never grows past its limit. When a
//! write would take the file past the limit, the file becomes `<file>.1` (replacing the previous
//! one) and a new file is started, so the log takes at most about twice the limit on disk.
//!
//! Our own writer over `std::fs` rather than a crate: `tracing-appender` rotates by time only,
//! and the size-rotating crates (`file-rotate`, `rolling-file`) rotate after the write that went
//! past the limit and bring date and compression dependencies we have no use for. This one
//! rotates only between whole writes that start a line, and the fmt layer hands it one whole
//! event per write, so no line is ever split across the two files.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;

/// Bytes in one `--log_file_max_size` unit: klog's megabyte is 1024 * 1024 bytes.
pub const MEGABYTE: u64 = 1024 * 1024;

/// The limit `--log_file_max_size` (in megabytes, as klog counts them) sets: `None` for 0,
/// which klog reads as unlimited.
pub fn limit_from_megabytes(megabytes: u64) -> Option<u64> {
    (megabytes != 0).then(|| megabytes.saturating_mul(MEGABYTE))
}

/// A log file that is rotated to `<path>.1` before it would grow past its limit.
#[derive(Debug)]
pub struct SizeLimitedFile {
    path: PathBuf,
    previous: PathBuf,
    limit: Option<u64>,
    file: File,
    len: u64,
    at_line_start: bool,
}

impl SizeLimitedFile {
    /// Opens (appending) or creates the log file at `path`; `limit` in bytes, `None` for none.
    pub fn open(path: impl Into<PathBuf>, limit: Option<u64>) -> io::Result<Self> {
        let path = path.into();
        let file = append(&path)?;
        let len = file.metadata()?.len();
        let mut previous = path.clone().into_os_string();
        previous.push(".1");
        Ok(Self {
            path,
            previous: previous.into(),
            limit,
            file,
            len,
            at_line_start: true,
        })
    }

    /// Moves the live file to `<path>.1` and starts a new one. When either step fails the old
    /// file is kept and written to (a log line is worth more than the limit); the next write
    /// tries again.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        // Replaces an existing `.1` (on Windows std::fs::rename is MoveFileExW with
        // MOVEFILE_REPLACE_EXISTING); our handle was opened with FILE_SHARE_DELETE (std's
        // default), so the open file can be renamed.
        std::fs::rename(&self.path, &self.previous)?;
        self.file = append(&self.path)?;
        self.len = 0;
        Ok(())
    }
}

fn append(path: &PathBuf) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl Write for SizeLimitedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let past_limit = self
            .limit
            .is_some_and(|limit| self.len.saturating_add(buf.len() as u64) > limit);
        // Only at the start of a line, and never for an empty file: a single write larger than
        // the limit goes whole into a file of its own rather than being cut.
        if past_limit && self.at_line_start && self.len > 0 {
            let _ = self.rotate();
        }
        let n = self.file.write(buf)?;
        self.len += n as u64;
        if let Some(last) = buf[..n].last() {
            self.at_line_start = *last == b'\n';
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `count` numbered log events through the same fmt layer the daemon uses, with a
    /// file limit of `limit` bytes, and returns (live file, previous file or None).
    fn log_events(limit: Option<u64>, count: usize) -> (tempfile::TempDir, String, Option<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("csi-proxy.log");
        let file = SizeLimitedFile::open(&path, limit).unwrap();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_target(false)
            .with_writer(std::sync::Mutex::new(file))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..count {
                tracing::info!(request = i, "a request line padded to a realistic length");
            }
        });
        let live = std::fs::read_to_string(&path).unwrap();
        let previous = std::fs::read_to_string(dir.path().join("csi-proxy.log.1")).ok();
        (dir, live, previous)
    }

    /// The numbers of the events in `text`, checking each line is one whole event.
    fn events(text: &str) -> Vec<usize> {
        assert!(text.is_empty() || text.ends_with('\n'), "a line was cut");
        text.lines()
            .map(|l| {
                assert!(l.contains(" INFO "), "not a whole event line: {l:?}");
                l.rsplit("request=").next().unwrap().parse().unwrap()
            })
            .collect()
    }

    #[test]
    fn the_live_file_stays_under_its_limit_and_one_previous_file_is_kept() {
        let limit = 4096;
        let count = 1000; // about 100 bytes each: some 25 rotations
        let (dir, live, previous) = log_events(Some(limit), count);
        assert!(live.len() as u64 <= limit, "live file {} bytes", live.len());
        let previous = previous.expect("no previous file was kept");
        assert!(previous.len() as u64 <= limit);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "exactly the live and one previous file: {names:?}"
        );
        // The two files hold the last events in order, none lost at the seam, none split.
        let (old, new) = (events(&previous), events(&live));
        let all: Vec<usize> = old.iter().chain(&new).copied().collect();
        let first = all[0];
        assert_eq!(all, (first..count).collect::<Vec<_>>());
        // Rotation happened because the next line did not fit: the previous file was full.
        let line = previous.lines().next().unwrap().len() as u64 + 1;
        assert!(previous.len() as u64 + line + 8 > limit, "rotated early");
    }

    #[test]
    fn zero_means_unlimited() {
        assert_eq!(limit_from_megabytes(0), None);
        assert_eq!(limit_from_megabytes(1800), Some(1800 * 1024 * 1024));
        assert_eq!(limit_from_megabytes(u64::MAX), Some(u64::MAX));
        let (_dir, live, previous) = log_events(limit_from_megabytes(0), 1000);
        assert_eq!(previous, None);
        assert_eq!(events(&live), (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn a_file_left_over_its_limit_is_rotated_at_the_first_write_and_a_huge_line_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "old run\n".repeat(100)).unwrap();
        std::fs::write(dir.path().join("log.1"), "older run\n").unwrap();
        let mut f = SizeLimitedFile::open(&path, Some(100)).unwrap();
        f.write_all(b"first line of this run\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "first line of this run\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("log.1")).unwrap(),
            "old run\n".repeat(100)
        );
        // Longer than the limit: rotated out alone, never cut.
        let huge = format!("{}\n", "x".repeat(300));
        f.write_all(huge.as_bytes()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), huge);
        f.write_all(b"next\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "next\n");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("log.1")).unwrap(),
            huge
        );
    }

    #[test]
    fn a_line_written_in_pieces_is_never_split() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut f = SizeLimitedFile::open(&path, Some(10)).unwrap();
        f.write_all(b"12345").unwrap();
        f.write_all(b"67890").unwrap();
        f.write_all(b"abc\n").unwrap(); // past the limit, but mid-line: no rotation
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1234567890abc\n");
        f.write_all(b"d\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "d\n");
    }
}
