//! Network and host-table bytes a tenant can shape (see `csi_proxy_fuzz::wire_text`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    csi_proxy_fuzz::wire_text::run(data);
});
