//! The lexical layer: is a path (or a link's target) well formed for its style, and what are its
//! components. No file system is consulted here.

use super::*;

pub(super) fn posix_lexical(path: &str) -> std::result::Result<Vec<&str>, String> {
    if path.is_empty() {
        return Err("path is empty".into());
    }
    if path.len() > POSIX_MAX_PATH_BYTES {
        return Err(format!(
            "path is {} bytes long; at most {POSIX_MAX_PATH_BYTES} are allowed",
            path.len()
        ));
    }
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        return Err(format!("contains the control character {c:?}"));
    }
    if !path.starts_with('/') {
        return Err("not an absolute path (it must start with '/')".into());
    }
    let mut comps = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => return Err("'..' components are not allowed".into()),
            _ if comp.len() > MAX_COMPONENT_LEN => {
                return Err(format!(
                    "component {} is {} bytes long; at most {MAX_COMPONENT_LEN} are allowed",
                    shown(comp),
                    comp.len()
                ));
            }
            _ => comps.push(comp),
        }
    }
    Ok(comps)
}

pub(super) fn windows_lexical(path: &str) -> std::result::Result<Vec<&str>, String> {
    if path.is_empty() {
        return Err("path is empty".into());
    }
    // UTF-16 units never outnumber UTF-8 bytes, so short input needs no counting.
    if path.len() > WINDOWS_MAX_PATH_UNITS {
        let units = path.encode_utf16().count();
        if units > WINDOWS_MAX_PATH_UNITS {
            return Err(format!(
                "path is {units} UTF-16 units long; at most {WINDOWS_MAX_PATH_UNITS} are allowed"
            ));
        }
    }
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        return Err(format!("contains the control character {c:?}"));
    }
    if let Some(why) = windows_prefix_problem(path) {
        return Err(why.into());
    }
    if path.contains('/') {
        return Err("contains '/'; only '\\' separates components".into());
    }
    let b = path.as_bytes();
    if b.len() < 2 || !b[0].is_ascii_alphabetic() || b[1] != b':' {
        return Err("not an absolute Windows path (it must start with a drive, as in C:\\)".into());
    }
    if b.get(2) != Some(&b'\\') {
        return Err("drive-relative path (the drive must be followed by '\\')".into());
    }
    let rest = &path[3..];
    // Upstream refuses `..` anywhere, even inside a name such as `a..b`; kept for compatibility.
    if rest.contains("..") {
        return Err("contains '..'".into());
    }
    let mut comps = vec![&path[..2]];
    // Repeated and trailing separators are normalised away.
    for comp in rest.split('\\').filter(|c| !c.is_empty()) {
        if comp == "." {
            return Err("'.' components are not allowed".into());
        }
        if let Some(why) = windows_component_problem(comp) {
            return Err(why);
        }
        comps.push(comp);
    }
    Ok(comps)
}

/// Names the namespace or UNC form a path starts with, if any; all are refused.
pub(super) fn windows_prefix_problem(path: &str) -> Option<&'static str> {
    if let Some(rest) = path.strip_prefix(r"\\?\") {
        if rest
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case(r"UNC\"))
        {
            return Some(r"\\?\UNC\ (extended-length UNC) paths are not accepted");
        }
        return Some(r"\\?\ (extended-length) paths are not accepted; the host adds it itself");
    }
    if path.starts_with(r"\\.\") {
        return Some(r"\\.\ (device namespace) paths are not accepted");
    }
    if path.starts_with(r"\??\") {
        return Some(r"\??\ (NT object namespace) paths are not accepted");
    }
    if path.starts_with(r"\\") {
        return Some(r"UNC paths (\\server\share) are not accepted");
    }
    if path.starts_with('\\') {
        // Only reached by roots: client paths are qualified with the kubelet path's drive first.
        return Some(r"rooted paths without a drive (\dir) are not accepted");
    }
    None
}

/// Why a Windows name component is unsafe, if it is. Assumes no separators or control characters.
pub(super) fn windows_component_problem(comp: &str) -> Option<String> {
    if comp.contains(':') {
        return Some(format!(
            "component {} contains ':' (alternate data streams are not accepted)",
            shown(comp)
        ));
    }
    if let Some(ch) = comp
        .chars()
        .find(|c| matches!(c, '"' | '*' | '?' | '|' | '<' | '>'))
    {
        return Some(format!(
            "component {} contains {ch:?}, which Windows does not allow in names",
            shown(comp)
        ));
    }
    let units = comp.encode_utf16().count();
    if units > MAX_COMPONENT_LEN {
        return Some(format!(
            "component {} is {units} UTF-16 units long; at most {MAX_COMPONENT_LEN} are allowed",
            shown(comp)
        ));
    }
    if comp.ends_with(['.', ' ']) {
        return Some(format!(
            "component {} ends with '.' or ' ', which Windows strips (so it names another file)",
            shown(comp)
        ));
    }
    if let Some(name) = reserved_device_name(comp) {
        return Some(format!(
            "component {} is the reserved device name {name}",
            shown(comp)
        ));
    }
    None
}

