//! `confine` / `confine_following` against a fake in-memory `LinkProbe`, both styles.

use csi_proxy_core::paths::{LinkProbe, LinkTarget, MAX_LINK_HOPS, PathPolicy, PathStyle};
use csi_proxy_core::{Error, Kind};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;

const I: Kind = Kind::InvalidArgument;
const P: Kind = Kind::PermissionDenied;

enum Node {
    Link(LinkTarget),
    Fail(io::ErrorKind),
}

/// A filesystem of exact path strings: links, mount points and failures; anything else is a
/// plain directory. Every probe is recorded.
#[derive(Default)]
struct Fake {
    nodes: HashMap<String, Node>,
    probed: RefCell<Vec<String>>,
}

impl Fake {
    fn link(mut self, at: &str, to: &str) -> Self {
        self.nodes
            .insert(at.into(), Node::Link(LinkTarget::Path(to.into())));
        self
    }
    fn volume(mut self, at: &str) -> Self {
        self.nodes.insert(at.into(), Node::Link(LinkTarget::Volume));
        self
    }
    fn foreign(mut self, at: &str, why: &str) -> Self {
        self.nodes
            .insert(at.into(), Node::Link(LinkTarget::Foreign(why.into())));
        self
    }
    fn fail(mut self, at: &str, kind: io::ErrorKind) -> Self {
        self.nodes.insert(at.into(), Node::Fail(kind));
        self
    }
    fn probed(&self) -> Vec<String> {
        self.probed.borrow().clone()
    }
}

impl LinkProbe for Fake {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        self.probed.borrow_mut().push(path.to_string());
        match self.nodes.get(path) {
            Some(Node::Link(t)) => Ok(Some(t.clone())),
            Some(Node::Fail(k)) => Err(io::Error::from(*k)),
            None => Ok(None),
        }
    }
}

fn posix() -> PathPolicy {
    PathPolicy::new(
        PathStyle::Posix,
        "/var/lib/kubelet",
        &["/tmp/csi-work".to_string()],
    )
    .unwrap()
}

fn windows() -> PathPolicy {
    PathPolicy::new(
        PathStyle::Windows,
        r"C:\var\lib\kubelet",
        &[r"D:\csi".to_string()],
    )
    .unwrap()
}

#[track_caller]
fn denied(r: Result<String, Error>, kind: Kind, needle: &str) -> Error {
    let e = match r {
        Ok(p) => panic!("accepted as {p:?}, wanted {kind:?} containing {needle:?}"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), kind, "{e}");
    assert!(e.message().contains(needle), "{needle:?} not in {e}");
    e
}

// ---------------------------------------------------------------- POSIX

#[test]
fn posix_intermediate_link_to_outside_is_denied() {
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "/etc");
    let e = denied(
        posix().confine("Mkdir", "/var/lib/kubelet/pods/l/x", &fs),
        P,
        "outside the allowed roots",
    );
    assert_eq!(
        e.message(),
        r#"Mkdir "/var/lib/kubelet/pods/l/x": "/var/lib/kubelet/pods/l" is a link to "/etc", which leads to "/etc", outside the allowed roots [/tmp/csi-work, /var/lib/kubelet]"#
    );
    // Components up to and including the root are never probed; the final one is not followed.
    assert_eq!(
        fs.probed(),
        ["/var/lib/kubelet/pods", "/var/lib/kubelet/pods/l"]
    );
}

#[test]
fn posix_intermediate_link_inside_a_root_is_followed() {
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "/tmp/csi-work/data");
    let p = posix();
    assert_eq!(
        p.confine("Mkdir", "/var/lib/kubelet/pods/l/x", &fs)
            .unwrap(),
        "/var/lib/kubelet/pods/l/x"
    );
    assert_eq!(
        fs.probed(),
        [
            "/var/lib/kubelet/pods",
            "/var/lib/kubelet/pods/l",
            "/tmp/csi-work/data",
            // The final entry is looked at (not followed): the caller acts on what it is.
            "/tmp/csi-work/data/x"
        ]
    );
    assert_eq!(
        p.confine_following("RmdirContents", "/var/lib/kubelet/pods/l/x", &fs)
            .unwrap(),
        "/tmp/csi-work/data/x"
    );
}

