//! Hostile input on every RPC of every version, driven from the wire contract, against the real
//! daemon binary: each gets a precise status (or OK where the input is valid), the daemon keeps
//! answering, and the host is left as it was.
#![cfg(target_os = "linux")]

mod common;

use common::{
    Contract, Daemon, HostSnapshot, PRECISE, Variant, assert_precise, assert_serving, call_raw,
    call_raw_messages, cpu_time, nofile_limits, open_fds, put_bytes, set_soft_nofile,
};
use std::collections::BTreeMap;
use std::time::Duration;
use tonic::Code;

/// The number of RPCs over all 23 group-versions (upstream's API surface).
const RPC_COUNT: usize = 139;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_of_every_version_survives_hostile_input() {
    let contract = Contract::load();
    assert_eq!(contract.rpcs.len(), RPC_COUNT, "RPCs in the contract");
    let d = Daemon::start(&[]);
    // Something for hostile paths to find: a file and a directory inside the kubelet dir.
    std::fs::create_dir_all(d.kubelet.join("pods/p1")).unwrap();
    std::fs::write(d.kubelet.join("pods/p1/data"), b"keep").unwrap();
    let before = HostSnapshot::take(&d.kubelet);

    let mut channels = BTreeMap::new();
    let mut codes: BTreeMap<String, usize> = BTreeMap::new();
    let mut calls = 0;
    for rpc in &contract.rpcs {
        let key = (rpc.group.clone(), rpc.version.clone());
        if let std::collections::btree_map::Entry::Vacant(e) = channels.entry(key.clone()) {
            e.insert(
                d.connector()
                    .channel(&rpc.group, &rpc.version)
                    .await
                    .unwrap(),
            );
        }
        let ch = &channels[&key];
        for variant in Variant::ALL {
            if variant == Variant::InvalidUtf8 && !contract.has_strings(&rpc.input, 0) {
                continue;
            }
            let body = contract.encode(&rpc.input, variant);
            let what = format!("{}/{} {}", rpc.group, rpc.version, rpc.method);
            let mut r = call_raw(ch, &rpc.path, body.clone(), Some(Duration::from_secs(30))).await;
            // A request that is not valid protobuf is answered at once, before its body is read
            // to the end, and the stream is then reset; on a loaded machine the client can see
            // the reset before the answer and report CANCELLED. The daemon's answer is what is
            // checked here, so such a request is sent again (a few times at most).
            for _ in 0..5 {
                let raced = matches!(variant, Variant::InvalidUtf8 | Variant::Truncated)
                    && matches!(&r, Err(s) if s.code() == Code::Cancelled);
                if !raced {
                    break;
                }
                r = call_raw(ch, &rpc.path, body.clone(), Some(Duration::from_secs(30))).await;
            }
            calls += 1;
            assert_precise(&rpc.group, &what, variant, &r);
            let code = r.as_ref().map(|_| Code::Ok).unwrap_or_else(|s| s.code());
            *codes.entry(format!("{code:?}")).or_default() += 1;
            if matches!(variant, Variant::LongStrings | Variant::Truncated) {
                // The heaviest inputs: prove the daemon still answers right after them.
                assert_serving(&d, &format!("{what} {variant:?}")).await;
            }
        }
    }
    eprintln!("hostile requests: {calls} over {RPC_COUNT} RPCs; codes {codes:?}");
    assert_serving(&d, "all hostile requests").await;
    let after = HostSnapshot::take(&d.kubelet);
    before.assert_same(&after, "hostile requests");
    assert_eq!(
        std::fs::read(d.kubelet.join("pods/p1/data")).unwrap(),
        b"keep"
    );
}

#[tokio::test]
async fn requests_over_the_message_limit_are_refused_and_the_daemon_keeps_serving() {
    let d = Daemon::start(&[]);
    let ch = d.connector().channel("filesystem", "v1").await.unwrap();
    // 5 MiB: far above the filesystem group's receive limit (two maximal paths).
    let limit = csi_proxy_server::limits::max_request_bytes("filesystem");
    let mut body = Vec::new();
    put_bytes(&mut body, 1, &vec![b'a'; 5 << 20]);
    for _ in 0..3 {
        let r = call_raw(&ch, "/v1.Filesystem/PathExists", body.clone(), None).await;
        let s = r.expect_err("an over-limit request is refused");
        // RESOURCE_EXHAUSTED, as the gRPC spec has it (tonic alone would say OUT_OF_RANGE).
        assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
        assert!(
            s.message().contains("PathExists") && s.message().contains(&limit.to_string()),
            "the message names the call and the limit: {}",
            s.message()
        );
        assert_serving(&d, "an over-limit request").await;
    }
    // A message just under the limit reaches the handler (and the path check refuses it).
    let mut body = Vec::new();
    put_bytes(&mut body, 1, &vec![b'a'; limit - 64]);
    let s = call_raw(&ch, "/v1.Filesystem/PathExists", body, None)
        .await
        .expect_err("a path this long is invalid");
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(
        s.message().len() < 4096,
        "the message does not echo the path"
    );
}

