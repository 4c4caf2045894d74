//! System group: host facts (BIOS serial number) and host services.
//!
//! [`SystemService`] holds the version-agnostic logic (name validation, serial trimming); the
//! [`SystemHost`] trait is the OS layer implemented per platform in `csi-proxy-host` (Windows:
//! SMBIOS and the Service Control Manager; Linux: `/sys/class/dmi/id` and systemd).

use crate::error::{Error, Result};
use std::sync::Arc;

/// How a service starts; numbers as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum StartType {
    /// Loaded by the boot loader (drivers); upstream also answers 0 for a start mode it does
    /// not know, so hosts map unknown modes here.
    Boot = 0,
    /// Started during kernel initialisation (drivers).
    System = 1,
    /// Started at boot.
    Automatic = 2,
    /// Started on demand.
    Manual = 3,
    /// Cannot be started.
    Disabled = 4,
}

/// What a service is doing; numbers as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ServiceStatus {
    /// A state the host reported that has no number here.
    Unknown = 0,
    /// Not running.
    Stopped = 1,
    /// Starting.
    StartPending = 2,
    /// Stopping.
    StopPending = 3,
    /// Running.
    Running = 4,
    /// Resuming from pause.
    ContinuePending = 5,
    /// Pausing.
    PausePending = 6,
    /// Paused.
    Paused = 7,
}

/// What GetService reports about a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The human-readable name.
    pub display_name: String,
    /// How it starts.
    pub start_type: StartType,
    /// What it is doing now.
    pub status: ServiceStatus,
}

/// OS primitives of the system group. Names are already validated.
///
/// Every method is required, so a forgotten one is a compile error rather than an
/// UNIMPLEMENTED in production; test doubles implement `csi_proxy_core::testing::PartialSystemHost`
/// instead (feature `testing`).
pub trait SystemHost: Send + Sync {
    /// The BIOS / SMBIOS system serial number, as the firmware reports it.
    fn bios_serial_number(&self) -> Result<String>;

    /// The service called `name`; NotFound if there is none.
    fn get_service(&self, name: &str) -> Result<ServiceInfo>;

    /// Starts `name` and waits until it runs (upstream: 30 s); already running is success.
    fn start_service(&self, name: &str) -> Result<()>;

    /// Stops `name` and waits until it is stopped (upstream: 30 s); already stopped is success.
    /// With `force`, running dependents are stopped first; without, they make it fail.
    fn stop_service(&self, name: &str, force: bool) -> Result<()>;
}

/// The version-agnostic system service every system API version is served by.
///
/// Validation lives here, and the allow-list of services Start/Stop may touch (upstream lets any
/// client stop any host service).
#[derive(Clone)]
pub struct SystemService {
    host: Arc<dyn SystemHost>,
    /// Services StartService/StopService may act on, lowercased; `None` allows every service
    /// (upstream's behaviour).
    allowed: Option<Arc<[String]>>,
}

/// Refuses names no host can look up: empty, or with a NUL (which would cut a C string short).
fn check_name(op: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(op, "service \"\"", "service name is empty"));
    }
    if name.contains('\0') {
        return Err(Error::invalid(
            op,
            format!("service {name:?}"),
            "service name contains NUL",
        ));
    }
    Ok(())
}

impl SystemService {
    /// A service over `host`.
    pub fn new(host: Arc<dyn SystemHost>) -> Self {
        Self {
            host,
            allowed: None,
        }
    }

    /// Restricts StartService and StopService to the named services (compared
    /// case-insensitively, as service names are on Windows). An empty list keeps upstream's
    /// behaviour of allowing every service; GetService is never restricted.
    pub fn with_allowed_services<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let list: Vec<String> = names
            .into_iter()
            .map(|n| n.as_ref().to_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        self.allowed = (!list.is_empty()).then(|| list.into());
        self
    }

    /// Lets StartService and StopService touch no service at all (the Linux default without
    /// `--allowed-service`: drivers there have no use for them, and a unit can stop the node).
    pub fn allowing_no_service(mut self) -> Self {
        self.allowed = Some(Arc::from(Vec::new()));
        self
    }

