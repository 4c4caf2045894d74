//! Logging as upstream's daemon does it through klog v2: the same flags with the same effects
//! (`-logtostderr`, `-alsologtostderr`, `-stderrthreshold`, `-log_dir`, `-log_file`,
//! `-one_output`, `-skip_headers`, `-skip_log_headers`, `-add_dir_header`), the same file names
//! and symbolic links, and klog's line format, so log pipelines that parse upstream's lines
//! (klog parsers in Fluent Bit and Vector, the managed clusters' Windows log collection) parse
//! ours.
//!
//! A line is `Lmmdd hh:mm:ss.uuuuuu PPPPPPP file:line] message key=value …`: `L` the severity
//! (`I`, `W`, `E`), then the time, the process id right-aligned in seven columns, and the source
//! file's base name and line. The time is UTC (klog writes the node's local time; the daemon
//! carries no time-zone database, and nodes run UTC as a rule).
//!
//! Built on `tracing-subscriber`'s fmt layer: [`KlogFormat`] writes the header and the event's
//! fields as the default format would, and [`Sink`] routes each whole line by its severity to
//! stderr and the log files as klog's `output` does.

use crate::log_file::SizeLimitedFile;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// klog's severities, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// `I`; also every tracing level below INFO (klog's V levels are INFO lines).
    Info = 0,
    /// `W`.
    Warning = 1,
    /// `E`.
    Error = 2,
    /// `F`: accepted as a threshold; the daemon logs none.
    Fatal = 3,
}

const NAMES: [&str; 4] = ["INFO", "WARNING", "ERROR", "FATAL"];

impl Severity {
    const ALL: [Severity; 4] = [Self::Info, Self::Warning, Self::Error, Self::Fatal];

    fn of(level: &tracing::Level) -> Self {
        match *level {
            tracing::Level::ERROR => Self::Error,
            tracing::Level::WARN => Self::Warning,
            _ => Self::Info,
        }
    }

    fn name(self) -> &'static str {
        NAMES[self as usize]
    }
}

/// A severity as klog's `-stderrthreshold` reads one: a name in any case, or its number 0–3.
pub fn parse_severity(s: &str) -> Result<Severity, String> {
    if let Some(i) = NAMES.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        return Ok(Severity::ALL[i]);
    }
    match s.parse::<usize>() {
        Ok(i) if i < 4 => Ok(Severity::ALL[i]),
        _ => Err(format!(
            "{s:?} is not a severity (INFO, WARNING, ERROR, FATAL or 0 to 3)"
        )),
    }
}

/// What the klog flags asked for.
#[derive(Debug, Clone)]
pub struct Config {
    /// `-logtostderr`: stderr instead of files.
    pub to_stderr: bool,
    /// `-alsologtostderr`: stderr as well as files.
    pub also_to_stderr: bool,
    /// `-stderrthreshold`: with files, lines at or above it go to stderr too.
    pub stderr_threshold: Severity,
    /// `-alsologtostderrthreshold`: with `-alsologtostderr`, the lowest severity stderr gets.
    pub also_threshold: Severity,
    /// `-legacy_stderr_threshold_behavior`: when false, `-stderrthreshold` filters stderr also
    /// under `-logtostderr`.
    pub legacy_threshold: bool,
    /// `-log_file`: one file for every severity.
    pub log_file: Option<String>,
    /// `-log_dir`: where the per-severity files are made (else the temp directory).
    pub log_dir: Option<String>,
    /// `-log_file_max_size`, in bytes; `None`: unlimited.
    pub max_size: Option<u64>,
    /// `-one_output`: a line goes to its own severity's file only.
    pub one_output: bool,
    /// `-skip_headers`: lines without the header.
    pub skip_headers: bool,
    /// `-skip_log_headers`: files without the header block.
    pub skip_log_headers: bool,
    /// `-add_dir_header`: the source file's directory in the line header.
    pub add_dir_header: bool,
}

impl Config {
    /// Whether a line of `sev` goes to stderr (klog's `output`).
    fn stderr_gets(&self, sev: Severity) -> bool {
        if self.to_stderr {
            return self.legacy_threshold || sev >= self.stderr_threshold;
        }
        (self.also_to_stderr && sev >= self.also_threshold) || sev >= self.stderr_threshold
    }
}

/// Where log lines go: stderr and the files, as [`Config`] says.
pub struct Outputs {
    config: Config,
    names: FileNames,
    /// `-log_file`.
    single: Option<Mutex<SizeLimitedFile>>,
    /// The per-severity files (`-log_dir` or the temp directory), made at their first line.
    per_severity: Mutex<[Option<SeverityFile>; 4]>,
}

