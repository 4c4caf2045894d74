//! SMB on Windows: node-wide mappings are `MSFT_SmbGlobalMapping` objects (namespace
//! `ROOT\Microsoft\Windows\SMB`), reached through WMI on the daemon's WMI thread — no PowerShell,
//! no child process, and nothing from a request is ever put into a query string: the one query
//! lists every mapping and filtering happens here.
//!
//! Create is the class's static `Create` method with `RemotePath`, `RequirePrivacy` and, when a
//! user is given, `Credential` as the string `user:password` — the form the CIM cmdlet adapter
//! produces from a PSCredential (upstream relies on the same), with `\` and `:` in the user name
//! escaped so a `DOMAIN\user` survives, and the password taken verbatim after the first
//! unescaped `:`, so any character works. The credential travels only in the method's
//! in-parameters object; errors name the root, never the credential.
//!
//! `local_path` becomes a directory symbolic link to `\\server\share\sub\` (the target form the
//! PowerShell-era upstream stored, which drivers read back with `readlink`).

use super::os::files::{create_symlink, utf16};
use super::os::pool::until;
use super::os::probe::Probes;
use super::os::{OsError, ReturnValue, Win32Result, os_error, wmi_retrying};
use csi_proxy_core::smb::{MappingInfo, MappingState, SmbHost, SmbLinkUse, SmbMapping, SmbUsers};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::reparse::{self, LinkDestination};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

const NEW: &str = "NewSmbGlobalMapping";
const REMOVE: &str = "RemoveSmbGlobalMapping";
/// How long the share root may take to answer before a mapping counts as inaccessible.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);
/// How many share-root probes may be stuck on dead servers at once; past that a root counts
/// as not answering without being probed.
const MAX_PROBES: usize = 16;

super::os::seam_host! {
    /// The Windows SMB host.
    WindowsSmbHost
}

/// The `Credential` in-parameter: `user:password` with `\` → `\\` and `:` → `\:` in the user.
pub fn credential_string(username: &str, password: &str) -> String {
    let mut s = String::with_capacity(username.len() + password.len() + 2);
    for c in username.chars() {
        if matches!(c, '\\' | ':') {
            s.push('\\');
        }
        s.push(c);
    }
    s.push(':');
    s.push_str(password);
    s
}

/// `MSFT_SmbGlobalMapping.Status` as its schema names the values.
pub fn status_text(status: u32) -> &'static str {
    match status {
        0 => "OK",
        1 => "Paused",
        2 => "Disconnected",
        3 => "NetworkError",
        4 => "Connecting",
        5 => "Reconnecting",
        6 => "Unavailable",
        _ => "in an unknown state",
    }
}

/// Win32 errors an SMB mapping commonly fails with, as HRESULTs or method return values.
const ERROR_ACCESS_DENIED: u32 = 5;
const ERROR_BAD_NETPATH: u32 = 53;
const ERROR_NETWORK_ACCESS_DENIED: u32 = 65;
const ERROR_BAD_NET_NAME: u32 = 67;
const ERROR_ALREADY_ASSIGNED: u32 = 85;
const ERROR_INVALID_PARAMETER: u32 = 87;
const ERROR_ALREADY_EXISTS: u32 = 183;
const ERROR_SESSION_CREDENTIAL_CONFLICT: u32 = 1219;
const ERROR_LOGON_FAILURE: u32 = 1326;

/// The Win32 error inside an HRESULT of facility WIN32 (`0x8007xxxx`), or a bare Win32 code.
pub fn win32_code(code: u32) -> u32 {
    if code & 0xFFFF_0000 == 0x8007_0000 {
        code & 0xFFFF
    } else {
        code
    }
}

