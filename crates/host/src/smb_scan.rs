//! Finding the links that use an SMB mapping: the places kubelet's layout puts staging and
//! publish links under each allowed root (kubelet path and working dirs) are looked at, and the
//! link found there is read, never followed.
//!
//! This is how "who uses a share root" is derived from what exists on the host, so a daemon
//! restart loses nothing. Kubelet's depths are fixed, so the scan lists only kubelet's own
//! directories and never a volume's contents (an emptyDir of a million files costs nothing):
//!
//! * staging: `plugins/kubernetes.io/csi/<driver>/<volume hash>/globalmount` (Kubernetes
//!   1.24+), and `plugins/kubernetes.io/csi/pv/<pv name>/globalmount` before, at the same depth;
//! * publish: `pods/<pod uid>/volumes/kubernetes.io~csi/<volume>/mount`.
//!
//! The last component is never looked up by path: its type comes from the listing of its parent
//! (`d_type`, or the attributes `FindNextFileW` returns), so a dead hard-mounted pod volume
//! whose mount root `lstat` would hang on is not touched; only a symbolic link is read. A
//! directory that cannot be listed, an entry whose type the listing does not give, or more
//! entries than [`MAX_ENTRIES`] make the scan incomplete: the caller then cannot prove a
//! mapping unused and keeps it.

use std::fs;
use std::path::{Path, PathBuf};

/// Most directory entries looked at in one scan (kubelet's own directories only: a few per pod
/// and per staged volume).
pub const MAX_ENTRIES: usize = 200_000;

/// What a scan found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// (link path, raw target) of each link whose target satisfied the filter, by link path.
    pub links: Vec<(String, PathBuf)>,
    /// Why links may have been missed, if they may have.
    pub incomplete: Option<String>,
}

/// Each link at kubelet's staging and publish places under `roots` whose target satisfies
/// `uses` (called with the raw target and the link's path).
pub fn links_using(roots: &[String], uses: impl Fn(&Path, &Path) -> bool) -> Scan {
    links_using_within(roots, MAX_ENTRIES, uses)
}

/// [`links_using`] looking at `max_entries` directory entries at most.
pub fn links_using_within(
    roots: &[String],
    max_entries: usize,
    uses: impl Fn(&Path, &Path) -> bool,
) -> Scan {
    let mut walk = Walk {
        budget: max_entries,
        max_entries,
        scan: Scan::default(),
    };
    for root in roots {
        let root = Path::new(root);
        // Staging: plugins/kubernetes.io/csi/<driver>/<hash>/globalmount.
        let csi = root.join("plugins").join("kubernetes.io").join("csi");
        for driver in walk.dirs(&csi) {
            for hash in walk.dirs(&driver) {
                walk.link_at(&hash, "globalmount", &uses);
            }
        }
        // Publish: pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount.
        for pod in walk.dirs(&root.join("pods")) {
            let volumes = pod.join("volumes").join("kubernetes.io~csi");
            for volume in walk.dirs(&volumes) {
                walk.link_at(&volume, "mount", &uses);
            }
        }
    }
    if let Some(why) = &walk.scan.incomplete {
        tracing::warn!("SMB link scan incomplete: {why}");
    }
    walk.scan.links.sort();
    walk.scan
}

struct Walk {
    budget: usize,
    max_entries: usize,
    scan: Scan,
}

/// What a directory listing says an entry is, without looking the entry up.
enum Entry {
    Dir,
    Link,
    Other,
    /// The listing does not say (`DT_UNKNOWN`): finding out would look the entry up by path.
    Unknown,
}

impl Walk {
    fn incomplete(&mut self, why: String) {
        self.scan.incomplete.get_or_insert(why);
    }

