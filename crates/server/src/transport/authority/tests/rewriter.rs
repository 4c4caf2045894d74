//! Tests of the frame rewriter: which bytes pass, which `:authority` values are replaced, how
//! header blocks are re-framed, fragmentation, limits and errors.

use super::*;

#[test]
fn preface_and_non_header_frames_pass_through() {
    let input = with_preface(&[
        frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]),       // SETTINGS
        frame(0x4, 0x1, 0, &[]),                       // SETTINGS ack
        frame(0x8, 0, 0, &[0, 0, 1, 0]),               // WINDOW_UPDATE
        frame(0x6, 0, 0, b"12345678"),                 // PING
        frame(0x0, 0x9, 1, &[3, b'a', b'b', 0, 0, 0]), // DATA, padded, END_STREAM
        frame(0x3, 0, 1, &[0, 0, 0, 8]),               // RST_STREAM
        frame(0xfe, 0xff, 0x8000_0007, b"unknown type"),
        frame(0x7, 0, 0, &[0; 8]), // GOAWAY
    ]);
    assert_eq!(rewrite_stream(&input).unwrap(), input);
}

#[test]
fn non_http2_bytes_pass_through() {
    let input =
        b"GET / HTTP/1.1\r\nHost: \\\\.\\pipe\\x\r\n\r\n\x00\x00\x05\x01\x04\x00\x00\x00\x01xxxxx";
    assert_eq!(rewrite_stream(input).unwrap(), input);
    // A near miss of the preface too.
    let input = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r!\x00\x00\x00\x01\x04\x00\x00\x00\x01";
    assert_eq!(rewrite_stream(input).unwrap(), input);
    assert_eq!(feed_in_chunks(input, &mut || 1).unwrap(), input);
    assert_eq!(rewrite_stream(b"").unwrap(), b"");
    assert_eq!(rewrite_stream(b"PRI").unwrap(), b"PRI");
}

#[test]
fn raw_authority_is_replaced() {
    let block = request_block(incremental(Ok(1), RAW, false));
    let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, 0x5, 1, &block)]));
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].fields, expected_request("localhost"));
    assert_eq!(blocks[0].flags, FLAG_END_STREAM | FLAG_END_HEADERS);
    assert_eq!(blocks[0].stream, 1);
}

#[test]
fn huffman_raw_and_percent_encoded_authorities_are_replaced() {
    for value in [RAW, ENCODED, b"", b"a b", b"\xff\xfe"] {
        let block = request_block(incremental(Ok(1), value, true));
        let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, 0x4, 1, &block)]));
        assert_eq!(blocks[0].fields, expected_request("localhost"), "{value:?}");
        assert_eq!(blocks[0].flags, FLAG_END_HEADERS);
    }
}

#[test]
fn blocks_with_valid_authorities_pass_unchanged() {
    for value in [
        "localhost",
        "localhost:8080",
        "[::1]:50051",
        "csi-proxy.sock",
        "user@host",
    ] {
        let block = request_block(incremental(Ok(1), value.as_bytes(), true));
        let input = with_preface(&[frame(1, 0x4, 1, &block), frame(0, 1, 1, b"req")]);
        let out = rewrite_stream(&input).unwrap();
        assert_eq!(out, input, "{value}");
        let (blocks, _) = decode_out(&out);
        assert_eq!(blocks[0].fields, expected_request(value));
    }
    // No :authority at all, a padded block with priority, a block split over CONTINUATION
    // frames and one referring to the first block's entries: all byte for byte.
    let first = [indexed(3), indexed(6), incremental(Ok(4), b"/x", false)].concat();
    let mut padded = vec![3u8, 0, 0, 0, 1, 9];
    padded.extend_from_slice(&[indexed(2), indexed(62)].concat());
    padded.extend_from_slice(&[0; 3]);
    let third = request_block(incremental(Ok(1), b"localhost", true));
    let input = with_preface(&[
        frame(1, FLAG_END_HEADERS, 1, &first),
        frame(
            1,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS,
            3,
            &padded,
        ),
        frame(1, 0, 5, &third[..5]),
        frame(9, FLAG_END_HEADERS | FLAG_END_STREAM, 5, &third[5..]),
    ]);
    let out = rewrite_stream(&input).unwrap();
    assert_eq!(out, input);
    assert_eq!(feed_in_chunks(&input, &mut || 3).unwrap(), input);
    let (blocks, _) = decode_out(&out);
    assert_eq!(
        blocks[0].fields,
        fields(&[(":method", "POST"), (":scheme", "http"), (":path", "/x")])
    );
    assert_eq!(
        blocks[1].fields,
        fields(&[(":method", "GET"), (":path", "/x")])
    );
    assert_eq!(blocks[2].fields, expected_request("localhost"));
}

