//! The D-Bus type system and its wire form ("Type System", "Marshaling (Wire Format)").

use super::{MAX_DEPTH, Result, protocol};

/// A marshalled D-Bus value ("Type System").
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `y`
    Byte(u8),
    /// `b`
    Bool(bool),
    /// `n`
    I16(i16),
    /// `q`
    U16(u16),
    /// `i`
    I32(i32),
    /// `u`
    U32(u32),
    /// `x`
    I64(i64),
    /// `t`
    U64(u64),
    /// `d`
    F64(f64),
    /// `h` (an index into the message's descriptors; none are passed here)
    UnixFd(u32),
    /// `s`
    Str(String),
    /// `o`
    ObjectPath(String),
    /// `g`
    Signature(String),
    /// `v`
    Variant(Box<Value>),
    /// `a…`: the element signature (needed for an empty array) and the elements.
    Array(String, Vec<Value>),
    /// `(…)`
    Struct(Vec<Value>),
    /// `{…}`, inside arrays only.
    DictEntry(Box<Value>, Box<Value>),
}

impl Value {
    /// The value's type signature.
    pub fn signature(&self) -> String {
        match self {
            Value::Byte(_) => "y".into(),
            Value::Bool(_) => "b".into(),
            Value::I16(_) => "n".into(),
            Value::U16(_) => "q".into(),
            Value::I32(_) => "i".into(),
            Value::U32(_) => "u".into(),
            Value::I64(_) => "x".into(),
            Value::U64(_) => "t".into(),
            Value::F64(_) => "d".into(),
            Value::UnixFd(_) => "h".into(),
            Value::Str(_) => "s".into(),
            Value::ObjectPath(_) => "o".into(),
            Value::Signature(_) => "g".into(),
            Value::Variant(_) => "v".into(),
            Value::Array(elem, _) => format!("a{elem}"),
            Value::Struct(v) => format!("({})", v.iter().map(Value::signature).collect::<String>()),
            Value::DictEntry(k, v) => format!("{{{}{}}}", k.signature(), v.signature()),
        }
    }

    /// The text of a string, object path or signature.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::ObjectPath(s) | Value::Signature(s) => Some(s),
            _ => None,
        }
    }

    /// The number of a `u`.
    pub fn as_u32(&self) -> Option<u32> {
        match self {
            Value::U32(n) => Some(*n),
            _ => None,
        }
    }

    /// The content of a variant; any other value as it is.
    pub fn into_inner(self) -> Value {
        match self {
            Value::Variant(v) => *v,
            v => v,
        }
    }
}

/// The alignment of a type ("Marshaling (Wire Format)": the alignment column).
fn alignment(code: u8) -> usize {
    match code {
        b'n' | b'q' => 2,
        b'b' | b'i' | b'u' | b'h' | b's' | b'o' | b'a' => 4,
        b'x' | b't' | b'd' | b'(' | b'{' => 8,
        _ => 1, // y, g, v
    }
}

/// Splits the first single complete type off `sig` ("Type System").
pub(crate) fn split_type(sig: &str) -> Result<(&str, &str)> {
    let b = sig.as_bytes();
    let mut i = 0;
    while b.get(i) == Some(&b'a') {
        i += 1;
    }
    match b.get(i) {
        None => protocol(format!("incomplete signature {sig:?}")),
        Some(b'(' | b'{') => {
            let mut depth = 0usize;
            for (j, c) in b.iter().enumerate().skip(i) {
                match c {
                    b'(' | b'{' => depth += 1,
                    b')' | b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(sig.split_at(j + 1));
                        }
                    }
                    _ => {}
                }
            }
            protocol(format!("unbalanced signature {sig:?}"))
        }
        Some(c) if b"ybnqiuxtdhsogv".contains(c) => Ok(sig.split_at(i + 1)),
        Some(c) => protocol(format!("unknown type code {:?} in {sig:?}", *c as char)),
    }
}

/// Writes values little-endian, aligned relative to the start of the buffer (which is the
/// start of the message, or of the body, whose start is 8-aligned).
#[derive(Default)]
pub(super) struct Enc {
    pub(super) buf: Vec<u8>,
}

impl Enc {
    pub(super) fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    pub(super) fn u32(&mut self, n: u32) {
        self.pad(4);
        self.buf.extend(n.to_le_bytes());
    }

