//! libblkid's full low-level probe (`blkid -p`), the probe of record before the Linux hosts
//! write a filesystem or a partition table: it knows every superblock, RAID and crypto header
//! and partition table util-linux knows, at every place each keeps it (romfs, nilfs2, hfs+,
//! erofs, VDO, Oracle ASM, DRBD and fakeraid metadata at the end, ...), where our own probe
//! ([`csi_proxy_formats::signatures`]) knows what must never be missed even without util-linux.
//!
//! The `blkid` tool rather than linking libblkid: the daemon links no C library but libc (the
//! release binary stays small and builds for musl), util-linux is on every node, and a probe
//! that hangs on a bad device is a child process [`super::tool`] can stop, not a thread of the
//! daemon stuck in the kernel.

use super::os::LinuxOs;
use super::tool;
use csi_proxy_core::{Error, Kind, Result};

/// What libblkid found on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A superblock (`TYPE`, with `UUID` where it has one) and, on a whole disk, any partition
    /// table beside it (`PTTYPE`).
    One {
        /// `TYPE`: a filesystem, RAID member, crypto header, ...
        kind: Option<String>,
        /// `UUID`.
        uuid: Option<String>,
        /// `PTTYPE`: a partition table (`gpt`, `dos`, `PMBR`, ...).
        table: Option<String>,
    },
    /// Several signatures that contradict each other (blkid's exit 8), as it describes them.
    Ambivalent(String),
}

impl Found {
    /// How the finding is named in a refusal.
    pub fn shown(&self) -> String {
        match self {
            Found::One { kind, uuid, table } => {
                let what = match (kind, table) {
                    (Some(k), Some(t)) => format!("{k} and a {t} partition table"),
                    (Some(k), None) => k.clone(),
                    (None, Some(t)) => format!("a {t} partition table"),
                    (None, None) => "an unnamed signature".into(),
                };
                match uuid {
                    Some(u) => format!("{what} (UUID {u}, found by libblkid)"),
                    None => format!("{what} (found by libblkid)"),
                }
            }
            Found::Ambivalent(out) => format!("several signatures (found by libblkid: {out})"),
        }
    }
}

/// Probes the device `node` (`blkid -p -o export`): `None` when libblkid finds nothing.
/// blkid(8): exit 2 when nothing is found, 8 when the result is ambivalent.
pub fn probe(os: &dyn LinuxOs, op: &str, object: &str, node: &str) -> Result<Option<Found>> {
    match tool::run_on(os, op, object, "blkid", &["-p", "-o", "export", node]) {
        Ok(out) => {
            let field = |k: &str| {
                out.lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                    .map(str::to_string)
            };
            // A partition's PART_ENTRY_* lines describe its parent table's entry, not content.
            let (kind, table) = (field("TYPE"), field("PTTYPE"));
            if kind.is_none() && table.is_none() {
                return Ok(None);
            }
            Ok(Some(Found::One {
                kind,
                uuid: field("UUID"),
                table,
            }))
        }
        Err(Ok(f)) if f.code == Some(2) => Ok(None),
        Err(Ok(f)) if f.code == Some(8) => Ok(Some(Found::Ambivalent(f.output))),
        Err(Ok(f)) => Err(Error::new(
            Kind::Internal,
            op,
            object,
            format!("blkid -p failed (exit {:?}): {}", f.code, f.output),
        )),
        Err(Err(e)) => Err(e),
    }
}
