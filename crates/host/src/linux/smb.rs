//! SMB on Linux: a node-wide "mapping" is a cifs mount of the share root at a directory the
//! daemon manages, `<state dir>/smb/<root key>@<credential tag>`; `local_path` becomes a
//! symlink to `<mount>/<sub path>`.
//!
//! * **One mount per credential.** The tag is a keyed hash of the user and password (see
//!   `credential_key.rs`), so a request made with other credentials gets a mount of its own
//!   and never reaches the share through another tenant's login; the password itself is
//!   stored nowhere.
//! * **The share's links never lead the host out of the mount**: mounts carry `nosuid`,
//!   `nodev` and `nosymfollow` (Linux 5.10+: a symbolic link on the share is not followed at
//!   all). On a kernel that refuses or ignores `nosymfollow` (the mount table then lacks it),
//!   each component of the staging link's target is checked beneath the mount root, without
//!   following links, before the link is made.
//! * The mount base is in the state directory (root's, 0700), which no client reaches.
//!
//! Every network step (resolving the server's name, the mount, the health `statfs`) runs as a
//! bounded probe ([`crate::probe`]): its caller waits until its deadline or the step's limit,
//! one probe per name, mount directory or mount runs at a time (later callers join it), and
//! the probes stuck at once are capped. A server that does not answer holds a thread per step
//! of its own, never a caller past its deadline nor another share's calls.
//!
//! The mount is made with `mount(2)` directly (no `mount.cifs` helper): the kernel cifs client
//! takes the UNC as the mount source, the server's address (`ip=`) and the credentials in the
//! mount data, so the password is only ever in that one system-call argument — never in a
//! process's argv, a log line or an error message. The key of a root is the root with every byte outside
//! `[a-z0-9._-]` percent-encoded, so the mount directory names its root and the host's mount
//! table is the whole truth about mappings.

use csi_proxy_core::smb::{MappingInfo, MappingState, SmbHost, SmbLinkUse, SmbMapping, SmbUsers};
use csi_proxy_core::{Error, Kind, Result};
use rustix::mount::MountFlags;
use std::ffi::CString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::probe::{Probes, until};

use super::mountinfo::{self, MountInfo};
use super::state_dir;

mod cifs;
mod credential_key;
#[cfg(test)]
mod tests;

pub use cifs::{CifsOs, RealCifs};
pub use credential_key::CredentialKey;

const NEW: &str = "NewSmbGlobalMapping";
const REMOVE: &str = "RemoveSmbGlobalMapping";
/// Between a root's key and its credential tag in a mount directory's name (`@` is
/// percent-encoded in root keys, so the split is unambiguous).
const TAG_SEPARATOR: char = '@';

/// How long resolving a server's name may take (without a nearer caller deadline).
const RESOLVE_LIMIT: Duration = Duration::from_secs(10);
/// How long a cifs mount may take: the kernel's own connect attempts to a server that does not
/// answer last about as long.
const MOUNT_LIMIT: Duration = Duration::from_secs(60);
/// How long a mount may take to answer `statfs` before it counts as not answering.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);
/// How many probes of each step may be stuck at once; past that a step fails at once.
const MAX_PROBES: usize = 16;

/// The name lookups in flight, by server.
static RESOLVES: LazyLock<Arc<Probes<Option<String>>>> =
    LazyLock::new(|| Arc::new(Probes::new(MAX_PROBES)));
/// The mounts in flight, by mount directory.
static MOUNTS: LazyLock<Arc<Probes<std::result::Result<(), rustix::io::Errno>>>> =
    LazyLock::new(|| Arc::new(Probes::new(MAX_PROBES)));
/// The health probes in flight, by mount directory.
static HEALTH: LazyLock<Arc<Probes<std::result::Result<(), rustix::io::Errno>>>> =
    LazyLock::new(|| Arc::new(Probes::new(MAX_PROBES)));

/// The Linux SMB host.
pub struct LinuxSmbHost {
    base: PathBuf,
    os: Arc<dyn CifsOs>,
    /// `None` when the kernel gave no random key: mappings then fail, naming why.
    key: Option<CredentialKey>,
    /// Most directory entries one link scan looks at ([`crate::smb_scan::MAX_ENTRIES`]).
    scan_limit: usize,
}

