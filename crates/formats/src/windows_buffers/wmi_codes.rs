//! WMI and Storage Management API result codes: which [`Kind`] each one is, and its meaning.
//!
//! Two families are mapped:
//! * HRESULTs a WMI call fails with (`WBEM_E_*`, documented in "WMI Error Constants" /
//!   `WbemErrorEnum`, plus the few generic COM/RPC ones a local WMI call can return);
//! * the `UInt32` return value of Storage Management API methods (`MSFT_Volume.Format`,
//!   `MSFT_Disk.Online`, ...), documented per method ("Success (0), Not Supported (1), ...").

use csi_proxy_core::Kind;

/// `(HRESULT, name, kind)` of the HRESULTs this daemon can meet from local WMI calls.
const HRESULTS: &[(u32, &str, Kind)] = &[
    // Our own answer when a WMI call outlives its caller's wait (the call may still run).
    (0x8001_011F, "RPC_E_TIMEOUT", Kind::Unavailable),
    (0x8004_1001, "WBEM_E_FAILED", Kind::Internal),
    (0x8004_1002, "WBEM_E_NOT_FOUND", Kind::NotFound),
    (0x8004_1003, "WBEM_E_ACCESS_DENIED", Kind::PermissionDenied),
    (0x8004_1004, "WBEM_E_PROVIDER_FAILURE", Kind::Internal),
    (0x8004_1005, "WBEM_E_TYPE_MISMATCH", Kind::Internal),
    (0x8004_1006, "WBEM_E_OUT_OF_MEMORY", Kind::Unavailable),
    (
        0x8004_1008,
        "WBEM_E_INVALID_PARAMETER",
        Kind::InvalidArgument,
    ),
    (0x8004_1009, "WBEM_E_NOT_AVAILABLE", Kind::Unavailable),
    (0x8004_100C, "WBEM_E_NOT_SUPPORTED", Kind::Unimplemented),
    // The namespace, class or provider does not exist on this host (older Windows, Server Core
    // without the feature, Wine): the operation cannot be done here at all.
    (0x8004_100E, "WBEM_E_INVALID_NAMESPACE", Kind::Unimplemented),
    (0x8004_100F, "WBEM_E_INVALID_OBJECT", Kind::InvalidArgument),
    (0x8004_1010, "WBEM_E_INVALID_CLASS", Kind::Unimplemented),
    (
        0x8004_1011,
        "WBEM_E_PROVIDER_NOT_FOUND",
        Kind::Unimplemented,
    ),
    (
        0x8004_1013,
        "WBEM_E_PROVIDER_LOAD_FAILURE",
        Kind::Unavailable,
    ),
    (
        0x8004_1014,
        "WBEM_E_INITIALIZATION_FAILURE",
        Kind::Unavailable,
    ),
    (0x8004_1015, "WBEM_E_TRANSPORT_FAILURE", Kind::Unavailable),
    (
        0x8004_1016,
        "WBEM_E_INVALID_OPERATION",
        Kind::FailedPrecondition,
    ),
    (0x8004_1017, "WBEM_E_INVALID_QUERY", Kind::Internal),
    (0x8004_1019, "WBEM_E_ALREADY_EXISTS", Kind::AlreadyExists),
    (0x8004_1021, "WBEM_E_INVALID_SYNTAX", Kind::Internal),
    (
        0x8004_1024,
        "WBEM_E_PROVIDER_NOT_CAPABLE",
        Kind::Unimplemented,
    ),
    (0x8004_1032, "WBEM_E_CALL_CANCELLED", Kind::Unavailable),
    (0x8004_1033, "WBEM_E_SHUTTING_DOWN", Kind::Unavailable),
    (0x8004_0154, "REGDB_E_CLASSNOTREG", Kind::Unimplemented),
    (0x8007_0005, "E_ACCESSDENIED", Kind::PermissionDenied),
    (0x8007_0057, "E_INVALIDARG", Kind::InvalidArgument),
    (0x8007_06BA, "RPC_S_SERVER_UNAVAILABLE", Kind::Unavailable),
    (0x8001_0108, "RPC_E_DISCONNECTED", Kind::Unavailable),
    (0x8007_06BE, "RPC_S_CALL_FAILED", Kind::Unavailable),
    (0x8001_0007, "RPC_E_SERVER_DIED", Kind::Unavailable),
    (0x8001_0012, "RPC_E_SERVER_DIED_DNE", Kind::Unavailable),
];

