//! BPF Type Format, as the kernel describes itself in `/sys/kernel/btf/vmlinux`
//! (Documentation/bpf/btf.rst): a header, then a section of type records and a section of
//! NUL-terminated names. Only what the in-use iterators need is read: the type ID of a function
//! (what an iterator program attaches to) and where a named field sits in a named struct. Every
//! offset and length is checked against the bytes read; a record of a kind this parser does not
//! know ends the parse with an error rather than a guess at its length.

use std::fmt;

const MAGIC: u16 = 0xEB9F;
const HEADER_LEN: usize = 24;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Why a BTF blob could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BtfError(String);

impl fmt::Display for BtfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BTF: {}", self.0)
    }
}

impl std::error::Error for BtfError {}

fn bad(what: impl Into<String>) -> BtfError {
    BtfError(what.into())
}

/// A field of a struct: where it starts and how many bytes it spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Byte offset from the start of the struct (fields of anonymous members included).
    pub offset: u32,
    /// Size in bytes of the field's type (8 for a pointer).
    pub size: u32,
}

/// One type record: its header words and the bytes of its kind-specific tail.
#[derive(Clone, Copy)]
struct Record<'a> {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    size_or_type: u32,
    tail: &'a [u8],
}

/// A parsed BTF blob, borrowing its bytes.
pub struct Btf<'a> {
    strings: &'a [u8],
    /// Type ID `n` is `records[n - 1]` (ID 0 is `void`).
    records: Vec<Record<'a>>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> Btf<'a> {
    /// Reads the header and indexes every type record. Only little-endian blobs (the machine's
    /// own order on every target the daemon runs on) are read.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, BtfError> {
        let magic = bytes
            .get(0..2)
            .map(|m| u16::from_le_bytes([m[0], m[1]]))
            .ok_or_else(|| bad("shorter than its header"))?;
        if magic != MAGIC {
            return Err(bad(format!("magic {magic:#06x} is not {MAGIC:#06x}")));
        }
        let word = |at| u32_at(bytes, at).ok_or_else(|| bad("shorter than its header"));
        let hdr_len = word(4)? as usize;
        if hdr_len < HEADER_LEN || hdr_len > bytes.len() {
            return Err(bad(format!("header length {hdr_len} out of bounds")));
        }
        let section = |off: u32, len: u32, what: &str| {
            let start = hdr_len.checked_add(off as usize);
            let end = start.and_then(|s| s.checked_add(len as usize));
            match (start, end) {
                (Some(s), Some(e)) if e <= bytes.len() => Ok(&bytes[s..e]),
                _ => Err(bad(format!("{what} section runs past the blob"))),
            }
        };
        let types = section(word(8)?, word(12)?, "type")?;
        let strings = section(word(16)?, word(20)?, "string")?;
        let mut records = Vec::new();
        let mut at = 0;
        while at < types.len() {
            let (name_off, info, size_or_type) = match (
                u32_at(types, at),
                u32_at(types, at + 4),
                u32_at(types, at + 8),
            ) {
                (Some(a), Some(b), Some(c)) => (a, b, c),
                _ => return Err(bad(format!("type record at {at} is cut short"))),
            };
            let kind = (info >> 24) & 0x1F;
            let vlen = (info & 0xFFFF) as usize;
            let tail_len = match kind {
                KIND_INT | 14 /* VAR */ | 17 /* DECL_TAG */ => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | 15 /* DATASEC */ | KIND_ENUM64 => 12 * vlen,
                KIND_ENUM | 13 /* FUNC_PROTO */ => 8 * vlen,
                KIND_PTR | 7 /* FWD */ | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST
                | KIND_RESTRICT | KIND_FUNC | 16 /* FLOAT */ | KIND_TYPE_TAG => 0,
                other => return Err(bad(format!("type record at {at} has unknown kind {other}"))),
            };
            let tail = types
                .get(at + 12..at + 12 + tail_len)
                .ok_or_else(|| bad(format!("type record at {at} is cut short")))?;
            records.push(Record {
                name_off,
                kind,
                vlen,
                kind_flag: info >> 31 == 1,
                size_or_type,
                tail,
            });
            at += 12 + tail_len;
        }
        Ok(Btf { strings, records })
    }

    fn name(&self, off: u32) -> &'a [u8] {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        rest.split(|b| *b == 0).next().unwrap_or_default()
    }

    fn record(&self, id: u32) -> Option<&Record<'a>> {
        self.records.get((id as usize).checked_sub(1)?)
    }

    /// The type ID of the function named `name` (a `FUNC` record).
    pub fn func(&self, name: &str) -> Option<u32> {
        self.records
            .iter()
            .position(|r| r.kind == KIND_FUNC && self.name(r.name_off) == name.as_bytes())
            .map(|i| i as u32 + 1)
    }

    /// Where the field `field` of the struct named `strukt` sits. A field inside an anonymous
    /// struct or union member is found with the member's offset added; a bitfield is never
    /// answered (it has no byte address of its own).
    pub fn field(&self, strukt: &str, field: &str) -> Option<Field> {
        let r = self.records.iter().find(|r| {
            r.kind == KIND_STRUCT && r.vlen > 0 && self.name(r.name_off) == strukt.as_bytes()
        })?;
        self.find_member(r, field, 0, 0)
    }

    fn find_member(&self, r: &Record<'a>, field: &str, base: u32, depth: u32) -> Option<Field> {
        // Anonymous members nest a few levels at most; the bound keeps a looping blob finite.
        if depth > 16 {
            return None;
        }
        for m in r.tail.chunks_exact(12).take(r.vlen) {
            let (name_off, ty, raw_off) = (u32_at(m, 0)?, u32_at(m, 4)?, u32_at(m, 8)?);
            let (bit_off, bit_size) = if r.kind_flag {
                (raw_off & 0xFF_FFFF, raw_off >> 24)
            } else {
                (raw_off, 0)
            };
            let offset = base.checked_add(bit_off / 8)?;
            let name = self.name(name_off);
            if name.is_empty() {
                let inner = self.resolve(ty, 0)?;
                if matches!(inner.kind, KIND_STRUCT | KIND_UNION)
                    && let Some(f) = self.find_member(inner, field, offset, depth + 1)
                {
                    return Some(f);
                }
            } else if name == field.as_bytes() {
                if bit_size != 0 || !bit_off.is_multiple_of(8) {
                    return None;
                }
                return Some(Field {
                    offset,
                    size: self.size_of(ty, 0)?,
                });
            }
        }
        None
    }

    /// The record a type ID names once typedefs and qualifiers are looked through.
    fn resolve(&self, id: u32, depth: u32) -> Option<&Record<'a>> {
        let r = self.record(id)?;
        match r.kind {
            KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG
                if depth < 32 =>
            {
                self.resolve(r.size_or_type, depth + 1)
            }
            KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => None,
            _ => Some(r),
        }
    }

    fn size_of(&self, id: u32, depth: u32) -> Option<u32> {
        if depth > 32 {
            return None;
        }
        let r = self.resolve(id, 0)?;
        match r.kind {
            KIND_PTR => Some(8),
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => Some(r.size_or_type),
            KIND_ARRAY => {
                let (elem, count) = (u32_at(r.tail, 0)?, u32_at(r.tail, 8)?);
                self.size_of(elem, depth + 1)?.checked_mul(count)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny blob built the way the kernel lays one out.
    struct Builder {
        types: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Builder {
        fn new() -> Self {
            Builder {
                types: Vec::new(),
                strings: vec![0],
            }
        }
        fn name(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let at = self.strings.len() as u32;
            self.strings.extend(s.as_bytes());
            self.strings.push(0);
            at
        }
        fn record(&mut self, name: &str, kind: u32, vlen: u32, flag: bool, st: u32) {
            let n = self.name(name);
            let info = (kind << 24) | vlen | (u32::from(flag) << 31);
            for w in [n, info, st] {
                self.types.extend(w.to_le_bytes());
            }
        }
        fn words(&mut self, ws: &[u32]) {
            for w in ws {
                self.types.extend(w.to_le_bytes());
            }
        }
        fn member(&mut self, name: &str, ty: u32, off: u32) {
            let n = self.name(name);
            self.words(&[n, ty, off]);
        }
        fn build(self) -> Vec<u8> {
            let mut b = Vec::new();
            b.extend(MAGIC.to_le_bytes());
            b.extend([1, 0]);
            for w in [
                HEADER_LEN as u32,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ] {
                b.extend(w.to_le_bytes());
            }
            b.extend(self.types);
            b.extend(self.strings);
            b
        }
    }

    fn sample() -> Vec<u8> {
        let mut b = Builder::new();
        // 1: unsigned short (2 bytes), 2: unsigned long (8 bytes), 3: umode_t typedef of 1
        b.record("unsigned short", KIND_INT, 0, false, 2);
        b.words(&[16]);
        b.record("unsigned long", KIND_INT, 0, false, 8);
        b.words(&[64]);
        b.record("umode_t", KIND_TYPEDEF, 0, false, 1);
        // 4: struct { unsigned long start; unsigned long end; } (anonymous)
        b.record("", KIND_STRUCT, 2, false, 16);
        b.member("vm_start", 2, 0);
        b.member("vm_end", 2, 64);
        // 5: union { struct 4; } (anonymous)
        b.record("", KIND_UNION, 1, false, 16);
        b.member("", 4, 0);
        // 6: struct inode { umode_t i_mode; <bitfield>; union 5 at 8 bytes; const ptr i_sb }
        b.record("inode", KIND_STRUCT, 4, true, 40);
        b.member("i_mode", 3, 0);
        b.member("i_flags", 1, (4 << 24) | 16);
        b.member("", 5, 64);
        b.member("i_sb", 8, 192);
        // 7: FWD inode (never chosen), 8: const 9, 9: ptr to 6
        b.record("inode", 7, 0, false, 0);
        b.record("", KIND_CONST, 0, false, 9);
        b.record("", KIND_PTR, 0, false, 6);
        // 10: func
        b.record("bpf_iter_task_file", KIND_FUNC, 0, false, 0);
        b.build()
    }

    #[test]
    fn fields_are_found_through_typedefs_and_anonymous_members() {
        let blob = sample();
        let btf = Btf::parse(&blob).unwrap();
        assert_eq!(
            btf.field("inode", "i_mode"),
            Some(Field { offset: 0, size: 2 })
        );
        assert_eq!(
            btf.field("inode", "vm_end"),
            Some(Field {
                offset: 16,
                size: 8
            })
        );
        assert_eq!(
            btf.field("inode", "i_sb"),
            Some(Field {
                offset: 24,
                size: 8
            })
        );
        assert_eq!(btf.field("inode", "i_flags"), None, "a bitfield");
        assert_eq!(btf.field("inode", "nope"), None);
        assert_eq!(btf.field("file", "f_inode"), None);
        assert_eq!(btf.func("bpf_iter_task_file"), Some(10));
        assert_eq!(btf.func("bpf_iter_task_vma"), None);
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_or_an_absent_answer() {
        let blob = sample();
        for cut in 0..blob.len() {
            if let Ok(btf) = Btf::parse(&blob[..cut]) {
                let _ = btf.field("inode", "vm_end");
                let _ = btf.func("bpf_iter_task_file");
            }
        }
        for at in 0..blob.len() {
            for v in [0u8, 0xFF, 0x13] {
                let mut bad = blob.clone();
                bad[at] = v;
                if let Ok(btf) = Btf::parse(&bad) {
                    let _ = btf.field("inode", "vm_end");
                    let _ = btf.field("inode", "i_sb");
                }
            }
        }
        assert!(Btf::parse(&[]).is_err());
        let mut unknown = Builder::new();
        unknown.record("x", 31, 0, false, 0);
        assert!(Btf::parse(&unknown.build()).is_err());
    }
}
