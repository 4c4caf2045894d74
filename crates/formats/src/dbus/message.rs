//! D-Bus messages: header fields and body ("Message Format").

use super::marshal::{Dec, Enc, Value};
use super::{MAX_MESSAGE, Result, protocol};

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
    /// The sender's serial (the connection sets it when sending).
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
    pub(super) big_endian: bool,
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
    pub fn frame_len(start: &[u8; 16]) -> Result<usize> {
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
/// a message that decoded encodes again into one that decodes to the same message; whether
/// `bytes` decoded.
pub fn decodes_and_round_trips(bytes: &[u8]) -> bool {
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
