//! The walk: a path resolved component by component beneath held directory handles, checking every
//! link and mount point it passes against the roots, and handing the caller the handles it checked
//! (the rule: resolve once into a handle and act through it).
//!
//! A client owns directories below the roots and can swap any of them for a link at any instant.
//! Checking a path string and then giving the same string to the OS lets the OS resolve it again,
//! through whatever was swapped in meanwhile (kubelet's CVE-2017-1002101). Here the host opens
//! each component relative to the directory handle reached so far without following it
//! ([`Walker::look`]); a link is read, checked and followed by this walk, never by the OS; and the
//! operation then acts on the final name inside the held parent ([`Reached`]), so what was
//! checked is what is acted on.
//!
//! The same walk serves the string-returning [`PathPolicy::confine`] (over a [`LinkProbe`], for
//! the fuzz targets and for callers that only need the check), so there is one set of rules.

use super::lexical::parse_target;
use super::{LinkProbe, LinkTarget, MAX_LINK_HOPS, PathPolicy, PathStyle, Place, Start, shown};
use crate::error::{Error, Kind, Result};
use std::any::Any;
use std::io;

/// A host's handle on a directory, as the host's [`Walker`] made it (type-erased so host traits
/// stay object-safe; each host downcasts to its own type).
pub type Held = Box<dyn Any + Send>;

/// Whether an open failed because the path names nothing: it, or one of its components, is
/// missing, or a component is not a directory. Walks answer "absent" for it, not an error.
pub fn names_nothing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// What one name inside a held directory is, looked at without following it.
#[derive(Debug)]
pub enum Found<D> {
    /// Nothing by that name.
    Missing,
    /// A directory, opened without following links.
    Dir(D),
    /// A mounted volume (its contents are the volume: allowed), opened.
    Volume(D),
    /// A symbolic link or junction to this path (absolute, or relative to its directory).
    Link(String),
    /// A link or mount that cannot be proven to stay inside a root.
    Foreign(String),
    /// Anything else (a file, a device): nothing lies below it.
    Other,
}

impl<D> Found<D> {
    /// Whether anything exists there.
    pub fn exists(&self) -> bool {
        !matches!(self, Found::Missing)
    }

    /// The handle of a directory or mounted volume.
    pub fn into_dir(self) -> Option<D> {
        match self {
            Found::Dir(d) | Found::Volume(d) => Some(d),
            _ => None,
        }
    }
}

/// The handle-based view of a filesystem the walk moves through; implemented by each host.
pub trait Walker {
    /// A held directory.
    type Dir;
    /// Opens a root, or a directory on the way to one, by its path. These were chosen by the
    /// administrator, so the OS resolves them as it does any path. With `create`, missing
    /// directories on the way are made.
    fn open_trusted(&self, path: &str, create: bool) -> io::Result<Self::Dir>;
    /// What `name` inside `dir` is, without following it; a directory is opened relative to
    /// `dir`. `at` is the path it is known by (for messages).
    fn look(&self, dir: &Self::Dir, name: &str, at: &str) -> io::Result<Found<Self::Dir>>;
    /// What the final entry `name` inside `dir` is when the walk ends on it as itself (not
    /// followed, nothing created): the caller acts on it by its name inside the held `dir`, or
    /// only asks what it is, so it need not be held. A host may answer without opening it; a
    /// directory is then still [`Found::Dir`], with a handle that holds nothing and must not be
    /// acted through. The default opens it as [`Walker::look`] does.
    fn peek(&self, dir: &Self::Dir, name: &str, at: &str) -> io::Result<Found<Self::Dir>> {
        self.look(dir, name, at)
    }
    /// Creates the directory `name` inside `dir`; an existing entry is not an error (the walk
    /// looks again and decides).
    fn make_dir(&self, dir: &Self::Dir, name: &str, at: &str) -> io::Result<()>;
    /// The walk's fast path: `names` (plain components, at least one) below the held root `root`
    /// resolved in as few lookups as the OS allows, with the kernel refusing any link, mount
    /// point or `..` on the way; the final entry is looked at without following it. A host
    /// without such a lookup answers [`Beneath::Walk`] (the default), as it does when the kernel
    /// refused: the walk then goes component by component and applies its rules.
    fn beneath(&self, root: &Self::Dir, names: &[&str]) -> io::Result<Beneath<Self::Dir>> {
        let _ = (root, names);
        Ok(Beneath::Walk)
    }