/// The mount directory name of a lower-cased `\\server\share` root.
pub fn root_key(root: &str) -> String {
    let body = root.trim_start_matches('\\');
    let mut out = String::new();
    for b in body.bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The root a mount directory name (`<root key>@<tag>`) stands for, if it is one of ours.
pub fn key_root(name: &str) -> Option<String> {
    let (key, tag) = name.split_once(TAG_SEPARATOR)?;
    if tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = Vec::new();
    let mut it = key.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let h = [it.next()?, it.next()?];
            bytes.push(u8::from_str_radix(std::str::from_utf8(&h).ok()?, 16).ok()?);
        } else {
            bytes.push(b);
        }
    }
    let body = String::from_utf8(bytes).ok()?;
    body.contains('\\').then(|| format!("\\\\{body}"))
}

/// The cifs mount data for `mapping` reaching the server at `ip`. The password is escaped the
/// way the kernel's option parser expects (`,` doubled); user and domain may not contain `,`.
/// Errors name the field, never its value.
///
/// The share root is not in the data: it is the mount source ([`mount_source`]), a system-call
/// argument of its own. A share name may carry `,` and `=` (Samba, NAS exports), and no
/// escaping makes them safe in the data on every kernel: the LSM pass
/// (`security_sb_eat_lsm_opts`) splits at every `,` before cifs joins `,,` back, and kernels
/// before 5.11 split a `unc=` value at `,,` too, so `\\nas\x,,ip=…` would set an option. The
/// kernel takes the UNC from the source (since 3.8; `unc=` is ignored since 5.11).
pub fn mount_data(mapping: &SmbMapping, ip: &str) -> std::result::Result<String, String> {
    let mut parts = vec![format!("ip={ip}")];
    match &mapping.credentials {
        Some(c) => {
            let (domain, user) = match c.username.split_once('\\') {
                Some((d, u)) => (Some(d), u),
                None => (None, c.username.as_str()),
            };
            for (what, v) in [("user name", user), ("domain", domain.unwrap_or(""))] {
                if v.contains(',') || v.chars().any(char::is_control) {
                    return Err(format!("the {what} contains ',' or a control character"));
                }
            }
            if c.password.expose().chars().any(|ch| ch == '\0') {
                return Err("the password contains a NUL character".into());
            }
            parts.push(format!("username={user}"));
            if let Some(d) = domain {
                parts.push(format!("domain={d}"));
            }
            parts.push(format!(
                "password={}",
                c.password.expose().replace(',', ",,")
            ));
        }
        // No user: the host's own (anonymous / null session) access, as upstream maps without a
        // credential.
        None => parts.push("guest".into()),
    }
    if mapping.require_privacy {
        parts.push("seal".into());
    }
    Ok(parts.join(","))
}

/// The `mount(2)` source of a lower-cased `\\server\share` root: `//server/share`, the name
/// verbatim (the kernel's `smb3_parse_devname` splits it at `/` and `\\` only; core keeps both
/// out of server and share names).
pub fn mount_source(root: &str) -> String {
    format!("//{}", root.trim_start_matches('\\').replace('\\', "/"))
}

/// Why cifs mounts cannot work on this kernel, if they cannot.
pub fn cifs_missing() -> Option<String> {
    RealCifs.cifs_missing()
}

impl LinuxSmbHost {
    /// A host mounting shares under `base` (in the state directory), on the real kernel.
    pub fn new(base: impl Into<PathBuf>) -> Self {
        Self::with_os(base, Arc::new(RealCifs))
    }

    /// As [`Self::new`], acting through `os`. `base` is made (or made again) mode 0700 now and
    /// before each mapping: a mapping is mounted with the node's credentials for the share, so
    /// only root may reach its files there (pods reach them through kubelet's bind mounts).
    pub fn with_os(base: impl Into<PathBuf>, os: Arc<dyn CifsOs>) -> Self {
        let mut base = base.into();
        if let Err(e) = private_base(&base) {
            tracing::warn!(dir = %base.display(), "cannot make the SMB mount directory private: {e}");
        }
        // The mount table names mount points by their real path.
        if let Ok(real) = fs::canonicalize(&base) {
            base = real;
        }
        let key = CredentialKey::load_or_create(&base)
            .map_err(|e| tracing::error!("no random key for SMB credential tags: {e}"))
            .ok();
        Self {
            base,
            os,
            key,
            scan_limit: crate::smb_scan::MAX_ENTRIES,
        }
    }

