//! kubelet's per-volume records and the owners book (see `csi_proxy_fuzz::profile_records`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = csi_proxy_fuzz::profile_records::run(data);
});
