//! A small, blocking D-Bus client over a Unix socket: what the system group needs to drive
//! systemd (method calls, replies, errors, a bus name), and no more.
//!
//! Written from the D-Bus Specification (dbus.freedesktop.org/doc/dbus-specification.html),
//! whose section names the comments below cite. Messages are sent little-endian; messages of
//! either byte order are read ("Byte order and alignment"). Every read and write is bounded by a
//! timeout, so a hung bus fails a call instead of hanging it.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The system bus when `DBUS_SYSTEM_BUS_ADDRESS` is not set ("Well-known Message Bus
/// Instances": the default system bus address).
pub const SYSTEM_BUS_DEFAULT: &str = "unix:path=/run/dbus/system_bus_socket";
/// How long one call (or connecting) may take before it fails.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// "The maximum length of a message, including header, header alignment padding, and body is
/// 2 to the 27th power" ("Valid Names" / "Message Format").
const MAX_MESSAGE: usize = 1 << 27;
/// Nesting bound of container types (the spec allows 32 arrays and 32 structs deep).
const MAX_DEPTH: usize = 64;
/// Header flag NO_REPLY_EXPECTED ("Message Format": flags).
#[cfg(test)]
const NO_REPLY_EXPECTED: u8 = 0x1;

/// What went wrong talking to the bus.
#[derive(Debug)]
pub enum Error {
    /// The socket failed, closed, or timed out (`io::ErrorKind::TimedOut`).
    Io(io::Error),
    /// The peer sent something this client cannot read, or refused authentication.
    Protocol(String),
    /// The peer answered with an error message.
    Remote {
        /// The D-Bus error name, e.g. `org.freedesktop.systemd1.NoSuchUnit`.
        name: String,
        /// The error's text (its first string argument), may be empty.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Protocol(m) => write!(f, "D-Bus protocol error: {m}"),
            Error::Remote { name, message } if message.is_empty() => write!(f, "{name}"),
            Error::Remote { name, message } => write!(f, "{name}: {message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// Results of this module.
pub type Result<T> = std::result::Result<T, Error>;

fn protocol<T>(m: impl Into<String>) -> Result<T> {
    Err(Error::Protocol(m.into()))
}

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
fn split_type(sig: &str) -> Result<(&str, &str)> {
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
struct Enc {
    buf: Vec<u8>,
}

impl Enc {
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, n: u32) {
        self.pad(4);
        self.buf.extend(n.to_le_bytes());
    }

    fn string(&mut self, s: &str) -> Result<()> {
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

    fn signature(&mut self, s: &str) -> Result<()> {
        let n = u8::try_from(s.len()).or_else(|_| protocol("signature too long"))?;
        self.buf.push(n);
        self.buf.extend(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn put(&mut self, v: &Value) -> Result<()> {
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
struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Dec<'a> {
    fn align(&mut self, a: usize) -> Result<()> {
        let p = self.pos.next_multiple_of(a);
        if p > self.buf.len() {
            return protocol("truncated value (padding)");
        }
        self.pos = p;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return protocol("truncated value");
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.align(N)?;
        let mut a: [u8; N] = self.take(N)?.try_into().expect("N bytes");
        if !self.big {
            a.reverse();
        }
        // `a` is now big-endian.
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.fixed()?))
    }

    fn text(&mut self, n: usize) -> Result<String> {
        let bytes = self.take(n)?;
        if self.take(1)? != [0] {
            return protocol("string not NUL-terminated");
        }
        String::from_utf8(bytes.to_vec()).or_else(|_| protocol("string is not UTF-8"))
    }

    fn value(&mut self, sig: &str, depth: usize) -> Result<Value> {
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
    fn values(&mut self, mut sig: &str) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        while !sig.is_empty() {
            let (t, rest) = split_type(sig)?;
            out.push(self.value(t, 0)?);
            sig = rest;
        }
        Ok(out)
    }
}

/// The message types ("Message Format": message type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// 1
    MethodCall,
    /// 2
    MethodReturn,
    /// 3
    Error,
    /// 4
    Signal,
    /// A type this client does not know; "must be ignored".
    Other(u8),
}

impl MessageType {
    fn code(self) -> u8 {
        match self {
            MessageType::MethodCall => 1,
            MessageType::MethodReturn => 2,
            MessageType::Error => 3,
            MessageType::Signal => 4,
            MessageType::Other(n) => n,
        }
    }

    fn from_code(n: u8) -> Self {
        match n {
            1 => MessageType::MethodCall,
            2 => MessageType::MethodReturn,
            3 => MessageType::Error,
            4 => MessageType::Signal,
            n => MessageType::Other(n),
        }
    }
}

/// One D-Bus message: header fields and the marshalled body.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// What kind of message.
    pub kind: MessageType,
    /// Header flags.
    pub flags: u8,
    /// The sender's serial (set by [`Connection::send`]).
    pub serial: u32,
    /// PATH (1)
    pub path: Option<String>,
    /// INTERFACE (2)
    pub interface: Option<String>,
    /// MEMBER (3)
    pub member: Option<String>,
    /// ERROR_NAME (4)
    pub error_name: Option<String>,
    /// REPLY_SERIAL (5)
    pub reply_serial: Option<u32>,
    /// DESTINATION (6)
    pub destination: Option<String>,
    /// SENDER (7), set by the bus.
    pub sender: Option<String>,
    /// SIGNATURE (8) of the body; empty for no body.
    pub signature: String,
    /// The body, marshalled in the message's byte order.
    pub body: Vec<u8>,
    big_endian: bool,
}

impl Message {
    /// An empty message of `kind`.
    pub fn new(kind: MessageType) -> Self {
        Message {
            kind,
            flags: 0,
            serial: 0,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            reply_serial: None,
            destination: None,
            sender: None,
            signature: String::new(),
            body: Vec::new(),
            big_endian: false,
        }
    }

    /// A method call with `args` as its body.
    pub fn method_call(
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[Value],
    ) -> Result<Self> {
        let mut m = Message::new(MessageType::MethodCall);
        m.destination = Some(destination.into());
        m.path = Some(path.into());
        m.interface = Some(interface.into());
        m.member = Some(member.into());
        m.set_args(args)?;
        Ok(m)
    }

    /// Marshals `args` as the body (little-endian) and sets SIGNATURE.
    pub fn set_args(&mut self, args: &[Value]) -> Result<()> {
        let mut e = Enc::default();
        for a in args {
            e.put(a)?;
        }
        self.signature = args.iter().map(Value::signature).collect();
        self.body = e.buf;
        self.big_endian = false;
        Ok(())
    }

    /// The body's values, per SIGNATURE.
    pub fn args(&self) -> Result<Vec<Value>> {
        let mut d = Dec {
            buf: &self.body,
            pos: 0,
            big: self.big_endian,
        };
        let v = d.values(&self.signature)?;
        if d.pos != self.body.len() {
            return protocol("body longer than its signature");
        }
        Ok(v)
    }

    /// The message on the wire, little-endian ("Message Format": a fixed 12-byte start, the
    /// header fields as `a(yv)`, padding to 8, the body).
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.big_endian {
            return protocol("re-encoding a big-endian message is not supported");
        }
        let body_len = u32::try_from(self.body.len()).or_else(|_| protocol("body too long"))?;
        let mut e = Enc::default();
        e.buf.extend([b'l', self.kind.code(), self.flags, 1]);
        e.u32(body_len);
        e.u32(self.serial);
        let field = |code: u8, v: Value| {
            Value::Struct(vec![Value::Byte(code), Value::Variant(Box::new(v))])
        };
        let s = |o: &Option<String>| o.clone().map(Value::Str);
        let mut fields = Vec::new();
        let header: [(u8, Option<Value>); 8] = [
            (1, self.path.clone().map(Value::ObjectPath)),
            (2, s(&self.interface)),
            (3, s(&self.member)),
            (4, s(&self.error_name)),
            (5, self.reply_serial.map(Value::U32)),
            (6, s(&self.destination)),
            (7, s(&self.sender)),
            (
                8,
                (!self.signature.is_empty()).then(|| Value::Signature(self.signature.clone())),
            ),
        ];
        for (code, v) in header {
            if let Some(v) = v {
                fields.push(field(code, v));
            }
        }
        e.put(&Value::Array("(yv)".into(), fields))?;
        // "The length of the header must be a multiple of 8 ... the body starts on an
        // 8-aligned boundary."
        e.pad(8);
        e.buf.extend(&self.body);
        if e.buf.len() > MAX_MESSAGE {
            return protocol("message too long");
        }
        Ok(e.buf)
    }

    /// The full length of the message whose first 16 bytes are `start`.
    fn frame_len(start: &[u8; 16]) -> Result<usize> {
        let big = match start[0] {
            b'l' => false,
            b'B' => true,
            c => return protocol(format!("unknown byte order {c:#x}")),
        };
        let num = |b: &[u8]| {
            let a: [u8; 4] = b.try_into().expect("4 bytes");
            (if big {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }) as usize
        };
        let (body, fields) = (num(&start[4..8]), num(&start[12..16]));
        let total = (16 + fields).next_multiple_of(8) + body;
        if total > MAX_MESSAGE {
            return protocol(format!("message of {total} bytes exceeds the limit"));
        }
        Ok(total)
    }

    /// Parses one complete message.
    pub fn decode(bytes: &[u8]) -> Result<Message> {
        let Some(start) = bytes.first_chunk::<16>() else {
            return protocol("message shorter than its fixed header");
        };
        if Message::frame_len(start)? != bytes.len() {
            return protocol("message length does not match its header");
        }
        let mut d = Dec {
            buf: bytes,
            pos: 4,
            big: bytes[0] == b'B',
        };
        if bytes[3] != 1 {
            return protocol(format!("protocol version {}", bytes[3]));
        }
        let mut m = Message::new(MessageType::from_code(bytes[1]));
        m.flags = bytes[2];
        m.big_endian = d.big;
        let body_len = d.u32()? as usize;
        m.serial = d.u32()?;
        let Value::Array(_, fields) = d.value("a(yv)", 0)? else {
            unreachable!("an array signature decodes to an array")
        };
        for f in fields {
            let Value::Struct(mut kv) = f else {
                unreachable!("(yv) decodes to a struct")
            };
            let (Some(v), Some(Value::Byte(code))) = (kv.pop(), kv.pop()) else {
                return protocol("bad header field");
            };
            let v = v.into_inner();
            let text = || v.as_str().map(str::to_string);
            // "Header fields with an unknown or unexpected field code must be ignored."
            match code {
                1 => m.path = text(),
                2 => m.interface = text(),
                3 => m.member = text(),
                4 => m.error_name = text(),
                5 => m.reply_serial = v.as_u32(),
                6 => m.destination = text(),
                7 => m.sender = text(),
                8 => m.signature = text().unwrap_or_default(),
                _ => {}
            }
        }
        d.align(8)?;
        m.body = d.take(body_len)?.to_vec();
        let required = match m.kind {
            MessageType::MethodCall => m.path.is_some() && m.member.is_some(),
            MessageType::Signal => m.path.is_some() && m.interface.is_some() && m.member.is_some(),
            MessageType::Error => m.error_name.is_some() && m.reply_serial.is_some(),
            MessageType::MethodReturn => m.reply_serial.is_some(),
            MessageType::Other(_) => true,
        };
        if !required {
            return protocol(format!(
                "{:?} message lacks a required header field",
                m.kind
            ));
        }
        Ok(m)
    }
}

/// The fuzz target's check: whatever the bytes, decoding and reading the body never panic, and
/// a message that decoded encodes again into one that decodes to the same message.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_message(bytes: &[u8]) -> bool {
    let Ok(m) = Message::decode(bytes) else {
        return false;
    };
    let args = m.args();
    if let Ok(again) = m.encode() {
        let m2 = Message::decode(&again).expect("a re-encoded message decodes");
        assert_eq!(m2, m, "re-encoding changed the message");
        assert_eq!(m2.args().ok(), args.ok(), "re-encoding changed the body");
    }
    true
}

/// Where a bus listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusAddress {
    /// `unix:path=…`
    Path(PathBuf),
    /// `unix:abstract=…` (Linux abstract socket namespace)
    Abstract(Vec<u8>),
}

