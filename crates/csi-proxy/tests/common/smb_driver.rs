//! csi-driver-smb's and azurefile's Windows node code, replayed: the csi-proxy calls their
//! `csiProxyMounter` makes for each CSI operation, in their order, with their path forms
//! (`normalizeWindowsPath`: `/` → `\`, `c:` put before a path starting with `\`), and the
//! branches they take on the answers. What a driver does itself, in its container, through its
//! bind mount of the kubelet directory (`os.MkdirAll`, `os.Readlink`, `ReadDir`), is done here
//! on the simulated machine directly. Read from kubernetes-csi/csi-driver-smb
//! (`pkg/mounter/safe_mounter_windows.go`, `pkg/smb/nodeserver.go`) and
//! kubernetes-sigs/azurefile-csi-driver (`pkg/mounter/safe_mounter_windows.go`,
//! `pkg/azurefile/{nodeserver.go,azure_common_windows.go}`); their code is not copied. When no
//! v1 endpoint answers, both fall back to `csiProxyMounterV1Beta`
//! (`safe_mounter_v1beta_windows.go`): filesystem v1beta1 (IsMountPoint for IsSymlink, LinkPath,
//! Rmdir in the pod context, Mkdir in the plugin context) and smb v1beta1, whose unmount is the
//! Rmdir of the staging link alone (csi-driver-smb too: no RemoveSmbGlobalMapping).

use super::SimDaemon;
use super::fs_api::{FsApi, PathContext, SmbApi};
use csi_proxy_core::paths::{LinkProbe, LinkTarget};
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::sim::SimWindows;
use std::sync::Arc;
use tonic::Status;

/// The drivers' `normalizeWindowsPath`.
pub fn normalize_windows_path(path: &str) -> String {
    let p = path.replace('/', "\\");
    if p.starts_with('\\') {
        format!("c:{p}")
    } else {
        p
    }
}

/// Go's `filepath.Dir` on Windows for the paths kubelet hands (no trailing separator).
fn parent(path: &str) -> &str {
    &path[..path.rfind(['\\', '/']).unwrap_or(0)]
}

/// The lower-cased `\\server\share` a source maps (csi-driver-smb's `getRootMappingPath`).
fn root_mapping_path(source: &str) -> String {
    let parts: Vec<&str> = source.split('\\').filter(|p| !p.is_empty()).collect();
    format!(r"\\{}\{}", parts[0], parts[1]).to_lowercase()
}

/// Which driver is replayed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SmbFlavour {
    /// csi-driver-smb v1.13–v1.20.3 with `--remove-smb-mapping-during-unmount` (its default):
    /// a count file per volume ID under the share's directory in [`COUNTS`], the mapping
    /// removed when the last one goes, before the Rmdir.
    CsiDriverSmb,
    /// csi-driver-smb v1.9–v1.12: the same, with count files named by the remote path, so
    /// volumes of one remote path (static volumes of a share) share one file.
    CsiDriverSmbV1_12,
    /// azurefile (v1.35.4 to v1.35.7): its unstage is Rmdir only, it never calls
    /// RemoveSmbGlobalMapping, and its publish keeps a link it cannot read.
    AzureFile,
}

impl SmbFlavour {
    fn is_csi_driver_smb(self) -> bool {
        self != SmbFlavour::AzureFile
    }
}

/// Where csi-driver-smb keeps its reference counts on the host: `c:\csi\smbmounts` in its
/// container, whose `c:\csi` is the chart's `plugin-dir` host path (v1.9 to v1.20.3,
/// `deploy/csi-smb-node-windows.yaml`), so the counts survive the container's restarts.
pub const COUNTS: &str = r"c:\var\lib\kubelet\plugins\smb.csi.k8s.io\smbmounts";

