//! Shared helpers for the hostile, deadline, crash and load tests: the real daemon binary on Unix
//! sockets in a temp dir, a raw-bytes gRPC codec, a protobuf encoder driven by the wire contract,
//! host-state snapshots, and loop disks that detach themselves.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use csi_proxy_client::Connector;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

// ---- the daemon -------------------------------------------------------------------------------

/// The `csi-proxy` binary, running on sockets in its own temp dir; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub sockets: PathBuf,
    pub kubelet: PathBuf,
    pub state: PathBuf,
    pub extra: Vec<String>,
    /// Environment variables for the daemon process.
    pub env: Vec<(String, String)>,
    pub dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts the daemon with default flags plus `extra`, and waits for its sockets.
    pub fn start(extra: &[&str]) -> Daemon {
        Daemon::start_env(extra, &[])
    }

    /// As [`Daemon::start`], with environment variables for the daemon.
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let kubelet = dir.path().join("kubelet");
        std::fs::create_dir_all(&kubelet).unwrap();
        let state = dir.path().join("state");
        let sockets = dir.path().join("run");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let child = spawn(&sockets, &kubelet, &state, &extra, &env);
        let d = Daemon {
            child,
            sockets,
            kubelet,
            state,
            extra,
            env,
            dir,
        };
        d.wait_ready();
        d
    }

    pub fn connector(&self) -> Connector {
        Connector::SocketDir(self.sockets.clone())
    }

    /// Waits until every socket accepts connections (the last one is bound last; a socket
    /// file left by a killed daemon exists but refuses connections until the new one rebinds).
    pub fn wait_ready(&self) {
        let last = self.sockets.join("csi-proxy-iscsi-v1alpha2.sock");
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&last).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "daemon did not create its sockets; log:\n{}",
                self.log_tail()
            );
            if let Ok(Some(s)) = self.child_try_wait() {
                panic!("daemon exited at start ({s}); log:\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn child_try_wait(&self) -> std::io::Result<Option<std::process::ExitStatus>> {
        // `try_wait` needs `&mut`; a zero-signal probe is enough to see whether it is alive.
        let alive = Command::new("kill")
            .args(["-0", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status()?
            .success();
        Ok(if alive {
            None
        } else {
            Some(std::process::ExitStatus::default())
        })
    }

    /// Whether the process is still running (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the binary again with the same flags and directories (after a kill or exit).
    pub fn restart(&mut self) {
        self.kill9();
        self.child = spawn(
            &self.sockets,
            &self.kubelet,
            &self.state,
            &self.extra,
            &self.env,
        );
        self.wait_ready();
    }

    /// Resident memory of the daemon in KiB (Linux `/proc/<pid>/status` VmRSS).
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    pub fn log_path(&self) -> PathBuf {
        self.sockets.with_file_name("daemon.log")
    }

    /// The last lines of the daemon's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// A path below the kubelet dir.
    pub fn k(&self, rel: &str) -> String {
        self.kubelet.join(rel).display().to_string()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn spawn(
    sockets: &Path,
    kubelet: &Path,
    state: &Path,
    extra: &[String],
    env: &[(String, String)],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(sockets.with_file_name("daemon.log"))
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_csi-proxy"))
        .arg(format!("-kubelet-path={}", kubelet.display()))
        .arg("--socket-dir")
        .arg(sockets)
        .arg(format!("--state-dir={}", state.display()))
        .arg("-v=2")
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Whether this process runs as root (the loop-disk tests need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next().map(|u| u == "0"))
        .unwrap_or(false)
}

/// The pid of a direct child of `ppid` whose name starts with one of `prefixes`.
pub fn child_named(ppid: u32, prefixes: &[&str]) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let parent = stat[close + 1..].split_whitespace().nth(1);
        let comm = &stat[open + 1..close];
        if parent == Some(&ppid.to_string()) && prefixes.iter().any(|p| comm.starts_with(p)) {
            return stat[..open].trim().parse().ok();
        }
    }
    None
}

/// Sends a signal (`-STOP`, `-CONT`, ...) with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Continues a stopped process when dropped, so a failing test never leaves one frozen.
pub struct Thaw(pub u32);

impl Drop for Thaw {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

// ---- raw gRPC -----------------------------------------------------------------------------------

/// A codec that sends and receives message bytes as they are, so requests can be anything
/// (malformed protobuf included) without their generated types.
#[derive(Default, Clone)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let n = bytes::Buf::remaining(src);
        let mut v = vec![0u8; n];
        bytes::Buf::copy_to_slice(src, &mut v);
        Ok(Some(v))
    }
}

/// One unary call with raw bytes; `timeout` becomes the gRPC deadline (`grpc-timeout`).
pub async fn call_raw(
    ch: &tonic::transport::Channel,
    path: &str,
    body: Vec<u8>,
    timeout: Option<Duration>,
) -> Result<Vec<u8>, Status> {
    let mut g = tonic::client::Grpc::new(ch.clone())
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    g.ready()
        .await
        .map_err(|e| Status::unavailable(format!("not ready: {e}")))?;
    let mut req = tonic::Request::new(body);
    if let Some(t) = timeout {
        req.set_timeout(t);
    }
    let path = path.parse().expect("valid RPC path");
    g.unary(req, path, RawCodec).await.map(|r| r.into_inner())
}

/// A cheap request every daemon answers OK: filesystem v1 PathExists on the kubelet dir.
pub async fn assert_serving(d: &Daemon, what: &str) {
    let ch = d
        .connector()
        .channel("filesystem", "v1")
        .await
        .unwrap_or_else(|e| panic!("after {what}: cannot connect: {e}; log:\n{}", d.log_tail()));
    let mut body = Vec::new();
    put_bytes(&mut body, 1, d.kubelet.display().to_string().as_bytes());
    let r = call_raw(
        &ch,
        "/v1.Filesystem/PathExists",
        body,
        Some(Duration::from_secs(10)),
    )
    .await;
    // PathExistsResponse { exists = true }: field 1, varint 1.
    assert_eq!(
        r.as_deref()
            .map_err(|s| (s.code(), s.message().to_string())),
        Ok(&[0x08, 0x01][..]),
        "after {what}: the daemon does not answer; log:\n{}",
        d.log_tail()
    );
}

// ---- protobuf by hand, from the wire contract ---------------------------------------------------

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_key(out: &mut Vec<u8>, field: u64, wire: u64) {
    put_varint(out, field << 3 | wire);
}

pub fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_key(out, field, 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

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

// ---- host state ---------------------------------------------------------------------------------

/// What the tests must leave unchanged on the host: the kubelet tree and the global mount,
/// partition and loop-device tables.
#[derive(Debug, PartialEq, Eq)]
pub struct HostSnapshot {
    pub tree: BTreeMap<String, String>,
    pub mountinfo: Vec<String>,
    pub partitions: String,
    pub loops: BTreeMap<String, String>,
}

impl HostSnapshot {
    pub fn take(root: &Path) -> HostSnapshot {
        let mut tree = BTreeMap::new();
        walk(root, root, &mut tree);
        // Mount IDs and the order of unrelated lines are stable; compare whole lines.
        let mut mountinfo: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        mountinfo.sort();
        let partitions = std::fs::read_to_string("/proc/partitions").unwrap_or_default();
        let mut loops = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir("/sys/block") {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
                    loops.insert(name, b.trim().to_string());
                }
            }
        }
        HostSnapshot {
            tree,
            mountinfo,
            partitions,
            loops,
        }
    }

    /// Panics with the differences if `after` is not the same host state.
    pub fn assert_same(&self, after: &HostSnapshot, what: &str) {
        if self == after {
            return;
        }
        let mut diff = String::new();
        for (k, v) in &self.tree {
            if after.tree.get(k) != Some(v) {
                diff += &format!("  tree {k}: {v} -> {:?}\n", after.tree.get(k));
            }
        }
        for k in after.tree.keys().filter(|k| !self.tree.contains_key(*k)) {
            diff += &format!("  tree {k}: new\n");
        }
        for l in after
            .mountinfo
            .iter()
            .filter(|l| !self.mountinfo.contains(l))
        {
            diff += &format!("  mount added: {l}\n");
        }
        for l in self
            .mountinfo
            .iter()
            .filter(|l| !after.mountinfo.contains(l))
        {
            diff += &format!("  mount removed: {l}\n");
        }
        if self.partitions != after.partitions {
            diff += &format!(
                "  /proc/partitions:\n{}\n  ->\n{}\n",
                self.partitions, after.partitions
            );
        }
        if self.loops != after.loops {
            diff += &format!("  loops: {:?} -> {:?}\n", self.loops, after.loops);
        }
        panic!("{what} changed the host:\n{diff}");
    }
}

