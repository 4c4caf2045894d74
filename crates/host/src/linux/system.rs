//! What the system group does on Linux: the BIOS serial number from the kernel's DMI export;
//! service control is not offered (the group's services are Windows services, and driving
//! systemd is out of scope), so those RPCs answer UNIMPLEMENTED saying so.

use csi_proxy_core::system::{ServiceInfo, SystemHost};
use csi_proxy_core::{Error, Kind, Result};
use std::path::PathBuf;

/// Where the kernel exports the SMBIOS system serial number (type 1 "Serial Number"; readable
/// by root only).
pub const PRODUCT_SERIAL: &str = "/sys/class/dmi/id/product_serial";

/// The Linux system host.
#[derive(Debug, Clone)]
pub struct LinuxSystemHost {
    serial_path: PathBuf,
}

impl Default for LinuxSystemHost {
    fn default() -> Self {
        Self::with_serial_path(PRODUCT_SERIAL)
    }
}

impl LinuxSystemHost {
    /// A host reading the serial number from [`PRODUCT_SERIAL`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A host reading the serial number from `path` (tests use a file of their own).
    pub fn with_serial_path(path: impl Into<PathBuf>) -> Self {
        Self {
            serial_path: path.into(),
        }
    }
}

/// The error of every service RPC on Linux.
fn no_service_control(op: &str, name: &str) -> Error {
    Error::new(
        Kind::Unimplemented,
        op,
        format!("service {name:?}"),
        "systemd control is not available through csi-proxy on Linux; manage host services \
         with systemctl",
    )
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
        Err(no_service_control("GetService", name))
    }

    fn start_service(&self, name: &str) -> Result<()> {
        Err(no_service_control("StartService", name))
    }

    fn stop_service(&self, name: &str, force: bool) -> Result<()> {
        let _ = force;
        Err(no_service_control("StopService", name))
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
    fn services_are_unimplemented_with_a_reason() {
        let h = LinuxSystemHost::new();
        for e in [
            h.get_service("kubelet").unwrap_err(),
            h.start_service("kubelet").unwrap_err(),
            h.stop_service("kubelet", true).unwrap_err(),
        ] {
            assert_eq!(e.kind(), Kind::Unimplemented);
            assert!(e.message().contains("systemd control is not available"));
            assert!(e.message().contains("\"kubelet\""), "{}", e.message());
        }
    }
}
