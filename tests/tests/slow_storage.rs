//! Fault test (issue 10 §5): slow storage stalls no live viewer. Every frame the recorder
//! writes takes 200 ms (`[storage.emulate] write_latency_ms`, on the writer pool's thread,
//! as a failing LUN would), so the recording falls behind the 25 fps demo camera and drops,
//! visibly; a live viewer decodes every frame it asks for with zero errors meanwhile, and
//! the node keeps answering.

use std::time::Duration;

use vigil_tests::{ffmpeg_decode, poll_until, NodeBuilder, DEMO_CAMERA};

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
