//! iSCSI PDUs of a discovery session (RFC 7143): Login, Text and Logout requests and their
//! responses, and the `key=value` text they carry. Pure encode/decode, no I/O.

use md5::{Digest, Md5};

/// Length of the Basic Header Segment every PDU starts with.
pub const BHS_LEN: usize = 48;

/// Opcodes (RFC 7143 §11.1.1), without the immediate bit.
pub mod opcode {
    /// Login Request.
    pub const LOGIN_REQ: u8 = 0x03;
    /// Text Request.
    pub const TEXT_REQ: u8 = 0x04;
    /// Logout Request.
    pub const LOGOUT_REQ: u8 = 0x06;
    /// Login Response.
    pub const LOGIN_RESP: u8 = 0x23;
    /// Text Response.
    pub const TEXT_RESP: u8 = 0x24;
    /// Logout Response.
    pub const LOGOUT_RESP: u8 = 0x26;
    /// Reject.
    pub const REJECT: u8 = 0x3f;
}

/// The immediate-delivery bit of byte 0.
const IMMEDIATE: u8 = 0x40;
/// Final / Transit bit of byte 1.
const FINAL: u8 = 0x80;
/// Continue bit of byte 1 (Login and Text).
const CONTINUE: u8 = 0x40;

/// Login stages (RFC 7143 §11.12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Security negotiation.
    Security = 0,
    /// Login operational negotiation.
    Operational = 1,
    /// Full feature phase.
    FullFeature = 3,
}

impl Stage {
    fn from_bits(b: u8) -> Option<Self> {
        match b & 3 {
            0 => Some(Self::Security),
            1 => Some(Self::Operational),
            3 => Some(Self::FullFeature),
            _ => None,
        }
    }
}

/// A PDU as read from the wire: its header and data segment (padding removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu {
    /// The 48-byte header.
    pub bhs: [u8; BHS_LEN],
    /// The data segment, `DataSegmentLength` bytes.
    pub data: Vec<u8>,
}

/// A decoding failure: the peer sent something this client does not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl Pdu {
    /// The opcode, without the immediate bit.
    pub fn opcode(&self) -> u8 {
        self.bhs[0] & 0x3f
    }
    /// Byte 1: the flags.
    pub fn flags(&self) -> u8 {
        self.bhs[1]
    }
    /// Initiator Task Tag.
    pub fn itt(&self) -> u32 {
        be32(&self.bhs[16..20])
    }
    /// Target Transfer Tag (Text Response).
    pub fn ttt(&self) -> u32 {
        be32(&self.bhs[20..24])
    }
    /// StatSN (responses).
    pub fn stat_sn(&self) -> u32 {
        be32(&self.bhs[24..28])
    }
    /// TSIH (Login Response).
    pub fn tsih(&self) -> u16 {
        u16::from_be_bytes([self.bhs[14], self.bhs[15]])
    }
    /// Status-Class and Status-Detail (Login Response).
    pub fn login_status(&self) -> (u8, u8) {
        (self.bhs[36], self.bhs[37])
    }
    /// Transit bit (Login Response) / Final bit (Text Response).
    pub fn is_final(&self) -> bool {
        self.flags() & FINAL != 0
    }
    /// Continue bit: more text follows in the next PDU.
    pub fn is_continued(&self) -> bool {
        self.flags() & CONTINUE != 0
    }
    /// Next stage (Login Response).
    pub fn next_stage(&self) -> Option<Stage> {
        Stage::from_bits(self.flags())
    }
    /// Response byte of a Logout Response.
    pub fn logout_response(&self) -> u8 {
        self.bhs[2]
    }

    /// The header plus the data segment padded to a multiple of 4 bytes (no digests).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(BHS_LEN + self.data.len() + 3);
        out.extend_from_slice(&self.bhs);
        out.extend_from_slice(&self.data);
        out.resize(out.len() + padding(self.data.len()), 0);
        out
    }

    /// Parses a header; returns the header and the data segment length that follows it.
    /// Refuses additional header segments (never negotiated here) and segments over `max_data`.
    pub fn decode_header(
        bhs: [u8; BHS_LEN],
        max_data: usize,
    ) -> Result<(Self, usize), ProtocolError> {
        if bhs[4] != 0 {
            return Err(ProtocolError(format!(
                "unexpected additional header segments ({} words)",
                bhs[4]
            )));
        }
        let len = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]) as usize;
        if len > max_data {
            return Err(ProtocolError(format!(
                "data segment of {len} bytes exceeds the {max_data}-byte limit"
            )));
        }
        Ok((
            Self {
                bhs,
                data: Vec::new(),
            },
            len,
        ))
    }
}

