use super::owners::{MemoryStore, Object, Owners};
use super::*;
use crate::paths::PathPolicy;
use std::collections::HashMap;
use std::sync::Mutex;

/// Records by directory, as kubelet would have written them.
#[derive(Default)]
struct Records(Mutex<HashMap<String, String>>);

impl VolDataReader for Records {
    fn driver_of(&self, _: &str, dir: &str, file: &[&str]) -> Result<Option<String>> {
        let key = format!("{dir}/{}", file.join("/"));
        Ok(self.0.lock().unwrap().get(&key).cloned())
    }
}

const K: &str = "/var/lib/kubelet";

fn world(store: MemoryStore) -> (Arc<Profiles>, Arc<Records>) {
    let policy = PathPolicy::new(PathStyle::Posix, K, &["/srv/extra".into()]).unwrap();
    let list = vec![
        Profile {
            driver: "a.csi".into(),
            groups: vec![Group::Filesystem, Group::Volume],
            paths: vec!["/srv/extra/a".into()],
        },
        Profile {
            driver: "b.csi".into(),
            groups: vec![Group::Filesystem, Group::Smb],
            paths: vec![],
        },
    ];
    let owners = Arc::new(Owners::load(Box::new(store)).unwrap());
    (
        Profiles::new(PathStyle::Posix, K, &policy, list, owners).unwrap(),
        Arc::new(Records::default()),
    )
}

fn record(r: &Records, dir: &str, driver: &str) {
    r.0.lock()
        .unwrap()
        .insert(format!("{K}/{dir}/vol_data.json"), driver.into());
}

#[test]
fn a_profile_reaches_its_plugin_directories_and_extra_paths_only() {
    let (all, rec) = world(MemoryStore::default());
    let a = all.scope("a.csi", rec.clone()).unwrap();
    for ok in [
        "/var/lib/kubelet/plugins/a.csi/csi.sock",
        "/var/lib/kubelet/plugins/kubernetes.io/csi/a.csi/abc/globalmount",
        "/srv/extra/a/x",
    ] {
        a.admit_path("Mkdir", ok).unwrap();
    }
    for (denied, owner) in [
        (
            "/var/lib/kubelet/plugins/kubernetes.io/csi/b.csi/abc/globalmount",
            "profile \"b.csi\"",
        ),
        ("/var/lib/kubelet/plugins/b.csi", "profile \"b.csi\""),
        ("/var/lib/kubelet/plugins/c.csi/x", "no profile serves it"),
        ("/var/lib/kubelet/pods", "outside the profile's paths"),
        (
            "/var/lib/kubelet/plugins_registry/x",
            "outside the profile's paths",
        ),
        ("/srv/extra/b", "outside the profile's paths"),
    ] {
        let e = a.admit_path("Rmdir", denied).unwrap_err();
        assert_eq!(e.kind(), Kind::PermissionDenied, "{denied}");
        assert!(
            e.message().contains("profile \"a.csi\"") && e.message().contains(owner),
            "{denied}: {e}"
        );
    }
}

#[test]
fn a_publish_target_is_claimed_by_the_driver_kubelet_recorded_and_only_by_it() {
    let store = MemoryStore::default();
    let (all, rec) = world(store.clone());
    let a = all.scope("a.csi", rec.clone()).unwrap();
    let b = all.scope("b.csi", rec.clone()).unwrap();
    let pv = "pods/uid1/volumes/kubernetes.io~csi/pv1";
    let target = format!("{K}/{pv}/mount");
    // No record yet: nobody may claim it.
    let e = a.admit_path("CreateSymlink", &target).unwrap_err();
    assert!(e.message().contains("no record"), "{e}");
    record(&rec, pv, "a.csi");
    // The record names a: b is refused, a claims it.
    let e = b.admit_path("CreateSymlink", &target).unwrap_err();
    assert!(e.message().contains("for driver \"a.csi\""), "{e}");
    a.admit_path("CreateSymlink", &target).unwrap();
    // The claim holds even when the record is rewritten afterwards (by a hostile plugin).
    record(&rec, pv, "b.csi");
    let e = b.admit_path("Rmdir", &target).unwrap_err();
    assert!(e.message().contains("belongs to profile \"a.csi\""), "{e}");
    a.admit_path("Rmdir", &target).unwrap();
    // The claim survives a restart: the next daemon reads the same book.
    let (all2, rec2) = world(store);
    let b2 = all2.scope("b.csi", rec2.clone()).unwrap();
    record(&rec2, pv, "b.csi");
    assert!(b2.admit_path("Rmdir", &target).is_err());
    assert_eq!(
        all2.owners().holders(&Object::Dir(format!("{K}/{pv}"))),
        vec!["a.csi".to_string()]
    );
}

