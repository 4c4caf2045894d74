//! Remote paths: what a request's `\\server\share\…` may be, its share root, and the remote a
//! link's target leads to in each form Windows stores.

use crate::error::{Error, Kind, Result};

/// Characters refused in a remote path's server name: MS-SRVS 2.2.2.8's default invalid set
/// plus `*` (NAMETYPE_COMPUTER). No DNS, NetBIOS or IPv4 name carries one.
pub const SERVER_NAME_FORBIDDEN: &str = "\"/[]:|<>+=;,?*";

/// Characters refused in a remote path's share name: those no Windows path component may
/// carry (MS-FSCC 2.1.5: `" \ / : | < > * ?`). MS-FSCC 2.1.6 also lists `[ ] + = ; ,` for
/// shares a Windows server makes, but Samba and NAS servers export names with them and the
/// SMB2 TREE_CONNECT path carries any other character; these six only cannot pass through
/// the UNC path a staging link leads into (wildcards, a stream separator).
pub const SHARE_NAME_FORBIDDEN: &str = "\"/:|<>?*";

/// A remote path after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePath {
    /// The full path with every `/` turned into `\`, original case (what a link points to).
    pub path: String,
    /// The lower-cased `\\server\share` root: what is mapped, node-wide.
    pub root: String,
}

impl RemotePath {
    /// Normalises `remote` for operation `op` and computes its share root.
    ///
    /// Upstream only maps `/` to `\` and requires two components; device-namespace roots
    /// (`\\?\…`, `\\.\…`) are refused too since they can never name a share.
    pub fn parse(op: &str, remote: &str) -> Result<Self> {
        if remote.is_empty() {
            return Err(Error::invalid(
                op,
                "remote path \"\"",
                "remote path is empty",
            ));
        }
        let path = remote.replace('/', "\\");
        let mut parts = path.split('\\').filter(|c| !c.is_empty());
        let (server, share) = match (parts.next(), parts.next()) {
            (Some(server), Some(share)) => (server, share),
            _ => {
                return Err(Error::with_message(
                    Kind::InvalidArgument,
                    format!("{op}: remote path {remote:?} is invalid: expected \\\\server\\share"),
                ));
            }
        };
        if [server, share]
            .iter()
            .any(|c| matches!(*c, "." | ".." | "?"))
        {
            return Err(Error::with_message(
                Kind::InvalidArgument,
                format!("{op}: remote path {remote:?} is invalid: not a server share"),
            ));
        }
        // Stricter than upstream: a `.`/`..` component would let a link escape the share (on
        // Linux the link leads into a local mount directory), and control characters are never
        // part of a server, share or directory name.
        if path.split('\\').any(|c| matches!(c, "." | "..")) {
            return Err(Error::with_message(
                Kind::InvalidArgument,
                format!(
                    "{op}: remote path {remote:?} is invalid: \".\" and \"..\" components are not allowed"
                ),
            ));
        }
        if path.chars().any(char::is_control) {
            return Err(Error::with_message(
                Kind::InvalidArgument,
                format!("{op}: remote path {remote:?} is invalid: it contains a control character"),
            ));
        }
        // A share name may carry `[ ] + = ; ,` (Samba, NAS exports) and white space
        // (`\\fs01\Team Share`, which csi-driver-smb passes through): upstream passes them on.
        // No host puts a name where these characters mean something: Windows hands the root to
        // WMI as a method parameter, Linux as the mount source, never inside the option string.
        for (what, name, forbidden, why) in [
            (
                "server",
                server,
                SERVER_NAME_FORBIDDEN,
                "which no SMB server name may contain",
            ),
            (
                "share",
                share,
                SHARE_NAME_FORBIDDEN,
                "which no UNC path component may carry",
            ),
        ] {
            if let Some(c) = name.chars().find(|c| forbidden.contains(*c)) {
                return Err(Error::with_message(
                    Kind::InvalidArgument,
                    format!(
                        "{op}: remote path {remote:?} is invalid: the {what} name contains {c:?}, {why}"
                    ),
                ));
            }
        }
        let root = format!("\\\\{server}\\{share}").to_lowercase();
        Ok(Self { path, root })
    }

    /// The non-empty components after server and share (the directory inside the share).
    pub fn sub_components(&self) -> Vec<&str> {
        self.path
            .split('\\')
            .filter(|c| !c.is_empty())
            .skip(2)
            .collect()
    }
}

/// The remote path (`\\server\share\…`, `\`-separated, original case, no trailing `\`) a
/// directory link's target leads to, for the target forms Windows stores: `\\server\share\…`,
/// `\\?\UNC\server\share\…`, `\??\UNC\…`, `UNC\…` and upstream's `\\?\\\server\share\…`.
/// `None` for anything that is not a UNC path with a server and a share.
pub fn remote_of_link_target(target: &str) -> Option<String> {
    let t = target.replace('/', "\\");
    let rest = if let Some(r) = t
        .strip_prefix("\\\\?\\UNC\\")
        .or_else(|| t.strip_prefix("\\??\\UNC\\"))
    {
        r
    } else if let Some(r) = t.strip_prefix("\\\\?\\\\\\") {
        r
    } else if t.starts_with("\\\\?\\") || t.starts_with("\\\\.\\") || t.starts_with("\\??\\") {
        return None;
    } else if let Some(r) = t.strip_prefix("\\\\") {
        r
    } else if t.len() > 4 && t[..4].eq_ignore_ascii_case("UNC\\") {
        &t[4..]
    } else {
        return None;
    };
    let parts: Vec<&str> = rest.split('\\').filter(|c| !c.is_empty()).collect();
    (parts.len() >= 2).then(|| format!("\\\\{}", parts.join("\\")))
}

/// The share root (lower-cased `\\server\share`) a directory link's target leads into
/// ([`remote_of_link_target`]).
pub fn share_root_of_link_target(target: &str) -> Option<String> {
    let remote = remote_of_link_target(target)?;
    let mut parts = remote.trim_start_matches('\\').split('\\');
    let (server, share) = (parts.next()?, parts.next()?);
    Some(format!("\\\\{server}\\{share}").to_lowercase())
}

/// Whether two remote paths (or two link paths) name the same place: case-insensitive, as SMB
/// and Windows names are; `/` and `\`, and trailing separators, alike.
pub fn same_remote(a: &str, b: &str) -> bool {
    let norm = |p: &str| p.replace('/', "\\").trim_end_matches('\\').to_lowercase();
    norm(a) == norm(b)
}