/// The DOS device a component names, if any: Windows maps `CON`, `nul.txt`, `COM1 .log`… to
/// devices whatever the extension (the part from the first `.`, after trailing spaces are dropped).
pub(super) fn reserved_device_name(comp: &str) -> Option<String> {
    let stem = comp.split('.').next().unwrap_or(comp).trim_end_matches(' ');
    const PLAIN: [&str; 6] = ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"];
    if let Some(n) = PLAIN.iter().find(|n| stem.eq_ignore_ascii_case(n)) {
        return Some(n.to_string());
    }
    // COM0-9 and LPT0-9 (0 is listed by current Microsoft docs), plus the superscript digits
    // ¹ ² ³, which Windows also treats as device numbers.
    let head = stem.get(..3)?;
    let prefix = ["COM", "LPT"]
        .into_iter()
        .find(|p| head.eq_ignore_ascii_case(p))?;
    let mut tail = stem[3..].chars();
    match (tail.next(), tail.next()) {
        (Some(d @ ('0'..='9' | '¹' | '²' | '³')), None) => Some(format!("{prefix}{d}")),
        _ => None,
    }
}

/// Parses a link target into where it starts and its components (which may include `.`/`..`), or
/// says why it cannot be followed safely.
pub(super) fn parse_target(
    style: PathStyle,
    t: &str,
) -> std::result::Result<(Start<'_>, Vec<&str>), String> {
    if t.is_empty() {
        return Err("the target is empty".into());
    }
    match style {
        PathStyle::Posix => {
            let start = if t.starts_with('/') {
                Start::Root
            } else {
                Start::Relative
            };
            Ok((start, t.split('/').filter(|c| !c.is_empty()).collect()))
        }
        PathStyle::Windows => {
            if let Some(c) = t.chars().find(|c| c.is_control()) {
                return Err(format!("it contains the control character {c:?}"));
            }
            let is_sep = |b: Option<&u8>| matches!(b, Some(b'\\' | b'/'));
            let drive_abs = |s: &str| {
                let b = s.as_bytes();
                b.len() >= 2
                    && b[0].is_ascii_alphabetic()
                    && b[1] == b':'
                    && (b.len() == 2 || is_sep(b.get(2)))
            };
            let mut s = t;
            // Junctions store `\??\C:\…`; symlinks may store `\\?\C:\…`. Both name a drive path.
            for pre in [r"\??\", r"\\?\"] {
                if let Some(rest) = t.strip_prefix(pre) {
                    if rest
                        .get(..4)
                        .is_some_and(|p| p.eq_ignore_ascii_case(r"UNC\"))
                    {
                        return Err("it is a UNC path (a network share)".into());
                    }
                    if !drive_abs(rest) {
                        return Err("it is a device or volume path, not a drive path".into());
                    }
                    s = rest;
                }
            }
            let b = s.as_bytes();
            let (start, rest) = if drive_abs(s) {
                (Start::Drive(&s[..2]), &s[2..])
            } else if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
                return Err("it is drive-relative".into());
            } else if is_sep(b.first()) && is_sep(b.get(1)) {
                return Err("it is a UNC or device path".into());
            } else if is_sep(b.first()) {
                return Err("it is rooted without a drive (its volume is unknown)".into());
            } else {
                (Start::Relative, s)
            };
            let comps: Vec<&str> = rest.split(['\\', '/']).filter(|c| !c.is_empty()).collect();
            for c in &comps {
                if !matches!(*c, "." | "..")
                    && let Some(why) = windows_component_problem(c)
                {
                    return Err(why);
                }
            }
            Ok((start, comps))
        }
    }
}

/// Whether `path` is a bare drive-letter root (`D:\` or `D:`): where Windows' mount manager
/// puts a volume it letters by itself (automount), not a directory someone chose.
pub fn is_drive_root(path: &str) -> bool {
    let b = path.as_bytes();
    matches!(b, [l, b':'] | [l, b':', b'\\'] if l.is_ascii_alphabetic())
}