/// The kind of a failed WMI call's HRESULT; unknown codes are INTERNAL.
pub fn hresult_kind(hres: i32) -> Kind {
    let code = hres as u32;
    HRESULTS
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(Kind::Internal, |(_, _, k)| *k)
}

/// `"WBEM_E_NOT_FOUND (0x80041002)"`, or just the hex for codes without a name here.
pub fn describe_hresult(hres: i32) -> String {
    let code = hres as u32;
    match HRESULTS.iter().find(|(c, _, _)| *c == code) {
        Some((_, name, _)) => format!("{name} ({code:#010X})"),
        None => format!("HRESULT {code:#010X}"),
    }
}

/// `(return value, meaning, kind)` of the Storage Management API methods' documented return
/// values (shared by `MSFT_Disk`, `MSFT_Partition` and `MSFT_Volume` methods). The numbers and
/// meanings are those of "Storage Management API Common Return Codes"
/// (learn.microsoft.com/windows-hardware/drivers/storage/storage-management-api-common-return-codes),
/// except 41018, which the method pages (`MSFT_Disk.Online`, `Offline`, `Initialize`) list
/// instead of the common page's 40018 for the same cause. A wrong number here turns a precise
/// refusal into INTERNAL "return value N" on a real node, so the test below checks each row
/// against the page's own wording.
const STORAGE_RETURNS: &[(u32, &str, Kind)] = &[
    (1, "Not Supported", Kind::Unimplemented),
    (2, "Unspecified Error", Kind::Internal),
    (3, "Timeout", Kind::DeadlineExceeded),
    (4, "Failed", Kind::Internal),
    (5, "Invalid Parameter", Kind::InvalidArgument),
    (6, "In Use / Disk is in use", Kind::FailedPrecondition),
    (
        7,
        "This command is not supported on x86 running in an x64 environment",
        Kind::Unimplemented,
    ),
    (8, "Object Not Found", Kind::NotFound),
    (4099, "The device is busy", Kind::Unavailable),
    (
        40000,
        "Not enough available capacity",
        Kind::ResourceExhausted,
    ),
    (40001, "Access denied", Kind::PermissionDenied),
    (
        40002,
        "There are not enough resources to complete the operation",
        Kind::Unavailable,
    ),
    (40003, "Cache out of date", Kind::Unavailable),
    (
        40004,
        "An unexpected I/O error has occurred",
        Kind::Internal,
    ),
    (
        40007,
        "The request failed due to a fatal device hardware error",
        Kind::Internal,
    ),
    (
        40018,
        "The specified object is managed by the Microsoft Failover Clustering component",
        Kind::FailedPrecondition,
    ),
    (
        41000,
        "The disk has not been initialized",
        Kind::FailedPrecondition,
    ),
    (
        41001,
        "The disk has already been initialized",
        Kind::AlreadyExists,
    ),
    (41002, "The disk is read only", Kind::FailedPrecondition),
    (41003, "The disk is offline", Kind::FailedPrecondition),
    (
        41004,
        "The disk's partition limit has been reached",
        Kind::ResourceExhausted,
    ),
    (
        41009,
        "The operation is not supported on a critical disk",
        Kind::FailedPrecondition,
    ),
    (
        41018,
        "The specified object is managed by the Microsoft Failover Clustering component",
        Kind::FailedPrecondition,
    ),
    (
        42002,
        "The requested access path is already in use",
        Kind::AlreadyExists,
    ),
    (
        42010,
        "This operation is not permitted on the system or critical partitions",
        Kind::FailedPrecondition,
    ),
    (
        43000,
        "The specified cluster size is invalid",
        Kind::InvalidArgument,
    ),
    (
        43001,
        "The specified file system is not supported",
        Kind::Unimplemented,
    ),
    (
        43002,
        "The volume cannot be quick formatted",
        Kind::FailedPrecondition,
    ),
    (
        43003,
        "The number of clusters exceeds 32 bits",
        Kind::FailedPrecondition,
    ),
    (
        43005,
        "The cluster size must be a multiple of the disk's physical sector size",
        Kind::InvalidArgument,
    ),
    (
        43006,
        "Cannot perform the requested operation when the drive is read only",
        Kind::FailedPrecondition,
    ),
];

