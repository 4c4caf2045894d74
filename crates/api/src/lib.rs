//! Generated gRPC messages, servers and clients for every csi-proxy API group-version.
//!
//! Each group-version lives in `<group>::<version>` (for example [`disk::v1`]), generated from
//! `proto/<group>/<version>.proto`. The proto package is the bare version string, exactly as
//! upstream has it, so the wire path of an RPC is `/<version>.<Service>/<Rpc>`.

macro_rules! group {
    ($(#[$doc:meta])* $group:ident { $($version:ident),+ $(,)? }) => {
        $(#[$doc])*
        pub mod $group {
            $(
                #[doc = concat!("`", stringify!($group), "` API, version `", stringify!($version), "`.")]
                #[allow(clippy::all, missing_docs)]
                pub mod $version {
                    include!(concat!(env!("OUT_DIR"), "/", stringify!($group), "/", stringify!($version), "/", stringify!($version), ".rs"));
                }
            )+

            /// The versions of this group, oldest first, as they appear in endpoint names.
            pub const VERSIONS: &[&str] = &[$(stringify!($version)),+];

            /// Compiled descriptor sets of this group's versions, for contract checks.
            pub const DESCRIPTORS: &[(&str, &[u8])] = &[$(
                (stringify!($version), include_bytes!(concat!(env!("OUT_DIR"), "/", stringify!($group), "/", stringify!($version), "/descriptor.bin"))),
            )+];
        }
    };
}

group!(
    /// Disk group: disks, their locations and IDs, partitioning and online state.
    disk { v1alpha1, v1beta1, v1beta2, v1beta3, v1 }
);
group!(
    /// Volume group: volumes on disks, format, mount, resize, stats.
    volume { v1alpha1, v1beta1, v1beta2, v1beta3, v1, v2alpha1 }
);
group!(
    /// Filesystem group: directories and links under the kubelet path and working dirs.
    filesystem { v1alpha1, v1beta1, v1beta2, v1, v2alpha1 }
);
group!(
    /// SMB group: global SMB mappings.
    smb { v1alpha1, v1beta1, v1beta2, v1 }
);
group!(
    /// iSCSI group: portals, discovery and sessions.
    iscsi { v1alpha1, v1alpha2 }
);
group!(
    /// System group: BIOS serial number and host services.
    system { v1alpha1 }
);

/// Every API group, in upstream's endpoint creation order.
pub const GROUPS: &[&str] = &["filesystem", "disk", "volume", "smb", "system", "iscsi"];

/// Versions of a group by name, or `None` for an unknown group.
pub fn versions(group: &str) -> Option<&'static [&'static str]> {
    Some(match group {
        "disk" => disk::VERSIONS,
        "volume" => volume::VERSIONS,
        "filesystem" => filesystem::VERSIONS,
        "smb" => smb::VERSIONS,
        "iscsi" => iscsi::VERSIONS,
        "system" => system::VERSIONS,
        _ => return None,
    })
}

/// Compiled descriptor sets of a group by name.
pub fn descriptors(group: &str) -> Option<&'static [(&'static str, &'static [u8])]> {
    Some(match group {
        "disk" => disk::DESCRIPTORS,
        "volume" => volume::DESCRIPTORS,
        "filesystem" => filesystem::DESCRIPTORS,
        "smb" => smb::DESCRIPTORS,
        "iscsi" => iscsi::DESCRIPTORS,
        "system" => system::DESCRIPTORS,
        _ => return None,
    })
}
