//! `csi-proxy-ctl`: what the daemon sees, for an operator at the node.
//!
//! Every listing goes through a running csi-proxy over its sockets or pipes (the client crate),
//! so it shows exactly what a CSI driver would get; `profiles` alone reads files (the profiles
//! file and the owners book in the state directory). Tables by default, `-o json` for scripts.
//!
//! Exit codes: 0 all calls answered; 1 the daemon answered some call with an error (the rest is
//! still printed), or the owners book could not be read; 3 the daemon could not be reached;
//! 2 bad command line or profiles file.

mod report;

use clap::{Parser, Subcommand, ValueEnum};
use csi_proxy_client::Connector;
use report::{Failure, Report};
use std::path::PathBuf;
use std::process::ExitCode;

/// What `--version` reports (with the commit for a build by scripts/release.sh).
const VERSION: &str = match option_env!("CSI_PROXY_RELEASE") {
    Some(line) => line,
    None => env!("CARGO_PKG_VERSION"),
};

/// Inspect a running csi-proxy: disks, volumes, SMB mappings, iSCSI portals and sessions.
#[derive(Debug, Parser)]
#[command(name = "csi-proxy-ctl", version = VERSION)]
struct Cli {
    /// Directory of the daemon's Unix sockets (Linux).
    #[arg(long, global = true, default_value = "/run/csi-proxy")]
    socket_dir: PathBuf,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Aligned columns for people.
    Table,
    /// One JSON document on stdout.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Disks: number, SCSI location, page 83 ID, serial number, size, online.
    Disks,
    /// Volumes: ID, disk, partition, filesystem, size, used, mount points.
    Volumes {
        /// Only this disk number.
        #[arg(long)]
        disk: Option<u32>,
    },
    /// SMB global mappings.
    Smb {
        #[command(subcommand)]
        what: SmbCommand,
    },
    /// iSCSI portals and sessions.
    Iscsi {
        #[command(subcommand)]
        what: IscsiCommand,
    },
    /// The gRPC health of every endpoint (23).
    Health,
    /// Per-driver profiles (`--profiles`): each driver's endpoints, groups and extra paths, and
    /// what it holds per the owners book in the state directory. Reads files only: no daemon
    /// is asked.
    Profiles(ProfilesArgs),
    /// Windows: create and attach a small VHDX, run a CSI driver's whole stage flow on it
    /// through the daemon, then detach and delete it. Exit code 1 names the failed step.
    Selftest(SelftestArgs),
    /// The selftest's second process (started by `selftest` itself): holds `what` (`open` or
    /// `lock` a volume, or `entry` a file or directory) on `path`, says `ready`, and keeps it
    /// until its standard input closes (at most five minutes).
    #[command(hide = true)]
    SelftestHold {
        /// `open`, `lock` or `entry`.
        what: String,
        /// The volume GUID path or the entry's path.
        path: String,
    },
    /// The program of the selftest's scratch service (started by the Service Control Manager
    /// when `selftest` starts that service): runs under the service dispatcher and, told to
    /// stop, holds STOP_PENDING until the folder `release` exists (at most two minutes).
    #[command(hide = true)]
    SelftestService {
        /// The release folder.
        release: String,
    },
}

#[derive(Debug, clap::Args)]
struct ProfilesArgs {
    /// The profiles file the daemon was started with (its --profiles).
    #[arg(long, value_name = "FILE")]
    profiles: PathBuf,
    /// The daemon's --state-dir, where the owners book is kept.
    #[arg(long, value_name = "DIR", default_value = csi_proxy_host::format_record::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
}