#[test]
fn after_the_first_fix_every_block_is_reencoded() {
    // Block 1 (valid) inserts x-a; block 2 fixes :authority and inserts its own entries; block 3
    // (valid by itself) refers to entries of both. The server's table stops following the
    // client's at block 2, so block 3 must be re-encoded as well, and decoding the output
    // with one persistent decoder (the server's view) must give every block's fields.
    let first = [indexed(3), incremental(Err(b"x-a"), b"1", true)].concat();
    let second = request_block(incremental(Ok(1), RAW, true));
    // Newest first: te=62, content-type=63, :authority=64, :path=65, x-a=66.
    let third = [
        indexed(3),
        indexed(65),
        indexed(66),
        incremental(Ok(1), b"localhost:7", false),
    ]
    .concat();
    // Now localhost:7=62, ..., the raw :authority=65, x-a=67.
    let fourth = [indexed(62), indexed(67), indexed(65)].concat();
    let input = with_preface(&[
        frame(1, FLAG_END_HEADERS, 1, &first),
        frame(1, FLAG_END_HEADERS, 3, &second),
        frame(1, FLAG_END_HEADERS, 5, &third),
        frame(1, FLAG_END_HEADERS, 7, &fourth),
    ]);
    let out = rewrite_stream(&input).unwrap();
    // The first block went out as it came.
    let first_frame = frame(1, FLAG_END_HEADERS, 1, &first);
    assert_eq!(out[24..24 + first_frame.len()], first_frame[..]);
    let (blocks, _) = decode_out(&out);
    let reencoded: Vec<bool> = blocks.iter().map(|b| b.reencoded).collect();
    assert_eq!(reencoded, [false, true, true, true]);
    assert_eq!(
        blocks[0].fields,
        fields(&[(":method", "POST"), ("x-a", "1")])
    );
    assert_eq!(blocks[1].fields, expected_request("localhost"));
    assert_eq!(
        blocks[2].fields,
        fields(&[
            (":method", "POST"),
            (":path", "/v1.Filesystem/PathExists"),
            ("x-a", "1"),
            (":authority", "localhost:7"),
        ])
    );
    assert_eq!(
        blocks[3].fields,
        fields(&[
            (":authority", "localhost:7"),
            ("x-a", "1"),
            (":authority", "localhost"),
        ])
    );
    for chunk in [1, 2, 7, 64] {
        assert_eq!(feed_in_chunks(&input, &mut || chunk).unwrap(), out);
    }
}

#[test]
fn one_big_block_does_not_keep_its_memory() {
    let big = "v".repeat(300_000);
    let block = [
        request_block(incremental(Ok(1), RAW, false)),
        literal(0, 4, Err(b"x-big"), big.as_bytes(), true),
    ]
    .concat();
    let mut r = Rewriter::new();
    let mut out = Vec::new();
    r.feed(
        &with_preface(&[frame(1, FLAG_END_HEADERS, 1, &block)]),
        &mut out,
    )
    .unwrap();
    assert!(out.len() > 300_000);
    assert!(
        r.retained_capacity() <= 8 * 64 * 1024,
        "{} bytes kept after the block",
        r.retained_capacity()
    );
    // Small blocks keep their buffers: the next request allocates nothing new.
    out.clear();
    r.feed(&frame(1, FLAG_END_HEADERS, 3, &indexed(2)), &mut out)
        .unwrap();
    let kept = r.retained_capacity();
    assert!(kept > 0);
    r.feed(&frame(1, FLAG_END_HEADERS, 5, &indexed(2)), &mut out)
        .unwrap();
    assert_eq!(r.retained_capacity(), kept);
}

