//! Unit tests of the Linux SMB host: its pure parts, and its logic over a fake kernel (this
//! one has no cifs).

use super::*;
use csi_proxy_core::smb::SmbCredentials;
use csi_proxy_core::testing::on_thread;

#[test]
fn root_keys_round_trip_and_stay_one_component() {
    for root in ["\\\\srv\\share", "\\\\10.0.0.1\\a b$", "\\\\h\\..%/x"] {
        let key = root_key(root);
        assert!(!key.contains('/') && key != "." && key != "..", "{key}");
        assert_eq!(
            key_root(&format!("{key}@0a1b")).as_deref(),
            Some(root),
            "{key}"
        );
        assert_eq!(
            key_root(&key),
            None,
            "no credential tag: not a mount directory"
        );
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
        "ip=10.0.0.9,username=alice,domain=CORP,password=p,,w=x\\y,seal"
    );
    let d = mount_data(&mapping(None, "", false), "::1").unwrap();
    assert_eq!(d, "ip=::1,guest");
    assert_eq!(mount_source("\\\\fs01\\team share"), "//fs01/team share");
    let e = mount_data(&mapping(Some("a,b"), "Secret-1", false), "1.2.3.4").unwrap_err();
    assert!(e.contains("user name") && !e.contains("Secret-1"), "{e}");
}

/// A kernel with cifs, as far as the host can tell: mounts are recorded (the mount directory
/// stays a plain directory the test fills as the share's content), `nosymfollow` is refused
/// with EINVAL when `old_kernel`, and every mount answers.
#[derive(Default)]
struct FakeCifs {
    old_kernel: bool,
    mounts: std::sync::Mutex<Vec<(PathBuf, MountFlags, String)>>,
    /// The source of each mount made, in order.
    sources: std::sync::Mutex<Vec<String>>,
    /// Servers that do not answer: a mount of one of their shares, and `statfs` of a mount of
    /// one, block until they answer again, as the kernel's do while it waits out its timeouts.
    dead: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// Names the name servers do not answer for: resolving one blocks.
    dns_dead: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// Mount attempts, by server.
    attempts: std::sync::Mutex<std::collections::BTreeMap<String, usize>>,
    /// Mounts whose server refuses their credential: `statfs` answers EACCES until unmounted.
    refused: std::sync::Mutex<std::collections::BTreeSet<PathBuf>>,
    /// Every mount detached, in order.
    unmounted: std::sync::Mutex<Vec<PathBuf>>,
}

