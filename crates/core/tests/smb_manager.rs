//! The SMB mapping manager's decisions (reuse, replace on disconnect or new credentials, error
//! 1219, keep while another link uses the share, remove on last) against a fake host that
//! behaves like Windows' global mappings and records every call.

use csi_proxy_core::smb::{
    MappingInfo, MappingState, NewSmbGlobalMappingRequest, SmbHost, SmbLinkUse, SmbMapping,
    SmbService, SmbUsers,
};
use csi_proxy_core::{Error, Kind, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

const KUBELET: &str = "/var/lib/kubelet";
const PASSWORD: &str = "Rotate-Me-1!";
const NEW_PASSWORD: &str = "Rotated-2?";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Create(String, Option<String>),
    Link(String, String),
    Remove(String),
}

#[derive(Debug, Clone)]
struct Mapping {
    user: Option<String>,
    healthy: bool,
}

/// A Windows-like host: one set of credentials per server (creating a mapping on a server that
/// has a mapping made as another user fails with "1219", as does creating an existing root);
/// links are a map from link path to the remote path it leads to.
#[derive(Default)]
struct Fake {
    mappings: Mutex<BTreeMap<String, Mapping>>,
    links: Mutex<BTreeMap<String, String>>,
    calls: Mutex<Vec<Call>>,
    /// Whether the host reports the user of a mapping (Linux does, Windows does not).
    reports_user: bool,
    /// Roots the host must not be asked to remove (in use by an open handle, say).
    sticky: Mutex<BTreeSet<String>>,
    /// The host cannot tell a mapping's state (MappingState::Unknown), though it lists them.
    blind: bool,
    /// Roots whose server does not answer at all (else a broken mapping is one whose server
    /// refuses its credential).
    unreachable: Mutex<BTreeSet<String>>,
    /// Why the link scan is incomplete, if it is.
    incomplete_scan: Mutex<Option<String>>,
}

impl Fake {
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
    fn set_healthy(&self, root: &str, healthy: bool) {
        self.mappings.lock().unwrap().get_mut(root).unwrap().healthy = healthy;
    }
    fn mapped(&self) -> Vec<String> {
        self.mappings.lock().unwrap().keys().cloned().collect()
    }
}

fn server(root: &str) -> &str {
    root.trim_start_matches('\\').split('\\').next().unwrap()
}

impl SmbHost for Fake {
    fn new_smb_global_mapping(&self, m: &SmbMapping) -> Result<()> {
        let user = m.credentials.as_ref().map(|c| c.username.clone());
        self.calls
            .lock()
            .unwrap()
            .push(Call::Create(m.root.clone(), user.clone()));
        let mut maps = self.mappings.lock().unwrap();
        let conflict = maps
            .iter()
            .any(|(r, x)| r == &m.root || (server(r) == server(&m.root) && x.user != user));
        if conflict {
            return Err(Error::new(
                Kind::AlreadyExists,
                "NewSmbGlobalMapping",
                &m.root,
                "Multiple connections to a server or shared resource by the same user (1219)",
            ));
        }
        maps.insert(
            m.root.clone(),
            Mapping {
                user,
                healthy: true,
            },
        );
        Ok(())
    }
    fn new_smb_link(&self, _: &SmbMapping, remote: &str, local: &str) -> Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push(Call::Link(remote.into(), local.into()));
        self.links
            .lock()
            .unwrap()
            .insert(local.into(), remote.into());
        Ok(())
    }
    fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
        self.calls.lock().unwrap().push(Call::Remove(root.into()));
        assert!(
            !self.sticky.lock().unwrap().contains(root),
            "removed {root} in use"
        );
        match self.mappings.lock().unwrap().remove(root) {
            Some(_) => Ok(()),
            None => Err(Error::new(
                Kind::NotFound,
                "Remove",
                root,
                "no such mapping",
            )),
        }
    }
    fn smb_global_mapping(&self, root: &str) -> Result<MappingState> {
        if self.blind {
            return Ok(MappingState::Unknown);
        }
        Ok(match self.mappings.lock().unwrap().get(root) {
            None => MappingState::Absent,
            Some(m) => MappingState::Present(MappingInfo {
                healthy: m.healthy,
                status: if m.healthy { "OK" } else { "Disconnected" }.into(),
                remap_heals: !self.unreachable.lock().unwrap().contains(root),
                username: if self.reports_user {
                    Some(m.user.clone().unwrap_or_default())
                } else {
                    None
                },
            }),
        })
    }
    fn smb_global_mappings(&self) -> Result<Vec<String>> {
        Ok(self.mapped())
    }
    fn credential_mapping(&self, _: &SmbMapping) -> Result<Option<MappingState>> {
        Ok(None)
    }
    fn remove_credential_mapping(&self, _: &SmbMapping) -> Result<()> {
        panic!("a host with one mapping per root is never asked to remove one credential's")
    }
    fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<SmbUsers> {
        assert_eq!(scan_roots, [KUBELET.to_string()]);
        let links = self
            .links
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, remote)| {
                csi_proxy_core::smb::share_root_of_link_target(remote).as_deref() == Some(root)
            })
            .map(|(link, remote)| SmbLinkUse {
                link: link.clone(),
                remote: remote.clone(),
            })
            .collect();
        Ok(SmbUsers {
            links,
            incomplete: self.incomplete_scan.lock().unwrap().clone(),
        })
    }
}

