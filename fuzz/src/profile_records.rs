//! What profiles read: kubelet's per-volume record (`vol_data.json`), which a node plugin with
//! the pods directory mounted can write, and the owners book in the state directory.

use csi_proxy_core::profiles::owners;

/// Reads `data` as kubelet's record and as a stored book. A record names at most a non-empty
/// driver from its bytes; a book read back from its own rendering is the same book (any key
/// and holder round-trips); neither panics.
pub fn run(data: &[u8]) -> bool {
    let named = csi_proxy_core::filesystem::driver_named(data);
    if let Some(d) = &named {
        assert!(!d.is_empty() && d.len() <= data.len(), "{d:?}");
    }
    let book = owners::parse(data);
    let again = owners::parse(&owners::render(&book));
    assert_eq!(book, again, "the book changed through its own file");
    named.is_some()
}