    /// As the host, with link scans stopping at `limit` entries (tests: a tree past the limit
    /// made in milliseconds).
    #[cfg(test)]
    fn with_scan_limit(mut self, limit: usize) -> Self {
        self.scan_limit = limit;
        self
    }

    /// Where the mapping of `mapping.root` with `mapping`'s credentials is mounted.
    pub fn mount_dir(&self, mapping: &SmbMapping) -> Result<PathBuf> {
        let key = self.key.as_ref().ok_or_else(|| {
            Error::new(
                Kind::Unavailable,
                NEW,
                format!("mapping {:?}", mapping.root),
                "the kernel gave no random key to tell credentials apart (see the log)",
            )
        })?;
        Ok(self.base.join(format!(
            "{}{TAG_SEPARATOR}{}",
            root_key(&mapping.root),
            key.tag(mapping)
        )))
    }

    fn table(&self, op: &str) -> Result<Vec<MountInfo>> {
        self.os
            .mount_table()
            .map_err(|e| Error::io(op, "mount table /proc/self/mountinfo", &e))
    }

    fn cifs_mount_at(&self, op: &str, dir: &Path) -> Result<Option<MountInfo>> {
        Ok(mountinfo::topmost_at(&self.table(op)?, dir)
            .filter(|m| is_cifs(m))
            .cloned())
    }

    /// The cifs mounts of `root` under the base, one per credential it was mapped with.
    fn mounts_of(&self, op: &str, root: &str) -> Result<Vec<MountInfo>> {
        let mut mounts: Vec<MountInfo> = self
            .table(op)?
            .into_iter()
            .filter(|m| {
                is_cifs(m) && self.root_of_mount_point(&m.mount_point).as_deref() == Some(root)
            })
            .collect();
        mounts.sort_by(|a, b| a.mount_point.cmp(&b.mount_point));
        mounts.dedup_by(|a, b| a.mount_point == b.mount_point);
        Ok(mounts)
    }

    /// The root whose mapping `dir` is, if it is a mount directory of this base.
    fn root_of_mount_point(&self, dir: &Path) -> Option<String> {
        (dir.parent() == Some(self.base.as_path()))
            .then(|| key_root(&dir.file_name()?.to_string_lossy()))
            .flatten()
    }

    /// A probe key: the step's object, on this host's OS (each fake in a test process is its
    /// own machine).
    fn probe_key(&self, object: &str) -> String {
        format!("{:p} {object}", Arc::as_ptr(&self.os))
    }

    /// How the mount at `dir` answers `statfs` within [`HEALTH_TIMEOUT`] (or the caller's
    /// deadline).
    fn health(&self, dir: &Path) -> Health {
        let (os, d) = (self.os.clone(), dir.to_path_buf());
        match HEALTH.answers(
            &self.probe_key(&dir.display().to_string()),
            until(HEALTH_TIMEOUT),
            move || os.answers(&d),
        ) {
            Some(Ok(())) => Health::Answers,
            Some(Err(errno)) if credential_refused(errno) => Health::Refused(errno),
            Some(Err(errno)) => Health::NotAnswering(format!("not answering ({errno})")),
            None => Health::NotAnswering(format!(
                "not answering within {} s or the caller's deadline",
                HEALTH_TIMEOUT.as_secs()
            )),
        }
    }

    fn state_of(&self, dir: &Path) -> MappingState {
        let (healthy, status, remap_heals) = match self.health(dir) {
            Health::Answers => (true, "OK".to_string(), false),
            // Mounting again is the repair only for a refused credential: a server that does
            // not answer refuses a new mount too, and the mount kept reconnects by itself
            // once it answers.
            Health::Refused(errno) => (false, format!("credential refused ({errno})"), true),
            Health::NotAnswering(why) => (false, why, false),
        };
        MappingState::Present(MappingInfo {
            healthy,
            status,
            // The directory's tag already says whose credentials made it.
            username: None,
            remap_heals,
        })
    }

    /// Detaches the cifs mount at `dir` and removes its directory.
    fn unmount(&self, dir: &Path, object: &str) -> Result<()> {
        // Detach: open files keep working until closed, new lookups no longer reach the
        // share (what a forced removal of a Windows global mapping comes closest to
        // without data loss).
        self.os.unmount_detach(dir).map_err(|errno| {
            Error::new(
                Kind::Internal,
                REMOVE,
                object,
                format!("unmount {:?}: {errno}", dir.display()),
            )
        })?;
        let _ = fs::remove_dir(dir);
        Ok(())
    }

