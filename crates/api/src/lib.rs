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

/// The gRPC service name an endpoint serves: `<version>.<Group>`, e.g. `v1.Disk` (upstream's
/// proto package is the bare version and the service is the capitalised group name).
pub fn service_name(group: &str, version: &str) -> String {
    let mut chars = group.chars();
    let capitalised: String = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    format!("{version}.{capitalised}")
}

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

/// Implements `Debug` for messages that carry secrets, printing `<redacted>` for them.
macro_rules! redacted_debug {
    ($($ty:path { $($field:ident),* ; $($secret:ident),* })+) => {
        $(
            impl std::fmt::Debug for $ty {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    let mut d = f.debug_struct(stringify!($ty));
                    $(d.field(stringify!($field), &self.$field);)*
                    $(d.field(stringify!($secret), &if self.$secret.is_empty() { "" } else { "<redacted>" });)*
                    d.finish()
                }
            }
        )+
    };
}

redacted_debug! {
    smb::v1alpha1::NewSmbGlobalMappingRequest { remote_path, local_path, username; password }
    smb::v1beta1::NewSmbGlobalMappingRequest { remote_path, local_path, username; password }
    smb::v1beta2::NewSmbGlobalMappingRequest { remote_path, local_path, username; password }
    smb::v1::NewSmbGlobalMappingRequest { remote_path, local_path, username; password }
    iscsi::v1alpha1::ConnectTargetRequest { target_portal, iqn, auth_type, chap_username; chap_secret }
    iscsi::v1alpha2::ConnectTargetRequest { target_portal, iqn, auth_type, chap_username; chap_secret }
    iscsi::v1alpha2::SetMutualChapSecretRequest { ; mutual_chap_secret }
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_never_show_in_debug() {
        let r = crate::smb::v1::NewSmbGlobalMappingRequest {
            remote_path: r"\\srv\share".into(),
            local_path: String::new(),
            username: r"DOMAIN\user".into(),
            password: "hunter2-secret".into(),
        };
        let s = format!("{r:?}");
        assert!(
            !s.contains("hunter2-secret") && s.contains("<redacted>") && s.contains("DOMAIN"),
            "{s}"
        );
        let c = crate::iscsi::v1alpha2::ConnectTargetRequest {
            chap_secret: "chap-secret-x".into(),
            ..Default::default()
        };
        assert!(!format!("{c:?}").contains("chap-secret-x"));
        let m = crate::iscsi::v1alpha2::SetMutualChapSecretRequest {
            mutual_chap_secret: "mutual-y".into(),
        };
        assert!(!format!("{m:?}").contains("mutual-y"));
    }
}
