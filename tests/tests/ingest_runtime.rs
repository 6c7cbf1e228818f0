//! A publisher's RTSP connection moves to the node's ingest runtime after its RECORD
//! (`[rtsp] ingest_runtime`, on by default), so that a thousand cameras' packets never
//! queue before a viewer's request: the move must keep the connection whole. Its media goes
//! on reaching the path, its later requests are answered on the same connection (the
//! session, its keepalive and TEARDOWN), and a connection that ends there ends its session.
//! With the runtime off nothing moves and the same exchange works. ffmpeg publishing over
//! TCP and read back is in `ffmpeg.rs` (`publish_case` checks the move too).
//!
//! A camera that sends faster than real time (a publisher catching up after a stall, a file
//! pushed without `-re`) is recorded whole: the recorder holds the live ring
//! (`Stream::hold`, unit-tested in `live::stream`), so what it has not read is kept past
//! `ring_kb`, up to `ring_recorder_max_kb`, while the producer never waits.

use std::process::Command;
use std::time::Duration;
use vigil_tests::{
    fixture, metric_value, poll_until, run_with_timeout, Node, NodeBuilder, RtspConn,
};

const MOVED: &str = "vigil_rtsp_connections_to_ingest_total";

const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1\r\na=control:trackID=0\r\n";

/// One interleaved RTP packet on channel 0: an H.264 IDR slice NAL, marker set.
fn interleaved_rtp(seq: u16) -> Vec<u8> {
    let mut pkt = vec![0x80, 0x80 | 96];
    pkt.extend_from_slice(&seq.to_be_bytes());
    pkt.extend_from_slice(&(u32::from(seq) * 3600).to_be_bytes());
    pkt.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    pkt.extend_from_slice(&[0x65, 0x88, 0x84, 0x00, 0x10]);
    let mut frame = vec![b'$', 0];
    frame.extend_from_slice(&(pkt.len() as u16).to_be_bytes());
    frame.extend_from_slice(&pkt);
    frame
}

/// ANNOUNCE, SETUP over TCP, RECORD: a raw publisher of `path`.
fn publish(node: &Node, path: &str) -> RtspConn {
    let url = node.url(path);
    let mut c = RtspConn::connect(node.rtsp);
    let r = c.request("ANNOUNCE", &url, &[], Some(("application/sdp", SDP)));
    assert_eq!(r.status.0, 200, "ANNOUNCE: {}", r.reason);
    c.record_tcp(&url);
    c
}

fn packets_in(node: &Node, path: &str) -> u64 {
    node.path_info(path)
        .and_then(|p| p["packets_in"].as_u64())
        .unwrap_or(0)
}

/// The exchange every publisher's connection must keep, moved or not: media in, a
/// keepalive answered on the session, TEARDOWN answered and the path gone after it.
fn publisher_keeps_its_connection(node: &Node, path: &str) {
    let mut c = publish(node, path);
    for seq in 0..20u16 {
        c.send(&interleaved_rtp(seq)).expect("send RTP");
    }
    poll_until(Duration::from_secs(10), "the packets on the path", || {
        (packets_in(node, path) >= 20).then_some(())
    });
    let url = node.url(path);
    let r = c.request("GET_PARAMETER", &url, &[], None);
    assert_eq!(r.status.0, 200, "GET_PARAMETER after RECORD: {}", r.reason);
    // More media after a request: the connection still reads both.
    for seq in 20..40u16 {
        c.send(&interleaved_rtp(seq)).expect("send RTP");
    }
    poll_until(Duration::from_secs(10), "the later packets", || {
        (packets_in(node, path) >= 40).then_some(())
    });
    let r = c.request("TEARDOWN", &url, &[], None);
    assert_eq!(r.status.0, 200, "TEARDOWN: {}", r.reason);
    poll_until(Duration::from_secs(10), "the path to go", || {
        node.path_info(path).is_none().then_some(())
    });
}

#[test]
fn a_tcp_publisher_moves_to_the_ingest_runtime_and_keeps_its_connection() {
    let node = NodeBuilder::new().start();
    assert_eq!(
        metric_value(&node, MOVED),
        0.0,
        "nothing moved before RECORD"
    );
    publisher_keeps_its_connection(&node, "live/moved");
    assert_eq!(metric_value(&node, MOVED), 1.0, "the publisher moved once");

    // A publisher that just leaves: its session ends with the connection, on that runtime.
    let mut c = publish(&node, "live/left");
    c.send(&interleaved_rtp(0)).expect("send RTP");
    poll_until(Duration::from_secs(10), "the second move", || {
        (metric_value(&node, MOVED) == 2.0).then_some(())
    });
    drop(c);
    poll_until(Duration::from_secs(10), "the path to go", || {
        node.path_info("live/left").is_none().then_some(())
    });
    // Viewers' connections and sessions stayed where they were: nothing else moved.
    assert_eq!(metric_value(&node, MOVED), 2.0);
}

#[test]
fn with_the_ingest_runtime_off_nothing_moves() {
    let node = NodeBuilder::new().rtsp("ingest_runtime = false").start();
    publisher_keeps_its_connection(&node, "live/stays");
    assert_eq!(metric_value(&node, MOVED), 0.0);
}

#[test]
fn a_publisher_pushing_faster_than_real_time_is_recorded_whole() {
    // The smallest ring a node takes (16 KiB, a dozen packets) for the viewers, and a hold
    // for the recorder larger than the whole file, so that how far behind the recorder
    // falls depends on nothing (with `ring_recorder_max_kb = 16`, no hold beyond the ring,
    // the same push lost 2 071 and 2 319 packets in two runs). The camera's writer queue is
    // larger than the file too: a writer behind the disk drops frames by design
    // (`slow_storage.rs`), which is not what is tested here.
    let node = NodeBuilder::new()
        .extra(
            "[live]\nring_kb = 16\nring_recorder_max_kb = 16384\n\
             [storage]\nwriter_queue_kb = 16384\n",
        )
        .start();
    let path = "live/burst";
    // 20 s of 2 Mb/s (≈ 5 MB) as fast as ffmpeg sends it over TCP: 300 rings at once.
    let out = run_with_timeout(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-v", "error", "-i"])
            .arg(fixture("h264_2mbps.mp4"))
            .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp"])
            .arg(node.url(path)),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "ffmpeg: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The publisher gone, its recorder writes what it read and ends.
    poll_until(Duration::from_secs(20), "the path to go", || {
        node.path_info(path).is_none().then_some(())
    });
    let status = poll_until(Duration::from_secs(20), "the recorder to end", || {
        let v = node.api_json("/api/recordings");
        v.as_array()?
            .iter()
            .find(|r| {
                r["camera"] == "burst"
                    && r["state"] != "recording"
                    && r["segments_written"].as_u64() > Some(0)
            })
            .cloned()
    });
    assert_eq!(status["frames_dropped"], 0, "{status}");
    assert_eq!(status["errors"], 0, "{status}");
    // Everything in segments: the file's H.264 is nearly all of its bytes.
    let file = std::fs::metadata(fixture("h264_2mbps.mp4")).map_or(0, |m| m.len());
    let written = status["bytes_written"].as_u64().unwrap_or(0);
    assert!(
        written * 10 >= file * 9,
        "{written} of a {file}-byte file: {status}"
    );
}
