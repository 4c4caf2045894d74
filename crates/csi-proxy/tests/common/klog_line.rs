//! klog's line format, parsed as log pipelines' klog parsers read it; used by the daemon's unit
//! tests of its own format and by the end-to-end tests of its real output.

/// A klog line as klog's parsers read it: `[IWEF]mmdd hh:mm:ss.uuuuuu <pid> <file>:<line>] msg`
/// (the pid right-aligned in at least seven columns). Returns (severity letter, pid, file,
/// line, message), or why the line is not one.
pub fn parse_klog_line(l: &str) -> Result<(char, u32, String, u32, String), String> {
    let bad = |why: &str| format!("{why}: {l:?}");
    let mut chars = l.chars();
    let sev = chars.next().ok_or_else(|| bad("empty"))?;
    if !"IWEF".contains(sev) {
        return Err(bad("no severity letter"));
    }
    let rest = &l[1..];
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (mmdd, rest) = rest.split_at_checked(4).ok_or_else(|| bad("short"))?;
    if !digits(mmdd) || !rest.starts_with(' ') {
        return Err(bad("mmdd"));
    }
    let (time, rest) = rest[1..].split_at_checked(15).ok_or_else(|| bad("short"))?;
    let t: Vec<&str> = time.split([':', '.']).collect();
    if t.len() != 4
        || t.iter()
            .zip([2, 2, 2, 6])
            .any(|(p, n)| p.len() != n || !digits(p))
    {
        return Err(bad("hh:mm:ss.uuuuuu"));
    }
    let (pid_field, rest) = rest.split_at_checked(8).ok_or_else(|| bad("short"))?;
    if !pid_field.starts_with(' ') || !rest.starts_with(' ') {
        return Err(bad("pid column"));
    }
    let pid = pid_field.trim_start().parse().map_err(|_| bad("pid"))?;
    let (source, msg) = rest[1..].split_once("] ").ok_or_else(|| bad("no `] `"))?;
    let (file, line) = source.rsplit_once(':').ok_or_else(|| bad("file:line"))?;
    if file.is_empty() || file.contains(' ') || !digits(line) {
        return Err(bad("file:line"));
    }
    Ok((
        sev,
        pid,
        file.to_string(),
        line.parse().unwrap(),
        msg.to_string(),
    ))
}
