//! The Linux host's remaining safety rules, through the daemon's endpoints the way a driver
//! calls them: SMB remote paths cannot smuggle cifs mount options, a stale mount of a volume
//! that is gone is unmounted (and nothing else is), a busy device is a precondition and not an
//! internal error. Needs root (loop devices, mount); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{Daemon, LoopDisk, can_use_loop_devices, is_mounted, v1_clients};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::smb::v1 as smb1;
use csi_proxy_api::volume::v1;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use tonic::Code;

/// O_EXCL (Linux, x86 and arm): on a block device without O_CREAT it claims the device
/// exclusively, as a mount does (open(2)).
const O_EXCL: i32 = 0o200;

fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A remote path is pod authors' text for inline volumes. A server name carrying mount-option
/// syntax (`\\srv,ip=127.0.0.1\share`) is refused before any host call; a share name may carry
/// `, ; =` (Samba and NAS exports do), and the Linux host passes it as the mount source, never
/// inside the option string, so `\\srv\x,file_mode=0777` cannot add an option. Here the kernel
/// has no cifs, so such a name reaches the host and stops there; nothing is mounted either way.
#[tokio::test(flavor = "multi_thread")]
async fn smb_remote_paths_cannot_carry_mount_options() {
    let d = Daemon::start(&[]);
    let ch = d.connector().channel("smb", "v1").await.unwrap();
    let mut c = smb1::smb_client::SmbClient::new(ch);
    let cifs = std::fs::read_to_string("/proc/filesystems")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().last() == Some("cifs"));
    for (remote, refused) in [
        (r"\\srv,ip=127.0.0.1\share", true),
        (r"\\srv=x\share", true),
        (r"\\srv\x,file_mode=0777", false),
        ("//srv/share=x", false),
        (r"\\srv\a;b", false),
    ] {
        let s = c
            .new_smb_global_mapping(smb1::NewSmbGlobalMappingRequest {
                remote_path: remote.into(),
                local_path: String::new(),
                username: "u".into(),
                password: "p".into(),
            })
            .await
            .expect_err(remote);
        if refused {
            assert_eq!(s.code(), Code::InvalidArgument, "{remote}: {}", s.message());
            assert!(
                s.message().contains("NewSmbGlobalMapping") && s.message().contains("which no SMB"),
                "{remote}: {}",
                s.message()
            );
        } else {
            assert_ne!(s.code(), Code::InvalidArgument, "{remote}: {}", s.message());
            if !cifs {
                assert_eq!(
                    s.code(),
                    Code::FailedPrecondition,
                    "{remote}: {}",
                    s.message()
                );
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(" cifs "), "nothing was mounted");
}

/// After a forced detach the volume ID resolves no more; the stale mount on the target must
/// still go, or kubelet can never clean the target up. What shows in the mount table then is a
/// mount whose source node and device number are gone, which a tmpfs mounted with such a source
/// reproduces without detaching a mounted disk (loop devices stay attached while mounted).
#[tokio::test(flavor = "multi_thread")]
async fn unmount_of_a_gone_volume_removes_its_stale_mount_and_nothing_else() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (_, mut vc) = v1_clients(&d).await;
    let gone = "diskseq4000000000-part1-0c9d5ab7-45f4-4c8b-9d4a-1f2e3d4c5b6a";
    let target = d.k("plugins/kubernetes.io/csi/pv/gone/globalmount");
    std::fs::create_dir_all(&target).unwrap();
    let unmount = |vc: &mut common::VolumeClient, id: &str| {
        let (mut vc, id, target) = (vc.clone(), id.to_string(), target.clone());
        async move {
            vc.unmount_volume(v1::UnmountVolumeRequest {
                volume_id: id,
                target_path: target,
            })
            .await
            .map(drop)
        }
    };

    // Nothing mounted: OK, also for an ID that resolves no more.
    unmount(&mut vc, gone).await.unwrap();

    // Someone else's tmpfs (a secret volume) is never taken for the stale mount.
    sh("mount", &["-t", "tmpfs", "tmpfs", &target]);
    let s = unmount(&mut vc, gone).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    assert!(s.message().contains("not unmounting it"), "{}", s.message());
    assert!(is_mounted(Path::new(&target)), "the tmpfs stays");
    sh("umount", &[&target]);

    // The stale mount of a detached disk goes.
    sh(
        "mount",
        &["-t", "tmpfs", "/dev/csi-proxy-test-detached-p1", &target],
    );
    unmount(&mut vc, gone).await.unwrap();
    assert!(!is_mounted(Path::new(&target)), "the stale mount is gone");
}

