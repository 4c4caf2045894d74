//! Path confinement under fuzzing: [`PathPolicy::check`], [`PathPolicy::confine`] and
//! [`PathPolicy::confine_following`], against a fake filesystem described by the fuzz input.
//!
//! The property: whatever the policy accepts lies inside a root component-wise, is normalised
//! (no `.`, `..` or empty components; checking it again gives it back), and, walked the way the
//! OS walks it through the fake filesystem's links, ends inside a root. The OS walk is modelled
//! here independently of `core/src/paths/`:
//! - POSIX: the kernel's reading (each `..` goes to the parent of the place reached so far);
//! - Windows: the reparse reading (a link's target is spliced into the remaining path and `..` is
//!   collapsed textually before the walk restarts), and the kernel reading as well.
//!
//! A walk that the OS would fail (a missing directory, a file used as a directory, a link loop)
//! harms nothing and is not judged; a walk that leaves the model (a foreign link, a UNC or device
//! target, a reserved device name) is an escape, and the policy must have refused it.

use arbitrary::Arbitrary;
use csi_proxy_core::paths::{LinkProbe, LinkTarget, PathPolicy, PathStyle};
use std::collections::HashMap;
use std::io;

/// Component names the fuzzer picks by index, chosen so that paths meet the roots, each other,
/// and the forms Windows treats specially.
const NAMES: &[&str] = &[
    "a",
    "..",
    "gone",
    "evil",
    "file",
    "vol",
    "far",
    "b",
    "kubelet",
    ".",
    "x",
    "KUBELET",
    "C:",
    "kubelet.",
    "CON",
    "a:b",
    "\u{212a}ubelet",
    "var",
    "lib",
    "pods",
];

/// What a name is wherever no explicit node says otherwise, so that the fuzzer can build
/// escapes from names alone: `gone` is missing, `file` a file, `evil` a link out of every root,
/// `vol` a mounted volume, `far` a link that cannot be resolved.
fn role(style: PathStyle, name: &str) -> Option<Entry> {
    Some(match name {
        "gone" => Entry::Missing,
        "file" => Entry::File,
        "evil" => Entry::Link(match style {
            PathStyle::Posix => "/etc".into(),
            PathStyle::Windows => r"C:\Windows".into(),
        }),
        "vol" => Entry::Volume,
        "far" => Entry::Foreign,
        _ => return None,
    })
}

/// Three quarters of the picks go to the first four names, so that the few names that make
/// links, missing entries and `..` meet (the escapes live there) come up often.
fn name(i: u8) -> &'static str {
    if i < 192 {
        NAMES[usize::from(i) % 4]
    } else {
        NAMES[usize::from(i) % NAMES.len()]
    }
}

/// Root sets (working dirs, then the kubelet path), nested roots included.
const POSIX_ROOTS: &[&[&str]] = &[
    &["/var/lib/kubelet"],
    &["/var/lib/kubelet/pods/a", "/var/lib/kubelet"],
    &["/a", "/var/lib/kubelet"],
    &["/var/lib/kubelet/plugins", "/var/lib/kubelet/pods"],
];
const WINDOWS_ROOTS: &[&[&str]] = &[
    &[r"C:\var\lib\kubelet"],
    &[r"c:\var\lib\kubelet\pods\a", r"C:\var\lib\kubelet"],
    &[r"C:\a", r"C:\var\lib\kubelet"],
    &[r"D:\csi", r"c:\VAR\lib\kubelet"],
];

/// One fuzz case.
#[derive(Arbitrary, Debug)]
pub struct Case {
    roots: u8,
    path: PathSpec,
    nodes: Vec<Node>,
}

/// The client path: a prefix form, then pieces.
#[derive(Arbitrary, Debug)]
struct PathSpec {
    prefix: u8,
    /// 0: `prefix` picks the start; otherwise the path starts at root `under - 1`.
    under: u8,
    pieces: Vec<Piece>,
}

#[derive(Arbitrary, Debug)]
enum Piece {
    Name(u8),
    Sep(u8),
    Raw(String),
}