#[test]
fn posix_relative_links_resolve_against_the_links_parent() {
    let p = posix();
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "../../../../etc");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/pods/l/x", &fs),
        P,
        r#"which leads to "/etc""#,
    );
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "../../kubelet-evil");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/pods/l/x", &fs),
        P,
        r#"which leads to "/var/lib/kubelet-evil""#,
    );
    // Climbing above the root and back into another root is fine.
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "../../../../tmp/csi-work/./y");
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/pods/l/x", &fs)
            .unwrap(),
        "/tmp/csi-work/y/x"
    );
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "../other");
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/pods/l/x", &fs)
            .unwrap(),
        "/var/lib/kubelet/other/x"
    );
    // `..` at the filesystem root stays there.
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "/../../etc");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/pods/l/x", &fs),
        P,
        r#"leads to "/etc""#,
    );
}

/// Lexically `s/../x` is `x`, but the kernel goes through `s` first: `..` is the parent of where
/// `s` leads. Lexical normalisation of link targets would let this escape.
#[test]
fn posix_dotdot_after_a_link_is_resolved_physically() {
    let p = posix();
    let fs = Fake::default()
        .link("/var/lib/kubelet/pods/s", "/tmp/csi-work")
        .link("/var/lib/kubelet/pods/l", "s/../x");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/pods/l/y", &fs),
        P,
        r#"leads to "/tmp/x""#,
    );
    let fs = Fake::default()
        .link("/var/lib/kubelet/pods/s", "/tmp/csi-work/a")
        .link("/var/lib/kubelet/pods/l", "s/../b");
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/pods/l/y", &fs)
            .unwrap(),
        "/tmp/csi-work/b/y"
    );
}

#[test]
fn posix_link_chains_are_followed_and_checked_at_each_hop() {
    let p = posix();
    let fs = Fake::default()
        .link("/var/lib/kubelet/a", "/var/lib/kubelet/b")
        .link("/var/lib/kubelet/b", "c")
        .link("/var/lib/kubelet/c", "/tmp/csi-work/d");
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/a/x", &fs)
            .unwrap(),
        "/tmp/csi-work/d/x"
    );
    let fs = Fake::default()
        .link("/var/lib/kubelet/a", "/var/lib/kubelet/b")
        .link("/var/lib/kubelet/b", "/etc");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/a/x", &fs),
        P,
        r#""/var/lib/kubelet/b" is a link to "/etc""#,
    );
    // A chain through a link that is itself inside the target.
    let fs = Fake::default()
        .link("/var/lib/kubelet/a", "/tmp/csi-work/s/t")
        .link("/tmp/csi-work/s", "/var/lib/kubelet/real");
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/a/x", &fs)
            .unwrap(),
        "/var/lib/kubelet/real/t/x"
    );
}

#[test]
fn posix_link_loops_end_with_an_error() {
    let p = posix();
    let fs = Fake::default()
        .link("/var/lib/kubelet/a", "b")
        .link("/var/lib/kubelet/b", "a");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/a/x", &fs),
        I,
        "too many levels of links (more than 40",
    );
    let fs = Fake::default().link("/var/lib/kubelet/a", "/var/lib/kubelet/a/./");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/a/x", &fs),
        I,
        "too many levels of links",
    );
    let fs = Fake::default().link("/var/lib/kubelet/a", "a/a");
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/a/x", &fs),
        I,
        "too many levels of links",
    );
}

#[test]
fn posix_exactly_forty_hops_are_allowed_and_forty_one_are_not() {
    let p = posix();
    let chain = |n: usize| {
        let mut fs = Fake::default();
        for i in 0..n {
            let to = if i + 1 == n {
                "/tmp/csi-work/end".to_string()
            } else {
                format!("l{}", i + 1)
            };
            fs = fs.link(&format!("/var/lib/kubelet/l{i}"), &to);
        }
        fs
    };
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/l0/x", &chain(MAX_LINK_HOPS))
            .unwrap(),
        "/tmp/csi-work/end/x"
    );
    denied(
        p.confine("Mkdir", "/var/lib/kubelet/l0/x", &chain(MAX_LINK_HOPS + 1)),
        I,
        "too many levels of links",
    );
}

