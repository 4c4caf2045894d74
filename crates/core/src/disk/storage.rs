//! Storage identity: which disks reach the same storage. Two SCSI or iSCSI paths to one LUN
//! without multipath, two loop devices over one image, a loop device over a disk, a device
//! stacked on a disk: each is another way to the same bytes, so the in-use rule
//! ([`super::refuse_in_use`]) judges the storage, never one device name. Every host reports
//! what each disk says about itself ([`Reach`]); [`storage_group`] alone decides which disks
//! are one storage.

use std::collections::BTreeSet;

/// What a disk says about the storage it reaches. Two disks reach the same storage when they
/// share an identifier of the strongest kind both have ([`StorageId::strength`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StorageId {
    /// A logical-unit designator of SCSI VPD page 0x83 (SPC-4 §7.8.6): its designator type
    /// (NAA 3, EUI-64 2, T10 vendor 1, vendor-specific 0, SCSI name string 8, …) and its
    /// bytes as lowercase hex.
    Scsi {
        /// The designator type (low four bits of the descriptor's second byte).
        kind: u8,
        /// The designator's bytes, lowercase hex.
        hex: String,
    },
    /// An NVMe namespace's EUI-64 or NGUID (lowercase hex, as sysfs shows it).
    Nvme(String),
    /// Vendor, model and serial number, for a disk with no designator; never with an empty
    /// serial number (that would make every such disk one).
    Serial {
        /// Vendor, as the disk reports it.
        vendor: String,
        /// Model.
        model: String,
        /// Serial number.
        serial: String,
    },
    /// A loop device's backing object, as the kernel holds it: the device and inode numbers
    /// of the file it was set up over (never looked up again by path, which may name
    /// something else now or nothing at all).
    Backing {
        /// `st_dev` of the backing file.
        dev: u64,
        /// `st_ino` of the backing file.
        ino: u64,
    },
}