/// An entry of the fake filesystem at an absolute path built from [`NAMES`].
#[derive(Arbitrary, Debug)]
struct Node {
    drive: bool,
    /// 0: `at` is absolute; otherwise `at` is below root `under - 1` (mod the root count), so
    /// links land where the walk goes.
    under: u8,
    at: Vec<u8>,
    kind: NodeKind,
}

#[derive(Arbitrary, Debug, Clone)]
enum NodeKind {
    Link(TargetSpec),
    Volume,
    Foreign,
    Missing,
    File,
    Fails,
}

#[derive(Arbitrary, Debug, Clone)]
struct TargetSpec {
    form: u8,
    comps: Vec<u8>,
    sep: bool,
    raw: String,
}

impl TargetSpec {
    fn render(&self, style: PathStyle) -> String {
        let sep = match (style, self.sep) {
            (PathStyle::Posix, _) | (PathStyle::Windows, false) => "/",
            (PathStyle::Windows, true) => "\\",
        };
        let body: Vec<&str> = self.comps.iter().take(8).map(|&i| name(i)).collect();
        let body = body.join(sep);
        match (style, self.form % 8) {
            (_, 0..=2) => body,
            (PathStyle::Posix, 3..=5) => format!("/{body}"),
            (PathStyle::Windows, 3) => format!(r"C:\{body}"),
            (PathStyle::Windows, 4) => format!(r"\??\C:\{body}"),
            (PathStyle::Windows, 5) => format!(r"\\?\c:\{body}"),
            (_, 6) => format!("{}{body}", self.raw),
            _ => self.raw.clone(),
        }
    }
}

/// What the fake filesystem holds at a place.
#[derive(Debug, Clone)]
enum Entry {
    Link(String),
    Volume,
    Foreign,
    Missing,
    File,
    Fails,
}

/// The fake filesystem: entries keyed by normalised absolute path.
struct FakeFs {
    style: PathStyle,
    entries: HashMap<String, Entry>,
}

impl FakeFs {
    fn key(&self, comps: &[String]) -> String {
        let mut k = String::new();
        for c in comps {
            k.push('/');
            match self.style {
                PathStyle::Posix => k.push_str(c),
                PathStyle::Windows => k.push_str(&c.to_ascii_lowercase()),
            }
        }
        k
    }

    fn lookup(&self, comps: &[String]) -> Option<Entry> {
        match self.entries.get(&self.key(comps)) {
            Some(e) => Some(e.clone()),
            None => role(self.style, comps.last()?),
        }
    }

    /// What a place is: `Err(NotFound)` below a missing place, `Err(NotADirectory)` below a file.
    fn stat(&self, comps: &[String]) -> io::Result<Option<Entry>> {
        for n in 1..comps.len() {
            match self.lookup(&comps[..n]) {
                Some(Entry::Missing) => return Err(io::ErrorKind::NotFound.into()),
                Some(Entry::File) => return Err(io::ErrorKind::NotADirectory.into()),
                _ => {}
            }
        }
        Ok(self.lookup(comps))
    }

    fn split(&self, path: &str) -> Vec<String> {
        match self.style {
            PathStyle::Posix => path
                .split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            PathStyle::Windows => {
                let mut v = vec![path.get(..2).unwrap_or_default().to_string()];
                v.extend(
                    path.get(2..)
                        .unwrap_or_default()
                        .split('\\')
                        .filter(|c| !c.is_empty())
                        .map(str::to_string),
                );
                v
            }
        }
    }
}

impl LinkProbe for FakeFs {
    fn link_target(&self, path: &str) -> io::Result<Option<LinkTarget>> {
        match self.stat(&self.split(path))? {
            None | Some(Entry::File) => Ok(None),
            Some(Entry::Missing) => Err(io::ErrorKind::NotFound.into()),
            Some(Entry::Fails) => Err(io::Error::other("fuzz: probe failure")),
            Some(Entry::Link(t)) => Ok(Some(LinkTarget::Path(t))),
            Some(Entry::Volume) => Ok(Some(LinkTarget::Volume)),
            Some(Entry::Foreign) => Ok(Some(LinkTarget::Foreign("fuzz: foreign".into()))),
        }
    }
}