    /// An address of `server`, resolved within [`RESOLVE_LIMIT`] (or the caller's deadline).
    fn resolve(&self, server: &str, object: &str) -> Result<String> {
        let (os, name) = (self.os.clone(), server.to_string());
        match RESOLVES.answers(&self.probe_key(server), until(RESOLVE_LIMIT), move || {
            os.resolve(&name)
        }) {
            Some(Some(ip)) => Ok(ip),
            // The kernel client cannot resolve names: resolved here, as mount.cifs does.
            Some(None) => Err(Error::new(
                Kind::NotFound,
                NEW,
                object,
                format!("server {server:?} does not resolve to an address"),
            )),
            None => Err(Error::new(
                Kind::Unavailable,
                NEW,
                object,
                format!(
                    "the name servers did not resolve server {server:?} within {} s or the \
                     caller's deadline; retry later",
                    RESOLVE_LIMIT.as_secs()
                ),
            )),
        }
    }

    /// Mounts `source` at `dir` ([`mount_cifs`]) within [`MOUNT_LIMIT`] (or the caller's
    /// deadline). A mount that does not end in time goes on: when it succeeds later, a retry
    /// finds it in the mount table and uses it; when it fails, its directory is removed.
    fn mount_bounded(&self, source: &str, dir: &Path, data: CString, object: &str) -> Result<()> {
        let (os, src, d) = (self.os.clone(), source.to_string(), dir.to_path_buf());
        let answer = MOUNTS.answers(
            &self.probe_key(&dir.display().to_string()),
            until(MOUNT_LIMIT),
            move || {
                let r = mount_cifs(&*os, &src, &d, &data);
                if r.is_err() {
                    let _ = fs::remove_dir(&d);
                }
                r
            },
        );
        let errno = match answer {
            Some(Ok(())) => return Ok(()),
            Some(Err(errno)) => errno,
            None => {
                return Err(Error::new(
                    Kind::Unavailable,
                    NEW,
                    object,
                    format!(
                        "the cifs mount at {:?} did not complete within {} s or the caller's \
                         deadline (the server does not answer); it goes on, and a retry uses \
                         it once it is made",
                        dir.display(),
                        MOUNT_LIMIT.as_secs()
                    ),
                ));
            }
        };
        let kind = match errno {
            rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => Kind::PermissionDenied,
            rustix::io::Errno::NODEV => Kind::FailedPrecondition,
            rustix::io::Errno::HOSTUNREACH
            | rustix::io::Errno::CONNREFUSED
            | rustix::io::Errno::TIMEDOUT
            | rustix::io::Errno::HOSTDOWN => Kind::Unavailable,
            rustix::io::Errno::NOENT | rustix::io::Errno::NXIO => Kind::NotFound,
            rustix::io::Errno::INVAL => Kind::InvalidArgument,
            _ => Kind::Internal,
        };
        Err(Error::new(
            kind,
            NEW,
            object,
            format!("cifs mount at {:?} failed: {errno}", dir.display()),
        ))
    }

    /// Checks, on a mount made without `nosymfollow`, that `sub` leads beneath the mount root
    /// `dir` through no symbolic link: each existing component is opened beneath the previous
    /// one without following links. A missing component ends the check (the link dangles
    /// until the share has it).
    fn check_beneath(&self, dir: &Path, sub: &[String], object: &str) -> Result<()> {
        use rustix::fs::{Mode, OFlags};
        let mount = self.cifs_mount_at(NEW, dir)?;
        if mount
            .as_ref()
            .is_none_or(|m| m.mount_options.split(',').any(|o| o == "nosymfollow"))
        {
            return Ok(()); // nothing mounted (nothing to follow), or the kernel follows nothing
        }
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut fd = rustix::fs::open(dir, flags, Mode::empty())
            .map_err(|e| Error::io(NEW, format!("mount {:?}", dir.display()), &e.into()))?;
        for c in sub {
            fd = match rustix::fs::openat(&fd, c.as_str(), flags, Mode::empty()) {
                Ok(next) => next,
                Err(rustix::io::Errno::NOENT) => return Ok(()),
                Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                    return Err(Error::new(
                        Kind::FailedPrecondition,
                        NEW,
                        object,
                        format!(
                            "{c:?} on the share is a symbolic link or not a directory; this \
                             kernel mounts without nosymfollow, so no staging link is made \
                             through it"
                        ),
                    ));
                }
                Err(e) => return Err(Error::io(NEW, object, &e.into())),
            };
        }
        Ok(())
    }
}