impl Outputs {
    /// Opens what `config` logs to. The file of INFO lines (or `-log_file`) is made now, so a
    /// log that cannot be written stops the start-up rather than going nowhere; klog exits on
    /// its first line then.
    pub fn open(config: Config) -> Result<Arc<Self>, String> {
        let names = FileNames::of_this_process();
        let mut single = None;
        if !config.to_stderr
            && let Some(path) = &config.log_file
        {
            let mut file = SizeLimitedFile::open(path, config.max_size)
                .map_err(|e| format!("cannot open --log_file {path}: {e}"))?;
            if !config.skip_log_headers {
                let _ = file.write_all(names.header(SystemTime::now()).as_bytes());
            }
            single = Some(Mutex::new(file));
        }
        let outputs = Arc::new(Self {
            config,
            names,
            single,
            per_severity: Mutex::new([None, None, None, None]),
        });
        if outputs.uses_severity_files() {
            let file = outputs.create(Severity::Info)?;
            outputs.files()[0] = Some(file);
        }
        Ok(outputs)
    }

    /// Whether a line of `sev` reaches stderr.
    pub fn stderr_gets(&self, sev: Severity) -> bool {
        self.config.stderr_gets(sev)
    }

    fn uses_severity_files(&self) -> bool {
        !self.config.to_stderr && self.config.log_file.is_none()
    }

    fn files(&self) -> std::sync::MutexGuard<'_, [Option<SeverityFile>; 4]> {
        self.per_severity
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the file of `sev` lines in the first directory that takes it (klog: `-log_dir`,
    /// then the temp directory), with its header and the `<program>.<SEVERITY>` link to it.
    fn create(&self, sev: Severity) -> Result<SeverityFile, String> {
        let now = SystemTime::now();
        let name = self.names.file_name(sev, now);
        let mut dirs: Vec<PathBuf> = self.config.log_dir.iter().map(PathBuf::from).collect();
        dirs.push(std::env::temp_dir());
        let mut errors = Vec::new();
        for dir in dirs {
            let path = dir.join(&name);
            match OpenOptions::new().create(true).append(true).open(&path) {
                Ok(mut file) => {
                    let link = dir.join(format!("{}.{}", self.names.program, sev.name()));
                    let _ = std::fs::remove_file(&link);
                    let _ = symlink(Path::new(&name), &link);
                    // A file of this name exists when one was made in the same second: it
                    // is written on, its header already at its top.
                    let existing = file.metadata().map_or(0, |m| m.len());
                    if existing == 0 && !self.config.skip_log_headers {
                        let _ = file.write_all(self.names.header(now).as_bytes());
                    }
                    let len = file.metadata().map_or(existing, |m| m.len());
                    return Ok(SeverityFile { file, len, name });
                }
                Err(e) => errors.push(format!("{}: {e}", path.display())),
            }
        }
        Err(format!("cannot create log: {}", errors.join("; ")))
    }

    /// Writes one whole line of `sev` where it goes.
    fn write(&self, sev: Severity, line: &[u8]) {
        if self.stderr_gets(sev) {
            let _ = io::stderr().write_all(line);
        }
        if let Some(single) = &self.single {
            let mut f = single.lock().unwrap_or_else(|p| p.into_inner());
            let _ = f.write_all(line);
            return;
        }
        if !self.uses_severity_files() {
            return;
        }
        let mut files = self.files();
        // Its own severity's file, and unless -one_output every lower one's.
        let targets: Vec<Severity> = if self.config.one_output {
            vec![sev]
        } else {
            Severity::ALL.into_iter().filter(|s| *s <= sev).collect()
        };
        for target in targets {
            let slot = &mut files[target as usize];
            // Full: a new file with the time in its name follows, as klog's rotation makes it;
            // within the same second that name is this file's, so it is written on.
            let full = |f: &SeverityFile| {
                self.config
                    .max_size
                    .is_some_and(|max| f.len > 0 && f.len + line.len() as u64 >= max)
                    && f.name != self.names.file_name(target, SystemTime::now())
            };
            if slot.as_ref().is_none_or(full) {
                match self.create(target) {
                    Ok(f) => *slot = Some(f),
                    Err(e) if slot.is_none() => {
                        // The line still appears somewhere.
                        let _ = writeln!(io::stderr(), "log: {e}");
                        if !self.stderr_gets(sev) {
                            let _ = io::stderr().write_all(line);
                        }
                        continue;
                    }
                    Err(_) => {} // kept writing the full one
                }
            }
            if let Some(f) = slot.as_mut()
                && f.file.write_all(line).is_ok()
            {
                f.len += line.len() as u64;
            }
        }
    }
}

/// One severity's log file and what has been written to it.
struct SeverityFile {
    file: File,
    len: u64,
    /// Its file name: a file made in the same second would have the same one.
    name: String,
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(windows)]
fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    // Needs the symbolic-link privilege, which a service account may lack: klog ignores the
    // failure too.
    std::os::windows::fs::symlink_file(target, link)
}

