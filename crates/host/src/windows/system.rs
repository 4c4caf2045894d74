//! Windows implementation of the system group ([`SystemHost`]): the BIOS serial number from the
//! SMBIOS table, and services through the Service Control Manager. No WMI for services and no
//! child process: upstream's `Win32_Service` methods are replaced by the SCM calls they wrap.
//! All OS access goes through the [`Win32`] seam, each SCM call opening the service with only
//! the right that call needs.

use super::os::{OsError, Win32, code, os_error};
use csi_proxy_core::system::{ServiceInfo, ServiceStatus, StartType, SystemHost};
use csi_proxy_core::{Error, Kind, Result};
use std::time::Duration;

/// How long StartService/StopService wait for the service to reach the state (upstream: 30 s).
pub const WAIT: Duration = Duration::from_secs(30);
/// How often the state is polled while waiting (upstream: 200 ms).
const POLL: Duration = Duration::from_millis(200);

/// Win32 codes of the SCM with a precise kind.
const SCM_KINDS: &[(u32, Kind)] = &[
    (code::SERVICE_DOES_NOT_EXIST, Kind::NotFound),
    (code::SERVICE_DISABLED, Kind::FailedPrecondition),
    (code::DEPENDENT_SERVICES_RUNNING, Kind::FailedPrecondition),
    (code::SERVICE_CANNOT_ACCEPT_CTRL, Kind::Unavailable),
];

super::os::seam_host! {
    /// The Windows system host.
    WindowsSystemHost
}

/// The SMBIOS System Information serial number of the machine this runs on, `Ok(None)` when
/// the firmware table is not available or holds none.
#[cfg(windows)]
pub fn smbios_serial() -> Result<Option<String>> {
    serial_from_table(&super::win32::SystemWin32::default())
}

/// `Win32_BIOS.SerialNumber` of the machine this runs on.
#[cfg(windows)]
pub fn wmi_bios_serial(op: &str) -> Result<String> {
    use super::os::Win32 as _;
    super::win32::SystemWin32::default()
        .wmi_bios_serial()
        .map_err(|e| os_error(op, "Win32_BIOS", &e, &[]))
}

/// The SMBIOS serial through `os`.
fn serial_from_table(os: &dyn Win32) -> Result<Option<String>> {
    const OP: &str = "GetBIOSSerialNumber";
    let Some(table) = os
        .smbios_table()
        .map_err(|e| os_error(OP, "SMBIOS table", &e, &[]))?
    else {
        return Ok(None);
    };
    csi_proxy_formats::windows_buffers::smbios::system_serial(&table)
        .map_err(|e| Error::new(Kind::Internal, OP, "SMBIOS table", e))
}

fn shown(name: &str) -> String {
    format!("service {name:?}")
}

fn scm_error(op: &str, name: &str, e: &OsError) -> Error {
    os_error(op, shown(name), e, SCM_KINDS)
}

/// Maps `dwStartType` (SERVICE_BOOT_START 0 ... SERVICE_DISABLED 4) to the wire enum, whose
/// numbers are the same; unknown values are 0 as upstream answers.
fn start_type(v: u32) -> StartType {
    match v {
        1 => StartType::System,
        2 => StartType::Automatic,
        3 => StartType::Manual,
        4 => StartType::Disabled,
        _ => StartType::Boot,
    }
}

/// Maps `dwCurrentState` (SERVICE_STOPPED 1 ... SERVICE_PAUSED 7) to the wire enum, whose
/// numbers are the same.
fn status(v: u32) -> ServiceStatus {
    match v {
        1 => ServiceStatus::Stopped,
        2 => ServiceStatus::StartPending,
        3 => ServiceStatus::StopPending,
        4 => ServiceStatus::Running,
        5 => ServiceStatus::ContinuePending,
        6 => ServiceStatus::PausePending,
        7 => ServiceStatus::Paused,
        _ => ServiceStatus::Unknown,
    }
}

impl WindowsSystemHost {
    fn state(&self, op: &str, name: &str) -> Result<ServiceStatus> {
        self.os
            .service_state(name)
            .map(status)
            .map_err(|e| scm_error(op, name, &e))
    }

