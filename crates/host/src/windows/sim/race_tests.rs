//! Confinement while a client races the path, over the simulated Windows: a directory below the
//! kubelet path and a link to a directory outside it are exchanged before every seam call the host
//! makes, while every path-taking filesystem RPC, MountVolume, UnmountVolume,
//! GetVolumeIDFromTargetPath and the SMB local link run. Nothing outside may be created, removed,
//! emptied, mounted on or revealed.

use super::tests::{machine, partitioned};
use super::*;
use crate::windows::filesystem::WindowsFilesystemHost;
use crate::windows::os::files::FileApi;
use csi_proxy_core::filesystem::FilesystemService;
use csi_proxy_core::paths::{PathPolicy, PathStyle};
use csi_proxy_core::volume::VolumeService;
use std::sync::Arc;

const A: &str = r"C:\var\lib\kubelet\plugins\racer\a";
const SWAP: &str = r"C:\var\lib\kubelet\plugins\racer\a.swap";
const OUTSIDE: &str = r"C:\outside";

/// The sim with `a` (a directory) and `a.swap` (a link to `C:\outside`) ready to be exchanged,
/// and the filesystem service over the Windows host.
fn racing(sim: &Arc<SimWindows>) -> FilesystemService {
    sim.mkdir(A);
    sim.mkdir(OUTSIDE);
    sim.add_dir_link(SWAP, OUTSIDE);
    let policy = PathPolicy::new(PathStyle::Windows, r"C:\var\lib\kubelet", &[]).unwrap();
    FilesystemService::new(
        Arc::new(WindowsFilesystemHost::with_os(sim.clone())),
        Arc::new(policy),
    )
}

