//! Pure parts of the Windows iSCSI host: the `ISCSI_LOGIN_OPTIONS` a login is made with, the
//! meaning of the `ISDSC_STATUS` codes the initiator API (`iscsidsc.dll`) returns, and the
//! double-NUL-terminated string lists it fills in.
//!
//! Nothing here calls the OS, so it compiles everywhere and is unit-tested on Linux; the Windows
//! host in `csi_proxy_host::windows::iscsi` only moves these values in and out of the DLL.

use csi_proxy_core::Kind;
use csi_proxy_core::iscsi::{AuthType, Chap, TargetPortal};

/// `ISCSI_LOGIN_OPTIONS.Version`: the only version documented (`ISCSI_LOGIN_OPTIONS_VERSION`).
pub const LOGIN_OPTIONS_VERSION: u32 = 0;
/// `ISCSI_LOGIN_OPTIONS_INFO_SPECIFIED` bit: `Username`/`UsernameLength` are set.
pub const LOGIN_OPTIONS_USERNAME: u32 = 0x20;
/// `ISCSI_LOGIN_OPTIONS_INFO_SPECIFIED` bit: `Password`/`PasswordLength` are set.
pub const LOGIN_OPTIONS_PASSWORD: u32 = 0x40;
/// `ISCSI_LOGIN_OPTIONS_INFO_SPECIFIED` bit: `AuthType` is set.
pub const LOGIN_OPTIONS_AUTH_TYPE: u32 = 0x80;

/// `ISCSI_LOGIN_OPTIONS.LoginFlags` bit ISCSI_LOGIN_FLAG_MULTIPATH_ENABLED (0x2, as
/// VDS_ILF_MULTIPATH_ENABLED): "the login is allowed to proceed and create a new login session
/// even if there is already a login session to the target. Note: Multipathing software must be
/// present or else data corruption may occur." Only the selftest's second path sets it.
pub const LOGIN_FLAG_MULTIPATH_ENABLED: u32 = 0x2;

/// `ISCSI_AUTH_TYPES`: no authentication.
pub const ISCSI_NO_AUTH_TYPE: i32 = 0;
/// `ISCSI_AUTH_TYPES`: one-way CHAP (the target authenticates the initiator).
pub const ISCSI_CHAP_AUTH_TYPE: i32 = 1;
/// `ISCSI_AUTH_TYPES`: mutual CHAP (the initiator also authenticates the target with the secret
/// set by `SetIScsiInitiatorCHAPSharedSecret`).
pub const ISCSI_MUTUAL_CHAP_AUTH_TYPE: i32 = 2;

/// `ISCSI_ALL_INITIATOR_PORTS` / `ISCSI_ANY_INITIATOR_PORT` (`(ULONG)-1` in `iscsidsc.h`).
pub const ISCSI_ALL_INITIATOR_PORTS: u32 = u32::MAX;

/// The longest portal address `ISCSI_TARGET_PORTALW.Address` holds, without its NUL
/// (`MAX_ISCSI_PORTAL_ADDRESS_LEN` is 256 WCHARs including it).
pub const MAX_PORTAL_ADDRESS_CHARS: usize = 255;
/// The longest target name the API takes, without its NUL (`MAX_ISCSI_NAME_LEN`).
pub const MAX_ISCSI_NAME_CHARS: usize = 223;

/// `FILE_DEVICE_DISK`: the `STORAGE_DEVICE_NUMBER.DeviceType` of a disk (a LUN can also be a
/// tape or a changer, which the disk group cannot use).
pub const FILE_DEVICE_DISK: u32 = 0x7;

/// Win32 `ERROR_SUCCESS`.
pub const ERROR_SUCCESS: u32 = 0;
/// Win32 `ERROR_INSUFFICIENT_BUFFER`: the size/count out-parameter says how much is needed.
pub const ERROR_INSUFFICIENT_BUFFER: u32 = 122;

