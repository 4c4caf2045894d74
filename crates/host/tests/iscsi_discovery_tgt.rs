//! The in-process SendTargets discovery client against a real target (`tgtd` on 127.0.0.1):
//! no authentication, one-way CHAP, wrong and missing credentials, a closed port.
#![cfg(target_os = "linux")]

#[path = "iscsi_support/tgt.rs"]
mod tgt;

use csi_proxy_core::Kind;
use csi_proxy_host::iscsi_discovery::{Discovery, DiscoveryChap};
use std::time::Duration;

const INITIATOR: &str = "iqn.2026-01.io.k8s.csi-proxy:test";

fn discovery(port: u16, chap: Option<(&str, &str)>) -> Discovery {
    Discovery {
        address: "127.0.0.1".into(),
        port,
        initiator_name: INITIATOR.into(),
        chap: chap.map(|(u, s)| DiscoveryChap {
            username: u.into(),
            secret: s.into(),
        }),
        timeout: Duration::from_secs(5),
    }
}

macro_rules! need_tgt {
    () => {
        if let Some(why) = tgt::unavailable() {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
}

#[test]
fn discovers_every_target_of_a_portal() {
    need_tgt!();
    let t = tgt::Tgt::start();
    t.add_target(1, "iqn.2026-01.test:alpha");
    t.add_target(2, "iqn.2026-01.test:beta");
    let found = discovery(t.port, None).send_targets().unwrap();
    let names: Vec<_> = found.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["iqn.2026-01.test:alpha", "iqn.2026-01.test:beta"],
        "{}",
        t.log()
    );
    assert!(
        found[0]
            .addresses
            .iter()
            .any(|a| a.contains(&t.port.to_string())),
        "{found:?}"
    );
    // Offering CHAP to a target that does not ask for it still works.
    let again = discovery(t.port, Some(("u", "unused-secret-1")))
        .send_targets()
        .unwrap();
    assert_eq!(again, found);
}

/// A scripted target that requires one-way CHAP for discovery (tgt cannot: its accounts bind
/// to targets, not to discovery sessions). Serves one connection and checks the CHAP response.
fn chap_target(user: &'static str, secret: &'static str) -> (u16, std::thread::JoinHandle<()>) {
    use csi_proxy_formats::iscsi_pdu::{self as pdu, BHS_LEN, Pdu};
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut stat_sn = 100u32;
        let read = |c: &mut std::net::TcpStream| -> Option<(Pdu, Vec<(String, String)>)> {
            let mut bhs = [0u8; BHS_LEN];
            c.read_exact(&mut bhs).ok()?;
            let (mut p, len) = Pdu::decode_header(bhs, 1 << 16).unwrap();
            let mut data = vec![0; len + pdu::padding(len)];
            c.read_exact(&mut data).unwrap();
            data.truncate(len);
            p.data = data;
            let kv = pdu::decode_text(&p.data).unwrap();
            Some((p, kv))
        };
        let mut reply = |c: &mut std::net::TcpStream,
                         op: u8,
                         flags: u8,
                         status: (u8, u8),
                         itt: u32,
                         kv: &[(&str, &str)]| {
            let text = pdu::encode_text(kv);
            let mut b = [0u8; BHS_LEN];
            b[0] = op;
            b[1] = flags;
            b[5..8].copy_from_slice(&(text.len() as u32).to_be_bytes()[1..]);
            b[14..16].copy_from_slice(&1u16.to_be_bytes());
            b[16..20].copy_from_slice(&itt.to_be_bytes());
            b[20..24].copy_from_slice(&0xffff_ffffu32.to_be_bytes());
            b[24..28].copy_from_slice(&stat_sn.to_be_bytes());
            stat_sn += 1;
            b[36] = status.0;
            b[37] = status.1;
            c.write_all(&Pdu { bhs: b, data: text }.encode()).unwrap();
        };
        let Some((p, kv)) = read(&mut c) else { return };
        let offered = pdu::value(&kv, "AuthMethod").unwrap().to_string();
        assert_eq!(pdu::value(&kv, "SessionType"), Some("Discovery"));
        if !offered.split(',').any(|m| m == "CHAP") {
            reply(
                &mut c,
                0x23,
                0x00,
                (0, 0),
                p.itt(),
                &[("AuthMethod", "Reject")],
            );
            return;
        }
        reply(
            &mut c,
            0x23,
            0x00,
            (0, 0),
            p.itt(),
            &[("AuthMethod", "CHAP")],
        );
        let (p, kv) = read(&mut c).unwrap();
        assert_eq!(pdu::value(&kv, "CHAP_A"), Some("5"));
        let challenge = [9u8, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16];
        reply(
            &mut c,
            0x23,
            0x00,
            (0, 0),
            p.itt(),
            &[
                ("CHAP_A", "5"),
                ("CHAP_I", "42"),
                ("CHAP_C", &pdu::encode_hex(&challenge)),
            ],
        );
        let (p, kv) = read(&mut c).unwrap();
        let want = pdu::encode_hex(&pdu::chap_response(42, secret.as_bytes(), &challenge));
        if pdu::value(&kv, "CHAP_N") != Some(user)
            || pdu::value(&kv, "CHAP_R") != Some(want.as_str())
        {
            reply(&mut c, 0x23, 0x00, (2, 1), p.itt(), &[]);
            return;
        }
        reply(&mut c, 0x23, 0x81, (0, 0), p.itt(), &[]); // T, CSG 0 -> NSG 1
        let (p, _) = read(&mut c).unwrap();
        assert_eq!(
            p.bhs[1] & 0x0f,
            0x07,
            "operational stage asks for full feature"
        );
        reply(&mut c, 0x23, 0x87, (0, 0), p.itt(), &[]);
        let (p, kv) = read(&mut c).unwrap();
        assert_eq!(pdu::value(&kv, "SendTargets"), Some("All"));
        reply(
            &mut c,
            0x24,
            0x80,
            (0, 0),
            p.itt(),
            &[
                ("TargetName", "iqn.2026-01.test:chap"),
                ("TargetAddress", "127.0.0.1:3260,1"),
            ],
        );
        let (p, _) = read(&mut c).unwrap();
        assert_eq!(p.opcode(), 0x06);
        reply(&mut c, 0x26, 0x80, (0, 0), p.itt(), &[]);
    });
    (port, h)
}

