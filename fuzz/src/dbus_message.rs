//! D-Bus messages from the system bus: the Linux system host's own D-Bus client decodes what
//! arrives on the bus socket, which anything able to listen at the bus address controls.

/// Decodes `data` as one message (see `csi_proxy_host::fuzzing::dbus_message`); whether it
/// decoded (always `false` off Linux, where there is no D-Bus client).
pub fn run(data: &[u8]) -> bool {
    #[cfg(target_os = "linux")]
    return csi_proxy_host::fuzzing::dbus_message(data);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = data;
        false
    }
}
