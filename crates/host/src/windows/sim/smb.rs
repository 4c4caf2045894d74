//! Simulated SMB: servers' shares and the node-wide mappings `MSFT_SmbGlobalMapping` lists,
//! as Windows treats them:
//! - one set of credentials per server and logon session: a second mapping to the same server
//!   with other credentials fails with error 1219, the server being the name as written in the
//!   path (`\\srv` and its address are two servers to the client; ledger row 12), unless a
//!   test makes the client group a name with an address ([`SimWindows::set_smb_same_server`]);
//! - a mapping of a root already mapped fails with ERROR_ALREADY_ASSIGNED (85);
//! - wrong credentials fail with ERROR_LOGON_FAILURE (1326), an unknown server with
//!   ERROR_BAD_NETPATH (53), an unknown share with ERROR_BAD_NET_NAME (67);
//! - a mapping that requires privacy (`RequirePrivacy`, SMB encryption) to a server that
//!   cannot encrypt fails with ERROR_ACCESS_DENIED (5) and is not made;
//! - a mapping whose server stopped answering is listed `Disconnected` (status 2), and paths
//!   below it do not answer;
//! - a server that does not answer at all (`set_share_hangs`) holds an open below its share,
//!   and a `Create` of a mapping of it, on its WMI thread, until it answers again (the SMB
//!   client waits out its request timeout, MS-SMB2 3.2.6.1); other servers' mappings and the
//!   listing are not held up;
//! - a server whose password changed (an Azure Files key rotation) keeps the sessions already
//!   made; once they drop (server restart, failover, network blip) the client signs in again
//!   with the credential the mapping was made with, which fails (ERROR_LOGON_FAILURE, 1326):
//!   paths below the mapping stop answering while it stays listed. Microsoft documents no
//!   `Status` value for that state; it is listed OK, the harder case for the daemon (only the
//!   probe of its root shows it broken, as upstream's `PathValid` check sees it).
//! - a failed Create reaches the caller of `IWbemServices::ExecMethod` in one of three
//!   encodings ([`SmbFailureEncoding`]); by default the least helpful one, WBEM_E_FAILED with
//!   the code only in the extended error object, as the CIM cmdlets' output in
//!   csi-driver-smb#219 suggests (the Win32 text, shown from the provider's error object).

use super::{OsError, ReturnValue, SimWindows, State, Win32Result};

/// WBEM_E_FAILED: "Call failed" (WMI Error Constants).
const WBEM_E_FAILED: u32 = 0x8004_1001;

/// How a failed `MSFT_SmbGlobalMapping` method reaches the caller of `IWbemServices::ExecMethod`.
/// Which one a given Windows uses is not documented; all three occur.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SmbFailureEncoding {
    /// The call succeeds and the out-parameters' `ReturnValue` is the Win32 code.
    ReturnValue,
    /// The call fails with `HRESULT_FROM_WIN32(code)` (`0x8007xxxx`).
    HResult,
    /// The call fails with WBEM_E_FAILED; the code is only in the extended error object the
    /// provider set (`MSFT_WmiError.error_Code`).
    #[default]
    ExtendedError,
}

/// The answer of a method whose outcome is the Win32 code `code` (0 is success), encoded as
/// `encoding` says.
pub(super) fn answer(encoding: SmbFailureEncoding, code: u32) -> Win32Result<ReturnValue> {
    if code == 0 {
        return Ok(ReturnValue::Code(0));
    }
    match encoding {
        SmbFailureEncoding::ReturnValue => Ok(ReturnValue::Code(code)),
        SmbFailureEncoding::HResult => Err(OsError::new(0x8007_0000 | (code & 0xFFFF))),
        SmbFailureEncoding::ExtendedError => Err(OsError::with_extended(
            WBEM_E_FAILED,
            code,
            "Call failed (WBEM_E_FAILED, 0x80041001)",
        )),
    }
}

/// A share a simulated server offers.
#[derive(Debug, Clone)]
pub(super) struct Share {
    /// The `user:password` credential it takes; `None` for any.
    credential: Option<String>,
    up: bool,
    /// The server stopped answering: opens below the share block until it answers again.
    hangs: bool,
    /// The server cannot encrypt (SMB before 3.0, or encryption turned off): a mapping that
    /// requires privacy is refused.
    no_encryption: bool,
    /// What an open through a mapping whose credential it refused answers: ERROR_LOGON_FAILURE
    /// unless a test picks another refusal (an expired password, a disabled account: which
    /// one a server gives for a rotated key no page says, ledger row 49).
    refusal: u32,
}

