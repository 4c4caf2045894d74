//! A protobuf encoder driven by the wire contract (`tests/data/wire-contract.json`), the hostile
//! variants it fills requests with, and what a hostile request may get back.

use super::raw::{put_bytes, put_key, put_varint};
use std::collections::BTreeMap;
use std::path::Path;
use tonic::{Code, Status};

/// One field of a message in the contract.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub number: u64,
    pub ty: String,
    pub repeated: bool,
}

/// One RPC of one group-version.
#[derive(Debug, Clone)]
pub struct Rpc {
    pub group: String,
    pub version: String,
    /// `/<package>.<Service>/<Rpc>`.
    pub path: String,
    pub method: String,
    pub input: String,
}

/// The wire contract (`tests/data/wire-contract.json`): every group-version's messages and RPCs.
pub struct Contract {
    pub rpcs: Vec<Rpc>,
    /// Fully qualified message name -> fields.
    pub messages: BTreeMap<String, Vec<Field>>,
    /// Fully qualified enum names.
    pub enums: Vec<String>,
}

impl Contract {
    /// Reads the contract from the workspace's test data.
    pub fn load() -> Contract {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/wire-contract.json");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let mut c = Contract {
            rpcs: Vec::new(),
            messages: BTreeMap::new(),
            enums: Vec::new(),
        };
        for (gv, body) in v.as_object().expect("contract is an object") {
            let (group, version) = gv.split_once('/').expect("group/version keys");
            for (name, fields) in body["messages"].as_object().unwrap() {
                let fields = fields
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| Field {
                        name: f["name"].as_str().unwrap().to_string(),
                        number: f["number"].as_u64().unwrap(),
                        ty: f["type"].as_str().unwrap().to_string(),
                        repeated: f["repeated"].as_bool().unwrap_or(false),
                    })
                    .collect();
                c.messages.insert(name.clone(), fields);
            }
            c.enums
                .extend(body["enums"].as_object().unwrap().keys().cloned());
            for (service, rpcs) in body["services"].as_object().unwrap() {
                for (method, io) in rpcs.as_object().unwrap() {
                    c.rpcs.push(Rpc {
                        group: group.to_string(),
                        version: version.to_string(),
                        path: format!("/{service}/{method}"),
                        method: method.clone(),
                        input: io["input"].as_str().unwrap().to_string(),
                    });
                }
            }
        }
        c
    }

    /// Resolves a field type name used inside `package` to a fully qualified message or enum.
    fn qualify(&self, package: &str, ty: &str) -> String {
        if self.messages.contains_key(ty) || self.enums.iter().any(|e| e == ty) {
            ty.to_string()
        } else {
            format!("{package}.{ty}")
        }
    }

    /// Whether a message (or anything nested in it) has a string field.
    pub fn has_strings(&self, msg: &str, depth: usize) -> bool {
        let package = msg.split('.').next().unwrap_or_default();
        self.messages.get(msg).is_some_and(|fields| {
            fields.iter().any(|f| {
                f.ty == "string"
                    || f.ty.starts_with("map<string")
                    || f.ty.ends_with(",string>")
                    || (depth < 3 && self.has_strings(&self.qualify(package, &f.ty), depth + 1))
            })
        })
    }

    /// Encodes message `msg` with every field filled as `variant` says.
    pub fn encode(&self, msg: &str, variant: Variant) -> Vec<u8> {
        self.encode_depth(msg, variant, 0)
    }

    fn encode_depth(&self, msg: &str, variant: Variant, depth: usize) -> Vec<u8> {
        let mut out = Vec::new();
        if variant == Variant::Empty {
            return out;
        }
        if variant == Variant::Truncated {
            // A length-delimited field 1 that claims more bytes than follow.
            return vec![0x0a, 0x80, 0x01, b'x'];
        }
        let package = msg.split('.').next().unwrap_or_default();
        let fields = self.messages.get(msg).cloned().unwrap_or_default();
        for f in &fields {
            self.encode_field(&mut out, package, f.number, &f.ty, variant, depth);
            if f.repeated {
                // A second element, so list handling sees more than one.
                self.encode_field(&mut out, package, f.number, &f.ty, variant, depth);
            }
        }
        if variant == Variant::UnknownFields {
            put_bytes(&mut out, 999, b"unknown field");
            put_key(&mut out, 1000, 0);
            put_varint(&mut out, u64::MAX);
        }
        out
    }

    fn encode_field(
        &self,
        out: &mut Vec<u8>,
        package: &str,
        number: u64,
        ty: &str,
        variant: Variant,
        depth: usize,
    ) {
        if let Some(inner) = ty.strip_prefix("map<").and_then(|t| t.strip_suffix('>')) {
            let (k, v) = inner.split_once(',').expect("map<k,v>");
            let mut entry = Vec::new();
            self.encode_field(&mut entry, package, 1, k, variant, depth + 1);
            self.encode_field(&mut entry, package, 2, v, variant, depth + 1);
            put_bytes(out, number, &entry);
            return;
        }
        match ty {
            "string" | "bytes" => put_bytes(out, number, &variant.string()),
            "bool" => {
                put_key(out, number, 0);
                put_varint(out, 1);
            }
            "int32" | "int64" | "uint32" | "uint64" | "sint32" | "sint64" => {
                put_key(out, number, 0);
                put_varint(out, variant.number_for(ty));
            }
            "fixed32" | "sfixed32" | "float" => {
                put_key(out, number, 5);
                out.extend_from_slice(&(variant.number() as u32).to_le_bytes());
            }
            "fixed64" | "sfixed64" | "double" => {
                put_key(out, number, 1);
                out.extend_from_slice(&variant.number().to_le_bytes());
            }
            other => {
                let q = self.qualify(package, other);
                if self.enums.contains(&q) {
                    put_key(out, number, 0);
                    put_varint(out, variant.number());
                } else if depth < 3 {
                    let nested = self.encode_depth(&q, variant, depth + 1);
                    put_bytes(out, number, &nested);
                }
            }
        }
    }
}