    /// Refuses a service outside the allow-list, before the host is touched.
    fn check_allowed(&self, op: &str, name: &str) -> Result<()> {
        match &self.allowed {
            Some(list) if list.is_empty() => Err(Error::new(
                crate::error::Kind::PermissionDenied,
                op,
                format!("service {name:?}"),
                "this proxy starts and stops no service unless --allowed-service names it",
            )),
            Some(list) if !list.iter().any(|a| *a == name.to_lowercase()) => Err(Error::new(
                crate::error::Kind::PermissionDenied,
                op,
                format!("service {name:?}"),
                "not in the services this proxy may start or stop (--allowed-service)",
            )),
            _ => Ok(()),
        }
    }

    /// GetBIOSSerialNumber: the serial without the padding firmware often adds.
    pub fn get_bios_serial_number(&self) -> Result<String> {
        Ok(self.host.bios_serial_number()?.trim().to_string())
    }

    /// GetService: display name, start type and status of a service.
    pub fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        check_name("GetService", name)?;
        self.host.get_service(name)
    }

    /// StartService: starts a service and waits until it runs (idempotent).
    pub fn start_service(&self, name: &str) -> Result<()> {
        check_name("StartService", name)?;
        self.check_allowed("StartService", name)?;
        self.host.start_service(name)
    }

    /// StopService: stops a service (and with `force` its dependents) and waits (idempotent).
    pub fn stop_service(&self, name: &str, force: bool) -> Result<()> {
        check_name("StopService", name)?;
        self.check_allowed("StopService", name)?;
        self.host.stop_service(name, force)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::testing::PartialSystemHost;

    struct Padded;
    impl PartialSystemHost for Padded {
        fn bios_serial_number(&self) -> Result<String> {
            Ok("  VMware-56 4d  \r\n".into())
        }
    }

    #[test]
    fn the_serial_is_trimmed() {
        let svc = SystemService::new(Arc::new(Padded));
        assert_eq!(svc.get_bios_serial_number().unwrap(), "VMware-56 4d");
    }

    #[test]
    fn names_are_checked_before_the_host() {
        let svc = SystemService::new(Arc::new(Padded));
        for name in ["", "a\0b"] {
            let e = svc.start_service(name).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{name:?}");
            let e = svc.stop_service(name, true).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{name:?}");
            let e = svc.get_service(name).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{name:?}");
        }
        let e = svc.get_service("w32time").unwrap_err();
        assert_eq!(e.kind(), Kind::Unimplemented);
        assert!(e.message().contains("system GetService"), "{}", e.message());
    }

    #[test]
    fn the_allow_list_restricts_start_and_stop_only() {
        let svc = SystemService::new(Arc::new(Padded)).with_allowed_services(["W32Time", ""]);
        let e = svc.start_service("spooler").unwrap_err();
        assert_eq!(e.kind(), Kind::PermissionDenied);
        assert!(
            e.message().starts_with("StartService service \"spooler\""),
            "{}",
            e.message()
        );
        let e = svc.stop_service("Spooler", true).unwrap_err();
        assert_eq!(e.kind(), Kind::PermissionDenied);
        // Allowed (any case): reaches the host, which does not implement it here.
        let e = svc.start_service("w32time").unwrap_err();
        assert_eq!(e.kind(), Kind::Unimplemented);
        let e = svc.stop_service("W32TIME", false).unwrap_err();
        assert_eq!(e.kind(), Kind::Unimplemented);
        // GetService is not restricted.
        assert_eq!(
            svc.get_service("spooler").unwrap_err().kind(),
            Kind::Unimplemented
        );
        // An empty list is upstream's behaviour: everything allowed.
        let open = SystemService::new(Arc::new(Padded)).with_allowed_services(Vec::<String>::new());
        assert_eq!(
            open.start_service("spooler").unwrap_err().kind(),
            Kind::Unimplemented
        );
        // None allowed (Linux without --allowed-service): refused before the host.
        let none = SystemService::new(Arc::new(Padded)).allowing_no_service();
        let e = none.stop_service("kubelet", false).unwrap_err();
        assert_eq!(e.kind(), Kind::PermissionDenied);
        assert!(
            e.message().contains("unless --allowed-service names it"),
            "{}",
            e.message()
        );
        assert_eq!(
            none.get_service("kubelet").unwrap_err().kind(),
            Kind::Unimplemented
        );
    }

    #[test]
    fn enums_have_the_wire_numbers() {
        assert_eq!(StartType::Disabled as i32, 4);
        assert_eq!(StartType::Boot as i32, 0);
        assert_eq!(ServiceStatus::Paused as i32, 7);
        assert_eq!(ServiceStatus::Running as i32, 4);
    }
}