/// The count file's name: the MD5 of the lower-cased key, in hex (`getMd5`).
fn md5_name(key: &str) -> String {
    use md5::{Digest, Md5};
    Md5::digest(key.to_lowercase().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The directory of a mapping path's count files (`\\host\share` → `…\host\share`).
pub fn count_dir(mapping_path: &str) -> String {
    format!(r"{COUNTS}\{}", mapping_path.trim_start_matches('\\'))
}

/// A node plugin of one of the two SMB drivers, connected to a simulated-Windows daemon.
pub struct SmbDriver {
    pub fs: FsApi,
    pub smb: SmbApi,
    sim: Arc<SimWindows>,
    flavour: SmbFlavour,
}

impl SmbDriver {
    /// `NewSafeMounter`: the v1 clients, else the v1beta ones.
    pub async fn new(d: &SimDaemon, flavour: SmbFlavour) -> SmbDriver {
        let c = &d.connector;
        let (fs, smb) = match (
            FsApi::connect(c, "v1").await,
            SmbApi::connect(c, "v1").await,
        ) {
            (Ok(fs), Ok(smb)) => (fs, smb),
            _ => (
                FsApi::connect(c, "v1beta1")
                    .await
                    .expect("filesystem v1beta1"),
                SmbApi::connect(c, "v1beta1").await.expect("smb v1beta1"),
            ),
        };
        SmbDriver {
            fs,
            smb,
            sim: d.sim.clone(),
            flavour,
        }
    }

    /// The driver's container restarted: nothing it keeps is lost, its counts are files on
    /// the host ([`COUNTS`]).
    pub fn restart(&mut self) {}

    /// The count file csi-driver-smb keeps for a volume staged from `remote` (its own
    /// normalised source: `\`-separated, no trailing `\`).
    fn count_file(&self, volume_id: &str, remote: &str) -> String {
        let key = match self.flavour {
            SmbFlavour::CsiDriverSmbV1_12 => remote,
            _ => volume_id,
        };
        format!(
            r"{}\{}",
            count_dir(&root_mapping_path(remote)),
            md5_name(key)
        )
    }

    /// The driver's own `os.Open(target).ReadDir(1)`, through every link on the way.
    pub fn reads(&self, path: &str) -> bool {
        super::container_open(&self.sim, path).is_some()
    }

    /// The versions in use (filesystem, smb).
    pub fn versions(&self) -> (&'static str, &'static str) {
        (self.fs.version(), self.smb.version())
    }

    fn v1(&self) -> bool {
        self.smb.version() == "v1"
    }

    /// IsSymlink (v1beta1: IsMountPoint).
    async fn is_symlink(&mut self, path: &str) -> Result<bool, Status> {
        self.fs.is_link(&normalize_windows_path(path)).await
    }

    /// PathExists (v1beta1: no context given, the plugin one).
    pub async fn exists(&mut self, path: &str) -> Result<bool, Status> {
        let p = normalize_windows_path(path);
        self.fs.path_exists(&p, PathContext::Plugin).await
    }

    /// Rmdir with force (v1beta1: always in the pod context).
    async fn rmdir(&mut self, path: &str) -> Result<(), Status> {
        let p = normalize_windows_path(path);
        self.fs.rmdir(&p, PathContext::Pod).await
    }

    /// Both drivers' `ensureMountPoint`: `Ok(true)` when `target` is a link the driver can read
    /// through (already mounted). A link it cannot read through, which IsSymlink answers true
    /// for or fails on (the driver then finds the path "corrupted" itself), is removed (Rmdir,
    /// their `Unmount`) and the call fails, as theirs does; kubelet retries. azurefile v1.35.4
    /// on passes `shouldUnmount` false from NodePublishVolume: there the link is kept (an
    /// unmount during a republish raced a restarting container) and the call fails, leaving
    /// the cleanup to NodeUnpublishVolume. Otherwise the
    /// driver makes the directory itself (`os.MkdirAll`), which fails on a link whose target
    /// is gone (Go's MkdirAll: Stat fails, Mkdir finds the entry, Lstat says it is no
    /// directory), so an IsSymlink answering false for a dead link fails every retry.
    async fn ensure_mount_point(
        &mut self,
        target: &str,
        should_unmount: bool,
    ) -> Result<bool, Status> {
        let path = normalize_windows_path(target);
        if self.exists(target).await? {
            let link = match self.is_symlink(target).await {
                Ok(link) => link,
                Err(_) if !self.reads(target) => true,
                Err(e) => return Err(e),
            };
            if link {
                if self.reads(target) {
                    return Ok(true);
                }
                if !should_unmount {
                    return Err(Status::internal(format!(
                        "Could not mount target {target}: ReadDir failed; the link is kept"
                    )));
                }
                self.rmdir(target).await?;
                return Err(Status::internal(format!(
                    "Could not mount target {target}: ReadDir failed; the link was removed"
                )));
            }
            let fs = WindowsFilesystemHost::with_os(self.sim.clone());
            if !self.reads(target) && matches!(fs.link_target(&path), Ok(Some(_))) {
                return Err(Status::internal(format!(
                    "Could not mount target {target}: mkdir: Cannot create a file when that \
                     file already exists (IsSymlink answered false for a dead link)"
                )));
            }
        }
        self.sim.mkdir(&path);
        Ok(false)
    }

    /// NodeStageVolume on Windows. `source` as the volume context gives it (csi-driver-smb:
    /// often `//server/share`; azurefile builds `\\account.file.core.windows.net\share`),
    /// `sub_dir` joined the driver's way (csi-driver-smb with `/`, azurefile with `\`), the
    /// staging path raw as kubelet hands it (`\var\lib\kubelet\…`, no drive).
    pub async fn stage(
        &mut self,
        volume_id: &str,
        source: &str,
        sub_dir: Option<&str>,
        staging: &str,
        user: &str,
        password: &str,
    ) -> Result<(), Status> {
        // csi-driver-smb puts a user without a domain into its default one; azurefile passes
        // `AZURE\<account>`.
        let user = if user.contains('\\') {
            user.to_string()
        } else {
            format!(r"AZURE\{user}")
        };
        if self.ensure_mount_point(staging, true).await? {
            return Ok(());
        }
        // prepareStagePath: the directory just made is removed again, for the link.
        if self.exists(staging).await? {
            self.rmdir(staging).await?;
        }
        let mut source = source.to_string();
        if let Some(sub) = sub_dir {
            source = match self.flavour {
                SmbFlavour::AzureFile => format!(r"{source}\{sub}"),
                _ => format!("{}/{sub}", source.trim_end_matches('/')),
            };
        }
        // SMBMount.
        let parent_dir = parent(staging).to_string();
        if !self.exists(&parent_dir).await? {
            let p = normalize_windows_path(&parent_dir);
            self.fs.mkdir(&p, PathContext::Plugin).await?;
        }
        let mut source = source.replace('/', "\\");
        if self.v1() {
            // The v1 mounter drops a trailing separator; the v1beta one sends it.
            source = source.strip_suffix('\\').unwrap_or(&source).to_string();
        }
        let local = normalize_windows_path(staging);
        self.smb.map(&source, &local, &user, password).await?;
        if self.flavour.is_csi_driver_smb() && self.v1() {
            // incementVolumeIDReferencesCount: MkdirAll, then os.Create (truncates).
            let file = self.count_file(volume_id, &source);
            self.sim.mkdir(parent(&file));
            self.sim.add_file(&file);
        }
        Ok(())
    }

    /// NodePublishVolume: the target kubelet made is removed and linked to the staging path.
    pub async fn publish(&mut self, staging: &str, target: &str) -> Result<(), Status> {
        let should_unmount = self.flavour != SmbFlavour::AzureFile;
        if self.ensure_mount_point(target, should_unmount).await? {
            return Ok(());
        }
        if self.exists(target).await? {
            self.rmdir(target).await?;
        }
        let (source, target) = (
            normalize_windows_path(staging),
            normalize_windows_path(target),
        );
        self.fs.link(&source, &target).await
    }

    /// NodeUnpublishVolume: Rmdir of the publish link.
    pub async fn unpublish(&mut self, target: &str) -> Result<(), Status> {
        self.rmdir(target).await
    }

    /// NodeUnstageVolume. csi-driver-smb on v1 reads the remote path from the staging link
    /// itself (when it cannot, it only removes the link), removes its count file — an error
    /// fails the unstage, also when the file is gone because an earlier attempt removed it —
    /// and, when no count file of the share is left, removes the mapping (an error fails the
    /// unstage) before the Rmdir of the link; azurefile, and csi-driver-smb on v1beta, only
    /// remove the link.
    pub async fn unstage(&mut self, volume_id: &str, staging: &str) -> Result<(), Status> {
        if self.flavour.is_csi_driver_smb() && self.v1() {
            let fs = WindowsFilesystemHost::with_os(self.sim.clone());
            if let Ok(Some(LinkTarget::Path(remote))) =
                fs.link_target(&normalize_windows_path(staging))
            {
                let remote = remote.trim_end_matches('\\').to_string();
                let file = self.count_file(volume_id, &remote);
                self.sim.mkdir(parent(&file));
                if !self.sim.remove_file(&file) {
                    return Err(Status::internal(format!(
                        "failed to unmount staging target {staging:?}: \
                         decrementVolumeIDReferencesCount failed with error: remove {file}: \
                         The system cannot find the file specified."
                    )));
                }
                if self.sim.dir_entries(parent(&file)).is_empty() {
                    self.smb.unmap(&remote).await?;
                }
            }
        }
        self.rmdir(staging).await
    }
}
