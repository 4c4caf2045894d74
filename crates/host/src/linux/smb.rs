//! SMB on Linux: a node-wide "mapping" is a cifs mount of the share root at a directory the
//! daemon manages, `<base>/<root key>` (by default `/run/csi-proxy/smb/…`, beside the sockets:
//! on tmpfs, like the mounts themselves it does not outlive a reboot); `local_path` becomes a
//! symlink to `<mount>/<sub path>`.
//!
//! The mount is made with `mount(2)` directly (no `mount.cifs` helper): the kernel cifs client
//! takes the server's address (`ip=`), the UNC and the credentials in the mount data, so the
//! password is only ever in that one system-call argument — never in a process's argv, a log
//! line or an error message. The key of a root is the root with every byte outside
//! `[a-z0-9._-]` percent-encoded, so the mount directory names its root and the host's mount
//! table is the whole truth about mappings.

use csi_proxy_core::smb::{MappingInfo, MappingState, SmbHost, SmbLinkUse, SmbMapping};
use csi_proxy_core::{Error, Kind, Result};
use rustix::mount::{MountFlags, UnmountFlags};
use std::ffi::CString;
use std::fs;
use std::net::ToSocketAddrs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::mountinfo;

const NEW: &str = "NewSmbGlobalMapping";
const REMOVE: &str = "RemoveSmbGlobalMapping";
/// How long a mount may take to answer `statfs` before it counts as disconnected.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The Linux SMB host.
pub struct LinuxSmbHost {
    base: PathBuf,
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

/// The root a mount directory name stands for, if it is one of ours.
pub fn key_root(key: &str) -> Option<String> {
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
pub fn mount_data(mapping: &SmbMapping, ip: &str) -> std::result::Result<String, String> {
    let body = mapping.root.trim_start_matches('\\');
    // The kernel splits the data at `,` and reads `,,` as a literal comma in any value; white
    // space needs no quoting (`unc=\\fs01\Team Share` is one option).
    let mut parts = vec![
        format!("unc=\\\\{}", body.replace(',', ",,")),
        format!("ip={ip}"),
    ];
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

/// Why cifs mounts cannot work on this kernel, if they cannot.
pub fn cifs_missing() -> Option<String> {
    let fs = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let has = fs
        .lines()
        .any(|l| matches!(l.split_whitespace().last(), Some("cifs" | "smb3")));
    (!has).then(|| {
        "the kernel has no cifs filesystem (not in /proc/filesystems; load module cifs)".into()
    })
}

impl LinuxSmbHost {
    /// A host mounting shares under `base`, which is made (or made again) mode 0700 now and
    /// before each mapping: a mapping is mounted with the node's credentials for the share, so
    /// only root may reach its files there (pods reach them through kubelet's bind mounts).
    pub fn new(base: impl Into<PathBuf>) -> Self {
        let host = Self { base: base.into() };
        if let Err(e) = host.private_base() {
            tracing::warn!(dir = %host.base.display(), "cannot make the SMB mount directory private: {e}");
        }
        host
    }

    fn private_base(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.base)?;
        fs::set_permissions(&self.base, fs::Permissions::from_mode(0o700))
    }

    /// Where the mapping of `root` is mounted.
    pub fn mount_dir(&self, root: &str) -> PathBuf {
        self.base.join(root_key(root))
    }

    fn cifs_mount_at(&self, op: &str, dir: &Path) -> Result<Option<mountinfo::MountInfo>> {
        let table =
            mountinfo::read().map_err(|e| Error::io(op, "mount table /proc/self/mountinfo", &e))?;
        Ok(mountinfo::topmost_at(&table, dir)
            .filter(|m| matches!(m.fs_type.as_str(), "cifs" | "smb3"))
            .cloned())
    }
}

/// Whether `dir` answers `statfs` within the limit (a dead server makes it hang; the probe thread
/// is then left behind, bounded by the kernel's own cifs timeouts).
fn answers(dir: &Path) -> std::result::Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(rustix::fs::statfs(&d).map(|_| ()));
    });
    match rx.recv_timeout(HEALTH_TIMEOUT) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("not answering ({e})")),
        Err(_) => Err(format!("not answering within {HEALTH_TIMEOUT:?}")),
    }
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