/// Where an OS walk ends.
#[derive(Debug)]
enum Outcome {
    At(Vec<String>),
    /// The OS would fail the walk: nothing is touched.
    Fails,
    /// The walk leaves what can be proven (foreign link, UNC, device...).
    Escapes(String),
}

struct Model<'a> {
    style: PathStyle,
    roots: Vec<Vec<String>>,
    fs: &'a FakeFs,
}

/// A parsed link target: `None` start is relative; `Some(v)` restarts at `v` (`[]` or `[drive]`).
type Target = (Option<Vec<String>>, Vec<String>);

impl Model<'_> {
    fn same(&self, a: &str, b: &str) -> bool {
        match self.style {
            PathStyle::Posix => a == b,
            PathStyle::Windows => a.eq_ignore_ascii_case(b),
        }
    }

    fn base(&self) -> usize {
        match self.style {
            PathStyle::Posix => 0,
            PathStyle::Windows => 1,
        }
    }

    fn within(&self, loc: &[String]) -> bool {
        self.roots
            .iter()
            .any(|r| loc.len() >= r.len() && r.iter().zip(loc).all(|(r, l)| self.same(l, r)))
    }

    fn on_root_path(&self, loc: &[String]) -> bool {
        self.roots
            .iter()
            .any(|r| loc.len() <= r.len() && loc.iter().zip(r).all(|(l, r)| self.same(l, r)))
    }

    /// Parses a link target as the OS would, or says why it leaves the model.
    fn parse_target(&self, t: &str) -> Result<Target, String> {
        match self.style {
            PathStyle::Posix => {
                let comps = t
                    .split('/')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect();
                if t.is_empty() {
                    return Err("empty target".into());
                }
                Ok((t.starts_with('/').then(Vec::new), comps))
            }
            PathStyle::Windows => {
                let mut s = t;
                for pre in [r"\??\", r"\\?\"] {
                    if let Some(rest) = t.strip_prefix(pre) {
                        s = rest;
                    }
                }
                if t.is_empty() || t.chars().any(char::is_control) {
                    return Err("empty target or control character".into());
                }
                let b = s.as_bytes();
                let is_sep = |c: Option<&u8>| matches!(c, Some(b'\\' | b'/'));
                let drive = b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':';
                let (start, rest) = if drive && (b.len() == 2 || is_sep(b.get(2))) {
                    (Some(vec![s[..2].to_string()]), &s[2..])
                } else if drive {
                    return Err("drive-relative".into());
                } else if s.len() != t.len() || is_sep(b.first()) {
                    return Err("device, UNC or rooted target".into());
                } else {
                    (None, s)
                };
                let mut comps = Vec::new();
                for c in rest.split(['\\', '/']).filter(|c| !c.is_empty()) {
                    if c == "." || c == ".." {
                        comps.push(c.to_string());
                        continue;
                    }
                    // Win32 drops trailing dots and spaces; what is left must be a plain name.
                    let n = c.trim_end_matches(['.', ' ']);
                    if n.is_empty()
                        || n.contains([':', '"', '*', '?', '|', '<', '>'])
                        || is_device(n)
                    {
                        return Err(format!("component {c:?} is not a plain name"));
                    }
                    comps.push(n.to_string());
                }
                Ok((start, comps))
            }
        }
    }

    /// The kernel's reading: `..` goes to the parent of the place reached so far.
    fn kernel(&self, start: &[String], follow_final: bool) -> Outcome {
        let base = self.base();
        let mut stack: Vec<String> = start[..base.min(start.len())].to_vec();
        let n = start.len();
        let mut steps: Vec<(String, bool)> = start[base.min(n)..]
            .iter()
            .enumerate()
            .rev()
            .map(|(i, c)| (c.clone(), base + i + 1 < n || follow_final))
            .collect();
        let mut hops = 0;
        let mut gone = false;
        while let Some((c, follow)) = steps.pop() {
            if gone {
                return Outcome::Fails;
            }
            if c == "." {
                continue;
            }
            if c == ".." {
                if stack.len() > base {
                    stack.pop();
                }
                continue;
            }
            stack.push(c);
            if self.on_root_path(&stack) {
                continue;
            }
            match self.fs.stat(&stack) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => gone = true,
                Err(_) => return Outcome::Fails,
                Ok(None | Some(Entry::Volume)) => {}
                Ok(Some(Entry::Missing | Entry::File)) => gone = true,
                Ok(Some(Entry::Fails)) => return Outcome::Fails,
                Ok(Some(Entry::Foreign)) if follow => {
                    return Outcome::Escapes(format!("foreign at {stack:?}"));
                }
                Ok(Some(Entry::Foreign)) => {}
                Ok(Some(Entry::Link(t))) if follow => {
                    hops += 1;
                    if hops > 40 {
                        return Outcome::Fails;
                    }
                    let (restart, comps) = match self.parse_target(&t) {
                        Ok(p) => p,
                        Err(why) => return Outcome::Escapes(format!("{t:?}: {why}")),
                    };
                    stack.pop();
                    if let Some(r) = restart {
                        stack = r;
                    }
                    steps.extend(comps.into_iter().rev().map(|c| (c, true)));
                }
                Ok(Some(Entry::Link(_))) => {}
            }
        }
        Outcome::At(stack)
    }

    /// Windows' reparse reading: the target is spliced into the remaining path, `..` is
    /// collapsed textually over the whole name, and the walk starts again from the drive.
    fn reparse(&self, start: &[String], follow_final: bool) -> Outcome {
        let mut full: Vec<(String, bool)> = start
            .iter()
            .enumerate()
            .map(|(i, c)| (c.clone(), i + 1 < start.len() || follow_final))
            .collect();
        let mut hops = 0;
        'restart: loop {
            let mut i = 1;
            while i < full.len() {
                let loc: Vec<String> = full[..=i].iter().map(|(c, _)| c.clone()).collect();
                let follow = full[i].1;
                i += 1;
                if self.on_root_path(&loc) {
                    continue;
                }
                let gone_below = |at: usize| at < full.len();
                match self.fs.stat(&loc) {
                    Err(_) | Ok(Some(Entry::Fails)) => return Outcome::Fails,
                    Ok(Some(Entry::Missing | Entry::File)) if gone_below(i) => {
                        return Outcome::Fails;
                    }
                    Ok(Some(Entry::Foreign)) if follow => {
                        return Outcome::Escapes(format!("foreign at {loc:?}"));
                    }
                    Ok(Some(Entry::Link(t))) if follow => {
                        hops += 1;
                        if hops > 40 {
                            return Outcome::Fails;
                        }
                        let (restart, comps) = match self.parse_target(&t) {
                            Ok(p) => p,
                            Err(why) => return Outcome::Escapes(format!("{t:?}: {why}")),
                        };
                        let mut spliced: Vec<(String, bool)> = match restart {
                            Some(r) => r.into_iter().map(|c| (c, true)).collect(),
                            None => full[..i - 1].to_vec(),
                        };
                        spliced.extend(comps.into_iter().map(|c| (c, true)));
                        let last_follow = full.last().map(|(_, f)| *f).unwrap_or(true);
                        let rest_empty = i == full.len();
                        spliced.extend(full[i..].iter().cloned());
                        // Textual collapse of `.` and `..`, never above the drive.
                        let mut out: Vec<(String, bool)> = Vec::new();
                        for (c, f) in spliced {
                            match c.as_str() {
                                "." => {}
                                ".." => {
                                    if out.len() > 1 {
                                        out.pop();
                                    }
                                }
                                _ => out.push((c, f)),
                            }
                        }
                        if rest_empty && let Some(l) = out.last_mut() {
                            l.1 = last_follow;
                        }
                        full = out;
                        continue 'restart;
                    }
                    _ => {}
                }
            }
            return Outcome::At(full.into_iter().map(|(c, _)| c).collect());
        }
    }
}