#[test]
fn every_representation_is_decoded_and_never_indexed_is_kept() {
    let block = [
        indexed(2),
        literal(0x00, 4, Ok(4), b"/a", false), // without indexing
        literal(0x10, 4, Ok(1), RAW, true),    // never indexed
        literal(0x10, 4, Err(b"secret"), b"s3", false), // never indexed, new name
        incremental(Err(b"x-custom"), b"v", true),
    ]
    .concat();
    let out = rewrite_stream(&with_preface(&[frame(1, 0x4, 1, &block)])).unwrap();
    let (blocks, _) = decode_out(&out);
    assert_eq!(
        blocks[0].fields,
        fields(&[
            (":method", "GET"),
            (":path", "/a"),
            (":authority", "localhost"),
            ("secret", "s3"),
            ("x-custom", "v"),
        ])
    );
    let frag = &parse_frames(&out)[0].payload;
    let mut n = Normalized::default();
    normalize(frag, &mut n).unwrap();
    let flags = n.never_indexed;
    assert_eq!(flags, [false, false, true, true, false]);
}

#[test]
fn padding_is_stripped_and_priority_kept() {
    let block = request_block(incremental(Ok(1), RAW, true));
    let mut payload = vec![7u8]; // Pad Length
    payload.extend_from_slice(&[0x80, 0, 0, 3, 200]); // E=1, depends on 3, weight 200
    payload.extend_from_slice(&block);
    payload.extend_from_slice(&[0; 7]);
    let flags = FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS | FLAG_END_STREAM | 0x40;
    let (blocks, _) = rewrite_ok(&with_preface(&[frame(1, flags, 5, &payload)]));
    let b = &blocks[0];
    assert_eq!(b.fields, expected_request("localhost"));
    assert_eq!(b.stream, 5);
    assert_eq!(b.flags, FLAG_PRIORITY | FLAG_END_HEADERS | FLAG_END_STREAM);
    assert_eq!(b.priority.as_deref(), Some(&[0x80, 0, 0, 3, 200][..]));

    // Padding only (no priority), and a block whose fragment is all in CONTINUATION.
    let mut payload = vec![2u8];
    payload.extend_from_slice(&[0, 0]);
    let input = with_preface(&[
        frame(1, FLAG_PADDED, 1, &payload),
        frame(9, FLAG_END_HEADERS, 1, &block),
    ]);
    let (blocks, _) = rewrite_ok(&input);
    assert_eq!(blocks[0].fields, expected_request("localhost"));
    assert_eq!(blocks[0].frames, 1);
}

#[test]
fn continuation_frames_are_joined() {
    let block = request_block(incremental(Ok(1), ENCODED, false));
    let (a, rest) = block.split_at(3);
    let (b, c) = rest.split_at(20);
    let input = with_preface(&[
        frame(1, FLAG_END_STREAM, 3, a),
        frame(9, 0, 3, b),
        frame(9, 0, 3, &[]),
        frame(9, FLAG_END_HEADERS, 3, c),
        frame(0, 1, 3, b"data"),
    ]);
    let (blocks, others) = rewrite_ok(&input);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].frames, 1);
    assert_eq!(blocks[0].fields, expected_request("localhost"));
    assert_eq!(blocks[0].flags, FLAG_END_STREAM | FLAG_END_HEADERS);
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].payload, b"data");
}

