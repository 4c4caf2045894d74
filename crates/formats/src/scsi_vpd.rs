//! SCSI VPD page 0x83, Device Identification (SPC-4 §7.8.6), as a device answers it: a header
//! of four bytes (the page code at byte 1, the length of what follows at bytes 2 and 3), then
//! designation descriptors of four header bytes and `length` bytes of designator each. The page
//! comes from the device, which a tenant's iSCSI target may be: every length is checked against
//! both the page's own length and the bytes read.

/// One designation descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Designator<'a> {
    /// Code set (byte 0, low nibble): 1 binary, 2 ASCII, 3 UTF-8.
    pub code_set: u8,
    /// Association (byte 1, bits 4-5): 0 the logical unit, 1 the target port, 2 the target.
    pub association: u8,
    /// Designator type (byte 1, low nibble): NAA 3, EUI-64 2, T10 vendor 1, vendor-specific 0, ...
    pub kind: u8,
    /// The designator's bytes.
    pub id: &'a [u8],
}

/// The designation descriptors of `page`, in order; nothing when it is not page 0x83, and the
/// walk ends at the first descriptor that runs past the page's length or the bytes read.
pub fn page83(page: &[u8]) -> impl Iterator<Item = Designator<'_>> {
    let end = match page {
        [_, 0x83, hi, lo, ..] => (4 + usize::from(u16::from_be_bytes([*hi, *lo]))).min(page.len()),
        _ => 0,
    };
    let mut at = 4;
    std::iter::from_fn(move || {
        let header = page.get(at..at + 4).filter(|_| at + 4 <= end)?;
        let len = usize::from(header[3]);
        let id = page
            .get(at + 4..at + 4 + len)
            .filter(|_| at + 4 + len <= end)?;
        at += 4 + len;
        Some(Designator {
            code_set: header[0] & 0x0F,
            association: (header[1] >> 4) & 0x03,
            kind: header[1] & 0x0F,
            id,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_walked_in_order_within_both_lengths() {
        let mut page = vec![0x00, 0x83, 0x00, 0x00];
        // Target port ASCII (association 1), LU NAA binary, LU T10 vendor ASCII.
        page.extend([0x02, 0x10 | 0x08, 0x00, 0x03]);
        page.extend(b"TPx");
        page.extend([0x01, 0x03, 0x00, 0x04, 0x60, 0x0A, 0xBC, 0xFF]);
        page.extend([0x02, 0x01, 0x00, 0x04]);
        page.extend(b"LIO ");
        let len = (page.len() - 4) as u16;
        page[2..4].copy_from_slice(&len.to_be_bytes());
        let all: Vec<_> = page83(&page).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(
            (all[0].association, all[0].kind, all[0].id),
            (1, 8, &b"TPx"[..])
        );
        assert_eq!((all[1].code_set, all[1].kind), (1, 3));
        assert_eq!(all[1].id, [0x60, 0x0A, 0xBC, 0xFF]);
        assert_eq!((all[2].code_set, all[2].id), (2, &b"LIO "[..]));
        // Cut short by the page's own length: the last descriptor is not read.
        page[3] -= 1;
        assert_eq!(page83(&page).count(), 2);
    }

    #[test]
    fn other_pages_and_lengths_past_the_bytes_give_nothing() {
        assert_eq!(page83(&[0, 0x80, 0, 0]).count(), 0);
        assert_eq!(page83(&[]).count(), 0);
        assert_eq!(page83(&[0, 0x83]).count(), 0);
        // A descriptor claiming 200 bytes of which one was read.
        assert_eq!(page83(&[0, 0x83, 0, 8, 0x01, 0x03, 0, 200, 1]).count(), 0);
        // A page length past the bytes read is cut to them.
        assert_eq!(
            page83(&[0, 0x83, 0xFF, 0xFF, 0x02, 0, 0, 1, b'a']).count(),
            1
        );
    }
}
