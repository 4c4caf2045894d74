//! ResizeVolume on Linux: grow the GPT or primary MBR entry (never shrink, never repair), tell
//! the kernel, grow the filesystem.

use super::*;
use crate::linux::disk::Ends;
use crate::linux::state_dir;
use csi_proxy_core::volume::rules;

impl LinuxVolumeHost {
    pub(super) fn resize(&self, id: &str, target: ResizeTarget) -> Result<()> {
        const OP: &str = "ResizeVolume";
        let vol = self.resolve_partition(OP, id, "has no partition to grow")?;
        let object = shown(id);
        // What the partition holds is read first: a filesystem this host cannot grow (or whose
        // size it cannot read) leaves the partition untouched, instead of a grown partition
        // under an ungrown filesystem and an OK that did nothing.
        let (sig, buf) = self.probe(OP, &vol)?;
        // A filesystem at the start (what the tail holds has no mount type).
        if let Some(head) = sig.as_ref().filter(|s| s.mount_type.is_some()) {
            self.refuse_member_at_end(OP, &vol, head, &buf)?;
        }
        // A filesystem this host cannot grow refuses only a call that must grow (decided with
        // the partition's facts below): one with nothing to grow succeeds on any volume.
        let (fs_bytes, fs_refusal) = match &sig {
            None => (None, None),
            Some(sig) => {
                match signatures::filesystem_bytes(&buf).filter(|_| GROWABLE.contains(&sig.kind)) {
                    Some(n) => (Some(n), None),
                    None => (
                        None,
                        Some(format!(
                            "the volume holds {}; this host grows only ext2/3/4, xfs and btrfs \
                         filesystems whose size it reads from their superblock",
                            sig.kind
                        )),
                    ),
                }
            }
        };
        let disk = &vol.disk;
        // Not O_EXCL: the partition may be mounted (online growth); only the table and the
        // partition's length change, never its start.
        let file = Fd::open(
            &self.os,
            &block::node(&disk.name),
            Open::Write { exclusive: false },
        )
        .map_err(|e| io_err(OP, disk, "open", &e))?;
        vol.unchanged(OP)?;
        if file.diskseq().ok() != Some(u64::from(disk.number)) {
            return Err(Error::new(
                Kind::NotFound,
                OP,
                &object,
                format!(
                    "disk {} was detached or replaced while the request ran",
                    disk.number
                ),
            ));
        }
        let ends = crate::linux::disk::read_ends(&self.os, OP, disk, &file)?;
        let (sector, total) = (ends.sector, ends.total);
        let entry = self.entry_to_grow(OP, &vol, &ends)?;
        let (first_lba, current) = (entry.first_lba, entry.current);
        let steps = rules::resize_steps(
            OP,
            &object,
            rules::ResizeFacts {
                current,
                maximum: entry.maximum,
                fs_bytes,
                sector,
                slack: FS_SLACK,
                refusal: fs_refusal.or(entry.refusal),
            },
            target,
        )?;
        let mut table_len = current;
        if steps.grow_partition > 0 {
            let new_last = first_lba + (current + steps.grow_partition) / sector - 1;
            match entry.table {
                Table::Gpt(mut grown) => {
                    grown
                        .grow_partition(vol.part, new_last)
                        .map_err(|e| refused(OP, disk, e))?;
                    crate::linux::disk::write_gpt(OP, disk, &file, &grown, total)?;
                }
                Table::Mbr(lba0) => {
                    // mbr_max_sectors kept the length within 32 bits.
                    let sectors = u32::try_from(new_last - first_lba + 1)
                        .map_err(|e| refused(OP, disk, e))?;
                    let grown = gpt::mbr_with_length(&lba0, vol.part, sectors);
                    crate::linux::disk::write_ordered(&file, &[(0, grown)])
                        .map_err(|e| io_err(OP, disk, "write the partition table", &e))?;
                }
            }
            table_len = (new_last - first_lba + 1) * sector;
            tracing::info!(
                volume = id,
                from = current,
                to = table_len,
                "partition grown"
            );
        }
        // The kernel's length is brought to the table's: also after a crash between the two.
        // Only ever up: a kernel partition longer than the table's may hold a filesystem that
        // long (another tool grew it), and BLKPG would cut it off under a mounted filesystem.
        let kernel_len = block::partitions(&self.os, disk)
            .into_iter()
            .find(|p| p.number == vol.part)
            .map_or(0, |p| p.size);
        if kernel_len > table_len {
            return Err(refused(
                OP,
                disk,
                format!(
                    "the kernel's partition {} is {kernel_len} bytes, longer than the table's {table_len}; \
                     a partition is never shrunk",
                    vol.part
                ),
            ));
        }
        if kernel_len != table_len {
            file.blkpg(Blkpg::Resize, vol.part, first_lba * sector, table_len)
                .map_err(|e| {
                    io_err(
                        OP,
                        disk,
                        "tell the kernel the new partition size (BLKPG)",
                        &e,
                    )
                })?;
        }
        // The filesystem follows the partition (the kernel's length is the table's now).
        let Some(sig) = sig.filter(|_| steps.extend_filesystem) else {
            return Ok(()); // no filesystem, or one that already fills the partition
        };
        let table_now = read_mountinfo(&self.os, OP)?;
        let mounted = super::mounted::mounted_root(&self.os, OP, &vol, &table_now)?;
        vol.unchanged(OP)?;
        self.grow_filesystem(OP, &vol, &sig, &buf, mounted.as_ref())?;
        tracing::info!(volume = id, fs = sig.kind, "filesystem grown");
        Ok(())
    }