fn u(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

/// The adversary bites: checking a path as a string and then acting on the same string (the
/// old resolution) creates directories outside.
#[test]
fn check_then_act_on_a_string_escapes_when_a_component_is_swapped() {
    let m = machine();
    let _fs = racing(&m.sim);
    m.sim.swap_before_calls(A, SWAP);
    let mut escapes = 0;
    for i in 0..100 {
        let p = format!(r"{A}\c{i}");
        // The old host: GetFileAttributesW says `a` is a plain directory, then CreateDirectoryW.
        let checked = m.sim.file_attributes(&u(A)).is_ok_and(|a| a & 0x400 == 0);
        if checked && m.sim.create_directory(&u(&p)).is_ok() {
            escapes += usize::from(m.sim.entry_exists(&format!(r"{OUTSIDE}\c{i}")));
        }
    }
    let swaps = m.sim.stop_swapping();
    assert!(swaps > 50, "{swaps}");
    assert!(escapes > 10, "the race never reached outside ({escapes})");
}

#[test]
fn filesystem_rpcs_never_act_outside_while_a_component_is_swapped() {
    let m = machine();
    let fs = racing(&m.sim);
    let sim = &m.sim;
    sim.mkdir(&format!(r"{OUTSIDE}\victim"));
    sim.add_file(&format!(r"{OUTSIDE}\victim\keep"));
    sim.mkdir(&format!(r"{OUTSIDE}\full"));
    sim.add_file(&format!(r"{OUTSIDE}\full\keep"));
    sim.add_file(&format!(r"{OUTSIDE}\secret"));
    sim.mkdir(r"C:\var\lib\kubelet\source");
    sim.swap_before_calls(A, SWAP);
    let (mut revealed, mut calls) = (0, 0);
    for i in 0..50 {
        let _ = fs.mkdir(&format!(r"{A}\m{i}\x"));
        let _ = fs.create_symlink(r"C:\var\lib\kubelet\source", &format!(r"{A}\l{i}"));
        let _ = fs.rmdir(&format!(r"{A}\victim"), true);
        let _ = fs.rmdir(&format!(r"{A}\full"), false);
        let _ = fs.rmdir_contents(&format!(r"{A}\full"));
        revealed += usize::from(fs.path_exists(&format!(r"{A}\secret")).unwrap_or(false));
        revealed += usize::from(fs.is_symlink(&format!(r"{A}\secret")).is_ok());
        calls += 7;
    }
    let swaps = sim.stop_swapping();
    eprintln!("{calls} calls, {swaps} exchanges before seam calls, {revealed} revealed");
    assert!(swaps > 100, "the adversary barely ran: {swaps}");
    assert!(calls >= 350);
    let outside: Vec<String> = (0..50)
        .flat_map(|i| [format!(r"{OUTSIDE}\m{i}"), format!(r"{OUTSIDE}\l{i}")])
        .filter(|p| sim.entry_exists(p))
        .collect();
    assert!(outside.is_empty(), "made outside: {outside:?}");
    assert!(sim.entry_exists(&format!(r"{OUTSIDE}\victim\keep")));
    assert!(sim.entry_exists(&format!(r"{OUTSIDE}\full\keep")));
    assert_eq!(
        revealed, 0,
        "PathExists/IsSymlink answered about the outside"
    );
}

#[test]
fn mount_volume_never_mounts_outside_while_a_component_is_swapped() {
    let m = machine();
    let (_, id) = partitioned(&m);
    let fs = racing(&m.sim);
    let svc = VolumeService::new(Arc::new(m.volume.clone()), fs);
    svc.format_volume(&id).unwrap();
    m.sim.mkdir(&format!(r"{A}\mnt"));
    m.sim.mkdir(&format!(r"{OUTSIDE}\mnt"));
    m.sim.swap_before_calls(A, SWAP);
    for _ in 0..50 {
        if svc.mount_volume(&id, &format!(r"{A}\mnt")).is_ok() {
            let _ = svc.unmount_volume(&id, &format!(r"{A}\mnt"));
        }
        let outside: Vec<String> = m
            .sim
            .mount_points()
            .into_iter()
            .map(|(at, _)| at)
            .filter(|at| at.to_ascii_lowercase().starts_with(r"c:\outside"))
            .collect();
        assert!(
            outside.is_empty(),
            "MountVolume mounted outside: {outside:?}"
        );
    }
    assert!(m.sim.stop_swapping() > 20);
}

/// The volume mounted on `C:\outside\held` and `C:\outside\probe` too, where the swapped link
/// leads, and nothing mounted on `a\held` or `a\probe` inside.
fn mounted_outside(m: &super::tests::Machine) -> (String, VolumeService) {
    use crate::windows::os::Win32;
    let (_, id) = partitioned(m);
    let fs = racing(&m.sim);
    let svc = VolumeService::new(Arc::new(m.volume.clone()), fs);
    svc.format_volume(&id).unwrap();
    for dir in ["held", "probe"] {
        m.sim.mkdir(&format!(r"{A}\{dir}"));
        m.sim.mkdir(&format!(r"{OUTSIDE}\{dir}"));
        m.sim
            .set_volume_mount_point(&format!(r"{OUTSIDE}\{dir}\"), &id)
            .unwrap();
    }
    (id, svc)
}

fn mounted_outside_at(m: &super::tests::Machine, dir: &str) -> bool {
    let at = format!(r"{OUTSIDE}\{dir}").to_ascii_lowercase();
    m.sim
        .mount_points()
        .iter()
        .any(|(p, _)| p.trim_end_matches('\\').to_ascii_lowercase() == at)
}

#[test]
fn unmount_volume_never_unmounts_outside_while_a_component_is_swapped() {
    let m = machine();
    let (id, svc) = mounted_outside(&m);
    m.sim.swap_before_calls(A, SWAP);
    for _ in 0..50 {
        let _ = svc.unmount_volume(&id, &format!(r"{A}\held"));
        assert!(
            mounted_outside_at(&m, "held"),
            "UnmountVolume removed a mount point outside the kubelet path"
        );
    }
    assert!(m.sim.stop_swapping() > 20);
}

#[test]
fn get_volume_id_never_reveals_outside_while_a_component_is_swapped() {
    let m = machine();
    let (_, svc) = mounted_outside(&m);
    m.sim.swap_before_calls(A, SWAP);
    for _ in 0..50 {
        let answer = svc.get_volume_id_from_target_path(&format!(r"{A}\probe"));
        assert!(
            answer.is_err(),
            "revealed the volume mounted outside: {answer:?}"
        );
    }
    assert!(m.sim.stop_swapping() > 20);
    assert!(mounted_outside_at(&m, "probe"));
}

/// NewSmbGlobalMapping's local link: the link is made in the directory held while the path
/// was checked, never where the swapped link leads.
#[test]
fn smb_local_link_is_never_made_outside_while_a_component_is_swapped() {
    use crate::windows::smb::WindowsSmbHost;
    use csi_proxy_core::smb::{NewSmbGlobalMappingRequest, SmbService};
    let m = machine();
    let fs = racing(&m.sim);
    m.sim.add_share(r"\\server\share", Some(("user", "pass")));
    let smb = SmbService::new(Arc::new(WindowsSmbHost::with_os(m.sim.clone())), fs, false);
    m.sim.swap_before_calls(A, SWAP);
    let mut made = 0;
    for i in 0..50 {
        let r = smb.new_smb_global_mapping(&NewSmbGlobalMappingRequest {
            remote_path: format!(r"\\server\share\v{i}"),
            local_path: format!(r"{A}\s{i}"),
            username: "user".into(),
            password: "pass".to_string().into(),
        });
        made += usize::from(r.is_ok());
    }
    let swaps = m.sim.stop_swapping();
    eprintln!("{made} of 50 links made, {swaps} exchanges before seam calls");
    assert!(swaps > 20, "the adversary barely ran: {swaps}");
    let outside: Vec<String> = (0..50)
        .map(|i| format!(r"{OUTSIDE}\s{i}"))
        .filter(|p| m.sim.entry_exists(p))
        .collect();
    assert!(outside.is_empty(), "links made outside: {outside:?}");
}

/// IsSymlink answers about the link, never about whether a path outside the roots exists: links
/// below the kubelet path to an existing and to an absent entry in a directory outside answer alike
/// (absolute and relative), while links inside keep upstream's answer (the direct target's
/// existence).
#[test]
fn is_symlink_never_tells_whether_a_path_outside_the_roots_exists() {
    let m = machine();
    let fs = racing(&m.sim);
    m.sim.mkdir(r"C:\outside\secret\present");
    let up = r"..\..\..\..\..\..\outside\secret";
    for (form, present, absent) in [
        (
            "abs",
            r"C:\outside\secret\present".to_string(),
            r"C:\outside\secret\absent".to_string(),
        ),
        ("rel", format!(r"{up}\present"), format!(r"{up}\absent")),
    ] {
        let (p, a) = (format!(r"{A}\{form}-p"), format!(r"{A}\{form}-a"));
        m.sim.add_dir_link(&p, &present);
        m.sim.add_dir_link(&a, &absent);
        let answer = |path: &str| fs.is_symlink(path).map_err(|e| e.kind());
        assert_eq!(answer(&p), answer(&a), "{form}: the answers differ");
        assert_eq!(answer(&p), Ok(true), "{form}: it is a link");
    }
    m.sim.mkdir(&format!(r"{A}\stage"));
    m.sim
        .add_dir_link(&format!(r"{A}\publish"), &format!(r"{A}\stage"));
    m.sim
        .add_dir_link(&format!(r"{A}\dangling"), &format!(r"{A}\gone"));
    assert!(fs.is_symlink(&format!(r"{A}\publish")).unwrap());
    assert!(!fs.is_symlink(&format!(r"{A}\dangling")).unwrap());
}