impl FakeCifs {
    /// Blocks while `server` is in `set`.
    fn wait_while(set: &std::sync::Mutex<std::collections::BTreeSet<String>>, server: &str) {
        while set.lock().unwrap().contains(server) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn set(set: &std::sync::Mutex<std::collections::BTreeSet<String>>, server: &str, on: bool) {
        let mut s = set.lock().unwrap();
        if on {
            s.insert(server.to_string());
        } else {
            s.remove(server);
        }
    }

    /// The server a mount's source names (`//server/share`).
    fn server_of_source(source: &str) -> String {
        let unc = source.trim_start_matches('/');
        unc.split('/').next().unwrap_or("").to_string()
    }
}

impl CifsOs for FakeCifs {
    fn cifs_missing(&self) -> Option<String> {
        None
    }
    fn resolve(&self, server: &str) -> Option<String> {
        Self::wait_while(&self.dns_dead, server);
        Some("10.0.0.9".into())
    }
    fn mount(
        &self,
        source: &str,
        dir: &Path,
        flags: MountFlags,
        data: &std::ffi::CStr,
    ) -> std::result::Result<(), rustix::io::Errno> {
        if self.old_kernel && flags.contains(MountFlags::NOSYMFOLLOW) {
            return Err(rustix::io::Errno::INVAL);
        }
        let data = data.to_string_lossy().into_owned();
        self.sources.lock().unwrap().push(source.to_string());
        let server = Self::server_of_source(source);
        *self
            .attempts
            .lock()
            .unwrap()
            .entry(server.clone())
            .or_default() += 1;
        Self::wait_while(&self.dead, &server);
        self.mounts
            .lock()
            .unwrap()
            .push((dir.to_path_buf(), flags, data));
        Ok(())
    }
    fn unmount_detach(&self, dir: &Path) -> std::result::Result<(), rustix::io::Errno> {
        let mut m = self.mounts.lock().unwrap();
        let before = m.len();
        m.retain(|(d, ..)| d != dir);
        if m.len() == before {
            return Err(rustix::io::Errno::INVAL);
        }
        self.refused.lock().unwrap().remove(dir);
        self.unmounted.lock().unwrap().push(dir.to_path_buf());
        Ok(())
    }
    fn mount_table(&self) -> std::io::Result<Vec<MountInfo>> {
        Ok(self
            .mounts
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, (dir, flags, _))| MountInfo {
                mount_id: 100 + i as u64,
                parent_id: 1,
                major: 0,
                minor: 50 + i as u32,
                root: "/".into(),
                mount_point: dir.clone(),
                mount_options: if flags.contains(MountFlags::NOSYMFOLLOW) {
                    "rw,nosuid,nodev,nosymfollow,relatime".into()
                } else {
                    "rw,nosuid,nodev,relatime".into()
                },
                optional_fields: Vec::new(),
                fs_type: "cifs".into(),
                source: "//srv/share".into(),
                super_options: "rw,vers=3.1.1".into(),
            })
            .collect())
    }
    fn answers(&self, dir: &Path) -> std::result::Result<(), rustix::io::Errno> {
        if self.refused.lock().unwrap().contains(dir) {
            return Err(rustix::io::Errno::ACCESS);
        }
        // The mount directory's name says whose root it is.
        let root = dir.file_name().and_then(|n| key_root(&n.to_string_lossy()));
        if let Some(root) = root {
            let server = root.trim_start_matches('\\').split('\\').next();
            Self::wait_while(&self.dead, server.unwrap_or_default());
        }
        Ok(())
    }
}

/// The SMB service over the Linux host on `fake`, with the kubelet path and the state
/// directory in a temp dir.
struct Node {
    tmp: tempfile::TempDir,
    fake: Arc<FakeCifs>,
    host: Arc<LinuxSmbHost>,
    svc: csi_proxy_core::smb::SmbService,
}

impl Node {
    fn new(old_kernel: bool) -> Node {
        Self::with_scan_limit(old_kernel, crate::smb_scan::MAX_ENTRIES)
    }

    /// As [`Node::new`], with link scans stopping at `scan_limit` entries.
    fn with_scan_limit(old_kernel: bool, scan_limit: usize) -> Node {
        use csi_proxy_core::filesystem::FilesystemService;
        use csi_proxy_core::paths::{PathPolicy, PathStyle};
        // On a tmpfs where there is one: it lists a directory in creation order, so `pods/`
        // (made here, first) is listed before `plugins/`, whatever the names' hashes.
        let shm = Path::new("/dev/shm");
        let tmp = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .unwrap();
        let kubelet = tmp.path().join("kubelet");
        fs::create_dir_all(kubelet.join("pods")).unwrap();
        let fake = Arc::new(FakeCifs {
            old_kernel,
            ..Default::default()
        });
        let host = Arc::new(
            LinuxSmbHost::with_os(tmp.path().join("state/smb"), fake.clone())
                .with_scan_limit(scan_limit),
        );
        let policy =
            PathPolicy::new(PathStyle::Posix, &kubelet.display().to_string(), &[]).unwrap();
        let fs = FilesystemService::new(
            Arc::new(crate::linux::filesystem::LinuxFilesystemHost::new()),
            Arc::new(policy),
        );
        let svc = csi_proxy_core::smb::SmbService::new(host.clone(), fs, true);
        Node {
            tmp,
            fake,
            host,
            svc,
        }
    }

    fn k(&self, rel: &str) -> String {
        self.tmp
            .path()
            .join("kubelet")
            .join(rel)
            .display()
            .to_string()
    }

