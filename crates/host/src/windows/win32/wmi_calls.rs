//! The seam's calls made through WMI (`wmi` crate over COM): volume format through the Storage
//! Management API, SMB global mappings, the page files. One query or method call each, as in
//! the rest of the seam; what a `ReturnValue` means is judged by the logic above.

use super::super::os::{OsError, ReturnValue, StorageDisk, Win32Result};
use csi_proxy_formats::windows_buffers::volume::wql_string;
use std::collections::HashMap;
use windows::Win32::System::Com::{
    CLSCTX_INPROC_SERVER, CoCreateInstance, CoSetProxyBlanket, EOAC_NONE, GetErrorInfo,
    RPC_C_AUTHN_LEVEL_CALL, RPC_C_IMP_LEVEL_IMPERSONATE,
};
use windows::Win32::System::Rpc::{RPC_C_AUTHN_WINNT, RPC_C_AUTHZ_NONE};
use windows::Win32::System::Wmi::{
    IWbemClassObject, IWbemLocator, IWbemServices, WBEM_FLAG_CONNECT_USE_MAX_WAIT,
    WBEM_GENERIC_FLAG_TYPE, WbemLocator,
};
use windows::core::{BSTR, HRESULT, Interface};

/// WBEM_E_FAILED: the method failed; the provider's extended error object says why.
const WBEM_E_FAILED: u32 = 0x8004_1001;

/// The WMI namespace and class of SMB global mappings.
const SMB_NAMESPACE: &str = r"ROOT\Microsoft\Windows\SMB";
const SMB_CLASS: &str = "MSFT_SmbGlobalMapping";
/// The WMI namespace of the Storage Management API (`MSFT_Volume`).
const STORAGE_NAMESPACE: &str = r"ROOT\Microsoft\Windows\Storage";

/// A `wmi` crate error as the seam's [`OsError`].
pub(super) fn wmi_os(e: &wmi::WMIError) -> OsError {
    match e {
        wmi::WMIError::HResultError { hres } => OsError::new(*hres as u32),
        // WBEM_E_NOT_FOUND: the query matched nothing.
        wmi::WMIError::ResultEmpty => OsError::new(0x8004_1002),
        other => OsError::with_message(0x8000_FFFF, format!("WMI: {other}")),
    }
}

/// An integer WMI value.
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

/// The `ReturnValue` of a method's out-parameters, as the logic judges it.
fn return_value(out: Option<wmi::IWbemClassWrapper>) -> Win32Result<ReturnValue> {
    let Some(o) = out else {
        return Ok(ReturnValue::Absent);
    };
    let v = o.get_property("ReturnValue").map_err(|e| wmi_os(&e))?;
    Ok(variant_u32(&v).map_or_else(
        || ReturnValue::Unexpected(format!("{v:?}")),
        ReturnValue::Code,
    ))
}

/// A `windows` crate error as the seam's [`OsError`].
fn com_os(e: &windows::core::Error) -> OsError {
    OsError::new(e.code().0 as u32)
}