/// `ISDSC_*` codes (`iscsierr.h`) this host treats specially.
pub mod isdsc {
    /// A connection to the target could not be made.
    pub const CONNECTION_FAILED: u32 = 0xEFFF_0003;
    /// The session already exists.
    pub const SESSION_ALREADY_EXISTS: u32 = 0xEFFF_0016;
    /// The target already exists (static target or portal).
    pub const TARGET_ALREADY_EXISTS: u32 = 0xEFFF_0018;
    /// The session ID is not (or no longer) valid.
    pub const INVALID_SESSION_ID: u32 = 0xEFFF_001C;
    /// The target is not in the initiator's list of discovered targets.
    pub const TARGET_NOT_FOUND: u32 = 0xEFFF_0029;
    /// The send-targets portal is registered already.
    pub const TARGET_PORTAL_ALREADY_EXISTS: u32 = 0xEFFF_0032;
    /// The target address is registered already.
    pub const TARGET_ADDRESS_ALREADY_EXISTS: u32 = 0xEFFF_0033;
    /// The Microsoft iSCSI Initiator service is not running.
    pub const SERVICE_NOT_RUNNING: u32 = 0xEFFF_003E;
    /// The target has a session already.
    pub const TARGET_ALREADY_LOGGED_IN: u32 = 0xEFFF_003F;
    /// A device of the session is in use.
    pub const DEVICE_BUSY_ON_SESSION: u32 = 0xEFFF_0040;
    /// The portal is not registered.
    pub const PORTAL_NOT_FOUND: u32 = 0xEFFF_0043;
}

/// `(code, kind, meaning)` of the `ISDSC_STATUS` values (`iscsierr.h`, also listed under
/// "ISCSI_STATUS_QUALIFIERS") and the Win32 codes the initiator API returns. Meanings are this
/// project's wording; none carries request data, so no secret can reach a message through them.
const CODES: &[(u32, Kind, &str)] = &[
    (5, Kind::PermissionDenied, "access denied"),
    (87, Kind::InvalidArgument, "the parameter is incorrect"),
    (1460, Kind::Unavailable, "the operation timed out"),
    (0xEFFF_0001, Kind::Internal, "non-specific iSCSI error"),
    (0xEFFF_0002, Kind::Unavailable, "the login failed"),
    (
        isdsc::CONNECTION_FAILED,
        Kind::Unavailable,
        "could not connect to the target portal",
    ),
    (
        0xEFFF_0005,
        Kind::NotFound,
        "the initiator node was not found",
    ),
    (0xEFFF_0008, Kind::Internal, "initiator error"),
    (
        0xEFFF_0009,
        Kind::PermissionDenied,
        "the target rejected the authentication",
    ),
    (
        0xEFFF_000A,
        Kind::PermissionDenied,
        "the target refused access to the initiator",
    ),
    (0xEFFF_000B, Kind::NotFound, "not found"),
    (0xEFFF_000C, Kind::NotFound, "the target was removed"),
    (0xEFFF_000F, Kind::InvalidArgument, "a parameter is missing"),
    (
        0xEFFF_0012,
        Kind::Unavailable,
        "the target reported an error",
    ),
    (
        0xEFFF_0013,
        Kind::Unavailable,
        "the target service is unavailable",
    ),
    (0xEFFF_0014, Kind::Unavailable, "out of resources"),
    (
        0xEFFF_0015,
        Kind::AlreadyExists,
        "the connection already exists",
    ),
    (
        isdsc::SESSION_ALREADY_EXISTS,
        Kind::AlreadyExists,
        "the session already exists",
    ),
    (
        isdsc::TARGET_ALREADY_EXISTS,
        Kind::AlreadyExists,
        "the target already exists",
    ),
    (
        isdsc::INVALID_SESSION_ID,
        Kind::NotFound,
        "the session no longer exists",
    ),
    (0xEFFF_001F, Kind::Aborted, "the session is busy"),
    (
        0xEFFF_0022,
        Kind::Unavailable,
        "logging on to the target failed",
    ),
    (
        0xEFFF_0023,
        Kind::Unavailable,
        "sending to the target failed",
    ),
    (0xEFFF_0024, Kind::Unavailable, "transport error"),
    (
        isdsc::TARGET_NOT_FOUND,
        Kind::NotFound,
        "the target is not among the discovered targets",
    ),
    (
        0xEFFF_002A,
        Kind::InvalidArgument,
        "the login user information is malformed",
    ),
    (0xEFFF_002D, Kind::InvalidArgument, "invalid port number"),
    (
        isdsc::TARGET_PORTAL_ALREADY_EXISTS,
        Kind::AlreadyExists,
        "the target portal is registered already",
    ),
    (
        isdsc::TARGET_ADDRESS_ALREADY_EXISTS,
        Kind::AlreadyExists,
        "the target address is registered already",
    ),
    (
        0xEFFF_0034,
        Kind::FailedPrecondition,
        "no authentication information is available",
    ),
    (
        0xEFFF_0039,
        Kind::Unavailable,
        "the iSCSI initiator service did not respond",
    ),
    (
        isdsc::SERVICE_NOT_RUNNING,
        Kind::FailedPrecondition,
        "the Microsoft iSCSI Initiator service (MSiSCSI) is not running",
    ),
    (
        isdsc::TARGET_ALREADY_LOGGED_IN,
        Kind::AlreadyExists,
        "the target is logged in already",
    ),
    (
        isdsc::DEVICE_BUSY_ON_SESSION,
        Kind::FailedPrecondition,
        "a device of the session is in use",
    ),
    (
        isdsc::PORTAL_NOT_FOUND,
        Kind::NotFound,
        "the target portal is not registered",
    ),
    (0xEFFF_0044, Kind::NotFound, "the initiator was not found"),
    (
        0xEFFF_004A,
        Kind::InvalidArgument,
        "the CHAP secret is not valid (12 to 16 bytes)",
    ),
    (
        0xEFFF_004B,
        Kind::InvalidArgument,
        "the target CHAP secret is not valid (12 to 16 bytes)",
    ),
    (
        0xEFFF_004C,
        Kind::InvalidArgument,
        "the initiator CHAP secret is not valid (12 to 16 bytes)",
    ),
    (0xEFFF_004D, Kind::InvalidArgument, "invalid CHAP user name"),
    (
        0xEFFF_004E,
        Kind::InvalidArgument,
        "invalid logon authentication type",
    ),
    (0xEFFF_0051, Kind::InvalidArgument, "invalid iSCSI name"),
    (0xEFFF_0056, Kind::InvalidArgument, "invalid parameter"),
    (
        0xEFFF_005F,
        Kind::Unavailable,
        "the portal's DNS name could not be resolved",
    ),
    (0xEFFF_0060, Kind::Unavailable, "no connection is available"),
    (
        0xEFFF_0065,
        Kind::PermissionDenied,
        "restricted by group policy",
    ),
];

