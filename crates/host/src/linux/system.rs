//! What the system group does on Linux: the BIOS serial number from the kernel's DMI export,
//! and service control through systemd's manager on the D-Bus system bus
//! (`org.freedesktop.systemd1`, documented in systemd's org.freedesktop.systemd1(5)).
//!
//! A service name is a systemd unit; a name without a unit suffix means `<name>.service`. Each
//! RPC opens its own bus connection ([`super::dbus`]), so a bus restart or a hung call affects
//! one request only.

use super::dbus::{self, Connection, Value};
use csi_proxy_core::system::{ServiceInfo, ServiceStatus, StartType, SystemHost};
use csi_proxy_core::{Error, Kind, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where the kernel exports the SMBIOS system serial number (type 1 "Serial Number"; readable
/// by root only).
pub const PRODUCT_SERIAL: &str = "/sys/class/dmi/id/product_serial";
/// How long StartService/StopService wait for the unit to reach the state (upstream: 30 s).
pub const WAIT: Duration = Duration::from_secs(30);
/// How often the unit's state is polled while waiting.
const POLL: Duration = Duration::from_millis(100);

const SYSTEMD: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// Unit type suffixes systemd knows (systemd.unit(5)); a name ending in none gets `.service`.
const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".slice",
    ".scope",
];

/// The Linux system host.
#[derive(Debug, Clone)]
pub struct LinuxSystemHost {
    serial_path: PathBuf,
    /// The bus to reach systemd on; `None` means `$DBUS_SYSTEM_BUS_ADDRESS`, else the default
    /// system bus socket.
    bus_address: Option<String>,
    /// How long Start/Stop wait for the unit.
    wait: Duration,
}

impl Default for LinuxSystemHost {
    fn default() -> Self {
        Self {
            serial_path: PRODUCT_SERIAL.into(),
            bus_address: None,
            wait: WAIT,
        }
    }
}

impl LinuxSystemHost {
    /// A host reading the serial number from [`PRODUCT_SERIAL`] and reaching systemd on the
    /// system bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// A host reading the serial number from `path` (tests use a file of their own).
    pub fn with_serial_path(path: impl Into<PathBuf>) -> Self {
        Self {
            serial_path: path.into(),
            ..Self::default()
        }
    }

    /// A host reaching systemd on the bus at `address` (a D-Bus address such as
    /// `unix:path=/run/dbus/system_bus_socket`) instead of the system bus.
    pub fn with_bus_address(address: impl Into<String>) -> Self {
        Self {
            bus_address: Some(address.into()),
            ..Self::default()
        }
    }

    /// The same host waiting at most `wait` in StartService/StopService (default [`WAIT`]).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The bus address in use: the configured one, else `$DBUS_SYSTEM_BUS_ADDRESS` (as
    /// libdbus and sd-bus read it), else [`dbus::SYSTEM_BUS_DEFAULT`].
    pub fn bus_address(&self) -> String {
        self.bus_address
            .clone()
            .or_else(|| std::env::var("DBUS_SYSTEM_BUS_ADDRESS").ok())
            .filter(|a| !a.trim().is_empty())
            .unwrap_or_else(|| dbus::SYSTEM_BUS_DEFAULT.to_string())
    }
}

/// The unit a service name means: the name itself when it ends in a unit type suffix, else
/// `<name>.service`. Refuses names systemd would not accept as unit names (unit_name_is_valid:
/// ASCII letters, digits and `:-_.\@`, at most 255 bytes with the suffix).
pub fn unit_name(op: &str, name: &str) -> Result<String> {
    // A refused name may be huge (a hostile client): name only its start and its length.
    let object = match name.char_indices().nth(64) {
        Some((cut, _)) => format!("service {:?}... ({} bytes)", &name[..cut], name.len()),
        None => format!("service {name:?}"),
    };
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || ":-_.\\@".contains(*c)))
    {
        return Err(Error::invalid(
            op,
            object,
            format!("{c:?} is not allowed in a systemd unit name (letters, digits and :-_.\\@)"),
        ));
    }
    let unit = if UNIT_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        name.to_string()
    } else {
        format!("{name}.service")
    };
    if unit.len() > 255 {
        return Err(Error::invalid(
            op,
            object,
            format!("unit name {} bytes long, systemd allows 255", unit.len()),
        ));
    }
    if unit.starts_with('.') {
        return Err(Error::invalid(
            op,
            object,
            "unit name without a name before its suffix",
        ));
    }
    Ok(unit)
}