#[tokio::test]
async fn garbage_on_the_socket_does_not_disturb_other_clients() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = Daemon::start(&[]);
    let sock = d.sockets.join("csi-proxy-filesystem-v1.sock");
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let inputs: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0xff; 4096],
        [
            &preface[..],
            &[
                0x00, 0x00, 0x04, 0x01, 0x04, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff,
            ],
        ]
        .concat(),
        // A HEADERS frame announcing 16 MiB - 1: refused from its header.
        [&preface[..], &[0xff, 0xff, 0xff, 0x01, 0x04, 0, 0, 0, 1]].concat(),
        preface[..10].to_vec(),
    ];
    for input in inputs {
        let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
        let _ = s.write_all(&input).await;
        let _ = s.shutdown().await;
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
        assert_serving(&d, "garbage on the socket").await;
    }
}

#[tokio::test]
async fn a_unary_call_without_its_one_message_is_refused_and_names_the_call() {
    let d = Daemon::start(&[]);
    let ch = d.connector().channel("filesystem", "v1").await.unwrap();
    let s = call_raw_messages(&ch, "/v1.Filesystem/PathExists", vec![])
        .await
        .expect_err("no request message");
    // The gRPC status-code table: "request cardinality violation" is UNIMPLEMENTED.
    assert_eq!(s.code(), Code::Unimplemented, "{s:?}");
    assert!(s.message().contains("/v1.Filesystem/PathExists"), "{s:?}");
    // Two messages: the daemon acts on at most one of them, and a second Mkdir never happens.
    let mut first = Vec::new();
    put_bytes(&mut first, 1, d.k("pods/first").as_bytes());
    let mut second = Vec::new();
    put_bytes(&mut second, 1, d.k("pods/second").as_bytes());
    let r = call_raw_messages(&ch, "/v1.Filesystem/Mkdir", vec![first, second]).await;
    eprintln!("two request messages: {r:?}");
    assert!(
        !std::path::Path::new(&d.k("pods/second")).exists(),
        "the second message of a unary call was acted on"
    );
    if let Err(s) = &r {
        assert!(PRECISE.contains(&s.code()), "{s:?}");
    }
    assert_serving(&d, "calls with the wrong number of messages").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_pauses_accepts_and_the_daemon_recovers() {
    let d = Daemon::start(&[]);
    let pid = d.child.id();
    let Some((soft, _)) = nofile_limits(pid) else {
        eprintln!("SKIPPED: cannot read the daemon's open-file limit");
        return;
    };
    // Room for a handful of connections, then EMFILE on every accept.
    let tight = open_fds(pid) + 4;
    if let Err(why) = set_soft_nofile(pid, tight) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let sock = d.sockets.join("csi-proxy-filesystem-v1.sock");
    let mut held = Vec::new();
    for _ in 0..32 {
        // The kernel queues a connection the daemon cannot accept, so connect succeeds.
        held.push(tokio::net::UnixStream::connect(&sock).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Accepts keep failing for as long as the descriptors are gone. A daemon that retried at
    // once would burn a core the whole time; one that pauses uses next to nothing.
    let cpu = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_time(pid) - cpu;
    assert!(
        used < Duration::from_millis(500),
        "the daemon used {used:?} of CPU in 2 s while it could not accept"
    );
    assert!(
        d.log().contains("cannot accept a connection"),
        "the failed accept is logged; log:\n{}",
        d.log_tail()
    );
    // Descriptors come back: the held connections close and the limit is restored.
    drop(held);
    set_soft_nofile(pid, soft).unwrap();
    assert_serving(&d, "running out of descriptors").await;
    assert!(
        d.log().contains("accepting connections again"),
        "log:\n{}",
        d.log_tail()
    );
}