fn option<'a>(options: &'a str, key: &str) -> Option<&'a str> {
    options
        .split(',')
        .find_map(|o| o.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

impl SmbHost for LinuxSmbHost {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let object = format!("mapping {:?}", mapping.root);
        if let Some(why) = cifs_missing() {
            return Err(Error::new(Kind::FailedPrecondition, NEW, &object, why));
        }
        let dir = self.mount_dir(&mapping.root);
        if self.cifs_mount_at(NEW, &dir)?.is_some() {
            return Err(Error::new(
                Kind::AlreadyExists,
                NEW,
                &object,
                "already mounted",
            ));
        }
        let body = mapping.root.trim_start_matches('\\');
        let server = body.split('\\').next().unwrap_or(body);
        // The kernel client cannot resolve names: resolve here, as mount.cifs does.
        let ip = (server, 445u16)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip().to_string())
            .ok_or_else(|| {
                Error::new(
                    Kind::NotFound,
                    NEW,
                    &object,
                    format!("server {server:?} does not resolve to an address"),
                )
            })?;
        let data = mount_data(mapping, &ip).map_err(|why| Error::invalid(NEW, &object, why))?;
        let data = CString::new(data)
            .map_err(|_| Error::invalid(NEW, &object, "a credential contains a NUL character"))?;
        self.private_base()
            .and_then(|()| {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
            })
            .map_err(|e| Error::io(NEW, format!("mount directory {:?}", dir.display()), &e))?;
        let source = format!("//{}", body.replace('\\', "/"));
        rustix::mount::mount(
            source.as_str(),
            &dir,
            "cifs",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(data.as_c_str()),
        )
        .map_err(|errno| {
            let _ = fs::remove_dir(&dir);
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
            Error::new(
                kind,
                NEW,
                &object,
                format!("cifs mount at {:?} failed: {errno}", dir.display()),
            )
        })?;
        tracing::info!(root = %mapping.root, dir = %dir.display(), "SMB share mounted");
        Ok(())
    }

    fn new_smb_link(&self, remote_path: &str, local_path: &str) -> Result<()> {
        let remote = csi_proxy_core::smb::RemotePath::parse(NEW, remote_path)?;
        let mut target = self.mount_dir(&remote.root);
        for c in remote.sub_components() {
            target.push(c);
        }
        if let Ok(existing) = fs::read_link(local_path)
            && existing == target
        {
            return Ok(()); // a retry of the same request
        }
        std::os::unix::fs::symlink(&target, local_path).map_err(|e| {
            Error::io(
                NEW,
                format!("creating link {local_path:?} to {remote_path:?}"),
                &e,
            )
        })
    }

    fn remove_smb_global_mapping(&self, root: &str) -> Result<()> {
        let object = format!("mapping {root:?}");
        let dir = self.mount_dir(root);
        if self.cifs_mount_at(REMOVE, &dir)?.is_none() {
            return Err(Error::new(
                Kind::NotFound,
                REMOVE,
                &object,
                "no such SMB global mapping",
            ));
        }
        // Detach: open files keep working until closed, new lookups no longer reach the share
        // (what a forced removal of a Windows global mapping comes closest to without data loss).
        rustix::mount::unmount(&dir, UnmountFlags::DETACH).map_err(|errno| {
            Error::new(
                Kind::Internal,
                REMOVE,
                &object,
                format!("unmount {:?}: {errno}", dir.display()),
            )
        })?;
        let _ = fs::remove_dir(&dir);
        tracing::info!(root = %root, "SMB share unmounted");
        Ok(())
    }

    fn smb_global_mapping(&self, root: &str) -> Result<MappingState> {
        let dir = self.mount_dir(root);
        let Some(m) = self.cifs_mount_at(NEW, &dir)? else {
            return Ok(MappingState::Absent);
        };
        let (healthy, status) = match answers(&dir) {
            Ok(()) => (true, "OK".to_string()),
            Err(why) => (false, why),
        };
        let username = option(&m.super_options, "username")
            .or_else(|| option(&m.mount_options, "username"))
            .map(|u| match option(&m.super_options, "domain") {
                Some(d) if !d.is_empty() => format!("{d}\\{u}"),
                _ => u.to_string(),
            });
        Ok(MappingState::Present(MappingInfo {
            healthy,
            status,
            username,
        }))
    }

    fn smb_global_mappings(&self) -> Result<Vec<String>> {
        let table = mountinfo::read()
            .map_err(|e| Error::io(NEW, "mount table /proc/self/mountinfo", &e))?;
        let mut roots: Vec<String> = table
            .iter()
            .filter(|m| matches!(m.fs_type.as_str(), "cifs" | "smb3"))
            .filter(|m| m.mount_point.parent() == Some(self.base.as_path()))
            .filter_map(|m| key_root(&m.mount_point.file_name()?.to_string_lossy()))
            .collect();
        roots.sort();
        roots.dedup();
        Ok(roots)
    }

    fn smb_mapping_users(&self, root: &str, scan_roots: &[String]) -> Result<Vec<SmbLinkUse>> {
        let dir = self.mount_dir(root);
        let resolved = |target: &Path, link: &Path| {
            lexical(&if target.is_absolute() {
                target.to_path_buf()
            } else {
                link.parent().unwrap_or(Path::new("/")).join(target)
            })
        };
        Ok(
            crate::smb_scan::links_using(scan_roots, |t, l| resolved(t, l).starts_with(&dir))
                .into_iter()
                .map(|(link, target)| {
                    // The remote path is the root plus the link's path inside the mount.
                    let inside = resolved(&target, Path::new(&link));
                    let mut remote = root.to_string();
                    for c in inside.strip_prefix(&dir).unwrap_or(Path::new("")).iter() {
                        remote.push('\\');
                        remote.push_str(&c.to_string_lossy());
                    }
                    SmbLinkUse { link, remote }
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_core::smb::SmbCredentials;

    #[test]
    fn root_keys_round_trip_and_stay_one_component() {
        for root in ["\\\\srv\\share", "\\\\10.0.0.1\\a b$", "\\\\h\\..%/x"] {
            let key = root_key(root);
            assert!(!key.contains('/') && key != "." && key != "..", "{key}");
            assert_eq!(key_root(&key).as_deref(), Some(root), "{key}");
        }
        assert_eq!(root_key("\\\\srv\\share"), "srv%5Cshare");
        assert_eq!(key_root("lost+found"), None);
    }

    fn mapping(user: Option<&str>, password: &str, privacy: bool) -> SmbMapping {
        SmbMapping {
            root: "\\\\srv\\share".into(),
            credentials: user.map(|u| SmbCredentials {
                username: u.into(),
                password: password.into(),
            }),
            require_privacy: privacy,
        }
    }

    #[test]
    fn mount_data_carries_domain_user_escaped_password_and_seal() {
        let d = mount_data(&mapping(Some("CORP\\alice"), "p,w=x\\y", true), "10.0.0.9").unwrap();
        assert_eq!(
            d,
            "unc=\\\\srv\\share,ip=10.0.0.9,username=alice,domain=CORP,password=p,,w=x\\y,seal"
        );
        let d = mount_data(&mapping(None, "", false), "::1").unwrap();
        assert_eq!(d, "unc=\\\\srv\\share,ip=::1,guest");
        let mut spaced = mapping(None, "", false);
        spaced.root = "\\\\fs01\\team share".into();
        let d = mount_data(&spaced, "10.0.0.9").unwrap();
        assert_eq!(d, "unc=\\\\fs01\\team share,ip=10.0.0.9,guest");
        let e = mount_data(&mapping(Some("a,b"), "Secret-1", false), "1.2.3.4").unwrap_err();
        assert!(e.contains("user name") && !e.contains("Secret-1"), "{e}");
    }

    #[test]
    fn options_are_found_by_exact_key() {
        let o = "rw,vers=3.1.1,cache=strict,username=bob,domain=CORP,uid=0";
        assert_eq!(option(o, "username"), Some("bob"));
        assert_eq!(option(o, "domain"), Some("CORP"));
        assert_eq!(option(o, "user"), None);
    }
}