/// Parses the first entry of a `;`-separated D-Bus address list ("Server Addresses": keys and
/// values separated by `,` and `=`, values `%`-escaped); only the `unix` transport with `path`
/// or `abstract` is supported.
pub fn parse_address(address: &str) -> Result<BusAddress> {
    let first = address.split(';').next().unwrap_or_default().trim();
    let Some((transport, rest)) = first.split_once(':') else {
        return protocol(format!("address {first:?} has no transport"));
    };
    if transport != "unix" {
        return protocol(format!(
            "transport {transport:?} is not supported (only unix)"
        ));
    }
    for kv in rest.split(',') {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        let v = unescape(v)?;
        match k {
            "path" => {
                use std::os::unix::ffi::OsStringExt;
                return Ok(BusAddress::Path(std::ffi::OsString::from_vec(v).into()));
            }
            "abstract" => return Ok(BusAddress::Abstract(v)),
            _ => {}
        }
    }
    protocol(format!(
        "address {first:?} names no path= or abstract= socket"
    ))
}

fn unescape(v: &str) -> Result<Vec<u8>> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            let Some(n) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
                return protocol(format!("bad %-escape in address value {v:?}"));
            };
            out.push(n);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// An authenticated connection to a message bus.
#[derive(Debug)]
pub struct Connection {
    stream: UnixStream,
    /// Bytes read but not yet consumed.
    rbuf: Vec<u8>,
    next_serial: u32,
    unique_name: String,
    timeout: Duration,
}

