//! The address of a target portal: a host name or an IP address, nothing else.
//!
//! A portal address travels into state the daemon keeps (Linux: one `address port` line of
//! its portals file), into discovery and into the initiator's records, so free text is refused
//! before any host sees it: no whitespace, no control character, a bounded length, and the
//! shape of a host name (RFC 1123) or of an IPv4 or IPv6 address (bare, or in brackets as URIs
//! write it; a link-local IPv6 address may carry its `%zone`).

use crate::error::{Error, Result};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The longest host name (RFC 1035, 2.3.4: 255 octets on the wire, 253 written out).
pub const ADDRESS_MAX: usize = 253;
/// The longest label of a host name (RFC 1035, 2.3.4).
const LABEL_MAX: usize = 63;
/// Longest IPv6 zone (an interface name: IFNAMSIZ - 1 on Linux; numeric indexes are shorter).
const ZONE_MAX: usize = 15;
/// How much of a refused address a message repeats.
const SHOWN_MAX: usize = 64;

/// The address in the form hosts get: a host name or IPv4 address as given, an IPv6 address
/// without brackets. Errors are INVALID_ARGUMENT naming `op`, the address and the cause.
pub fn validate_address(op: &str, address: &str) -> Result<String> {
    let refuse = |why: String| {
        Error::invalid(
            op,
            format!("target portal {}", shown(address)),
            format!("target_address {why}; expected a host name or an IP address"),
        )
    };
    if address.is_empty() {
        return Err(refuse("is empty".into()));
    }
    if address.len() > ADDRESS_MAX {
        return Err(refuse(format!(
            "is {} bytes long (at most {ADDRESS_MAX})",
            address.len()
        )));
    }
    if let Some(c) = address
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        return Err(refuse(format!("contains {c:?}")));
    }
    let bare = match address.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .filter(|a| a.contains(':'))
            .ok_or_else(|| refuse("opens a bracket that is not an IPv6 address".into()))?,
        None => address,
    };
    if bare.contains(':') {
        return ipv6(bare).map(|()| bare.to_string()).map_err(refuse);
    }
    if bare.parse::<Ipv4Addr>().is_ok() {
        return Ok(bare.to_string());
    }
    host_name(bare).map(|()| bare.to_string()).map_err(refuse)
}

fn ipv6(a: &str) -> std::result::Result<(), String> {
    let (addr, zone) = match a.split_once('%') {
        Some((addr, zone)) => (addr, Some(zone)),
        None => (a, None),
    };
    if addr.parse::<Ipv6Addr>().is_err() {
        return Err("is not a valid IPv6 address".into());
    }
    match zone {
        Some(z)
            if z.is_empty()
                || z.len() > ZONE_MAX
                || !z
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) =>
        {
            Err("has an IPv6 zone that is not an interface name or index".into())
        }
        _ => Ok(()),
    }
}

/// RFC 1123 host names: dot-separated labels of letters, digits and `-` (not at either end),
/// 1 to 63 bytes each, an optional final dot. `_` is taken too, as some internal DNS zones use
/// it. A name whose last label is all digits is a mistyped IPv4 address (RFC 3696, 2).
fn host_name(name: &str) -> std::result::Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let labels: Vec<&str> = name.split('.').collect();
    for label in &labels {
        if label.is_empty() || label.len() > LABEL_MAX {
            return Err(format!("has an empty label or one over {LABEL_MAX} bytes"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
        {
            return Err(format!("contains {c:?}"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("has a label that starts or ends with '-'".into());
        }
    }
    if labels
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("is neither an IPv4 address nor a host name".into());
    }
    Ok(())
}

/// `address` for a message: quoted and escaped, cut to [`SHOWN_MAX`] characters.
fn shown(address: &str) -> String {
    if address.chars().count() <= SHOWN_MAX {
        format!("{address:?}")
    } else {
        let head: String = address.chars().take(SHOWN_MAX).collect();
        format!("{head:?}… ({} bytes)", address.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    #[test]
    fn host_names_and_ip_addresses_pass() {
        for (given, kept) in [
            ("10.0.0.1", "10.0.0.1"),
            ("target", "target"),
            ("san-1.example.com", "san-1.example.com"),
            ("san-1.example.com.", "san-1.example.com."),
            ("storage_1.corp.local", "storage_1.corp.local"),
            ("fe80::1", "fe80::1"),
            ("[fe80::1]", "fe80::1"),
            ("fe80::1%eth0", "fe80::1%eth0"),
            ("[2001:db8::10]", "2001:db8::10"),
            ("::ffff:10.0.0.1", "::ffff:10.0.0.1"),
        ] {
            assert_eq!(validate_address("Op", given).unwrap(), kept, "{given}");
        }
        let longest = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(longest.len(), ADDRESS_MAX);
        validate_address("Op", &longest).unwrap();
    }

    #[test]
    fn free_text_is_refused_naming_the_cause() {
        for (bad, cause) in [
            ("", "is empty"),
            ("10.0.0.1 3260\n* * * * * root sh", "contains ' '"),
            ("host\n", "contains '\\n'"),
            ("a\tb", "contains '\\t'"),
            ("host;rm", "contains ';'"),
            ("../etc/passwd", "empty label"),
            ("host/x", "contains '/'"),
            ("-host", "starts or ends with '-'"),
            ("1.2.3.999", "neither an IPv4"),
            ("[10.0.0.1]", "bracket"),
            ("[fe80::1", "bracket"),
            ("fe80::zz", "not a valid IPv6"),
            ("fe80::1%", "zone"),
            ("fe80::1%a/b", "zone"),
            ("h\u{7f}", "contains"),
            ("hôst", "contains 'ô'"),
        ] {
            let e = validate_address("AddTargetPortal", bad).unwrap_err();
            assert_eq!(e.kind(), Kind::InvalidArgument, "{bad:?}");
            let m = e.message();
            assert!(
                m.contains("AddTargetPortal") && m.contains(cause),
                "{bad:?}: {m}"
            );
            assert!(!m.contains('\n'), "{m}");
        }
        let long = "a".repeat(10_000);
        let e = validate_address("Op", &long).unwrap_err();
        assert!(
            e.message().contains("10000 bytes") && e.message().len() < 300,
            "{}",
            e.message()
        );
        let label = format!("{}.com", "a".repeat(64));
        assert!(validate_address("Op", &label).is_err());
    }
}
