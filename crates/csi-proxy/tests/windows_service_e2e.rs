//! `--windows-service` under the real Service Control Manager (Windows as Administrator, or
//! Wine 8, whose SCM starts services built as Windows executables): the service starts, serves
//! its pipes, writes its log to `--log_file`, and a Stop control closes every pipe and ends the
//! process with SERVICE_STOPPED.
#![cfg(windows)]

use std::ffi::OsString;
use std::time::{Duration, Instant};
use windows_service::service::{
    ServiceAccess, ServiceErrorControl, ServiceInfo, ServiceStartType, ServiceState, ServiceType,
};
use windows_service::service_manager::{ServiceManager, ServiceManagerAccess};

const NAME: &str = "CsiProxyE2eSvc";
/// Pipes of the first and last groups served, as a sample of all 23.
const PIPES: [&str; 3] = [
    r"\\.\pipe\csi-proxy-disk-v1",
    r"\\.\pipe\csi-proxy-volume-v2alpha1",
    r"\\.\pipe\csi-proxy-system-v1alpha1",
];

/// Whether a pipe of that name exists (opening it connects one client instance, which the
/// daemon tolerates as an abandoned connection).
fn pipe_exists(name: &str) -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name)
    {
        Ok(_) => true,
        // ERROR_PIPE_BUSY (231): it exists, every instance is taken.
        Err(e) => e.raw_os_error() == Some(231),
    }
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    f()
}

#[test]
fn the_service_serves_logs_to_its_file_and_stop_closes_every_pipe() {
    if PIPES.iter().any(|p| pipe_exists(p)) {
        eprintln!("SKIPPED: a csi-proxy is already serving on this host's pipes");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    // Integration tests run from target/<triple>/<profile>/deps; the daemon sits one level up.
    let daemon = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("csi-proxy.exe");
    if !daemon.exists() {
        eprintln!("SKIPPED: {} was not built", daemon.display());
        return;
    }
    let manager = match ServiceManager::local_computer(
        None::<&str>,
        ServiceManagerAccess::CONNECT | ServiceManagerAccess::CREATE_SERVICE,
    ) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIPPED: cannot open the SCM to create a service: {e}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("csi-proxy.log");
    let info = ServiceInfo {
        name: NAME.into(),
        display_name: "csi-proxy service-mode test".into(),
        service_type: ServiceType::OWN_PROCESS,
        start_type: ServiceStartType::OnDemand,
        error_control: ServiceErrorControl::Normal,
        executable_path: daemon,
        launch_arguments: vec![
            OsString::from("--windows-service"),
            OsString::from(format!("--log_file={}", log.display())),
            OsString::from("--kubelet-path"),
            dir.path().as_os_str().to_owned(),
        ],
        dependencies: vec![],
        account_name: None,
        account_password: None,
    };
    let access = ServiceAccess::QUERY_STATUS
        | ServiceAccess::START
        | ServiceAccess::STOP
        | ServiceAccess::DELETE;
    // A service left over from an interrupted run is removed first.
    if let Ok(old) = manager.open_service(NAME, access) {
        let _ = old.stop();
        let _ = old.delete();
        std::thread::sleep(Duration::from_secs(1));
    }
    let service = match manager.create_service(&info, access) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED: cannot create a test service: {e}");
            return;
        }
    };
    /// Deletes the service however the test ends.
    struct Cleanup<'a>(&'a windows_service::service::Service);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let _ = self.0.stop();
            let _ = self.0.delete();
        }
    }
    let _cleanup = Cleanup(&service);

    service.start::<&str>(&[]).expect("StartService");
    assert!(
        wait_until(Duration::from_secs(60), || PIPES
            .iter()
            .all(|p| pipe_exists(p))),
        "the service did not create its pipes; log: {:?}",
        std::fs::read_to_string(&log)
    );
    assert_eq!(
        service.query_status().unwrap().current_state,
        ServiceState::Running
    );

    service.stop().expect("ControlService(STOP)");
    assert!(
        wait_until(Duration::from_secs(30), || service
            .query_status()
            .is_ok_and(|s| s.current_state == ServiceState::Stopped)),
        "the service did not reach SERVICE_STOPPED"
    );
    assert!(
        wait_until(Duration::from_secs(10), || !PIPES
            .iter()
            .any(|p| pipe_exists(p))),
        "pipes still open after Stop"
    );
    let text = std::fs::read_to_string(&log).expect("the log file was written");
    assert!(text.contains("starting csi-proxy"), "{text}");
    assert!(text.contains("service stop requested"), "{text}");
    assert!(text.contains("stopped"), "{text}");
}