/// Start and Stop act on services only: starting another kind of unit can do anything the
/// unit stands for (`reboot.target` reboots the node, a `.mount` mounts, a `.socket` listens),
/// which is not what a storage driver's "service" means.
fn only_services(op: &str, name: &str) -> Result<()> {
    let unit = unit_name(op, name)?;
    if unit.ends_with(".service") {
        return Ok(());
    }
    Err(Error::new(
        Kind::PermissionDenied,
        op,
        format!("service {name:?}"),
        format!("{unit} is not a service unit; only .service units are started or stopped"),
    ))
}

/// The wire status of a unit's `ActiveState` (org.freedesktop.systemd1(5): active, reloading,
/// inactive, failed, activating, deactivating; newer systemd adds more).
pub fn status(active_state: &str) -> ServiceStatus {
    match active_state {
        "active" | "reloading" => ServiceStatus::Running,
        "activating" => ServiceStatus::StartPending,
        "deactivating" => ServiceStatus::StopPending,
        "inactive" | "failed" => ServiceStatus::Stopped,
        _ => ServiceStatus::Unknown,
    }
}

/// The wire start type of a unit from its `LoadState` and `UnitFileState`: masked units cannot
/// be started (Disabled); enabled ones start at boot (Automatic); everything else (disabled,
/// static, indirect, generated, transient, linked, none) starts only on demand (Manual).
pub fn start_type(load_state: &str, unit_file_state: &str) -> StartType {
    if load_state == "masked" || unit_file_state.starts_with("masked") {
        StartType::Disabled
    } else if unit_file_state.starts_with("enabled") || unit_file_state == "alias" {
        StartType::Automatic
    } else {
        StartType::Manual
    }
}

/// One RPC's conversation with systemd.
struct Session<'a> {
    op: &'a str,
    name: &'a str,
    unit: String,
    conn: Connection,
}

impl<'a> Session<'a> {
    /// Validates the name and connects; a bus that cannot be reached is FAILED_PRECONDITION.
    fn open(host: &LinuxSystemHost, op: &'a str, name: &'a str) -> Result<Self> {
        let unit = unit_name(op, name)?;
        let address = host.bus_address();
        let conn = Connection::connect(&address, dbus::DEFAULT_TIMEOUT).map_err(|e| {
            Error::new(
                Kind::FailedPrecondition,
                op,
                format!("service {name:?}"),
                format!("systemd (D-Bus system bus at {address}) is not reachable: {e}"),
            )
        })?;
        Ok(Session {
            op,
            name,
            unit,
            conn,
        })
    }

    fn error(&self, kind: Kind, cause: impl std::fmt::Display) -> Error {
        Error::new(kind, self.op, format!("service {:?}", self.name), cause)
    }

    /// A failed call, with the kind its D-Bus error name implies.
    fn call_error(&self, what: &str, e: dbus::Error) -> Error {
        let kind = match &e {
            dbus::Error::Io(_) => Kind::Unavailable,
            dbus::Error::Protocol(_) => Kind::Internal,
            dbus::Error::Remote { name, .. } => match name.as_str() {
                "org.freedesktop.systemd1.NoSuchUnit" => Kind::NotFound,
                "org.freedesktop.DBus.Error.AccessDenied"
                | "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired" => {
                    Kind::PermissionDenied
                }
                "org.freedesktop.DBus.Error.NoReply" | "org.freedesktop.DBus.Error.Timeout" => {
                    Kind::Unavailable
                }
                // ServiceUnknown (no systemd on this bus), UnitMasked, OnlyByDependency, ...:
                // the host is not in a state to do it.
                _ => Kind::FailedPrecondition,
            },
        };
        self.error(kind, format!("systemd {what}: {e}"))
    }

    fn manager(&mut self, member: &str, args: &[Value]) -> Result<String> {
        let r = self
            .conn
            .call(SYSTEMD, MANAGER_PATH, MANAGER, member, args)
            .map_err(|e| self.call_error(member, e))?;
        match r.first() {
            Some(Value::ObjectPath(p)) => Ok(p.clone()),
            other => Err(self.error(
                Kind::Internal,
                format!("systemd {member} answered {other:?}"),
            )),
        }
    }

    /// The unit's object path. LoadUnit, unlike GetUnit, answers for units that are not
    /// loaded, loading them; a unit with no file comes back with LoadState "not-found".
    fn load(&mut self) -> Result<(String, String)> {
        let unit = self.unit.clone();
        let path = self.manager("LoadUnit", &[Value::Str(unit.clone())])?;
        let load_state = self.text(&path, "LoadState")?;
        if load_state == "not-found" {
            return Err(self.error(Kind::NotFound, format!("systemd has no unit {unit}")));
        }
        Ok((path, load_state))
    }