    /// The fast path of a caller that asks only whether the final entry exists (PathExists): as
    /// [`Walker::beneath`], but no handle on the final entry is wanted, so a host may answer from
    /// one look at it inside its parent. `None`: the walk decides.
    fn exists_beneath(&self, root: &Self::Dir, names: &[&str]) -> io::Result<Option<bool>> {
        Ok(match self.beneath(root, names)? {
            Beneath::Reached { found, .. } if fast_answer(Mode::ENTRY, &found) => {
                Some(found.exists())
            }
            Beneath::Absent => Some(false),
            Beneath::Reached { .. } | Beneath::Walk => None,
        })
    }
}

/// What [`Walker::beneath`] found.
#[derive(Debug)]
pub enum Beneath<D> {
    /// Every component before the final one is a plain directory: the final entry's parent,
    /// held, and what the final entry is (a link there is reported, not followed; never a
    /// mounted volume or a foreign mount, which are [`Beneath::Walk`]).
    Reached {
        /// The final entry's directory, held open.
        parent: D,
        /// What the final entry is.
        found: Found<D>,
    },
    /// A component before the final one is missing or not a directory.
    Absent,
    /// A link or mount point lies on the way (or the host cannot tell): walk it.
    Walk,
}

/// How a path is walked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mode {
    /// Follow a link at the final component (operations on what the path leads to).
    pub follow_final: bool,
    /// Create missing directories on the way and at the end (Mkdir).
    pub create: bool,
    /// With `follow_final`: follow a final link to its direct target only, whose own final
    /// component is then reported as it is, not followed (IsSymlink's "does the link's target
    /// exist", which upstream answers without following the target further).
    pub direct_target: bool,
}

impl Mode {
    /// Act on the final entry itself (a link is not followed).
    pub const ENTRY: Mode = Mode {
        follow_final: false,
        create: false,
        direct_target: false,
    };
    /// Act on what the path leads to.
    pub const FOLLOW: Mode = Mode {
        follow_final: true,
        create: false,
        direct_target: false,
    };
    /// Act on a final link's direct target (see [`Mode::direct_target`]).
    pub const LINK_TARGET: Mode = Mode {
        follow_final: true,
        create: false,
        direct_target: true,
    };
    /// Make the directory and every missing one above it.
    pub const CREATE: Mode = Mode {
        follow_final: true,
        create: true,
        direct_target: false,
    };
}

/// A path whose every component before the last was reached and checked.
#[derive(Debug)]
pub struct Reached<D> {
    /// The directory holding the final entry, held open.
    pub parent: D,
    /// The final entry's name inside `parent`.
    pub name: String,
    /// What the final entry is (never a [`Found::Link`] when the final link was followed; not
    /// followed, a directory's handle may hold nothing: see [`Walker::peek`]).
    pub found: Found<D>,
    /// The request path, normalised.
    pub normalised: String,
    /// Where it leads after links (`parent`'s path and `name`).
    pub resolved: String,
}

/// The outcome of a walk that passed the rules.
#[derive(Debug)]
pub enum Walk<D> {
    /// Every component before the final one exists and was reached.
    Reached(Reached<D>),
    /// A component before the final one is missing or not a directory, so nothing at the path
    /// exists.
    Absent {
        /// The request path, normalised.
        normalised: String,
        /// Where it leads after the links that exist.
        resolved: String,
    },
}

impl<D> Walk<D> {
    /// The request path, normalised.
    pub fn normalised(&self) -> &str {
        match self {
            Walk::Reached(r) => &r.normalised,
            Walk::Absent { normalised, .. } => normalised,
        }
    }

    /// Where the path leads after links.
    pub fn resolved(&self) -> &str {
        match self {
            Walk::Reached(r) => &r.resolved,
            Walk::Absent { resolved, .. } => resolved,
        }
    }
}

/// One component of the location reached so far.
struct Entry<D> {
    name: String,
    /// Reached by following a link, or a mount point: on Windows a later `..` must not leave it,
    /// because Windows would read that `..` textually, against a different parent.
    sticky: bool,
    /// Its handle: for a directory below a root once looked at, for a root (or a directory on the
    /// way to one) once needed. `None` below a root means it does not exist as a directory, and
    /// nothing below it does either.
    held: Option<D>,
}

