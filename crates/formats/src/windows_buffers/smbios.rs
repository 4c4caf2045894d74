//! The system serial number from a raw SMBIOS table.
//!
//! `GetSystemFirmwareTable('RSMB', 0, ...)` returns a `RawSMBIOSData` header
//! (`Used20CallingMethod` u8 @0, `SMBIOSMajorVersion` @1, `SMBIOSMinorVersion` @2,
//! `DmiRevision` @3, `Length` u32 @4) followed by `Length` bytes of SMBIOS structures (DMTF
//! DSP0134). Each structure is a header (`Type` u8, `Length` u8 of the formatted area including
//! the header, `Handle` u16), the formatted area, then its strings: NUL-terminated, numbered from
//! 1, the set ending with an extra NUL (two NULs when there are no strings). Type 1 (System
//! Information) holds the serial number as a string number at offset 0x07; type 127 ends the
//! table.

use super::bytes::Le;
use super::storage::ParseError;

/// SMBIOS structure type "System Information".
const SYSTEM_INFORMATION: u8 = 1;
/// SMBIOS structure type "End-of-Table".
const END_OF_TABLE: u8 = 127;
/// Offset of "Serial Number" in the System Information structure.
const SERIAL_OFFSET: usize = 0x07;

/// The System Information (type 1) serial number from a `RawSMBIOSData` buffer, verbatim (the
/// caller trims). `Ok(None)` when the table has no type 1 structure or it names no serial.
pub fn system_serial(raw: &[u8]) -> Result<Option<String>, ParseError> {
    let le = Le(raw);
    let len =
        le.u32(4)
            .ok_or_else(|| ParseError("RawSMBIOSData: buffer too short".into()))? as usize;
    let table = raw
        .get(8..8usize.saturating_add(len))
        .ok_or_else(|| ParseError(format!("RawSMBIOSData: Length {len} exceeds the buffer")))?;
    let mut at = 0usize;
    while at + 4 <= table.len() {
        let ty = table[at];
        let flen = table[at + 1] as usize;
        if flen < 4 || at + flen > table.len() {
            return Err(ParseError(format!(
                "SMBIOS structure type {ty} at {at}: bad length {flen}"
            )));
        }
        let strings_at = at + flen;
        let end = strings_end(table, strings_at).ok_or_else(|| {
            ParseError(format!(
                "SMBIOS structure type {ty} at {at}: unterminated strings"
            ))
        })?;
        if ty == SYSTEM_INFORMATION && flen > SERIAL_OFFSET {
            let index = table[at + SERIAL_OFFSET];
            return Ok(string(&table[strings_at..end], index));
        }
        if ty == END_OF_TABLE {
            break;
        }
        at = end;
    }
    Ok(None)
}

/// The offset just past the double NUL ending the string set that starts at `at`.
fn strings_end(table: &[u8], at: usize) -> Option<usize> {
    let rest = table.get(at..)?;
    rest.windows(2)
        .position(|w| w == [0, 0])
        .map(|p| at + p + 2)
}

/// String number `index` (1-based; 0 means "none") of a string set.
fn string(set: &[u8], index: u8) -> Option<String> {
    if index == 0 {
        return None;
    }
    set.split(|&b| b == 0)
        .take_while(|s| !s.is_empty())
        .nth(usize::from(index) - 1)
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A structure of type `ty` whose formatted area is `area` (after the 4-byte header), with
    /// `strings`.
    fn structure(ty: u8, area: &[u8], strings: &[&str]) -> Vec<u8> {
        let mut s = vec![ty, (4 + area.len()) as u8, 0x00, 0x01];
        s.extend_from_slice(area);
        for st in strings {
            s.extend_from_slice(st.as_bytes());
            s.push(0);
        }
        if strings.is_empty() {
            s.push(0);
        }
        s.push(0);
        s
    }

    fn raw(structures: &[Vec<u8>]) -> Vec<u8> {
        let table: Vec<u8> = structures.concat();
        let mut out = vec![0, 3, 4, 0];
        out.extend_from_slice(&(table.len() as u32).to_le_bytes());
        out.extend_from_slice(&table);
        out
    }

    /// A type 1 area: Manufacturer=1, Product=2, Version=3, Serial=`serial`, then UUID etc.
    fn system_area(serial: u8) -> Vec<u8> {
        let mut a = vec![1, 2, 3, serial];
        a.extend_from_slice(&[0u8; 16]); // UUID
        a.extend_from_slice(&[6, 4, 5]); // wake-up type, SKU, family
        a
    }

    #[test]
    fn finds_the_type1_serial_after_other_structures() {
        let t = raw(&[
            structure(
                0,
                &[1, 2, 0, 0xE8, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                &["Vendor", "1.0"],
            ),
            structure(
                1,
                &system_area(4),
                &[
                    "QEMU",
                    "Standard PC",
                    "pc-1.0",
                    " VMware-56 4d ",
                    "sku",
                    "fam",
                ],
            ),
            structure(127, &[], &[]),
        ]);
        assert_eq!(
            system_serial(&t).unwrap().as_deref(),
            Some(" VMware-56 4d ")
        );
    }

    #[test]
    fn no_serial_or_no_type1() {
        let t = raw(&[structure(1, &system_area(0), &["A", "B", "C"])]);
        assert_eq!(system_serial(&t).unwrap(), None);
        let t = raw(&[structure(1, &system_area(9), &["A"])]);
        assert_eq!(system_serial(&t).unwrap(), None, "index past the strings");
        let t = raw(&[structure(0, &[0; 14], &[]), structure(127, &[], &[])]);
        assert_eq!(system_serial(&t).unwrap(), None);
    }

    #[test]
    fn malformed_tables_are_errors_never_panics() {
        let good = raw(&[structure(1, &system_area(1), &["S/N"])]);
        for n in 0..good.len() {
            let _ = system_serial(&good[..n]);
        }
        let mut bad_len = good.clone();
        bad_len[9] = 2; // structure length below its header
        assert!(system_serial(&bad_len).is_err());
        let mut too_long = good;
        too_long[4..8].copy_from_slice(&1000u32.to_le_bytes());
        assert!(system_serial(&too_long).is_err());
    }
}
