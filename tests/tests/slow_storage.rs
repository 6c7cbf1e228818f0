//! Fault tests (issue 10 §5): slow storage stalls no live viewer and holds no connection.
//! Every frame the recorder writes takes 200 ms (`[storage.emulate] write_latency_ms`, on
//! the writer pool's thread, as a failing LUN would), so the recording falls behind the
//! 25 fps demo camera and drops, visibly; a live viewer decodes every frame it asks for with
//! zero errors meanwhile, and the node keeps answering. A request of a recording whose
//! segment read hangs is answered 503 after `[storage] request_read_timeout_ms`.

use std::time::{Duration, Instant};

use vigil_tests::{ffmpeg_decode, poll_until, rfc3339, NodeBuilder, RtspConn, DEMO_CAMERA};

#[test]
fn a_slow_volume_drops_recording_frames_but_never_stalls_live_viewers() {
    let node = NodeBuilder::new()
        .extra(&format!(
            "{DEMO_CAMERA}\n\n[storage]\nwriter_queue_kb = 64\n\n\
             [storage.emulate]\nwrite_latency_ms = 200\n"
        ))
        .start();
    node.wait_live("live/demo");
    // The recorder is behind: its queue overflows and the drop is said, not hidden.
    let status = poll_until(
        Duration::from_secs(20),
        "the recording to drop frames",
        || {
            let v = node.api_json("/api/recordings");
            v.as_array()?
                .iter()
                .find(|r| r["camera"] == "demo" && r["frames_dropped"].as_u64() > Some(0))
                .cloned()
        },
    );
    assert!(
        status["error"]
            .as_str()
            .is_some_and(|e| e.contains("behind")),
        "{status}"
    );
    // Live viewing meanwhile: 100 frames (4 s) over TCP and over UDP, not one error.
    for transport in ["tcp", "udp"] {
        let d = ffmpeg_decode(
            &node.url("live/demo"),
            &["-rtsp_transport", transport],
            &["-frames:v", "100"],
            Duration::from_secs(30),
        );
        // (ffmpeg's 5 s socket timeout turns a stalled stream into an error.)
        d.assert_plays(
            &format!("live over {transport} with slow storage"),
            100,
            100,
        );
    }
    // Still recording what it can, and still dropping: the camera did not stop.
    let later = node.api_json("/api/recordings");
    let demo = later
        .as_array()
        .and_then(|v| v.iter().find(|r| r["camera"] == "demo").cloned())
        .expect("demo in /api/recordings");
    assert!(
        demo["frames_dropped"].as_u64() > status["frames_dropped"].as_u64(),
        "{demo}"
    );
}

/// A DESCRIBE of a recording whose segment read is slower than `request_read_timeout_ms`
/// (500 ms here; the emulated volume takes 5 s a read) is answered 503 at the bound, and
/// its connection serves on; the read went on in the background, so once it is in the
/// cache the same DESCRIBE is answered 200.
#[test]
fn a_request_waiting_on_a_hung_volume_is_answered_503_at_the_bound() {
    let root = tempfile::tempdir().expect("temp dir");
    let node = NodeBuilder::new()
        .extra(&format!(
            "{DEMO_CAMERA}\n\n[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\
             request_read_timeout_ms = 500\n\n[storage.emulate]\nread_latency_ms = 5000\n",
            root.path().display()
        ))
        .start();
    let first = vigil_tests::demo_recorded_for(&node, 3_000);
    let url = node.url(&format!("playback/demo?start={}", rfc3339(first + 1_000)));
    let mut c = RtspConn::connect(node.rtsp);
    let asked = Instant::now();
    let r = c.request("DESCRIBE", &url, &[("Accept", "application/sdp")], None);
    let waited = asked.elapsed();
    assert_eq!(r.status.0, 503, "DESCRIBE on a hung volume: {}", r.reason);
    assert!(
        r.reason.contains("storage did not answer within 500 ms"),
        "the reason should say what timed out: {}",
        r.reason
    );
    assert!(
        waited < Duration::from_secs(4),
        "answered after {waited:?}: not at the 500 ms bound (the read takes 5 s)"
    );
    let o = c.request("OPTIONS", &url, &[], None);
    assert_eq!(o.status.0, 200, "OPTIONS after the 503: {}", o.reason);
    poll_until(
        Duration::from_secs(20),
        "the background read to answer a DESCRIBE",
        || {
            let r = c.request("DESCRIBE", &url, &[("Accept", "application/sdp")], None);
            (r.status.0 == 200).then_some(())
        },
    );
}
