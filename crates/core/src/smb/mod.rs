//! SMB group: node-wide ("global") mappings of `\\server\share` roots and links to them.
//!
//! [`SmbService`] holds the version-agnostic logic (remote path normalisation, share root,
//! local path confinement); the [`SmbHost`] trait is the OS layer implemented per platform in
//! `csi-proxy-host` (Windows: `MSFT_SmbGlobalMapping` + directory symlink; Linux: a cifs mount).
//!
//! Secrets: the SMB password is a [`Secret`], whose `Debug` redacts it, and never enters an
//! error message or a log line.

use crate::error::{Error, Kind, Result};
use crate::filesystem::FilesystemService;
use std::fmt;
use std::sync::Arc;

const GROUP: &str = "smb";
const NEW: &str = "NewSmbGlobalMapping";
const REMOVE: &str = "RemoveSmbGlobalMapping";

/// A credential that must never be shown: its `Debug` prints `<redacted>` (or `""` when empty)
/// and it has no `Display`, so a struct holding one can derive `Debug` safely.
///
/// Used by the SMB and iSCSI groups (re-exported as `iscsi::Secret`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the host call that needs it; never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether no secret was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_string())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
}

/// A NewSmbGlobalMapping request, version-agnostic. `Debug` redacts the password.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSmbGlobalMappingRequest {
    /// `\\server\share[\sub\dir]`; `/` is accepted for `\`.
    pub remote_path: String,
    /// Where to create a link to the remote path; empty for none. Confined to the allowed roots.
    pub local_path: String,
    /// Empty to map with the host's own (machine) credentials.
    pub username: String,
    /// The password of `username`.
    pub password: Secret,
}

/// The user a mapping is made as. `Debug` redacts the password; hosts must not put it in
/// errors either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmbCredentials {
    /// User name as the client sent it (a host escapes it as its API needs).
    pub username: String,
    /// The password of `username`.
    pub password: Secret,
}

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
        let root = format!("\\\\{server}\\{share}").to_lowercase();
        Ok(Self { path, root })
    }
}

/// What the host is asked to map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmbMapping {
    /// The lower-cased `\\server\share` root.
    pub root: String,
    /// `None` maps with the host's own credentials (upstream: no `Credential` when the user is empty).
    pub credentials: Option<SmbCredentials>,
    /// Whether the mapping must encrypt traffic (`--require-privacy`).
    pub require_privacy: bool,
}

/// OS primitives of the SMB group. Arguments are already validated.
///
/// Every method defaults to UNIMPLEMENTED naming the RPC it serves, so a host can be brought up
/// one RPC at a time. No method may put a password into an error.
pub trait SmbHost: Send + Sync {
    /// Makes sure `mapping.root` is mapped node-wide with these credentials; an existing
    /// healthy mapping of the root is success.
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let _ = mapping;
        Err(Error::unimplemented(GROUP, NEW))
    }

    /// Creates a directory link at `local_path` (confined) to `remote_path` (normalised full
    /// remote path, original case) through the mapping of its root; fails if `local_path` exists.
    fn new_smb_link(&self, remote_path: &str, local_path: &str) -> Result<()> {
        let _ = (remote_path, local_path);
        Err(Error::unimplemented(GROUP, NEW))
    }

    /// Removes the node-wide mapping of `root`; NotFound when there is none (upstream is not
    /// idempotent here). Links to it are left alone.
    fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
        let _ = root;
        Err(Error::unimplemented(GROUP, REMOVE))
    }
}

/// The version-agnostic SMB service every SMB API version is served by.
///
/// Validation lives here; so will the mapping manager (reuse a healthy mapping, remap one whose
/// root became inaccessible, upstream-behaviour.md §2.4 steps 3–5) once the hosts expose the
/// finer primitives it needs.
#[derive(Clone)]
pub struct SmbService {
    host: Arc<dyn SmbHost>,
    fs: FilesystemService,
    require_privacy: bool,
}

