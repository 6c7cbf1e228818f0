//! Malformed, oversized and random input on the RTSP port.

use crate::support::*;

#[test]
fn malformed_input_gets_4xx_or_close_and_never_hurts_other_viewers() {
    let node = demo_node("");
    // A viewer that plays throughout: 10 s of output, zero errors.
    let viewer = spawn_ffmpeg_decode(
        &node.url(DEMO),
        &["-rtsp_transport", "tcp"],
        &["-t", "10"],
        Duration::from_secs(30),
    );
    let viewer_bytes = || {
        node.api_json("/api/sessions")
            .as_array()
            .and_then(|a| a.iter().find_map(|s| s["bytes"].as_u64()))
            .unwrap_or(0)
    };
    poll_until(Duration::from_secs(10), "the viewer to play", || {
        (viewer_bytes() > 0).then_some(())
    });

    let big_header = format!(
        "OPTIONS * RTSP/1.0\r\nCSeq: 4\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(9000)
    );
    // (what, bytes, end our side after sending, the answers expected)
    let cases: Vec<(&str, Vec<u8>, bool, Vec<u16>)> = vec![
        (
            "garbage request line",
            b"HELLO\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
        (
            "request line with four words",
            b"OPTIONS * RTSP/1.0 x\r\nCSeq: 1\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
        (
            "request line without version",
            b"DESCRIBE rtsp://x/live/demo\r\nCSeq: 1\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
        // Another protocol's version: 505 RTSP Version Not Supported is the precise answer.
        (
            "HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            true,
            vec![505],
        ),
        (
            "header line without colon",
            b"OPTIONS * RTSP/1.0\r\nCSeq: 2\r\nno colon here\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
        (
            "header not UTF-8",
            b"OPTIONS * RTSP/1.0\r\nCSeq: 2\r\nX-Bin: \xff\xfe\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
        (
            "missing CSeq",
            b"OPTIONS * RTSP/1.0\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
        (
            "non-numeric CSeq",
            b"OPTIONS * RTSP/1.0\r\nCSeq: one\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
        (
            "unknown method",
            b"FROBNICATE rtsp://x/live/demo RTSP/1.0\r\nCSeq: 3\r\n\r\n".to_vec(),
            true,
            vec![501],
        ),
        // The node closes by itself after answering: no need to end our side.
        (
            "headers over 8 KiB",
            big_header.into_bytes(),
            false,
            vec![400],
        ),
        (
            "negative Content-Length",
            b"ANNOUNCE rtsp://x/live/y RTSP/1.0\r\nCSeq: 5\r\nContent-Length: -1\r\n\r\n".to_vec(),
            false,
            vec![400],
        ),
        (
            "body over the limit",
            b"ANNOUNCE rtsp://x/live/y RTSP/1.0\r\nCSeq: 5\r\nContent-Length: 99999999\r\n\r\n"
                .to_vec(),
            false,
            vec![413],
        ),
        // Interleaved frames: one announcing more than is ever sent (the node waits for the
        // rest, then sees the end of input), an empty one followed by a good request, and
        // one whose length cuts a request in two (the remainder is a bad request line).
        (
            "interleaved frame longer than sent",
            [&b"$\x00\xff\xff"[..], &[0u8; 100]].concat(),
            true,
            vec![],
        ),
        (
            "empty interleaved frame then OPTIONS",
            b"$\x00\x00\x00OPTIONS * RTSP/1.0\r\nCSeq: 6\r\n\r\n".to_vec(),
            true,
            vec![200],
        ),
        (
            "interleaved length cutting a request",
            b"$\x00\x00\x08OPTIONS * RTSP/1.0\r\nCSeq: 7\r\n\r\n".to_vec(),
            true,
            vec![400],
        ),
    ];
    for (what, bytes, end_input, want) in &cases {
        let got = send_and_collect(&node, what, bytes, *end_input);
        assert_eq!(&got, want, "{what}: answers");
        assert_answers(&node, what);
    }
    for seed in 1..=24u64 {
        let what = format!("random bytes (seed {seed})");
        let got = send_and_collect(&node, &what, &random_bytes(seed, 4096), true);
        assert!(
            got.iter().all(|s| (400..500).contains(s) || *s == 505),
            "{what}: answers {got:?}"
        );
        assert_answers(&node, &what);
    }
    assert!(
        metric_value(&node, "vigil_rtsp_bad_requests_total") >= 12.0,
        "bad requests not counted"
    );

    // The viewer played on through all of it: it is still receiving now...
    let now = viewer_bytes();
    poll_until(
        Duration::from_secs(5),
        "the viewer to go on receiving",
        || (viewer_bytes() > now).then_some(()),
    );
    // ...and decodes its 10 s without an error.
    viewer
        .join()
        .expect("viewer thread")
        .assert_plays("viewer during the bad input", 225, 251);
}