fn walk(root: &Path, p: &Path, out: &mut BTreeMap<String, String>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return;
    };
    let rel = p.strip_prefix(root).unwrap_or(p).display().to_string();
    let link = std::fs::read_link(p).ok();
    out.insert(
        rel,
        format!(
            "mode={:o} size={} mtime={}.{} ino={} link={link:?}",
            m.mode(),
            if m.is_dir() { 0 } else { m.size() },
            m.mtime(),
            m.mtime_nsec(),
            m.ino()
        ),
    );
    if m.is_dir()
        && let Ok(rd) = std::fs::read_dir(p)
    {
        for e in rd.flatten() {
            walk(root, &e.path(), out);
        }
    }
}

// ---- loop disks ---------------------------------------------------------------------------------

/// A sparse file attached as a loop device (`losetup -fP --show`); detached and removed on drop.
pub struct LoopDisk {
    pub dev: PathBuf,
    pub file: PathBuf,
}

impl LoopDisk {
    /// A loop disk of `mib` MiB in `dir`, or why one cannot be made here.
    pub fn new(dir: &Path, name: &str, mib: u64) -> Result<LoopDisk, String> {
        if !is_root() {
            return Err("not root".into());
        }
        let file = dir.join(format!("{name}.img"));
        let f = std::fs::File::create(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        f.set_len(mib << 20).map_err(|e| e.to_string())?;
        drop(f);
        let out = Command::new("losetup")
            .args(["-fP", "--show"])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&file);
            return Err(format!(
                "losetup -fP: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        Ok(LoopDisk { dev, file })
    }

    /// The kernel name (`loop7`).
    pub fn name(&self) -> String {
        self.dev
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    }

    /// The daemon's disk number for it: the kernel's `diskseq` (unique until reboot).
    pub fn disk_number(&self) -> u32 {
        std::fs::read_to_string(format!("/sys/block/{}/diskseq", self.name()))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .expect("loop disks have a diskseq")
    }

    /// Grows the backing file and tells the loop driver (`losetup -c`).
    pub fn grow_to(&self, mib: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.file)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let ok = Command::new("losetup")
            .arg("-c")
            .arg(&self.dev)
            .status()
            .unwrap()
            .success();
        assert!(ok, "losetup -c {}", self.dev.display());
    }

    /// SHA-free fingerprint of the whole device's contents (FNV-1a over every byte).
    pub fn fingerprint(&self) -> u64 {
        use std::io::Read;
        let mut f = std::fs::File::open(&self.dev).unwrap();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                return h;
            }
            for b in &buf[..n] {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        // Anything still mounted from this disk would keep it busy: unmount lazily first.
        if let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") {
            let dev = self.dev.display().to_string();
            for l in mi.lines() {
                let f: Vec<&str> = l.split(' ').collect();
                if let Some(pos) = f.iter().position(|x| *x == "-")
                    && f.get(pos + 2).is_some_and(|s| s.starts_with(&dev))
                {
                    let _ = Command::new("umount").args(["-l", f[4]]).status();
                }
            }
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.file);
    }
}
