//! The codec against the spec's byte layouts ("Message Format", "Marshaling (Wire Format)").

use super::marshal::split_type;
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
    assert!(matches!(m.args(), Err(ProtocolError(_))));
    m.body = vec![1, b's', 0, 0, 60, 0, 0, 0, b'a'];
    assert!(matches!(m.args(), Err(ProtocolError(_))));
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
        Err(ProtocolError(_))
    ));
}

#[test]
fn signatures_split_into_complete_types() {
    assert_eq!(split_type("a{sv}u").unwrap(), ("a{sv}", "u"));
    assert_eq!(split_type("(ua(ss))x").unwrap(), ("(ua(ss))", "x"));
    assert!(split_type("(u").is_err());
    assert!(split_type("a").is_err());
    assert!(split_type("z").is_err());
}