    /// The partition's entry as its table has it, checked to be the volume resolved (a table
    /// rewritten since would name another partition), with how far it can grow in place. A
    /// GPT's entry, or a primary MBR entry (grown as Windows does); a logical MBR partition has
    /// nothing this host grows, and says why only when it would have to grow.
    fn entry_to_grow(&self, op: &str, vol: &Volume, ends: &Ends) -> Result<Entry> {
        let (disk, object) = (&vol.disk, shown(&vol.id));
        let (sector, total) = (ends.sector, ends.total);
        let changed = |now: String| {
            Error::new(
                Kind::NotFound,
                op,
                &object,
                format!(
                    "partition {} of the table is now a different partition ({now})",
                    vol.part
                ),
            )
        };
        let mbr = gpt::mbr_partitions(&ends.head);
        let gpt_error = match partition_plan::table_to_grow(&ends.head, &ends.tail, sector, total) {
            Ok(table) => {
                let part = table
                    .partitions()
                    .into_iter()
                    .find(|p| p.number == vol.part)
                    .ok_or_else(|| {
                        Error::new(
                            Kind::NotFound,
                            op,
                            &object,
                            "the partition is not in the table",
                        )
                    })?;
                // Checked by its unique GUID, not only its number.
                if part.unique_guid.to_string() != vol.uuid {
                    return Err(changed(part.unique_guid.to_string()));
                }
                let mut grown = table.clone();
                grown
                    .relocate_end(total)
                    .map_err(|e| refused(op, disk, e))?;
                let max_last = grown
                    .max_last_lba(vol.part)
                    .map_err(|e| refused(op, disk, e))?;
                return Ok(Entry {
                    first_lba: part.first_lba,
                    current: part.sectors() * sector,
                    maximum: (max_last - part.first_lba + 1) * sector,
                    refusal: None,
                    table: Table::Gpt(grown),
                });
            }
            // A classic MBR (no protective 0xEE entry) is grown below; anything else is refused.
            Err(why) if mbr.is_empty() || mbr.iter().any(|p| p.kind == 0xEE) => {
                return Err(refused(op, disk, why));
            }
            Err(why) => why,
        };
        if let Some(why) = gpt::mbr_problem(&mbr, total) {
            return Err(refused(op, disk, why));
        }
        let name = format!(
            "{:08x}-{:02x}",
            gpt::mbr_disk_signature(&ends.head),
            vol.part
        );
        if name != vol.uuid {
            return Err(changed(name));
        }
        let lba0 = ends.head[..sector as usize].to_vec();
        match mbr.iter().find(|p| p.number == vol.part) {
            Some(p) => {
                let max = gpt::mbr_max_sectors(&mbr, p.number, total).unwrap_or(0);
                Ok(Entry {
                    first_lba: u64::from(p.first_lba),
                    current: u64::from(p.sectors) * sector,
                    maximum: max * sector,
                    refusal: gpt::mbr_not_growable(p),
                    table: Table::Mbr(lba0),
                })
            }
            // A logical partition (5 and up) lives in the extended partition's chain, which
            // this host does not write: its length is the kernel's, and it grows no further.
            None => {
                let kernel = block::partitions(&self.os, disk)
                    .into_iter()
                    .find(|p| p.number == vol.part)
                    .ok_or_else(|| refused(op, disk, gpt_error))?;
                Ok(Entry {
                    first_lba: kernel.start / sector,
                    current: kernel.size,
                    maximum: kernel.size,
                    refusal: Some("it is a logical partition inside an extended partition".into()),
                    table: Table::Mbr(lba0),
                })
            }
        }
    }