fn service(host: Arc<Fake>) -> SmbService {
    // Paths confined to /var/lib/kubelet (KUBELET), with no links on the fake filesystem.
    SmbService::new(host, csi_proxy_core::testing::kubelet_fs(), true)
}

fn req(remote: &str, local: &str, user: &str, password: &str) -> NewSmbGlobalMappingRequest {
    NewSmbGlobalMappingRequest {
        remote_path: remote.into(),
        local_path: if local.is_empty() {
            String::new()
        } else {
            format!("{KUBELET}/{local}")
        },
        username: user.into(),
        password: password.into(),
    }
}

fn create(root: &str, user: &str) -> Call {
    Call::Create(root.into(), Some(user.into()))
}

const ROOT: &str = "\\\\srv\\share";

#[test]
fn a_healthy_mapping_with_the_same_credentials_is_reused() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req("\\\\SRV\\Share\\a", "v1", "dom\\u", PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [
            create(ROOT, "dom\\u"),
            Call::Link("\\\\SRV\\Share\\a".into(), format!("{KUBELET}/v1"))
        ]
    );
    svc.new_smb_global_mapping(&req("//srv/share/b", "v2", "dom\\u", PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [Call::Link(
            "\\\\srv\\share\\b".into(),
            format!("{KUBELET}/v2")
        )],
        "second volume on the same share reuses the mapping"
    );
}

#[test]
fn a_disconnected_mapping_is_replaced() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(ROOT, "", "u", PASSWORD))
        .unwrap();
    host.take();
    host.set_healthy(ROOT, false);
    svc.new_smb_global_mapping(&req(ROOT, "", "u", PASSWORD))
        .unwrap();
    assert_eq!(host.take(), [Call::Remove(ROOT.into()), create(ROOT, "u")]);
    assert!(host.mappings.lock().unwrap()[ROOT].healthy);
}

/// Re-staging the only volume on a share with a rotated password replaces the mapping, so the
/// new password takes effect; the volume's own earlier link does not count as another user.
#[test]
fn a_rotated_password_replaces_the_mapping_so_it_takes_effect() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(ROOT, "v1", "u", PASSWORD))
        .unwrap();
    host.take();
    svc.new_smb_global_mapping(&req(ROOT, "v1", "u", NEW_PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [
            Call::Remove(ROOT.into()),
            create(ROOT, "u"),
            Call::Link(ROOT.into(), format!("{KUBELET}/v1"))
        ]
    );
    // Same new password again: reused.
    svc.new_smb_global_mapping(&req(ROOT, "", "u", NEW_PASSWORD))
        .unwrap();
    assert_eq!(host.take(), []);
}