#[test]
fn the_claimable_layouts_are_older_staging_and_block_volumes_too() {
    let (all, rec) = world(MemoryStore::default());
    let a = all.scope("a.csi", rec.clone()).unwrap();
    record(&rec, "plugins/kubernetes.io/csi/pv/pv2", "a.csi");
    a.admit_path(
        "Mkdir",
        &format!("{K}/plugins/kubernetes.io/csi/pv/pv2/globalmount"),
    )
    .unwrap();
    rec.0.lock().unwrap().insert(
        format!("{K}/plugins/kubernetes.io/csi/volumeDevices/pv3/data/vol_data.json"),
        "a.csi".into(),
    );
    for p in ["staging/pv3", "publish/pv3/poduid", "pv3/dev"] {
        a.admit_path(
            "Mkdir",
            &format!("{K}/plugins/kubernetes.io/csi/volumeDevices/{p}"),
        )
        .unwrap();
    }
    // The directories above them are everyone's.
    for p in [
        "plugins/kubernetes.io/csi/pv",
        "plugins/kubernetes.io/csi/volumeDevices/staging",
        "pods/uid1/volumes",
    ] {
        assert!(a.admit_path("Rmdir", &format!("{K}/{p}")).is_err(), "{p}");
    }
}

#[test]
fn groups_and_node_wide_objects_are_judged_per_profile() {
    let (all, rec) = world(MemoryStore::default());
    let a = all.scope("a.csi", rec.clone()).unwrap();
    let b = all.scope("b.csi", rec).unwrap();
    a.check_group("MountVolume", Group::Volume).unwrap();
    let e = a
        .check_group("GetBIOSSerialNumber", Group::System)
        .unwrap_err();
    assert!(e.message().contains("[filesystem, volume]"), "{e}");
    assert!(Scope::all().check_group("x", Group::System).is_ok());

    let share = Object::SmbMapping(r"\\srv\share".into());
    b.may_use("NewSmbGlobalMapping", &share, true, false)
        .unwrap();
    b.hold(&share).unwrap();
    // a may join, not replace; a's removal of what it does not hold is refused.
    a.may_use("NewSmbGlobalMapping", &share, true, false)
        .unwrap();
    let e = a
        .may_use("NewSmbGlobalMapping", &share, true, true)
        .unwrap_err();
    assert!(e.message().contains("held by profile(s) \"b.csi\""), "{e}");
    let e = a.release("RemoveSmbGlobalMapping", &share).unwrap_err();
    assert_eq!(e.kind(), Kind::PermissionDenied);
    a.hold(&share).unwrap();
    assert_eq!(
        a.release("RemoveSmbGlobalMapping", &share).unwrap(),
        Release::KeptFor(vec!["b.csi".into()])
    );
    assert_eq!(
        b.release("RemoveSmbGlobalMapping", &share).unwrap(),
        Release::Last
    );
    let session = Object::Session("10.0.0.1:3260 iqn.x".into());
    b.hold(&session).unwrap();
    assert!(a.may_use("ConnectTarget", &session, false, false).is_err());
    assert!(!a.sees(&session) && b.sees(&session));
}