/// The kind and wording of a failed Create/Remove with this Win32 code (or HRESULT). Error
/// 1219 and "already exists" are ALREADY_EXISTS, which the manager handles as reuse-or-rebind.
pub fn failure(code: u32) -> (Kind, String) {
    let w = win32_code(code);
    let (kind, what) = match w {
        ERROR_SESSION_CREDENTIAL_CONFLICT => (
            Kind::AlreadyExists,
            "the server already has a connection made with other credentials (error 1219)",
        ),
        ERROR_ALREADY_EXISTS | ERROR_ALREADY_ASSIGNED => {
            (Kind::AlreadyExists, "a mapping of this root already exists")
        }
        ERROR_ACCESS_DENIED | ERROR_NETWORK_ACCESS_DENIED => {
            (Kind::PermissionDenied, "access denied (error 5)")
        }
        ERROR_LOGON_FAILURE => (
            Kind::PermissionDenied,
            "the user name or password is incorrect (error 1326)",
        ),
        ERROR_BAD_NETPATH => (Kind::NotFound, "the network path was not found (error 53)"),
        ERROR_BAD_NET_NAME => (Kind::NotFound, "the share was not found (error 67)"),
        ERROR_INVALID_PARAMETER => (
            Kind::InvalidArgument,
            "the parameter is incorrect (error 87)",
        ),
        _ => (Kind::Internal, "failed"),
    };
    (kind, format!("{what} [{code:#x}]"))
}

/// One global mapping as WMI lists it.
struct Listed {
    /// `RemotePath` lower-cased without a trailing backslash: the manager's key.
    root: String,
    /// `RemotePath` as listed, which Remove is matched on.
    remote: String,
    status: u32,
}

/// A failed WMI call of `op`. A mapping method's failure reaches us in one of three encodings
/// (csi-driver-smb#219): its `ReturnValue` (see [`outcome`]), the call failing with
/// `HRESULT_FROM_WIN32(code)`, or the call failing with WBEM_E_FAILED and the code only in the
/// provider's extended error object. The last two are worded here as the SMB failures are; anything
/// else as the seam reports it.
fn call_error(op: &str, object: &str, e: &OsError) -> Error {
    match code_in(e) {
        Some(code) => {
            let (kind, why) = failure(code);
            Error::new(kind, op, object, why)
        }
        None => os_error(op, object, e, &[]),
    }
}

/// The Win32 code a failed mapping method's call carries: in the provider's extended error
/// object, or as `HRESULT_FROM_WIN32(code)` (kept as the HRESULT); `None` for any other failure.
fn code_in(e: &OsError) -> Option<u32> {
    e.extended
        .or_else(|| (win32_code(e.code) != e.code).then_some(e.code))
}

/// The Win32 code a mapping method (`MSFT_SmbGlobalMapping.Create`, `Remove`) answered,
/// whichever of the three encodings carried it (0: success); the failure itself when it
/// carries none. For the selftest, which calls the methods itself.
pub fn method_code(answer: Win32Result<ReturnValue>) -> std::result::Result<u32, String> {
    match answer {
        Ok(ReturnValue::Absent) => Ok(0),
        Ok(ReturnValue::Code(c)) => Ok(c),
        Ok(ReturnValue::Unexpected(v)) => Err(format!("a ReturnValue that is no code: {v}")),
        Err(e) => code_in(&e).map(win32_code).ok_or_else(|| e.to_string()),
    }
}

/// The outcome of mapping method `method` in operation `op`, whichever way a failure came.
fn outcome(op: &str, object: &str, method: &str, r: Win32Result<ReturnValue>) -> Result<()> {
    match r
        .map_err(|e| call_error(op, object, &e))?
        .code(op, object, method)?
    {
        0 => Ok(()),
        code => {
            let (kind, why) = failure(code);
            Err(Error::new(kind, op, object, why))
        }
    }
}

/// The share-root probes of every host in the process: one per root at a time, at most
/// [`MAX_PROBES`] stuck on dead servers.
static PROBES: LazyLock<Arc<Probes<std::result::Result<(), u32>>>> =
    LazyLock::new(|| Arc::new(Probes::new(MAX_PROBES)));

/// WAIT_TIMEOUT: what a probe that did not answer in time counts as.
const WAIT_TIMEOUT: u32 = 258;

/// The System Error Codes that say a server refused a credential: ERROR_ACCESS_DENIED (5),
/// ERROR_NETWORK_ACCESS_DENIED (65), ERROR_INVALID_PASSWORD (86, "The specified network
/// password is not correct"), ERROR_LOGON_FAILURE (1326), ERROR_ACCOUNT_RESTRICTION (1327),
/// ERROR_INVALID_LOGON_HOURS (1328), ERROR_PASSWORD_EXPIRED (1330), ERROR_ACCOUNT_DISABLED
/// (1331), ERROR_ACCOUNT_EXPIRED (1793), ERROR_PASSWORD_MUST_CHANGE (1907) and
/// ERROR_ACCOUNT_LOCKED_OUT (1909).
const REFUSALS: [u32; 11] = [
    ERROR_ACCESS_DENIED,
    ERROR_NETWORK_ACCESS_DENIED,
    86,
    ERROR_LOGON_FAILURE,
    1327,
    1328,
    1330,
    1331,
    1793,
    1907,
    1909,
];