/// Bytes of padding after a data segment of `len` bytes.
pub fn padding(len: usize) -> usize {
    (4 - len % 4) % 4
}

fn header(op: u8, flags: u8, data: &[u8]) -> [u8; BHS_LEN] {
    let mut b = [0u8; BHS_LEN];
    b[0] = op;
    b[1] = flags;
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes();
    b[5..8].copy_from_slice(&len[1..4]);
    b
}

/// Fields of a Login Request.
#[derive(Debug, Clone)]
pub struct LoginRequest {
    /// Ask to move to the next stage (`T`).
    pub transit: bool,
    /// Current stage.
    pub current: Stage,
    /// Next stage (meaningful with `transit`).
    pub next: Stage,
    /// Initiator part of the session ID.
    pub isid: [u8; 6],
    /// Target session handle: 0 until the target assigns one.
    pub tsih: u16,
    /// Initiator Task Tag.
    pub itt: u32,
    /// CmdSN.
    pub cmd_sn: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
    /// `key=value` text.
    pub text: Vec<u8>,
}

impl LoginRequest {
    /// The PDU (immediate, version 0, CID 0).
    pub fn to_pdu(&self) -> Pdu {
        let mut flags = ((self.current as u8) << 2) | self.next as u8;
        if self.transit {
            flags |= FINAL;
        } else {
            flags &= !3; // NSG is reserved without T
        }
        let mut b = header(opcode::LOGIN_REQ | IMMEDIATE, flags, &self.text);
        b[8..14].copy_from_slice(&self.isid);
        b[14..16].copy_from_slice(&self.tsih.to_be_bytes());
        b[16..20].copy_from_slice(&self.itt.to_be_bytes());
        b[24..28].copy_from_slice(&self.cmd_sn.to_be_bytes());
        b[28..32].copy_from_slice(&self.exp_stat_sn.to_be_bytes());
        Pdu {
            bhs: b,
            data: self.text.clone(),
        }
    }
}

/// A Text Request (non-immediate, final). `ttt` is `0xffffffff` to start, or the Target Transfer
/// Tag of the previous response to ask for the rest of a long answer.
pub fn text_request(itt: u32, ttt: u32, cmd_sn: u32, exp_stat_sn: u32, text: &[u8]) -> Pdu {
    let mut b = header(opcode::TEXT_REQ, FINAL, text);
    b[16..20].copy_from_slice(&itt.to_be_bytes());
    b[20..24].copy_from_slice(&ttt.to_be_bytes());
    b[24..28].copy_from_slice(&cmd_sn.to_be_bytes());
    b[28..32].copy_from_slice(&exp_stat_sn.to_be_bytes());
    Pdu {
        bhs: b,
        data: text.to_vec(),
    }
}

/// A Logout Request closing the session (immediate, reason 0, CID 0).
pub fn logout_request(itt: u32, cmd_sn: u32, exp_stat_sn: u32) -> Pdu {
    let mut b = header(opcode::LOGOUT_REQ | IMMEDIATE, FINAL, &[]);
    b[16..20].copy_from_slice(&itt.to_be_bytes());
    b[24..28].copy_from_slice(&cmd_sn.to_be_bytes());
    b[28..32].copy_from_slice(&exp_stat_sn.to_be_bytes());
    Pdu {
        bhs: b,
        data: Vec::new(),
    }
}

/// Encodes `key=value` pairs, each NUL-terminated.
pub fn encode_text(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Decodes NUL-separated `key=value` pairs, in order; a pair without `=` is a protocol error.
pub fn decode_text(data: &[u8]) -> Result<Vec<(String, String)>, ProtocolError> {
    data.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let s = String::from_utf8_lossy(s);
            match s.split_once('=') {
                Some((k, v)) => Ok((k.to_string(), v.to_string())),
                None => Err(ProtocolError(format!("text without '=': {s:?}"))),
            }
        })
        .collect()
}

