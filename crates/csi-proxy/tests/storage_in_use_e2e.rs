//! The in-use rule judges storage, not a device name, through the daemon's endpoints on real
//! loop disks used by the real tools: the same storage reached through a second path (two
//! loop devices over one image, as two SCSI paths without multipath are), held by a process
//! that mapped it and closed its descriptor, or under a loop device whose backing node cannot
//! be looked up again (deleted, or made in another mount namespace), or held by a container's
//! process through a node of its own. Each is refused through
//! every path, naming the user, and not a byte of the storage changes. Needs root (loop
//! devices, mounts, mknod); skipped with the reason otherwise.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Daemon, Holder, HostMount, LoopDisk, Mapping, can_use_loop_devices, is_mounted, partition_one,
    raw_data, refused, run, v1_clients,
};
use csi_proxy_api::disk::v1 as d1;
use csi_proxy_api::volume::v1;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;

/// The host mounts the ext4 of path A outside the kubelet path with a secret in it. Through
/// path B the volume was mounted into the client's directory (the secret readable and
/// writable there), the disk partitioned, and the volume checked and grown offline under the
/// host's mount (e2fsck then found the filesystem damaged). Every guarded RPC through B is
/// refused naming A; the filesystem stays sound.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_path_to_a_mounted_filesystem_is_in_use() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let a = LoopDisk::new(d.dir.path(), "path-a", 96).unwrap();
    partition_one(&mut dc, &mut vc, a.disk_number()).await;
    let pa = a.partition(1).display().to_string();
    run("mkfs.ext4", &["-q", &pa]);
    let host_dir = d.dir.path().join("host-fs");
    std::fs::create_dir(&host_dir).unwrap();
    run("mount", &[&pa, &host_dir.display().to_string()]);
    let mounted = HostMount(host_dir.clone());
    std::fs::write(host_dir.join("secret"), "the host's").unwrap();
    let host_mp = host_dir.display().to_string();

    let b = a.another_path();
    let nb = b.disk_number();
    let vol_b = common::volumes_on(&mut vc, nb).await.remove(0);
    let names = [host_mp.as_str(), &a.name(), "another path"];
    let evil = d.k("plugins/evil/m");
    std::fs::create_dir_all(&evil).unwrap();
    let mount = vc
        .mount_volume(v1::MountVolumeRequest {
            volume_id: vol_b.clone(),
            target_path: evil.clone(),
        })
        .await;
    let mounted_there = is_mounted(Path::new(&evil));
    if mounted_there {
        let _ = Command::new("umount").arg(&evil).status();
    }
    refused("MountVolume through B", mount, &names);
    assert!(
        !mounted_there,
        "the host's filesystem was mounted in the client's dir"
    );
    refused(
        "PartitionDisk through B",
        dc.partition_disk(d1::PartitionDiskRequest { disk_number: nb })
            .await,
        &names,
    );
    refused(
        "FormatVolume through B",
        vc.format_volume(v1::FormatVolumeRequest {
            volume_id: vol_b.clone(),
        })
        .await,
        &names,
    );
    refused(
        "ResizeVolume through B",
        vc.resize_volume(v1::ResizeVolumeRequest {
            volume_id: vol_b.clone(),
            size_bytes: 0,
        })
        .await,
        &names,
    );
    refused(
        "SetDiskState(offline) through B",
        dc.set_disk_state(d1::SetDiskStateRequest {
            disk_number: nb,
            is_online: false,
        })
        .await,
        &names,
    );
    assert_eq!(
        std::fs::read_to_string(host_dir.join("secret")).unwrap(),
        "the host's"
    );
    drop(mounted);
    run("e2fsck", &["-fn", &pa]);

    // Unmounted and unheld, both paths are the client's again.
    dc.partition_disk(d1::PartitionDiskRequest { disk_number: nb })
        .await
        .unwrap();
}

