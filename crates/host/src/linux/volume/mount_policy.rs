//! Which kernel filesystem driver MountVolume lets parse a volume, and with which options.
//!
//! The volume's content is the tenant's: left to pick the driver (whatever the probe names, or
//! the kernel's own guess), a crafted image makes the host kernel parse it as root with a driver
//! nobody chose (ntfs3, jfs, f2fs, iso9660, ...). So the type is always named, and only the
//! filesystems this host makes and grows (ext4, xfs, btrfs) are mounted, plus those the
//! operator allows with `--mount-filesystem`. Every mount is `nosuid,nodev` (a pod's volume
//! never carries set-uid programs or device nodes the host honours), and ext4 is mounted with
//! `errors=remount-ro`, which overrides the superblock's error behaviour: a tenant's ext4 set to
//! `errors=panic` must not panic the node on its first error.

use super::*;

/// The kernel filesystem types mounted without the operator's leave: what FormatVolume makes
/// (ext4, xfs) and ResizeVolume grows (btrfs too). The ext4 driver also mounts ext2 and ext3.
pub(super) const BUILT_IN: [&str; 3] = ["ext4", "xfs", "btrfs"];

/// How a volume is mounted: the kernel type to name and the options to give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MountPlan {
    /// The filesystem type given to mount(2); never left to the kernel.
    pub(super) fs_type: &'static str,
    /// Flags and filesystem options.
    pub(super) flags: MountFlags,
}

/// The filesystem's own options (mount(2)'s `data`) for `fs_type`; `clone` for a clone of a
/// mounted filesystem (see [`super::clones`]).
fn options_for(fs_type: &str, clone: bool) -> &'static str {
    match fs_type {
        // Overrides the superblock's `s_errors` (ext4(5): "errors=... Define the behavior
        // when an error is encountered"; the mount option wins over the tune2fs default).
        "ext4" => "errors=remount-ro",
        // xfs(5): "nouuid: Don't check for double mounted file systems using the file
        // system uuid."
        "xfs" if clone => "nouuid",
        _ => "",
    }
}

/// How `sig` may be mounted on this host, whose operator allowed `extra` types beyond
/// [`BUILT_IN`]; FAILED_PRECONDITION naming the type and the flag otherwise. `noexec` adds
/// `MS_NOEXEC` (the private mounts tools work in); `clone` says the volume is a clone of a
/// mounted filesystem ([`super::clones`]).
pub(super) fn plan(
    op: &str,
    object: &str,
    sig: Option<&Signature>,
    extra: &[String],
    noexec: bool,
    clone: bool,
) -> Result<MountPlan> {
    let refuse = |why: String| Error::new(Kind::FailedPrecondition, op, object, why);
    let Some(sig) = sig else {
        return Err(refuse(
            "the volume holds nothing, which is not a filesystem this host mounts".into(),
        ));
    };
    let Some(fs_type) = sig.mount_type else {
        return Err(refuse(format!(
            "the volume holds {}, which is not a filesystem this host mounts",
            sig.kind
        )));
    };
    if !BUILT_IN.contains(&fs_type) && !extra.iter().any(|e| e == fs_type) {
        let named = if sig.kind == fs_type {
            fs_type.to_string()
        } else {
            format!("{} (kernel filesystem type {fs_type})", sig.kind)
        };
        return Err(refuse(format!(
            "the volume holds {named}; this host mounts only {} (the filesystems it makes and \
             grows) and the types the operator allows with --mount-filesystem, so the kernel's \
             {fs_type} driver never parses a tenant's volume unless allowed \
             (--mount-filesystem={fs_type})",
            BUILT_IN.join(", ")
        )));
    }
    Ok(MountPlan {
        fs_type,
        flags: MountFlags {
            noexec,
            data: options_for(fs_type, clone),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(kind: &'static str, mount_type: Option<&'static str>) -> Signature {
        Signature {
            kind,
            mount_type,
            uuid: None,
        }
    }

    #[test]
    fn only_built_in_and_allowed_types_are_mounted_with_their_options() {
        let p = plan(
            "Op",
            "v",
            Some(&sig("ext3", Some("ext4"))),
            &[],
            false,
            false,
        )
        .unwrap();
        assert_eq!(p.fs_type, "ext4");
        assert_eq!(p.flags.data, "errors=remount-ro");
        let p = plan("Op", "v", Some(&sig("xfs", Some("xfs"))), &[], true, false).unwrap();
        assert_eq!((p.fs_type, p.flags.data, p.flags.noexec), ("xfs", "", true));

        for (kind, ty) in [
            ("vfat", "vfat"),
            ("iso9660", "iso9660"),
            ("f2fs", "f2fs"),
            ("ntfs", "ntfs3"),
        ] {
            let e = plan("Op", "v", Some(&sig(kind, Some(ty))), &[], false, false).unwrap_err();
            assert_eq!(e.kind(), Kind::FailedPrecondition);
            assert!(
                e.message().contains(kind)
                    && e.message().contains(&format!("--mount-filesystem={ty}")),
                "{}",
                e.message()
            );
            let allowed = vec![ty.to_string()];
            assert_eq!(
                plan(
                    "Op",
                    "v",
                    Some(&sig(kind, Some(ty))),
                    &allowed,
                    false,
                    false
                )
                .unwrap()
                .fs_type,
                ty
            );
        }
        let e = plan("Op", "v", Some(&sig("swap", None)), &[], false, false).unwrap_err();
        assert!(e.message().contains("swap"), "{}", e.message());
        assert!(plan("Op", "v", None, &[], false, false).is_err());
    }
}