/// Two volumes on one share with different secrets (or a rotation while another volume is
/// staged): the working mapping the other volume uses is reused, never removed under it (before,
/// it was removed and made again, closing the other pods' open files); a broken one is made
/// again (before, FAILED_PRECONDITION while another volume was staged: the share never healed).
#[test]
fn a_working_mapping_others_use_is_kept_and_a_broken_one_repaired() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(ROOT, "v1", "u", PASSWORD))
        .unwrap();
    host.take();
    svc.new_smb_global_mapping(&req("\\\\srv\\share\\b", "v2", "u", NEW_PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [Call::Link(
            "\\\\srv\\share\\b".into(),
            format!("{KUBELET}/v2")
        )],
        "reused as it is"
    );
    // Broken and used by others: it serves none of them, so it is made again with this
    // request's credentials (a rotated key), which heals every volume of the share.
    host.set_healthy(ROOT, false);
    svc.new_smb_global_mapping(&req(ROOT, "v3", "u", NEW_PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [
            Call::Remove(ROOT.into()),
            create(ROOT, "u"),
            Call::Link(ROOT.into(), format!("{KUBELET}/v3"))
        ],
        "repaired under the other links"
    );
    assert_eq!(host.mapped(), [ROOT]);
}

/// A mapping other volumes use whose server does not answer (or whose probe's answer was lost)
/// is kept: made again, it would fail as well, and the other volumes would stay broken once the
/// server is back. Before, it was removed under them (the simulation's SMB world, seed 115: a
/// working mapping removed under a live link after one failed probe).
#[test]
fn a_mapping_others_use_is_kept_while_its_server_does_not_answer() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(ROOT, "v1", "u", PASSWORD))
        .unwrap();
    host.take();
    host.set_healthy(ROOT, false);
    host.unreachable.lock().unwrap().insert(ROOT.into());
    let e = svc
        .new_smb_global_mapping(&req("\\\\srv\\share\\b", "v2", "u", PASSWORD))
        .unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable, "{e}");
    assert!(e.to_string().contains("1 other links"), "{e}");
    assert_eq!(host.take(), [], "nothing removed, nothing made");
    assert_eq!(host.mapped(), [ROOT]);
}

/// csi-driver-smb unstages with RemoveSmbGlobalMapping first and the Rmdir of its staging link
/// second. Before, its own link counted as a user and the mapping (with its credentials) was
/// never removed.
#[test]
fn csi_driver_smb_unstage_order_removes_the_last_volumes_mapping() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    let a = "\\\\srv\\share\\a";
    let b = "\\\\srv\\share\\b";
    svc.new_smb_global_mapping(&req(a, "stage-a", "u", PASSWORD))
        .unwrap();
    svc.new_smb_global_mapping(&req(b, "stage-b", "u", PASSWORD))
        .unwrap();
    host.take();
    // Unstage of a: b's link leads elsewhere in the share, so the mapping stays.
    svc.remove_smb_global_mapping(a).unwrap();
    host.links
        .lock()
        .unwrap()
        .remove(&format!("{KUBELET}/stage-a"));
    assert_eq!(host.take(), [], "b still uses the share");
    // Unstage of b, the last volume: its own link is still there when it asks.
    svc.remove_smb_global_mapping("//SRV/share/b/").unwrap();
    host.links
        .lock()
        .unwrap()
        .remove(&format!("{KUBELET}/stage-b"));
    assert_eq!(host.take(), [Call::Remove(ROOT.into())]);
    assert!(host.mapped().is_empty());

    // Two volumes on the very same path: the first unstage keeps the mapping.
    svc.new_smb_global_mapping(&req(a, "x1", "u", PASSWORD))
        .unwrap();
    svc.new_smb_global_mapping(&req(a, "x2", "u", PASSWORD))
        .unwrap();
    host.take();
    svc.remove_smb_global_mapping(a).unwrap();
    host.links.lock().unwrap().remove(&format!("{KUBELET}/x1"));
    assert_eq!(host.take(), []);
    svc.remove_smb_global_mapping(a).unwrap();
    assert_eq!(host.take(), [Call::Remove(ROOT.into())]);
}

#[test]
fn another_user_replaces_a_mapping_when_the_host_reports_users() {
    let host = Arc::new(Fake {
        reports_user: true,
        ..Fake::default()
    });
    // Made before this daemon started (nothing remembered): the reported user decides.
    host.mappings.lock().unwrap().insert(
        ROOT.into(),
        Mapping {
            user: Some("old".into()),
            healthy: true,
        },
    );
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(ROOT, "", "OLD", PASSWORD))
        .unwrap();
    assert_eq!(host.take(), [], "same user (case-insensitive) is reused");
    svc.new_smb_global_mapping(&req(ROOT, "", "new", PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [Call::Remove(ROOT.into()), create(ROOT, "new")]
    );
}

