//! klog's routing, file names and line format, checked against klog's own rules.

use super::*;

// The parser the end-to-end tests read the daemon's lines with.
#[path = "../../tests/common/klog_line.rs"]
mod klog_line;
use klog_line::parse_klog_line;

fn config(dir: &Path) -> Config {
    Config {
        to_stderr: false,
        also_to_stderr: false,
        stderr_threshold: Severity::Fatal, // keeps the test's stderr quiet
        also_threshold: Severity::Info,
        legacy_threshold: true,
        log_file: None,
        log_dir: Some(dir.display().to_string()),
        max_size: None,
        one_output: false,
        skip_headers: false,
        skip_log_headers: false,
        add_dir_header: false,
    }
}

/// Runs `f` with events logged as the daemon logs them, under `config`.
fn logging(config: Config, f: impl FnOnce()) -> Arc<Outputs> {
    let format = KlogFormat::new(&config);
    let outputs = Outputs::open(config).unwrap();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .event_format(format)
        .with_writer(Sink(outputs.clone()))
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    outputs
}

/// The file the `<program>.<SEVERITY>` link in `dir` leads to, and its lines past the header.
/// The file `<program>.<SEV>` in `dir` leads to. Where links cannot be made (wine, a Windows
/// account without the symbolic-link privilege) klog goes on without them, as the daemon does:
/// there this process's newest file of that severity stands in. On Unix the link must be there.
fn current(dir: &Path, program: &str, sev: &str) -> Option<PathBuf> {
    let link = std::fs::read_link(dir.join(format!("{program}.{sev}")));
    if cfg!(unix) {
        return link.ok();
    }
    link.ok().or_else(|| {
        let mark = format!(".log.{sev}.");
        let pid = format!(".{}", std::process::id());
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(program) && n.contains(&mark) && n.ends_with(&pid))
            .max()
            .map(PathBuf::from)
    })
}

fn by_link(dir: &Path, program: &str, sev: &str) -> Option<(String, Vec<String>)> {
    let target = current(dir, program, sev)?;
    let text = std::fs::read_to_string(dir.join(&target)).unwrap();
    let lines = text
        .lines()
        .skip_while(|l| !l.starts_with("Log line format:"))
        .skip(1)
        .map(str::to_string)
        .collect();
    Some((target.display().to_string(), lines))
}

#[test]
fn log_dir_files_are_named_linked_and_filled_as_klogs() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = logging(config(dir.path()), || {
        tracing::info!(group = "volume", "an info line");
        tracing::warn!("a warning");
        tracing::error!(code = 5, "an error");
    });
    let n = &outputs.names;
    let (info, info_lines) = by_link(dir.path(), &n.program, "INFO").expect("INFO link");
    // <program>.<host>.<user>.log.INFO.<yyyymmdd-hhmmss>.<pid>
    let prefix = format!("{}.{}.{}.log.INFO.", n.program, n.host, n.user);
    let stamp = info.strip_prefix(&prefix).expect(&info);
    let (when, pid) = stamp.split_once('.').unwrap();
    assert_eq!(pid, std::process::id().to_string());
    assert!(
        when.len() == 15 && when.as_bytes()[8] == b'-',
        "yyyymmdd-hhmmss: {when}"
    );
    let header = std::fs::read_to_string(dir.path().join(&info)).unwrap();
    assert!(header.starts_with("Log file created at: "), "{header}");
    // INFO holds every line; WARNING the warning and the error; ERROR the error.
    let sevs = |lines: &[String]| -> Vec<char> {
        lines
            .iter()
            .map(|l| parse_klog_line(l).unwrap().0)
            .collect()
    };
    assert_eq!(sevs(&info_lines), ['I', 'W', 'E']);
    let (_, warning) = by_link(dir.path(), &n.program, "WARNING").unwrap();
    assert_eq!(sevs(&warning), ['W', 'E']);
    let (_, error) = by_link(dir.path(), &n.program, "ERROR").unwrap();
    assert_eq!(sevs(&error), ['E']);
    let (_, pid, file, line, msg) = parse_klog_line(&info_lines[0]).unwrap();
    assert_eq!((pid, file.as_str()), (std::process::id(), "tests.rs"));
    assert!(line > 1);
    assert_eq!(msg, "an info line group=\"volume\"");
}

#[test]
fn one_output_and_skip_headers_act_as_in_klog() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = logging(
        Config {
            one_output: true,
            skip_headers: true,
            skip_log_headers: true,
            ..config(dir.path())
        },
        || {
            tracing::info!("i");
            tracing::error!("e");
        },
    );
    let program = &outputs.names.program;
    let read = |sev: &str| {
        let target = current(dir.path(), program, sev).unwrap();
        std::fs::read_to_string(dir.path().join(target)).unwrap()
    };
    assert_eq!(read("INFO"), "i\n");
    assert_eq!(read("ERROR"), "e\n");
}