#[test]
fn large_blocks_are_split_into_continuation_frames() {
    // A 40 000-byte value arrives in one oversized HEADERS frame (the shim is lenient) and
    // must leave as HEADERS + CONTINUATION frames of at most 16 384 bytes.
    let big = "v".repeat(40_000);
    let block = [
        request_block(incremental(Ok(1), RAW, false)),
        literal(0, 4, Err(b"x-big"), big.as_bytes(), false),
    ]
    .concat();
    let mut payload = vec![0x00, 0, 0, 1, 15]; // priority: depends on 1, weight 15
    payload.extend_from_slice(&block);
    let input = with_preface(&[frame(1, FLAG_PRIORITY | FLAG_END_HEADERS, 1, &payload)]);
    let out = rewrite_stream(&input).unwrap();
    let frames = parse_frames(&out);
    assert_eq!(frames.len(), 3);
    assert_eq!(frames[0].kind, TYPE_HEADERS);
    assert_eq!(frames[0].flags, FLAG_PRIORITY);
    assert_eq!(frames[0].payload.len(), OUT_FRAME_SIZE);
    assert_eq!((frames[1].kind, frames[1].flags), (TYPE_CONTINUATION, 0));
    assert_eq!(frames[1].payload.len(), OUT_FRAME_SIZE);
    assert_eq!(
        (frames[2].kind, frames[2].flags),
        (TYPE_CONTINUATION, FLAG_END_HEADERS)
    );
    let (blocks, _) = decode_out(&out);
    let mut want = expected_request("localhost");
    want.push(("x-big".into(), big));
    assert_eq!(blocks[0].fields, want);
    assert_eq!(blocks[0].priority.as_deref(), Some(&[0, 0, 0, 1, 15][..]));
    assert_eq!(blocks[0].frames, 3);
}

#[test]
fn dynamic_table_references_span_header_blocks() {
    // grpc-go inserts :path, :authority, content-type and te with incremental indexing;
    // the second request refers to them by dynamic index (newest first: te=62,
    // content-type=63, :authority=64, :path=65).
    let first = request_block(incremental(Ok(1), RAW, true));
    let second = [
        indexed(3),
        indexed(6),
        indexed(65),
        indexed(64),
        indexed(63),
        indexed(62),
    ]
    .concat();
    let input = with_preface(&[
        frame(1, FLAG_END_HEADERS, 1, &first),
        frame(0, FLAG_END_STREAM, 1, b"req1"),
        frame(1, FLAG_END_HEADERS, 3, &second),
        frame(0, FLAG_END_STREAM, 3, b"req2"),
    ]);
    let (blocks, others) = rewrite_ok(&input);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].fields, expected_request("localhost"));
    assert_eq!(blocks[1].fields, expected_request("localhost"));
    assert_eq!(blocks[1].stream, 3);
    assert_eq!(others.len(), 2);

    // A valid authority inserted by the first block is still valid when referenced (and both
    // blocks pass unchanged).
    let first = request_block(incremental(Ok(1), b"localhost:1", true));
    let input = with_preface(&[
        frame(1, FLAG_END_HEADERS, 1, &first),
        frame(1, FLAG_END_HEADERS, 3, &indexed(64)),
    ]);
    let out = rewrite_stream(&input).unwrap();
    assert_eq!(out, input);
    let (blocks, _) = decode_out(&out);
    assert_eq!(blocks[1].fields, fields(&[(":authority", "localhost:1")]));
}

#[test]
fn dynamic_table_size_updates_are_honoured() {
    let first = request_block(incremental(Ok(1), RAW, false));
    // Shrinking to 0 evicts everything; then 4096 again and a fresh insertion at 62.
    let second = [
        size_update(0),
        size_update(4096),
        indexed(3),
        incremental(Ok(1), ENCODED, true),
        indexed(62),
    ]
    .concat();
    let input = with_preface(&[
        frame(1, FLAG_END_HEADERS, 1, &first),
        frame(1, FLAG_END_HEADERS, 3, &second),
    ]);
    let (blocks, _) = rewrite_ok(&input);
    assert_eq!(
        blocks[1].fields,
        fields(&[
            (":method", "POST"),
            (":authority", "localhost"),
            (":authority", "localhost"),
        ])
    );

    // After the eviction, the old entries are gone: referring to one is an HPACK error.
    let third = [size_update(0), size_update(4096), indexed(63)].concat();
    let input = with_preface(&[
        frame(1, FLAG_END_HEADERS, 1, &first),
        frame(1, FLAG_END_HEADERS, 3, &third),
    ]);
    assert!(matches!(
        rewrite_stream(&input),
        Err(RewriteError::Hpack(_))
    ));

    // A size above what any server allows is rejected.
    let block = [size_update(MAX_DYNAMIC_TABLE + 1), indexed(2)].concat();
    let input = with_preface(&[frame(1, FLAG_END_HEADERS, 1, &block)]);
    assert!(matches!(
        rewrite_stream(&input),
        Err(RewriteError::Hpack(_))
    ));
}