#[derive(Debug, clap::Args)]
struct SelftestArgs {
    /// The daemon's --kubelet-path: a scratch folder is made (and removed) under it.
    #[arg(long, default_value = r"C:\var\lib\kubelet")]
    kubelet_path: String,
    /// The VHDX file to create (it must not exist); default: in the temp folder.
    #[arg(long)]
    vhdx: Option<PathBuf>,
    /// The VHDX's size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// How many MiB the VHDX grows by.
    #[arg(long, default_value_t = 512)]
    grow_mib: u64,
    /// Seconds to wait for a disk or volume to appear or grow.
    #[arg(long, default_value_t = 120)]
    wait_secs: u64,
    /// A test iSCSI portal, `address[:port]` (port 3260 by default), for the optional iSCSI
    /// steps: login to --iscsi-target without CHAP, the time until its LUNs are listed, logout.
    #[arg(long, requires = "iscsi_target", value_parser = parse_portal)]
    iscsi_portal: Option<csi_proxy_client::iscsi::Portal>,
    /// The IQN of a test target on --iscsi-portal that nothing on this node uses.
    #[arg(long, requires = "iscsi_portal")]
    iscsi_target: Option<String>,
    /// An SMB server (name or address) for the optional SMB steps. One this node does not map:
    /// a mapping of a share of the selftest's own name, which does not exist, without
    /// credentials, to record how Windows reports the failure. One this node maps (by name):
    /// the same share mapped as a user that exists nowhere, by the name and by its address, to
    /// record whether the client groups credentials by the name as written (error 1219).
    #[arg(long)]
    smb_server: Option<String>,
}

/// `address[:port]`, the port 3260 (iSCSI's) when not given.
fn parse_portal(s: &str) -> Result<csi_proxy_client::iscsi::Portal, String> {
    let (address, port) = match s.rsplit_once(':') {
        Some((a, p)) if !a.contains(':') || a.starts_with('[') => (
            a,
            p.parse::<u32>()
                .map_err(|e| format!("port {p:?} of {s:?}: {e}"))?,
        ),
        _ => (s, 3260),
    };
    if address.is_empty() {
        return Err(format!("{s:?} has no address"));
    }
    Ok(csi_proxy_client::iscsi::Portal {
        address: address.to_string(),
        port,
    })
}

#[derive(Debug, Subcommand)]
enum SmbCommand {
    /// Mapped remote shares and where they are mounted.
    Mappings,
}

#[derive(Debug, Subcommand)]
enum IscsiCommand {
    /// Target portals the initiator knows.
    Portals,
    /// Targets on each portal with the disks their sessions expose.
    Sessions,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let connector = if cfg!(windows) {
        Connector::Pipes
    } else {
        Connector::SocketDir(cli.socket_dir.clone())
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("csi-proxy-ctl: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    if let Command::Selftest(args) = &cli.command {
        return selftest(&runtime, &connector, args, cli.output);
    }
    if let Command::SelftestHold { what, path } = &cli.command {
        return selftest_hold(what, path);
    }
    if let Command::SelftestService { release } = &cli.command {
        return selftest_service(release);
    }
    let result = match &cli.command {
        Command::Profiles(args) => report::profiles(&args.profiles, &args.state_dir),
        command => runtime.block_on(run(command, &connector)),
    };
    match result {
        Ok(report) => {
            report.print(cli.output);
            for e in &report.errors {
                eprintln!("csi-proxy-ctl: {e}");
            }
            if report.errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(f) => {
            eprintln!("csi-proxy-ctl: {f}");
            ExitCode::from(f.exit_code())
        }
    }
}

async fn run(command: &Command, c: &Connector) -> Result<Report, Failure> {
    match command {
        Command::Disks => report::disks(c).await,
        Command::Volumes { disk } => report::volumes(c, *disk).await,
        Command::Smb {
            what: SmbCommand::Mappings,
        } => report::smb_mappings(c).await,
        Command::Iscsi {
            what: IscsiCommand::Portals,
        } => report::iscsi_portals(c).await,
        Command::Iscsi {
            what: IscsiCommand::Sessions,
        } => report::iscsi_sessions(c).await,
        Command::Health => report::health(c).await,
        Command::Selftest(_) => unreachable!("run by selftest()"),
        Command::SelftestHold { .. } => unreachable!("run by selftest_hold()"),
        Command::SelftestService { .. } => unreachable!("run by selftest_service()"),
        Command::Profiles(_) => unreachable!("read by report::profiles()"),
    }
}

/// Runs the selftest over this Windows' virtual disk API and prints its steps.
fn selftest(
    runtime: &tokio::runtime::Runtime,
    connector: &Connector,
    args: &SelftestArgs,
    output: Output,
) -> ExitCode {
    const MIB: u64 = 1 << 20;
    let vhdx = args.vhdx.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("csi-proxy-selftest-{}.vhdx", std::process::id()))
    });
    let opts = csi_proxy_ctl::selftest::Options {
        kubelet_path: args.kubelet_path.clone(),
        vhdx_path: vhdx.display().to_string(),
        size: args.size_mib * MIB,
        grown_size: (args.size_mib + args.grow_mib) * MIB,
        wait: std::time::Duration::from_secs(args.wait_secs),
        #[cfg(windows)]
        failure_flag: csi_proxy_ctl::selftest::failure_flag(
            &csi_proxy_host::windows::win32::SystemWin32::default(),
            "csiproxy",
        ),
        #[cfg(not(windows))]
        failure_flag: None,
        iscsi: args
            .iscsi_portal
            .clone()
            .zip(args.iscsi_target.clone())
            .map(|(portal, iqn)| csi_proxy_ctl::selftest::IscsiTarget { portal, iqn }),
        #[cfg(windows)]
        smb_server: args.smb_server.as_deref().map(|name| {
            csi_proxy_ctl::selftest::smb_server(
                &csi_proxy_host::windows::win32::SystemWin32::default(),
                name,
            )
        }),
        #[cfg(not(windows))]
        smb_server: None,
        program: std::env::current_exe()
            .ok()
            .map(|p| p.display().to_string()),
    };
    #[cfg(windows)]
    let outcome = {
        let os = csi_proxy_host::windows::win32::SystemWin32::default();
        let others = match std::env::current_exe() {
            Ok(program) => csi_proxy_ctl::selftest::hold::ChildProcess {
                program,
                args: vec!["selftest-hold".into()],
            },
            Err(e) => {
                eprintln!(
                    "csi-proxy-ctl: cannot name its own program for the selftest's second process: {e}"
                );
                return ExitCode::from(1);
            }
        };
        let machine = csi_proxy_ctl::selftest::Machine {
            vd: &csi_proxy_host::windows::win32::vhd::RealVirtualDisks,
            os: &os,
            others: &others,
        };
        runtime.block_on(csi_proxy_ctl::selftest::run(connector, machine, &opts))
    };
    #[cfg(not(windows))]
    let outcome = {
        let _ = (runtime, connector, opts);
        csi_proxy_ctl::selftest::Outcome::failed_at(
            "virtual disk service",
            "this is not Windows: the selftest attaches a VHDX with the Windows virtual disk API (CI runs it over the simulated Windows)",
        )
    };
    report::selftest(&outcome).print(output);
    match outcome.failed() {
        Some(step) => {
            eprintln!(
                "csi-proxy-ctl: selftest failed at {}: {}",
                step.name, step.answer
            );
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    }
}