/// resize2fs and e2fsck open an unmounted ext4 exclusively; another holder makes them fail
/// with EBUSY, which the caller can act on (FAILED_PRECONDITION, retry later), and the retry
/// finishes the growth. Before, this was INTERNAL; now the in-use rule refuses before the
/// tools run, naming the process that holds the partition.
#[tokio::test(flavor = "multi_thread")]
async fn a_busy_device_during_offline_growth_is_a_precondition_and_the_retry_finishes() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "busy", 200).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    common::format_ok(&mut vc, &id).await;
    l.grow_to(400);
    dc.rescan(d1::RescanRequest {}).await.unwrap();
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_EXCL)
        .open(l.partition(1))
        .unwrap();
    let resize = |vc: &mut common::VolumeClient| {
        let (mut vc, id) = (vc.clone(), id.clone());
        async move {
            vc.resize_volume(v1::ResizeVolumeRequest {
                volume_id: id,
                size_bytes: 0,
            })
            .await
            .map(drop)
        }
    };
    let s = resize(&mut vc).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    assert!(
        s.message().contains("ResizeVolume")
            && s.message().contains(&format!(
                "held open by process(es) {} (",
                std::process::id()
            )),
        "{}",
        s.message()
    );
    drop(holder);
    resize(&mut vc).await.unwrap();
    let stats = vc
        .get_volume_stats(v1::GetVolumeStatsRequest { volume_id: id })
        .await
        .unwrap()
        .into_inner();
    assert!(stats.total_bytes > 300 << 20, "{stats:?}");
}

/// One mount with an empty source (two spaces in a row in /proc/self/mountinfo) anywhere on the
/// host made the mount table unreadable, and every RPC that reads it INVALID_ARGUMENT.
#[tokio::test(flavor = "multi_thread")]
async fn a_mount_with_an_empty_source_does_not_break_the_mount_table() {
    if !common::is_root() {
        eprintln!("SKIPPED: mounting needs root");
        return;
    }
    let d = Daemon::start(&[]);
    let (_, mut vc) = v1_clients(&d).await;
    let odd = d.dir.path().join("empty-source");
    std::fs::create_dir_all(&odd).unwrap();
    sh("mount", &["-t", "tmpfs", "", odd.to_str().unwrap()]);
    let plain = d.k("plugins/x/not-a-mount");
    std::fs::create_dir_all(&plain).unwrap();
    let s = vc
        .get_volume_id_from_target_path(v1::GetVolumeIdFromTargetPathRequest { target_path: plain })
        .await
        .unwrap_err();
    sh("umount", &[odd.to_str().unwrap()]);
    assert_eq!(s.code(), Code::NotFound, "{}", s.message());
    assert!(
        s.message().contains("is not a mount point"),
        "{}",
        s.message()
    );
}

/// A stop request (SIGTERM: what systemd sends the main process with `KillMode=mixed`) lets a
/// running tool finish instead of cutting it off: the daemon stays until mkfs is done, the
/// format is recorded complete, and the retry after the restart is the OK no-op.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_request_lets_a_running_tool_finish() {
    if !can_use_loop_devices() {
        return;
    }
    let wrappers = tempfile::tempdir().unwrap();
    let release = wrappers.path().join("release");
    let marker = wrappers.path().join("mkfs.held");
    let path = common::wrap_tool(
        wrappers.path(),
        "mkfs.ext4",
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            marker.display(),
            release.display()
        ),
    );
    let mut d = Daemon::start_env(&[], &[("PATH", &path)]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "stopfinish", 64).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    let call = common::spawn_format(&vc, &id);
    while !marker.exists() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    d.signal("-TERM");
    // Past the daemon's grace period for requests, it still waits for the tool.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert!(
        d.alive(),
        "the daemon waits for mkfs; log:\n{}",
        d.log_tail()
    );
    std::fs::write(&release, b"").unwrap();
    d.wait_exit(std::time::Duration::from_secs(60));
    let _ = call.await;
    d.restart();
    let (_, mut vc) = v1_clients(&d).await;
    assert!(
        common::is_formatted(&mut vc, &id).await,
        "mkfs ran to its end"
    );
    vc.format_volume(v1::FormatVolumeRequest { volume_id: id })
        .await
        .unwrap();
}