/// A node-wide mapping.
#[derive(Debug, Clone)]
pub(super) struct Mapping {
    /// `RemotePath` as created.
    pub(super) remote: String,
    credential: Option<String>,
    /// The server refused the credential when the session was made again.
    signed_out: bool,
}

/// The lower-cased `\\server\share` of a UNC path, if `path` is one.
fn unc_root(path: &str) -> Option<String> {
    let rest = path.strip_prefix(r"\\")?;
    if rest.starts_with(['?', '.']) {
        return None;
    }
    let mut parts = rest.split('\\').filter(|p| !p.is_empty());
    let (server, share) = (parts.next()?, parts.next()?);
    Some(format!(r"\\{server}\{share}").to_ascii_lowercase())
}

fn server_of(root: &str) -> &str {
    root.trim_start_matches('\\')
        .split('\\')
        .next()
        .unwrap_or("")
}

/// For a UNC path: whether it answers (its share is up and mapped); `None` for other paths.
pub(super) fn unc_exists(s: &State, path: &str) -> Option<bool> {
    let root = unc_root(path)?;
    let up = s.shares.get(&root).is_some_and(|sh| sh.up);
    Some(up && s.smb_mappings.get(&root).is_some_and(|m| !m.signed_out))
}

/// Whether opening `path` blocks: it is below a share whose server stopped answering.
pub(super) fn unc_hangs(s: &State, path: &str) -> bool {
    unc_root(path).is_some_and(|root| s.shares.get(&root).is_some_and(|sh| sh.hangs))
}

/// Why a UNC path below a share does not answer, as opening it fails on Windows
/// (learn.microsoft.com/windows/win32/debug/system-error-codes): ERROR_BAD_NETPATH (53) while
/// the server is down, ERROR_LOGON_FAILURE (1326) through a mapping whose credential the server
/// refused when signing in again; `None` when it answers or the simulator has no reason.
pub(super) fn unc_error(s: &State, path: &str) -> Option<OsError> {
    let root = unc_root(path)?;
    let share = s.shares.get(&root)?;
    if !share.up {
        return Some(OsError::new(53));
    }
    s.smb_mappings
        .get(&root)
        .filter(|m| m.signed_out)
        .map(|_| OsError::new(share.refusal))
}

/// Fails while WMI is restarting, as every WMI call does.
pub(super) fn connected(s: &State) -> Win32Result<()> {
    s.wmi_gone.map_or(Ok(()), |code| Err(OsError::new(code)))
}

/// `MSFT_SmbGlobalMapping.Status` of a mapping: OK, or Disconnected when its server is down.
pub(super) fn status(s: &State, m: &Mapping) -> u32 {
    let root = m.remote.trim_end_matches('\\').to_ascii_lowercase();
    if s.shares.get(&root).is_some_and(|sh| sh.up) {
        0
    } else {
        2
    }
}

/// ERROR_ACCESS_DENIED: what a server that cannot encrypt answers a client requiring privacy.
const ERROR_ACCESS_DENIED: u32 = 5;

/// `MSFT_SmbGlobalMapping.Create`: its ReturnValue. `RequirePrivacy` ("Indicates that SMB
/// encryption is required", New-SmbGlobalMapping) is refused by a server that cannot encrypt.
pub(super) fn create(
    s: &mut State,
    remote: &str,
    require_privacy: bool,
    credential: Option<&str>,
) -> u32 {
    let root = remote.trim_end_matches('\\').to_ascii_lowercase();
    if s.smb_mappings.contains_key(&root) {
        return 85;
    }
    let server = server_of(&root).to_string();
    let same = |other: &str| {
        other.eq_ignore_ascii_case(&server)
            || s.smb_same_server.iter().any(|(a, b)| {
                (a.eq_ignore_ascii_case(&server) && b.eq_ignore_ascii_case(other))
                    || (b.eq_ignore_ascii_case(&server) && a.eq_ignore_ascii_case(other))
            })
    };
    let conflict = s
        .smb_mappings
        .iter()
        .any(|(r, m)| same(server_of(r)) && m.credential.as_deref() != credential);
    if conflict {
        return 1219;
    }
    let Some(share) = s.shares.get(&root) else {
        let known_server = s.shares.keys().any(|r| server_of(r) == server);
        return if known_server { 67 } else { 53 };
    };
    if !share.up {
        return 53;
    }
    if share.credential.is_some() && share.credential.as_deref() != credential {
        return 1326;
    }
    if require_privacy && share.no_encryption {
        return ERROR_ACCESS_DENIED;
    }
    s.smb_mappings.insert(
        root,
        Mapping {
            remote: remote.to_string(),
            credential: credential.map(str::to_string),
            signed_out: false,
        },
    );
    0
}