    fn map(&self, remote: &str, local: &str, user: &str, password: &str) -> Result<()> {
        self.svc
            .new_smb_global_mapping(&csi_proxy_core::smb::NewSmbGlobalMappingRequest {
                remote_path: remote.into(),
                local_path: if local.is_empty() {
                    String::new()
                } else {
                    self.k(local)
                },
                username: user.into(),
                password: password.into(),
            })
    }

    /// A staging path as kubelet makes it (relative to the kubelet directory), its parent made.
    fn staging(&self, name: &str) -> String {
        let rel = format!("plugins/kubernetes.io/csi/smb.csi.k8s.io/{name}/globalmount");
        fs::create_dir_all(Path::new(&self.k(&rel)).parent().unwrap()).unwrap();
        rel
    }

    fn mounts(&self) -> Vec<(PathBuf, MountFlags, String)> {
        self.fake.mounts.lock().unwrap().clone()
    }
}

const SHARE: &str = "\\\\srv\\share";

/// Two tenants with their own credentials for one share each get a mount of their own (a mount
/// made with one login never serves the other), a retry reuses its own, and no mount directory
/// name or mount table line carries a password.
#[test]
fn each_credential_gets_a_mount_of_its_own() {
    let n = Node::new(false);
    let [pa, pb, pc, pd] = ["a", "b", "c", "d"].map(|v| n.staging(v));
    let [pa, pb, pc, pd] = [pa.as_str(), pb.as_str(), pc.as_str(), pd.as_str()];
    n.map(SHARE, pa, "CORP\\alice", "Alice-Pw-1").unwrap();
    n.map(SHARE, pb, "CORP\\bob", "Bob-Pw-2").unwrap();
    n.map(SHARE, pa, "CORP\\alice", "Alice-Pw-1").unwrap(); // retry
    let mounts = n.mounts();
    assert_eq!(mounts.len(), 2, "{mounts:?}");
    let a = fs::read_link(n.k(pa)).unwrap();
    let b = fs::read_link(n.k(pb)).unwrap();
    assert_ne!(a, b);
    let (dir_a, _, data_a) = mounts.iter().find(|(d, ..)| *d == a).unwrap();
    let (_, _, data_b) = mounts.iter().find(|(d, ..)| *d == b).unwrap();
    assert!(data_a.contains("username=alice") && data_a.contains("password=Alice-Pw-1"));
    assert!(data_b.contains("username=bob") && data_b.contains("password=Bob-Pw-2"));
    assert!(dir_a.starts_with(n.tmp.path().join("state/smb").canonicalize().unwrap()));
    for (dir, flags, _) in &mounts {
        assert!(
            flags.contains(MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOSYMFOLLOW),
            "{flags:?}"
        );
        let name = dir.display().to_string();
        assert!(!name.contains("Pw-") && !name.contains("alice"), "{name}");
    }
    // Same user, another password: yet another mount; the same user in other case: the same.
    n.map(SHARE, pc, "CORP\\alice", "Alice-Pw-rotated").unwrap();
    n.map(SHARE, pd, "corp\\ALICE", "Alice-Pw-1").unwrap();
    assert_eq!(n.mounts().len(), 3);
    assert_eq!(fs::read_link(n.k(pd)).unwrap(), a);

    // Every link counts as a user of the share, whichever credential's mount it leads into:
    // removal keeps the mounts while others use them, and takes them all once none does.
    let users = n
        .host
        .smb_mapping_users("\\\\srv\\share", &[n.k("")])
        .unwrap();
    assert_eq!(users.links.len(), 4, "{users:?}");
    assert_eq!(users.incomplete, None);
    assert_eq!(n.host.smb_global_mappings().unwrap(), ["\\\\srv\\share"]);
    n.svc.remove_smb_global_mapping(SHARE).unwrap();
    assert_eq!(n.mounts().len(), 3, "kept while other links use it");
    for l in [pa, pb, pc, pd] {
        fs::remove_file(n.k(l)).unwrap();
    }
    n.svc.remove_smb_global_mapping(SHARE).unwrap();
    assert!(n.mounts().is_empty());
    let e = n.svc.remove_smb_global_mapping(SHARE).unwrap_err();
    assert_eq!(e.kind(), Kind::NotFound, "{e}");
}

