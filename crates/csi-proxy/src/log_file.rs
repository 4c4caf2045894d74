//! `--log_file` with `--log_file_max_size`: a log file that never grows past its limit. When a
//! write would take the file past the limit, the file becomes `<file>.1` (replacing the previous
//! one) and a new file is started, so the log takes at most about twice the limit on disk.
//!
//! Our own writer over `std::fs` rather than a crate: `tracing-appender` rotates by time only,
//! and the size-rotating crates (`file-rotate`, `rolling-file`) rotate after the write that went
//! past the limit and bring date and compression dependencies we have no use for. This one
//! rotates only between whole writes that start a line, and the fmt layer hands it one whole
//! event per write, so no line is ever split across the two files.
//!
//! The rename can fail: on Windows a reader that opened the log without FILE_SHARE_DELETE (a
//! tailer, an editor) makes every rename of it fail with a sharing violation for as long as it
//! holds it. Then the file is copied to `<file>.1` and emptied in place (a write open, which
//! such a reader allows), and if even that fails the rotation is tried again only after another
//! tenth of the limit was written, and the file is emptied once it reaches twice the limit: the
//! log stays bounded whatever holds it, and a held file costs a retry per tenth, not per write.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

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
    /// After a failed rotation, no new attempt before the file reaches this length.
    retry_at: u64,
    /// How the live file is moved to `previous` (a seam: tests make it fail as a held file does).
    rename: fn(&Path, &Path) -> io::Result<()>,
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
            retry_at: 0,
            rename: |from, to| std::fs::rename(from, to),
        })
    }

    /// Moves the live file to `<path>.1` and starts a new one; when the file cannot be moved,
    /// copies it there and empties it in place. Fails only when neither worked; the old file is
    /// then kept and written to (a log line is worth more than the limit) up to twice the limit.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        // Replaces an existing `.1` (on Windows std::fs::rename is MoveFileExW with
        // MOVEFILE_REPLACE_EXISTING); our handle was opened with FILE_SHARE_DELETE (std's
        // default), so only another process's handle can stop it.
        if (self.rename)(&self.path, &self.previous).is_ok() {
            self.file = append(&self.path)?;
        } else {
            std::fs::copy(&self.path, &self.previous)?;
            empty(&self.path)?;
        }
        self.len = 0;
        self.retry_at = 0;
        Ok(())
    }

    /// Rotates when `incoming` more bytes would pass the limit, at the start of a line of a
    /// non-empty file (a single write larger than the limit goes whole into a file of its own).
    fn rotate_if_full(&mut self, incoming: u64) {
        let Some(limit) = self.limit else { return };
        let after = self.len.saturating_add(incoming);
        let past_twice = after > limit.saturating_mul(2);
        if !(after > limit && self.at_line_start && self.len > 0)
            || (self.len < self.retry_at && !past_twice)
        {
            return;
        }
        if let Err(e) = self.rotate() {
            if past_twice && empty(&self.path).is_ok() {
                // Bounded before complete: what was in the file is lost, said in the file.
                self.len = 0;
                let note = format!(
                    "csi-proxy: log file emptied at twice its limit; rotation failed: {e}\n"
                );
                if self.file.write_all(note.as_bytes()).is_ok() {
                    self.len = note.len() as u64;
                }
            }
            self.retry_at = self.len.saturating_add((limit / 10).max(1));
        }
    }
}

