//! `[limits]` against clients that take too much: connections in total and per address,
//! sessions per address, requests per connection, and slowloris (a request that never
//! completes). Each refusal is seen by the client and counted in `/metrics`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use vigil_tests::{
    connect_from, metric_value, poll_until, Node, NodeBuilder, RtspConn, DEMO_CAMERA,
};

fn refusals(node: &Node, limit: &str) -> f64 {
    metric_value(
        node,
        &format!("vigil_limit_refusals_total{{limit=\"{limit}\"}}"),
    )
}

/// Whether the server closed `s` (EOF or reset) within a few seconds.
fn closed_by_server(s: &mut TcpStream) -> bool {
    closed_within(s, Duration::from_secs(5))
}

/// Whether the server closed `s` (EOF or reset) within `within`; false when still open.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).expect("timeout");
    let mut b = [0u8; 512];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                )
            }
        }
    }
}

/// OPTIONS on a raw stream: whether it was answered 200.
fn options_ok(s: &mut TcpStream, url: &str) -> bool {
    if s.write_all(format!("OPTIONS {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut b = [0u8; 512];
    matches!(s.read(&mut b), Ok(n) if n > 0 && b[..n].starts_with(b"RTSP/1.0 200"))
}

#[test]
fn connections_in_total_and_per_address() {
    let node = NodeBuilder::new()
        .extra("[limits]\nmax_connections = 5\nmax_connections_per_address = 3")
        .start();
    let url = node.url("live/x");
    let mut a: Vec<TcpStream> = (0..3)
        .map(|_| connect_from("127.0.0.5", node.rtsp))
        .collect();
    for s in &mut a {
        assert!(options_ok(s, &url));
    }
    let mut fourth = connect_from("127.0.0.5", node.rtsp);
    assert!(
        closed_by_server(&mut fourth),
        "a 4th connection from one address was kept"
    );
    let mut b: Vec<TcpStream> = (0..2)
        .map(|_| connect_from("127.0.0.6", node.rtsp))
        .collect();
    for s in &mut b {
        assert!(options_ok(s, &url));
    }
    let mut sixth = connect_from("127.0.0.7", node.rtsp);
    assert!(closed_by_server(&mut sixth), "a 6th connection was kept");
    assert!(refusals(&node, "connections_per_address") >= 1.0);
    assert!(refusals(&node, "connections") >= 1.0);
    // A closed connection gives its place back.
    drop(a.pop());
    poll_until(Duration::from_secs(5), "the place to come back", || {
        let mut s = connect_from("127.0.0.5", node.rtsp);
        options_ok(&mut s, &url).then_some(())
    });
}

#[test]
fn sessions_per_address_and_requests_per_connection() {
    let node = NodeBuilder::new()
        .extra("[limits]\nmax_sessions_per_address = 1\nrequests_per_sec = 5")
        .extra(DEMO_CAMERA)
        .start();
    node.wait_live("live/demo");
    let url = node.url("live/demo");
    let mut first = RtspConn::connect(node.rtsp);
    first.play_tcp(&url);
    let mut second = RtspConn::connect(node.rtsp);
    let d = second.request("DESCRIBE", &url, &[], None);
    assert_eq!(d.status.0, 200);
    let s = second.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &[("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")],
        None,
    );
    assert_eq!(s.status.0, 503, "{}", s.reason);
    assert!(s.reason.contains("address"), "{}", s.reason);
    assert!(refusals(&node, "sessions_per_address") >= 1.0);

    // 40 pipelined OPTIONS: the burst (10) is answered, most of the rest is refused.
    let mut c = connect_from("127.0.0.5", node.rtsp);
    let burst: String = (1..=40)
        .map(|i| format!("OPTIONS {url} RTSP/1.0\r\nCSeq: {i}\r\n\r\n"))
        .collect();
    c.write_all(burst.as_bytes()).expect("send");
    let mut text = String::new();
    let mut b = [0u8; 8192];
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    while text.matches("CSeq: ").count() < 40 {
        let n = c.read(&mut b).expect("read answers");
        assert!(n > 0, "closed");
        text.push_str(&String::from_utf8_lossy(&b[..n]));
    }
    let ok = text.matches("RTSP/1.0 200").count();
    let refused = text.matches("RTSP/1.0 503").count();
    assert!(
        (10..40).contains(&ok) && ok + refused == 40,
        "{ok} answered, {refused} refused"
    );
    assert!(text.contains("too many requests on this connection"));
    assert!(refusals(&node, "request_rate") >= refused as f64);
}

#[test]
fn slowloris_connections_are_dropped_at_the_request_deadline() {
    let node = NodeBuilder::new()
        .extra("[limits]\nrequest_deadline_ms = 500")
        .start();
    // Half a request, never finished; and a connection that sends nothing.
    let mut half = TcpStream::connect(node.rtsp).expect("connect");
    half.write_all(b"DESCRIBE rtsp://127.0.0.1/live/x RTSP/1.0\r\nCSeq: 1\r\n")
        .expect("send");
    let mut silent = TcpStream::connect(node.rtsp).expect("connect");
    assert!(closed_by_server(&mut half), "a trickling request was kept");
    assert!(
        closed_by_server(&mut silent),
        "a silent connection was kept"
    );
    assert!(refusals(&node, "request_deadline") >= 2.0);
    // A normal client is unaffected.
    let mut ok = RtspConn::connect(node.rtsp);
    assert_eq!(
        ok.request("OPTIONS", &node.url("live/x"), &[], None)
            .status
            .0,
        200
    );
}

/// An SDP of `tracks` H.264 video tracks.
fn sdp_of(tracks: usize) -> String {
    let mut sdp = String::from("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\nt=0 0\r\n");
    for i in 0..tracks {
        sdp.push_str(&format!(
            "m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:trackID={i}\r\n"
        ));
    }
    sdp
}

/// Issue 44, M9, as its attacks: an ANNOUNCE declaring more tracks than
/// `[limits] max_publish_tracks` is refused, and an ANNOUNCE kept alive with OPTIONS but
/// never followed by RECORD holds its camera only until `announce_timeout_ms`: then its
/// connection is closed and the real camera can publish.
#[test]
fn an_announce_cannot_squat_a_camera_or_declare_a_thousand_tracks() {
    let node = NodeBuilder::new()
        .extra("[limits]\nannounce_timeout_ms = 1000\nmax_publish_tracks = 4")
        .extra("[[camera]]\nid = \"gate-1\"\nsource = \"push\"")
        .start();
    let url = node.url("live/gate-1");
    let mut many = RtspConn::connect(node.rtsp);
    let r = many.request("ANNOUNCE", &url, &[], Some(("application/sdp", &sdp_of(5))));
    assert_eq!(r.status.0, 400, "{}", r.reason);
    assert!(r.reason.contains("max_publish_tracks"), "{}", r.reason);
    // A squatter: ANNOUNCE, then only OPTIONS to keep the connection busy.
    let mut squatter = RtspConn::connect(node.rtsp);
    let r = squatter.request("ANNOUNCE", &url, &[], Some(("application/sdp", &sdp_of(1))));
    assert_eq!(r.status.0, 200, "{}", r.reason);
    let mut camera = RtspConn::connect(node.rtsp);
    let r = camera.request("ANNOUNCE", &url, &[], Some(("application/sdp", &sdp_of(1))));
    assert_eq!(
        r.status.0, 455,
        "the slot is held while the ANNOUNCE is fresh"
    );
    // The squatter keeps asking; its connection is closed once the ANNOUNCE is stale.
    poll_until(Duration::from_secs(10), "the squatter to be closed", || {
        let mut s = squatter.stream.try_clone().ok()?;
        let _ = s.write_all(format!("OPTIONS {url} RTSP/1.0\r\nCSeq: 99\r\n\r\n").as_bytes());
        closed_within(&mut s, Duration::from_millis(300)).then_some(())
    });
    assert!(refusals(&node, "announce_timeout") >= 1.0);
    let mut camera = RtspConn::connect(node.rtsp);
    let r = camera.request("ANNOUNCE", &url, &[], Some(("application/sdp", &sdp_of(1))));
    assert_eq!(
        r.status.0, 200,
        "the camera publishes once the squatter is gone: {}",
        r.reason
    );
    // The camera goes on to RECORD: from then on the timeout no longer applies, however
    // long it publishes. Kept alive as a camera does, it is still served well past
    // announce_timeout_ms (and past the 1 s tick that checks it).
    camera.record_tcp(&url);
    let recorded = std::time::Instant::now();
    for _ in 0..10 {
        // A keepalive every 250 ms: the pace of a client, not a wait for a condition.
        std::thread::sleep(Duration::from_millis(250));
        let r = camera.request("GET_PARAMETER", &url, &[], None);
        assert_eq!(
            r.status.0,
            200,
            "the recording camera was cut off after {:?}",
            recorded.elapsed()
        );
    }
}

/// One user holds at most `max_sessions_per_user` sessions, from any address; another user
/// (behind the same address) still gets theirs. Proven users are not held by the
/// per-address limit (one address here: a NAT'd control room), which holds only clients
/// who proved no user.
#[test]
fn sessions_per_user_hold_across_addresses() {
    use vigil_proto::rtsp::auth::{ha1, Algorithm};
    let user = |name: &str, pw: &str| {
        format!(
            "[[auth.user]]\nname = \"{name}\"\nha1_md5 = \"{}\"\nha1_sha256 = \"{}\"\nread = [\"*\"]\n",
            ha1(Algorithm::Md5, name, "vigil", pw),
            ha1(Algorithm::Sha256, name, "vigil", pw)
        )
    };
    let node = NodeBuilder::new()
        .extra("[limits]\nmax_sessions_per_user = 2\nmax_sessions_per_address = 1\n[auth]\nbasic = true\n")
        .extra(&user("wall", "wall-pw"))
        .extra(&user("desk", "desk-pw"))
        .extra(DEMO_CAMERA)
        .start();
    node.wait_live("live/demo");
    let url = node.url("live/demo");
    let basic = |name: &str, pw: &str| {
        format!(
            "Basic {}",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{name}:{pw}")
            )
        )
    };
    // A SETUP from `from` as `name`: its status and reason (the connection is kept).
    let setup = |from: &str, name: &str, pw: &str| {
        let stream = connect_from(from, node.rtsp);
        let io = stream.try_clone().expect("clone");
        let mut c = RtspConn::over(stream, Box::new(io));
        let auth = basic(name, pw);
        let d = c.request("DESCRIBE", &url, &[("Authorization", &auth)], None);
        assert_eq!(d.status.0, 200, "{}", d.reason);
        let s = c.request(
            "SETUP",
            &format!("{url}/trackID=0"),
            &[
                ("Authorization", &auth),
                ("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1"),
            ],
            None,
        );
        (s.status.0, s.reason.clone(), c)
    };
    let (a, _, _keep_a) = setup("127.0.0.1", "wall", "wall-pw");
    let (b, _, _keep_b) = setup("127.0.0.1", "wall", "wall-pw");
    assert_eq!((a, b), (200, 200));
    let (c, why, _) = setup("127.0.0.7", "wall", "wall-pw");
    assert_eq!(c, 503, "{why}");
    assert!(why.contains("user"), "{why}");
    assert!(refusals(&node, "sessions_per_user") >= 1.0);
    // Another user from the first user's address is not held by the first user's sessions.
    let (d, why, _keep_d) = setup("127.0.0.1", "desk", "desk-pw");
    assert_eq!(d, 200, "{why}");
}