/// The options the kernel reads from cifs mount data, in both passes it makes: the LSM pass
/// (`security_sb_eat_lsm_opts`) splits at every `,`; cifs' own parser then reads `,,` as a
/// literal comma. Each pass's keys, in order.
fn kernel_option_keys(data: &str) -> (Vec<String>, Vec<(String, String)>) {
    let key = |o: &str| o.split('=').next().unwrap_or("").to_string();
    let lsm = data.split(',').filter(|o| !o.is_empty()).map(key).collect();
    let mut cifs = Vec::new();
    for opt in data.replace(",,", "\0").split(',') {
        let opt = opt.replace('\0', ",");
        let (k, v) = opt.split_once('=').unwrap_or((&opt, ""));
        cifs.push((k.to_string(), v.to_string()));
    }
    (lsm, cifs)
}

/// Share names Samba and NAS servers export with `[ ] + = ; ,` are mapped: the name reaches the
/// kernel verbatim as the mount source, the mount data is the same as for any share, the staging
/// link leads into the mount, and the mapping is found and removed again.
#[test]
fn share_names_with_samba_characters_reach_the_kernel_as_the_source() {
    let n = Node::new(false);
    for (i, c) in ['[', ']', '+', '=', ';', ','].into_iter().enumerate() {
        let share = format!("Team{c}Data{c}");
        let remote = format!("\\\\srv\\{share}\\pvc-{i}");
        let local = n.staging(&format!("v{i}"));
        n.map(&remote, &local, "u", "Pw-1").unwrap();
        let (dir, _, data) = n.mounts().last().unwrap().clone();
        assert_eq!(
            n.fake.sources.lock().unwrap().last().unwrap(),
            &format!("//srv/{}", share.to_lowercase())
        );
        assert_eq!(data, "ip=10.0.0.9,username=u,password=Pw-1,seal", "{c}");
        assert_eq!(
            fs::read_link(n.k(&local)).unwrap(),
            dir.join(format!("pvc-{i}"))
        );
        let root = format!("\\\\srv\\{}", share.to_lowercase());
        assert!(n.host.smb_global_mappings().unwrap().contains(&root), "{c}");
        fs::remove_file(n.k(&local)).unwrap();
        n.svc.remove_smb_global_mapping(&remote).unwrap();
        assert!(n.mounts().is_empty(), "{c}");
    }
}

/// A share name written to set mount options sets none: whatever the kernel's two passes over
/// the data read, the only options are the host's own, with the resolved address. Putting the
/// name back into the data fails this, escaped (`,,` is split by the LSM pass) or not.
#[test]
fn a_share_name_never_injects_mount_options() {
    let n = Node::new(false);
    let share = "x,ip=6.6.6.6,,password=stolen,uid=0,context=system_u:object_r:etc_t:s0,sec=none";
    let hostile = share.replace(':', ";");
    let remote = format!("//srv/{hostile}");
    n.map(&remote, &n.staging("h"), "", "").unwrap();
    let (_, _, data) = n.mounts().last().unwrap().clone();
    let (lsm, cifs) = kernel_option_keys(&data);
    assert_eq!(lsm, ["ip", "guest", "seal"], "{data}");
    let ours: Vec<(String, String)> = [("ip", "10.0.0.9"), ("guest", ""), ("seal", "")]
        .map(|(k, v)| (k.into(), v.into()))
        .into();
    assert_eq!(cifs, ours, "{data}");
    assert_eq!(
        n.fake.sources.lock().unwrap().last().unwrap(),
        &format!("//srv/{hostile}")
    );
}