    /// Property `prop` of the unit at `path` (org.freedesktop.DBus.Properties.Get).
    fn property(&mut self, path: &str, prop: &str) -> Result<Value> {
        let r = self
            .conn
            .call(
                SYSTEMD,
                path,
                PROPERTIES,
                "Get",
                &[Value::Str(UNIT.into()), Value::Str(prop.into())],
            )
            .map_err(|e| self.call_error(&format!("Get {prop}"), e))?;
        match r.into_iter().next() {
            Some(Value::Variant(v)) => Ok(*v),
            other => Err(self.error(
                Kind::Internal,
                format!("systemd Get {prop} answered {other:?}"),
            )),
        }
    }

    fn text(&mut self, path: &str, prop: &str) -> Result<String> {
        match self.property(path, prop)? {
            Value::Str(s) => Ok(s),
            other => Err(self.error(Kind::Internal, format!("systemd {prop} is {other:?}"))),
        }
    }

    /// Whether a job is queued or running for the unit: its `Job` property is `(uo)`, job id 0
    /// meaning none (org.freedesktop.systemd1(5)). systemd installs the job before StartUnit or
    /// StopUnit answers, so a stale state is never mistaken for the job's outcome.
    fn job_pending(&mut self, path: &str) -> Result<bool> {
        match self.property(path, "Job")? {
            Value::Struct(f) => Ok(f.first().and_then(Value::as_u32).unwrap_or(0) != 0),
            other => Err(self.error(Kind::Internal, format!("systemd Job is {other:?}"))),
        }
    }