/// Whether opening a share root failed because the server refused the mapping's credential,
/// whichever of the [`REFUSALS`] it gave (which one a rotated key brings no page says): the
/// server answered, so a mapping made again with other credentials can heal it.
fn refused(code: u32) -> bool {
    REFUSALS.contains(&win32_code(code))
}

impl WindowsSmbHost {
    /// Whether the share root answers within [`HEALTH_TIMEOUT`] (or the caller's deadline), or
    /// the Win32 error saying why not (WAIT_TIMEOUT when it did not answer in time): a dead
    /// server blocks the open for long, so it runs as a bounded probe, shared by every caller
    /// asking about the same root while it runs.
    fn share_root_answers(&self, root: &str) -> std::result::Result<(), u32> {
        let os = self.os.clone();
        let dir = format!("{root}\\");
        // Keyed by the seam too: each simulated Windows in a test process is its own machine.
        let key = format!("{:p} {root}", Arc::as_ptr(&self.os));
        PROBES
            .answers(&key, until(HEALTH_TIMEOUT), move || {
                os.dir_opens(&dir).map_err(|e| e.code)
            })
            .unwrap_or(Err(WAIT_TIMEOUT))
    }

    /// Every global mapping.
    fn list(&self, op: &str) -> Result<Vec<Listed>> {
        let os = &*self.os;
        let rows = wmi_retrying(os, || os.smb_global_mappings())
            .map_err(|e| call_error(op, "MSFT_SmbGlobalMapping", &e))?;
        Ok(rows
            .into_iter()
            .map(|(remote, status)| Listed {
                root: remote.trim_end_matches('\\').to_lowercase(),
                remote,
                status,
            })
            .collect())
    }
}