/// The outcome of a Storage Management API method's return value: `Ok` for 0 (Success), else
/// the kind and the documented meaning.
pub fn storage_return(value: u32) -> Result<(), (Kind, String)> {
    if value == 0 {
        return Ok(());
    }
    Err(match STORAGE_RETURNS.iter().find(|(v, _, _)| *v == value) {
        Some((_, meaning, kind)) => (*kind, format!("{meaning} (return value {value})")),
        None => (Kind::Internal, format!("return value {value}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hresults_map_to_kinds_and_names() {
        // WBEM_E_NOT_FOUND as a signed HRESULT, the way COM hands it over.
        assert_eq!(hresult_kind(0x8004_1002_u32 as i32), Kind::NotFound);
        assert_eq!(hresult_kind(-2147217394), Kind::Unimplemented); // wbemErrInvalidNamespace
        assert_eq!(hresult_kind(0x8004_1010_u32 as i32), Kind::Unimplemented);
        assert_eq!(hresult_kind(0x8007_0005_u32 as i32), Kind::PermissionDenied);
        assert_eq!(hresult_kind(0x1234), Kind::Internal);
        assert_eq!(
            describe_hresult(0x8004_100E_u32 as i32),
            "WBEM_E_INVALID_NAMESPACE (0x8004100E)"
        );
        assert_eq!(
            describe_hresult(0x8000_4005_u32 as i32),
            "HRESULT 0x80004005"
        );
    }

    #[test]
    fn storage_return_values() {
        assert_eq!(storage_return(0), Ok(()));
        let (kind, msg) = storage_return(42010).unwrap_err();
        assert_eq!(kind, Kind::FailedPrecondition);
        assert!(
            msg.contains("system or critical") && msg.contains("42010"),
            "{msg}"
        );
        assert_eq!(storage_return(40001).unwrap_err().0, Kind::PermissionDenied);
        assert_eq!(
            storage_return(99).unwrap_err(),
            (Kind::Internal, "return value 99".into())
        );
    }

    #[test]
    fn no_code_is_listed_twice() {
        let mut h: Vec<u32> = HRESULTS.iter().map(|e| e.0).collect();
        h.sort_unstable();
        h.dedup();
        assert_eq!(h.len(), HRESULTS.len());
        let mut s: Vec<u32> = STORAGE_RETURNS.iter().map(|e| e.0).collect();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), STORAGE_RETURNS.len());
    }

    /// Each code the daemon meets in practice means what the Storage Management API's common
    /// return codes page says: the table once had every disk code shifted by one (41001 read
    /// only, 41002 offline) and no 43006, so a read-only disk's format was INTERNAL.
    #[test]
    fn codes_mean_what_the_storage_management_page_says() {
        for (code, words, kind) in [
            (41000, "not been initialized", Kind::FailedPrecondition),
            (41001, "already been initialized", Kind::AlreadyExists),
            (41002, "read only", Kind::FailedPrecondition),
            (41003, "offline", Kind::FailedPrecondition),
            (43006, "drive is read only", Kind::FailedPrecondition),
            (40003, "Cache out of date", Kind::Unavailable),
            (6, "in use", Kind::FailedPrecondition),
        ] {
            let (k, msg) = storage_return(code).unwrap_err();
            assert_eq!(k, kind, "{code}: {msg}");
            assert!(msg.contains(words), "{code}: {msg}");
        }
    }
}
