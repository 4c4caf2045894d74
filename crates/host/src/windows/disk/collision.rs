//! A disk copy attached beside its source (a snapshot or clone restored on the same node)
//! carries the source's unique IDs: the GPT disk GUID and partition GUIDs, or the MBR
//! signature. Windows keeps such a disk offline (VDS_DISK_OFFLINE_REASON,
//! VDSDiskOfflineReasonCollision: "its disk signature is the same as that of another disk that
//! is online"; for GPT, its disk identifier, or one of its partitions' GUIDs). Clearing
//! `DISK_ATTRIBUTE_OFFLINE` does nothing about the collision, so SetDiskState(online) refuses
//! it rather than surface two volumes with one unique ID; giving the copy new IDs rewrites a
//! disk the caller did not ask to change, and is left to the administrator.

use super::{disk_numbers, disk_path, read_layout};
use crate::windows::os::{self, Win32, ioctl};
use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_formats::windows_buffers::layout::{Layout, STYLE_GPT, STYLE_MBR};

/// The unique IDs of a layout, each named as a message shows it.
fn unique_ids(l: &Layout) -> Vec<String> {
    let mut ids = Vec::new();
    if l.style == STYLE_MBR && l.signature != 0 {
        ids.push(format!("MBR disk signature {:08X}", l.signature));
    }
    if l.style == STYLE_GPT {
        if !l.disk_id.is_nil() {
            ids.push(format!("GPT disk GUID {{{}}}", l.disk_id));
        }
        ids.extend(
            l.partitions
                .iter()
                .filter_map(|p| p.gpt_id())
                .filter(|id| !id.is_nil())
                .map(|id| format!("GPT partition GUID {{{id}}}")),
        );
    }
    ids
}

/// The layout of online disk `n`, or `None` when it is offline, has no media or is gone: such
/// a disk surfaces no volume, so nothing can collide with it.
fn online_layout(os: &dyn Win32, op: &str, n: u32) -> Result<Option<Layout>> {
    let h = match os::open_query(os, &disk_path(n)) {
        Ok(h) => h,
        Err(e) if e.kind() == Kind::NotFound || e.no_media() => return Ok(None),
        Err(e) => return Err(os::os_error(op, format!("disk {n}"), &e, &[])),
    };
    let attrs = match ioctl(&h, io::DISK_GET_DISK_ATTRIBUTES, &[], 16) {
        Ok(out) => io::le_u64(&out, 8).unwrap_or(0),
        Err(e) if e.kind() == Kind::NotFound || e.no_media() => return Ok(None),
        Err(e) => return Err(os::os_error(op, format!("disk {n}"), &e, &[])),
    };
    if attrs & io::DISK_ATTRIBUTE_OFFLINE != 0 {
        return Ok(None);
    }
    match read_layout(op, n, &h) {
        Ok((l, _)) => Ok(Some(l)),
        Err(e) if e.kind() == Kind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// FAILED_PRECONDITION when disk `disk`, whose layout is `l`, shares a unique ID with another
/// online disk: bringing it online would surface two volumes with one unique ID. Fails closed:
/// a disk whose layout cannot be read is an error, not "no collision".
pub(super) fn refuse_collision(os: &dyn Win32, op: &str, disk: u32, l: &Layout) -> Result<()> {
    let mine = unique_ids(l);
    if mine.is_empty() {
        return Ok(());
    }
    for n in disk_numbers(os, op)?.into_iter().filter(|n| *n != disk) {
        let Some(other) = online_layout(os, op, n)? else {
            continue;
        };
        let theirs = unique_ids(&other);
        if let Some(id) = mine.iter().find(|id| theirs.contains(id)) {
            return Err(Error::new(
                Kind::FailedPrecondition,
                op,
                format!("disk {disk}"),
                format!(
                    "the disk has the same {id} as disk {n}, which is online (a copy of it: a \
                     snapshot or clone attached beside its source); Windows keeps such a disk \
                     offline for the collision and bringing it online would surface two volumes \
                     with one unique ID: take disk {n} offline or detach it, or give this disk \
                     new IDs first"
                ),
            ));
        }
    }
    Ok(())
}