impl SimWindows {
    /// A server's share `\\server\share` that takes `user`/`password` (the `user:password`
    /// form of the Credential parameter), or anyone when `None`.
    pub fn add_share(&self, root: &str, credential: Option<(&str, &str)>) {
        self.lock().shares.insert(
            root.to_ascii_lowercase(),
            Share {
                credential: credential.map(|(u, p)| crate::windows::smb::credential_string(u, p)),
                up: true,
                hangs: false,
                no_encryption: false,
                refusal: 1326,
            },
        );
    }

    /// Opens through a mapping of `root` whose credential its server refused answer `code`
    /// from now on (ERROR_LOGON_FAILURE by default).
    pub fn set_share_refusal(&self, root: &str, code: u32) {
        if let Some(sh) = self.lock().shares.get_mut(&root.to_ascii_lowercase()) {
            sh.refusal = code;
        }
    }

    /// Takes a server's share down (or back up).
    pub fn set_share_up(&self, root: &str, up: bool) {
        if let Some(sh) = self.lock().shares.get_mut(&root.to_ascii_lowercase()) {
            sh.up = up;
        }
    }

    /// The share's server stops answering (or answers again): an open below it blocks, as one
    /// on a server whose host is gone waits out the network's timeouts.
    pub fn set_share_hangs(&self, root: &str, hangs: bool) {
        if let Some(sh) = self.lock().shares.get_mut(&root.to_ascii_lowercase()) {
            sh.hangs = hangs;
        }
    }

    /// The share's server cannot encrypt (or can again): a mapping requiring privacy is
    /// refused with ERROR_ACCESS_DENIED.
    pub fn set_share_encryption(&self, root: &str, encrypts: bool) {
        if let Some(sh) = self.lock().shares.get_mut(&root.to_ascii_lowercase()) {
            sh.no_encryption = !encrypts;
        }
    }

    /// The share takes only this credential from now on (a password change, a storage key
    /// rotation); sessions already made keep working until [`Self::drop_smb_sessions`].
    pub fn set_share_credential(&self, root: &str, credential: Option<(&str, &str)>) {
        if let Some(sh) = self.lock().shares.get_mut(&root.to_ascii_lowercase()) {
            sh.credential = credential.map(|(u, p)| crate::windows::smb::credential_string(u, p));
        }
    }

    /// The share's server drops its sessions: each mapping of it signs in again with the
    /// credential it was made with, and one the share no longer takes stops answering.
    pub fn drop_smb_sessions(&self, root: &str) {
        let mut s = self.lock();
        let root = root.to_ascii_lowercase();
        let Some(wanted) = s.shares.get(&root).map(|sh| sh.credential.clone()) else {
            return;
        };
        if let Some(m) = s.smb_mappings.get_mut(&root) {
            m.signed_out = wanted.is_some() && m.credential != wanted;
        }
    }

    /// The scan for links below the allowed roots misses some from now on, for this reason
    /// (a directory `FindFirstFileW` cannot list), or sees them all again (`None`).
    pub fn set_link_scan_incomplete(&self, why: Option<&str>) {
        self.lock().link_scan_incomplete = why.map(str::to_string);
    }

    /// From now on the client counts `name` and `address` as one server for error 1219 (as if
    /// it grouped sessions by the resolved address): a Windows other than the one ledger row
    /// 12 models, for the selftest's step that tells the two apart.
    pub fn set_smb_same_server(&self, name: &str, address: &str) {
        self.lock()
            .smb_same_server
            .push((name.to_string(), address.to_string()));
    }

    /// How failed SMB mapping methods answer from now on.
    pub fn set_smb_failure_encoding(&self, encoding: SmbFailureEncoding) {
        self.lock().smb_encoding = encoding;
    }

    /// The node-wide mappings' remote paths.
    pub fn smb_roots(&self) -> Vec<String> {
        self.lock()
            .smb_mappings
            .values()
            .map(|m| m.remote.clone())
            .collect()
    }
}