#[test]
fn posix_volume_mount_is_allowed_but_its_contents_are_still_probed() {
    let p = posix();
    let fs = Fake::default().volume("/var/lib/kubelet/pods/vol");
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/pods/vol/data/x", &fs)
            .unwrap(),
        "/var/lib/kubelet/pods/vol/data/x"
    );
    assert_eq!(
        fs.probed(),
        [
            "/var/lib/kubelet/pods",
            "/var/lib/kubelet/pods/vol",
            "/var/lib/kubelet/pods/vol/data",
            "/var/lib/kubelet/pods/vol/data/x",
        ]
    );
    // A pod can write links into its volume; they must not lead out.
    let fs = Fake::default()
        .volume("/var/lib/kubelet/pods/vol")
        .link("/var/lib/kubelet/pods/vol/evil", "/etc");
    denied(
        p.confine("Rmdir", "/var/lib/kubelet/pods/vol/evil/passwd", &fs),
        P,
        r#""/var/lib/kubelet/pods/vol/evil" is a link to "/etc""#,
    );
    // On POSIX `..` out of a mount point is the mount point's parent, as the kernel does it.
    let fs = Fake::default()
        .volume("/var/lib/kubelet/pods/vol")
        .link("/var/lib/kubelet/pods/vol/up", "../other");
    assert_eq!(
        p.confine_following("Mkdir", "/var/lib/kubelet/pods/vol/up/x", &fs)
            .unwrap(),
        "/var/lib/kubelet/pods/other/x"
    );
}

#[test]
fn posix_foreign_is_denied_naming_the_component_and_why() {
    let fs = Fake::default().foreign("/var/lib/kubelet/pods/m", "bind mount of /etc");
    let e = denied(
        posix().confine("Mkdir", "/var/lib/kubelet/pods/m/x", &fs),
        P,
        "bind mount of /etc",
    );
    assert_eq!(
        e.message(),
        r#"Mkdir "/var/lib/kubelet/pods/m/x": "/var/lib/kubelet/pods/m" cannot be proven to stay within the allowed roots: bind mount of /etc"#
    );
}

#[test]
fn posix_final_component_is_followed_only_by_confine_following() {
    let p = posix();
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "/etc");
    assert_eq!(
        p.confine("Rmdir", "/var/lib/kubelet/pods/l", &fs).unwrap(),
        "/var/lib/kubelet/pods/l"
    );
    // The final link is looked at, not followed.
    assert_eq!(
        fs.probed(),
        ["/var/lib/kubelet/pods", "/var/lib/kubelet/pods/l"]
    );
    denied(
        p.confine_following("RmdirContents", "/var/lib/kubelet/pods/l", &fs),
        P,
        r#"is a link to "/etc""#,
    );
    // Following a final link to a root yields the root, so callers can protect it.
    let fs = Fake::default().link("/var/lib/kubelet/pods/l", "..");
    let resolved = p
        .confine_following("RmdirContents", "/var/lib/kubelet/pods/l", &fs)
        .unwrap();
    assert_eq!(resolved, "/var/lib/kubelet");
    assert!(p.is_root(&resolved));
}

#[test]
fn posix_link_to_an_ancestor_of_a_root_is_denied_even_if_the_rest_comes_back() {
    let fs = Fake::default().link("/var/lib/kubelet/l", "/var/lib");
    denied(
        posix().confine("Mkdir", "/var/lib/kubelet/l/kubelet/x", &fs),
        P,
        r#"which resolves to "/var/lib", outside the allowed roots"#,
    );
    // A link to exactly a root is inside.
    let fs = Fake::default().link("/var/lib/kubelet/l", "/tmp/csi-work");
    assert_eq!(
        posix()
            .confine_following("Mkdir", "/var/lib/kubelet/l/x", &fs)
            .unwrap(),
        "/tmp/csi-work/x"
    );
}