/// Work still to do while walking.
enum Step {
    /// Go into this component; `follow` says whether a link here is resolved; `last` marks the
    /// component the whole walk ends on.
    Name {
        name: String,
        follow: bool,
        last: bool,
    },
    /// The target of this link is fully walked: the place reached must lie within a root.
    LinkEnd { link: String, target: String },
}

/// Where a walk ended: the location, the filesystem root if it was held, and what the final
/// entry was found to be.
struct End<D> {
    stack: Vec<Entry<D>>,
    fs_root: Option<D>,
    last_found: Option<Found<D>>,
}

/// How many times a directory being created is looked at again when it keeps changing.
const CREATE_ATTEMPTS: usize = 8;

impl PathPolicy {
    /// Walks `path` for operation `op` through `walker`'s handles, as the OS would resolve it but
    /// checking every link and mount point on the way (see the module docs of [`super`]).
    pub fn walk<W: Walker + ?Sized>(
        &self,
        op: &str,
        path: &str,
        mode: Mode,
        walker: &W,
    ) -> Result<Walk<W::Dir>> {
        let style = self.style;
        let path = &*self.qualified(path);
        let (comps, root_len) = self.lexical_inside(op, path)?;
        let normalised = style.render(&comps);
        let deny = |cause: String| Error::new(Kind::PermissionDenied, op, shown(path), cause);
        let io_err = |at: &str, e: &io::Error| {
            Error::io(op, format!("{} (checking {at:?})", shown(path)), e)
        };
        let roots = || self.roots.join(", ");

        let mut stack = root_stack(&comps[..root_len]);
        let below = &comps[root_len..];
        let mut steps: Vec<Step> = below
            .iter()
            .enumerate()
            .rev()
            .map(|(i, c)| {
                let last = i + 1 == below.len();
                Step::Name {
                    name: c.to_string(),
                    follow: !last || mode.follow_final,
                    last,
                }
            })
            .collect();
        // Links whose targets are being walked, innermost last (for messages).
        let mut links: Vec<(String, String)> = Vec::new();
        let mut hops = 0usize;
        // What the final component is, once it has been looked at.
        let mut last_found: Option<Found<W::Dir>> = None;
        // The filesystem root, held when a root is the filesystem root (tests only).
        let mut fs_root: Option<W::Dir> = None;

        // The fast path: below the root, one lookup that the kernel refuses at any link or mount
        // point; only then is the path walked component by component (with the root held).
        // Mkdir takes it only to find its directory there already (drivers make it on every
        // stage); anything it has to make is made by the walk.
        if let Some((last, _)) = below.split_last()
            && let Some(root) = self
                .hold(&mut stack, &mut fs_root, walker, false)
                .map_err(|(at, e)| io_err(&at, &e))?
        {
            match walker
                .beneath(root, below)
                .map_err(|e| io_err(&normalised, &e))?
            {
                Beneath::Reached { parent, found } if fast_answer(mode, &found) => {
                    return Ok(Walk::Reached(Reached {
                        parent,
                        name: last.to_string(),
                        found,
                        resolved: normalised.clone(),
                        normalised,
                    }));
                }
                Beneath::Absent if !mode.create => {
                    return Ok(Walk::Absent {
                        resolved: normalised.clone(),
                        normalised,
                    });
                }
                Beneath::Reached { .. } | Beneath::Absent | Beneath::Walk => {}
            }
        }

        while let Some(step) = steps.pop() {
            let (name, follow, last) = match step {
                Step::Name { name, follow, last } => (name, follow, last),
                Step::LinkEnd { link, target } => {
                    links.pop();
                    if !self.within(&stack) {
                        return Err(deny(format!(
                            "{link:?} is a link to {target:?}, which resolves to {:?}, outside \
                             the allowed roots [{}]",
                            style.render(&names(&stack)),
                            roots()
                        )));
                    }
                    if let Some(top) = stack.last_mut() {
                        top.sticky = true;
                    }
                    continue;
                }
            };
            // Only link targets contain `.` and `..`; client paths were refused for them.
            if name == "." {
                continue;
            }
            if name == ".." {
                if stack.len() > style.base() {
                    let top = stack.last().expect("stack is longer than its base");
                    if style == PathStyle::Windows && top.sticky {
                        let (link, target) = links.last().cloned().unwrap_or_default();
                        return Err(deny(format!(
                            "{link:?} is a link to {target:?}, whose '..' steps back out of the \
                             link or mount point {:?}; Windows reads that '..' textually, so \
                             where it leads cannot be proven",
                            style.render(&names(&stack))
                        )));
                    }
                    // Back at the parent, whose handle (if it exists) is still held: Windows
                    // reads the `..` of a link target textually (`m\..\evil` is `evil` even
                    // when `m` is missing or a file), so what follows is looked at again.
                    stack.pop();
                }
                // `..` from within (or on the way to) a root stays within (or on the way).
                continue;
            }
            stack.push(Entry {
                name,
                sticky: false,
                held: None,
            });
            let place = self.place_of(&stack);
            if place == Place::Outside {
                // Only a link target can get here: the client path was checked lexically.
                let (link, target) = links.last().cloned().unwrap_or_default();
                return Err(deny(format!(
                    "{link:?} is a link to {target:?}, which leads to {:?}, outside the allowed \
                     roots [{}]",
                    style.render(&names(&stack)),
                    roots()
                )));
            }
            if place != Place::Below {
                continue;
            }
            let n = stack.len();
            let at = style.render(&names(&stack));
            let (above, top) = stack.split_at_mut(n - 1);
            let parent = match self
                .hold(above, &mut fs_root, walker, mode.create)
                .map_err(|(at, e)| io_err(&at, &e))?
            {
                Some(parent) => parent,
                None => continue,
            };
            let create = mode.create && (follow || !last);
            // Under a profile, nothing is made outside its places, also where a link led.
            let admit = || {
                self.admit(op, &at)
                    .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))
            };
            let found = if last && !follow {
                walker.peek(parent, &top[0].name, &at)
            } else {
                look_or_create(walker, parent, &top[0].name, &at, create.then_some(&admit))
            }
            .map_err(|e| match e.kind() {
                io::ErrorKind::PermissionDenied if self.scope.is_restricted() => {
                    Error::new(Kind::PermissionDenied, op, shown(path), e)
                }
                _ => io_err(&at, &e),
            })?;
            if last && !(follow && matches!(found, Found::Link(_))) {
                // The final entry is reported as it is (a followed final link is walked on).
                // What a followed path leads to must be provably inside, except that Mkdir
                // accepts an existing directory whatever is mounted on it: it acts on nothing.
                if let (true, false, Found::Foreign(why)) = (follow, mode.create, &found) {
                    return Err(deny(format!(
                        "{at:?} cannot be proven to stay within the allowed roots: {why}"
                    )));
                }
                last_found = Some(found);
                continue;
            }
            match found {
                Found::Dir(d) => {
                    stack[n - 1].held = Some(d);
                }
                Found::Volume(d) => {
                    stack[n - 1].held = Some(d);
                    stack[n - 1].sticky = true;
                }
                Found::Foreign(why) => {
                    return Err(deny(format!(
                        "{at:?} cannot be proven to stay within the allowed roots: {why}"
                    )));
                }
                Found::Link(target) => {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(Error::invalid(
                            op,
                            shown(path),
                            format!(
                                "too many levels of links (more than {MAX_LINK_HOPS}; the last \
                                 was {at:?})"
                            ),
                        ));
                    }
                    let (start, tcomps) = parse_target(style, &target).map_err(|why| {
                        deny(format!(
                            "{at:?} is a link to {target:?}, which cannot be resolved safely: \
                             {why}"
                        ))
                    })?;
                    stack.pop();
                    match start {
                        Start::Relative => {}
                        Start::Root => stack.clear(),
                        Start::Drive(d) => {
                            stack.clear();
                            stack.push(Entry {
                                name: d.to_string(),
                                sticky: false,
                                held: None,
                            });
                        }
                    }
                    steps.push(Step::LinkEnd {
                        link: at.clone(),
                        target: target.clone(),
                    });
                    let count = tcomps.len();
                    steps.extend(tcomps.iter().enumerate().rev().map(|(i, c)| {
                        let target_end = last && i + 1 == count;
                        Step::Name {
                            name: c.to_string(),
                            follow: !(target_end && mode.direct_target),
                            last: target_end,
                        }
                    }));
                    links.push((at, target));
                    // A link target that names nothing (`.`) ends where its link was.
                    continue;
                }
                Found::Other | Found::Missing => {
                    if mode.create {
                        return Err(Error::io(
                            op,
                            shown(path),
                            &io::Error::new(
                                io::ErrorKind::NotADirectory,
                                format!("{at:?} exists and is not a directory"),
                            ),
                        ));
                    }
                    // Nothing below it exists; `held` stays empty.
                }
            }
        }

        let end = End {
            stack,
            fs_root,
            last_found,
        };
        self.reached(op, path, normalised, end, walker, mode.create)
    }

    /// Whether anything exists at `path` (a link, dangling or not, counts; it is not followed):
    /// the walk's answer, from the host's [`Walker::exists_beneath`] when it can give one.
    pub fn exists<W: Walker + ?Sized>(&self, op: &str, path: &str, walker: &W) -> Result<bool> {
        let qualified = self.qualified(path);
        let (comps, root) = self.lexical_root(op, &qualified)?;
        let root_len = self.root_comps.get(root).map_or(0, Vec::len);
        self.admit(op, &self.style.render(&comps))?;
        if let Some(below) = comps.get(root_len..).filter(|b| !b.is_empty())
            && let Some(at) = self.roots.get(root)
        {
            // The root as the policy names it (a root is always on the root path, so the walk
            // would open it as trusted too), without building the walk's stack.
            let io_err = |at: &str, e: &io::Error| {
                Error::io(op, format!("{} (checking {at:?})", shown(&qualified)), e)
            };
            let held = match walker.open_trusted(at, false) {
                Ok(d) => Some(d),
                Err(e) if names_nothing(&e) => None,
                Err(e) => return Err(io_err(at, &e)),
            };
            if let Some(dir) = held
                && let Some(exists) = walker
                    .exists_beneath(&dir, below)
                    .map_err(|e| io_err(&self.style.render(&comps), &e))?
            {
                return Ok(exists);
            }
        }
        Ok(match self.walk(op, path, Mode::ENTRY, walker)? {
            Walk::Reached(r) => r.found.exists(),
            Walk::Absent { .. } => false,
        })
    }

    /// The walk's result from the location reached and what its final entry was found to be.
    fn reached<W: Walker + ?Sized>(
        &self,
        op: &str,
        path: &str,
        normalised: String,
        end: End<W::Dir>,
        walker: &W,
        create: bool,
    ) -> Result<Walk<W::Dir>> {
        let End {
            mut stack,
            mut fs_root,
            last_found,
        } = end;
        let resolved = self.style.render(&names(&stack));
        // Under a profile, where links led must be one of its places too.
        self.admit(op, &resolved)?;
        let io_err = |at: &str, e: &io::Error| {
            Error::io(op, format!("{} (checking {at:?})", shown(path)), e)
        };
        // Only a link to the filesystem root or a drive could end there, and the walk refused it
        // unless that is a root itself (host tests).
        let Some(last) = stack.pop() else {
            return Err(Error::invalid(op, shown(path), "names the filesystem root"));
        };
        if self
            .hold(&mut stack, &mut fs_root, walker, create)
            .map_err(|(at, e)| io_err(&at, &e))?
            .is_none()
        {
            return Ok(Walk::Absent {
                normalised,
                resolved,
            });
        }
        let found = match (last_found, last.held) {
            (Some(found), _) => found,
            (None, Some(d)) => Found::Dir(d),
            (None, None) => {
                // A root itself (or the way to one): opened as the administrator named it.
                let mut on_path = names(&stack);
                on_path.push(&last.name);
                if self.place_of_names(&on_path) == Place::OnRootPath {
                    match walker.open_trusted(&resolved, create) {
                        Ok(d) => Found::Dir(d),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => Found::Missing,
                        Err(e) if e.kind() == io::ErrorKind::NotADirectory => Found::Other,
                        Err(e) => return Err(io_err(&resolved, &e)),
                    }
                } else {
                    Found::Missing
                }
            }
        };
        let parent = match stack.pop() {
            Some(e) => e.held,
            None => fs_root,
        }
        .expect("the parent was just held");
        Ok(Walk::Reached(Reached {
            parent,
            name: last.name,
            found,
            normalised,
            resolved,
        }))
    }

    /// The handle of the location `stack` names, opening it as trusted when it is a root or on
    /// the way to one (`fs_root` holds the filesystem root for an empty stack). `None` when it is
    /// below a root and does not exist as a directory.
    fn hold<'s, W: Walker + ?Sized>(
        &self,
        stack: &'s mut [Entry<W::Dir>],
        fs_root: &'s mut Option<W::Dir>,
        walker: &W,
        create: bool,
    ) -> std::result::Result<Option<&'s W::Dir>, (String, io::Error)> {
        let on_root_path = self.place_of(stack) == Place::OnRootPath;
        let at = self.style.render(&names(stack));
        let slot = match stack.last_mut() {
            Some(top) => &mut top.held,
            None => fs_root,
        };
        if slot.is_none() {
            if !on_root_path {
                return Ok(None);
            }
            match walker.open_trusted(&at, create) {
                Ok(d) => *slot = Some(d),
                Err(e) if names_nothing(&e) => {
                    return Ok(None);
                }
                Err(e) => return Err((at, e)),
            }
        }
        Ok(slot.as_ref())
    }

    fn place_of<D>(&self, loc: &[Entry<D>]) -> Place {
        self.place_of_names(&names(loc))
    }

    /// Whether a location is a root or lies inside one.
    fn within<D>(&self, loc: &[Entry<D>]) -> bool {
        self.root_comps.iter().any(|r| {
            loc.len() >= r.len() && r.iter().zip(loc).all(|(r, e)| self.style.same(&e.name, r))
        })
    }

    /// Walks `path` through a [`LinkProbe`] (which answers about path strings) and returns
    /// (normalised, resolved). For checks whose caller then acts on the string itself.
    pub(super) fn walk_probe(
        &self,
        op: &str,
        path: &str,
        follow_final: bool,
        probe: &dyn LinkProbe,
    ) -> Result<(String, String)> {
        let mode = Mode {
            follow_final,
            create: false,
            direct_target: false,
        };
        let walk = self.walk(op, path, mode, &ProbeWalker(probe))?;
        Ok((walk.normalised().to_string(), walk.resolved().to_string()))
    }
}

