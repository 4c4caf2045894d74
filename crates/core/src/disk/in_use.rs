//! The one in-use rule (docs/security.md): a disk the host or anyone else uses is never a client's
//! to write, mount, grow, offline or log out. Each platform reports the facts it reads under
//! [`DiskUsage`]; [`refuse_in_use`] alone decides, in front of PartitionDisk, FormatVolume,
//! MountVolume, ResizeVolume, SetDiskState and DisconnectTarget.
//!
//! Looking for volumes someone else has open ([`OpenElsewhere`]) takes an exclusive lock of
//! each volume for a moment, so only the RPCs that rewrite or remove what is on the disk look:
//! PartitionDisk, FormatVolume and SetDiskState(offline). MountVolume and ResizeVolume do not:
//! a mount point added and a volume grown online leave its users' data as it is, and a staged
//! volume in use by its pods must still grow.

use crate::error::{Error, Kind, Result};
use crate::paths::{PathPolicy, PathStyle, is_drive_root};
use crate::profiles::owners::Object;

/// Who uses a disk, as far as data safety is concerned. Every use of the disk, of its
/// partitions and of whatever is built on them counts. A host that cannot read a fact answers
/// an error instead (fail closed), never an empty field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Where filesystems on the disk, its partitions or devices stacked on them are mounted,
    /// including a filesystem spanning several devices that one of them belongs to.
    pub mount_points: Vec<String>,
    /// Why the host counts the disk as its own, if it does: its root, boot or system volume,
    /// active swap, a page file.
    pub system_use: Option<String>,
    /// Devices stacked on the disk or a partition (Linux `holders/`: LVM, md RAID, dm-crypt).
    pub stacked: Vec<String>,
    /// The other devices of a multi-device filesystem (btrfs) a partition of the disk belongs
    /// to: the filesystem is theirs too, wherever it is mounted.
    pub other_members: Vec<String>,
    /// Loop devices backed by the disk or a partition (how kubelet maps a raw block volume).
    pub loops: Vec<String>,
    /// Processes (`pid (comm)`) holding the disk or a partition open, the daemon excepted.
    pub processes: Vec<String>,
    /// Devices of the disk claimed exclusively by something no mount in the host's mount table
    /// explains (a mount in another namespace, a filesystem of several devices, a process's
    /// exclusive open).
    pub claimed: Vec<String>,
    /// Volumes of the disk that something else has open, found by an exclusive lock of each
    /// that failed (Windows: `FSCTL_LOCK_VOLUME`); filled only for the RPCs that look.
    pub open_elsewhere: Vec<OpenElsewhere>,
    /// The other disks that reach the same storage ([`super::storage_group`]: another path to
    /// the LUN, a loop device over the same image, a device built on the disk or that it is
    /// built on), each with its own facts. Every use of any of them is a use of this disk.
    pub other_paths: Vec<OtherPath>,
    /// What the disk says about the storage it reaches ([`super::storage`]): under profiles,
    /// the storage is the first profile's that partitions, formats, mounts, grows or takes it
    /// offline or online ([`crate::profiles`]). Empty when it says nothing.
    pub storage: Vec<super::storage::StorageId>,
}

/// Another disk reaching the same storage, and who uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherPath {
    /// Its disk number.
    pub disk: u32,
    /// The OS's name for it (`sdc`, `loop4`).
    pub name: String,
    /// Its facts, read as the disk's own are (its own `other_paths` empty).
    pub usage: DiskUsage,
}

/// A volume of the disk that something else has open: an exclusive lock of it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenElsewhere {
    /// The volume.
    pub volume: String,
    /// Where it is mounted: the users of a volume mounted only below an allowed root are the
    /// driver's own (the pods of a staged volume).
    pub mount_points: Vec<String>,
    /// Why the lock failed, as the OS said.
    pub why: String,
}

/// Which uses of a disk are the caller's own flow, and so no reason to refuse.
#[derive(Debug, Clone, Copy)]
pub enum OwnUse<'a> {
    /// A driver's own mounts: strictly below an allowed root (its stage and publish paths, so
    /// MountVolume again, re-staging after a restart and growing a staged volume online go
    /// ahead) and, on Windows, a bare drive letter (what Windows gives any volume it finds).
    MountsBelow(&'a PathPolicy),
    /// None: the disk is about to go away (DisconnectTarget), so every mount counts but a
    /// bare Windows drive letter (automount's; the logout dismounts it, and a user of it holds
    /// files open there, which [`DiskUsage::open_elsewhere`] reports).
    Nothing,
}

