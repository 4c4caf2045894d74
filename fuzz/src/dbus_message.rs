//! D-Bus messages from the system bus: the Linux system host's own D-Bus client decodes what
//! arrives on the bus socket, which anything able to listen at the bus address controls.

/// Decodes `data` as one message (see `csi_proxy_formats::dbus::decodes_and_round_trips`);
/// whether it decoded.
pub fn run(data: &[u8]) -> bool {
    csi_proxy_formats::dbus::decodes_and_round_trips(data)
}