/// Whether a Windows name (trailing dots/spaces already dropped) is a DOS device.
fn is_device(n: &str) -> bool {
    let stem = n.split('.').next().unwrap_or(n).trim_end_matches(' ');
    let up = stem.to_ascii_uppercase();
    if ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"].contains(&up.as_str()) {
        return true;
    }
    let mut it = up.chars();
    let head: String = it.by_ref().take(3).collect();
    let tail: Vec<char> = it.collect();
    (head == "COM" || head == "LPT")
        && tail.len() == 1
        && matches!(tail[0], '0'..='9' | '¹' | '²' | '³')
}

fn render_client(style: PathStyle, spec: &PathSpec) -> String {
    let mut s = match (style, spec.prefix % 8) {
        (PathStyle::Posix, 0..=5) => "/".to_string(),
        (PathStyle::Posix, _) => String::new(),
        (PathStyle::Windows, 0..=2) => r"C:\".to_string(),
        (PathStyle::Windows, 3) => r"c:\".to_string(),
        (PathStyle::Windows, 4) => r"D:\".to_string(),
        (PathStyle::Windows, 5) => r"\\?\C:\".to_string(),
        (PathStyle::Windows, 6) => "C:".to_string(),
        (PathStyle::Windows, _) => String::new(),
    };
    let native = match style {
        PathStyle::Posix => "/",
        PathStyle::Windows => "\\",
    };
    // Capped: the models walk prefixes repeatedly, and long paths add nothing but time.
    for (i, p) in spec.pieces.iter().enumerate().take(24) {
        match p {
            Piece::Name(n) => {
                if i > 0 && !matches!(spec.pieces[i - 1], Piece::Sep(_)) {
                    s.push_str(native);
                }
                s.push_str(name(*n));
            }
            Piece::Sep(k) => s.push_str(match k % 4 {
                0 => native,
                1 => "//",
                2 => "\\\\",
                _ => "/",
            }),
            Piece::Raw(r) => s.push_str(r),
        }
    }
    s
}