    /// Polls until the service reaches `want`, for at most [`WAIT`].
    fn wait_for(&self, op: &str, name: &str, want: ServiceStatus) -> Result<()> {
        let deadline = self.os.now() + WAIT;
        loop {
            let now = self.state(op, name)?;
            if now == want {
                return Ok(());
            }
            // A start that ends in Stopped failed (the service exited); waiting longer is
            // useless.
            if want == ServiceStatus::Running && now == ServiceStatus::Stopped {
                return Err(Error::new(
                    Kind::FailedPrecondition,
                    op,
                    shown(name),
                    "the service stopped while starting",
                ));
            }
            if self.os.now() >= deadline {
                return Err(Error::new(
                    Kind::DeadlineExceeded,
                    op,
                    shown(name),
                    format!(
                        "still {now:?} after {} s, waiting for {want:?}",
                        WAIT.as_secs()
                    ),
                ));
            }
            self.os.sleep(POLL);
        }
    }

    /// Sends SERVICE_CONTROL_STOP; a service already stopped is success, and a stop already
    /// under way ("the requested control code cannot be sent to the service because the state
    /// of the service is SERVICE_STOPPED, SERVICE_START_PENDING, or SERVICE_STOP_PENDING") is
    /// waited for by the caller.
    fn send_stop(&self, op: &str, name: &str) -> Result<()> {
        match self.os.service_stop(name) {
            Ok(()) => Ok(()),
            Err(e) if e.code == code::SERVICE_NOT_ACTIVE => Ok(()),
            Err(e)
                if e.code == code::SERVICE_CANNOT_ACCEPT_CTRL
                    && self.state(op, name)? == ServiceStatus::StopPending =>
            {
                Ok(())
            }
            Err(e) => Err(scm_error(op, name, &e)),
        }
    }
}

impl SystemHost for WindowsSystemHost {
    fn bios_serial_number(&self) -> Result<String> {
        const OP: &str = "GetBIOSSerialNumber";
        match serial_from_table(&*self.os) {
            Ok(Some(s)) => Ok(s),
            // No SMBIOS table through this API (old or virtual firmware, Wine without DMI
            // data): ask WMI's Win32_BIOS, the source upstream used.
            Ok(None) | Err(_) => super::os::wmi_retrying(&*self.os, || self.os.wmi_bios_serial())
                .map_err(|e| os_error(OP, "Win32_BIOS", &e, &[])),
        }
    }

    fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        const OP: &str = "GetService";
        let (display_name, start) = self
            .os
            .service_config(name)
            .map_err(|e| scm_error(OP, name, &e))?;
        Ok(ServiceInfo {
            display_name,
            start_type: start_type(start),
            status: self.state(OP, name)?,
        })
    }

    fn start_service(&self, name: &str) -> Result<()> {
        const OP: &str = "StartService";
        // Twice at most: a stop that begins between our look and StartService is waited out
        // once more.
        for attempt in 0..2 {
            match self.state(OP, name)? {
                ServiceStatus::Running => return Ok(()),
                // The stopping instance is still there: StartService would answer
                // ERROR_SERVICE_ALREADY_RUNNING ("An instance of the service is already
                // running"), and waiting for RUNNING would see it stop. Wait for it to be
                // gone, then start.
                ServiceStatus::StopPending => self.wait_for(OP, name, ServiceStatus::Stopped)?,
                _ => {}
            }
            match self.os.service_start(name) {
                Ok(()) => break,
                Err(e) if e.code == code::SERVICE_ALREADY_RUNNING => {
                    if attempt == 0 && self.state(OP, name)? == ServiceStatus::StopPending {
                        continue;
                    }
                    // Started meanwhile (or start pending): wait below.
                    break;
                }
                Err(e) => return Err(scm_error(OP, name, &e)),
            }
        }
        self.wait_for(OP, name, ServiceStatus::Running)
    }

    fn stop_service(&self, name: &str, force: bool) -> Result<()> {
        const OP: &str = "StopService";
        if self.state(OP, name)? == ServiceStatus::Stopped {
            return Ok(());
        }
        // Without force, ControlService itself refuses with ERROR_DEPENDENT_SERVICES_RUNNING
        // ("a stop control code has been sent to a service that other running services are
        // dependent on"), which is FAILED_PRECONDITION; with force the dependents go first.
        if force {
            let dependents = self
                .os
                .service_active_dependents(name)
                .map_err(|e| scm_error(OP, name, &e))?;
            for dep in dependents {
                self.send_stop(OP, &dep)
                    .map_err(|e| e.context(format!("dependent of {name:?}")))?;
                self.wait_for(OP, &dep, ServiceStatus::Stopped)?;
            }
        }
        self.send_stop(OP, name)?;
        self.wait_for(OP, name, ServiceStatus::Stopped)
    }
}
