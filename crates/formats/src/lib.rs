//! The byte formats csi-proxy reads and writes, as pure functions over bytes: no file, device,
//! socket or OS call anywhere in this crate. The hosts do the I/O and hand the bytes here, so
//! every parser and planner is unit-tested on byte fixtures on any platform, and the fuzz
//! targets in `fuzz/` drive exactly what the daemon runs on a tenant's bytes.
//!
//! | module | format | specification |
//! |---|---|---|
//! | [`gpt`] | GUID partition tables and MBRs | UEFI 2.10 §5; the MBR's classic layout |
//! | [`signatures`] | what a device holds: filesystems, RAID/LVM/crypto members, swap | each format's own documentation (the offsets `blkid` checks) |
//! | [`disk_layout`] | which partitions a disk's own bytes list, and what lies outside them | built on the two above |
//! | [`partition_plan`] | what PartitionDisk and ResizeVolume may write to a table | built on the three above |
//! | [`windows_buffers`] | buffers Windows fills in: layouts, storage descriptors, extents, SMBIOS, iSCSI lists, WMI codes | Microsoft's structure pages (winioctl.h, iscsidsc.h, SMBIOS 3.x) |
//! | [`reparse`] | Windows reparse points (links, junctions) | [MS-FSCC] 2.1.2 |
//! | [`iscsi_pdu`] | iSCSI discovery-session PDUs and their text | RFC 7143 |
//! | [`scsi_vpd`] | a device's identification page (VPD 0x83) | SPC-4 §7.8.6 |
//! | [`dbus`] | D-Bus values and messages (the systemd calls of the Linux host) | the D-Bus Specification, "Message Protocol" |
//! | [`bpf`] | the in-use iterator programs (BPF instructions and their records) and the kernel's BTF | Documentation/bpf: btf.rst, bpf_iterators.rst, standardization/instruction-set.rst |
//! | [`mountinfo`] | the Linux mount table, `/proc/self/mountinfo` | proc(5), "/proc/pid/mountinfo" |
//!
//! Dependencies run one way: `partition_plan` → `disk_layout` → `gpt`, `signatures`;
//! `windows_buffers::layout` → `gpt`.

pub mod bpf;
pub mod dbus;
pub mod disk_layout;
pub mod gpt;
pub mod iscsi_pdu;
pub mod mountinfo;
pub mod partition_plan;
pub mod reparse;
pub mod scsi_vpd;
pub mod signatures;
pub mod windows_buffers;

/// The GUID type of this crate's API (partition types and IDs, disk IDs), re-exported so callers
/// need no dependency of their own. GPT and Windows buffers store GUIDs mixed-endian:
/// `Uuid::from_bytes_le` / `to_bytes_le` read and write that layout.
pub use uuid;