    pub(super) fn string(&mut self, s: &str) -> Result<()> {
        // "STRING ... Must be valid UTF-8 ... and must not contain nul bytes."
        if s.contains('\0') {
            return protocol(format!("string {s:?} contains NUL"));
        }
        let n = u32::try_from(s.len()).or_else(|_| protocol("string too long"))?;
        self.u32(n);
        self.buf.extend(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    pub(super) fn signature(&mut self, s: &str) -> Result<()> {
        let n = u8::try_from(s.len()).or_else(|_| protocol("signature too long"))?;
        self.buf.push(n);
        self.buf.extend(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    pub(super) fn put(&mut self, v: &Value) -> Result<()> {
        macro_rules! num {
            ($n:expr, $a:expr) => {{
                self.pad($a);
                self.buf.extend($n.to_le_bytes());
            }};
        }
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::I16(n) => num!(n, 2),
            Value::U16(n) => num!(n, 2),
            Value::I32(n) => num!(n, 4),
            Value::U32(n) | Value::UnixFd(n) => self.u32(*n),
            Value::I64(n) => num!(n, 8),
            Value::U64(n) => num!(n, 8),
            Value::F64(n) => num!(n, 8),
            Value::Str(s) | Value::ObjectPath(s) => self.string(s)?,
            Value::Signature(s) => self.signature(s)?,
            Value::Variant(inner) => {
                self.signature(&inner.signature())?;
                self.put(inner)?;
            }
            Value::Array(elem, items) => {
                // "ARRAY: A UINT32 giving the length of the array data in bytes, followed by
                // alignment padding to the alignment boundary of the array element type,
                // followed by each array element" — the length excludes that padding.
                self.pad(4);
                let at = self.buf.len();
                self.buf.extend([0; 4]);
                self.pad(alignment(*elem.as_bytes().first().unwrap_or(&b'y')));
                let start = self.buf.len();
                for item in items {
                    self.put(item)?;
                }
                let n = u32::try_from(self.buf.len() - start)
                    .or_else(|_| protocol("array too long"))?;
                self.buf[at..at + 4].copy_from_slice(&n.to_le_bytes());
            }
            Value::Struct(items) => {
                self.pad(8);
                for item in items {
                    self.put(item)?;
                }
            }
            Value::DictEntry(k, v) => {
                self.pad(8);
                self.put(k)?;
                self.put(v)?;
            }
        }
        Ok(())
    }
}

/// Reads values of either byte order, aligned relative to the start of `buf`.
pub(super) struct Dec<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
    pub(super) big: bool,
}

impl<'a> Dec<'a> {
    pub(super) fn align(&mut self, a: usize) -> Result<()> {
        let p = self.pos.next_multiple_of(a);
        if p > self.buf.len() {
            return protocol("truncated value (padding)");
        }
        self.pos = p;
        Ok(())
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return protocol("truncated value");
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(super) fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.align(N)?;
        let mut a: [u8; N] = self.take(N)?.try_into().expect("N bytes");
        if !self.big {
            a.reverse();
        }
        // `a` is now big-endian.
        Ok(a)
    }

    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.fixed()?))
    }

    pub(super) fn text(&mut self, n: usize) -> Result<String> {
        let bytes = self.take(n)?;
        if self.take(1)? != [0] {
            return protocol("string not NUL-terminated");
        }
        String::from_utf8(bytes.to_vec()).or_else(|_| protocol("string is not UTF-8"))
    }

    pub(super) fn value(&mut self, sig: &str, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return protocol("values nested too deeply");
        }
        let code = sig.as_bytes().first().copied().unwrap_or(0);
        Ok(match code {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => match self.u32()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                n => return protocol(format!("boolean {n}")),
            },
            b'n' => Value::I16(i16::from_be_bytes(self.fixed()?)),
            b'q' => Value::U16(u16::from_be_bytes(self.fixed()?)),
            b'i' => Value::I32(i32::from_be_bytes(self.fixed()?)),
            b'u' => Value::U32(self.u32()?),
            b'h' => Value::UnixFd(self.u32()?),
            b'x' => Value::I64(i64::from_be_bytes(self.fixed()?)),
            b't' => Value::U64(u64::from_be_bytes(self.fixed()?)),
            b'd' => Value::F64(f64::from_be_bytes(self.fixed()?)),
            b's' | b'o' => {
                let n = self.u32()? as usize;
                let s = self.text(n)?;
                if code == b's' {
                    Value::Str(s)
                } else {
                    Value::ObjectPath(s)
                }
            }
            b'g' => {
                let n = usize::from(self.take(1)?[0]);
                Value::Signature(self.text(n)?)
            }
            b'v' => {
                let n = usize::from(self.take(1)?[0]);
                let inner = self.text(n)?;
                // "VARIANT: ... the signature ... must be a single complete type."
                let (t, rest) = split_type(&inner)?;
                if !rest.is_empty() {
                    return protocol(format!("variant signature {inner:?} is not one type"));
                }
                Value::Variant(Box::new(self.value(t, depth + 1)?))
            }
            b'a' => {
                let elem = &sig[1..];
                let n = self.u32()? as usize;
                self.align(alignment(elem.as_bytes()[0]))?;
                let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
                let Some(end) = end else {
                    return protocol("truncated array");
                };
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.value(elem, depth + 1)?);
                }
                if self.pos != end {
                    return protocol("array length does not match its elements");
                }
                Value::Array(elem.to_string(), items)
            }
            b'(' | b'{' => {
                self.align(8)?;
                let mut inner = &sig[1..sig.len() - 1];
                let mut items = Vec::new();
                while !inner.is_empty() {
                    let (t, rest) = split_type(inner)?;
                    items.push(self.value(t, depth + 1)?);
                    inner = rest;
                }
                if code == b'(' {
                    Value::Struct(items)
                } else {
                    let [k, v]: [Value; 2] = items
                        .try_into()
                        .or_else(|_| protocol("dict entry without two fields"))?;
                    Value::DictEntry(Box::new(k), Box::new(v))
                }
            }
            _ => return protocol(format!("unknown type code in {sig:?}")),
        })
    }

    /// Every value of `sig` (a sequence of complete types).
    pub(super) fn values(&mut self, mut sig: &str) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        while !sig.is_empty() {
            let (t, rest) = split_type(sig)?;
            out.push(self.value(t, 0)?);
            sig = rest;
        }
        Ok(out)
    }
}