impl StorageId {
    /// A logical-unit designator of type `kind` (SPC-4 §7.8.6: NAA 3, EUI-64 2, T10 vendor
    /// 1, vendor-specific 0, MD5 7, SCSI name string 8); `None` for the types that name a
    /// port or a group rather than the unit (4, 5, 6), and for an empty or blank designator.
    pub fn designator(kind: u8, bytes: &[u8]) -> Option<StorageId> {
        let named = bytes.iter().any(|b| *b != 0 && *b != b' ');
        (named && !matches!(kind, 4..=6)).then(|| StorageId::Scsi {
            kind,
            hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }

    /// The identifier as one line of text: the owners book's key of the storage.
    pub fn key(&self) -> String {
        match self {
            StorageId::Scsi { kind, hex } => format!("scsi {kind} {hex}"),
            StorageId::Nvme(hex) => format!("nvme {hex}"),
            StorageId::Serial {
                vendor,
                model,
                serial,
            } => format!("serial {vendor:?} {model:?} {serial:?}"),
            StorageId::Backing { dev, ino } => format!("backing {dev}:{ino}"),
        }
    }

    /// The strongest of `ids` (the first of them in order at that strength): the one name a
    /// storage is known by whichever path reached it.
    pub fn strongest(ids: &[StorageId]) -> Option<&StorageId> {
        let level = ids.iter().map(StorageId::strength).max()?;
        ids.iter().filter(|i| i.strength() == level).min()
    }

    /// Higher is stronger: a disk's identity is compared at the strongest kind both disks
    /// have, so two paths whose designators differ are two storages even when their serial
    /// numbers agree.
    pub fn strength(&self) -> u8 {
        match self {
            StorageId::Scsi { .. } => 3,
            StorageId::Nvme(_) => 2,
            StorageId::Serial { .. } => 1,
            StorageId::Backing { .. } => 0,
        }
    }
}

/// One disk as the in-use rule sees it: what it says about its storage, and the disks it is
/// built on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// The disk's number.
    pub number: u32,
    /// The OS's name for it (`sdb`, `loop3`, `PhysicalDrive2`), for messages.
    pub name: String,
    /// Its identifiers, of any strength; none when it says nothing about itself (such a
    /// disk stands alone).
    pub ids: Vec<StorageId>,
    /// The disks (by number) this one is built on: the disk under a loop device set up over
    /// a disk or partition, the disks under a stacked device (`slaves/`, recursively).
    pub over: Vec<u32>,
}

/// Whether two identifier lists name one storage: they share an identifier of the strongest
/// kind both have.
pub fn same_storage(a: &[StorageId], b: &[StorageId]) -> bool {
    let strongest =
        |ids: &[StorageId]| ids.iter().map(StorageId::strength).collect::<BTreeSet<_>>();
    let common = strongest(a).intersection(&strongest(b)).copied().max();
    let Some(level) = common else {
        return false;
    };
    a.iter()
        .filter(|x| x.strength() == level)
        .any(|x| b.contains(x))
}

/// The disks that reach the same storage as disk `target`, `target` first, the others by
/// number: disks of one identity, and, transitively, disks built on a member or that a member
/// is built on. Empty when `target` is not in `all`.
pub fn storage_group(target: u32, all: &[Reach]) -> Vec<u32> {
    if !all.iter().any(|r| r.number == target) {
        return Vec::new();
    }
    let mut group = BTreeSet::from([target]);
    let mut todo = vec![target];
    while let Some(n) = todo.pop() {
        let Some(me) = all.iter().find(|r| r.number == n) else {
            continue;
        };
        for other in all {
            let joined = !group.contains(&other.number)
                && (same_storage(&me.ids, &other.ids)
                    || me.over.contains(&other.number)
                    || other.over.contains(&n));
            if joined {
                group.insert(other.number);
                todo.push(other.number);
            }
        }
    }
    group.remove(&target);
    std::iter::once(target).chain(group).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naa(hex: &str) -> StorageId {
        StorageId::Scsi {
            kind: 3,
            hex: hex.into(),
        }
    }

    fn serial(s: &str) -> StorageId {
        StorageId::Serial {
            vendor: "LIO-ORG".into(),
            model: "disk".into(),
            serial: s.into(),
        }
    }

    fn reach(number: u32, ids: Vec<StorageId>, over: &[u32]) -> Reach {
        Reach {
            number,
            name: format!("d{number}"),
            ids,
            over: over.to_vec(),
        }
    }

    /// Every way two disks are one storage, and the ways they are not: the class enumerated.
    #[test]
    fn disks_are_one_storage_by_their_strongest_common_identity_and_what_they_are_built_on() {
        let backing = |ino| StorageId::Backing { dev: 2049, ino };
        let all = [
            // Two SCSI paths to one LUN: the same NAA, each path's own serial.
            reach(1, vec![naa("600a"), serial("p1")], &[]),
            reach(2, vec![naa("600a"), serial("p2")], &[]),
            // Another LUN with the same serial as path 1: the designators tell them apart.
            reach(3, vec![naa("600b"), serial("p1")], &[]),
            // A loop device over disk 2, and a device stacked on that loop.
            reach(4, vec![backing(7)], &[2]),
            reach(5, vec![], &[4]),
            // Two loops over one image, a third over another.
            reach(6, vec![backing(9)], &[]),
            reach(7, vec![backing(9)], &[]),
            reach(8, vec![backing(10)], &[]),
            // Disks that say nothing about themselves stand alone.
            reach(9, vec![], &[]),
            reach(10, vec![], &[]),
            // A disk with only a serial number meets one with designators at the serial.
            reach(11, vec![serial("p2")], &[]),
            reach(12, vec![StorageId::Nvme("eui.1".into())], &[]),
            reach(13, vec![StorageId::Nvme("eui.1".into()), serial("x")], &[]),
        ];
        assert_eq!(storage_group(1, &all), [1, 2, 4, 5, 11]);
        assert_eq!(storage_group(5, &all), [5, 1, 2, 4, 11]);
        assert_eq!(storage_group(3, &all), [3]);
        assert_eq!(storage_group(7, &all), [7, 6]);
        assert_eq!(storage_group(8, &all), [8]);
        assert_eq!(storage_group(9, &all), [9]);
        assert_eq!(storage_group(12, &all), [12, 13]);
        assert_eq!(storage_group(99, &all), Vec::<u32>::new());
    }
}
