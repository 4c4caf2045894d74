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

/// `\\srv\x,file_mode=0777` would end the `unc=` option and start another in the cifs mount
/// data; pod authors choose this string for inline volumes. Before, it reached mount(2).
#[tokio::test(flavor = "multi_thread")]
async fn smb_remote_paths_cannot_carry_mount_options() {
    let d = Daemon::start(&[]);
    let ch = d.connector().channel("smb", "v1").await.unwrap();
    let mut c = smb1::smb_client::SmbClient::new(ch);
    for remote in [
        r"\\srv\x,file_mode=0777",
        r"\\srv,ip=127.0.0.1\share",
        "//srv/share=x",
        r"\\srv\a;b",
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
        assert_eq!(s.code(), Code::InvalidArgument, "{remote}: {}", s.message());
        assert!(
            s.message().contains("NewSmbGlobalMapping") && s.message().contains("which no SMB"),
            "{remote}: {}",
            s.message()
        );
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
/// finishes the growth. Before, this was INTERNAL.
#[tokio::test(flavor = "multi_thread")]
async fn a_busy_device_during_offline_growth_is_a_precondition_and_the_retry_finishes() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "busy", 200).unwrap();
    let id = common::partition_one(&mut dc, &mut vc, l.disk_number()).await;
    vc.format_volume(v1::FormatVolumeRequest {
        volume_id: id.clone(),
    })
    .await
    .unwrap();
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
        s.message().contains("ResizeVolume") && s.message().contains("busy"),
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
