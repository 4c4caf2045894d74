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

use super::wmi::{property, with_namespace, wmi_error};
use csi_proxy_core::smb::{MappingInfo, MappingState, SmbHost, SmbLinkUse, SmbMapping};
use csi_proxy_core::{Error, Kind, Result};
use std::time::Duration;

const NAMESPACE: &str = r"ROOT\Microsoft\Windows\SMB";
const CLASS: &str = "MSFT_SmbGlobalMapping";
const NEW: &str = "NewSmbGlobalMapping";
const REMOVE: &str = "RemoveSmbGlobalMapping";
/// How long the share root may take to answer before a mapping counts as inaccessible.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The Windows SMB host.
#[derive(Debug, Default)]
pub struct WindowsSmbHost;

impl WindowsSmbHost {
    /// The host.
    pub fn new() -> Self {
        Self
    }
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
            (Kind::PermissionDenied, "access denied")
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
    root: String,
    status: u32,
    path: String,
}

fn variant_u32(v: &wmi::Variant) -> Option<u32> {
    match v {
        wmi::Variant::UI4(n) => Some(*n),
        wmi::Variant::I4(n) => u32::try_from(*n).ok(),
        wmi::Variant::UI2(n) => Some(u32::from(*n)),
        wmi::Variant::I2(n) => u32::try_from(*n).ok(),
        wmi::Variant::UI1(n) => Some(u32::from(*n)),
        _ => None,
    }
}

/// Every global mapping, with lower-cased roots.
fn list(op: &'static str) -> Result<Vec<Listed>> {
    with_namespace(op, NAMESPACE, move |c| {
        let rows = c
            .exec_query(format!("SELECT * FROM {CLASS}"))
            .map_err(|e| wmi_error(op, CLASS, &e))?;
        let mut out = Vec::new();
        for row in rows {
            let row = row.map_err(|e| wmi_error(op, CLASS, &e))?;
            let root = match property(op, CLASS, &row, "RemotePath")? {
                wmi::Variant::String(s) => s.trim_end_matches('\\').to_lowercase(),
                _ => continue,
            };
            let status = variant_u32(&property(op, CLASS, &row, "Status")?).unwrap_or(u32::MAX);
            let path = row.path().map_err(|e| wmi_error(op, CLASS, &e))?;
            out.push(Listed { root, status, path });
        }
        Ok(out)
    })
}

/// Whether `root` answers within the limit (a dead server blocks the probe; the thread is then
/// left to finish on its own).
fn accessible(root: &str) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = format!("{root}\\");
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::metadata(&dir).is_ok());
    });
    rx.recv_timeout(HEALTH_TIMEOUT).unwrap_or(false)
}

/// The `ReturnValue` of a method's out-parameters (0: success).
fn return_value(op: &str, object: &str, out: Option<wmi::IWbemClassWrapper>) -> Result<u32> {
    match out {
        None => Ok(0),
        Some(o) => Ok(variant_u32(&property(op, object, &o, "ReturnValue")?).unwrap_or(0)),
    }
}

/// Maps a failed WMI call, using the Win32 code inside its HRESULT when it has one.
fn call_error(op: &str, object: &str, err: &wmi::WMIError) -> Error {
    match err {
        wmi::WMIError::HResultError { hres } if win32_code(*hres as u32) != *hres as u32 => {
            let (kind, why) = failure(*hres as u32);
            Error::new(kind, op, object, why)
        }
        other => wmi_error(op, object, other),
    }
}

