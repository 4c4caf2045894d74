//! Command-line flags, compatible with upstream's Go `flag` spelling.
//!
//! Go accepts `-name`, `--name`, `-name=value` and `-name value`, and bools as `-name` or
//! `-name=false`. [`go_style`] rewrites single-dash long names to clap's double-dash form before
//! parsing, so existing service install lines keep working.

use clap::{ArgAction, Parser};
use std::ffi::OsString;

#[cfg(windows)]
const DEFAULT_KUBELET_PATH: &str = r"C:\var\lib\kubelet";
#[cfg(not(windows))]
const DEFAULT_KUBELET_PATH: &str = "/var/lib/kubelet";

/// What `--version` reports: the package version, and for a build by scripts/release.sh also
/// the commit it was built from (`CSI_PROXY_RELEASE`, set by the script).
pub const VERSION: &str = match option_env!("CSI_PROXY_RELEASE") {
    Some(line) => line,
    None => env!("CARGO_PKG_VERSION"),
};

/// csi-proxy: does privileged storage work on the host for CSI node plugins, over gRPC.
#[derive(Debug, Parser)]
// Go's flag package lets a flag be given again, the last value winning; repeatable flags
// (`ArgAction::Append`) still collect every value.
#[command(name = "csi-proxy", version = VERSION, about, long_about = None, args_override_self = true)]
pub struct Flags {
    /// The kubelet directory; every path argument must lie inside it or inside a --working-dir.
    #[arg(long = "kubelet-path", default_value = DEFAULT_KUBELET_PATH, value_name = "DIR")]
    pub kubelet_path: String,

    /// An extra directory path arguments may lie in (repeatable).
    #[arg(long = "working-dir", value_name = "DIR", action = ArgAction::Append)]
    pub working_dirs: Vec<String>,

