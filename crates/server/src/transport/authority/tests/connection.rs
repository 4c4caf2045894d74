//! Tests of the connection layer: the `AsyncRead` wrapper against the state machine.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn async_read_matches_the_state_machine() {
    let input = busy_stream();
    let want = rewrite_stream(&input).unwrap();
    let (mut client, server) = tokio::io::duplex(64);
    let writer = tokio::spawn(async move {
        for chunk in input.chunks(5) {
            client.write_all(chunk).await.unwrap();
        }
        client
    });
    let mut fix = AuthorityFix::new(server);
    let mut got = Vec::new();
    let mut small = [0u8; 3];
    // Read through a tiny buffer so pending output is handed out in pieces.
    while got.len() < want.len() {
        let n = fix.read(&mut small).await.unwrap();
        assert_ne!(n, 0, "early EOF");
        got.extend_from_slice(&small[..n]);
    }
    drop(writer.await.unwrap());
    assert_eq!(fix.read(&mut small).await.unwrap(), 0, "EOF passes through");
    assert_eq!(got, want);
}

#[tokio::test]
async fn async_read_delivers_output_then_invalid_data() {
    let good = with_preface(&[frame(4, 0, 0, &[])]);
    let mut input = good.clone();
    input.extend_from_slice(&frame(1, 4, 1, &indexed(99)));
    let (mut client, server) = tokio::io::duplex(1024);
    client.write_all(&input).await.unwrap();
    let mut fix = AuthorityFix::new(server);
    let mut got = vec![0u8; good.len()];
    fix.read_exact(&mut got).await.unwrap();
    assert_eq!(got, good);
    let err = fix.read(&mut [0u8; 16]).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    let err = fix.read(&mut [0u8; 16]).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "stays failed");
}

#[tokio::test]
async fn async_eof_without_data_and_writes_pass_through() {
    let (mut client, server) = tokio::io::duplex(64);
    let mut fix = AuthorityFix::new(server);
    fix.write_all(b"server bytes").await.unwrap();
    let mut buf = [0u8; 12];
    client.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"server bytes");
    drop(client);
    let mut rest = Vec::new();
    assert_eq!(fix.read_to_end(&mut rest).await.unwrap(), 0);
    let _inner: &tokio::io::DuplexStream = fix.get_ref();
    let _inner: tokio::io::DuplexStream = fix.into_inner();
}