/// Where the kernel refuses `nosymfollow`, the mount is made without it and a staging link
/// is only made when its target lies beneath the mount root through no link on the share.
#[test]
fn without_nosymfollow_the_staging_target_is_checked_beneath_the_mount() {
    let n = Node::new(true);
    n.map(SHARE, "", "u", "Pw-1").unwrap();
    let mounts = n.mounts();
    assert_eq!(mounts.len(), 1);
    let (root, flags, _) = &mounts[0];
    assert!(flags.contains(MountFlags::NOSUID | MountFlags::NODEV));
    assert!(!flags.contains(MountFlags::NOSYMFOLLOW));
    // The share's content, as a tenant with write access to it made it.
    fs::create_dir_all(root.join("vol/data")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("evil")).unwrap();
    std::os::unix::fs::symlink("/", root.join("vol/up")).unwrap();
    let (x, y) = (n.staging("x"), n.staging("y"));
    for bad in ["\\\\srv\\share\\evil", "\\\\srv\\share\\vol\\up\\etc"] {
        let e = n.map(bad, &x, "u", "Pw-1").unwrap_err();
        assert_eq!(e.kind(), Kind::FailedPrecondition, "{bad}: {e}");
        assert!(e.message().contains("nosymfollow"), "{e}");
        assert!(fs::symlink_metadata(n.k(&x)).is_err(), "no link made");
    }
    n.map("\\\\srv\\share\\vol\\data", &x, "u", "Pw-1").unwrap();
    assert_eq!(fs::read_link(n.k(&x)).unwrap(), root.join("vol/data"));
    // Not there yet: linked, as upstream does.
    n.map("\\\\srv\\share\\vol\\later", &y, "u", "Pw-1")
        .unwrap();

    // With nosymfollow in effect the kernel follows no link on the share: no check needed.
    let n = Node::new(false);
    let x = n.staging("x");
    n.map(SHARE, "", "u", "Pw-1").unwrap();
    let root = n.mounts()[0].0.clone();
    std::os::unix::fs::symlink("/etc", root.join("evil")).unwrap();
    n.map("\\\\srv\\share\\evil", &x, "u", "Pw-1").unwrap();
}

