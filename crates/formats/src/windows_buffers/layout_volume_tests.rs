//! Which partitions Windows surfaces a volume for.

use super::*;

fn part(start: u64, gpt_type: Option<Uuid>, mbr_type: u8) -> Partition {
    Partition {
        start,
        length: 1 << 20,
        number: 1,
        gpt_type,
        mbr_type,
        raw: Vec::new(),
    }
}

#[test]
fn only_partitions_windows_surfaces_are_waited_for() {
    let mut l = Layout {
        style: STYLE_GPT,
        disk_id: Uuid::nil(),
        signature: 0,
        usable_start: 0,
        usable_length: 0,
        max_partitions: 128,
        partitions: vec![part(1, Some(MSR), 0), part(2, Some(BASIC_DATA), 0)],
    };
    assert_eq!(volume_offsets(&l), [2]);
    // MBR: NTFS and FAT32 get volumes; an extended container and a Linux partition none.
    l.style = STYLE_MBR;
    l.partitions = vec![
        part(1, None, 0x07),
        part(2, None, 0x0C),
        part(3, None, 0x05),
    ];
    l.partitions.push(part(4, None, 0x83));
    assert_eq!(volume_offsets(&l), [1, 2]);
}