/// Whether `code` is success or a warning (`ISDSC_STATUS` severity 2, `0xA…`, e.g.
/// `ISDSC_SHORT_CHAP_SECRET` or `ISDSC_OPERATION_REQUIRES_REBOOT`): the operation was done.
pub fn succeeded(code: u32) -> bool {
    code == ERROR_SUCCESS || code >> 30 == 0b10
}

/// The kind and wording of a failed initiator call returning `code`, e.g.
/// `"the target rejected the authentication [0xefff0009]"`.
pub fn failure(code: u32) -> (Kind, String) {
    match CODES.iter().find(|(c, _, _)| *c == code) {
        Some((_, kind, what)) => (*kind, format!("{what} [{code:#x}]")),
        None => (Kind::Internal, format!("iSCSI initiator error [{code:#x}]")),
    }
}

/// The strings of a list of NUL-terminated UTF-16 strings ended by an empty one (the
/// `REG_MULTI_SZ` layout `ReportIScsiTargetsW` fills in). A list not properly ended stops at
/// the buffer's end; empty strings inside are the terminator.
pub fn parse_multi_sz(buf: &[u16]) -> Vec<String> {
    buf.split(|&c| c == 0)
        .take_while(|s| !s.is_empty())
        .map(String::from_utf16_lossy)
        .collect()
}

/// `TARGET_INFORMATION_CLASS` `DiscoveryMechanisms`: the mechanisms a target was discovered by.
pub const TARGET_INFO_DISCOVERY_MECHANISMS: i32 = 2;

