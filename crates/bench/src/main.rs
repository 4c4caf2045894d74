//! `csi-proxy-bench`: measures a release `csi-proxy` daemon and compares it with the physical
//! floor, the same host calls made directly in this process, in the same run.
//!
//! Measured: start-up to all 23 endpoints answering; RSS idle with every endpoint connected and
//! under load; RPC latency p50/p99 and throughput for one client and for 64 concurrent clients
//! (PathExists, ListDiskIDs, GetVolumeStats); the stage flow (partition, format, mount) through
//! the daemon against the same steps in-process. Anything this build or machine cannot run is
//! reported as `n/a` with the reason. Benchmarks measure; nothing here asserts a time.
//!
//! On Windows the same binary is the client half of `scripts/bench-wine.sh`: it measures a
//! daemon the script started (see `windows.rs`).

#[cfg(target_os = "linux")]
mod linux;
mod stats;
#[cfg(target_os = "linux")]
mod syscalls;
#[cfg(windows)]
mod windows;

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    {
        linux::main()
    }
    #[cfg(windows)]
    {
        windows::main()
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        eprintln!(
            "csi-proxy-bench: the benchmarks run on Linux (Unix sockets, loop devices) and on \
             Windows (named pipes, see scripts/bench-wine.sh)"
        );
        std::process::ExitCode::from(2)
    }
}
