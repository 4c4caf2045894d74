//! The Linux mount table, `/proc/self/mountinfo`: read here, parsed by
//! [`csi_proxy_formats::mountinfo`] (proc(5), "/proc/pid/mountinfo").

pub use csi_proxy_formats::mountinfo::{
    MountInfo, ParseError, by_id, parse, parse_line, topmost_at, unescape,
};
use std::io;

/// Where the kernel shows this process's mount table.
pub const PATH: &str = "/proc/self/mountinfo";

/// Reads and parses `/proc/self/mountinfo` on this machine.
pub fn read() -> io::Result<Vec<MountInfo>> {
    read_from(&*super::os::system())
}

/// Reads and parses `/proc/self/mountinfo` through `os`.
pub fn read_from(os: &dyn super::os::LinuxOs) -> io::Result<Vec<MountInfo>> {
    Ok(parse(&os.read_file(std::path::Path::new(PATH))?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn reads_own_table() {
        let t = read().unwrap();
        assert!(t.iter().any(|m| m.mount_point == Path::new("/")));
    }
}