#[test]
fn after_a_restart_a_healthy_mapping_is_reused_and_users_are_found_on_disk() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(ROOT, "v1", "u", PASSWORD))
        .unwrap();
    drop(svc);
    host.take();
    let svc = service(host.clone()); // a new daemon: nothing remembered
    svc.new_smb_global_mapping(&req(ROOT, "v2", "u", PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [Call::Link(ROOT.into(), format!("{KUBELET}/v2"))]
    );
    // v2 unstages (mapping first, link second, as csi-driver-smb does): v1's link is another
    // user of the same path, found on disk by the new daemon.
    svc.remove_smb_global_mapping(ROOT).unwrap();
    host.links.lock().unwrap().remove(&format!("{KUBELET}/v2"));
    assert_eq!(host.take(), [], "v1's link still uses the share");
    assert_eq!(host.mapped(), [ROOT]);
}

#[test]
fn error_1219_reuses_a_mapping_that_appeared_or_rebinds_unused_ones() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    // An unused mapping of another share on the same server, made as another user.
    svc.new_smb_global_mapping(&req("\\\\srv\\other2", "", "alice", PASSWORD))
        .unwrap();
    host.take();
    svc.new_smb_global_mapping(&req(ROOT, "v", "bob", PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [
            create(ROOT, "bob"),
            Call::Remove("\\\\srv\\other2".into()),
            create(ROOT, "bob"),
            Call::Link(ROOT.into(), format!("{KUBELET}/v"))
        ]
    );
    assert_eq!(host.mapped(), [ROOT]);
}

#[test]
fn error_1219_with_a_used_mapping_of_another_user_is_failed_precondition() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req("\\\\srv\\other", "a", "alice", PASSWORD))
        .unwrap();
    host.sticky.lock().unwrap().insert("\\\\srv\\other".into());
    host.take();
    let e = svc
        .new_smb_global_mapping(&req(ROOT, "b", "bob", PASSWORD))
        .unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
    assert!(e.message().contains("\\\\\\\\srv\\\\other"), "{e}");
    assert!(e.message().contains("1219"), "{e}");
    assert!(!e.message().contains(PASSWORD), "{e}");
    assert_eq!(host.take(), [create(ROOT, "bob"), create(ROOT, "bob")]);
    assert_eq!(host.mapped(), ["\\\\srv\\other"]);
}

#[test]
fn error_1219_from_a_stale_mapping_of_the_same_root_is_rebound() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    // A mapping the host lists but a query does not see as present (the upstream quirk: a
    // non-OK mapping makes Create fail with "already exists").
    host.mappings.lock().unwrap().insert(
        ROOT.into(),
        Mapping {
            user: Some("u".into()),
            healthy: false,
        },
    );
    svc.new_smb_global_mapping(&req(ROOT, "", "u", PASSWORD))
        .unwrap();
    assert_eq!(host.take(), [Call::Remove(ROOT.into()), create(ROOT, "u")]);
}

#[test]
fn remove_keeps_a_share_another_link_uses_and_removes_on_last() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req("\\\\srv\\share\\a", "v1", "u", PASSWORD))
        .unwrap();
    svc.new_smb_global_mapping(&req("\\\\srv\\share\\b", "v2", "u", PASSWORD))
        .unwrap();
    host.take();
    // The driver removes its link, then asks to remove the mapping.
    host.links.lock().unwrap().remove(&format!("{KUBELET}/v1"));
    svc.remove_smb_global_mapping("\\\\srv\\share\\a").unwrap();
    assert_eq!(host.take(), [], "v2 still uses the share");
    host.links.lock().unwrap().remove(&format!("{KUBELET}/v2"));
    svc.remove_smb_global_mapping("\\\\SRV\\share\\b").unwrap();
    assert_eq!(host.take(), [Call::Remove(ROOT.into())]);
    let e = svc.remove_smb_global_mapping(ROOT).unwrap_err();
    assert_eq!(e.kind(), Kind::NotFound, "{e}");
    assert_eq!(host.take(), [], "absent: the host is not asked to remove");
}

#[test]
fn malformed_remote_paths_are_invalid_and_reach_no_host() {
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    for bad in [
        "",
        "srv",
        "\\\\srv",
        "\\\\srv\\share\\..\\..\\etc",
        "//srv/share/./x",
        "\\\\srv\\sh\nare",
        "\\\\?\\UNC\\srv\\share",
    ] {
        let e = svc
            .new_smb_global_mapping(&req(bad, "", "u", PASSWORD))
            .unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument, "{bad:?}: {e}");
        let e = svc.remove_smb_global_mapping(bad).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidArgument, "{bad:?}: {e}");
    }
    let e = svc
        .new_smb_global_mapping(&req(ROOT, "", "u", PASSWORD))
        .map(|_| ())
        .and_then(|_| {
            let mut r = req(ROOT, "", "u", PASSWORD);
            r.local_path = "/etc/passwd".into();
            svc.new_smb_global_mapping(&r)
        })
        .unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied, "{e}");
    assert_eq!(host.take(), [create(ROOT, "u")]);
}