/// `CoCreateInstance(CLSID_WbemLocator)` and `IWbemLocator::ConnectServer(namespace)` on this
/// WMI thread (COM is initialised by its `wmi` connection), then `CoSetProxyBlanket` on the
/// services proxy: a services pointer of our own, as the `wmi` crate drops the error
/// information a failed `ExecMethod` leaves. (The crate's own connections set the blanket.)
fn services(namespace: &str) -> Win32Result<IWbemServices> {
    // CoCreateInstance: "Creates and default-initializes a single object of the class
    // associated with a specified CLSID."
    // SAFETY: a CLSID constant, no aggregation; COM is initialised on this thread.
    let locator: IWbemLocator =
        unsafe { CoCreateInstance(&WbemLocator, None, CLSCTX_INPROC_SERVER) }
            .map_err(|e| com_os(&e))?;
    // IWbemLocator::ConnectServer: "creates a connection through DCOM to a WMI namespace";
    // empty user, password, locale and authority mean the current security context.
    // SAFETY: every argument is an owned BSTR or None, valid for the call.
    let services = unsafe {
        locator.ConnectServer(
            &BSTR::from(namespace),
            &BSTR::new(),
            &BSTR::new(),
            &BSTR::new(),
            WBEM_FLAG_CONNECT_USE_MAX_WAIT.0,
            &BSTR::new(),
            None,
        )
    }
    .map_err(|e| com_os(&e))?;
    // "Creating a WMI Application Using C++", step 5: after ConnectServer, "set the security
    // levels on the WMI connection" with CoSetProxyBlanket, so calls through the proxy
    // impersonate the caller at packet-call authentication, whatever the process-wide
    // CoInitializeSecurity said.
    // SAFETY: `services` is a live interface pointer; the other arguments are constants or None.
    unsafe {
        CoSetProxyBlanket(
            &services,
            RPC_C_AUTHN_WINNT,
            RPC_C_AUTHZ_NONE,
            None,
            RPC_C_AUTHN_LEVEL_CALL,
            RPC_C_IMP_LEVEL_IMPERSONATE,
            None,
            EOAC_NONE,
        )
    }
    .map_err(|e| com_os(&e))?;
    Ok(services)
}

/// The Win32 code in the extended error object a failed WMI call left on this thread
/// (`GetErrorInfo`), read from `error_Code` (`MSFT_WmiError`, which the Storage and SMB
/// providers use); `None` when there is none.
fn extended_code(failure: windows::core::Error) -> Option<u32> {
    // The `windows` error holds the error information it took from the thread; handing it
    // back as an HRESULT puts it on the thread again (SetErrorInfo), for GetErrorInfo.
    let _: HRESULT = failure.into();
    // IWbemServices::ExecMethod: "On failure, you can obtain any available information from
    // the COM function GetErrorInfo." The object is an IWbemClassObject (the error instance).
    // SAFETY: the reserved argument is 0, as the page requires.
    let info = unsafe { GetErrorInfo(0) }.ok()?;
    let object: IWbemClassObject = info.cast().ok()?;
    let code = wmi::IWbemClassWrapper::new(object)
        .get_property("error_Code")
        .ok()?;
    variant_u32(&code).filter(|&c| c != 0)
}

/// `IWbemServices::ExecMethod(path, method, in-parameters)` through a connection of our own
/// to `namespace`: the out-parameters; a WBEM_E_FAILED carries the Win32 code of the
/// provider's extended error object, when it set one.
fn exec_method(
    namespace: &str,
    path: &str,
    method: &str,
    params: &wmi::IWbemClassWrapper,
) -> Win32Result<Option<wmi::IWbemClassWrapper>> {
    let svc = services(namespace)?;
    let mut out: Option<IWbemClassObject> = None;
    // SAFETY: owned BSTRs, a live in-parameters object and an out slot that outlive the call.
    let called = unsafe {
        svc.ExecMethod(
            &BSTR::from(path),
            &BSTR::from(method),
            WBEM_GENERIC_FLAG_TYPE(0),
            None,
            &params.inner,
            Some(&mut out),
            None,
        )
    };
    match called {
        Ok(()) => Ok(out.map(wmi::IWbemClassWrapper::new)),
        Err(e) => {
            let code = e.code().0 as u32;
            let text = e.message();
            match extended_code(e) {
                Some(ext) if code == WBEM_E_FAILED => Err(OsError::with_extended(code, ext, text)),
                _ => Err(OsError::new(code)),
            }
        }
    }
}

/// Calls WMI method `method` of `class` on the object at `path` (the class itself for a static
/// method) with these in-parameters, and returns its `ReturnValue`.
fn call_method(
    c: &wmi::WMIConnection,
    namespace: &str,
    class: &str,
    path: &str,
    method: &str,
    params: Vec<(&str, wmi::Variant)>,
) -> Win32Result<ReturnValue> {
    let inp = c
        .get_object(class)
        .map_err(|e| wmi_os(&e))?
        .get_method(method)
        .map_err(|e| wmi_os(&e))?
        .ok_or_else(|| OsError::with_message(0x8004_1055, format!("{class} has no {method}")))?
        .spawn_instance()
        .map_err(|e| wmi_os(&e))?;
    for (name, value) in params {
        inp.put_property(name, value).map_err(|e| wmi_os(&e))?;
    }
    return_value(exec_method(namespace, path, method, &inp)?)
}

