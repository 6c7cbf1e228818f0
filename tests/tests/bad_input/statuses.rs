//! Every RTSP error status where the protocol puts it: 404, 461, 454, 455, 459.

use crate::support::*;

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
    let mut p = announce_two_track_sdp(node, &url);
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
