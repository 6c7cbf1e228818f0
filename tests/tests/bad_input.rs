//! Bad input over raw sockets: malformed requests, oversized headers, unknown methods, wrong
//! interleaved lengths and random bytes get a 4xx or a clean close and never hurt the node
//! or its other viewers; every RTSP error status of the protocol is where it should be;
//! limits, the session timeout and garbage RTP are handled and counted.

use std::time::{Duration, Instant};
use vigil_tests::{
    metric_value, poll_until, spawn_ffmpeg_decode, udp_port_pair, Incoming, Node, NodeBuilder,
    RtspConn, DEMO_CAMERA, TWO_TRACK_SDP,
};

const DEMO: &str = "live/demo";

fn demo_node(extra: &str) -> Node {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).extra(extra).start();
    node.wait_live(DEMO);
    node
}

/// The node answers OPTIONS on a fresh connection.
fn assert_answers(node: &Node, after: &str) {
    let mut c = RtspConn::connect(node.rtsp);
    let r = c.request("OPTIONS", &node.url(DEMO), &[], None);
    assert_eq!(r.status.0, 200, "OPTIONS after {after}: {}", r.reason);
    assert!(
        r.headers
            .get("Public")
            .is_some_and(|p| p.contains("GET_PARAMETER")),
        "Public after {after}: {:?}",
        r.headers.get("Public")
    );
}