    /// Directory of the Unix sockets (Linux), one per API group-version.
    #[arg(
        long = "socket-dir",
        default_value = "/run/csi-proxy",
        value_name = "DIR"
    )]
    pub socket_dir: String,

    /// Owning group of the Unix sockets (name or gid); the sockets have mode 0660.
    #[arg(long = "socket-group", value_name = "GROUP")]
    pub socket_group: Option<String>,

    /// Directory of the daemon's durable records: what FormatVolume has done, so a retried
    /// format (also after a restart) can tell its own work from a filesystem it must not touch.
    #[arg(long = "state-dir", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
    pub state_dir: String,

    /// Per-driver profiles (TOML): each listed driver gets its own endpoints and may touch only
    /// its own paths, disks, mappings and sessions. Without it every client may do everything,
    /// as upstream (see docs/security.md).
    #[arg(long = "profiles", value_name = "FILE")]
    pub profiles: Option<String>,

    /// Filesystem FormatVolume creates on Linux: ext4 or xfs.
    #[arg(long = "format-filesystem", default_value = "ext4", value_name = "TYPE",
          value_parser = ["ext4", "xfs"])]
    pub format_filesystem: String,

    /// A kernel filesystem type MountVolume may mount on Linux besides ext4, xfs and btrfs
    /// (repeatable; e.g. `vfat`, `ntfs3`): each is a kernel driver that parses tenants' volumes
    /// as root.
    #[arg(long = "mount-filesystem", value_name = "TYPE", action = ArgAction::Append,
          value_parser = filesystem_type)]
    pub mount_filesystems: Vec<String>,

    /// Linux: a process whose open descriptors the daemon may not read (one holding
    /// capabilities the daemon lacks, as in a sandbox) is not counted as holding a disk. Off by
    /// default: the in-use check then refuses every write, naming that process.
    #[arg(long = "skip-unreadable-processes", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub skip_unreadable_processes: bool,

    /// Linux: how the in-use rule finds processes holding a disk: `auto` asks the kernel's
    /// task iterators (BPF; needs CAP_BPF and CAP_PERFMON, the host's PID namespace and the
    /// kernel's BTF) and reads /proc where they are not offered; `proc` always reads /proc (one
    /// entry per descriptor: slower on a busy node). The start-up log says which is used.
    #[arg(long = "in-use-scan", default_value = "auto", value_name = "HOW",
          value_parser = ["auto", "proc"])]
    pub in_use_scan: String,

    /// Take over from the csi-proxy serving with the same --state-dir without a failed call:
    /// serve beside it, rename the sockets over its own, then ask it to stop (it lets its
    /// calls finish). Without a serving daemon: an ordinary start.
    #[arg(long = "take-over", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub take_over: bool,

    /// Once a --take-over daemon has taken the endpoints from this one: exit (false), or let
    /// every lock go and wait to be stopped (true), for a supervisor that would restart an
    /// exited daemon, which would then take the endpoints back (a DaemonSet's pod, restarted
    /// until its controller deletes it).
    #[arg(long = "wait-after-hand-off", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub wait_after_hand_off: bool,

    /// Security descriptor (SDDL) of the named pipes (Windows). Default: SYSTEM and
    /// Administrators only.
    #[arg(long = "pipe-sddl", value_name = "SDDL")]
    pub pipe_sddl: Option<String>,

    /// Run under the Windows Service Control Manager (Windows only).
    #[arg(long = "windows-service", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub windows_service: bool,

    /// Write start, stop and every failure that stops the daemon to the Windows Event Log
    /// (source `csi-proxy`). Default: on under --windows-service, else off.
    #[arg(long = "windows-event-log", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, value_name = "BOOL", value_parser = go_bool)]
    pub windows_event_log: Option<bool>,

    /// A host service StartService/StopService may act on (repeatable; case-insensitive).
    #[arg(long = "allowed-service", value_name = "NAME", action = ArgAction::Append,
          help = ALLOWED_SERVICE_HELP)]
    pub allowed_services: Vec<String>,

    /// Require SMB encryption for new global mappings (Windows).
    #[arg(long = "require-privacy", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "true", value_name = "BOOL",
          value_parser = go_bool)]
    pub require_privacy: bool,

    /// Address (host:port, or :port for all interfaces) to serve Prometheus metrics on
    /// `/metrics`; empty: off.
    #[arg(
        long = "metrics-bind-address",
        default_value = "",
        value_name = "HOST:PORT"
    )]
    pub metrics_bind_address: String,

    /// Log verbosity (klog levels): 2 logs failed requests, 4 one line per request. Negative
    /// values are accepted, as Go's klog does (no verbose lines).
    #[arg(
        short = 'v',
        long = "v",
        default_value_t = 0,
        value_name = "LEVEL",
        allow_negative_numbers = true
    )]
    pub verbosity: i32,

    /// Write logs to this file (used when --logtostderr=false); takes precedence over --log_dir.
    #[arg(long = "log_file", value_name = "FILE")]
    pub log_file: Option<String>,

    /// Largest size of a log file in megabytes (klog's: 1 MB = 1024 * 1024 bytes). --log_file
    /// that would grow past it becomes `<FILE>.1` (replacing the previous one) and a new file
    /// is started; a --log_dir file is followed by a new one with the time in its name, as
    /// klog does. 0: unlimited.
    #[arg(long = "log_file_max_size", default_value_t = 1800, value_name = "MB")]
    pub log_file_max_size: u64,

    /// Log to stderr instead of files.
    #[arg(long = "logtostderr", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "true", value_name = "BOOL",
          value_parser = go_bool)]
    pub logtostderr: bool,

    /// klog's other flags.
    #[command(flatten)]
    pub klog: KlogFlags,
}