/// A raw disk an application holds open through path A: PartitionDisk through B wrote a GPT
/// over its data. Refused through B naming the process and A.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_held_open_through_another_path_is_in_use() {
    held_open_through_another_path(&[]).await;
}

async fn held_open_through_another_path(flags: &[&str]) {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(flags);
    let (mut dc, _) = v1_clients(&d).await;
    let a = LoopDisk::new(d.dir.path(), "held-a", 64).unwrap();
    raw_data(&a);
    let before = a.fingerprint();
    let b = a.another_path();
    let holder = Holder::hold(&a.dev);
    let pid = format!("{} (sleep)", holder.0.id());
    for (what, n) in [("B", b.disk_number()), ("A", a.disk_number())] {
        refused(
            &format!("PartitionDisk through {what}"),
            dc.partition_disk(d1::PartitionDiskRequest { disk_number: n })
                .await,
            &[&pid],
        );
    }
    refused(
        "SetDiskState(offline) through B",
        dc.set_disk_state(d1::SetDiskStateRequest {
            disk_number: b.disk_number(),
            is_online: false,
        })
        .await,
        &[&pid, &a.name()],
    );
    drop(holder);
    assert_eq!(a.fingerprint(), before, "the application's data changed");
}

/// A process maps the disk `MAP_SHARED` and closes its descriptor: only `/proc/PID/maps`
/// names it (the application here is a python3 script). PartitionDisk and FormatVolume wrote over the mapped data.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_mapped_by_a_process_without_a_descriptor_is_in_use() {
    mapped_without_a_descriptor(&[]).await;
}

async fn mapped_without_a_descriptor(flags: &[&str]) {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(flags);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "mapped", 64).unwrap();
    let vol = partition_one(&mut dc, &mut vc, l.disk_number()).await;
    raw_data(&l);
    let before = l.fingerprint();
    let Some(mapper) = map_and_close(&l.dev) else {
        return;
    };
    let fds = std::fs::read_dir(format!("/proc/{}/fd", mapper.0.id()))
        .unwrap()
        .flatten()
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.file_type().is_block_device()))
        .count();
    assert_eq!(fds, 0, "the mapper must hold the disk by its mapping alone");
    let me = format!("{} (python3)", mapper.0.id());
    refused(
        "PartitionDisk of a mapped disk",
        dc.partition_disk(d1::PartitionDiskRequest {
            disk_number: l.disk_number(),
        })
        .await,
        &[&me],
    );
    refused(
        "FormatVolume of a mapped disk",
        vc.format_volume(v1::FormatVolumeRequest { volume_id: vol })
            .await,
        &[&me],
    );
    drop(mapper);
    assert_eq!(l.fingerprint(), before, "the mapped data changed");
}

/// The same users found by the `/proc` pass: `--in-use-scan proc`, and what the daemon does
/// where the kernel's task iterators are not offered (no BTF, no CAP_BPF, another PID
/// namespace). The tests above use the iterators wherever this machine offers them.
#[tokio::test(flavor = "multi_thread")]
async fn the_proc_pass_finds_the_same_users() {
    let proc = ["--in-use-scan=proc"];
    held_open_through_another_path(&proc).await;
    mapped_without_a_descriptor(&proc).await;
    backing_file_in_use(&proc).await;
}

/// The application: maps the first MiB of `path` shared (mmap(2) itself: Python's mmap module
/// keeps a duplicate descriptor), closes the descriptor, then waits; `None` (the test skipped)
/// without python3.
fn map_and_close(path: &Path) -> Option<Holder> {
    let script = format!(
        "import ctypes, os, time\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         libc.mmap.restype = ctypes.c_void_p\n\
         libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n\
         fd = os.open('{}', os.O_RDWR)\n\
         m = libc.mmap(None, 1 << 20, 3, 1, fd, 0)\n\
         assert m not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()\n\
         os.close(fd)\n\
         print('mapped', flush=True)\n\
         time.sleep(600)\n",
        path.display()
    );
    let Ok(child) = Command::new("python3")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("SKIPPED: python3 (the mapping application) is not installed");
        return None;
    };
    let mut mapper = Holder(child);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(mapper.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "mapped");
    Some(mapper)
}