/// Send `bytes`, optionally end our side, and collect every answer until the node closes
/// the connection. A node that neither answers nor closes within 5 s fails the test.
fn send_and_collect(node: &Node, what: &str, bytes: &[u8], end_input: bool) -> Vec<u16> {
    let mut c = RtspConn::connect(node.rtsp);
    // The node may close while we are still writing (that is a clean close too).
    let _ = c.send(bytes);
    if end_input {
        let _ = c.stream.shutdown(std::net::Shutdown::Write);
    }
    let mut statuses = Vec::new();
    loop {
        match c.receive() {
            Ok(Incoming::Response(r)) => statuses.push(r.status.0),
            Ok(Incoming::Data { .. }) => panic!("{what}: media on a connection without session"),
            Ok(Incoming::Closed) => return statuses,
            Err(e) => panic!("{what}: the node neither answered nor closed: {e}"),
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

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

#[test]
fn unknown_paths_are_404() {
    let node = demo_node("");
    let mut c = RtspConn::connect(node.rtsp);
    for path in ["live/nope", "nope", "live/demo/extra/more"] {
        let r = c.request("DESCRIBE", &node.url(path), &[], None);
        assert_eq!(r.status.0, 404, "DESCRIBE {path}: {}", r.reason);
    }
    let r = c.request(
        "SETUP",
        &node.url("live/nope/trackID=0"),
        &[("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")],
        None,
    );
    assert_eq!(r.status.0, 404, "SETUP of an unknown path: {}", r.reason);
    // A push path nobody publishes to is not live: 404 as well.
    let r = c.request("DESCRIBE", &node.url("live/idle"), &[], None);
    assert_eq!(
        r.status.0, 404,
        "DESCRIBE of an idle push path: {}",
        r.reason
    );
}

#[test]
fn unsupported_transports_are_461_and_leave_no_session() {
    let node = demo_node("");
    let url = node.url(DEMO);
    let track = format!("{url}/trackID=0");
    let mut c = RtspConn::connect(node.rtsp);
    assert_eq!(c.request("DESCRIBE", &url, &[], None).status.0, 200);
    for transport in [
        "RTP/AVP;multicast",
        "RTP/AVP;multicast;destination=224.2.0.1;port=5000-5001",
        "RTP/SAVP;unicast;client_port=5000-5001",
        "RAW/RAW/UDP;unicast;client_port=5000-5001",
        "RTP/AVP;unicast;client_port=5000-5001;destination=127.0.0.9",
    ] {
        let r = c.request("SETUP", &track, &[("Transport", transport)], None);
        assert_eq!(r.status.0, 461, "SETUP with {transport}: {}", r.reason);
    }
    let r = c.request("SETUP", &track, &[], None);
    assert_eq!(r.status.0, 461, "SETUP without Transport: {}", r.reason);
    // The refusals left nothing behind: the same client's next SETUP works, and the node
    // lists exactly that one session.
    let r = c.request(
        "SETUP",
        &track,
        &[("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")],
        None,
    );
    assert_eq!(r.status.0, 200, "SETUP after the refusals: {}", r.reason);
    let sessions = node.api_json("/api/sessions");
    assert_eq!(
        sessions.as_array().map(Vec::len),
        Some(1),
        "sessions: {sessions}"
    );
}

#[test]
fn requests_without_a_valid_session_are_454() {
    let node = demo_node("");
    let url = node.url(DEMO);
    let mut c = RtspConn::connect(node.rtsp);
    // PLAY before any SETUP: there is no session to play (no session can exist before SETUP).
    let r = c.request("PLAY", &url, &[], None);
    assert_eq!(r.status.0, 454, "PLAY without a session: {}", r.reason);
    for method in ["PLAY", "PAUSE", "TEARDOWN", "GET_PARAMETER"] {
        let r = c.request(method, &url, &[("Session", "DEADBEEF")], None);
        assert_eq!(
            r.status.0, 454,
            "{method} with an unknown session: {}",
            r.reason
        );
    }
    // With a session: a wrong id is still 454, the right one works.
    let r = c.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &[("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")],
        None,
    );
    assert_eq!(r.status.0, 200, "SETUP: {}", r.reason);
    let r = c.request("PLAY", &url, &[("Session", "0123456789ABCDEF")], None);
    assert_eq!(
        r.status.0, 454,
        "PLAY with another session id: {}",
        r.reason
    );
    let r = c.request("PLAY", &url, &[], None);
    assert_eq!(r.status.0, 200, "PLAY with the session: {}", r.reason);
}

/// A raw publisher of a two-track (H.264 + AAC) stream over TCP interleaved, no media.
fn announce_two_tracks(node: &Node, path: &str) -> RtspConn {
    let url = node.url(path);
    let mut p = RtspConn::connect(node.rtsp);
    let r = p.request(
        "ANNOUNCE",
        &url,
        &[],
        Some(("application/sdp", TWO_TRACK_SDP)),
    );
    assert_eq!(r.status.0, 200, "ANNOUNCE: {}", r.reason);
    for (i, ch) in [(0, "0-1"), (1, "2-3")] {
        let t = format!("RTP/AVP/TCP;unicast;interleaved={ch};mode=record");
        let r = p.request(
            "SETUP",
            &format!("{url}/streamid={i}"),
            &[("Transport", &t)],
            None,
        );
        assert_eq!(r.status.0, 200, "publisher SETUP {i}: {}", r.reason);
    }
    p
}

#[test]
fn methods_in_the_wrong_state_are_455() {
    let node = demo_node("");
    let url = node.url(DEMO);

    // RECORD on a play session.
    let mut viewer = RtspConn::connect(node.rtsp);
    let r = viewer.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &[("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")],
        None,
    );
    assert_eq!(r.status.0, 200, "SETUP: {}", r.reason);
    let r = viewer.request("RECORD", &url, &[], None);
    assert_eq!(r.status.0, 455, "RECORD on a play session: {}", r.reason);
    // SETUP for recording on a path that was not ANNOUNCEd.
    let mut other = RtspConn::connect(node.rtsp);
    let r = other.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &[(
            "Transport",
            "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record",
        )],
        None,
    );
    assert_eq!(
        r.status.0, 455,
        "SETUP mode=record without ANNOUNCE: {}",
        r.reason
    );

    // PLAY on a record session, and a second ANNOUNCE on the publisher's connection.
    let pub_url = node.url("live/pub");
    let mut publisher = announce_two_tracks(&node, "live/pub");
    let r = publisher.request("PLAY", &pub_url, &[], None);
    assert_eq!(r.status.0, 455, "PLAY on a record session: {}", r.reason);
    let r = publisher.request(
        "ANNOUNCE",
        &pub_url,
        &[],
        Some(("application/sdp", TWO_TRACK_SDP)),
    );
    assert_eq!(r.status.0, 455, "ANNOUNCE twice: {}", r.reason);
    // The session is still fine for what it is for.
    let r = publisher.request("RECORD", &pub_url, &[], None);
    assert_eq!(r.status.0, 200, "RECORD: {}", r.reason);
}