#[test]
fn posix_roots_and_their_ancestors_are_never_probed() {
    // Even if the root itself is a link (kubelet dirs often are), the admin chose it.
    let fs = Fake::default()
        .link("/var/lib/kubelet", "/data/kubelet")
        .link("/var/lib", "/elsewhere");
    assert_eq!(
        posix()
            .confine_following("Mkdir", "/var/lib/kubelet/a", &fs)
            .unwrap(),
        "/var/lib/kubelet/a"
    );
    assert_eq!(fs.probed(), ["/var/lib/kubelet/a"]);
    // With nested roots the way down to the deeper root is trusted too, also inside a target.
    let nested = PathPolicy::new(
        PathStyle::Posix,
        "/var/lib/kubelet",
        &["/var/lib/kubelet/plugins/x".to_string()],
    )
    .unwrap();
    let fs = Fake::default()
        .link("/var/lib/kubelet/plugins", "/opt/plugins")
        .link("/var/lib/kubelet/l", "/var/lib/kubelet/plugins/x/z");
    assert_eq!(
        nested
            .confine_following("Mkdir", "/var/lib/kubelet/plugins/x/y", &fs)
            .unwrap(),
        "/var/lib/kubelet/plugins/x/y"
    );
    assert_eq!(
        nested
            .confine_following("Mkdir", "/var/lib/kubelet/l", &fs)
            .unwrap(),
        "/var/lib/kubelet/plugins/x/z"
    );
    // But a link target strictly inside the outer root is within it.
    let fs = Fake::default().link("/var/lib/kubelet/l", "/var/lib/kubelet/plugins");
    assert_eq!(
        nested
            .confine_following("Mkdir", "/var/lib/kubelet/l", &fs)
            .unwrap(),
        "/var/lib/kubelet/plugins"
    );
}

#[test]
fn posix_missing_component_ends_probing() {
    let fs = Fake::default()
        .fail("/var/lib/kubelet/pods/new", io::ErrorKind::NotFound)
        .link("/var/lib/kubelet/pods/new/l", "/etc");
    assert_eq!(
        posix()
            .confine_following("Mkdir", "/var/lib/kubelet/pods/new/l/x", &fs)
            .unwrap(),
        "/var/lib/kubelet/pods/new/l/x"
    );
    assert_eq!(
        fs.probed(),
        ["/var/lib/kubelet/pods", "/var/lib/kubelet/pods/new"]
    );
    // Below a plain file nothing exists either.
    let fs = Fake::default().fail("/var/lib/kubelet/file", io::ErrorKind::NotADirectory);
    assert_eq!(
        posix()
            .confine("Mkdir", "/var/lib/kubelet/file/a/b", &fs)
            .unwrap(),
        "/var/lib/kubelet/file/a/b"
    );
    assert_eq!(fs.probed(), ["/var/lib/kubelet/file"]);
    // A dangling link whose missing target still leads outside lexically is denied.
    let fs = Fake::default()
        .link("/var/lib/kubelet/l", "gone/../../../etc")
        .fail("/var/lib/kubelet/gone", io::ErrorKind::NotFound);
    denied(
        posix().confine("Mkdir", "/var/lib/kubelet/l/x", &fs),
        P,
        r#"leads to "/var/etc""#,
    );
}