/// The parts of klog's file names: `<program>.<host>.<user>.log.<SEVERITY>.<yyyymmdd-hhmmss>.<pid>`.
struct FileNames {
    program: String,
    host: String,
    user: String,
    pid: u32,
}

impl FileNames {
    fn of_this_process() -> Self {
        let program = std::env::args_os()
            .next()
            .and_then(|a| {
                Path::new(&a)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "csi-proxy".into());
        Self {
            program,
            host: host_name().unwrap_or_else(|| "unknownhost".into()),
            user: sanitized(&user_name().unwrap_or_else(|| "unknownuser".into())),
            pid: std::process::id(),
        }
    }

    fn file_name(&self, sev: Severity, now: SystemTime) -> String {
        let t = Civil::of(now);
        format!(
            "{}.{}.{}.log.{}.{:04}{:02}{:02}-{:02}{:02}{:02}.{}",
            self.program,
            self.host,
            self.user,
            sev.name(),
            t.year,
            t.month,
            t.day,
            t.hour,
            t.minute,
            t.second,
            self.pid
        )
    }

    /// The block klog writes at the top of each file it makes.
    fn header(&self, now: SystemTime) -> String {
        let t = Civil::of(now);
        format!(
            "Log file created at: {:04}/{:02}/{:02} {:02}:{:02}:{:02}\nRunning on machine: {}\n\
             Binary: {} {} for {}/{}\n\
             Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n",
            t.year,
            t.month,
            t.day,
            t.hour,
            t.minute,
            t.second,
            self.host,
            self.program,
            crate::flags::VERSION,
            std::env::consts::OS,
            std::env::consts::ARCH
        )
    }
}

/// The host name up to its first dot, as klog's `shortHostname`.
fn host_name() -> Option<String> {
    #[cfg(unix)]
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    #[cfg(windows)]
    let name = std::env::var("COMPUTERNAME").ok();
    let name = name?;
    let short = name
        .trim()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string();
    (!short.is_empty()).then_some(short)
}

/// The name of the user the daemon runs as (Linux: its real uid in /etc/passwd).
fn user_name() -> Option<String> {
    #[cfg(unix)]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let uid = status.as_deref().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().next().map(str::to_string))
        });
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        uid.and_then(|uid| {
            passwd.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == uid).then(|| f[0].to_string())
            })
        })
        .or_else(|| std::env::var("USER").ok())
    }
    #[cfg(windows)]
    {
        let user = std::env::var("USERNAME").ok()?;
        Some(match std::env::var("USERDOMAIN") {
            Ok(domain) => format!("{domain}\\{user}"),
            Err(_) => user,
        })
    }
}

/// `name` with every character but ASCII letters and digits made `_`, as klog does before
/// putting the user into a file name.
fn sanitized(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A UTC calendar time.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    micros: u32,
}

impl Civil {
    fn of(t: SystemTime) -> Self {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = d.as_secs() as i64;
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        // Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            micros: d.subsec_micros(),
        }
    }
}

/// klog's line header before each event, then the event's fields as the default format writes
/// them (`message key=value …`).
pub struct KlogFormat {
    pid: u32,
    skip_headers: bool,
    add_dir_header: bool,
}

impl KlogFormat {
    /// The format `config` asks for.
    pub fn new(config: &Config) -> Self {
        Self {
            pid: std::process::id(),
            skip_headers: config.skip_headers,
            add_dir_header: config.add_dir_header,
        }
    }
}

impl<S, N> FormatEvent<S, N> for KlogFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        if !self.skip_headers {
            let t = Civil::of(SystemTime::now());
            let path = Path::new(meta.file().unwrap_or("???"));
            let base = path.file_name().map(|n| n.to_string_lossy());
            let base = base.as_deref().unwrap_or("???");
            let dir = path
                .parent()
                .and_then(Path::file_name)
                .map(|d| d.to_string_lossy());
            let file = match (self.add_dir_header, dir) {
                (true, Some(dir)) => format!("{dir}/{base}"),
                _ => base.to_string(),
            };
            write!(
                writer,
                "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} {}:{}] ",
                &Severity::of(meta.level()).name()[..1],
                t.month,
                t.day,
                t.hour,
                t.minute,
                t.second,
                t.micros,
                self.pid,
                file,
                meta.line().unwrap_or(1)
            )?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The fmt layer's writer: each event, formatted whole, goes to [`Outputs::write`] with its
/// severity.
#[derive(Clone)]
pub struct Sink(pub Arc<Outputs>);

/// One event's line on its way to the outputs.
pub struct Line {
    outputs: Arc<Outputs>,
    sev: Severity,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outputs.write(self.sev, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
            outputs: self.0.clone(),
            sev: Severity::Info,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Line {
        Line {
            outputs: self.0.clone(),
            sev: Severity::of(meta.level()),
        }
    }
}

#[cfg(test)]
mod tests;
