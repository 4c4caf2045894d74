//! Path confinement under the Windows rules (see `csi_proxy_fuzz::paths`).
#![no_main]

use csi_proxy_core::paths::PathStyle;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|case: csi_proxy_fuzz::paths::Case| {
    csi_proxy_fuzz::paths::run(PathStyle::Windows, &case);
});