/// Mounts `source` at `dir` with `nosuid,nodev,nosymfollow`; a kernel older than 5.10 refuses
/// `nosymfollow` with EINVAL, and the mount is then made without it (links are then checked
/// when a staging link is made, see [`LinuxSmbHost::check_beneath`]).
fn mount_cifs(
    os: &dyn CifsOs,
    source: &str,
    dir: &Path,
    data: &CString,
) -> std::result::Result<(), rustix::io::Errno> {
    let safe = MountFlags::NOSUID | MountFlags::NODEV;
    match os.mount(source, dir, safe | MountFlags::NOSYMFOLLOW, data) {
        Err(rustix::io::Errno::INVAL) => {
            let r = os.mount(source, dir, safe, data);
            if r.is_ok() {
                tracing::warn!(dir = %dir.display(), "the kernel refused nosymfollow; links on the share are checked before each staging link instead");
            }
            r
        }
        r => r,
    }
}

/// How a mount answered its health probe.
enum Health {
    Answers,
    /// The server answered and refused the mount's credential.
    Refused(rustix::io::Errno),
    /// No answer in time, or an error that is not a refusal (the server unreachable, the
    /// session lost): why, for the status.
    NotAnswering(String),
}

/// Whether `errno` from a cifs mount's `statfs` means the server refused its credential: the
/// kernel's cifs client answers EACCES for a logon failure or access denied, EKEYEXPIRED for an
/// expired password, EKEYREVOKED/EKEYREJECTED for a refused key.
fn credential_refused(errno: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    matches!(
        errno,
        Errno::ACCESS | Errno::PERM | Errno::KEYEXPIRED | Errno::KEYREJECTED | Errno::KEYREVOKED
    )
}

fn is_cifs(m: &MountInfo) -> bool {
    matches!(m.fs_type.as_str(), "cifs" | "smb3")
}

/// Makes the mount base, mode 0700, without following a link at it.
fn private_base(base: &Path) -> std::io::Result<()> {
    if let Some(parent) = base.parent() {
        fs::create_dir_all(parent)?;
    }
    let fd = state_dir::open_dir(base, true)?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o700))?;
    Ok(())
}

/// `path` with `.` and `..` resolved textually (link targets are read, never followed).
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