impl SmbHost for WindowsSmbHost {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let object = format!("mapping {:?}", mapping.root);
        let root = mapping.root.clone();
        let privacy = mapping.require_privacy;
        let credential = mapping
            .credentials
            .as_ref()
            .map(|c| credential_string(&c.username, c.password.expose()));
        let code = with_namespace(NEW, NAMESPACE, move |c| {
            let class = c.get_object(CLASS).map_err(|e| wmi_error(NEW, CLASS, &e))?;
            let params = class
                .get_method("Create")
                .map_err(|e| wmi_error(NEW, CLASS, &e))?
                .ok_or_else(|| Error::new(Kind::Unimplemented, NEW, CLASS, "no Create method"))?
                .spawn_instance()
                .map_err(|e| wmi_error(NEW, CLASS, &e))?;
            let put = |name: &str, v: wmi::Variant| {
                params
                    .put_property(name, v)
                    .map_err(|e| wmi_error(NEW, format!("{CLASS} parameter {name}"), &e))
            };
            put("RemotePath", wmi::Variant::String(root.clone()))?;
            put("RequirePrivacy", wmi::Variant::Bool(privacy))?;
            if let Some(cred) = credential {
                put("Credential", wmi::Variant::String(cred))?;
            }
            let object = format!("mapping {root:?}");
            let out = c
                .exec_method(CLASS, "Create", Some(&params))
                .map_err(|e| call_error(NEW, &object, &e))?;
            return_value(NEW, &object, out)
        })?;
        if code != 0 {
            let (kind, why) = failure(code);
            return Err(Error::new(kind, NEW, &object, why));
        }
        tracing::info!(root = %mapping.root, "SMB global mapping created");
        Ok(())
    }

    fn new_smb_link(&self, remote_path: &str, local_path: &str) -> Result<()> {
        let mut target = remote_path.to_string();
        if !target.ends_with('\\') {
            target.push('\\');
        }
        if let Ok(existing) = std::fs::read_link(local_path)
            && existing.as_os_str() == std::ffi::OsStr::new(&target)
        {
            return Ok(()); // a retry of the same request
        }
        std::os::windows::fs::symlink_dir(&target, local_path).map_err(|e| {
            Error::io(
                NEW,
                format!("creating link {local_path:?} to {remote_path:?}"),
                &e,
            )
        })
    }

    fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
        let object = format!("mapping {root:?}");
        let Some(found) = list(REMOVE)?.into_iter().find(|m| m.root == root) else {
            return Err(Error::new(
                Kind::NotFound,
                REMOVE,
                &object,
                "no such SMB global mapping",
            ));
        };
        let path = found.path;
        let code = with_namespace(REMOVE, NAMESPACE, move |c| {
            let class = c
                .get_object(CLASS)
                .map_err(|e| wmi_error(REMOVE, CLASS, &e))?;
            let params = class
                .get_method("Remove")
                .map_err(|e| wmi_error(REMOVE, CLASS, &e))?
                .ok_or_else(|| Error::new(Kind::Unimplemented, REMOVE, CLASS, "no Remove method"))?
                .spawn_instance()
                .map_err(|e| wmi_error(REMOVE, CLASS, &e))?;
            params
                .put_property("Force", wmi::Variant::Bool(true))
                .map_err(|e| wmi_error(REMOVE, format!("{CLASS} parameter Force"), &e))?;
            let out = c
                .exec_method(&path, "Remove", Some(&params))
                .map_err(|e| call_error(REMOVE, &object, &e))?;
            return_value(REMOVE, &object, out)
        })?;
        if code != 0 {
            let (kind, why) = failure(code);
            return Err(Error::new(kind, REMOVE, format!("mapping {root:?}"), why));
        }
        tracing::info!(root = %root, "SMB global mapping removed");
        Ok(())
    }

    fn smb_global_mapping(&self, root: &str) -> Result<MappingState> {
        let Some(found) = list(NEW)?.into_iter().find(|m| m.root == root) else {
            return Ok(MappingState::Absent);
        };
        let ok = found.status == 0;
        let healthy = ok && accessible(root);
        let status = if ok && !healthy {
            "inaccessible".to_string()
        } else {
            status_text(found.status).to_string()
        };
        Ok(MappingState::Present(MappingInfo {
            healthy,
            status,
            // MSFT_SmbGlobalMapping does not report the user a mapping was made as.
            username: None,
        }))
    }

    fn smb_global_mappings(&self) -> Result<Vec<String>> {
        let mut roots: Vec<String> = list(NEW)?.into_iter().map(|m| m.root).collect();
        roots.sort();
        roots.dedup();
        Ok(roots)
    }

    fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<Vec<SmbLinkUse>> {
        Ok(crate::smb_scan::links_using(scan_roots, |target, _| {
            csi_proxy_core::smb::share_root_of_link_target(&target.to_string_lossy()).as_deref()
                == Some(root)
        })
        .into_iter()
        .map(|(link, target)| {
            let target = target.to_string_lossy();
            let remote = csi_proxy_core::smb::remote_of_link_target(&target)
                .unwrap_or_else(|| target.into_owned());
            SmbLinkUse { link, remote }
        })
        .collect())
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
