//! A node's life as operators see it: SIGTERM says goodbye to readers (RTCP BYE over TCP
//! and UDP, connections closed) and exits 0; `vigil ctl` shows paths and sessions.

use std::time::{Duration, Instant};
use vigil_proto::rtcp::{parse_compound, RtcpPacket};
use vigil_tests::ctl;
use vigil_tests::{poll_until, udp_port_pair, Incoming, Node, NodeBuilder, RtspConn, DEMO_CAMERA};

const DEMO: &str = "live/demo";

fn demo_node() -> Node {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).start();
    node.wait_live(DEMO);
    node
}

fn rtp_ssrc(packet: &[u8]) -> u32 {
    vigil_proto::rtp::parse(packet).expect("valid RTP").0.ssrc
}

fn is_bye_of(rtcp: &[u8], ssrc: u32) -> bool {
    parse_compound(rtcp).is_ok_and(|pkts| {
        pkts.iter()
            .any(|p| matches!(p, RtcpPacket::Bye { ssrcs } if ssrcs.contains(&ssrc)))
    })
}

#[test]
fn sigterm_says_goodbye_to_readers_and_exits_zero() {
    let mut node = demo_node();
    let url = node.url(DEMO);

    // A UDP reader: RTP on an even port, RTCP on the next.
    let (rtp, rtcp, port) = udp_port_pair();
    for s in [&rtp, &rtcp] {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
    }
    let mut udp_ctl = RtspConn::connect(node.rtsp);
    let d = udp_ctl.request("DESCRIBE", &url, &[], None);
    assert_eq!(d.status.0, 200, "DESCRIBE: {}", d.reason);
    udp_ctl.play_udp(&url, port);
    let mut buf = [0u8; 2048];
    let udp_ssrc = poll_until(Duration::from_secs(5), "UDP media", || {
        rtp.recv(&mut buf).ok().map(|n| rtp_ssrc(&buf[..n]))
    });

    // A TCP reader.
    let mut tcp = RtspConn::connect(node.rtsp);
    tcp.play_tcp(&url);
    let tcp_ssrc = loop {
        match tcp.receive().expect("TCP media") {
            Incoming::Data {
                channel: 0,
                payload,
            } => break rtp_ssrc(&payload),
            Incoming::Closed => panic!("closed before any media"),
            _ => {}
        }
    };

    let status = node.terminate();
    assert!(status.success(), "vigil exited with {status} after SIGTERM");

    // TCP: everything up to a clean close, with an RTCP BYE on the RTCP channel.
    let mut tcp_bye = false;
    loop {
        match tcp
            .receive()
            .expect("TCP reader: the node neither closed nor answered")
        {
            Incoming::Data {
                channel: 1,
                payload,
            } => tcp_bye |= is_bye_of(&payload, tcp_ssrc),
            Incoming::Closed => break,
            _ => {}
        }
    }
    assert!(tcp_bye, "no RTCP BYE on the TCP reader's RTCP channel");
    // The RTSP connection of the UDP reader is closed too.
    assert!(
        udp_ctl
            .response()
            .expect("UDP reader's RTSP connection")
            .is_none(),
        "UDP reader's RTSP connection not closed"
    );
    // UDP: a BYE on the RTCP port (the node is gone: whatever it sent is already queued).
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut udp_bye = false;
    while !udp_bye && Instant::now() < deadline {
        if let Ok(n) = rtcp.recv(&mut buf) {
            udp_bye = is_bye_of(&buf[..n], udp_ssrc);
        }
    }
    assert!(udp_bye, "no RTCP BYE on the UDP reader's RTCP port");
}

#[test]
fn ctl_shows_paths_and_sessions() {
    let node = demo_node();
    let mut reader = RtspConn::connect(node.rtsp);
    reader.play_tcp(&node.url(DEMO));
    let id = reader.session.clone().expect("session id");
    // Keep reading so the session's counters move.
    let mut packets = 0;
    while packets < 50 {
        if let Incoming::Data { channel: 0, .. } = reader.receive().expect("media") {
            packets += 1;
        }
    }

    let paths = ctl(&node, &["paths"]);
    let row = paths
        .lines()
        .find(|l| l.contains(DEMO))
        .unwrap_or_else(|| panic!("no {DEMO} row:\n{paths}"));
    for want in ["demo", "yes", "H264"] {
        assert!(row.contains(want), "{want:?} missing from {row:?}");
    }
    assert!(paths.contains("READERS"), "no table header:\n{paths}");

    let table = ctl(&node, &["sessions"]);
    assert!(
        table.lines().any(|l| l.contains(&id) && l.contains(DEMO)),
        "session {id} missing:\n{table}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&ctl(&node, &["sessions", "--json"])).expect("ctl --json is JSON");
    let sessions = json.as_array().expect("an array of sessions");
    let s = sessions
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("session {id} missing: {json}"));
    assert_eq!(s["path"], DEMO, "{s}");
    assert_eq!(s["kind"], "play", "{s}");
    assert!(
        s["transport"]
            .as_str()
            .is_some_and(|t| t.starts_with("RTP/AVP/TCP")),
        "{s}"
    );
    let local = reader.stream.local_addr().expect("local addr").to_string();
    assert_eq!(s["client"], local.as_str(), "{s}");
    assert!(s["bytes"].as_u64().unwrap_or(0) > 0, "{s}");

    let paths: serde_json::Value =
        serde_json::from_str(&ctl(&node, &["paths", "--json"])).expect("ctl --json is JSON");
    let demo = paths
        .as_array()
        .and_then(|a| a.iter().find(|p| p["path"] == DEMO))
        .unwrap_or_else(|| panic!("no {DEMO}: {paths}"));
    assert_eq!(demo["readers"], 1, "{demo}");
    assert_eq!(demo["live"], true, "{demo}");
}