#[test]
fn any_fragmentation_gives_the_same_output() {
    let input = busy_stream();
    let whole = rewrite_stream(&input).unwrap();
    let (blocks, others) = decode_out(&whole);
    assert_eq!(blocks.len(), 3);
    assert_eq!(others.len(), 5);
    assert_eq!(
        blocks[1].fields[3],
        (":authority".into(), "localhost".into())
    );
    assert_eq!(feed_in_chunks(&input, &mut || 1).unwrap(), whole);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200 {
        let max = (rng.next() % 64 + 1) as usize;
        let got = feed_in_chunks(&input, &mut || (rng.next() as usize) % max + 1).unwrap();
        assert_eq!(got, whole);
    }
}

#[test]
fn oversized_header_blocks_are_refused_early() {
    // One HEADERS frame announcing more than the limit: refused from its 9-byte header.
    let mut input = PREFACE.to_vec();
    put_frame_head(&mut input, MAX_HEADER_BLOCK + 1, 1, 0, 1u32.to_be_bytes());
    assert_eq!(
        rewrite_stream(&input),
        Err(RewriteError::HeaderBlockTooLarge)
    );

    // CONTINUATION frames adding up past the limit.
    let chunk = vec![0u8; OUT_FRAME_SIZE];
    let mut frames = vec![frame(1, 0, 1, &chunk)];
    for _ in 0..(MAX_HEADER_BLOCK / OUT_FRAME_SIZE) {
        frames.push(frame(9, 0, 1, &chunk));
    }
    assert_eq!(
        rewrite_stream(&with_preface(&frames)),
        Err(RewriteError::HeaderBlockTooLarge)
    );

    // Frames that are not header blocks are streamed, whatever their size.
    let mut input = PREFACE.to_vec();
    put_frame_head(&mut input, 0xff_ffff, 0, 0, 1u32.to_be_bytes());
    input.extend_from_slice(&[7; 1000]);
    assert_eq!(rewrite_stream(&input).unwrap(), input);
}

#[test]
fn hpack_bombs_are_refused() {
    // One 4000-byte entry referenced 300 times decodes to 1.2 MB from a tiny block.
    let insert = incremental(Err(b"x"), &[b'a'; 4000], false);
    let bomb = indexed(62).repeat(300);
    let input = with_preface(&[
        frame(1, FLAG_END_HEADERS, 1, &insert),
        frame(1, FLAG_END_HEADERS, 3, &bomb),
    ]);
    assert_eq!(
        rewrite_stream(&input),
        Err(RewriteError::HeaderListTooLarge)
    );
}

#[test]
fn protocol_and_hpack_errors_are_errors() {
    let ok = request_block(incremental(Ok(1), RAW, true));
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("index out of range", vec![frame(1, 4, 1, &indexed(70))]),
        ("index zero", vec![frame(1, 4, 1, &indexed(0))]),
        (
            "truncated literal",
            vec![frame(1, 4, 1, &[0x41, 0x05, b'a'])],
        ),
        ("truncated integer", vec![frame(1, 4, 1, &[0xff, 0x80])]),
        (
            "EOS in Huffman",
            vec![frame(1, 4, 1, &[0x41, 0x84, 0xff, 0xff, 0xff, 0xff])],
        ),
        (
            "size update at end",
            vec![frame(1, 4, 1, &size_update(100))],
        ),
        ("padding too long", vec![frame(1, 4 | 8, 1, &[200, 0x82])]),
        ("no pad length", vec![frame(1, 4 | 8, 1, &[])]),
        ("short priority", vec![frame(1, 4 | 0x20, 1, &[0, 0, 1])]),
        (
            "interleaved frame",
            vec![
                frame(1, 0, 1, &ok[..4]),
                frame(0, 0, 1, b"x"),
                frame(9, 4, 1, &ok[4..]),
            ],
        ),
        (
            "interleaved HEADERS",
            vec![frame(1, 0, 1, &ok[..4]), frame(1, 4, 3, &ok)],
        ),
        (
            "CONTINUATION on another stream",
            vec![frame(1, 0, 1, &ok[..4]), frame(9, 4, 3, &ok[4..])],
        ),
    ];
    for (what, frames) in cases {
        let input = with_preface(&frames);
        assert!(rewrite_stream(&input).is_err(), "{what}");
        assert!(
            feed_in_chunks(&input, &mut || 1).is_err(),
            "{what} (bytewise)"
        );
    }
}