    /// Grows the filesystem to fill its (already grown) partition. A mounted one, and an
    /// unmounted xfs or btrfs (both grow only while mounted, here on a private temporary mount),
    /// grow through the kernel's own ioctl on the mount's root held open ([`grow_mounted`]): no
    /// tool is given a path, since xfs_growfs and resize2fs look the mount point up again in
    /// the mount table and open it by its path, where a client's FIFO swapped in would block
    /// them with the disk's lock held. Only an unmounted ext2/3/4 runs a tool, resize2fs on
    /// the device node the request holds checked.
    fn grow_filesystem(
        &self,
        op: &str,
        vol: &Volume,
        sig: &Signature,
        buf: &[u8],
        mounted_at: Option<&Fd>,
    ) -> Result<()> {
        match (sig.kind, mounted_at) {
            ("ext2" | "ext3" | "ext4" | "xfs" | "btrfs", Some(root)) => {
                grow_mounted(op, vol, sig, buf, root)
            }
            ("ext2" | "ext3" | "ext4", None) => self.resize2fs_offline(op, vol),
            ("xfs" | "btrfs", None) => self
                .with_temporary_mount(op, vol, sig, |root| grow_mounted(op, vol, sig, buf, root)),
            (other, _) => Err(Error::new(
                Kind::FailedPrecondition,
                op,
                shown(&vol.id),
                format!("the partition was grown but this host cannot grow a {other} filesystem"),
            )),
        }
    }

    /// resize2fs on the unmounted volume's device node, after `e2fsck -f` when it asks for it.
    fn resize2fs_offline(&self, op: &str, vol: &Volume) -> Result<()> {
        let object = shown(&vol.id);
        let node = vol.node().to_string_lossy().into_owned();
        let os = &*self.os;
        // A resize2fs of ours that was killed (with the daemon, or by a signal) can leave what
        // `e2fsck -p` will not repair (an invalid resize inode); a marker in the state dir,
        // there only while resize2fs runs, says the damage is our own unfinished work, which
        // `e2fsck -f -y` then finishes, as resize2fs's manual says to. Best effort: without
        // the marker the answer is as before.
        let marker = format!("resizing-{}", vol.id);
        let ours = matches!(state_dir::read_file(&self.state_dir, &marker), Ok(Some(_)));
        let mark = || {
            let _ = state_dir::write_file(&self.state_dir, &marker, b"", 0o600);
        };
        let unmark = |r: &std::result::Result<String, Result<tool::Failure>>| {
            // A killed resize2fs (no exit code) keeps the marker.
            if !matches!(r, Err(Ok(f)) if f.code.is_none()) {
                let _ = state_dir::remove_file(&self.state_dir, &marker);
            }
        };
        mark();
        let mut r = tool::run_on(os, op, &object, "resize2fs", &[&node]);
        unmark(&r);
        if let Err(Ok(f)) = &r
            && f.output.contains("e2fsck -f")
        {
            // resize2fs wants a freshly checked filesystem when it is offline.
            let mut fsck = tool::run_on(os, op, &object, "e2fsck", &["-f", "-p", &node]);
            if ours && matches!(&fsck, Err(Ok(f)) if f.code == Some(4)) {
                tracing::warn!(
                    volume = vol.id,
                    "finishing a resize2fs of ours that was killed: e2fsck -f -y"
                );
                fsck = tool::run_on(os, op, &object, "e2fsck", &["-f", "-y", &node]);
            }
            match fsck {
                Ok(_) => {}
                Err(Ok(f)) if f.code == Some(1) => {} // errors corrected
                Err(Ok(f)) if f.output.contains("Device or resource busy") => {
                    return Err(f.error(op, &object, "e2fsck", &[]));
                }
                Err(Ok(f)) => {
                    return Err(Error::new(
                        Kind::FailedPrecondition,
                        op,
                        &object,
                        format!(
                            "e2fsck found problems it could not fix (exit {:?}): {}",
                            f.code, f.output
                        ),
                    ));
                }
                Err(Err(e)) => return Err(e),
            }
            mark();
            r = tool::run_on(os, op, &object, "resize2fs", &[&node]);
            unmark(&r);
        }
        match r {
            Ok(_) => Ok(()),
            Err(Ok(f)) => Err(f.error(op, &object, "resize2fs", &[])),
            Err(Err(e)) => Err(e),
        }
    }