/// Refuses `op` on `object` when its storage is in use by the host or by someone else, as
/// FAILED_PRECONDITION naming the user; uses that `own` allows go ahead. The storage is the
/// disk and every other path to it ([`DiskUsage::other_paths`]): any use of another path
/// refuses, the driver's own mounts too (one filesystem mounted through two devices
/// corrupts itself), naming that path.
pub fn refuse_in_use(op: &str, object: &str, usage: &DiskUsage, own: OwnUse<'_>) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::new(
            Kind::FailedPrecondition,
            op,
            object,
            format!("refused: the disk {why}"),
        ))
    };
    // Under a profile, a filesystem of the disk mounted below the roots in another profile's
    // places makes the disk that profile's: refused as such, before anything else is weighed.
    // So does a storage another profile used first, mounted or not (formatted and not yet
    // staged, or unstaged and not yet detached: its data is that profile's).
    let unscoped;
    let mut storage = None;
    let own = match own {
        OwnUse::MountsBelow(policy) if policy.scope().is_restricted() => {
            unscoped = policy.with_scope(crate::profiles::Scope::all());
            refuse_foreign(op, object, usage, policy, &unscoped)?;
            storage = super::StorageId::strongest(&usage.storage)
                .map(|id| (policy.scope(), Object::Storage(id.key())));
            if let Some((scope, held)) = &storage {
                scope.refuse_held(op, object, held)?;
            }
            OwnUse::MountsBelow(&unscoped)
        }
        own => own,
    };
    if let Some(why) = why_in_use(op, usage, Some(own)) {
        return refuse(why);
    }
    for other in &usage.other_paths {
        if let Some(why) = why_in_use(op, &other.usage, None) {
            return refuse(format!(
                "is reached also through another path, as disk {} ({}), which {why}",
                other.disk, other.name,
            ));
        }
    }
    // Allowed: the storage is the profile's from now on (taken in one step of the book: a
    // call through another path to it that took it meanwhile wins, and this one is refused).
    if let Some((scope, held)) = &storage {
        scope.take(op, object, held)?;
    }
    Ok(())
}

/// PERMISSION_DENIED when a filesystem of the storage (the disk or another path to it) is
/// mounted below the roots but not in `scoped`'s profile's places, naming whose they are.
fn refuse_foreign(
    op: &str,
    object: &str,
    usage: &DiskUsage,
    scoped: &PathPolicy,
    unscoped: &PathPolicy,
) -> Result<()> {
    let mounts = usage
        .mount_points
        .iter()
        .chain(usage.other_paths.iter().flat_map(|o| &o.usage.mount_points));
    for mp in mounts {
        let Ok(normalised) = unscoped.check(op, mp) else {
            continue;
        };
        if unscoped.is_root(&normalised) {
            continue;
        }
        if let Some(owner) = scoped.scope().foreign_owner(&normalised) {
            return Err(Error::new(
                Kind::PermissionDenied,
                op,
                object,
                format!(
                    "refused for profile {:?}: the disk holds a filesystem mounted at {mp:?}, \
                     which {owner}",
                    scoped.scope().profile().unwrap_or_default()
                ),
            ));
        }
    }
    Ok(())
}

/// Fills in which volumes something else has open ([`DiskUsage::open_elsewhere`], asked of
/// `opens` by disk number), for the disk and for every other path to its storage: a volume
/// held open through one path is the storage's as much as the other's.
pub fn ask_open_elsewhere(
    usage: &mut DiskUsage,
    disk: u32,
    opens: impl Fn(u32) -> Result<Vec<OpenElsewhere>>,
) -> Result<()> {
    usage.open_elsewhere = opens(disk)?;
    for other in &mut usage.other_paths {
        other.usage.open_elsewhere = opens(other.disk)?;
    }
    Ok(())
}