#[test]
fn aggregate_setup_of_a_two_track_path_is_459() {
    let node = demo_node("");
    let path = "live/two";
    let url = node.url(path);
    let mut publisher = announce_two_tracks(&node, path);
    let r = publisher.request("RECORD", &url, &[], None);
    assert_eq!(r.status.0, 200, "RECORD: {}", r.reason);
    node.wait_live(path);

    let mut c = RtspConn::connect(node.rtsp);
    let d = c.request("DESCRIBE", &url, &[], None);
    let sdp = String::from_utf8_lossy(&d.body);
    assert_eq!(sdp.matches("m=").count(), 2, "{sdp}");
    let tcp = [("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")];
    let r = c.request("SETUP", &url, &tcp, None);
    assert_eq!(
        r.status.0, 459,
        "aggregate SETUP of two tracks: {}",
        r.reason
    );
    // Per track it works, and a session stays on one path.
    let r = c.request("SETUP", &format!("{url}/trackID=0"), &tcp, None);
    assert_eq!(r.status.0, 200, "SETUP track 0: {}", r.reason);
    let r = c.request(
        "SETUP",
        &format!("{url}/trackID=1"),
        &[("Transport", "RTP/AVP/TCP;unicast;interleaved=2-3")],
        None,
    );
    assert_eq!(r.status.0, 200, "SETUP track 1: {}", r.reason);
    let r = c.request(
        "SETUP",
        &format!("{}/trackID=0", node.url(DEMO)),
        &tcp,
        None,
    );
    assert_eq!(
        r.status.0, 459,
        "SETUP of another path in the session: {}",
        r.reason
    );
}

#[test]
fn session_limit_is_503() {
    let node = demo_node("[limits]\nmax_sessions = 1");
    let track = format!("{}/trackID=0", node.url(DEMO));
    let tcp = [("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")];
    let mut first = RtspConn::connect(node.rtsp);
    assert_eq!(first.request("SETUP", &track, &tcp, None).status.0, 200);
    let mut second = RtspConn::connect(node.rtsp);
    let r = second.request("SETUP", &track, &tcp, None);
    assert_eq!(r.status.0, 503, "SETUP past max_sessions: {}", r.reason);
    assert!(metric_value(&node, "vigil_sessions_rejected_total") >= 1.0);
    // Requests that need no session still work, and the slot frees with TEARDOWN.
    assert_eq!(
        second
            .request("DESCRIBE", &node.url(DEMO), &[], None)
            .status
            .0,
        200
    );
    assert_eq!(
        first
            .request("TEARDOWN", &node.url(DEMO), &[], None)
            .status
            .0,
        200
    );
    let r = second.request("SETUP", &track, &tcp, None);
    assert_eq!(r.status.0, 200, "SETUP after the TEARDOWN: {}", r.reason);
}

#[test]
fn idle_sessions_time_out() {
    let node = demo_node("[limits]\nsession_timeout_secs = 2");
    let url = node.url(DEMO);
    let track = format!("{url}/trackID=0");
    // Idle over TCP: plays, then never sends another request.
    let mut tcp = RtspConn::connect(node.rtsp);
    tcp.play_tcp(&url);
    // Idle over UDP: plays, never sends RTCP.
    let (_rtp, _rtcp, port) = udp_port_pair();
    let mut udp = RtspConn::connect(node.rtsp);
    let t = format!("RTP/AVP;unicast;client_port={port}-{}", port + 1);
    let r = udp.request("SETUP", &track, &[("Transport", &t)], None);
    assert_eq!(r.status.0, 200, "SETUP: {}", r.reason);
    assert!(
        r.headers
            .get("Session")
            .is_some_and(|s| s.ends_with(";timeout=2")),
        "Session header: {:?}",
        r.headers.get("Session")
    );
    assert_eq!(udp.request("PLAY", &url, &[], None).status.0, 200);
    // Alive: keeps sending GET_PARAMETER every ~second, as ffmpeg does.
    let mut alive = RtspConn::connect(node.rtsp);
    alive.play_tcp(&url);
    let alive_id = alive.session.clone().expect("session");
    let played = Instant::now();
    assert_eq!(
        node.api_json("/api/sessions").as_array().map(Vec::len),
        Some(3)
    );

    let mut last_keepalive = Instant::now();
    poll_until(
        Duration::from_secs(10),
        "the idle sessions to expire",
        || {
            if last_keepalive.elapsed() > Duration::from_millis(800) {
                let r = alive.request("GET_PARAMETER", &url, &[], None);
                assert_eq!(r.status.0, 200, "keepalive: {}", r.reason);
                last_keepalive = Instant::now();
            }
            let sessions = node.api_json("/api/sessions");
            let ids: Vec<&str> = sessions
                .as_array()
                .map(|a| a.iter().filter_map(|s| s["id"].as_str()).collect())
                .unwrap_or_default();
            (ids == [alive_id.as_str()]).then_some(())
        },
    );
    assert!(
        played.elapsed() >= Duration::from_millis(1900),
        "sessions expired after {:?}, before their 2 s timeout",
        played.elapsed()
    );
    assert_eq!(metric_value(&node, "vigil_sessions_timed_out_total"), 2.0);
    // The idle connections were closed (after whatever media was in flight).
    for (what, c) in [("TCP", &mut tcp), ("UDP", &mut udp)] {
        loop {
            match c.receive() {
                Ok(Incoming::Closed) => break,
                Ok(_) => {}
                Err(e) => panic!("idle {what} connection not closed: {e}"),
            }
        }
    }
}