/// Runs one case under `style`; panics on a broken property.
pub fn run(style: PathStyle, case: &Case) {
    let sets = match style {
        PathStyle::Posix => POSIX_ROOTS,
        PathStyle::Windows => WINDOWS_ROOTS,
    };
    let set = sets[usize::from(case.roots) % sets.len()];
    let (kubelet, dirs) = set.split_last().expect("root sets are not empty");
    let dirs: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
    let policy = PathPolicy::new(style, kubelet, &dirs).expect("fixed roots are valid");

    let mut fs = FakeFs {
        style,
        entries: HashMap::new(),
    };
    let root_comps: Vec<Vec<String>> = policy.roots().iter().map(|r| fs.split(r)).collect();
    for n in case.nodes.iter().take(24) {
        let mut comps: Vec<String> = Vec::new();
        if !n.under.is_multiple_of(4) {
            comps = root_comps[usize::from(n.under) % root_comps.len()].clone();
        } else if style == PathStyle::Windows {
            comps.push(if n.drive { "D:" } else { "C:" }.into());
        }
        comps.extend(n.at.iter().take(8).map(|&i| name(i).to_string()));
        let entry = match &n.kind {
            NodeKind::Link(t) => Entry::Link(t.render(style)),
            NodeKind::Volume => Entry::Volume,
            NodeKind::Foreign => Entry::Foreign,
            NodeKind::Missing => Entry::Missing,
            NodeKind::File => Entry::File,
            NodeKind::Fails => Entry::Fails,
        };
        let key = fs.key(&comps);
        fs.entries.entry(key).or_insert(entry);
    }
    let model = Model {
        style,
        roots: root_comps,
        fs: &fs,
    };

    let mut path = render_client(style, &case.path);
    if !case.path.under.is_multiple_of(4) {
        let root = &policy.roots()[usize::from(case.path.under) % policy.roots().len()];
        let sep = if style == PathStyle::Windows {
            "\\"
        } else {
            "/"
        };
        let rest = path.trim_start_matches(['/', '\\']);
        let rest = rest
            .strip_prefix("C:")
            .unwrap_or(rest)
            .trim_start_matches('\\');
        path = format!("{root}{sep}{rest}");
    }
    let checked = policy.check("fuzz", &path);
    if let Ok(n) = &checked {
        assert_normalised(&model, &policy, &path, n);
    }
    let confined = policy.confine("fuzz", &path, &fs);
    let following = policy.confine_following("fuzz", &path, &fs);
    if let Ok(n) = &confined {
        assert_eq!(checked.as_ref().ok(), Some(n), "confine {path:?} != check");
        judge(&model, &path, n, false, None);
    }
    if let Ok(r) = &following {
        let n = checked
            .as_ref()
            .unwrap_or_else(|e| panic!("confine_following accepted {path:?}, check refused: {e}"));
        judge(&model, &path, n, true, Some(r));
    }
}