#[test]
fn an_unwritable_log_dir_falls_back_to_the_temp_dir_as_klog_does() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir");
    let outputs = Outputs::open(config(&missing)).unwrap();
    assert!(!missing.exists(), "klog does not make the directory");
    let link = std::env::temp_dir().join(format!("{}.INFO", outputs.names.program));
    let target = current(&std::env::temp_dir(), &outputs.names.program, "INFO")
        .expect("the INFO link in the temp dir");
    assert!(
        target
            .display()
            .to_string()
            .ends_with(&std::process::id().to_string())
    );
    let _ = std::fs::remove_file(std::env::temp_dir().join(target));
    let _ = std::fs::remove_file(link);
}

/// klog's `output`: which severities reach stderr for each setting.
#[test]
fn stderr_gets_what_klog_writes_there() {
    use Severity::*;
    let base = config(Path::new("/nonexistent"));
    let gets = |c: Config| -> Vec<Severity> {
        [Info, Warning, Error]
            .into_iter()
            .filter(|s| c.stderr_gets(*s))
            .collect()
    };
    let to_stderr = Config {
        to_stderr: true,
        stderr_threshold: Error,
        ..base.clone()
    };
    assert_eq!(gets(to_stderr.clone()), [Info, Warning, Error]);
    assert_eq!(
        gets(Config {
            legacy_threshold: false,
            ..to_stderr
        }),
        [Error]
    );
    let files = Config {
        stderr_threshold: Error,
        ..base.clone()
    };
    assert_eq!(gets(files.clone()), [Error]);
    assert_eq!(
        gets(Config {
            also_to_stderr: true,
            ..files.clone()
        }),
        [Info, Warning, Error]
    );
    assert_eq!(
        gets(Config {
            also_to_stderr: true,
            also_threshold: Warning,
            ..files
        }),
        [Warning, Error]
    );
}

#[test]
fn severities_parse_as_klogs_flag_does() {
    assert_eq!(parse_severity("error"), Ok(Severity::Error));
    assert_eq!(parse_severity("WARNING"), Ok(Severity::Warning));
    assert_eq!(parse_severity("0"), Ok(Severity::Info));
    assert_eq!(parse_severity("3"), Ok(Severity::Fatal));
    assert!(parse_severity("4").is_err());
    assert!(parse_severity("WARN").is_err());
}

#[test]
fn civil_time_matches_known_dates() {
    let at = |s: u64| Civil::of(UNIX_EPOCH + std::time::Duration::from_secs(s));
    let c = at(0);
    assert_eq!((c.year, c.month, c.day, c.hour), (1970, 1, 1, 0));
    // 2000-02-29 12:34:56 UTC (a leap day of a year divisible by 400).
    let c = at(951_827_696);
    assert_eq!(
        (c.year, c.month, c.day, c.hour, c.minute, c.second),
        (2000, 2, 29, 12, 34, 56)
    );
    // 2026-12-01 23:32:18 UTC.
    let c = at(1_796_167_938);
    assert_eq!(
        (c.year, c.month, c.day, c.hour, c.minute, c.second),
        (2026, 12, 1, 23, 32, 18)
    );
}

#[test]
fn the_parser_takes_klogs_own_example_and_refuses_the_old_format() {
    let (sev, pid, file, line, msg) =
        parse_klog_line("I1201 23:32:18.123456    1234 file.go:123] msg").unwrap();
    assert_eq!(
        (sev, pid, file.as_str(), line, msg.as_str()),
        ('I', 1234, "file.go", 123, "msg")
    );
    assert!(parse_klog_line("2026-12-01T23:32:18.123456Z  INFO request group=\"volume\"").is_err());
}

/// A full file is followed by a new one with the time in its name and the link moves to it;
/// within the second a file was made (the same name) it is written on, never restarted
/// with a second header block.
#[test]
fn a_full_log_dir_file_is_followed_by_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = logging(
        Config {
            max_size: Some(300),
            ..config(dir.path())
        },
        || {
            for i in 0..20 {
                tracing::info!(i, "a line of about sixty bytes");
            }
        },
    );
    let program = outputs.names.program.clone();
    let count = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                n.to_string_lossy().contains(".log.INFO.")
            })
            .count()
    };
    let first = current(dir.path(), &program, "INFO").unwrap();
    let text = std::fs::read_to_string(dir.path().join(&first)).unwrap();
    assert_eq!(text.matches("Log file created at").count(), 1, "{text}");
    assert!(
        count(dir.path()) <= 2,
        "same second: one file (two if a second passed)"
    );

    // A file made in an earlier second that is full: the next line starts a new one.
    {
        let mut files = outputs.files();
        let f = files[0].as_mut().unwrap();
        f.name = "csi-proxy.earlier".into();
        f.len = 10_000;
    }
    let before = count(dir.path());
    let format = KlogFormat::new(&outputs.config);
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .event_format(format)
        .with_writer(Sink(outputs.clone()))
        .finish();
    tracing::subscriber::with_default(subscriber, || tracing::info!("after the rotation"));
    let newest = current(dir.path(), &program, "INFO").unwrap();
    let text = std::fs::read_to_string(dir.path().join(&newest)).unwrap();
    assert!(text.ends_with("after the rotation\n"), "{text}");
    assert_eq!(text.matches("Log file created at").count(), 1, "{text}");
    assert!(
        count(dir.path()) == before + 1 || newest == first,
        "a new file, unless the clock still names the first one"
    );
}
