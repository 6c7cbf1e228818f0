//! The session limit (503), the session timeout (which RTCP from elsewhere cannot put off),
//! and garbage RTP from a publisher.

use crate::support::*;

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
    // Idle over TCP: plays, then never sends another request.
    let mut tcp = RtspConn::connect(node.rtsp);
    tcp.play_tcp(&url);
    // Idle over UDP: plays, never sends RTCP.
    let (_rtp, _rtcp, port) = udp_port_pair();
    let mut udp = RtspConn::connect(node.rtsp);
    let r = udp.play_udp(&url, port);
    assert!(
        r.headers
            .get("Session")
            .is_some_and(|s| s.ends_with(";timeout=2")),
        "Session header: {:?}",
        r.headers.get("Session")
    );
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

/// RTCP from another address does not keep a UDP viewer's session alive: only its own
/// host's reports count, as only a publisher's own address may inject its media. Anyone who
/// learnt the port could otherwise hold the session, and its slot, open forever.
#[test]
fn rtcp_from_another_address_does_not_keep_a_udp_session_alive() {
    let node = demo_node("[limits]\nsession_timeout_secs = 2");
    let url = node.url(DEMO);
    let (_rtp, _rtcp, port) = udp_port_pair();
    let mut viewer = RtspConn::connect(node.rtsp);
    let node_rtcp = server_port(&viewer.play_udp(&url, port)) + 1;
    let played = Instant::now();
    let before = metric_value(&node, "vigil_rtp_garbage_total");
    // A well-formed receiver report, sent from 127.0.0.2 while the viewer (127.0.0.1) is
    // silent: on every poll, so it never goes 2 s without one.
    let report = vigil_proto::rtcp::receiver_report(0x5eed_0001, "intruder");
    let intruder = std::net::UdpSocket::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    poll_until(
        Duration::from_secs(10),
        "the silent viewer's session to time out",
        || {
            intruder
                .send_to(&report, ("127.0.0.1", node_rtcp))
                .expect("send");
            node.api_json("/api/sessions")
                .as_array()?
                .is_empty()
                .then_some(())
        },
    );
    assert!(
        played.elapsed() >= Duration::from_millis(1900),
        "the session ended after {:?}, before its 2 s timeout",
        played.elapsed()
    );
    assert!(
        metric_value(&node, "vigil_rtp_garbage_total") > before,
        "RTCP from another address was not counted as garbage"
    );
}