/// Whether what the fast path found at the final entry is the walk's answer for `mode`: a
/// directory, nothing or anything else, and a link that is not to be followed; for Mkdir only
/// a directory (the walk makes what is missing and refuses what is not a directory).
fn fast_answer<D>(mode: Mode, found: &Found<D>) -> bool {
    match found {
        Found::Dir(_) => true,
        Found::Missing | Found::Other => !mode.create,
        Found::Link(_) => !mode.follow_final,
        Found::Volume(_) | Found::Foreign(_) => false,
    }
}

/// Looks at `name` in `parent`, creating it first when `create` is given and it is missing
/// (once `create` allowed it: a profile makes nothing outside its places).
fn look_or_create<W: Walker + ?Sized>(
    walker: &W,
    parent: &W::Dir,
    name: &str,
    at: &str,
    create: Option<&dyn Fn() -> io::Result<()>>,
) -> io::Result<Found<W::Dir>> {
    for _ in 0..CREATE_ATTEMPTS {
        match walker.look(parent, name, at)? {
            Found::Missing if let Some(allowed) = create => {
                allowed()?;
                walker.make_dir(parent, name, at)?
            }
            found => return Ok(found),
        }
    }
    Err(io::Error::other(format!(
        "{at:?} vanished {CREATE_ATTEMPTS} times right after it was created"
    )))
}

