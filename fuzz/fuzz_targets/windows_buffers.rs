//! Buffers the Windows hosts get from drivers and firmware (see
//! `csi_proxy_fuzz::windows_buffers`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    csi_proxy_fuzz::windows_buffers::run(data);
});