impl SmbHost for WindowsSmbHost {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let os = &*self.os;
        let object = format!("mapping {:?}", mapping.root);
        let credential = mapping
            .credentials
            .as_ref()
            .map(|c| credential_string(&c.username, c.password.expose()));
        let answer = wmi_retrying(os, || {
            os.smb_create_global_mapping(
                &mapping.root,
                mapping.require_privacy,
                credential.as_deref(),
            )
        });
        outcome(NEW, &object, "MSFT_SmbGlobalMapping.Create", answer)?;
        tracing::info!(root = %mapping.root, "SMB global mapping created");
        Ok(())
    }

    fn new_smb_link(&self, _: &SmbMapping, remote_path: &str, local_path: &str) -> Result<()> {
        let os = &*self.os;
        let mut target = remote_path.to_string();
        if !target.ends_with('\\') {
            target.push('\\');
        }
        let existing = os
            .reparse_data(&utf16(local_path))
            .ok()
            .and_then(|d| reparse::parse(&d).ok())
            .and_then(|rp| rp.destination());
        if let Some(LinkDestination::Path(p)) = existing
            && p.eq_ignore_ascii_case(&target)
        {
            return Ok(()); // a retry of the same request
        }
        create_symlink(os, &utf16(local_path), &utf16(&target), true).map_err(|e| {
            os_error(
                NEW,
                format!("creating link {local_path:?} to {remote_path:?}"),
                &e,
                &[],
            )
        })
    }

    fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
        let os = &*self.os;
        let object = format!("mapping {root:?}");
        let Some(found) = self.list(REMOVE)?.into_iter().find(|m| m.root == root) else {
            return Err(Error::new(
                Kind::NotFound,
                REMOVE,
                &object,
                "no such SMB global mapping",
            ));
        };
        let answer = wmi_retrying(os, || os.smb_remove_global_mapping(&found.remote));
        outcome(REMOVE, &object, "MSFT_SmbGlobalMapping.Remove", answer)?;
        tracing::info!(root = %root, "SMB global mapping removed");
        Ok(())
    }

    /// Windows keeps one global mapping per share root, whoever's credentials made it.
    fn remove_credential_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        self.remove_smb_global_mapping(&mapping.root)
    }

    fn smb_global_mapping(&self, root: &str) -> Result<MappingState> {
        let Some(found) = self.list(NEW)?.into_iter().find(|m| m.root == root) else {
            return Ok(MappingState::Absent);
        };
        // Health is whether the share root answers, whatever the listed status: an idle
        // `Disconnected` mapping reconnects when a path below it is opened, a `Reconnecting` one
        // gets the probe's time to finish, and one listed OK may refuse every open (its
        // credential no longer accepted). Only a mapping that does not answer is broken, and
        // only a broken one is ever replaced under other volumes' links.
        let probe = self.share_root_answers(root);
        let status = match (probe, found.status) {
            (Ok(()), _) => "OK".to_string(),
            (Err(code), 0) => format!("inaccessible, error {code}"),
            (Err(code), s) => format!("{}, error {code}", status_text(s)),
        };
        Ok(MappingState::Present(MappingInfo {
            healthy: probe.is_ok(),
            status,
            // MSFT_SmbGlobalMapping does not report the user a mapping was made as.
            username: None,
            // Only a server that answered and refused the credential is healed by a new
            // mapping; a network failure, a lost answer or no answer in time are not.
            remap_heals: probe.is_err_and(refused),
        }))
    }

    /// One mapping per root whatever its credentials: `MSFT_SmbGlobalMapping` keys mappings by
    /// remote path alone.
    fn credential_mapping(&self, _: &SmbMapping) -> Result<Option<MappingState>> {
        Ok(None)
    }

    fn smb_global_mappings(&self) -> Result<Vec<String>> {
        let mut roots: Vec<String> = self.list(NEW)?.into_iter().map(|m| m.root).collect();
        roots.sort();
        roots.dedup();
        Ok(roots)
    }

    fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<SmbUsers> {
        let (links, incomplete) = self.os.links_below(scan_roots);
        let links = links
            .into_iter()
            .filter(|(_, target)| {
                csi_proxy_core::smb::share_root_of_link_target(target).as_deref() == Some(root)
            })
            .map(|(link, target)| {
                let remote = csi_proxy_core::smb::remote_of_link_target(&target).unwrap_or(target);
                SmbLinkUse { link, remote }
            })
            .collect();
        Ok(SmbUsers { links, incomplete })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_escape_the_user_and_keep_the_password_verbatim() {
        assert_eq!(credential_string("user", "pw"), "user:pw");
        assert_eq!(
            credential_string("DOMAIN\\user", "p:a\\s's\"w;o$rd"),
            "DOMAIN\\\\user:p:a\\s's\"w;o$rd"
        );
        assert_eq!(credential_string("a:b", ""), "a\\:b:");
    }

    #[test]
    fn win32_failures_map_to_kinds_and_1219_is_already_exists() {
        assert_eq!(failure(0x8007_04C3).0, Kind::AlreadyExists);
        assert!(failure(0x8007_04C3).1.contains("1219"));
        assert_eq!(failure(1219).0, Kind::AlreadyExists);
        assert_eq!(failure(0x8007_00B7).0, Kind::AlreadyExists);
        assert_eq!(failure(0x8007_052E).0, Kind::PermissionDenied);
        assert_eq!(failure(53).0, Kind::NotFound);
        assert_eq!(failure(87).0, Kind::InvalidArgument);
        assert_eq!(failure(0x8004_1001).0, Kind::Internal);
        assert_eq!(win32_code(0x8004_1001), 0x8004_1001);
    }

    #[test]
    fn statuses_have_their_schema_names() {
        assert_eq!(status_text(0), "OK");
        assert_eq!(status_text(2), "Disconnected");
        assert_eq!(status_text(6), "Unavailable");
        assert_eq!(status_text(99), "in an unknown state");
    }

    #[cfg(windows)]
    #[test]
    fn the_smb_namespace_answers_or_is_reported_precisely() {
        // Under wine the SMB provider does not exist: the listing must fail with an error that
        // names the operation, not crash or hang.
        match WindowsSmbHost::new().smb_global_mappings() {
            Ok(roots) => assert!(roots.iter().all(|r| r.starts_with("\\\\"))),
            Err(e) => assert!(e.message().starts_with(NEW), "{e}"),
        }
    }
}