    /// The entries of `dir` with their listed types; a missing `dir` has none, one that cannot
    /// be listed makes the scan incomplete.
    fn list(&mut self, dir: &Path) -> Vec<(PathBuf, Entry)> {
        let mut out = Vec::new();
        let mut failed = None;
        let mut stopped = false;
        let listed = each_entry(dir, |entry| {
            if self.budget == 0 {
                stopped = true;
                return false;
            }
            self.budget -= 1;
            match entry {
                Ok((name, kind)) => {
                    out.push((dir.join(name), kind));
                    true
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        match listed.err().or(failed) {
            Some(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Some(e) => self.incomplete(format!("{} could not be listed: {e}", dir.display())),
            None => {}
        }
        if stopped {
            self.incomplete(format!(
                "it stopped at its limit of {} directory entries",
                self.max_entries
            ));
        }
        out
    }

    /// The directories listed in `dir` (links and other files are not kubelet's directories).
    fn dirs(&mut self, dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (path, kind) in self.list(dir) {
            match kind {
                Entry::Dir => out.push(path),
                Entry::Unknown => self.incomplete(format!(
                    "the listing of {} does not give entry types",
                    dir.display()
                )),
                Entry::Link | Entry::Other => {}
            }
        }
        out
    }

    /// Reads the link named `name` in `dir`, if the listing of `dir` says it is one.
    fn link_at(&mut self, dir: &Path, name: &str, uses: &impl Fn(&Path, &Path) -> bool) {
        let listed = self.list(dir);
        let Some((path, kind)) = listed
            .into_iter()
            .find(|(p, _)| p.file_name().is_some_and(|n| n == name))
        else {
            return;
        };
        match kind {
            Entry::Link => match fs::read_link(&path) {
                Ok(target) => {
                    if uses(&target, &path) {
                        self.scan.links.push((path.display().to_string(), target));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => self.incomplete(format!("{} could not be read: {e}", path.display())),
            },
            Entry::Unknown => self.incomplete(format!(
                "the listing of {} does not give entry types",
                dir.display()
            )),
            Entry::Dir | Entry::Other => {}
        }
    }
}

/// Calls `f` with each entry of `dir` (name and type as the listing gives them) until it
/// answers false. On Linux the listing's `d_type` is used as it is: std's `DirEntry::file_type`
/// would `lstat` an entry whose type is DT_UNKNOWN, the lookup the scan must not make.
#[cfg(target_os = "linux")]
fn each_entry(
    dir: &Path,
    mut f: impl FnMut(std::io::Result<(std::ffi::OsString, Entry)>) -> bool,
) -> std::io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut listing = rustix::fs::Dir::new(fd)?;
    while let Some(entry) = listing.read() {
        let item = entry.map_err(std::io::Error::from).map(|e| {
            let name = std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
            let kind = match e.file_type() {
                FileType::Directory => Entry::Dir,
                FileType::Symlink => Entry::Link,
                FileType::Unknown => Entry::Unknown,
                _ => Entry::Other,
            };
            (name, kind)
        });
        if matches!(&item, Ok((n, _)) if n == "." || n == "..") {
            continue;
        }
        if !f(item) {
            break;
        }
    }
    Ok(())
}

/// Calls `f` with each entry of `dir` until it answers false; the type comes from the
/// attributes `FindNextFileW` returned with the entry: a reparse point (symbolic link,
/// junction, mounted folder) is a link, whatever else it is.
#[cfg(not(target_os = "linux"))]
fn each_entry(
    dir: &Path,
    mut f: impl FnMut(std::io::Result<(std::ffi::OsString, Entry)>) -> bool,
) -> std::io::Result<()> {
    for e in fs::read_dir(dir)? {
        let item = e.map(|e| {
            let kind = match e.file_type() {
                Ok(t) if t.is_symlink() => Entry::Link,
                Ok(t) if t.is_dir() => Entry::Dir,
                Ok(_) => Entry::Other,
                Err(_) => Entry::Unknown,
            };
            (e.file_name(), kind)
        });
        if !f(item) {
            break;
        }
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn kubelet() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let k = tmp.path().join("kubelet");
        fs::create_dir_all(k.join("pods")).unwrap();
        (tmp, k)
    }

    /// Once, a pod with a huge emptyDir used the whole entry budget before the walk reached
    /// `plugins/`, and the plugin's staging link was not seen. The scan now lists kubelet's
    /// directories only: the emptyDir's files are never looked at.
    #[test]
    fn a_huge_empty_dir_does_not_hide_a_plugins_staging_link() {
        let (_tmp, k) = kubelet();
        let data = k.join("pods/uid-1/volumes/kubernetes.io~empty-dir/cache");
        fs::create_dir_all(&data).unwrap();
        for i in 0..3_000 {
            fs::write(data.join(format!("f{i}")), b"").unwrap();
        }
        let staging = k.join("plugins/kubernetes.io/csi/smb.csi.k8s.io/0123abcd");
        fs::create_dir_all(&staging).unwrap();
        symlink("/state/smb/srv%5Cshare@1/dir", staging.join("globalmount")).unwrap();
        fs::write(staging.join("vol_data.json"), b"{}").unwrap();
        let publish = k.join("pods/uid-2/volumes/kubernetes.io~csi/pvc-1");
        fs::create_dir_all(&publish).unwrap();
        symlink(staging.join("globalmount"), publish.join("mount")).unwrap();
        // An old-layout staging link, and a link at no kubelet place (not looked at).
        let old = k.join("plugins/kubernetes.io/csi/pv/pv-smb");
        fs::create_dir_all(&old).unwrap();
        symlink("/state/smb/srv%5Cshare@1", old.join("globalmount")).unwrap();
        symlink("/state/smb/srv%5Cshare@1", data.join("tenant-link")).unwrap();

        let scan = links_using_within(&[k.display().to_string()], 1_000, |_, _| true);
        assert_eq!(scan.incomplete, None);
        let links: Vec<&str> = scan.links.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            links,
            [
                old.join("globalmount").display().to_string(),
                staging.join("globalmount").display().to_string(),
                publish.join("mount").display().to_string(),
            ]
        );
    }

    /// More of kubelet's own entries than the limit: incomplete, never taken as the whole.
    #[test]
    fn a_scan_past_its_limit_says_it_is_incomplete() {
        let (_tmp, k) = kubelet();
        for i in 0..20 {
            fs::create_dir_all(k.join(format!("pods/uid-{i}/volumes"))).unwrap();
        }
        let scan = links_using_within(&[k.display().to_string()], 10, |_, _| true);
        assert!(
            scan.incomplete
                .as_deref()
                .is_some_and(|w| w.contains("limit of 10")),
            "{scan:?}"
        );
        let scan = links_using_within(&[k.display().to_string()], 1_000, |_, _| true);
        assert_eq!(scan.incomplete, None);
    }
}