#[test]
fn a_mount_point_names_its_owner_and_nothing_is_claimed_by_asking() {
    let (all, rec) = world(MemoryStore::default());
    let a = all.scope("a.csi", rec.clone()).unwrap();
    let b = all.scope("b.csi", rec.clone()).unwrap();
    let staged = format!("{K}/plugins/kubernetes.io/csi/b.csi/h/globalmount");
    assert_eq!(
        a.foreign_owner(&staged).unwrap(),
        "belongs to profile \"b.csi\""
    );
    assert_eq!(b.foreign_owner(&staged), None);
    record(&rec, "pods/u/volumes/kubernetes.io~csi/pv9", "a.csi");
    let target = format!("{K}/pods/u/volumes/kubernetes.io~csi/pv9/mount");
    assert!(
        a.foreign_owner(&target)
            .unwrap()
            .contains("no profile has claimed")
    );
    assert!(all.owners().by_holder().is_empty());
    a.admit_path("Mkdir", &target).unwrap();
    assert_eq!(a.foreign_owner(&target), None);
    assert_eq!(
        b.foreign_owner(&target).unwrap(),
        "belongs to profile \"a.csi\""
    );
}

#[test]
fn profiles_are_checked_with_precise_errors() {
    let policy = PathPolicy::new(PathStyle::Posix, K, &[]).unwrap();
    let mk = |driver: &str, groups: Vec<Group>, paths: Vec<&str>| Profile {
        driver: driver.into(),
        groups,
        paths: paths.into_iter().map(String::from).collect(),
    };
    let owners = || Arc::new(Owners::in_memory());
    let err = |list| {
        Profiles::new(PathStyle::Posix, K, &policy, list, owners())
            .unwrap_err()
            .to_string()
    };
    assert!(err(vec![mk("-bad", vec![Group::Disk], vec![])]).contains("profile \"-bad\""));
    assert!(err(vec![mk("pv", vec![Group::Disk], vec![])]).contains("kubelet keeps"));
    assert!(err(vec![mk("a", vec![], vec![])]).contains("no groups"));
    assert!(
        err(vec![
            mk("a", vec![Group::Disk], vec![]),
            mk("a", vec![Group::Disk], vec![])
        ])
        .contains("twice")
    );
    assert!(err(vec![mk("a", vec![Group::Disk], vec!["/etc"])]).contains("not within"));
    assert!(
        err(vec![mk(
            "a",
            vec![Group::Disk],
            vec!["/var/lib/kubelet/pods"]
        )])
        .contains("every driver")
    );
}

#[test]
fn a_book_read_before_a_hand_off_takes_in_what_the_predecessor_wrote_since() {
    let store = MemoryStore::default();
    let old = Owners::load(Box::new(store.clone())).unwrap();
    let new = Owners::load(Box::new(store.clone())).unwrap();
    let dir = Object::Dir("/k/pods/u/volumes/kubernetes.io~csi/pv".into());
    let share = Object::SmbMapping(r"\\s\share".into());
    old.claim(&dir, "a").unwrap();
    new.add(&share, "b").unwrap();
    old.add(&share, "a").unwrap();
    new.merge_stored().unwrap();
    assert_eq!(new.holders(&dir), vec!["a".to_string()]);
    assert_eq!(new.holders(&share), vec!["a".to_string(), "b".to_string()]);
    let again = Owners::load(Box::new(store)).unwrap();
    assert_eq!(again.holders(&share), new.holders(&share));
}

#[test]
fn the_book_round_trips_any_key() {
    let store = MemoryStore::default();
    let owners = Owners::load(Box::new(store.clone())).unwrap();
    let odd = Object::Dir("/var/lib/kubelet/pods/a b%c\td\ne".into());
    owners.add(&odd, "x y").unwrap();
    owners
        .add(&Object::Portal("10.0.0.1:3260".into()), "x y")
        .unwrap();
    let again = Owners::load(Box::new(store.clone())).unwrap();
    assert_eq!(again.holders(&odd), vec!["x y".to_string()]);
    // A damaged line is skipped, the others kept.
    let mut bytes = store.0.lock().unwrap().clone().unwrap();
    bytes.extend_from_slice(b"dir only-two\nbogus a b\nportal p %zz\n");
    *store.0.lock().unwrap() = Some(bytes);
    let again = Owners::load(Box::new(store)).unwrap();
    assert_eq!(again.by_holder()["x y"].len(), 2);
}