    /// Mounts the volume on a private directory for a tool that needs a mounted filesystem.
    fn with_temporary_mount<T>(
        &self,
        op: &str,
        vol: &Volume,
        sig: &Signature,
        f: impl FnOnce(&Fd) -> Result<T>,
    ) -> Result<T> {
        // Only the tool works in it: nothing on it is run, opened as a device or set-uid; the
        // type is named as for MountVolume.
        let clone = self.mount_as_clone(op, vol, sig)?;
        let how = mount_policy::plan(op, &shown(&vol.id), Some(sig), &[], true, clone)?;
        // Named by the whole volume ID, diskseq included: clones of one disk share their
        // PARTUUID and may grow at the same time, each on its own mount.
        let dir = self.state_dir.join("mnt").join(&vol.id);
        let err = |e: io::Error| {
            Error::io(op, shown(&vol.id), &e).context(format!("temporary mount {}", dir.display()))
        };
        self.make_mount_dir_private().map_err(err)?;
        self.os.create_dir_all(&dir, 0o777).map_err(err)?;
        (self.os)
            .mount(&vol.node(), At::Path(&dir), how.fs_type, how.flags)
            .map_err(err)?;
        // The private directory is the daemon's own (mode 0700): opened as itself, and closed
        // before the unmount, which it would keep busy.
        let r = Fd::open(&self.os, &dir, Open::DirNoFollow)
            .map_err(err)
            .and_then(|root| f(&root));
        let u = self.os.unmount(At::Path(&dir), false);
        let _ = self.os.remove_dir(&dir);
        u.map_err(err)?;
        r
    }
}

/// Grows the filesystem mounted at `root` (a mount of `vol`, opened and checked) to fill the
/// volume's device, through the filesystem's own grow ioctl on that descriptor: the kernel
/// does the work, in its transactions, on the mount held. `buf` is the volume's first bytes
/// (btrfs's superblock names the device's ID in its filesystem).
fn grow_mounted(op: &str, vol: &Volume, sig: &Signature, buf: &[u8], root: &Fd) -> Result<()> {
    let object = shown(&vol.id);
    let failed = |what: &str, e: io::Error| {
        Error::io(op, &object, &e).context(format!(
            "the partition was grown but the mounted {} filesystem was not ({what})",
            sig.kind
        ))
    };
    let len = vol
        .file
        .device_len()
        .map_err(|e| failed("the partition's new length", e))?;
    match sig.kind {
        "ext2" | "ext3" | "ext4" => {
            // statvfs(3)'s f_frsize is the ext block size the kernel counts the filesystem in.
            let block = root
                .statvfs()
                .map_err(|e| failed("its block size (statvfs)", e))?
                .block;
            if block == 0 {
                return Err(failed(
                    "its block size (statvfs)",
                    io::Error::other("statvfs reported a block size of 0"),
                ));
            }
            root.ext4_resize(len / block).map_err(|e| {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    Error::new(
                        Kind::PermissionDenied,
                        op,
                        &object,
                        "the partition was grown but the mounted ext4 filesystem could not be \
                         grown online (EXT4_IOC_RESIZE_FS needs CAP_SYS_RESOURCE, which this \
                         daemon lacks; unmount the volume and retry, or give the daemon \
                         CAP_SYS_RESOURCE)",
                    )
                } else {
                    failed("EXT4_IOC_RESIZE_FS", e)
                }
            })
        }
        "xfs" => {
            let geo = root
                .xfs_geometry()
                .map_err(|e| failed("XFS_IOC_FSGEOMETRY", e))?;
            let blocks = len / u64::from(geo.block_size.max(1));
            // As xfs_growfs: a data section already as long is left (the kernel would refuse
            // a shorter one).
            if blocks <= geo.data_blocks {
                return Ok(());
            }
            root.xfs_grow_data(blocks, geo.imaxpct)
                .map_err(|e| failed("XFS_IOC_FSGROWFSDATA", e))
        }
        "btrfs" => {
            let devid = signatures::btrfs_devid(buf).ok_or_else(|| {
                failed(
                    "its device ID",
                    io::Error::other("the btrfs superblock names no device ID"),
                )
            })?;
            root.btrfs_grow_device(devid)
                .map_err(|e| failed(&format!("BTRFS_IOC_RESIZE {devid}:max"), e))
        }
        other => Err(Error::new(
            Kind::FailedPrecondition,
            op,
            &object,
            format!("the partition was grown but this host cannot grow a {other} filesystem"),
        )),
    }
}

/// The partition ResizeVolume grows, as read from its table.
struct Entry {
    first_lba: u64,
    /// Its length in bytes.
    current: u64,
    /// The most bytes it can span in place.
    maximum: u64,
    /// Why it cannot grow at all, if it cannot.
    refusal: Option<String>,
    table: Table,
}

/// The table an [`Entry`] is written back to.
enum Table {
    /// The GPT, its end already relocated to the disk's.
    Gpt(Gpt),
    /// LBA 0 holding a classic MBR.
    Mbr(Vec<u8>),
}