impl Connection {
    /// Connects to `address`, authenticates and says Hello, each step within `timeout`.
    pub fn connect(address: &str, timeout: Duration) -> Result<Connection> {
        let stream = match parse_address(address)? {
            BusAddress::Path(p) => UnixStream::connect(p)?,
            BusAddress::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                UnixStream::connect_addr(&a)?
            }
        };
        stream.set_write_timeout(Some(timeout))?;
        let mut c = Connection {
            stream,
            rbuf: Vec::new(),
            next_serial: 1,
            unique_name: String::new(),
            timeout,
        };
        c.authenticate()?;
        // "Before an application is able to send messages to other applications it must send
        // the org.freedesktop.DBus.Hello message" ("Message Bus Specification").
        let reply = c.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "Hello",
            &[],
        )?;
        c.unique_name = match reply.first().and_then(Value::as_str) {
            Some(n) => n.to_string(),
            None => return protocol("Hello returned no name"),
        };
        Ok(c)
    }

    /// SASL EXTERNAL ("Authentication Protocol"): a NUL byte, `AUTH EXTERNAL` with the
    /// hex-encoded ASCII decimal uid, `OK <guid>` back, then `BEGIN`.
    fn authenticate(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let uid = rustix::process::getuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.stream
            .write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let line = self.read_line(deadline)?;
        if !line.starts_with("OK ") {
            return protocol(format!("authentication refused: {line:?}"));
        }
        self.stream.write_all(b"BEGIN\r\n")?;
        Ok(())
    }

    fn read_line(&mut self, deadline: Instant) -> Result<String> {
        loop {
            if let Some(i) = self.rbuf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.rbuf[..i]).into_owned();
                self.rbuf.drain(..i + 2);
                return Ok(line);
            }
            if self.rbuf.len() > 16 * 1024 {
                return protocol("authentication line too long");
            }
            self.fill(deadline)?;
        }
    }

    /// Reads more bytes into the buffer, failing with `TimedOut` at `deadline`.
    fn fill(&mut self, deadline: Instant) -> Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        let timed_out = || {
            Error::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer from the bus in time",
            ))
        };
        if left.is_zero() {
            return Err(timed_out());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(Error::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the bus closed the connection",
            ))),
            Ok(n) => {
                self.rbuf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(timed_out())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn read_message(&mut self, deadline: Instant) -> Result<Message> {
        while self.rbuf.len() < 16 {
            self.fill(deadline)?;
        }
        let start: &[u8; 16] = self.rbuf.first_chunk().expect("16 bytes");
        let len = Message::frame_len(start)?;
        while self.rbuf.len() < len {
            self.fill(deadline)?;
        }
        let m = Message::decode(&self.rbuf[..len]);
        self.rbuf.drain(..len);
        m
    }

    #[cfg(test)]
    /// The next message from the bus, waiting at most `timeout`.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Message> {
        self.read_message(Instant::now() + timeout)
    }

    /// Sends `msg` with the next serial, which it returns.
    pub fn send(&mut self, mut msg: Message) -> Result<u32> {
        msg.serial = self.next_serial;
        // "The serial ... must not be zero."
        self.next_serial = self.next_serial.checked_add(1).unwrap_or(1);
        self.stream.write_all(&msg.encode()?)?;
        Ok(msg.serial)
    }

    /// Calls a method and waits (within the connection's timeout) for its reply, skipping
    /// signals and other messages; an error reply becomes [`Error::Remote`].
    pub fn call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[Value],
    ) -> Result<Vec<Value>> {
        let deadline = Instant::now() + self.timeout;
        let serial = self.send(Message::method_call(
            destination,
            path,
            interface,
            member,
            args,
        )?)?;
        loop {
            let m = self.read_message(deadline)?;
            if m.reply_serial != Some(serial) {
                continue;
            }
            match m.kind {
                MessageType::MethodReturn => return m.args(),
                MessageType::Error => {
                    let text = m
                        .args()
                        .ok()
                        .and_then(|a| a.first().and_then(|v| v.as_str().map(str::to_string)));
                    return Err(Error::Remote {
                        name: m.error_name.unwrap_or_default(),
                        message: text.unwrap_or_default(),
                    });
                }
                _ => continue,
            }
        }
    }

    #[cfg(test)]
    /// Asks the bus for `name` (RequestName with DBUS_NAME_FLAG_DO_NOT_QUEUE) and fails unless
    /// this connection becomes (or already is) its primary owner.
    pub fn request_name(&mut self, name: &str) -> Result<()> {
        let reply = self.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "RequestName",
            &[Value::Str(name.into()), Value::U32(4)],
        )?;
        // 1 = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER, 4 = ALREADY_OWNER.
        match reply.first().and_then(Value::as_u32) {
            Some(1 | 4) => Ok(()),
            other => protocol(format!("RequestName {name:?} answered {other:?}")),
        }
    }

    #[cfg(test)]
    fn reply_to(&mut self, to: &Message, mut m: Message) -> Result<()> {
        if to.flags & NO_REPLY_EXPECTED != 0 {
            return Ok(());
        }
        m.reply_serial = Some(to.serial);
        m.destination = to.sender.clone();
        self.send(m).map(|_| ())
    }

    #[cfg(test)]
    /// Answers method call `to` with `args`.
    pub fn reply(&mut self, to: &Message, args: &[Value]) -> Result<()> {
        let mut m = Message::new(MessageType::MethodReturn);
        m.set_args(args)?;
        self.reply_to(to, m)
    }

    #[cfg(test)]
    /// Answers method call `to` with error `name` and `text`.
    pub fn reply_error(&mut self, to: &Message, name: &str, text: &str) -> Result<()> {
        let mut m = Message::new(MessageType::Error);
        m.error_name = Some(name.into());
        m.set_args(&[Value::Str(text.into())])?;
        self.reply_to(to, m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::Str(x.into())
    }

    /// A method call laid out by hand from "Message Format" and "Marshaling (Wire Format)".
    #[test]
    fn a_method_call_has_the_bytes_of_the_spec() {
        let mut m = Message::method_call("d.e", "/p", "", "M", &[s("hi"), Value::U32(5)]).unwrap();
        m.interface = None;
        m.serial = 7;
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            b'l', 1, 0, 1,          // little-endian, METHOD_CALL, no flags, version 1
            12, 0, 0, 0,            // body length
            7, 0, 0, 0,             // serial
            56, 0, 0, 0,            // header field array length (from offset 16 to 72)
            // offset 16: PATH, variant "o", "/p"
            1, 1, b'o', 0, 2, 0, 0, 0, b'/', b'p', 0, 0, 0, 0, 0, 0,
            // offset 32: MEMBER, variant "s", "M"
            3, 1, b's', 0, 1, 0, 0, 0, b'M', 0, 0, 0, 0, 0, 0, 0,
            // offset 48: DESTINATION, variant "s", "d.e"
            6, 1, b's', 0, 3, 0, 0, 0, b'd', b'.', b'e', 0, 0, 0, 0, 0,
            // offset 64: SIGNATURE, variant "g", "su"; the header ends at 72, 8-aligned
            8, 1, b'g', 0, 2, b's', b'u', 0,
            // body: "hi", padding to 4, uint32 5
            2, 0, 0, 0, b'h', b'i', 0, 0, 5, 0, 0, 0,
        ];
        let got = m.encode().unwrap();
        assert_eq!(got, want);
        let back = Message::decode(&got).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.args().unwrap(), vec![s("hi"), Value::U32(5)]);
    }

    #[test]
    fn values_are_aligned_to_their_size() {
        let mut m = Message::new(MessageType::MethodReturn);
        m.set_args(&[
            Value::Byte(9),
            Value::U32(1),
            Value::Byte(8),
            Value::U64(2),
            Value::Byte(7),
            Value::Struct(vec![Value::Byte(6)]),
        ])
        .unwrap();
        assert_eq!(m.signature, "yuyty(y)");
        #[rustfmt::skip]
        let want = [
            9, 0, 0, 0, 1, 0, 0, 0,
            8, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
            7, 0, 0, 0, 0, 0, 0, 0, 6,
        ];
        assert_eq!(m.body, want);
        // Array: length excludes the padding between it and the 8-aligned first element.
        m.set_args(&[Value::Array("t".into(), vec![Value::U64(1)])])
            .unwrap();
        assert_eq!(m.body, [8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            m.args().unwrap(),
            [Value::Array("t".into(), vec![Value::U64(1)])]
        );
        m.set_args(&[Value::Array("s".into(), vec![])]).unwrap();
        assert_eq!(
            (m.signature.as_str(), m.body.as_slice()),
            ("as", &[0u8, 0, 0, 0][..])
        );
    }

    #[test]
    fn variants_decode_in_either_byte_order() {
        let mut m = Message::new(MessageType::MethodReturn);
        m.signature = "v".into();
        // Variant: signature "s", padding to 4, "active".
        m.body = vec![
            1, b's', 0, 0, 6, 0, 0, 0, b'a', b'c', b't', b'i', b'v', b'e', 0,
        ];
        assert_eq!(m.args().unwrap(), [Value::Variant(Box::new(s("active")))]);
        // Variant holding (uo), as systemd's Unit.Job property: the struct is 8-aligned.
        m.body = vec![
            4, b'(', b'u', b'o', b')', 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, b'/', b'j', 0,
        ];
        let want = Value::Struct(vec![Value::U32(3), Value::ObjectPath("/j".into())]);
        assert_eq!(m.args().unwrap(), [Value::Variant(Box::new(want.clone()))]);
        m.big_endian = true;
        m.body = vec![
            4, b'(', b'u', b'o', b')', 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 2, b'/', b'j', 0,
        ];
        assert_eq!(m.args().unwrap(), [Value::Variant(Box::new(want))]);
        // A variant whose signature is two types, and truncated bodies, are refused.
        m.big_endian = false;
        m.body = vec![2, b's', b's', 0];
        assert!(matches!(m.args(), Err(Error::Protocol(_))));
        m.body = vec![1, b's', 0, 0, 60, 0, 0, 0, b'a'];
        assert!(matches!(m.args(), Err(Error::Protocol(_))));
    }

    #[test]
    fn a_big_endian_message_is_read() {
        #[rustfmt::skip]
        let bytes = [
            b'B', 2, 0, 1,          // big-endian, METHOD_RETURN, no flags, version 1
            0, 0, 0, 4,             // body length
            0, 0, 0, 9,             // serial
            0, 0, 0, 15,            // header field array length (16 to 31)
            5, 1, b'u', 0, 0, 0, 0, 3,      // REPLY_SERIAL 3
            8, 1, b'g', 0, 1, b'u', 0, 0,   // SIGNATURE "u", then padding to 32
            0, 0, 0, 42,            // body: uint32 42
        ];
        let m = Message::decode(&bytes).unwrap();
        assert_eq!(m.kind, MessageType::MethodReturn);
        assert_eq!((m.serial, m.reply_serial), (9, Some(3)));
        assert_eq!(m.args().unwrap(), [Value::U32(42)]);
        assert!(m.encode().is_err(), "only little-endian is written");
        // A frame whose length disagrees with its header is refused.
        assert!(matches!(
            Message::decode(&bytes[..35]),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn addresses_parse() {
        assert_eq!(
            parse_address("unix:path=/run/dbus/system_bus_socket").unwrap(),
            BusAddress::Path("/run/dbus/system_bus_socket".into())
        );
        assert_eq!(
            parse_address("unix:abstract=/tmp/x%2cy,guid=00;unix:path=/b").unwrap(),
            BusAddress::Abstract(b"/tmp/x,y".to_vec())
        );
        assert!(parse_address("tcp:host=localhost,port=1").is_err());
        assert!(parse_address("unix:tmpdir=/tmp").is_err());
        assert!(parse_address("unix:path=%zz").is_err());
    }

    #[test]
    fn signatures_split_into_complete_types() {
        assert_eq!(split_type("a{sv}u").unwrap(), ("a{sv}", "u"));
        assert_eq!(split_type("(ua(ss))x").unwrap(), ("(ua(ss))", "x"));
        assert!(split_type("(u").is_err());
        assert!(split_type("a").is_err());
        assert!(split_type("z").is_err());
    }

    #[test]
    fn a_silent_bus_times_out_instead_of_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("bus");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let t = Instant::now();
        let e = Connection::connect(
            &format!("unix:path={}", sock.display()),
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::Io(io) if io.kind() == io::ErrorKind::TimedOut),
            "{e}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(listener);
    }
}