/// NewSmbGlobalMapping's local link while a client races the path: a directory of the plugin
/// and a link to a directory outside the kubelet path are exchanged as fast as a thread can
/// (`renameat2(RENAME_EXCHANGE)`) while links are made below the directory. The link is made
/// in the directory held when the path was checked, so none ever lands outside. The cifs
/// mount is the fake kernel's (no cifs here); the links and the race are on the real
/// filesystem.
#[test]
fn the_local_link_is_never_made_outside_while_a_component_is_swapped() {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let node = Node::new(false);
    let racer = node.tmp.path().join("kubelet/plugins/racer");
    let outside = node.tmp.path().join("outside");
    fs::create_dir_all(racer.join("a")).unwrap();
    fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, racer.join("a.swap")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let adversary = {
        let (a, b) = (racer.join("a"), racer.join("a.swap"));
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if renameat_with(CWD, &a, CWD, &b, RenameFlags::EXCHANGE).is_ok() {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let started = std::time::Instant::now();
    let (mut calls, mut made) = (0, 0);
    while calls < 300 || started.elapsed() < std::time::Duration::from_secs(1) {
        let local = format!("plugins/racer/a/s{calls}");
        made += usize::from(
            node.map(&format!("{SHARE}\\v"), &local, "alice", "pw")
                .is_ok(),
        );
        calls += 1;
    }
    stop.store(true, Ordering::Relaxed);
    adversary.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!("{calls} calls, {made} links made, {swaps} exchanges");
    assert!(swaps > 100, "the adversary barely ran: {swaps}");
    assert!(made > 0, "no call ever got through");
    let escaped: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(escaped.is_empty(), "links made outside: {escaped:?}");
}

/// Runs `map(remote)` as [`on_thread`] does.
fn map_on_thread(
    n: &Arc<Node>,
    remote: &'static str,
    ms: Option<u64>,
) -> std::sync::mpsc::Receiver<Result<()>> {
    let n = n.clone();
    on_thread(ms, move || n.map(remote, "", "u", "Pw-1"))
}

/// Once, one node-wide mutex was held across the name lookup and the cifs mount, so a server that
/// does not answer stalled every SMB stage and unstage on the node, and neither step heeded the
/// caller's deadline. Now a stage on a dead server ends at its deadline (the mount goes on,
/// bounded, and a retry joins it instead of starting another), a stage on a name the name servers
/// do not answer for too, another server's stage and unstage complete at once, and an unstage of
/// the dead share ends at its deadline.
#[test]
fn a_dead_server_delays_only_calls_for_its_own_share() {
    use std::time::Duration;
    const DEAD: &str = "\\\\dead\\vols";
    let n = Arc::new(Node::new(false));
    FakeCifs::set(&n.fake.dead, "dead", true);
    FakeCifs::set(&n.fake.dns_dead, "nodns", true);

    let e = map_on_thread(&n, DEAD, Some(300))
        .recv_timeout(Duration::from_secs(5))
        .expect("the dead server's stage ends at its caller's deadline")
        .unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable, "{e}");
    assert!(e.message().contains("did not complete"), "{e}");
    let e = map_on_thread(&n, "\\\\nodns\\vols", Some(300))
        .recv_timeout(Duration::from_secs(5))
        .expect("a name lookup that hangs ends at the caller's deadline")
        .unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable, "{e}");
    assert!(e.message().contains("did not resolve"), "{e}");

    // Meanwhile, without a deadline, a retry for the dead share waits on it; another server's
    // stage is not held up.
    let waiting = map_on_thread(&n, DEAD, None);
    map_on_thread(&n, "\\\\alive\\vols", None)
        .recv_timeout(Duration::from_secs(1))
        .expect("another server's stage completes within a second")
        .unwrap();
    assert_eq!(
        n.fake.attempts.lock().unwrap()["dead"],
        1,
        "one mount in flight"
    );
    // Another server's unstage is not held up either; one of the dead share waits on it, and
    // ends at its deadline.
    let m = n.clone();
    on_thread(None, move || {
        m.svc.remove_smb_global_mapping("\\\\alive\\vols")
    })
    .recv_timeout(Duration::from_secs(1))
    .expect("another server's unstage completes within a second")
    .unwrap();
    assert!(n.mounts().is_empty(), "{:?}", n.mounts());
    let m = n.clone();
    let e = on_thread(Some(300), move || m.svc.remove_smb_global_mapping(DEAD))
        .recv_timeout(Duration::from_secs(5))
        .expect("an unstage of the dead share ends at its caller's deadline")
        .unwrap_err();
    assert_eq!(e.kind(), Kind::DeadlineExceeded, "{e}");

    // The server answers: the mount in flight completes and the waiting retry uses it.
    FakeCifs::set(&n.fake.dead, "dead", false);
    FakeCifs::set(&n.fake.dns_dead, "nodns", false);
    waiting
        .recv_timeout(Duration::from_secs(60))
        .expect("the retry ends once the server answers")
        .unwrap();
    assert_eq!(n.fake.attempts.lock().unwrap()["dead"], 1);
    assert_eq!(n.mounts().len(), 1);
}