/// The value of `key` in decoded text (the last one wins).
pub fn value<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// A target from a `SendTargets` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredTarget {
    /// `TargetName`: the IQN.
    pub name: String,
    /// `TargetAddress` values that followed it (`address:port,tpgt`).
    pub addresses: Vec<String>,
}

/// Groups a `SendTargets` answer: each `TargetName` starts a target, the `TargetAddress` keys
/// after it belong to it. Other keys are ignored; addresses before any name are dropped.
pub fn send_targets(pairs: &[(String, String)]) -> Vec<DiscoveredTarget> {
    let mut out: Vec<DiscoveredTarget> = Vec::new();
    for (k, v) in pairs {
        match k.as_str() {
            "TargetName" => out.push(DiscoveredTarget {
                name: v.clone(),
                addresses: Vec::new(),
            }),
            "TargetAddress" => {
                if let Some(t) = out.last_mut() {
                    t.addresses.push(v.clone());
                }
            }
            _ => {}
        }
    }
    out
}

/// Decodes a CHAP binary value: `0x`/`0X` hex or `0b`/`0B` base64 (RFC 7143 §6.1).
pub fn decode_binary(v: &str) -> Result<Vec<u8>, ProtocolError> {
    let bad = || ProtocolError(format!("malformed binary value {v:?}"));
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        if hex.len() % 2 != 0 || hex.is_empty() {
            return Err(bad());
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
            .collect()
    } else if let Some(b64) = v.strip_prefix("0b").or_else(|| v.strip_prefix("0B")) {
        decode_base64(b64).ok_or_else(bad)
    } else {
        Err(bad())
    }
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Encodes bytes as a `0x` hex binary value.
pub fn encode_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + bytes.len() * 2);
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The CHAP response (RFC 1994, algorithm 5 = MD5): `MD5(identifier || secret || challenge)`.
pub fn chap_response(identifier: u8, secret: &[u8], challenge: &[u8]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update([identifier]);
    h.update(secret);
    h.update(challenge);
    h.finalize().into()
}