/// Why the facts of one device make it in use, if they do. `own` is `None` for another path
/// to the storage: then every use counts, mounts below the roots and drive letters too.
fn why_in_use(op: &str, usage: &DiskUsage, own: Option<OwnUse<'_>>) -> Option<String> {
    let refuse = Some;
    if let Some(why) = &usage.system_use {
        return refuse(why.clone());
    }
    if !usage.other_members.is_empty() {
        let mounted = match usage.mount_points.as_slice() {
            [] => String::new(),
            mps => format!(", mounted at {mps:?}"),
        };
        return refuse(format!(
            "holds a member of a filesystem spanning several devices, with {}{mounted}",
            usage.other_members.join(", ")
        ));
    }
    if !usage.stacked.is_empty() {
        return refuse(format!(
            "is in use by the stacked device(s) {} (LVM, RAID or dm-crypt)",
            usage.stacked.join(", ")
        ));
    }
    let below_a_root = |mp: &String| match own {
        Some(OwnUse::MountsBelow(roots)) => roots.check(op, mp).is_ok_and(|n| !roots.is_root(&n)),
        Some(OwnUse::Nothing) | None => false,
    };
    let foreign = |mp: &&String| match own {
        Some(OwnUse::MountsBelow(roots)) => {
            // A bare drive letter is what Windows gives any volume it finds (a disk partitioned
            // by upstream, a restored snapshot): upstream proceeds there, and so does this. The
            // host puts the disks whose letters matter (system, boot, page file) in
            // `system_use`.
            let automount = roots.style() == PathStyle::Windows && is_drive_root(mp);
            !below_a_root(mp) && !automount
        }
        Some(OwnUse::Nothing) => !is_drive_root(mp),
        None => true,
    };
    if let Some(mp) = usage.mount_points.iter().find(foreign) {
        return refuse(match own {
            Some(OwnUse::MountsBelow(_)) => format!(
                "holds a filesystem mounted at {mp:?}, outside the kubelet path and working dirs"
            ),
            Some(OwnUse::Nothing) | None => format!("holds a filesystem mounted at {mp:?}"),
        });
    }
    if !usage.loops.is_empty() {
        return refuse(format!(
            "backs loop device(s) {} (a raw block volume, or a mapping of it)",
            usage.loops.join(", ")
        ));
    }
    if !usage.processes.is_empty() {
        return refuse(format!(
            "is held open by process(es) {}",
            usage.processes.join(", ")
        ));
    }
    // A volume mounted only below the roots is used by the driver's own pods; one with a drive
    // letter, mounted elsewhere or mounted nowhere is used by someone else.
    let own_volume =
        |o: &&OpenElsewhere| !o.mount_points.is_empty() && o.mount_points.iter().all(below_a_root);
    if let Some(o) = usage.open_elsewhere.iter().find(|o| !own_volume(o)) {
        let mounted = match o.mount_points.as_slice() {
            [] => "mounted nowhere".to_string(),
            mps => format!("mounted at {mps:?}"),
        };
        return refuse(format!(
            "has volume {} ({mounted}) open in another process: an exclusive lock of it failed ({})",
            o.volume, o.why
        ));
    }
    if !usage.claimed.is_empty() {
        return refuse(format!(
            "is claimed exclusively ({}) by something no mount here explains (a mount in another namespace, a stacked device or a process)",
            usage.claimed.join(", ")
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(usage: &DiskUsage, own: OwnUse<'_>) -> Option<String> {
        refuse_in_use("FormatVolume", "disk 4", usage, own)
            .err()
            .map(|e| {
                assert_eq!(e.kind(), Kind::FailedPrecondition);
                e.message().to_string()
            })
    }

    /// Each fact refuses and is named; the driver's own mounts are allowed except when the
    /// disk is about to go away.
    #[test]
    fn every_user_is_named_and_only_the_callers_own_mounts_pass() {
        let fs = crate::testing::kubelet_fs();
        let roots = OwnUse::MountsBelow(fs.policy());
        let own = DiskUsage {
            mount_points: vec!["/var/lib/kubelet/plugins/d/globalmount".into()],
            ..Default::default()
        };
        assert_eq!(refused(&own, roots), None);
        let why = refused(&own, OwnUse::Nothing).unwrap();
        assert!(why.contains("mounted at \"/var/lib/kubelet/plugins/d/globalmount\""));
        let cases: [(DiskUsage, &str); 6] = [
            (
                DiskUsage {
                    other_members: vec!["loop9p1".into()],
                    mount_points: vec!["/srv".into()],
                    ..Default::default()
                },
                "with loop9p1, mounted at [\"/srv\"]",
            ),
            (
                DiskUsage {
                    stacked: vec!["md127".into()],
                    ..Default::default()
                },
                "stacked device(s) md127",
            ),
            (
                DiskUsage {
                    loops: vec!["loop7 (on /dev/loop3)".into()],
                    ..own.clone()
                },
                "loop device(s) loop7 (on /dev/loop3)",
            ),
            (
                DiskUsage {
                    processes: vec!["42 (sleep)".into()],
                    ..own.clone()
                },
                "process(es) 42 (sleep)",
            ),
            (
                DiskUsage {
                    claimed: vec!["loop3p2".into()],
                    ..own.clone()
                },
                "claimed exclusively (loop3p2)",
            ),
            (
                DiskUsage {
                    mount_points: vec!["/srv/data".into(), "/var/lib/kubelet/pods/x".into()],
                    ..Default::default()
                },
                "mounted at \"/srv/data\", outside",
            ),
        ];
        for (usage, named) in cases {
            for own in [roots, OwnUse::Nothing] {
                let why = refused(&usage, own).unwrap_or_else(|| panic!("{usage:?}"));
                assert!(
                    why.contains(named) || matches!(own, OwnUse::Nothing),
                    "{why}"
                );
                assert!(why.starts_with("FormatVolume disk 4: refused"), "{why}");
            }
        }
    }

    /// A volume something else has open is refused unless it is mounted only below the roots
    /// (the pods of a staged volume), and always when the disk is about to go away.
    #[test]
    fn a_volume_open_elsewhere_is_refused_unless_only_the_drivers_own_mounts_show_it() {
        let fs = crate::testing::kubelet_fs();
        let roots = OwnUse::MountsBelow(fs.policy());
        let open = |mps: &[&str]| DiskUsage {
            mount_points: mps.iter().map(|m| m.to_string()).collect(),
            open_elsewhere: vec![OpenElsewhere {
                volume: "vol1".into(),
                mount_points: mps.iter().map(|m| m.to_string()).collect(),
                why: "Access is denied.".into(),
            }],
            ..Default::default()
        };
        let staged = open(&["/var/lib/kubelet/plugins/d/globalmount"]);
        assert_eq!(refused(&staged, roots), None);
        assert!(refused(&staged, OwnUse::Nothing).is_some());
        // A disk about to go away: a bare drive letter is automount's, its users are its opens.
        let lettered = DiskUsage {
            mount_points: vec![r"E:\".into()],
            ..Default::default()
        };
        assert_eq!(refused(&lettered, OwnUse::Nothing), None);
        let why = refused(&open(&[r"E:\"]), OwnUse::Nothing).unwrap();
        assert!(why.contains("open in another process"), "{why}");
        let why = refused(&open(&[]), roots).unwrap();
        assert!(
            why.contains("volume vol1 (mounted nowhere) open in another process")
                && why.contains("Access is denied."),
            "{why}"
        );
    }

    /// Every use of another path to the storage refuses, for every caller, naming that path:
    /// the driver's own mounts and a drive letter too (one filesystem mounted through two
    /// devices corrupts itself). An idle other path changes nothing.
    #[test]
    fn any_use_of_another_path_to_the_storage_refuses_naming_it() {
        let fs = crate::testing::kubelet_fs();
        let roots = OwnUse::MountsBelow(fs.policy());
        let via = |usage: DiskUsage| DiskUsage {
            other_paths: vec![
                OtherPath {
                    disk: 8,
                    name: "loop4".into(),
                    usage: DiskUsage::default(),
                },
                OtherPath {
                    disk: 9,
                    name: "loop5".into(),
                    usage,
                },
            ],
            ..Default::default()
        };
        assert_eq!(refused(&via(DiskUsage::default()), roots), None);
        assert_eq!(refused(&via(DiskUsage::default()), OwnUse::Nothing), None);
        let mounted = |mp: &str| DiskUsage {
            mount_points: vec![mp.into()],
            ..Default::default()
        };
        let cases: [(DiskUsage, &str); 9] = [
            (
                mounted("/var/lib/kubelet/plugins/d/globalmount"),
                "mounted at \"/var/lib/kubelet/plugins/d/globalmount\"",
            ),
            (mounted(r"E:\"), r#"mounted at "E:\\""#),
            (
                DiskUsage {
                    system_use: Some("holds the host's / filesystem".into()),
                    ..Default::default()
                },
                "the host's / filesystem",
            ),
            (
                DiskUsage {
                    other_members: vec!["sdq1".into()],
                    ..Default::default()
                },
                "sdq1",
            ),
            (
                DiskUsage {
                    stacked: vec!["dm-3".into()],
                    ..Default::default()
                },
                "dm-3",
            ),
            (
                DiskUsage {
                    loops: vec!["loop9 (over loop5)".into()],
                    ..Default::default()
                },
                "loop9 (over loop5)",
            ),
            (
                DiskUsage {
                    processes: vec!["42 (sleep)".into()],
                    ..Default::default()
                },
                "42 (sleep)",
            ),
            (
                DiskUsage {
                    claimed: vec!["loop5p1".into()],
                    ..Default::default()
                },
                "loop5p1",
            ),
            (
                DiskUsage {
                    open_elsewhere: vec![OpenElsewhere {
                        volume: "vol9".into(),
                        mount_points: vec!["/var/lib/kubelet/plugins/d/globalmount".into()],
                        why: "Access is denied.".into(),
                    }],
                    ..Default::default()
                },
                "vol9",
            ),
        ];
        for (usage, named) in cases {
            for own in [roots, OwnUse::Nothing] {
                let why = refused(&via(usage.clone()), own).unwrap_or_else(|| panic!("{usage:?}"));
                assert!(
                    why.contains("reached also through another path, as disk 9 (loop5), which")
                        && why.contains(named),
                    "{why}"
                );
            }
        }
    }
}