#[test]
fn garbage_rtp_to_a_publisher_is_dropped_and_counted() {
    let node = demo_node("");
    let path = "live/udp-pub";
    let url = node.url(path);
    let (rtp, _rtcp, port) = udp_port_pair();
    let mut p = RtspConn::connect(node.rtsp);
    let r = p.request(
        "ANNOUNCE",
        &url,
        &[],
        Some(("application/sdp", TWO_TRACK_SDP)),
    );
    assert_eq!(r.status.0, 200, "ANNOUNCE: {}", r.reason);
    let t = format!(
        "RTP/AVP;unicast;client_port={port}-{};mode=record",
        port + 1
    );
    let r = p.request(
        "SETUP",
        &format!("{url}/streamid=0"),
        &[("Transport", &t)],
        None,
    );
    assert_eq!(r.status.0, 200, "SETUP: {}", r.reason);
    let answer = r
        .headers
        .get("Transport")
        .expect("Transport answer")
        .to_string();
    let server_port: u16 = answer
        .split(';')
        .find_map(|p| p.strip_prefix("server_port="))
        .and_then(|p| p.split('-').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no server_port in {answer}"));
    assert_eq!(p.request("RECORD", &url, &[], None).status.0, 200);
    node.wait_live(path);

    let before = metric_value(&node, "vigil_rtp_garbage_total");
    let garbage: [&[u8]; 4] = [
        &[0u8; 20],                   // RTP version 0
        &[0x80, 0x60, 0, 1],          // shorter than an RTP header
        &[0x8f; 12],                  // 15 CSRCs announced, none present
        b"definitely not RTP at all", // text
    ];
    for g in garbage {
        rtp.send_to(g, ("127.0.0.1", server_port)).expect("send");
        // RTCP port too.
        rtp.send_to(g, ("127.0.0.1", server_port + 1))
            .expect("send");
    }
    poll_until(Duration::from_secs(5), "the garbage to be counted", || {
        (metric_value(&node, "vigil_rtp_garbage_total") >= before + 8.0).then_some(())
    });
    // Nothing of it reached the stream; a valid packet does.
    let info = node.path_info(path).expect("path");
    assert_eq!(info["packets_in"], 0, "garbage entered the stream: {info}");
    let valid = vigil_proto::rtp::packet(
        &vigil_proto::rtp::RtpHeader {
            marker: true,
            payload_type: 96,
            sequence: 1,
            timestamp: 0,
            ssrc: 7,
        },
        &[0x65, 0x88, 0x84],
    );
    rtp.send_to(&valid, ("127.0.0.1", server_port))
        .expect("send");
    poll_until(Duration::from_secs(5), "the valid packet", || {
        let n = node.path_info(path).and_then(|p| p["packets_in"].as_u64());
        (n == Some(1)).then_some(())
    });
    assert_eq!(
        metric_value(&node, "vigil_rtp_garbage_total"),
        before + 8.0,
        "a valid packet was counted as garbage"
    );
}