#[test]
fn posix_probe_errors_are_mapped_with_their_kind() {
    let fs = Fake::default().fail("/var/lib/kubelet/pods", io::ErrorKind::PermissionDenied);
    let e = denied(
        posix().confine("Mkdir", "/var/lib/kubelet/pods/x", &fs),
        P,
        r#"(checking "/var/lib/kubelet/pods")"#,
    );
    assert!(
        e.message()
            .starts_with(r#"Mkdir "/var/lib/kubelet/pods/x" (checking"#),
        "{e}"
    );
    let fs = Fake::default().fail("/var/lib/kubelet/pods", io::ErrorKind::Other);
    denied(
        posix().confine("Mkdir", "/var/lib/kubelet/pods/x", &fs),
        Kind::Internal,
        "checking",
    );
    let fs = Fake::default().link("/var/lib/kubelet/l", "");
    denied(
        posix().confine("Mkdir", "/var/lib/kubelet/l/x", &fs),
        P,
        "cannot be resolved safely: the target is empty",
    );
}

// ---------------------------------------------------------------- Windows

#[test]
fn windows_junction_to_outside_is_denied() {
    let w = windows();
    for target in [
        r"\??\C:\Windows",
        r"\\?\C:\Windows\System32",
        r"C:\Windows",
        r"\??\E:\",
        r"\??\C:\var\lib\kubelet-evil",
        r"\??\C:\var\lib\kubelet\..\kubelet-evil",
    ] {
        let fs = Fake::default().link(r"C:\var\lib\kubelet\pods\j", target);
        denied(
            w.confine("Mkdir", r"C:\var\lib\kubelet\pods\j\x", &fs),
            P,
            "outside the allowed roots",
        );
    }
}

#[test]
fn windows_unc_device_and_unresolvable_targets_are_denied() {
    let w = windows();
    for (target, why) in [
        (r"\??\UNC\srv\share", "UNC path"),
        (r"\\?\UNC\srv\share\x", "UNC path"),
        (r"\\srv\share", "UNC or device path"),
        (r"\\.\PhysicalDrive0", "UNC or device path"),
        (
            r"\??\Volume{01234567-89ab-cdef-0123-456789abcdef}\",
            "device or volume path",
        ),
        (r"\Windows", "rooted without a drive"),
        (r"C:Windows", "drive-relative"),
        (r"\??\C:\var\lib\kubelet\x:stream", "alternate data streams"),
        (r"C:\var\lib\kubelet.\x", "Windows strips"),
        (r"C:\var\lib\kubelet\CON", "reserved device name"),
    ] {
        let fs = Fake::default().link(r"C:\var\lib\kubelet\pods\j", target);
        let e = denied(
            w.confine("Mkdir", r"C:\var\lib\kubelet\pods\j\x", &fs),
            P,
            why,
        );
        assert!(e.message().contains("cannot be resolved safely"), "{e}");
    }
}

#[test]
fn windows_junction_inside_a_root_is_followed_in_every_target_form() {
    let w = windows();
    for (target, resolved) in [
        (
            r"\??\C:\var\lib\kubelet\other",
            r"C:\var\lib\kubelet\other\x",
        ),
        (r"\\?\D:\csi\data\", r"D:\csi\data\x"),
        (r"\??\c:\VAR\LIB\KUBELET\x", r"c:\VAR\LIB\KUBELET\x\x"),
        (r"D:\csi", r"D:\csi\x"),
        (r"C:/var/lib/kubelet/y", r"C:\var\lib\kubelet\y\x"),
        (r"..\sibling", r"C:\var\lib\kubelet\sibling\x"),
        (r"..\..\..\..\..\D:\csi", ""), // a name with ':' is refused, checked below
    ] {
        let fs = Fake::default().link(r"C:\var\lib\kubelet\pods\j", target);
        let r = w.confine_following("Mkdir", r"C:\var\lib\kubelet\pods\j\x", &fs);
        if resolved.is_empty() {
            denied(r, P, "alternate data streams");
            continue;
        }
        assert_eq!(r.unwrap(), resolved, "{target}");
        assert_eq!(
            w.confine("Mkdir", r"C:\var\lib\kubelet\pods\j\x", &fs)
                .unwrap(),
            r"C:\var\lib\kubelet\pods\j\x"
        );
    }
}

#[test]
fn windows_relative_link_escaping_with_dotdot_is_denied() {
    let fs = Fake::default().link(r"C:\var\lib\kubelet\pods\l", r"..\..\..\..\Windows");
    denied(
        windows().confine("Mkdir", r"C:\var\lib\kubelet\pods\l\x", &fs),
        P,
        r#"which leads to "C:\\Windows""#,
    );
    // `..` at the drive root stays there.
    let fs = Fake::default().link(r"C:\var\lib\kubelet\pods\l", r"\??\C:\..\..\Windows");
    denied(
        windows().confine("Mkdir", r"C:\var\lib\kubelet\pods\l\x", &fs),
        P,
        r#"which leads to "C:\\Windows""#,
    );
}

/// Windows reads `..` in a relative target textually, POSIX after following links; where the two
/// could disagree the path is refused.
#[test]
fn windows_dotdot_out_of_a_followed_link_or_volume_is_refused() {
    let w = windows();
    let fs = Fake::default()
        .link(r"C:\var\lib\kubelet\pods\s", r"\??\C:\var\lib\kubelet\a\b")
        .link(r"C:\var\lib\kubelet\pods\l", r"s\..\x");
    denied(
        w.confine("Mkdir", r"C:\var\lib\kubelet\pods\l\y", &fs),
        P,
        "Windows reads that '..' textually",
    );
    let fs = Fake::default()
        .volume(r"C:\var\lib\kubelet\pods\vol")
        .link(r"C:\var\lib\kubelet\pods\vol\up", r"..\x");
    denied(
        w.confine("Mkdir", r"C:\var\lib\kubelet\pods\vol\up\y", &fs),
        P,
        "steps back out of the link or mount point",
    );
    // `..` over plain directories is unambiguous.
    let fs = Fake::default()
        .volume(r"C:\var\lib\kubelet\pods\vol")
        .link(r"C:\var\lib\kubelet\pods\vol\a\up", r"..\b");
    assert_eq!(
        w.confine_following("Mkdir", r"C:\var\lib\kubelet\pods\vol\a\up\y", &fs)
            .unwrap(),
        r"C:\var\lib\kubelet\pods\vol\b\y"
    );
    let fs = Fake::default()
        .volume(r"C:\var\lib\kubelet\pods\vol")
        .link(r"C:\var\lib\kubelet\pods\vol\a\up", r"..\..\b");
    denied(
        w.confine("Mkdir", r"C:\var\lib\kubelet\pods\vol\a\up\y", &fs),
        P,
        "steps back out",
    );
}

#[test]
fn windows_chains_loops_volume_foreign_and_final_component() {
    let w = windows();
    let fs = Fake::default()
        .link(r"C:\var\lib\kubelet\a", r"\??\D:\csi\b")
        .link(r"D:\csi\b", r"\??\C:\var\lib\kubelet\c");
    assert_eq!(
        w.confine_following("Mkdir", r"C:\var\lib\kubelet\a\x", &fs)
            .unwrap(),
        r"C:\var\lib\kubelet\c\x"
    );
    let fs = Fake::default()
        .link(r"C:\var\lib\kubelet\a", r"\??\D:\csi\b")
        .link(r"D:\csi\b", r"\??\C:\var\lib\kubelet\a");
    denied(
        w.confine("Mkdir", r"C:\var\lib\kubelet\a\x", &fs),
        I,
        "too many levels of links",
    );
    let fs = Fake::default().volume(r"C:\var\lib\kubelet\vol");
    assert_eq!(
        w.confine("Mkdir", r"C:\var\lib\kubelet\vol\x\y", &fs)
            .unwrap(),
        r"C:\var\lib\kubelet\vol\x\y"
    );
    let fs = Fake::default().foreign(r"C:\var\lib\kubelet\smb", "SMB global mapping");
    denied(
        w.confine("Mkdir", r"C:\var\lib\kubelet\smb\x", &fs),
        P,
        r#""C:\\var\\lib\\kubelet\\smb" cannot be proven to stay within the allowed roots: SMB global mapping"#,
    );
    let fs = Fake::default().link(r"C:\var\lib\kubelet\pods\j", r"\??\UNC\srv\share");
    assert_eq!(
        w.confine("Rmdir", r"C:\var\lib\kubelet\pods\j", &fs)
            .unwrap(),
        r"C:\var\lib\kubelet\pods\j"
    );
    denied(
        w.confine_following("RmdirContents", r"C:\var\lib\kubelet\pods\j", &fs),
        P,
        "UNC path",
    );
    let fs = Fake::default().link(r"C:\var\lib\kubelet\pods\j", r"\??\C:\Windows");
    denied(
        w.confine_following("RmdirContents", r"C:\var\lib\kubelet\pods\j", &fs),
        P,
        "outside the allowed roots",
    );
}

#[test]
fn windows_lexical_rejections_never_probe() {
    let fs = Fake::default();
    for path in [r"\\?\C:\var\lib\kubelet\x", r"C:\var\lib\kubelet\CON\x"] {
        denied(windows().confine("Mkdir", path, &fs), I, "");
    }
    denied(windows().confine("Mkdir", r"C:\Windows\x", &fs), P, "");
    assert!(fs.probed().is_empty());
}