impl SmbService {
    /// A service over `host`, confining local paths with `fs`; `require_privacy` is
    /// `--require-privacy` (upstream default true).
    pub fn new(host: Arc<dyn SmbHost>, fs: FilesystemService, require_privacy: bool) -> Self {
        Self {
            host,
            fs,
            require_privacy,
        }
    }

    /// NewSmbGlobalMapping: maps the share root of `remote_path` node-wide, then links
    /// `local_path` (when given) to the full remote path.
    ///
    /// Unlike upstream, `local_path` is confined before the mapping is made, so a request with a
    /// bad local path leaves nothing behind; the OK/non-OK outcome is the same.
    pub fn new_smb_global_mapping(&self, req: &NewSmbGlobalMappingRequest) -> Result<()> {
        let remote = RemotePath::parse(NEW, &req.remote_path)?;
        let local = if req.local_path.is_empty() {
            None
        } else {
            Some(self.fs.confine(NEW, &req.local_path)?)
        };
        let credentials = (!req.username.is_empty()).then(|| SmbCredentials {
            username: req.username.clone(),
            password: req.password.clone(),
        });
        self.host.new_smb_global_mapping(&SmbMapping {
            root: remote.root,
            credentials,
            require_privacy: self.require_privacy,
        })?;
        match local {
            Some(local) => self.host.new_smb_link(&remote.path, &local),
            None => Ok(()),
        }
    }

    /// RemoveSmbGlobalMapping: removes the node-wide mapping of the share root of `remote_path`.
    pub fn remove_smb_global_mapping(&self, remote_path: &str) -> Result<()> {
        let remote = RemotePath::parse(REMOVE, remote_path)?;
        self.host.remove_smb_global_mapping(&remote.root)
    }
}

// The service's paths through a host (credentials, links, confinement, UNIMPLEMENTED) are
// tested over the adapters in `csi-proxy-server/tests/smb_iscsi_system_adapters.rs`, which has
// the filesystem fake the service needs.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_normalise_to_a_lower_cased_share_root() {
        let cases = [
            (
                "\\\\Host\\Share\\sub\\dir",
                "\\\\host\\share",
                "\\\\Host\\Share\\sub\\dir",
            ),
            (
                "//Host/Share/sub",
                "\\\\host\\share",
                "\\\\Host\\Share\\sub",
            ),
            ("Host\\Share", "\\\\host\\share", "Host\\Share"),
            ("\\\\h\\\\s\\", "\\\\h\\s", "\\\\h\\\\s\\"),
        ];
        for (input, root, path) in cases {
            let r = RemotePath::parse("Op", input).unwrap();
            assert_eq!((r.root.as_str(), r.path.as_str()), (root, path), "{input}");
        }
    }

    #[test]
    fn remote_paths_without_a_share_are_invalid() {
        let bad = [
            "",
            "hostname",
            "\\\\hostname",
            "\\\\hostname\\",
            "//",
            "\\\\?\\c:",
            "\\\\.\\pipe",
        ];
        for remote in bad {
            let e = RemotePath::parse("Op", remote).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{remote}");
        }
        let e = RemotePath::parse("Op", "hostname").unwrap_err();
        assert!(
            e.message().contains("remote path \"hostname\" is invalid"),
            "{}",
            e.message()
        );
        let e = RemotePath::parse("Op", "").unwrap_err();
        assert!(
            e.message().contains("remote path is empty"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let req = NewSmbGlobalMappingRequest {
            remote_path: "\\\\s\\h".into(),
            username: "u".into(),
            password: "pa55word".into(),
            ..Default::default()
        };
        let creds = SmbCredentials {
            username: "u".into(),
            password: "pa55word".into(),
        };
        let shown = format!("{req:?} {req:#?} {creds:?}");
        assert!(!shown.contains("pa55word"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
        assert_eq!(Secret::new("x").expose(), "x");
    }
}