/// A service unit with `PrivateMounts=` (or `ProtectSystem=`, …) runs the daemon in a mount
/// namespace of its own, where every mount it makes is invisible to kubelet. Before, it started
/// and MountVolume answered OK into directories kubelet saw empty; now it refuses to start.
#[test]
fn the_daemon_refuses_to_start_outside_the_hosts_mount_namespace() {
    if !common::is_root() {
        eprintln!("SKIPPED: unshare -m needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("kubelet");
    std::fs::create_dir_all(&kubelet).unwrap();
    let mut out = Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("--kubelet-path={}", kubelet.display()))
        .arg(format!("--socket-dir={}", dir.path().join("run").display()))
        .arg(format!(
            "--state-dir={}",
            dir.path().join("state").display()
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A daemon that starts anyway would serve forever: stop it and fail, rather than hang.
    let t = std::time::Instant::now();
    while out.try_wait().unwrap().is_none() {
        if t.elapsed() > std::time::Duration::from_secs(30) {
            let _ = out.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = out.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it must not start: {stderr}");
    assert!(
        stderr.contains("mount namespace of its own") && stderr.contains("PrivateMounts="),
        "{stderr}"
    );
    assert!(
        !dir.path().join("run").exists()
            || std::fs::read_dir(dir.path().join("run"))
                .unwrap()
                .next()
                .is_none(),
        "no socket was created"
    );
}

/// Rmdir(force) of a pod directory with a secret tmpfs mounted inside: before, the tmpfs was
/// unmounted and the directory removed; now it is refused and nothing is removed. The mount
/// point itself is still unmounted by Rmdir (drivers remove their staging path that way).
#[tokio::test(flavor = "multi_thread")]
async fn rmdir_never_unmounts_what_is_mounted_below_the_path() {
    if !common::is_root() {
        eprintln!("SKIPPED: mounting needs root");
        return;
    }
    use csi_proxy_api::filesystem::v1 as fs1;
    let d = Daemon::start(&[]);
    let ch = d.connector().channel("filesystem", "v1").await.unwrap();
    let c = fs1::filesystem_client::FilesystemClient::new(ch);
    let pod = d.k("pods/uid-1");
    let secret = format!("{pod}/volumes/kubernetes.io~secret/token");
    std::fs::create_dir_all(&secret).unwrap();
    sh("mount", &["-t", "tmpfs", "tmpfs", &secret]);
    std::fs::write(format!("{secret}/token"), b"s3cret").unwrap();
    std::fs::write(format!("{pod}/other"), b"x").unwrap();
    let rmdir = |path: String| {
        let mut c = c.clone();
        async move {
            c.rmdir(fs1::RmdirRequest { path, force: true })
                .await
                .map(drop)
        }
    };
    let s = rmdir(pod.clone()).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition, "{}", s.message());
    assert!(
        s.message().contains("Rmdir") && s.message().contains("never unmounts"),
        "{}",
        s.message()
    );
    assert!(is_mounted(Path::new(&secret)), "the secret stays mounted");
    assert_eq!(std::fs::read(format!("{secret}/token")).unwrap(), b"s3cret");
    assert!(
        Path::new(&format!("{pod}/other")).exists(),
        "nothing removed"
    );

    rmdir(secret.clone()).await.unwrap();
    assert!(!is_mounted(Path::new(&secret)));
    rmdir(pod.clone()).await.unwrap();
    assert!(!Path::new(&pod).exists());
}

/// On Linux, Start/StopService touch no unit unless --allowed-service names it, and never a
/// unit that is not a service (`reboot.target` would reboot the node).
#[tokio::test(flavor = "multi_thread")]
async fn service_control_is_off_by_default_and_targets_are_never_started() {
    use csi_proxy_api::system::v1alpha1 as sys;
    for (flags, name, why) in [
        (vec![], "reboot.target", "unless --allowed-service names it"),
        (vec![], "kubelet", "unless --allowed-service names it"),
        (
            vec!["--allowed-service=reboot.target"],
            "reboot.target",
            "only .service units",
        ),
    ] {
        let d = Daemon::start(&flags);
        let ch = d.connector().channel("system", "v1alpha1").await.unwrap();
        let mut c = sys::system_client::SystemClient::new(ch);
        let s = c
            .start_service(sys::StartServiceRequest { name: name.into() })
            .await
            .unwrap_err();
        assert_eq!(s.code(), Code::PermissionDenied, "{name}: {}", s.message());
        assert!(s.message().contains(why), "{name}: {}", s.message());
    }
}