/// The portal in one discovery-mechanism string of a target found by SendTargets, e.g.
/// `SendTargets:*10.0.0.5 0003260 Root\ISCSIPRT\0000_0` (address, then the port written with
/// leading zeros, then the initiator). `None` when `m` is not of that form.
pub fn send_targets_portal(m: &str) -> Option<(String, u16)> {
    const PREFIX: &str = "sendtargets:";
    if !m
        .get(..PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
    {
        return None;
    }
    let rest = m[PREFIX.len()..].trim_start_matches('*');
    let mut words = rest.split_whitespace();
    let address = words.next()?;
    let port = words.next()?.parse::<u16>().ok()?;
    Some((address.to_string(), port))
}

/// Whether a target with these discovery mechanisms was found through `portal`. A target the
/// initiator gives no mechanism for, or one whose SendTargets entry is not in the known form,
/// is kept (better one target too many than a missing one); one found only through other portals
/// or other mechanisms (iSNS, HBA) is not.
pub fn discovered_through(mechanisms: &[String], portal: &TargetPortal) -> bool {
    if mechanisms.is_empty() {
        return true;
    }
    mechanisms.iter().any(|m| {
        let is_send_targets = m
            .get(..12)
            .is_some_and(|p| p.eq_ignore_ascii_case("sendtargets:"));
        match send_targets_portal(m) {
            Some((address, port)) => is_portal(&address, port, portal),
            None => is_send_targets,
        }
    })
}

/// Whether an address the initiator reports is the requested one: host names compare
/// case-insensitively and an IPv6 address may come with or without brackets.
pub fn same_address(reported: &str, requested: &str) -> bool {
    let strip = |s: &str| {
        s.trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase()
    };
    strip(reported) == strip(requested)
}

/// Whether a reported address names no host: empty, or the unspecified address of IPv4 or
/// IPv6 (what a connection being re-established may report instead of its portal's).
pub fn unspecified_address(reported: &str) -> bool {
    let a = reported
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']');
    a.is_empty()
        || a.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified())
}

/// Whether a reported `(address, port)` is `portal`.
pub fn is_portal(address: &str, port: u16, portal: &TargetPortal) -> bool {
    port == portal.port && same_address(address, &portal.address)
}

/// The portal address as UTF-16 for `ISCSI_TARGET_PORTALW.Address`, or why it does not fit.
pub fn portal_address(portal: &TargetPortal) -> Result<Vec<u16>, String> {
    let w: Vec<u16> = portal.address.encode_utf16().collect();
    if w.len() > MAX_PORTAL_ADDRESS_CHARS {
        return Err(format!(
            "target_address is longer than {MAX_PORTAL_ADDRESS_CHARS} characters"
        ));
    }
    if w.contains(&0) {
        return Err("target_address contains a NUL character".into());
    }
    Ok(w)
}

/// Checks an IQN before it goes to the initiator: it must fit `MAX_ISCSI_NAME_LEN` and have no
/// NUL (which would cut it short silently).
pub fn check_iqn(iqn: &str) -> Result<(), String> {
    if iqn.encode_utf16().count() > MAX_ISCSI_NAME_CHARS {
        return Err(format!(
            "iqn is longer than {MAX_ISCSI_NAME_CHARS} characters"
        ));
    }
    if iqn.contains('\0') {
        return Err("iqn contains a NUL character".into());
    }
    Ok(())
}