/// Processes that write the loop disk's backing image rather than the loop device: one holds
/// the file open, another maps it and closes its descriptor. What they write there is what the
/// loop's readers read, so each is a user of the storage: PartitionDisk and FormatVolume
/// through the loop are refused naming it, and not a byte changes. (The rule once looked at
/// descriptors and mappings of the devices only.)
#[tokio::test(flavor = "multi_thread")]
async fn a_process_using_the_loops_backing_file_is_a_user_of_the_disk() {
    backing_file_in_use(&[]).await;
}

async fn backing_file_in_use(flags: &[&str]) {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(flags);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "backing", 64).unwrap();
    let vol = partition_one(&mut dc, &mut vc, l.disk_number()).await;
    raw_data(&l);
    let before = l.fingerprint();
    let holder = Holder::hold(&l.file);
    let held_by = format!("{} (sleep)", holder.0.id());
    let Some(mapper) = map_and_close(&l.file) else {
        return;
    };
    let mapped_by = format!("{} (python3)", mapper.0.id());
    for (who, user) in [("held", Some(holder)), ("mapped", None)] {
        let name = if user.is_some() { &held_by } else { &mapped_by };
        refused(
            &format!("PartitionDisk of a loop whose backing file is {who}"),
            dc.partition_disk(d1::PartitionDiskRequest {
                disk_number: l.disk_number(),
            })
            .await,
            &[name],
        );
        refused(
            &format!("FormatVolume on a loop whose backing file is {who}"),
            vc.format_volume(v1::FormatVolumeRequest {
                volume_id: vol.clone(),
            })
            .await,
            &[name],
        );
        // The holder goes; the mapper alone must still be seen.
        drop(user);
    }
    drop(mapper);
    assert_eq!(l.fingerprint(), before, "the application's data changed");
}

/// A device node of `l` made with mknod(2) in `dir` (what a container's `/dev` holds).
fn node_of(l: &LoopDisk, dir: &Path) -> String {
    let dev = std::fs::read_to_string(format!("/sys/block/{}/dev", l.name())).unwrap();
    let (major, minor) = dev.trim().split_once(':').unwrap();
    let node = dir.join("node");
    run("mknod", &[&node.display().to_string(), "b", major, minor]);
    assert!(
        std::fs::metadata(&node)
            .unwrap()
            .file_type()
            .is_block_device()
    );
    node.display().to_string()
}

/// Asserts that PartitionDisk and FormatVolume of `l` are refused naming `mapping`, with the
/// data intact.
async fn refused_under(d: &Daemon, l: &LoopDisk, vol: &str, mapping: &str) {
    let (mut dc, mut vc) = v1_clients(d).await;
    let before = l.fingerprint();
    refused(
        "PartitionDisk under the loop",
        dc.partition_disk(d1::PartitionDiskRequest {
            disk_number: l.disk_number(),
        })
        .await,
        &[mapping],
    );
    refused(
        "FormatVolume under the loop",
        vc.format_volume(v1::FormatVolumeRequest {
            volume_id: vol.into(),
        })
        .await,
        &[mapping],
    );
    assert_eq!(l.fingerprint(), before, "the data under the loop changed");
}

/// A loop device set up over a node of the disk that was then deleted (`backing_file` reads
/// `... (deleted)`), held open by a process: looking the backing path up again finds
/// nothing, and the disk was written. What backs a loop is asked of the kernel instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_loop_over_a_deleted_node_of_the_disk_is_in_use() {
    if !can_use_loop_devices() {
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "under-deleted", 64).unwrap();
    let vol = partition_one(&mut dc, &mut vc, l.disk_number()).await;
    let nodes = d.dir.path().join("nodes");
    std::fs::create_dir(&nodes).unwrap();
    let node = node_of(&l, &nodes);
    let out = Command::new("losetup")
        .args(["-f", "--show", &node])
        .output()
        .unwrap();
    assert!(out.status.success(), "losetup: {out:?}");
    let mapping = Mapping(String::from_utf8_lossy(&out.stdout).trim().to_string());
    std::fs::remove_file(&node).unwrap();
    let _holder = Holder::hold(Path::new(&mapping.0));
    let name = mapping.0.trim_start_matches("/dev/").to_string();
    refused_under(&d, &l, &vol, &name).await;
}

