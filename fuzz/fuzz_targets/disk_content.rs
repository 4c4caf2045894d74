//! Disk content a tenant controls (see `csi_proxy_fuzz::disk_content`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    csi_proxy_fuzz::disk_content::run(data);
});