/// Once, the link scan walked the kubelet tree entry by entry under one entry budget, into emptyDir
/// contents, and took what it had found when the budget ran out as the whole; walking `pods/` first
/// (the listing's order decides: on NTFS, `pods` before `plugins`), a pod with a large emptyDir hid
/// another volume's live staging link, and RemoveSmbGlobalMapping removed the mapping under it. Now
/// only kubelet's own directories are listed: the link is found and the mapping kept (answered OK),
/// and once no other volume uses it, the same tree lets it go.
#[test]
fn a_large_empty_dir_does_not_hide_another_volumes_staging_link() {
    const LIMIT: usize = 1_000;
    let n = Node::with_scan_limit(false, LIMIT);
    let (own, other) = (n.staging("own"), n.staging("other"));
    n.map(SHARE, &own, "u", "Pw-1").unwrap();
    n.map(SHARE, &other, "u", "Pw-1").unwrap();
    let cache = Path::new(&n.k("pods/uid-1/volumes/kubernetes.io~empty-dir/cache")).to_path_buf();
    fs::create_dir_all(&cache).unwrap();
    for i in 0..=LIMIT {
        fs::File::create(cache.join(i.to_string())).unwrap();
    }
    // The order in which the old walk spent its budget in `pods/` before it reached the link.
    let listed: Vec<_> = fs::read_dir(n.k(""))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let first = |name: &str| listed.iter().position(|n| n == name);
    if first("pods") > first("plugins") {
        eprintln!("this filesystem lists plugins/ first: the old walk would have found the link");
    }
    n.svc.remove_smb_global_mapping(SHARE).unwrap();
    assert_eq!(
        n.mounts().len(),
        1,
        "kept: another volume's staging link uses it"
    );
    fs::remove_file(n.k(&other)).unwrap();
    n.svc.remove_smb_global_mapping(SHARE).unwrap();
    assert!(
        n.mounts().is_empty(),
        "removed: only the caller's own link is left"
    );
}

/// Each credential has a mount of its own, so repairing one repairs that one only. The repair
/// used to unmount every credential's mount of the share: a stage made with alice's refused
/// credential took bob's healthy mount, and every open file of bob's volumes, with it. Now
/// alice's mount alone is made again (and only because her credential was refused), and while
/// the server does not answer at all nothing is unmounted: the stage answers UNAVAILABLE and
/// the mounts reconnect by themselves once it answers.
#[test]
fn repairing_one_credentials_mount_keeps_other_tenants_mounts() {
    use std::time::Duration;
    let n = Arc::new(Node::new(false));
    let [pa, pb, pb2, pa2] = ["a", "b", "b2", "a2"].map(|v| n.staging(v));
    n.map(SHARE, &pa, "CORP\\alice", "Alice-Pw-1").unwrap();
    n.map(SHARE, &pb, "CORP\\bob", "Bob-Pw-2").unwrap();
    let a = fs::read_link(n.k(&pa)).unwrap();
    let b = fs::read_link(n.k(&pb)).unwrap();
    assert_ne!(a, b);

    // The server refuses alice's credential on her mount: her next stage mounts it again;
    // bob's mount, which his link uses, is never touched.
    n.fake.refused.lock().unwrap().insert(a.clone());
    n.map(SHARE, &pa, "CORP\\alice", "Alice-Pw-1").unwrap();
    assert_eq!(*n.fake.unmounted.lock().unwrap(), std::slice::from_ref(&a));
    let dirs: Vec<PathBuf> = n.mounts().into_iter().map(|(d, ..)| d).collect();
    assert!(dirs.contains(&a) && dirs.contains(&b), "{dirs:?}");
    assert_eq!(
        fs::read_link(n.k(&pb)).unwrap(),
        b,
        "bob's link still leads into his mount"
    );

    // The server does not answer: a mount that does not answer is not a refused credential.
    // Bob's stage of another volume ends at its deadline with UNAVAILABLE, and no mount is
    // taken from the volumes using them.
    FakeCifs::set(&n.fake.dead, "srv", true);
    let m = n.clone();
    let e = on_thread(Some(300), move || {
        m.map(SHARE, &pb2, "CORP\\bob", "Bob-Pw-2")
    })
    .recv_timeout(Duration::from_secs(5))
    .expect("the stage ends at its caller's deadline")
    .unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable, "{e}");
    assert!(e.message().contains("kept"), "{e}");
    assert_eq!(
        *n.fake.unmounted.lock().unwrap(),
        std::slice::from_ref(&a),
        "nothing more unmounted"
    );
    assert_eq!(n.mounts().len(), 2);
    FakeCifs::set(&n.fake.dead, "srv", false);

    // Once it answers, stages reuse the mounts kept.
    n.map(SHARE, &pa2, "CORP\\alice", "Alice-Pw-1").unwrap();
    assert_eq!(fs::read_link(n.k(&pa2)).unwrap(), a);
    assert_eq!(n.fake.unmounted.lock().unwrap().len(), 1);
}
