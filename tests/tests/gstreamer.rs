//! GStreamer against a node: `rtspsrc` plays the demo camera over TCP and UDP, and
//! `rtspclientsink` publishes over UDP and TCP, read back with ffmpeg.

use std::time::{Duration, Instant};
use vigil_tests::{
    expected_window, fixture, gst_decode_h264, gst_publish_h264, poll_until, spawn_ffmpeg_decode,
    wait_background, GstDecoded, Node, NodeBuilder, DEMO_CAMERA,
};

const DEMO: &str = "live/demo";
const FRAMES: u64 = 100;

fn demo_node() -> Node {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).start();
    node.wait_live(DEMO);
    node
}

/// `FRAMES` frames of the 640×360 demo decoded, no error logged by any element (libav's
/// decoder errors included), and at the source rate: a new reader gets the current GOP at
/// once (at most 25 frames early), the rest at 25 fps.
fn assert_gst_plays(what: &str, run: &GstDecoded) {
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .chain(run.stdout.lines())
        .filter(|l| l.contains("ERROR") || l.starts_with("WARNING: from element"))
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: GStreamer reported errors:\n{}",
        errors.join("\n")
    );
    assert!(
        run.status.success(),
        "{what}: gst-launch failed ({}) after {:?}:\n{}",
        run.status,
        run.elapsed,
        run.stdout
    );
    assert_eq!(run.frames, FRAMES, "{what}: frames decoded");
    assert!(
        run.caps.contains("width=(int)640") && run.caps.contains("height=(int)360"),
        "{what}: decoded caps {}",
        run.caps
    );
    let real_time = Duration::from_millis((FRAMES - 26) * 40);
    assert!(
        run.elapsed >= real_time,
        "{what}: {FRAMES} frames in {:?}: faster than the source",
        run.elapsed
    );
}

#[test]
fn rtspsrc_plays_over_tcp() {
    let node = demo_node();
    let run = gst_decode_h264(&node.url(DEMO), "tcp", FRAMES, Duration::from_secs(25));
    assert_gst_plays("rtspsrc protocols=tcp", &run);
}

#[test]
fn rtspsrc_plays_over_udp() {
    let node = demo_node();
    let run = gst_decode_h264(&node.url(DEMO), "udp", FRAMES, Duration::from_secs(25));
    assert_gst_plays("rtspsrc protocols=udp", &run);
}

/// `rtspclientsink` publishes the H.264 fixture (its access units start with an AUD, then
/// SPS, PPS, SEI and the IDR); ffmpeg readers over TCP and UDP play the whole publish with
/// zero errors. Frame window: see ffmpeg.rs.
fn rtspclientsink_case(protocols: &str) {
    let node = NodeBuilder::new().start();
    let path = "live/gst";
    let url = node.url(path);
    let started = Instant::now();
    let mut publisher = gst_publish_h264(&fixture("h264.mp4"), &url, protocols);
    node.wait_live(path);
    let readers = [
        (
            "TCP",
            spawn_ffmpeg_decode(
                &url,
                &["-rtsp_transport", "tcp"],
                &[],
                Duration::from_secs(40),
            ),
        ),
        (
            "UDP",
            spawn_ffmpeg_decode(
                &url,
                &["-rtsp_transport", "udp"],
                &[],
                Duration::from_secs(40),
            ),
        ),
    ];
    poll_until(Duration::from_secs(10), "the readers to join", || {
        let sessions = node.api_json("/api/sessions");
        let n = sessions
            .as_array()
            .map_or(0, |a| a.iter().filter(|s| s["kind"] == "play").count());
        (n >= readers.len()).then_some(())
    });
    let joined = started.elapsed();
    let info = node.path_info(path).expect("path listed");
    assert_eq!(info["codecs"], serde_json::json!(["H264"]), "{info}");

    let (status, err) = wait_background(&mut publisher, Duration::from_secs(30));
    assert!(
        status.success() && err.trim().is_empty(),
        "rtspclientsink protocols={protocols}: {status}: {err}"
    );
    let (min, max) = expected_window(joined);
    for (label, reader) in readers {
        let decoded = reader.join().expect("reader thread");
        decoded.assert_plays(
            &format!("{label} reader of rtspclientsink protocols={protocols}"),
            min,
            max,
        );
    }
}

#[test]
fn rtspclientsink_publishes_over_udp() {
    rtspclientsink_case("udp");
}

#[test]
fn rtspclientsink_publishes_over_tcp() {
    rtspclientsink_case("tcp");
}