/// The rest of the flags `klog.InitFlags` registers (klog v2.140, which upstream's release
/// links), acting as in klog; `-vmodule` and `-log_backtrace_at` are accepted and ignored (no
/// per-file verbosity, no stack traces). Values are parsed as Go would (bools by [`go_bool`],
/// severities by [`crate::klog::parse_severity`]) so a line Go refuses is refused here too.
#[derive(Debug, clap::Args)]
pub struct KlogFlags {
    /// Log to stderr as well as files.
    #[arg(long = "alsologtostderr", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub alsologtostderr: bool,
    /// Write log files in this directory (no effect with --logtostderr or --log_file); when
    /// it cannot be written, in the temp directory, as klog does.
    #[arg(long = "log_dir", value_name = "DIR")]
    pub log_dir: Option<String>,
    /// Lines at or above this severity go to stderr when logging to files.
    #[arg(long = "stderrthreshold", default_value = "ERROR", value_name = "SEVERITY",
          value_parser = crate::klog::parse_severity)]
    pub stderrthreshold: crate::klog::Severity,
    /// With --alsologtostderr, the lowest severity stderr gets.
    #[arg(long = "alsologtostderrthreshold", default_value = "INFO", value_name = "SEVERITY",
          value_parser = crate::klog::parse_severity)]
    pub alsologtostderrthreshold: crate::klog::Severity,
    /// When false, --stderrthreshold filters stderr also under --logtostderr.
    #[arg(long = "legacy_stderr_threshold_behavior", num_args = 0..=1,
          default_missing_value = "true", require_equals = true, default_value = "true",
          value_name = "BOOL", value_parser = go_bool)]
    pub legacy_stderr_threshold_behavior: bool,
    /// Each line goes to its own severity's file only (not to the lower severities' too).
    #[arg(long = "one_output", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub one_output: bool,
    /// Lines without the `Lmmdd hh:mm:ss.uuuuuu pid file:line]` header.
    #[arg(long = "skip_headers", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub skip_headers: bool,
    /// Log files without the header block at their top.
    #[arg(long = "skip_log_headers", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub skip_log_headers: bool,
    /// The source file's directory in each line's header.
    #[arg(long = "add_dir_header", num_args = 0..=1, default_missing_value = "true",
          require_equals = true, default_value = "false", value_name = "BOOL",
          value_parser = go_bool)]
    pub add_dir_header: bool,
    /// Accepted and ignored: per-file verbosity.
    #[arg(long = "vmodule", hide = true)]
    vmodule: Option<String>,
    /// Accepted and ignored: stack traces at a source line.
    #[arg(long = "log_backtrace_at", hide = true)]
    log_backtrace_at: Option<String>,
}

/// A bool as Go's `strconv.ParseBool` reads a flag's value: `1 t T TRUE true True` and
/// `0 f F FALSE false False`.
fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "{s:?} is not a bool (Go's spelling: true, false, 1, 0, t, f)"
        )),
    }
}

/// A kernel filesystem type name as `/proc/filesystems` lists them: lower-case letters, digits,
/// `_` and `.`, at most 32 bytes (a name that could smuggle mount options is refused).
fn filesystem_type(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a kernel filesystem type (lower-case letters, digits, '_' and '.', at most 32)"
        ))
    }
}

/// Rewrites Go-style `-long-name[=value]` arguments to `--long-name[=value]`; `-v`, `-v=4`,
/// `-h` and anything after `--` are left alone.
pub fn go_style(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut rest = false;
    for (i, a) in args.into_iter().enumerate() {
        if i == 0 || rest {
            out.push(a);
            continue;
        }
        let Some(s) = a.to_str() else {
            out.push(a);
            continue;
        };
        if s == "--" {
            rest = true;
            out.push(a);
            continue;
        }
        let name = s.strip_prefix('-').filter(|n| !n.starts_with('-'));
        match name {
            Some(n) if n.split('=').next().is_some_and(|k| k.chars().count() > 1) => {
                out.push(OsString::from(format!("--{n}")));
            }
            _ => out.push(a),
        }
    }
    out
}

impl Flags {
    /// What the klog flags ask for. A service's stderr goes nowhere, so under
    /// --windows-service the files given (--log_file or --log_dir) are written even when
    /// --logtostderr was left at its default.
    pub fn klog(&self) -> crate::klog::Config {
        let files_given = self.log_file.is_some() || self.klog.log_dir.is_some();
        crate::klog::Config {
            to_stderr: self.logtostderr && !(self.windows_service && files_given),
            also_to_stderr: self.klog.alsologtostderr,
            stderr_threshold: self.klog.stderrthreshold,
            also_threshold: self.klog.alsologtostderrthreshold,
            legacy_threshold: self.klog.legacy_stderr_threshold_behavior,
            log_file: self.log_file.clone(),
            log_dir: self.klog.log_dir.clone(),
            max_size: crate::log_file::limit_from_megabytes(self.log_file_max_size),
            one_output: self.klog.one_output,
            skip_headers: self.klog.skip_headers,
            skip_log_headers: self.klog.skip_log_headers,
            add_dir_header: self.klog.add_dir_header,
        }
    }

