//! FormatVolume on Linux: refuse anything that holds data, record the intent, run mkfs.
//!
//! Three checks stand before mkfs: our own probe ([`signatures`], start and end of the volume),
//! libblkid's full probe (`blkid -p`, which knows every format util-linux knows, wherever it
//! keeps its superblock), and mkfs's own (mkfs.xfs refuses an existing signature unless forced).
//! mke2fs checks only when its input and output are a terminal, so for ext4 libblkid is the
//! last word. Force is given only when finishing a format of ours whose record is pending.

use super::*;

impl LinuxVolumeHost {
    pub(super) fn format(&self, id: &str) -> Result<()> {
        const OP: &str = "FormatVolume";
        let vol = self.resolve_partition(OP, id, "is never formatted; partition the disk")?;
        let object = shown(id);
        let table = read_mountinfo(OP)?;
        if let Some(m) = vol.mounts(&table).first() {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!(
                    "the volume is mounted at {:?}; refusing to format it",
                    m.mount_point
                ),
            ));
        }
        let (sig, _) = self.probe(OP, &vol)?;
        let intent = self.read_intent(&vol);
        if let Some(sig) = &sig {
            let ours = intent.as_ref().filter(|i| {
                sig.uuid
                    .is_some_and(|u| signatures::uuid_string(&u) == i.id)
            });
            match ours {
                Some(i) if i.done => return Ok(()), // formatted by an earlier call: idempotent
                Some(_) => tracing::warn!(
                    volume = id,
                    "an earlier FormatVolume was interrupted; formatting again"
                ),
                None => {
                    return Err(Error::new(
                        Kind::FailedPrecondition,
                        OP,
                        &object,
                        format!(
                            "the volume already holds {}{}; refusing to format over it",
                            sig.kind,
                            sig.uuid
                                .map(|u| format!(" (UUID {})", signatures::uuid_string(&u)))
                                .unwrap_or_default()
                        ),
                    ));
                }
            }
        }
        let fs_type = self.fs_type.name();
        // Our own format, started and not finished: its record is pending and the volume holds
        // nothing or the filesystem it was creating. Only then is mkfs forced.
        let pending = intent.as_ref().filter(|i| {
            !i.done
                && sig
                    .as_ref()
                    .is_none_or(|s| s.uuid.is_some_and(|u| signatures::uuid_string(&u) == i.id))
        });
        let uuid = match pending {
            Some(i) => i.id.clone(),
            None => {
                signatures::uuid_string(&block::random16().map_err(|e| Error::io(OP, &object, &e))?)
            }
        };
        let node = vol.node().to_string_lossy().into_owned();
        vol.unchanged(OP)?;
        libblkid_finds_nothing(OP, &object, &node, pending.map(|i| i.id.as_str()))?;
        let mut record = FormatRecord {
            fs: fs_type.to_string(),
            id: uuid.clone(),
            done: false,
        };
        self.write_intent(OP, &vol, &record)?;
        vol.unchanged(OP)?;
        let xfs_uuid = format!("uuid={uuid}");
        let (program, mut args, force) = match self.fs_type {
            FsType::Ext4 => ("mkfs.ext4", vec!["-q", "-U", uuid.as_str()], "-F"),
            FsType::Xfs => ("mkfs.xfs", vec!["-q", "-m", xfs_uuid.as_str()], "-f"),
        };
        if pending.is_some() {
            // Finishing our own interrupted format: what it left may look like a filesystem.
            args.push(force);
        }
        args.push(&node);
        tool::run(OP, &object, program, &args).map_err(|r| match r {
            Ok(f) => f.error(OP, &object, program, &MKFS_VOLUME_REASONS),
            Err(e) => e,
        })?;
        vol.file
            .sync_all()
            .map_err(|e| Error::io(OP, &object, &e))?;
        vol.unchanged(OP)
            .map_err(|e| e.context("after mkfs (the format may have reached another device)"))?;
        record.done = true;
        self.write_intent(OP, &vol, &record)?;
        tracing::info!(volume = id, fs_type, uuid, "formatted");
        Ok(())
    }
}

/// libblkid's low-level probe of `node` (`blkid -p`: every superblock and partition table
/// util-linux knows, at every place it looks): `Ok` when it finds nothing, or only the
/// filesystem with UUID `ours` (an interrupted format of ours). blkid(8): exit 2 when nothing
/// is found, 8 when the result is ambivalent (several signatures).
fn libblkid_finds_nothing(op: &str, object: &str, node: &str, ours: Option<&str>) -> Result<()> {
    let refuse = |what: String| {
        Error::new(
            Kind::FailedPrecondition,
            op,
            object,
            format!("libblkid finds {what} on the volume; refusing to format over it"),
        )
    };
    match tool::run(op, object, "blkid", &["-p", "-o", "export", node]) {
        Ok(found) => {
            let field = |k: &str| {
                found
                    .lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                    .map(str::to_string)
            };
            // A partition's PART_ENTRY_* lines describe the parent table's entry, not content.
            let Some(kind) =
                field("TYPE").or_else(|| field("PTTYPE").map(|t| format!("a {t} partition table")))
            else {
                return Ok(());
            };
            if ours.is_some() && field("UUID").as_deref() == ours {
                return Ok(());
            }
            Err(refuse(match field("UUID") {
                Some(u) => format!("{kind} (UUID {u})"),
                None => kind,
            }))
        }
        Err(Ok(f)) if f.code == Some(2) => Ok(()),
        Err(Ok(f)) if f.code == Some(8) => {
            Err(refuse(format!("several signatures ({})", f.output)))
        }
        Err(Ok(f)) => Err(Error::new(
            Kind::Internal,
            op,
            object,
            format!("blkid -p failed (exit {:?}): {}", f.code, f.output),
        )),
        Err(Err(e)) => Err(e),
    }
}

/// What mkfs says when the volume is the reason it refuses (an existing signature, a volume too
/// small for the filesystem): FAILED_PRECONDITION, not INTERNAL.
const MKFS_VOLUME_REASONS: [&str; 5] = [
    "must be larger than",
    "too small",
    "appears to contain",
    "contains a",
    "is mounted",
];