/// What a Login Response's Status-Class / Status-Detail mean (RFC 7143 §11.13.5), for messages.
pub fn login_status_text(class: u8, detail: u8) -> &'static str {
    match (class, detail) {
        (0, _) => "success",
        (1, _) => "redirected",
        (2, 1) => "authentication failed",
        (2, 2) => "authorization failure: the initiator may not access this target",
        (2, 3) => "target not found",
        (2, 4) => "target removed",
        (2, 5) => "unsupported version",
        (2, 7) => "missing parameter",
        (2, 10) => "session type not supported",
        (2, _) => "initiator error",
        (3, 1) => "target error",
        (3, 2) => "service unavailable",
        (3, 3) => "out of resources",
        (3, _) => "target error",
        _ => "unknown status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_requests_encode_every_field() {
        let req = LoginRequest {
            transit: true,
            current: Stage::Security,
            next: Stage::Operational,
            isid: [0x40, 0, 1, 2, 3, 4],
            tsih: 0,
            itt: 7,
            cmd_sn: 9,
            exp_stat_sn: 0,
            text: encode_text(&[("SessionType", "Discovery")]),
        };
        let bytes = req.to_pdu().encode();
        assert_eq!(bytes[0], 0x43, "immediate login");
        assert_eq!(bytes[1], 0x81, "T, CSG 0, NSG 1");
        assert_eq!(&bytes[5..8], &[0, 0, 22]);
        assert_eq!(&bytes[8..14], &[0x40, 0, 1, 2, 3, 4]);
        assert_eq!(&bytes[16..20], &7u32.to_be_bytes());
        assert_eq!(&bytes[24..28], &9u32.to_be_bytes());
        assert_eq!(bytes.len(), 48 + 24, "22 bytes padded to 24");
        assert_eq!(&bytes[48..70], b"SessionType=Discovery\0");

        let no_transit = LoginRequest {
            transit: false,
            next: Stage::FullFeature,
            ..req
        };
        assert_eq!(no_transit.to_pdu().bhs[1], 0x00, "NSG reserved without T");
        let op = LoginRequest {
            transit: true,
            current: Stage::Operational,
            next: Stage::FullFeature,
            ..no_transit
        };
        assert_eq!(op.to_pdu().bhs[1], 0x87);
    }

    #[test]
    fn text_and_logout_requests_encode() {
        let t = text_request(5, 0xffff_ffff, 3, 2, b"SendTargets=All\0");
        assert_eq!(t.bhs[0], 0x04);
        assert_eq!(t.bhs[1], 0x80);
        assert_eq!(t.ttt(), 0xffff_ffff);
        assert_eq!(t.itt(), 5);
        assert_eq!(t.encode().len(), 48 + 16);
        let l = logout_request(6, 4, 3);
        assert_eq!((l.bhs[0], l.bhs[1]), (0x46, 0x80));
        assert_eq!(l.encode().len(), 48);
    }

    #[test]
    fn headers_decode_and_refuse_oversized_or_ahs() {
        let mut bhs = [0u8; BHS_LEN];
        bhs[0] = opcode::LOGIN_RESP;
        bhs[1] = 0x87;
        bhs[7] = 10;
        bhs[14..16].copy_from_slice(&0x1234u16.to_be_bytes());
        bhs[24..28].copy_from_slice(&42u32.to_be_bytes());
        bhs[36] = 2;
        bhs[37] = 1;
        let (p, len) = Pdu::decode_header(bhs, 100).unwrap();
        assert_eq!(len, 10);
        assert_eq!(p.opcode(), opcode::LOGIN_RESP);
        assert!(p.is_final());
        assert_eq!(p.next_stage(), Some(Stage::FullFeature));
        assert_eq!(p.tsih(), 0x1234);
        assert_eq!(p.stat_sn(), 42);
        assert_eq!(p.login_status(), (2, 1));
        assert_eq!(login_status_text(2, 1), "authentication failed");
        assert!(Pdu::decode_header(bhs, 9).is_err(), "over the limit");
        bhs[4] = 1;
        assert!(Pdu::decode_header(bhs, 100).is_err(), "AHS refused");
        assert_eq!(
            (padding(0), padding(1), padding(4), padding(7)),
            (0, 3, 0, 1)
        );
    }

    #[test]
    fn text_decodes_in_order_and_groups_send_targets() {
        let data = b"TargetName=iqn.a\0TargetAddress=127.0.0.1:3260,1\0TargetAddress=[::1]:3260,1\0TargetName=iqn.b\0";
        let pairs = decode_text(data).unwrap();
        assert_eq!(pairs.len(), 4);
        assert_eq!(value(&pairs, "TargetName"), Some("iqn.b"));
        let t = send_targets(&pairs);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].name, "iqn.a");
        assert_eq!(t[0].addresses, ["127.0.0.1:3260,1", "[::1]:3260,1"]);
        assert!(t[1].addresses.is_empty());
        assert!(decode_text(b"novalue\0").is_err());
        assert_eq!(decode_text(b"").unwrap(), []);
        assert_eq!(
            encode_text(&[("A", "1"), ("B", "x=y")]),
            b"A=1\0B=x=y\0".to_vec()
        );
    }

    #[test]
    fn binary_values_decode_hex_and_base64() {
        assert_eq!(decode_binary("0x00ff10").unwrap(), [0, 255, 16]);
        assert_eq!(decode_binary("0XAB").unwrap(), [0xab]);
        assert_eq!(decode_binary("0bAP8Q").unwrap(), [0, 255, 16]);
        assert_eq!(decode_binary("0bAP8=").unwrap(), [0, 255]);
        for bad in ["ff", "0x", "0xf", "0xzz", "0b!!"] {
            assert!(decode_binary(bad).is_err(), "{bad}");
        }
        assert_eq!(encode_hex(&[0, 255, 16]), "0x00ff10");
    }

    #[test]
    fn chap_responses_are_md5_of_id_secret_challenge() {
        // MD5(0x01 || "secret" || 0x0102030405), computed independently.
        let r = chap_response(1, b"secret", &[1, 2, 3, 4, 5]);
        assert_eq!(encode_hex(&r), "0xad554409dd428bd604dbd0241164a508");
        // RFC 1321 vector through the same digest: MD5("abc").
        let abc: [u8; 16] = Md5::digest(b"abc").into();
        assert_eq!(encode_hex(&abc), "0x900150983cd24fb0d6963f7d28e17f72");
    }
}