    /// Polls `ActiveState` every [`POLL`] until the unit runs (`start`) or is stopped, for at
    /// most `wait`.
    fn wait(&mut self, path: &str, start: bool, wait: Duration) -> Result<()> {
        let deadline = Instant::now() + wait;
        loop {
            let state = self.text(path, "ActiveState")?;
            let now = status(&state);
            if start && now == ServiceStatus::Running || !start && now == ServiceStatus::Stopped {
                return Ok(());
            }
            // A start whose job is over and left the unit failed or inactive did not work
            // (the process exited or a dependency failed); waiting longer is useless.
            if start && now == ServiceStatus::Stopped && !self.job_pending(path)? {
                return Err(self.error(
                    Kind::FailedPrecondition,
                    format!("the unit did not start: its ActiveState is {state:?}"),
                ));
            }
            if Instant::now() >= deadline {
                let doing = if start { "starting" } else { "stopping" };
                return Err(self.error(
                    Kind::DeadlineExceeded,
                    format!(
                        "still {state:?} after {} s of {doing} {}",
                        wait.as_secs_f64(),
                        self.unit
                    ),
                ));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl SystemHost for LinuxSystemHost {
    fn bios_serial_number(&self) -> Result<String> {
        const OP: &str = "GetBIOSSerialNumber";
        let object = self.serial_path.display().to_string();
        let raw = std::fs::read(&self.serial_path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::new(
                    Kind::NotFound,
                    OP,
                    &object,
                    "this machine exports no DMI serial number (no SMBIOS, or not exposed here)",
                )
            } else {
                Error::io(OP, &object, &e)
            }
        })?;
        // The file holds the string and a newline; upstream trims whitespace too.
        Ok(String::from_utf8_lossy(&raw).trim().to_string())
    }

    fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        let mut s = Session::open(self, "GetService", name)?;
        let (path, load_state) = s.load()?;
        let active = s.text(&path, "ActiveState")?;
        let mut display_name = s.text(&path, "Description")?;
        if display_name.is_empty() {
            display_name = s.unit.clone();
        }
        let file_state = s.text(&path, "UnitFileState")?;
        Ok(ServiceInfo {
            display_name,
            start_type: start_type(&load_state, &file_state),
            status: status(&active),
        })
    }

    fn start_service(&self, name: &str) -> Result<()> {
        only_services("StartService", name)?;
        let mut s = Session::open(self, "StartService", name)?;
        let (path, load_state) = s.load()?;
        if status(&s.text(&path, "ActiveState")?) == ServiceStatus::Running {
            return Ok(());
        }
        if load_state == "masked" {
            return Err(s.error(Kind::FailedPrecondition, "the unit is masked"));
        }
        // Mode "replace": the start job replaces conflicting queued jobs (StartUnit in
        // org.freedesktop.systemd1(5), as `systemctl start` does).
        let unit = s.unit.clone();
        s.manager(
            "StartUnit",
            &[Value::Str(unit), Value::Str("replace".into())],
        )?;
        s.wait(&path, true, self.wait)
    }

    /// Stops the unit. `force` changes nothing here: a stop job in mode "replace" already
    /// stops the units that require this one (systemd propagates stop jobs to units with
    /// Requires=/BindsTo= on it, systemd.unit(5)).
    fn stop_service(&self, name: &str, force: bool) -> Result<()> {
        let _ = force;
        only_services("StopService", name)?;
        let mut s = Session::open(self, "StopService", name)?;
        let (path, _) = s.load()?;
        if status(&s.text(&path, "ActiveState")?) == ServiceStatus::Stopped {
            return Ok(());
        }
        let unit = s.unit.clone();
        s.manager(
            "StopUnit",
            &[Value::Str(unit), Value::Str("replace".into())],
        )?;
        s.wait(&path, false, self.wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serial_is_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("product_serial");
        std::fs::write(&p, "  VMware-56 4d 1a  \n").unwrap();
        let h = LinuxSystemHost::with_serial_path(&p);
        assert_eq!(h.bios_serial_number().unwrap(), "VMware-56 4d 1a");
        std::fs::write(&p, b"\xff\n").unwrap();
        assert_eq!(h.bios_serial_number().unwrap(), "\u{fffd}");
    }

    #[test]
    fn a_missing_export_is_not_found_naming_the_file() {
        let h = LinuxSystemHost::with_serial_path("/nonexistent/product_serial");
        let e = h.bios_serial_number().unwrap_err();
        assert_eq!(e.kind(), Kind::NotFound);
        assert!(
            e.message()
                .starts_with("GetBIOSSerialNumber /nonexistent/product_serial"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn names_map_to_units_and_bad_ones_are_refused() {
        let u = |n: &str| unit_name("GetService", n);
        assert_eq!(u("kubelet").unwrap(), "kubelet.service");
        assert_eq!(u("containerd.service").unwrap(), "containerd.service");
        assert_eq!(u("getty@tty1").unwrap(), "getty@tty1.service");
        assert_eq!(u("dev-sda.device").unwrap(), "dev-sda.device");
        assert_eq!(u("a.b").unwrap(), "a.b.service");
        assert_eq!(u(&"a".repeat(247)).unwrap().len(), 255);
        for bad in [
            "a b",
            "a/b",
            "kübelet",
            "x;reboot",
            ".service",
            &"a".repeat(248),
        ] {
            let e = u(bad).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{bad:?}");
            assert!(
                e.message().starts_with("GetService service "),
                "{}",
                e.message()
            );
        }
    }

    #[test]
    fn a_huge_refused_name_is_not_echoed_whole() {
        let e = unit_name("StartService", &"ü".repeat(1 << 20)).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument);
        assert!(e.message().len() < 300, "{}", e.message());
        assert!(e.message().contains("(2097152 bytes)"), "{}", e.message());
    }

    #[test]
    fn states_map_to_the_wire_enums() {
        assert_eq!(status("active"), ServiceStatus::Running);
        assert_eq!(status("reloading"), ServiceStatus::Running);
        assert_eq!(status("activating"), ServiceStatus::StartPending);
        assert_eq!(status("deactivating"), ServiceStatus::StopPending);
        assert_eq!(status("failed"), ServiceStatus::Stopped);
        assert_eq!(status("inactive"), ServiceStatus::Stopped);
        assert_eq!(status("maintenance"), ServiceStatus::Unknown);
        assert_eq!(start_type("loaded", "enabled"), StartType::Automatic);
        assert_eq!(
            start_type("loaded", "enabled-runtime"),
            StartType::Automatic
        );
        assert_eq!(start_type("loaded", "alias"), StartType::Automatic);
        for m in [
            "disabled",
            "static",
            "indirect",
            "generated",
            "transient",
            "",
        ] {
            assert_eq!(start_type("loaded", m), StartType::Manual, "{m}");
        }
        assert_eq!(start_type("loaded", "masked-runtime"), StartType::Disabled);
        assert_eq!(start_type("masked", ""), StartType::Disabled);
    }

    #[test]
    fn without_a_bus_services_fail_the_precondition() {
        let h = LinuxSystemHost::with_bus_address("unix:path=/nonexistent/csi-proxy-test-bus");
        for e in [
            h.get_service("kubelet").unwrap_err(),
            h.start_service("kubelet").unwrap_err(),
            h.stop_service("kubelet", true).unwrap_err(),
        ] {
            assert_eq!(e.kind(), Kind::FailedPrecondition, "{}", e.message());
            assert!(
                e.message().contains(
                    "service \"kubelet\": systemd (D-Bus system bus at \
                     unix:path=/nonexistent/csi-proxy-test-bus) is not reachable: "
                ),
                "{}",
                e.message()
            );
        }
    }
}