    /// The verbosity the request log heeds: klog's level, negative ones as 0.
    pub fn request_verbosity(&self) -> u8 {
        self.verbosity.clamp(0, i32::from(u8::MAX)) as u8
    }

    /// Whether events go to the Windows Event Log: `--windows-event-log`, else
    /// `--windows-service`.
    pub fn event_log(&self) -> bool {
        self.windows_event_log.unwrap_or(self.windows_service)
    }
}

/// Whether `args` (Go spelling rewritten) ask for the Event Log, judged without parsing them,
/// for arguments that do not parse: as [`Flags::event_log`] would answer.
pub fn asks_for_event_log(args: &[OsString]) -> bool {
    let value = |name: &str| {
        args.iter().rev().find_map(|a| {
            let a = a.to_str()?.strip_prefix("--")?.strip_prefix(name)?;
            match a {
                "" => Some(true),
                _ => go_bool(a.strip_prefix('=')?).ok(),
            }
        })
    };
    value("windows-event-log")
        .or_else(|| value("windows-service"))
        .unwrap_or(false)
}

/// `--allowed-service` in `--help`: what an install without the flag allows differs per platform.
#[cfg(windows)]
const ALLOWED_SERVICE_HELP: &str = "A host service StartService/StopService may act on \
    (repeatable; case-insensitive). Without it every service may be started and stopped, as \
    upstream allows";
/// `--allowed-service` in `--help`: what an install without the flag allows differs per platform.
#[cfg(not(windows))]
const ALLOWED_SERVICE_HELP: &str = "A host service (systemd `.service` unit) StartService/\
    StopService may act on (repeatable; case-insensitive). Without it no service may be \
    started or stopped";

