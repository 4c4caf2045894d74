//! csi-driver-smb's and azurefile's Windows node code, replayed: the csi-proxy calls their
//! `csiProxyMounter` makes for each CSI operation, in their order, with their path forms
//! (`normalizeWindowsPath`: `/` → `\`, `c:` put before a path starting with `\`), and the
//! branches they take on the answers. What a driver does itself, in its container, through its
//! bind mount of the kubelet directory (`os.MkdirAll`, `os.Readlink`, `ReadDir`), is done here
//! on the simulated machine directly. Read from kubernetes-csi/csi-driver-smb
//! (`pkg/mounter/safe_mounter_windows.go`, `pkg/smb/nodeserver.go`) and
//! kubernetes-sigs/azurefile-csi-driver (`pkg/mounter/safe_mounter_windows.go`,
//! `pkg/azurefile/{nodeserver.go,azure_common_windows.go}`); their code is not copied.

use super::{Node, SimDaemon};
use csi_proxy_api::filesystem::v1 as f1;
use csi_proxy_api::smb::v1 as s1;
use csi_proxy_core::paths::{LinkProbe, LinkTarget};
use csi_proxy_host::windows::filesystem::WindowsFilesystemHost;
use csi_proxy_host::windows::sim::SimWindows;
use std::collections::{BTreeMap, BTreeSet};
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
    /// csi-driver-smb with `--remove-smb-mapping-during-unmount` (its default): a per-share
    /// count of volume IDs, RemoveSmbGlobalMapping at the last one, before the Rmdir.
    CsiDriverSmb,
    /// azurefile: its unstage is Rmdir only, it never calls RemoveSmbGlobalMapping.
    AzureFile,
}

/// A node plugin of one of the two SMB drivers, connected to a simulated-Windows daemon.
pub struct SmbDriver {
    pub node: Node,
    pub smb: s1::smb_client::SmbClient<tonic::transport::Channel>,
    sim: Arc<SimWindows>,
    flavour: SmbFlavour,
    /// csi-driver-smb's reference counts: volume IDs per mapping path.
    refs: BTreeMap<String, BTreeSet<String>>,
}

impl SmbDriver {
    pub async fn new(d: &SimDaemon, flavour: SmbFlavour) -> SmbDriver {
        SmbDriver {
            node: d.node().await,
            smb: s1::smb_client::SmbClient::new(d.connector.channel("smb", "v1").await.unwrap()),
            sim: d.sim.clone(),
            flavour,
            refs: BTreeMap::new(),
        }
    }

    /// The driver's container restarted: csi-driver-smb keeps its counts in the container's
    /// own filesystem (`c:\csi\smbmounts`), so they are gone.
    pub fn restart(&mut self) {
        self.refs.clear();
    }

    /// The driver's own `os.Open(target).ReadDir(1)`, through every link on the way.
    pub fn reads(&self, path: &str) -> bool {
        super::container_open(&self.sim, path).is_some()
    }

    async fn is_symlink(&mut self, path: &str) -> Result<bool, Status> {
        Ok(self
            .node
            .fs
            .is_symlink(f1::IsSymlinkRequest {
                path: normalize_windows_path(path),
            })
            .await?
            .into_inner()
            .is_symlink)
    }

    async fn exists(&mut self, path: &str) -> Result<bool, Status> {
        Ok(self
            .node
            .fs
            .path_exists(f1::PathExistsRequest {
                path: normalize_windows_path(path),
            })
            .await?
            .into_inner()
            .exists)
    }

    async fn rmdir(&mut self, path: &str) -> Result<(), Status> {
        self.node
            .fs
            .rmdir(f1::RmdirRequest {
                path: normalize_windows_path(path),
                force: true,
            })
            .await?;
        Ok(())
    }

    /// Both drivers' `ensureMountPoint`: `Ok(true)` when `target` is a link the driver can read
    /// through (already mounted). A link it cannot read through, which IsSymlink answers true
    /// for or fails on (the driver then finds the path "corrupted" itself), is removed (Rmdir,
    /// their `Unmount`) and the call fails, as theirs does; kubelet retries. Otherwise the
    /// driver makes the directory itself (`os.MkdirAll`), which fails on a link whose target
    /// is gone (Go's MkdirAll: Stat fails, Mkdir finds the entry, Lstat says it is no
    /// directory), so an IsSymlink answering false for a dead link fails every retry.
    async fn ensure_mount_point(&mut self, target: &str) -> Result<bool, Status> {
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
        if self.ensure_mount_point(staging).await? {
            return Ok(());
        }
        // prepareStagePath: the directory just made is removed again, for the link.
        if self.exists(staging).await? {
            self.rmdir(staging).await?;
        }
        let mut source = source.to_string();
        if let Some(sub) = sub_dir {
            source = match self.flavour {
                SmbFlavour::CsiDriverSmb => format!("{}/{sub}", source.trim_end_matches('/')),
                SmbFlavour::AzureFile => format!(r"{source}\{sub}"),
            };
        }
        // SMBMount.
        let parent_dir = parent(staging).to_string();
        if !self.exists(&parent_dir).await? {
            self.node
                .fs
                .mkdir(f1::MkdirRequest {
                    path: normalize_windows_path(&parent_dir),
                })
                .await?;
        }
        let source = source.replace('/', "\\");
        let source = source.strip_suffix('\\').unwrap_or(&source).to_string();
        self.smb
            .new_smb_global_mapping(s1::NewSmbGlobalMappingRequest {
                remote_path: source.clone(),
                local_path: normalize_windows_path(staging),
                username: user,
                password: password.into(),
            })
            .await?;
        if self.flavour == SmbFlavour::CsiDriverSmb {
            self.refs
                .entry(root_mapping_path(&source))
                .or_default()
                .insert(volume_id.into());
        }
        Ok(())
    }

    /// NodePublishVolume: the target kubelet made is removed and linked to the staging path.
    pub async fn publish(&mut self, staging: &str, target: &str) -> Result<(), Status> {
        if self.ensure_mount_point(target).await? {
            return Ok(());
        }
        if self.exists(target).await? {
            self.rmdir(target).await?;
        }
        self.node
            .fs
            .create_symlink(f1::CreateSymlinkRequest {
                source_path: normalize_windows_path(staging),
                target_path: normalize_windows_path(target),
            })
            .await?;
        Ok(())
    }

    /// NodeUnpublishVolume: Rmdir of the publish link.
    pub async fn unpublish(&mut self, target: &str) -> Result<(), Status> {
        self.rmdir(target).await
    }

    /// NodeUnstageVolume. csi-driver-smb reads the remote path from the staging link itself
    /// and, when its count for the share drops to zero, removes the mapping (an error fails the
    /// unstage) before the Rmdir of the link; azurefile only removes the link.
    pub async fn unstage(&mut self, volume_id: &str, staging: &str) -> Result<(), Status> {
        if self.flavour == SmbFlavour::CsiDriverSmb {
            let fs = WindowsFilesystemHost::with_os(self.sim.clone());
            if let Ok(Some(LinkTarget::Path(remote))) =
                fs.link_target(&normalize_windows_path(staging))
            {
                let remote = remote.trim_end_matches('\\').to_string();
                let root = root_mapping_path(&remote);
                let refs = self.refs.entry(root).or_default();
                refs.remove(volume_id);
                if refs.is_empty() {
                    self.smb
                        .remove_smb_global_mapping(s1::RemoveSmbGlobalMappingRequest {
                            remote_path: remote,
                        })
                        .await?;
                }
            }
        }
        self.rmdir(staging).await
    }
}