impl SmbHost for LinuxSmbHost {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let object = format!("mapping {:?}", mapping.root);
        if let Some(why) = self.os.cifs_missing() {
            return Err(Error::new(Kind::FailedPrecondition, NEW, &object, why));
        }
        let dir = self.mount_dir(mapping)?;
        if self.cifs_mount_at(NEW, &dir)?.is_some() {
            return Err(Error::new(
                Kind::AlreadyExists,
                NEW,
                &object,
                "already mounted with these credentials",
            ));
        }
        let body = mapping.root.trim_start_matches('\\');
        let server = body.split('\\').next().unwrap_or(body);
        let ip = self.resolve(server, &object)?;
        let data = mount_data(mapping, &ip).map_err(|why| Error::invalid(NEW, &object, why))?;
        let data = CString::new(data)
            .map_err(|_| Error::invalid(NEW, &object, "a credential contains a NUL character"))?;
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        private_base(&self.base)
            .and_then(|()| {
                let base = state_dir::open_dir(&self.base, false)?;
                state_dir::make_subdir(&base, name.as_deref().unwrap_or_default())
            })
            .map_err(|e| Error::io(NEW, format!("mount directory {:?}", dir.display()), &e))?;
        let source = mount_source(&mapping.root);
        self.mount_bounded(&source, &dir, data, &object)?;
        tracing::info!(root = %mapping.root, dir = %dir.display(), "SMB share mounted");
        Ok(())
    }

    fn new_smb_link(
        &self,
        mapping: &SmbMapping,
        remote_path: &str,
        local_path: &str,
    ) -> Result<()> {
        let remote = csi_proxy_core::smb::RemotePath::parse(NEW, remote_path)?;
        let mount = self.mount_dir(mapping)?;
        let sub: Vec<String> = remote
            .sub_components()
            .into_iter()
            .map(str::to_string)
            .collect();
        let mut target = mount.clone();
        for c in &sub {
            target.push(c);
        }
        if let Ok(existing) = fs::read_link(local_path)
            && existing == target
        {
            return Ok(()); // a retry of the same request
        }
        let object = format!("creating link {local_path:?} to {remote_path:?}");
        self.check_beneath(&mount, &sub, &object)?;
        std::os::unix::fs::symlink(&target, local_path).map_err(|e| Error::io(NEW, object, &e))
    }

    /// Detaches every mount of `root` (one per credential it was mapped with): the service
    /// removes a whole mapping only when no volume's link uses any of them.
    fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
        let object = format!("mapping {root:?}");
        let mounts = self.mounts_of(REMOVE, root)?;
        if mounts.is_empty() {
            return Err(Error::new(
                Kind::NotFound,
                REMOVE,
                &object,
                "no such SMB global mapping",
            ));
        }
        for m in mounts {
            self.unmount(&m.mount_point, &object)?;
        }
        tracing::info!(root = %root, "SMB share unmounted");
        Ok(())
    }

    /// Detaches only the mount `mapping`'s credentials have: other tenants' mounts of the root
    /// (and the links leading into them) are left alone.
    fn remove_credential_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let object = format!("mapping {:?}", mapping.root);
        let dir = self.mount_dir(mapping)?;
        if self.cifs_mount_at(REMOVE, &dir)?.is_none() {
            return Err(Error::new(
                Kind::NotFound,
                REMOVE,
                &object,
                "no mount made with these credentials",
            ));
        }
        self.unmount(&dir, &object)?;
        tracing::info!(root = %mapping.root, dir = %dir.display(), "SMB share unmounted for one credential");
        Ok(())
    }

    fn smb_global_mapping(&self, root: &str) -> Result<MappingState> {
        let mounts = self.mounts_of(NEW, root)?;
        // Healthy when every credential's mount answers.
        let mut state = MappingState::Absent;
        for m in &mounts {
            state = self.state_of(&m.mount_point);
            if matches!(&state, MappingState::Present(i) if !i.healthy) {
                break;
            }
        }
        Ok(state)
    }

    fn credential_mapping(&self, mapping: &SmbMapping) -> Result<Option<MappingState>> {
        let dir = self.mount_dir(mapping)?;
        Ok(Some(match self.cifs_mount_at(NEW, &dir)? {
            Some(_) => self.state_of(&dir),
            None => MappingState::Absent,
        }))
    }

    fn smb_global_mappings(&self) -> Result<Vec<String>> {
        let mut roots: Vec<String> = self
            .table(NEW)?
            .iter()
            .filter(|m| is_cifs(m))
            .filter_map(|m| self.root_of_mount_point(&m.mount_point))
            .collect();
        roots.sort();
        roots.dedup();
        Ok(roots)
    }

    /// The links leading into any credential's mount of `root`.
    fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<SmbUsers> {
        let resolved = |target: &Path, link: &Path| {
            lexical(&if target.is_absolute() {
                target.to_path_buf()
            } else {
                link.parent().unwrap_or(Path::new("/")).join(target)
            })
        };
        // The mount directory a path lies in, if it is one of `root`'s.
        let mount_of = |p: &Path| -> Option<PathBuf> {
            let rest = p.strip_prefix(&self.base).ok()?;
            let first = rest.components().next()?;
            let dir = self.base.join(first);
            (self.root_of_mount_point(&dir).as_deref() == Some(root)).then_some(dir)
        };
        let scan = crate::smb_scan::links_using_within(scan_roots, self.scan_limit, |t, l| {
            mount_of(&resolved(t, l)).is_some()
        });
        Ok(SmbUsers {
            incomplete: scan.incomplete,
            links: scan
                .links
                .into_iter()
                .map(|(link, target)| {
                    // The remote path is the root plus the link's path inside the mount.
                    let inside = resolved(&target, Path::new(&link));
                    let dir = mount_of(&inside).unwrap_or_default();
                    let mut remote = root.to_string();
                    for c in inside.strip_prefix(&dir).unwrap_or(Path::new("")).iter() {
                        remote.push('\\');
                        remote.push_str(&c.to_string_lossy());
                    }
                    SmbLinkUse { link, remote }
                })
                .collect(),
        })
    }
}
