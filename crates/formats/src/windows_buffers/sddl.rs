//! The DACL part of a security descriptor string (SDDL, "Security Descriptor String Format",
//! learn.microsoft.com/windows/win32/secauthz/security-descriptor-string-format): what access
//! its allow entries give one trustee on the object itself.

/// FILE_ADD_FILE (a folder's FILE_WRITE_DATA): "the right to create a file in the directory".
pub const FILE_ADD_FILE: u32 = 0x2;
/// FILE_ADD_SUBDIRECTORY (a folder's FILE_APPEND_DATA): "the right to create a subdirectory".
pub const FILE_ADD_SUBDIRECTORY: u32 = 0x4;

/// The access mask an ACE string's rights field stands for ("ACE Strings": a hexadecimal
/// number, or a concatenation of the two-letter rights, generic, standard, directory-service
/// and file ones), `None` for a letter pair it does not know.
fn rights(field: &str) -> Option<u32> {
    if let Some(hex) = field
        .strip_prefix("0x")
        .or_else(|| field.strip_prefix("0X"))
    {
        return u32::from_str_radix(hex, 16).ok();
    }
    let bytes = field.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes.chunks(2).try_fold(0u32, |mask, pair| {
        let bit = match pair {
            b"GA" => 0x1000_0000,
            b"GR" => 0x8000_0000,
            b"GW" => 0x4000_0000,
            b"GX" => 0x2000_0000,
            b"RC" => 0x0002_0000,
            b"SD" => 0x0001_0000,
            b"WD" => 0x0004_0000,
            b"WO" => 0x0008_0000,
            b"CC" => 0x1,
            b"DC" => 0x2,
            b"LC" => 0x4,
            b"SW" => 0x8,
            b"RP" => 0x10,
            b"WP" => 0x20,
            b"DT" => 0x40,
            b"LO" => 0x80,
            b"CR" => 0x100,
            b"FA" => 0x001F_01FF,
            b"FR" => 0x0012_0089,
            b"FW" => 0x0012_0116,
            b"FX" => 0x0012_00A0,
            _ => return None,
        };
        Some(mask | bit)
    })
}

/// The union of the access masks the DACL's allow entries (`A`) give `trustee` (its SDDL
/// alias, e.g. `BU`, or its SID string) on the object itself: inherit-only entries (`IO`)
/// apply only below it and are left out, and so are deny entries (this answers what is
/// granted, not what an access check would decide). Generic rights are kept as their bits.
pub fn allowed_rights(sddl: &str, trustee: &str) -> u32 {
    let dacl = match sddl.find("D:") {
        Some(i) => &sddl[i + 2..],
        None => return 0,
    };
    // The DACL ends where the SACL part starts.
    let dacl = dacl.split("S:").next().unwrap_or("");
    let mut mask = 0;
    for ace in dacl.split('(').skip(1) {
        let ace = ace.split(')').next().unwrap_or("");
        let f: Vec<&str> = ace.split(';').collect();
        let [kind, flags, r, _, _, sid, ..] = f[..] else {
            continue;
        };
        let inherit_only = flags.as_bytes().chunks(2).any(|p| p == b"IO");
        if kind == "A" && !inherit_only && sid.eq_ignore_ascii_case(trustee) {
            mask |= rights(r).unwrap_or(0);
        }
    }
    mask
}

/// Whether `mask` lets its holder create files or folders in a folder: FILE_ADD_FILE,
/// FILE_ADD_SUBDIRECTORY, or generic write or all (which map to both for files).
pub fn may_create(mask: u32) -> bool {
    mask & (FILE_ADD_FILE | FILE_ADD_SUBDIRECTORY | 0x4000_0000 | 0x1000_0000) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAMDATA: &str = "D:PAI(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICIIO;GA;;;CO)\
                               (A;OICI;0x1200a9;;;BU)(A;CI;DCLCRPCR;;;BU)";

    #[test]
    fn users_may_create_where_an_entry_gives_them_add_file_or_add_subdirectory() {
        let bu = allowed_rights(PROGRAMDATA, "BU");
        assert_eq!(bu, 0x1200a9 | 0x2 | 0x4 | 0x10 | 0x100);
        assert!(may_create(bu));
        // Without the second entry, read and execute only.
        let hardened = "D:PAI(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)";
        assert!(!may_create(allowed_rights(hardened, "BU")));
        // An inherit-only or deny entry gives nothing on the folder itself; the SID string
        // names the trustee as well as the alias.
        assert_eq!(allowed_rights("D:(A;OICIIO;GA;;;BU)(D;;FA;;;BU)", "BU"), 0);
        assert!(may_create(allowed_rights(
            "D:(A;;GW;;;S-1-5-32-545)",
            "S-1-5-32-545"
        )));
        assert!(may_create(allowed_rights(
            "D:(A;;FA;;;BU)S:(AU;SA;FA;;;WD)",
            "BU"
        )));
    }

    #[test]
    fn malformed_strings_give_nothing_and_never_panic() {
        for s in [
            "",
            "D:",
            "D:(",
            "D:(A;;",
            "D:(A;;ZZ;;;BU)",
            "D:(A;;0xZZ;;;BU)",
            "O:BAG:BA",
        ] {
            assert_eq!(allowed_rights(s, "BU"), 0, "{s}");
        }
    }
}