/// A loop device set up from another mount namespace (as a container's `/dev` is), over a
/// node only that namespace sees: the backing path names nothing here.
#[tokio::test(flavor = "multi_thread")]
async fn a_loop_set_up_in_another_mount_namespace_is_in_use() {
    if !can_use_loop_devices() {
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        eprintln!("SKIPPED: unshare(1) is not installed");
        return;
    }
    let d = Daemon::start(&[]);
    let (mut dc, mut vc) = v1_clients(&d).await;
    let l = LoopDisk::new(d.dir.path(), "under-ns", 64).unwrap();
    let vol = partition_one(&mut dc, &mut vc, l.disk_number()).await;
    let dev = std::fs::read_to_string(format!("/sys/block/{}/dev", l.name())).unwrap();
    let (major, minor) = dev.trim().split_once(':').unwrap();
    let ns_dev = d.dir.path().join("ns-dev");
    std::fs::create_dir(&ns_dev).unwrap();
    let ns = ns_dev.display().to_string();
    // In a private mount namespace: a tmpfs over ns-dev, a node in it, a loop over the node.
    let script = format!(
        "mount --make-rprivate / && mount -t tmpfs tmpfs {ns} && mknod {ns}/disk b {major} {minor} && losetup -f --show {ns}/disk"
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "unshare: {out:?}");
    let mapping = Mapping(String::from_utf8_lossy(&out.stdout).trim().to_string());
    assert!(
        !ns_dev.join("disk").exists(),
        "the node must be the other namespace's alone"
    );
    let name = mapping.0.trim_start_matches("/dev/").to_string();
    refused_under(&d, &l, &vol, &name).await;
}

/// A container's process holds the disk: in PID and mount namespaces of its own, through a
/// device node that exists only in its private tmpfs (as a container's `/dev` is). Neither its
/// PID nor its node's path means anything on the host; it holds the disk all the same.
/// Refused through both ways of finding processes, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_in_a_container_holding_the_disk_by_its_own_node_is_in_use() {
    if !can_use_loop_devices() {
        return;
    }
    for flags in [&[][..], &["--in-use-scan=proc"][..]] {
        let d = Daemon::start(flags);
        let (mut dc, _) = v1_clients(&d).await;
        let l = LoopDisk::new(d.dir.path(), "contained", 64).unwrap();
        raw_data(&l);
        let before = l.fingerprint();
        let rdev = std::os::unix::fs::MetadataExt::rdev(&std::fs::metadata(&l.dev).unwrap());
        let (major, minor) = (rdev >> 8 & 0xfff, (rdev & 0xff) | (rdev >> 12 & 0xfff00));
        let script = format!(
            "mount -t tmpfs none /mnt && mknod /mnt/disk b {major} {minor} && \
             exec 3</mnt/disk && echo held && exec sleep 600"
        );
        let Ok(mut child) = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc"])
            .args(["sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("SKIPPED: unshare (util-linux) is not installed");
            return;
        };
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let holder = Holder(child);
        assert_eq!(line.trim(), "held", "the contained holder did not start");
        refused(
            &format!("PartitionDisk of a disk a container holds ({flags:?})"),
            dc.partition_disk(d1::PartitionDiskRequest {
                disk_number: l.disk_number(),
            })
            .await,
            &["(sleep)"],
        );
        drop(holder);
        assert_eq!(
            l.fingerprint(),
            before,
            "the contained process's data changed"
        );
    }
}