#[test]
fn link_targets_lead_to_their_share_root() {
    use csi_proxy_core::smb::share_root_of_link_target as root_of;
    for t in [
        "\\\\Srv\\Share\\sub\\",
        "\\\\?\\UNC\\srv\\share\\sub",
        "\\??\\UNC\\SRV\\share",
        "UNC\\srv\\share\\x",
        "\\\\?\\\\\\srv\\share\\sub\\",
        "//srv/share",
    ] {
        assert_eq!(root_of(t).as_deref(), Some(ROOT), "{t}");
    }
    for t in [
        "C:\\x",
        "\\\\?\\C:\\x",
        "\\\\srv",
        "relative\\dir",
        "\\\\.\\pipe\\x",
    ] {
        assert_eq!(root_of(t), None, "{t}");
    }
}

/// A host that cannot tell a mapping's state: Create is refused as "already exists" and the
/// manager rebinds. Before, it then removed the requested root's mapping without asking who
/// uses it, closing another volume's open files.
#[test]
fn a_rebind_never_removes_the_requested_root_under_another_volume() {
    let host = Arc::new(Fake {
        blind: true,
        ..Fake::default()
    });
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(ROOT, "v1", "u", PASSWORD))
        .unwrap();
    host.sticky.lock().unwrap().insert(ROOT.into());
    host.take();
    let e = svc
        .new_smb_global_mapping(&req("\\\\srv\\share\\b", "v2", "u", PASSWORD))
        .unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
    assert!(e.message().contains("1 other links"), "{e}");
    assert_eq!(host.take(), [create(ROOT, "u"), create(ROOT, "u")]);
    assert_eq!(host.mapped(), [ROOT]);
    // The volume's own earlier link does not count: its re-stage rebinds.
    host.sticky.lock().unwrap().clear();
    svc.new_smb_global_mapping(&req(ROOT, "v1", "u", PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [
            create(ROOT, "u"),
            Call::Remove(ROOT.into()),
            create(ROOT, "u"),
            Call::Link(ROOT.into(), format!("{KUBELET}/v1"))
        ]
    );
}

/// A link scan that may have missed links (a directory it could not read, its entry limit) proves
/// nothing unused. Before, what it found was taken as complete: the last link found gone, the
/// mapping was removed under the links it had not seen. Now RemoveSmbGlobalMapping keeps it (and
/// answers OK, as for a mapping others use), a new credential reuses the healthy mapping instead of
/// replacing it, and error 1219 removes no mapping of the server.
#[test]
fn an_incomplete_link_scan_keeps_every_mapping() {
    const SCAN: &str = "\\\\scan\\vols";
    let host = Arc::new(Fake::default());
    let svc = service(host.clone());
    svc.new_smb_global_mapping(&req(SCAN, "v1", "u", PASSWORD))
        .unwrap();
    host.take();
    *host.incomplete_scan.lock().unwrap() = Some("the entry limit was reached".into());

    // Another volume's stage with a rotated password: the healthy mapping is reused.
    svc.new_smb_global_mapping(&req(SCAN, "v2", "u", NEW_PASSWORD))
        .unwrap();
    assert_eq!(
        host.take(),
        [Call::Link(SCAN.into(), format!("{KUBELET}/v2"))],
        "nothing removed or made again"
    );

    // The only links gone as far as the scan can tell: kept.
    host.links.lock().unwrap().clear();
    svc.remove_smb_global_mapping(SCAN).unwrap();
    assert_eq!(host.take(), [], "an incomplete scan removes nothing");
    assert_eq!(host.mapped(), [SCAN]);

    // Error 1219 for another share of the server: the unproven mapping is kept, and the
    // refusal says why.
    let e = svc
        .new_smb_global_mapping(&req("\\\\scan\\logs", "", "other", PASSWORD))
        .unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
    assert!(e.message().contains("link scan was incomplete"), "{e}");
    assert_eq!(host.mapped(), [SCAN]);

    // A complete scan again: the mapping goes with its last link.
    *host.incomplete_scan.lock().unwrap() = None;
    host.take();
    svc.remove_smb_global_mapping(SCAN).unwrap();
    assert_eq!(host.take(), [Call::Remove(SCAN.into())]);
}