fn assert_normalised(model: &Model<'_>, policy: &PathPolicy, path: &str, n: &str) {
    let comps = model.fs.split(n);
    assert!(
        model.within(&comps),
        "check({path:?}) = {n:?}: not inside a root"
    );
    assert!(
        !comps.iter().any(|c| c.is_empty() || c == "." || c == ".."),
        "check({path:?}) = {n:?}: not normalised"
    );
    assert!(!n.chars().any(char::is_control), "check({path:?}) = {n:?}");
    match model.style {
        PathStyle::Posix => assert!(n.starts_with('/') && !n.contains("//"), "{n:?}"),
        PathStyle::Windows => {
            let b = n.as_bytes();
            assert!(
                b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\',
                "check({path:?}) = {n:?}: not a drive path"
            );
            assert!(!n.contains('/') && !n.contains(r"\\"), "{n:?}");
            for c in &comps[1..] {
                assert!(
                    !c.contains([':', '"', '*', '?', '|', '<', '>'])
                        && !c.ends_with(['.', ' '])
                        && !is_device(c),
                    "check({path:?}) = {n:?}: forbidden component {c:?}"
                );
            }
        }
    }
    let again = policy.check("fuzz", n);
    assert_eq!(
        again.as_deref().ok(),
        Some(n),
        "check is not idempotent on {n:?}"
    );
    let exact = model
        .roots
        .iter()
        .any(|r| r.len() == comps.len() && r.iter().zip(&comps).all(|(a, b)| model.same(a, b)));
    assert_eq!(policy.is_root(n), exact, "is_root({n:?})");
}

/// Walks an accepted path the way the OS would and fails on an escape.
fn judge(model: &Model<'_>, path: &str, normalised: &str, follow: bool, resolved: Option<&str>) {
    let start = model.fs.split(normalised);
    let what = if follow {
        "confine_following"
    } else {
        "confine"
    };
    let mut readings = vec![("kernel", model.kernel(&start, follow))];
    if model.style == PathStyle::Windows {
        readings.push(("reparse", model.reparse(&start, follow)));
    }
    for (i, (reading, outcome)) in readings.iter().enumerate() {
        match outcome {
            Outcome::Fails => {}
            Outcome::Escapes(why) => panic!(
                "{what} accepted {path:?} (-> {resolved:?}) but the {reading} reading escapes: {why}"
            ),
            Outcome::At(loc) => {
                // Not following the final component: its parent must be inside; the name itself
                // is an entry of that directory.
                let inside = if follow {
                    model.within(loc)
                } else {
                    model.within(loc) || model.within(&loc[..loc.len().saturating_sub(1)])
                };
                assert!(
                    inside,
                    "{what} accepted {path:?} but the {reading} reading ends at {loc:?}, \
                     outside the roots"
                );
                // The primary reading of each platform must agree with what the policy resolved.
                let primary = match model.style {
                    PathStyle::Posix => 0,
                    PathStyle::Windows => 1,
                };
                if let Some(r) = resolved
                    && i == primary
                {
                    let got = model.fs.split(r);
                    let same = got.len() == loc.len()
                        && got.iter().zip(loc).all(|(a, b)| model.same(a, b));
                    assert!(
                        same,
                        "{what}({path:?}) resolved to {r:?}, the {reading} reading to {loc:?}"
                    );
                }
            }
        }
    }
}