/// Default of `--state-dir` (shared with `csi-proxy-ctl profiles`).
const DEFAULT_STATE_DIR: &str = csi_proxy_host::format_record::DEFAULT_STATE_DIR;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Flags {
        let mut v = vec![OsString::from("csi-proxy")];
        v.extend(args.iter().map(OsString::from));
        Flags::try_parse_from(go_style(v)).unwrap()
    }

    #[test]
    fn mount_filesystems_repeat_and_refuse_option_smuggling() {
        let f = parse(&["-mount-filesystem=vfat", "--mount-filesystem", "ntfs3"]);
        assert_eq!(f.mount_filesystems, ["vfat", "ntfs3"]);
        assert!(parse(&[]).mount_filesystems.is_empty());
        for bad in ["", "ext4,errors=panic", "VFAT", "a b"] {
            let v = ["csi-proxy", "--mount-filesystem", bad].map(OsString::from);
            assert!(Flags::try_parse_from(v).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn upstream_install_line_parses() {
        let f = parse(&[
            "-windows-service",
            "-log_file=C:\\etc\\kubernetes\\logs\\csi-proxy.log",
            "-logtostderr=false",
            "-v=5",
            "-metrics-bind-address=localhost:8888",
            "-kubelet-path",
            "/var/lib/kubelet",
            "-working-dir=/a",
            "--working-dir",
            "/b",
            "-require-privacy=false",
        ]);
        assert!(f.windows_service);
        assert!(!f.logtostderr);
        assert_eq!(f.verbosity, 5);
        assert_eq!(f.metrics_bind_address, "localhost:8888");
        assert_eq!(f.working_dirs, ["/a", "/b"]);
        assert!(!f.require_privacy);
        assert_eq!(
            f.log_file.as_deref(),
            Some("C:\\etc\\kubernetes\\logs\\csi-proxy.log")
        );
    }

    #[test]
    fn allowed_service_is_repeatable_in_go_spelling() {
        let f = parse(&["-allowed-service=W32Time", "--allowed-service", "csiproxy"]);
        assert_eq!(f.allowed_services, ["W32Time", "csiproxy"]);
        assert!(parse(&[]).allowed_services.is_empty());
    }

    #[test]
    fn defaults_match_upstream() {
        let f = parse(&[]);
        assert!(f.require_privacy);
        assert!(f.logtostderr);
        assert!(!f.windows_service);
        assert_eq!(f.verbosity, 0);
        assert_eq!(f.metrics_bind_address, "");
        assert_eq!(f.kubelet_path, DEFAULT_KUBELET_PATH);
        assert_eq!(f.socket_dir, "/run/csi-proxy");
        assert_eq!(f.log_file_max_size, 1800);
    }

    #[test]
    fn log_file_max_size_in_go_spelling() {
        assert_eq!(parse(&["-log_file_max_size=0"]).log_file_max_size, 0);
        assert_eq!(parse(&["-log_file_max_size", "10"]).log_file_max_size, 10);
        let v = go_style(["csi-proxy", "-log_file_max_size=-1"].map(OsString::from));
        assert!(Flags::try_parse_from(v).is_err());
    }

    #[test]
    fn take_over_in_go_spelling() {
        assert!(parse(&["-take-over"]).take_over);
        assert!(parse(&["--take-over=true"]).take_over);
        assert!(!parse(&["-take-over=false"]).take_over);
        assert!(!parse(&[]).take_over);
        assert!(parse(&["-wait-after-hand-off"]).wait_after_hand_off);
        assert!(!parse(&[]).wait_after_hand_off);
    }

    #[test]
    fn verbosity_spellings() {
        assert_eq!(parse(&["-v", "4"]).verbosity, 4);
        assert_eq!(parse(&["--v=3"]).verbosity, 3);
        assert_eq!(parse(&["-v=2"]).verbosity, 2);
    }

    #[test]
    fn the_event_log_follows_windows_service_unless_told() {
        assert!(!parse(&[]).event_log());
        assert!(parse(&["-windows-service"]).event_log());
        assert!(!parse(&["-windows-service", "-windows-event-log=false"]).event_log());
        assert!(parse(&["-windows-event-log"]).event_log());
        let asks = |a: &[&str]| {
            let mut v = vec![OsString::from("csi-proxy")];
            v.extend(a.iter().map(OsString::from));
            let v = go_style(v);
            // Judged without parsing, the same as parsed wherever the arguments parse.
            if let Ok(f) = Flags::try_parse_from(&v) {
                assert_eq!(f.event_log(), asks_for_event_log(&v), "{a:?}");
            }
            asks_for_event_log(&v)
        };
        assert!(asks(&["-windows-service", "-no-such-flag"]));
        assert!(asks(&["-windows-service=true", "-v=x"]));
        assert!(!asks(&[
            "-windows-service",
            "-windows-event-log=false",
            "-bad"
        ]));
        assert!(asks(&["-windows-event-log", "-bad"]));
        assert!(!asks(&["-bad"]));
        assert!(!asks(&["-windows-service=false"]));
        assert!(asks(&["-windows-service"]));
        assert!(!asks(&["-windows-service-x"]));
    }

    #[test]
    fn a_flag_given_twice_takes_the_last_value_as_go_does() {
        let f = parse(&[
            "-v=2",
            "-v",
            "5",
            "-kubelet-path=/a",
            "--kubelet-path",
            "/b",
        ]);
        assert_eq!((f.verbosity, f.kubelet_path.as_str()), (5, "/b"));
        let f = parse(&[
            "-require-privacy=false",
            "-require-privacy",
            "-working-dir=/x",
        ]);
        assert!(f.require_privacy);
        assert_eq!(
            parse(&["-working-dir=/x", "-working-dir=/y"]).working_dirs,
            ["/x", "/y"]
        );
    }

    #[test]
    fn bools_take_every_value_go_parses_and_nothing_else() {
        for (v, want) in [("1", true), ("t", true), ("TRUE", true), ("True", true)] {
            assert_eq!(
                parse(&[&format!("-require-privacy={v}")]).require_privacy,
                want
            );
        }
        for v in ["0", "f", "F", "FALSE", "false", "False"] {
            assert!(!parse(&[&format!("--logtostderr={v}")]).logtostderr, "{v}");
        }
        for bad in ["yes", "on", "", "2"] {
            let v = go_style(["csi-proxy", &format!("-skip_headers={bad}")].map(OsString::from));
            assert!(Flags::try_parse_from(v).is_err(), "{bad:?}");
        }
    }

    /// Every bool flag, found from the parser itself so a new one cannot be missed, takes Go's
    /// spellings (`--skip-unreadable-processes=1` was refused with clap's `true, false`).
    #[test]
    fn every_bool_flag_takes_gos_spellings() {
        let command = <Flags as clap::CommandFactory>::command();
        let bools: Vec<String> = command
            .get_arguments()
            .filter(|a| a.get_value_names().is_some_and(|n| n == ["BOOL"]))
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect();
        assert!(bools.len() >= 12, "{bools:?}");
        let try_parse = |arg: String| {
            Flags::try_parse_from(go_style(["csi-proxy".into(), OsString::from(arg)]))
        };
        for name in &bools {
            for v in [
                "1", "t", "T", "TRUE", "True", "0", "f", "F", "FALSE", "False",
            ] {
                assert!(try_parse(format!("-{name}={v}")).is_ok(), "-{name}={v}");
            }
            assert!(try_parse(format!("-{name}")).is_ok(), "-{name}");
            assert!(try_parse(format!("--{name}=yes")).is_err(), "--{name}=yes");
        }
        assert!(parse(&["--skip-unreadable-processes=1"]).skip_unreadable_processes);
        assert!(!parse(&["-alsologtostderr=0"]).klog.alsologtostderr);
    }

    #[test]
    fn negative_verbosity_is_accepted_as_go_does() {
        for args in [&["-v=-1"][..], &["-v", "-1"], &["--v=-1"]] {
            let f = parse(args);
            assert_eq!(f.verbosity, -1, "{args:?}");
            assert_eq!(f.request_verbosity(), 0);
        }
        assert_eq!(parse(&["-v=1000"]).request_verbosity(), 255);
    }

    #[test]
    fn klog_flags_take_effect() {
        let f = parse(&[
            "-logtostderr=false",
            "-log_dir=/var/log/csi",
            "-alsologtostderr",
            "-stderrthreshold=WARNING",
            "-one_output=t",
        ]);
        let c = f.klog();
        assert!(!c.to_stderr && c.also_to_stderr && c.one_output);
        assert_eq!(c.log_dir.as_deref(), Some("/var/log/csi"));
        assert_eq!(c.stderr_threshold, crate::klog::Severity::Warning);
        assert_eq!(
            parse(&[]).klog().stderr_threshold,
            crate::klog::Severity::Error
        );
        // A service's stderr goes nowhere: the files given are written.
        assert!(
            !parse(&["-windows-service", "-log_dir=C:\\logs"])
                .klog()
                .to_stderr
        );
        assert!(parse(&["-log_dir=/x"]).klog().to_stderr);
        let v = go_style(["csi-proxy", "-stderrthreshold=LOUD"].map(OsString::from));
        assert!(Flags::try_parse_from(v).is_err());
    }

    #[test]
    fn help_tells_what_no_allowed_service_allows_here() {
        let help = <Flags as clap::CommandFactory>::command()
            .render_help()
            .to_string();
        let line: String = help
            .split("--allowed-service")
            .nth(1)
            .unwrap()
            .split("\n      --")
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if cfg!(windows) {
            assert!(line.contains("every service may be started"), "{line}");
        } else {
            assert!(line.contains("no service may be started"), "{line}");
            assert!(!line.contains("every service"), "{line}");
        }
    }

    #[test]
    fn unknown_flags_are_errors() {
        let v = go_style(["csi-proxy", "-no-such-flag"].map(OsString::from));
        assert!(Flags::try_parse_from(v).is_err());
    }
}
