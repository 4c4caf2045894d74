//! Tests of the HPACK pieces: Huffman coding, integers, the static table and the block walk,
//! checked against loona-hpack where it decodes the same thing.

use super::*;

#[test]
fn huffman_helper_round_trips() {
    let all: Vec<u8> = (0..=255).collect();
    for s in [&all[..], RAW, ENCODED, b"localhost"] {
        let mut d = loona_hpack::huffman::HuffmanDecoder::new();
        assert_eq!(d.decode(&huffman(s)).unwrap(), s);
    }
}

fn huffman_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = b"kept".to_vec();
    super::huffman_decode(input, &mut out)?;
    assert_eq!(&out[..4], b"kept", "decoding appends");
    Some(out.split_off(4))
}

#[test]
fn huffman_decoder_agrees_with_loona() {
    let mut rng = XorShift(0xdead_beef_cafe_f00d);
    let all: Vec<u8> = (0..=255).collect();
    assert_eq!(huffman_decode(&huffman(&all)).unwrap(), all);
    assert_eq!(huffman_decode(&[]).unwrap(), b"");
    for round in 0..3000 {
        let len = (rng.next() % 12) as usize;
        let mut s: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if round % 2 == 0 {
            // Valid encodings, sometimes with a flipped bit or a byte cut off.
            s = huffman(&s);
            match round % 6 {
                2 if !s.is_empty() => {
                    let i = rng.next() as usize % s.len();
                    s[i] ^= 1 << (rng.next() % 8);
                }
                4 => {
                    s.pop();
                }
                _ => {}
            }
        }
        let ours = huffman_decode(&s);
        let theirs = loona_hpack::huffman::HuffmanDecoder::new().decode(&s).ok();
        assert_eq!(ours, theirs, "{s:02x?}");
    }
    // EOS (30 ones) inside a string, and 8 bits of padding.
    assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xfc]), None);
    assert_eq!(huffman_decode(&[0x1f, 0xff]), None);
}

#[test]
fn normalized_blocks_decode_to_the_same_fields() {
    let blocks = [
        request_block(incremental(Ok(1), RAW, true)),
        [
            indexed(65),
            indexed(64),
            literal(0x10, 4, Err(b"k"), ENCODED, true),
        ]
        .concat(),
        [
            size_update(100),
            incremental(Err(b"a-b"), b"\x00\xff", true),
            indexed(62),
        ]
        .concat(),
    ];
    let (mut plain, mut normal) = (loona_hpack::Decoder::new(), loona_hpack::Decoder::new());
    for block in blocks {
        let mut n = Normalized::default();
        normalize(&block, &mut n).unwrap();
        assert_eq!(
            plain.decode(&block).unwrap(),
            normal.decode(&n.block).unwrap()
        );
    }
}

#[test]
fn static_names_match_the_decoder() {
    for (i, name) in STATIC_NAMES.iter().enumerate() {
        let mut block = Vec::new();
        encode_int(&mut block, 0, 4, i + 1);
        block.push(0);
        let got = loona_hpack::Decoder::new().decode(&block).unwrap();
        assert_eq!(got, vec![(name.to_vec(), Vec::new())], "index {}", i + 1);
    }
}

#[test]
fn integers_round_trip() {
    for v in [
        0,
        1,
        14,
        15,
        16,
        126,
        127,
        128,
        255,
        4096,
        1 << 20,
        (1 << 28) - 1,
    ] {
        for prefix in [4, 5, 6, 7] {
            let mut out = Vec::new();
            encode_int(&mut out, 0, prefix, v);
            assert_eq!(
                decode_int(&out, prefix),
                Some((v, out.len())),
                "{v} {prefix}"
            );
        }
    }
    assert_eq!(decode_int(&[0x7f, 0x80, 0x80], 7), None, "truncated");
    assert_eq!(
        decode_int(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], 7),
        None,
        "too long"
    );
}
