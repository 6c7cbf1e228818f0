//! What the bad-input tests share: a node with the demo camera live, and raw-socket helpers.

pub use std::time::{Duration, Instant};
pub use vigil_tests::server_port;
pub use vigil_tests::{
    metric_value, poll_until, spawn_ffmpeg_decode, udp_port_pair, Incoming, Node, NodeBuilder,
    RtspConn, DEMO_CAMERA, TWO_TRACK_SDP,
};

pub const DEMO: &str = "live/demo";

pub fn demo_node(extra: &str) -> Node {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).extra(extra).start();
    node.wait_live(DEMO);
    node
}

/// The node answers OPTIONS on a fresh connection.
pub fn assert_answers(node: &Node, after: &str) {
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
pub fn send_and_collect(node: &Node, what: &str, bytes: &[u8], end_input: bool) -> Vec<u16> {
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
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
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

/// A raw connection that has ANNOUNCEd a two-track (H.264 + AAC) stream at `url`.
pub fn announce_two_track_sdp(node: &Node, url: &str) -> RtspConn {
    let mut p = RtspConn::connect(node.rtsp);
    let r = p.request(
        "ANNOUNCE",
        url,
        &[],
        Some(("application/sdp", TWO_TRACK_SDP)),
    );
    assert_eq!(r.status.0, 200, "ANNOUNCE: {}", r.reason);
    p
}
