//! D-Bus messages from the system bus (see `csi_proxy_fuzz::dbus_message`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = csi_proxy_fuzz::dbus_message::run(data);
});