pub(super) fn page_files() -> Win32Result<Vec<String>> {
    super::super::wmi::run_in(r"ROOT\CIMV2", |c| {
        let rows: Vec<HashMap<String, wmi::Variant>> = c
            .raw_query("SELECT Name FROM Win32_PageFileUsage")
            .map_err(|e| wmi_os(&e))?;
        Ok(rows
            .iter()
            .filter_map(|r| match r.get("Name") {
                Some(wmi::Variant::String(s)) => Some(s.clone()),
                _ => None,
            })
            .collect())
    })
}

/// A WMI boolean; anything else (NULL included) is false.
fn variant_bool(v: Option<&wmi::Variant>) -> bool {
    matches!(v, Some(wmi::Variant::Bool(true)))
}

/// `SELECT Number, IsBoot, IsSystem, IsClustered FROM MSFT_Disk`. A row without a number (a
/// disk the provider cannot number) is left out: it has no `\\.\PhysicalDriveN` to act on.
pub(super) fn storage_disks() -> Win32Result<Vec<StorageDisk>> {
    super::super::wmi::run_in(STORAGE_NAMESPACE, |c| {
        let rows: Vec<HashMap<String, wmi::Variant>> = c
            .raw_query("SELECT Number, IsBoot, IsSystem, IsClustered FROM MSFT_Disk")
            .map_err(|e| wmi_os(&e))?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(StorageDisk {
                    number: variant_u32(r.get("Number")?)?,
                    is_boot: variant_bool(r.get("IsBoot")),
                    is_system: variant_bool(r.get("IsSystem")),
                    is_clustered: variant_bool(r.get("IsClustered")),
                })
            })
            .collect())
    })
}

/// `SELECT DeviceId, CannotPoolReason FROM MSFT_PhysicalDisk`.
pub(super) fn physical_disks() -> Win32Result<Vec<(String, Vec<u16>)>> {
    super::super::wmi::run_in(STORAGE_NAMESPACE, |c| {
        let rows: Vec<HashMap<String, wmi::Variant>> = c
            .raw_query("SELECT DeviceId, CannotPoolReason FROM MSFT_PhysicalDisk")
            .map_err(|e| wmi_os(&e))?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let Some(wmi::Variant::String(id)) = r.get("DeviceId") else {
                    return None;
                };
                let reasons = match r.get("CannotPoolReason") {
                    Some(wmi::Variant::Array(a)) => a
                        .iter()
                        .filter_map(variant_u32)
                        .filter_map(|n| u16::try_from(n).ok())
                        .collect(),
                    _ => Vec::new(),
                };
                Some((id.clone(), reasons))
            })
            .collect())
    })
}

pub(super) fn format_ntfs(volume: &str) -> Win32Result<ReturnValue> {
    const CLASS: &str = "MSFT_Volume";
    let query = format!(
        "SELECT * FROM {CLASS} WHERE UniqueId = {}",
        wql_string(volume)
    );
    super::super::wmi::run_in(STORAGE_NAMESPACE, move |c| {
        let row = c
            .exec_query(query)
            .map_err(|e| wmi_os(&e))?
            .next()
            .ok_or_else(|| OsError::new(0x8004_1002))?
            .map_err(|e| wmi_os(&e))?;
        let path = row.path().map_err(|e| wmi_os(&e))?;
        // As upstream: NTFS, no label, quick (Full = false), Force (the caller checked the
        // volume is mounted nowhere).
        call_method(
            c,
            STORAGE_NAMESPACE,
            CLASS,
            &path,
            "Format",
            vec![
                ("FileSystem", wmi::Variant::String("NTFS".into())),
                ("FileSystemLabel", wmi::Variant::String(String::new())),
                ("Full", wmi::Variant::Bool(false)),
                ("Force", wmi::Variant::Bool(true)),
            ],
        )
    })
}

