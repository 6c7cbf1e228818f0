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

/// RTCP from another address does not keep a UDP viewer's session alive: only its own
/// host's reports count, as only a publisher's own address may inject its media. Anyone who
/// learnt the port could otherwise hold the session, and its slot, open forever.
#[test]
fn rtcp_from_another_address_does_not_keep_a_udp_session_alive() {
    let node = demo_node("[limits]\nsession_timeout_secs = 2");
    let url = node.url(DEMO);
    let (_rtp, _rtcp, port) = udp_port_pair();
    let mut viewer = RtspConn::connect(node.rtsp);
    let t = format!("RTP/AVP;unicast;client_port={port}-{}", port + 1);
    let r = viewer.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &[("Transport", &t)],
        None,
    );
    assert_eq!(r.status.0, 200, "SETUP: {}", r.reason);
    let node_rtcp = server_port(&r) + 1;
    assert_eq!(viewer.request("PLAY", &url, &[], None).status.0, 200);
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
