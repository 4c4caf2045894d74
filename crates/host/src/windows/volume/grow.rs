//! Whether and how far a volume's partition may grow in place, for ResizeVolume: GPT
//! partitions, and primary MBR partitions (upstream grows both; gce-pd resizes on every
//! NodeStage, so a disk restored from an MBR image must at least pass when nothing grows).
//!
//! Whether the partition must grow is decided first (`csi_proxy_core::volume::rules`); a
//! partition that cannot grow is refused only then.

use csi_proxy_formats::windows_buffers::layout::{self, Layout, STYLE_GPT, STYLE_MBR};

/// MBR partition types of extended (container) partitions: `PARTITION_EXTENDED`,
/// `PARTITION_XINT13_EXTENDED` and Linux's extended type.
const MBR_EXTENDED: [u8; 3] = [0x05, 0x0F, 0x85];
/// `PARTITION_LDM`: a dynamic disk's partition, which the Logical Disk Manager lays out.
const MBR_LDM: u8 = 0x42;

/// How far a partition may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrowLimit {
    /// The largest length it can reach in place (its current length when nothing is free).
    pub maximum: u64,
    /// Why it must not be grown at all, if so; only said when growth is needed.
    pub refusal: Option<String>,
}

/// The limit of partition `number` on a disk with layout `l`, `disk_length` bytes and
/// `sector`-byte sectors.
pub fn grow_limit(
    l: &Layout,
    number: u32,
    disk_length: u64,
    sector: u64,
) -> Result<GrowLimit, layout::PlanError> {
    let mut maximum = layout::max_partition_size(l, number, disk_length, sector)?;
    let p = l
        .partitions
        .iter()
        .find(|p| p.number == number)
        .expect("max_partition_size found it");
    let refusal = match l.style {
        STYLE_GPT => None,
        STYLE_MBR => {
            // An MBR entry holds its start and length as 32-bit sector counts: nothing past
            // 2^32 sectors (2 TiB with 512-byte sectors) can be addressed.
            let addressable = u64::from(u32::MAX) * sector.max(1);
            maximum = maximum
                .min(addressable.saturating_sub(p.start))
                .max(p.length);
            let logical = l.partitions.iter().any(|q| {
                MBR_EXTENDED.contains(&q.mbr_type)
                    && q.start <= p.start
                    && p.start < q.start.saturating_add(q.length)
            });
            if logical {
                Some("it is a logical partition inside an extended partition".to_string())
            } else if MBR_EXTENDED.contains(&p.mbr_type) || p.mbr_type == MBR_LDM {
                Some(format!(
                    "its MBR partition type {:#04x} is not a basic volume's",
                    p.mbr_type
                ))
            } else {
                None
            }
        }
        other => Some(format!(
            "the disk's partition style {other} is neither GPT nor MBR"
        )),
    };
    Ok(GrowLimit { maximum, refusal })
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_formats::windows_buffers::layout::Partition;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn mbr(parts: &[(u64, u64, u32, u8)]) -> Layout {
        Layout {
            style: STYLE_MBR,
            disk_id: uuid::Uuid::nil(),
            signature: 0,
            usable_start: 0,
            usable_length: 0,
            max_partitions: 0,
            partitions: parts
                .iter()
                .map(|&(start, length, number, mbr_type)| Partition {
                    start,
                    length,
                    number,
                    gpt_type: None,
                    mbr_type,
                    raw: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_primary_mbr_partition_grows_to_the_disk_end() {
        let l = mbr(&[(MIB, GIB, 1, 0x07)]);
        let g = grow_limit(&l, 1, 10 * GIB, 512).unwrap();
        assert_eq!(g.maximum, 10 * GIB - MIB);
        assert_eq!(g.refusal, None);
    }

    #[test]
    fn mbr_growth_stops_at_2_tib_of_sectors() {
        let l = mbr(&[(MIB, GIB, 1, 0x07)]);
        let g = grow_limit(&l, 1, 4 << 40, 512).unwrap();
        assert_eq!(g.maximum, u64::from(u32::MAX) * 512 - MIB);
    }

    #[test]
    fn logical_extended_and_dynamic_partitions_are_not_grown() {
        let l = mbr(&[
            (MIB, GIB, 1, 0x07),
            (2 * GIB, 4 * GIB, 2, 0x0F),
            (2 * GIB + MIB, GIB, 5, 0x07),
        ]);
        let g = grow_limit(&l, 5, 10 * GIB, 512).unwrap();
        assert!(g.refusal.unwrap().contains("logical"));
        // The primary partition before the container can grow up to it.
        let g = grow_limit(&l, 1, 10 * GIB, 512).unwrap();
        assert_eq!((g.maximum, g.refusal), (2 * GIB - MIB, None));
        let l = mbr(&[(MIB, GIB, 1, MBR_LDM)]);
        assert!(grow_limit(&l, 1, 10 * GIB, 512).unwrap().refusal.is_some());
    }
}
