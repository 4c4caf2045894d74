//! The transport's `:authority` rewrite (see `csi_proxy_fuzz::authority`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    csi_proxy_fuzz::authority::run(data);
});