/// Empties the file at `path` in place through a new write handle (our own is append-only,
/// which on Windows cannot set the end of file); appends through ours then start at 0.
fn empty(path: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map(drop)
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl Write for SizeLimitedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.rotate_if_full(buf.len() as u64);
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
        let file = SizeLimitedFile::open(dir.path().join("csi-proxy.log"), limit).unwrap();
        log_events_to(dir, file, count)
    }

    /// Runs `f` with events logged to `file` through the fmt layer the daemon uses.
    fn logging_to(file: SizeLimitedFile, f: impl FnOnce()) {
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_target(false)
            .with_writer(std::sync::Mutex::new(file))
            .finish();
        tracing::subscriber::with_default(subscriber, f);
    }

    fn log_events_to(
        dir: tempfile::TempDir,
        file: SizeLimitedFile,
        count: usize,
    ) -> (tempfile::TempDir, String, Option<String>) {
        let path = dir.path().join("csi-proxy.log");
        logging_to(file, || {
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

    /// A file that cannot be renamed, as on Windows while a reader holds it without
    /// FILE_SHARE_DELETE: it used to grow without limit, a rename tried at every write.
    fn held(_: &Path, _: &Path) -> io::Result<()> {
        HELD_RENAMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(io::Error::from_raw_os_error(32)) // ERROR_SHARING_VIOLATION's number
    }
    static HELD_RENAMES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    #[test]
    fn a_file_that_cannot_be_renamed_is_copied_and_emptied_and_stays_under_its_limit() {
        let (limit, count) = (4096, 1000);
        let dir = tempfile::tempdir().unwrap();
        let mut file =
            SizeLimitedFile::open(dir.path().join("csi-proxy.log"), Some(limit)).unwrap();
        file.rename = held;
        let (_dir, live, previous) = log_events_to(dir, file, count);
        assert!(live.len() as u64 <= limit, "live file {} bytes", live.len());
        let previous = previous.expect("nothing was copied to the previous file");
        assert!(previous.len() as u64 <= limit);
        let all: Vec<usize> = events(&previous).into_iter().chain(events(&live)).collect();
        assert_eq!(
            all,
            (all[0]..count).collect::<Vec<_>>(),
            "events lost at the seam"
        );
    }

    #[test]
    fn when_neither_rename_nor_copy_works_the_file_stays_bounded_and_retries_are_rare() {
        let (limit, count) = (4096u64, 2000);
        let dir = tempfile::tempdir().unwrap();
        // A directory where the previous file goes: the copy fails too.
        std::fs::create_dir(dir.path().join("csi-proxy.log.1")).unwrap();
        let mut file =
            SizeLimitedFile::open(dir.path().join("csi-proxy.log"), Some(limit)).unwrap();
        file.rename = held;
        let before = HELD_RENAMES.load(std::sync::atomic::Ordering::Relaxed);
        let path = dir.path().join("csi-proxy.log");
        let mut largest = 0;
        logging_to(file, || {
            for i in 0..count {
                tracing::info!(request = i, "a request line padded to a realistic length");
                largest = largest.max(std::fs::metadata(&path).unwrap().len());
            }
        });
        // About 100 bytes an event: some 200 KB written, 50 times the limit.
        assert!(largest <= 2 * limit, "the log grew to {largest} bytes");
        let tries = HELD_RENAMES.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(tries <= 600, "{tries} rename attempts for {count} writes");
        let live = std::fs::read_to_string(&path).unwrap();
        assert!(
            live.contains("log file emptied at twice its limit"),
            "{live}"
        );
        assert!(live.ends_with(&format!("request={}\n", count - 1)));
    }

    /// The real thing on Windows: a reader holding the log without FILE_SHARE_DELETE.
    #[cfg(windows)]
    #[test]
    fn a_reader_without_share_delete_does_not_make_the_log_grow() {
        use std::os::windows::fs::OpenOptionsExt;
        let (limit, count) = (4096u64, 1000);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("csi-proxy.log");
        let file = SizeLimitedFile::open(&path, Some(limit)).unwrap();
        // FILE_SHARE_READ | FILE_SHARE_WRITE, no FILE_SHARE_DELETE: as a tailer opens it.
        let reader = OpenOptions::new()
            .read(true)
            .share_mode(3)
            .open(&path)
            .unwrap();
        let probe = dir.path().join("probe");
        std::fs::write(&probe, b"x").unwrap();
        let held = OpenOptions::new()
            .read(true)
            .share_mode(3)
            .open(&probe)
            .unwrap();
        if std::fs::rename(&probe, dir.path().join("probe.1")).is_ok() {
            eprintln!(
                "SKIPPED: this Windows (wine?) renames a file held without FILE_SHARE_DELETE"
            );
            return;
        }
        drop(held);
        let (_dir, live, previous) = log_events_to(dir, file, count);
        drop(reader);
        assert!(live.len() as u64 <= limit, "live file {} bytes", live.len());
        assert!(previous.is_some_and(|p| p.len() as u64 <= limit));
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