#[test]
fn garbage_rtp_to_a_publisher_is_dropped_and_counted() {
    let node = demo_node("");
    let path = "live/udp-pub";
    let url = node.url(path);
    let (rtp, _rtcp, port) = udp_port_pair();
    let mut p = announce_two_track_sdp(&node, &url);
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
    let server_port = server_port(&r);
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

/// What a raw HTTP/1.1 connection to the admin API got before the node closed it (within
/// 5 s; a connection still open then fails the test).
fn http_until_closed(s: &mut std::net::TcpStream, what: &str) -> String {
    let got = vigil_tests::read_until_closed(s, Duration::from_secs(5), what);
    String::from_utf8_lossy(&got).into_owned()
}

const HEALTH: &[u8] = b"GET /api/health HTTP/1.1\r\nHost: vigil\r\n\r\n";

/// The admin API's listener holds nobody's socket for long: a connection that sends no
/// request head, half of one, or nothing after its last answer is closed after
/// `[http] header_read_timeout_ms`.
#[test]
fn the_admin_api_closes_connections_without_a_request() {
    use std::io::Write;
    let node = NodeBuilder::new()
        .http("header_read_timeout_ms = 500")
        .start();
    let connect = || std::net::TcpStream::connect(node.api).expect("connect");
    let mut silent = connect();
    let got = http_until_closed(&mut silent, "a connection that sends nothing");
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 408"), "{got:?}");
    let mut half = connect();
    half.write_all(b"GET /api/health HTTP/1.1\r\nHost: vig")
        .expect("send");
    let got = http_until_closed(&mut half, "half a request head");
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 408"), "{got:?}");
    // A kept-alive connection gets its answer, then the same bound for its next request.
    let mut kept = connect();
    kept.write_all(HEALTH).expect("send");
    let got = http_until_closed(&mut kept, "a kept-alive connection left idle");
    assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");
}

/// Issue 44, finding M1, as its attack: a PTZ command with made-up Basic credentials (which
/// the token gate passes to the route) announcing a 2 MB body and trickling it a byte at a
/// time. The body must arrive whole within `[http] body_read_timeout_ms`: the node answers
/// 408 and closes the connection before the route sees it.
#[test]
fn a_trickled_request_body_is_cut_off_at_its_deadline() {
    use std::io::Write;
    let node = NodeBuilder::new()
        .http("body_read_timeout_ms = 500")
        .start();
    let mut s = std::net::TcpStream::connect(node.api).expect("connect");
    // With the token, so the gate lets it through to the route, which reads the body.
    let auth = format!("Authorization: Bearer {}\r\n", vigil_tests::ADMIN_TOKEN);
    s.write_all(
        format!(
            "POST /api/cameras/gate/ptz HTTP/1.1\r\nHost: vigil\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .expect("send");
    let started = std::time::Instant::now();
    // One more byte now and then: each arrives well inside a per-read timeout.
    let mut trickle = s.try_clone().expect("clone");
    let trickler = std::thread::spawn(move || {
        for _ in 0..40 {
            if trickle.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let got = http_until_closed(&mut s, "a trickled body");
    let took = started.elapsed();
    let _ = trickler.join();
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    assert!(took < Duration::from_secs(4), "closed after {took:?}");
    // A whole body in time still reaches the route (which refuses the command: no such
    // camera, no registry).
    let mut whole = std::net::TcpStream::connect(node.api).expect("connect");
    whole
        .write_all(
            format!(
                "POST /api/cameras/gate/ptz HTTP/1.1\r\nHost: vigil\r\n{auth}\
                 Content-Type: application/json\r\nContent-Length: 2\r\n\
                 Connection: close\r\n\r\n{{}}"
            )
            .as_bytes(),
        )
        .expect("send");
    let got = http_until_closed(&mut whole, "a whole body");
    assert!(
        !got.starts_with("HTTP/1.1 408") && got.starts_with("HTTP/1.1 4"),
        "{got:?}"
    );
}

/// Past `[http] max_connections_per_address` a new connection from that address is closed
/// at once, unanswered, and counted; another address is still served, and the address is
/// again once one of its connections has gone.
#[test]
fn the_admin_api_caps_connections_per_address() {
    use std::io::{Read, Write};
    let node = NodeBuilder::new()
        .http("max_connections_per_address = 3")
        .start();
    // Three connections from 127.0.0.1, each answered once and then kept open (idle). One
    // may be refused while the node still counts the harness's last start-up poll, whose
    // close it has not seen yet: it is opened again.
    let answered = || {
        let mut s = std::net::TcpStream::connect(node.api).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(HEALTH).ok()?;
        let mut answer = [0u8; 12];
        s.read_exact(&mut answer).ok()?;
        (&answer == b"HTTP/1.1 200").then_some(s)
    };
    let mut held: Vec<std::net::TcpStream> = (0..3)
        .map(|_| poll_until(Duration::from_secs(10), "an API connection", answered))
        .collect();
    let mut fourth = std::net::TcpStream::connect(node.api).expect("connect");
    let _ = fourth.write_all(HEALTH);
    let got = http_until_closed(&mut fourth, "a fourth connection from one address");
    assert!(
        got.is_empty(),
        "the fourth connection was answered: {got:?}"
    );
    // 127.0.0.2 has connections of its own.
    let other = vigil_tests::multi_thread_runtime().block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.2:0".parse().expect("address"))
            .expect("bind 127.0.0.2");
        let mut s = socket.connect(node.api).await.expect("connect");
        s.write_all(HEALTH).await.expect("send");
        let mut answer = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut answer))
            .await
            .expect("an answer within 5 s")
            .expect("an answer");
        answer
    });
    assert_eq!(&other, b"HTTP/1.1 200", "127.0.0.2 refused");
    held.pop();
    // (A poll made before the node saw that close is refused and counted too.)
    poll_until(
        Duration::from_secs(10),
        "127.0.0.1 served again, the refusal counted",
        || {
            let v = metric_value(
                &node,
                r#"vigil_limit_refusals_total{limit="http_connections_per_address"}"#,
            );
            (v >= 1.0).then_some(())
        },
    );
    // The two still held and the one asking.
    poll_until(Duration::from_secs(10), "3 open API connections", || {
        (metric_value(&node, "vigil_http_connections_open") == 3.0).then_some(())
    });
}
