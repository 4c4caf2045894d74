//! Escapes found while building and running the fuzz targets, pinned as plain tests.

use csi_proxy_core::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
use std::collections::HashMap;
use std::io;

/// A probe over a fixed table; paths not listed are plain directories.
struct Table(HashMap<String, Result<LinkTarget, io::ErrorKind>>);

impl LinkProbe for Table {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        match self.0.get(&path.to_ascii_lowercase()) {
            None => Ok(None),
            Some(Ok(t)) => Ok(Some(t.clone())),
            Some(Err(k)) => Err((*k).into()),
        }
    }
}

/// Windows reads `..` in a relative link target textually: `m\..\evil` is `evil`, whether or
/// not `m` exists. So a missing `m` must not end the probing of what follows the `..`.
#[test]
fn windows_missing_component_then_dotdot_does_not_skip_a_link() {
    let policy = PathPolicy::new(PathStyle::Windows, r"C:\var\lib\kubelet", &[]).unwrap();
    let probe = Table(HashMap::from([
        (
            r"c:\var\lib\kubelet\l".to_string(),
            Ok(LinkTarget::Path(r"m\..\evil".into())),
        ),
        (
            r"c:\var\lib\kubelet\m".to_string(),
            Err(io::ErrorKind::NotFound),
        ),
        (
            r"c:\var\lib\kubelet\evil".to_string(),
            Ok(LinkTarget::Path(r"C:\Windows".into())),
        ),
    ]));
    let path = r"C:\var\lib\kubelet\l\x";
    let r = policy.confine_following("Test", path, &probe);
    assert!(
        r.is_err(),
        "{path} reaches C:\\Windows\\x on Windows, but was accepted as {r:?}"
    );
    let r = policy.confine("Test", path, &probe);
    assert!(r.is_err(), "confine: {r:?}");
}

/// The same on POSIX: the kernel fails at the missing `m` (ENOENT), so nothing escapes either
/// way; the policy may refuse or accept, but never resolve to somewhere outside.
#[test]
fn posix_missing_component_then_dotdot() {
    let policy = PathPolicy::new(PathStyle::Posix, "/var/lib/kubelet", &[]).unwrap();
    let probe = Table(HashMap::from([
        (
            "/var/lib/kubelet/l".to_string(),
            Ok(LinkTarget::Path("m/../evil".into())),
        ),
        (
            "/var/lib/kubelet/m".to_string(),
            Err(io::ErrorKind::NotFound),
        ),
        (
            "/var/lib/kubelet/evil".to_string(),
            Ok(LinkTarget::Path("/etc".into())),
        ),
    ]));
    if let Ok(r) = policy.confine_following("Test", "/var/lib/kubelet/l/x", &probe) {
        assert!(r.starts_with("/var/lib/kubelet/"), "{r}");
    }
}