/// The selftest's second process: holds what it is told until its input closes.
fn selftest_hold(what: &str, path: &str) -> ExitCode {
    use csi_proxy_ctl::selftest::hold;
    let Some(what) = hold::Hold::parse(what, path) else {
        println!("failed: {what:?} is not open, lock or entry");
        return ExitCode::from(2);
    };
    #[cfg(windows)]
    let held = hold::serve(
        &csi_proxy_host::windows::win32::SystemWin32::default(),
        &what,
        std::io::stdin(),
        &mut std::io::stdout(),
        hold::CHILD_LIMIT,
    );
    #[cfg(not(windows))]
    let held = {
        println!("failed: this is not Windows; nothing to hold {what:?} on");
        false
    };
    if held {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The selftest's scratch service: runs under the service dispatcher until it has stopped.
fn selftest_service(release: &str) -> ExitCode {
    #[cfg(windows)]
    let ran = csi_proxy_ctl::selftest::service::dispatch(release.to_string());
    #[cfg(not(windows))]
    let ran: Result<(), String> = Err(format!(
        "this is not Windows: no service dispatcher to run under (release folder {release})"
    ));
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "csi-proxy-ctl: selftest-service is started by the Service Control Manager \
                 only: {e}"
            );
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod selftest_flag_tests {
    use super::parse_portal;

    #[test]
    fn a_portal_is_an_address_and_an_optional_port() {
        let p = parse_portal("10.0.0.9").unwrap();
        assert_eq!((p.address.as_str(), p.port), ("10.0.0.9", 3260));
        let p = parse_portal("array.example.com:3261").unwrap();
        assert_eq!((p.address.as_str(), p.port), ("array.example.com", 3261));
        for bad in ["", ":3260", "host:port", "host:99999999999"] {
            assert!(parse_portal(bad).is_err(), "{bad}");
        }
    }
}