/// The location of a root: its components, not looked at (the administrator chose the root).
fn root_stack<D>(comps: &[&str]) -> Vec<Entry<D>> {
    comps
        .iter()
        .map(|c| Entry {
            name: c.to_string(),
            sticky: false,
            held: None,
        })
        .collect()
}

fn names<D>(stack: &[Entry<D>]) -> Vec<&str> {
    stack.iter().map(|e| e.name.as_str()).collect()
}

/// A [`Walker`] over a [`LinkProbe`]: the "handles" are the paths themselves. A probe answering
/// `None` (a plain entry, or one it cannot tell is missing) lets the walk go on.
struct ProbeWalker<'a>(&'a dyn LinkProbe);

impl Walker for ProbeWalker<'_> {
    type Dir = ();

    fn open_trusted(&self, _: &str, _: bool) -> io::Result<()> {
        Ok(())
    }

    fn look(&self, _: &(), _: &str, at: &str) -> io::Result<Found<()>> {
        match self.0.link_target(at) {
            Ok(None) => Ok(Found::Dir(())),
            Ok(Some(LinkTarget::Volume)) => Ok(Found::Volume(())),
            Ok(Some(LinkTarget::Path(t))) => Ok(Found::Link(t)),
            Ok(Some(LinkTarget::Foreign(why))) => Ok(Found::Foreign(why)),
            Err(e) if names_nothing(&e) => Ok(Found::Missing),
            Err(e) => Err(e),
        }
    }

    fn make_dir(&self, _: &(), _: &str, _: &str) -> io::Result<()> {
        Ok(())
    }
}