/// How a hostile request fills its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No fields at all.
    Empty,
    /// Every number -1 (ten-byte varint), strings a short relative name.
    Negative,
    /// Every number `u64::MAX`/`2^32 + 7` style values past the field's range.
    Huge,
    /// Every string 1 MiB long.
    LongStrings,
    /// Every string invalid UTF-8 at the protobuf level.
    InvalidUtf8,
    /// Plausible but unknown IDs: disk 999999, names that do not exist.
    UnknownIds,
    /// Unknown field numbers next to valid-looking fields.
    UnknownFields,
    /// Not a complete protobuf message.
    Truncated,
}

impl Variant {
    /// Every variant, in the order the tests send them.
    pub const ALL: [Variant; 8] = [
        Variant::Empty,
        Variant::Negative,
        Variant::Huge,
        Variant::LongStrings,
        Variant::InvalidUtf8,
        Variant::UnknownIds,
        Variant::UnknownFields,
        Variant::Truncated,
    ];

    fn number_for(self, ty: &str) -> u64 {
        match (self, ty) {
            // 64-bit fields (sizes): the largest value, so size arithmetic must not overflow.
            (Variant::Huge, "int64" | "uint64" | "sint64") => i64::MAX as u64,
            _ => self.number(),
        }
    }

    fn number(self) -> u64 {
        match self {
            Variant::Negative => u64::MAX, // -1 as int32/int64
            // Past 32 bits; prost truncates it for 32-bit fields, to 999_998: an unknown disk,
            // never a small number that could name a real disk of the test machine.
            Variant::Huge => (1u64 << 32) + 999_998,
            Variant::UnknownIds | Variant::UnknownFields => 999_999,
            _ => 0,
        }
    }

    fn string(self) -> Vec<u8> {
        match self {
            Variant::Negative => b"-1".to_vec(),
            Variant::Huge => b"99999999999999999999999".to_vec(),
            Variant::LongStrings => vec![b'a'; 1 << 20],
            Variant::InvalidUtf8 => b"/var/lib/kubelet/\xff\xfe\xc0".to_vec(),
            Variant::UnknownIds | Variant::UnknownFields => b"999999".to_vec(),
            _ => Vec::new(),
        }
    }
}

/// Codes a hostile request may get, besides OK. INTERNAL is allowed only for requests that are
/// not valid protobuf (see [`assert_precise`]).
pub const PRECISE: &[Code] = &[
    Code::InvalidArgument,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::FailedPrecondition,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::ResourceExhausted,
];

/// Asserts the outcome of one hostile request to an RPC of `group`.
pub fn assert_precise(group: &str, what: &str, variant: Variant, r: &Result<Vec<u8>, Status>) {
    let Err(s) = r else { return };
    let code = s.code();
    // The network-facing groups may find a named portal or server unreachable or unresolvable:
    // UNAVAILABLE is the precise code for that (the request itself was well formed).
    let network = matches!(group, "iscsi" | "smb") && code == Code::Unavailable;
    // The gRPC status-code table prescribes INTERNAL for "error parsing request proto", and
    // grpc-go (upstream's server) answers exactly that: a request that is not valid protobuf
    // (bad UTF-8 in a string, a truncated field) never reaches a handler.
    let undecodable = matches!(variant, Variant::InvalidUtf8 | Variant::Truncated)
        && code == Code::Internal
        && s.message().contains("decode");
    assert!(
        PRECISE.contains(&code) || undecodable || network,
        "{what}: {variant:?} got {code:?}: {}",
        s.message()
    );
    assert!(
        !s.message().is_empty(),
        "{what}: {variant:?}: empty message"
    );
    // Errors must not echo a 1 MiB argument back (it would not fit the trailers anyway).
    assert!(
        s.message().len() <= 16 * 1024,
        "{what}: {variant:?}: message of {} bytes",
        s.message().len()
    );
}