/// The authentication part of the `ISCSI_LOGIN_OPTIONS` of one login. The user name and secret
/// are byte strings the structure points at (the API takes them as counted `UCHAR` buffers, no
/// NUL); the secret bytes are wiped when this is dropped. `Debug` shows no secret.
pub struct LoginAuth {
    /// `ISCSI_LOGIN_OPTIONS.AuthType`.
    pub auth_type: i32,
    /// `ISCSI_LOGIN_OPTIONS.InformationSpecified`.
    pub info_specified: u32,
    /// `Username` bytes (empty when not specified).
    pub username: Vec<u8>,
    /// `Password` bytes (empty when not specified).
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for LoginAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginAuth")
            .field("auth_type", &self.auth_type)
            .field(
                "info_specified",
                &format_args!("{:#x}", self.info_specified),
            )
            .field("username", &String::from_utf8_lossy(&self.username))
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl Drop for LoginAuth {
    fn drop(&mut self) {
        wipe(&mut self.secret);
    }
}

/// Overwrites `buf` with zeros in a way the optimizer keeps (the buffer is read afterwards
/// through `black_box`).
pub fn wipe(buf: &mut [u8]) {
    buf.fill(0);
    std::hint::black_box(&*buf);
}

/// The login options for `chap`: the auth type is always specified (so a default set elsewhere on
/// the initiator cannot apply); with CHAP the secret is specified, and the user name when one is
/// given (without it the initiator sends its node name, as the API documents).
pub fn login_auth(chap: &Chap) -> Result<LoginAuth, String> {
    let auth_type = match chap.auth_type {
        AuthType::None => ISCSI_NO_AUTH_TYPE,
        AuthType::OneWayChap => ISCSI_CHAP_AUTH_TYPE,
        AuthType::MutualChap => ISCSI_MUTUAL_CHAP_AUTH_TYPE,
    };
    let mut auth = LoginAuth {
        auth_type,
        info_specified: LOGIN_OPTIONS_AUTH_TYPE,
        username: Vec::new(),
        secret: Vec::new(),
    };
    if chap.auth_type == AuthType::None {
        return Ok(auth);
    }
    if chap.secret.is_empty() {
        return Err("CHAP authentication needs chap_secret".into());
    }
    auth.secret = chap.secret.expose().as_bytes().to_vec();
    auth.info_specified |= LOGIN_OPTIONS_PASSWORD;
    if !chap.username.is_empty() {
        auth.username = chap.username.as_bytes().to_vec();
        auth.info_specified |= LOGIN_OPTIONS_USERNAME;
    }
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_core::iscsi::Secret;

    fn portal(a: &str, p: u16) -> TargetPortal {
        TargetPortal {
            address: a.into(),
            port: p,
        }
    }

    #[test]
    fn an_address_naming_no_host_is_unspecified() {
        for a in ["", " ", "0.0.0.0", "::", "[::]", "[0:0::0]"] {
            assert!(unspecified_address(a), "{a:?}");
        }
        for a in ["10.0.0.5", "[fe80::1]", "target.example.com", "0.0.0.1"] {
            assert!(!unspecified_address(a), "{a:?}");
        }
    }

    #[test]
    fn multi_sz_lists() {
        let w = |s: &str| s.encode_utf16().collect::<Vec<u16>>();
        let mut buf = w("iqn.a:one\0iqn.b:two\0\0");
        buf.extend([0x41, 0]); // after the terminator: ignored
        assert_eq!(parse_multi_sz(&buf), ["iqn.a:one", "iqn.b:two"]);
        assert!(parse_multi_sz(&[0, 0]).is_empty());
        assert!(parse_multi_sz(&[]).is_empty());
        // Not terminated: what is there is still read.
        assert_eq!(parse_multi_sz(&w("iqn.c")), ["iqn.c"]);
    }

    #[test]
    fn codes_map_to_kinds_without_request_data() {
        assert_eq!(failure(0xEFFF_0009).0, Kind::PermissionDenied);
        assert_eq!(failure(isdsc::TARGET_NOT_FOUND).0, Kind::NotFound);
        assert_eq!(failure(isdsc::PORTAL_NOT_FOUND).0, Kind::NotFound);
        assert_eq!(
            failure(isdsc::TARGET_PORTAL_ALREADY_EXISTS).0,
            Kind::AlreadyExists
        );
        assert_eq!(
            failure(isdsc::SERVICE_NOT_RUNNING).0,
            Kind::FailedPrecondition
        );
        assert_eq!(failure(isdsc::CONNECTION_FAILED).0, Kind::Unavailable);
        assert_eq!(failure(87).0, Kind::InvalidArgument);
        let (k, m) = failure(0xEFFF_7777);
        assert_eq!(k, Kind::Internal);
        assert!(m.contains("0xefff7777"), "{m}");
        assert!(failure(0xEFFF_004A).1.ends_with("[0xefff004a]"));
        // Every code is listed once.
        for (i, (c, _, _)) in CODES.iter().enumerate() {
            assert!(!CODES[i + 1..].iter().any(|(d, _, _)| d == c), "{c:#x}");
        }
    }

    #[test]
    fn warnings_count_as_success() {
        assert!(succeeded(0));
        assert!(succeeded(0xAFFF_0048)); // ISDSC_SHORT_CHAP_SECRET
        assert!(succeeded(0xAFFF_003B)); // ISDSC_OPERATION_REQUIRES_REBOOT
        assert!(!succeeded(0xEFFF_0009));
        assert!(!succeeded(ERROR_INSUFFICIENT_BUFFER));
    }

    #[test]
    fn discovery_mechanisms_select_the_portal() {
        let m = r"SendTargets:*10.61.169.28 0003260 Root\ISCSIPRT\0000_0".to_string();
        assert_eq!(
            send_targets_portal(&m),
            Some(("10.61.169.28".to_string(), 3260))
        );
        assert_eq!(
            send_targets_portal("sendtargets:*[fe80::1] 0003261 x"),
            Some(("[fe80::1]".to_string(), 3261))
        );
        assert_eq!(send_targets_portal("iSNS:*10.0.0.1 0003205"), None);
        assert_eq!(send_targets_portal("SendTargets:*10.0.0.1"), None);
        let here = portal("10.61.169.28", 3260);
        let other = portal("10.61.169.29", 3260);
        assert!(discovered_through(std::slice::from_ref(&m), &here));
        assert!(!discovered_through(std::slice::from_ref(&m), &other));
        assert!(!discovered_through(
            &["iSNS:*10.61.169.28 0003205".into()],
            &here
        ));
        // Unknown forms and no information keep the target.
        assert!(discovered_through(&[], &other));
        assert!(discovered_through(&["SendTargets:odd".into()], &other));
        // Not a char boundary at the prefix length: no panic.
        assert_eq!(send_targets_portal("SendTargetsé*x 1"), None);
    }

    #[test]
    fn addresses_compare_loosely() {
        assert!(is_portal(
            "Target.Example",
            3260,
            &portal("target.example", 3260)
        ));
        assert!(is_portal("[fe80::1]", 3260, &portal("fe80::1", 3260)));
        assert!(!is_portal("10.0.0.1", 3261, &portal("10.0.0.1", 3260)));
        assert!(!is_portal("10.0.0.2", 3260, &portal("10.0.0.1", 3260)));
    }

    #[test]
    fn portal_and_iqn_limits() {
        assert_eq!(
            portal_address(&portal("10.0.0.1", 1)).unwrap().len(),
            "10.0.0.1".len()
        );
        assert!(portal_address(&portal(&"a".repeat(256), 1)).is_err());
        assert!(portal_address(&portal("a\0b", 1)).is_err());
        assert!(check_iqn("iqn.2003-01.org.example:t1").is_ok());
        assert!(check_iqn(&"i".repeat(224)).is_err());
        assert!(check_iqn("iqn\0x").is_err());
    }

    #[test]
    fn login_options_per_auth_type() {
        let chap = |t, u: &str, s: &str| Chap {
            auth_type: t,
            username: u.into(),
            secret: Secret::new(s),
        };
        let none = login_auth(&chap(AuthType::None, "u", "ignored-secret")).unwrap();
        assert_eq!(none.auth_type, ISCSI_NO_AUTH_TYPE);
        assert_eq!(none.info_specified, LOGIN_OPTIONS_AUTH_TYPE);
        assert!(none.username.is_empty() && none.secret.is_empty());

        let one = login_auth(&chap(AuthType::OneWayChap, "user", "secret-123456")).unwrap();
        assert_eq!(one.auth_type, ISCSI_CHAP_AUTH_TYPE);
        assert_eq!(
            one.info_specified,
            LOGIN_OPTIONS_AUTH_TYPE | LOGIN_OPTIONS_USERNAME | LOGIN_OPTIONS_PASSWORD
        );
        assert_eq!(one.username, b"user");
        assert_eq!(one.secret, b"secret-123456");
        let shown = format!("{one:?}");
        assert!(!shown.contains("secret-123456"), "{shown}");

        let mutual = login_auth(&chap(AuthType::MutualChap, "", "secret-123456")).unwrap();
        assert_eq!(mutual.auth_type, ISCSI_MUTUAL_CHAP_AUTH_TYPE);
        assert_eq!(
            mutual.info_specified,
            LOGIN_OPTIONS_AUTH_TYPE | LOGIN_OPTIONS_PASSWORD
        );

        let e = login_auth(&chap(AuthType::OneWayChap, "user", "")).unwrap_err();
        assert!(e.contains("chap_secret"));
    }

    #[test]
    fn wipe_zeroes() {
        let mut b = b"secret".to_vec();
        wipe(&mut b);
        assert_eq!(b, [0; 6]);
    }
}