/// `MSFT_StorageSetting.UpdateHostStorageCache()`, a static method: called on the class.
pub(super) fn update_host_storage_cache() -> Win32Result<ReturnValue> {
    const CLASS: &str = "MSFT_StorageSetting";
    super::super::wmi::run_in(STORAGE_NAMESPACE, |c| {
        call_method(
            c,
            STORAGE_NAMESPACE,
            CLASS,
            CLASS,
            "UpdateHostStorageCache",
            Vec::new(),
        )
    })
}

pub(super) fn smb_global_mappings() -> Win32Result<Vec<(String, u32)>> {
    super::super::wmi::run_in(SMB_NAMESPACE, |c| {
        let rows = c
            .exec_query(format!("SELECT * FROM {SMB_CLASS}"))
            .map_err(|e| wmi_os(&e))?;
        let mut out = Vec::new();
        for row in rows {
            let row = row.map_err(|e| wmi_os(&e))?;
            let wmi::Variant::String(root) =
                row.get_property("RemotePath").map_err(|e| wmi_os(&e))?
            else {
                continue;
            };
            let status = row
                .get_property("Status")
                .ok()
                .and_then(|v| variant_u32(&v))
                .unwrap_or(u32::MAX);
            out.push((root, status));
        }
        Ok(out)
    })
}

pub(super) fn smb_create_global_mapping(
    remote: &str,
    require_privacy: bool,
    credential: Option<&str>,
) -> Win32Result<ReturnValue> {
    let remote = remote.to_string();
    let credential = credential.map(str::to_string);
    super::super::wmi::run_in(SMB_NAMESPACE, move |c| {
        let mut params = vec![
            ("RemotePath", wmi::Variant::String(remote)),
            ("RequirePrivacy", wmi::Variant::Bool(require_privacy)),
        ];
        // The credential travels only in this in-parameters object.
        if let Some(cred) = credential {
            params.push(("Credential", wmi::Variant::String(cred)));
        }
        call_method(c, SMB_NAMESPACE, SMB_CLASS, SMB_CLASS, "Create", params)
    })
}

pub(super) fn smb_remove_global_mapping(remote: &str) -> Win32Result<ReturnValue> {
    let remote = remote.to_string();
    super::super::wmi::run_in(SMB_NAMESPACE, move |c| {
        // Nothing from a request goes into a query string: every mapping is listed and the
        // one is picked here.
        let rows = c
            .exec_query(format!("SELECT * FROM {SMB_CLASS}"))
            .map_err(|e| wmi_os(&e))?;
        let mut path = None;
        for row in rows {
            let row = row.map_err(|e| wmi_os(&e))?;
            if let Ok(wmi::Variant::String(r)) = row.get_property("RemotePath")
                && r == remote
            {
                path = Some(row.path().map_err(|e| wmi_os(&e))?);
                break;
            }
        }
        let path = path.ok_or_else(|| OsError::new(0x8004_1002))?;
        call_method(
            c,
            SMB_NAMESPACE,
            SMB_CLASS,
            &path,
            "Remove",
            vec![("Force", wmi::Variant::Bool(true))],
        )
    })
}

#[cfg(test)]
mod tests {
    /// Our own services pointer connects and takes its proxy blanket (under wine in CI: its
    /// WMI serves ROOT\CIMV2); a blanket the proxy refused would fail every ExecMethod.
    #[test]
    fn our_own_wmi_connection_sets_its_proxy_blanket() {
        // The crate's connection initialises COM on this thread, as the WMI thread's does.
        let _com = wmi::WMIConnection::new().expect("WMI is reachable");
        super::services(r"ROOT\CIMV2").expect("ConnectServer and CoSetProxyBlanket");
    }
}
