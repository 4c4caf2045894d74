//! Unary gRPC calls with raw message bytes, so requests can be anything (malformed protobuf
//! included) without their generated types, and the protobuf primitives to build them.

use super::daemon::Daemon;
use std::time::Duration;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

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

/// A call to `path` carrying `messages` as they are, however many: how a client that breaks
/// the unary contract (no request message, or several) looks to the daemon.
pub async fn call_raw_messages(
    ch: &tonic::transport::Channel,
    path: &str,
    messages: Vec<Vec<u8>>,
) -> Result<Vec<u8>, Status> {
    let mut g = tonic::client::Grpc::new(ch.clone());
    g.ready()
        .await
        .map_err(|e| Status::unavailable(format!("not ready: {e}")))?;
    let stream = tonic::codegen::tokio_stream::iter(messages);
    let path = path.parse().expect("valid RPC path");
    g.client_streaming(tonic::Request::new(stream), path, RawCodec)
        .await
        .map(|r| r.into_inner())
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

/// A base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A field key: number and wire type.
pub fn put_key(out: &mut Vec<u8>, field: u64, wire: u64) {
    put_varint(out, field << 3 | wire);
}

/// A length-delimited field (string, bytes or nested message).
pub fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_key(out, field, 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}