#[test]
fn errors_are_sticky_and_keep_earlier_output() {
    let mut r = Rewriter::new();
    let mut out = Vec::new();
    let good = frame(4, 0, 0, &[]);
    let input = with_preface(&[good.clone(), frame(1, 4, 1, &indexed(99))]);
    let err = r.feed(&input, &mut out).unwrap_err();
    assert!(matches!(err, RewriteError::Hpack(_)));
    assert_eq!(out, with_preface(&[good]));
    out.clear();
    assert_eq!(r.feed(&good_request(), &mut out), Err(err));
    assert!(out.is_empty());
}

fn good_request() -> Vec<u8> {
    frame(1, 5, 1, &request_block(incremental(Ok(1), RAW, true)))
}

#[test]
fn stray_continuation_passes_through() {
    // h2 itself answers this with a connection error; the shim must not choke on it.
    let input = with_preface(&[frame(9, 4, 1, b"\x82"), frame(4, 0, 0, &[])]);
    assert_eq!(rewrite_stream(&input).unwrap(), input);
}

#[test]
fn garbage_never_panics() {
    let mut rng = XorShift(0x1234_5678_9abc_def1);
    let busy = busy_stream();
    for round in 0..3000 {
        let len = (rng.next() % 300) as usize;
        let mut input = if round % 2 == 0 {
            PREFACE.to_vec()
        } else {
            busy[..24 + (rng.next() as usize % (busy.len() - 24))].to_vec()
        };
        for _ in 0..len {
            // Bias towards small lengths and header-block types so frames get parsed.
            let b = match rng.next() % 4 {
                0 => 0,
                1 => [1u8, 9, 4, 5, 8, 0x20, 0x24, 0x2d][rng.next() as usize % 8],
                _ => rng.next() as u8,
            };
            input.push(b);
        }
        let _ = rewrite_stream(&input);
        let _ = feed_in_chunks(&input, &mut || (rng.next() % 7) as usize + 1);
    }
    // Mutations of a valid stream.
    for _ in 0..3000 {
        let mut input = busy.clone();
        for _ in 0..(rng.next() % 4 + 1) {
            let i = 24 + rng.next() as usize % (input.len() - 24);
            input[i] = rng.next() as u8;
        }
        let _ = rewrite_stream(&input);
    }
}

#[test]
fn a_good_authority_remembered_does_not_let_a_bad_one_pass() {
    // The rewriter remembers the last acceptable :authority so as not to check it again; an
    // empty or different value after it is still checked and fixed.
    for later in [&b""[..], RAW, b"localhost "] {
        let input = with_preface(&[
            frame(
                1,
                FLAG_END_HEADERS,
                1,
                &incremental(Ok(1), b"localhost", false),
            ),
            frame(
                1,
                FLAG_END_HEADERS,
                3,
                &literal(0, 4, Ok(1), b"localhost", true),
            ),
            frame(1, FLAG_END_HEADERS, 5, &literal(0, 4, Ok(1), later, false)),
            frame(1, FLAG_END_HEADERS, 7, &indexed(62)),
        ]);
        let (blocks, _) = decode_out(&rewrite_stream(&input).unwrap());
        let got: Vec<_> = blocks
            .iter()
            .map(|b| (b.reencoded, b.fields.clone()))
            .collect();
        let localhost = fields(&[(":authority", "localhost")]);
        assert_eq!(
            got,
            [
                (false, localhost.clone()),
                (false, localhost.clone()),
                (true, localhost.clone()),
                (true, localhost),
            ],
            "{later:?}"
        );
    }
}
