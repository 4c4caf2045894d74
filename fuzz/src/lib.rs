//! Fuzz harnesses for csi-proxy, kept in a library so that the corpus can also be replayed by a
//! plain `cargo test` (see `tests/corpus.rs`) on the stable toolchain.

pub mod authority;
pub mod dbus_message;
pub mod disk_content;
pub mod paths;
pub mod profile_records;
pub mod windows_buffers;
pub mod wire_text;
