//! `csi-proxy-bench`: measures a release `csi-proxy` daemon and compares it with the physical
//! floor, the same host calls made directly in this process, in the same run.
//!
//! Measured: start-up to all 23 endpoints answering; RSS idle with every endpoint connected and
//! under load; RPC latency p50/p99 and throughput for one client and for 64 concurrent clients
//! (PathExists, ListDiskIDs, GetVolumeStats); the stage flow (partition, format, mount) through
//! the daemon against the same steps in-process; the daemon's threads, CPU time and system calls
//! per request; and the layer table: bench-only servers (`csi-proxy-bench-server`, plain tonic
//! with none, one or all of the daemon's layers) measured the same way in the same run, so the
//! cost of each of our layers shows against a bare tonic server. Anything this build or machine
//! cannot run is reported as `n/a` with the reason. Benchmarks measure; nothing here asserts a time.
//!
//! On Windows the same binary is the client half of `scripts/bench-wine.sh`: it measures a
//! daemon the script started (see `windows.rs`).

#[cfg(target_os = "linux")]
mod h2wire;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod rewriter;
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

/// Runs `work` on a multi-threaded runtime: `done` with its result and success, or its error
/// printed and failure.
#[cfg(any(target_os = "linux", windows))]
fn run_to_exit<T>(
    work: impl std::future::Future<Output = Result<T, String>>,
    done: impl FnOnce(T),
) -> std::process::ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("csi-proxy-bench: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(work) {
        Ok(v) => {
            done(v);
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("csi-proxy-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