#[test]
fn one_way_chap_on_discovery_is_answered_when_the_target_asks() {
    const SECRET: &str = "disco-Secret-12";
    let (port, h) = chap_target("disco-user", SECRET);
    let found = discovery(port, Some(("disco-user", SECRET)))
        .send_targets()
        .unwrap();
    h.join().unwrap();
    assert_eq!(found[0].name, "iqn.2026-01.test:chap");

    let (port, h) = chap_target("disco-user", SECRET);
    let e = discovery(port, Some(("disco-user", "wrong-Secret-99")))
        .send_targets()
        .unwrap_err();
    h.join().unwrap();
    assert_eq!(e.kind(), Kind::PermissionDenied, "{e}");
    assert!(e.message().contains("authentication failed"), "{e}");
    assert!(!e.message().contains("Secret"), "{e}");

    let (port, h) = chap_target("disco-user", SECRET);
    let e = discovery(port, None).send_targets().unwrap_err();
    h.join().unwrap();
    assert_eq!(e.kind(), Kind::FailedPrecondition, "{e}");
    assert!(e.message().contains("requires authentication"), "{e}");
}

#[test]
fn a_closed_port_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // bound then dropped: nothing listens
    let e = discovery(port, None).send_targets().unwrap_err();
    assert_eq!(e.kind(), Kind::Unavailable, "{e}");
    assert!(
        e.message()
            .starts_with("DiscoverTargetPortal portal 127.0.0.1:"),
        "{e}"
    );
}

#[test]
fn a_silent_peer_times_out() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut d = discovery(port, None);
    d.timeout = Duration::from_millis(300);
    let e = d.send_targets().unwrap_err();
    assert_eq!(e.kind(), Kind::DeadlineExceeded, "{e}");
    drop(l);
}

/// A hostile portal answers the login with a header that claims a 16 MiB data segment (and
/// then sends data forever): the client refuses at the header, by the stated limit, without
/// reading or allocating what was claimed.
#[test]
fn a_portal_claiming_a_huge_data_segment_is_cut_off_at_the_limit() {
    use csi_proxy_formats::iscsi_pdu::BHS_LEN;
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut bhs = [0u8; BHS_LEN];
        let _ = c.read_exact(&mut bhs);
        let mut b = [0u8; BHS_LEN];
        b[0] = 0x23; // login response
        b[5..8].copy_from_slice(&[0xff, 0xff, 0xff]);
        let _ = c.write_all(&b);
        // Endless data after it: the client must not wait for it.
        let junk = vec![0x41u8; 64 << 10];
        for _ in 0..64 {
            if c.write_all(&junk).is_err() {
                break;
            }
        }
    });
    let e = discovery(port, None).send_targets().unwrap_err();
    assert!(
        e.message().contains("exceeds the 65536-byte limit"),
        "{:?}: {e}",
        e.kind()
    );
    assert_ne!(e.kind(), Kind::Internal, "{e}");
    h.join().unwrap();
}

/// A portal that answers one byte at a time, each well within a read timeout, is cut off at
/// the session's limit, and sooner at the caller's own deadline.
#[test]
fn a_portal_dribbling_bytes_is_cut_off_at_the_deadline() {
    use std::io::{Read, Write};
    use std::time::Instant;
    let dribbler = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut bhs = [0u8; 48];
            let _ = c.read_exact(&mut bhs);
            // A login response header, one byte every 50 ms, then endless padding.
            let mut b = [0u8; 48];
            b[0] = 0x23;
            b[7] = 16;
            for byte in b.iter().chain(std::iter::repeat_n(&0u8, 400)) {
                if c.write_all(&[*byte]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        (port, h)
    };
    let (port, h) = dribbler();
    let mut d = discovery(port, None);
    d.timeout = Duration::from_millis(600);
    let t = Instant::now();
    let e = d.send_targets().unwrap_err();
    assert_eq!(e.kind(), Kind::DeadlineExceeded, "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    h.join().unwrap();

    // The caller's deadline, sooner than the session limit, wins.
    let (port, h) = dribbler();
    let d = discovery(port, None);
    let t = Instant::now();
    let e = csi_proxy_core::deadline::within(Some(t + Duration::from_millis(300)), || {
        d.send_targets().unwrap_err()
    });
    assert_eq!(e.kind(), Kind::DeadlineExceeded, "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    h.join().unwrap();
}
