//! Pull ingest: a second vigil process on 127.0.0.2 plays the camera (its `live/demo`), and
//! the node under test pulls it through retina, always-on or on demand, and keeps its
//! readers across an upstream crash and restart.
//!
//! The restart test uses ffmpeg (over TCP, zero errors at `-v error`: ffmpeg prints nothing
//! at the splice) and, alongside it, a raw interleaved reader that checks the RTP the viewer
//! sees: one SSRC throughout, contiguous sequence numbers, and a keyframe first after the gap.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_proto::codec::{starts_keyframe, Codec};
use vigil_tests::{
    ffmpeg_decode, poll_until, spawn_ffmpeg_decode, Incoming, Node, NodeBuilder, RtspConn,
    DEMO_CAMERA,
};

const DEMO: &str = "live/demo";
const CAM: &str = "live/cam";

/// The "camera": a vigil node serving the demo clip on another loopback address.
fn camera() -> Node {
    let node = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(DEMO_CAMERA)
        .start();
    node.wait_live(DEMO);
    node
}

/// The node under test, pulling `live/cam` from the camera; quick reconnects and a short
/// on-demand grace period keep the tests short.
fn puller(camera: &Node, on_demand: bool) -> Node {
    NodeBuilder::new()
        .extra(&format!(
            "[live]\nreconnect_min_ms = 100\nreconnect_max_ms = 400\non_demand_grace_ms = 500\n\n\
             [[camera]]\nid = \"cam\"\nsource = \"{}\"\non_demand = {on_demand}",
            camera.url(DEMO)
        ))
        .start()
}

fn play_sessions(node: &Node) -> Vec<serde_json::Value> {
    node.api_json("/api/sessions")
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s["kind"] == "play")
        .collect()
}

fn packets_in(node: &Node, path: &str) -> u64 {
    node.path_info(path)
        .and_then(|p| p["packets_in"].as_u64())
        .unwrap_or(0)
}

#[test]
fn always_on_pull_plays_over_tcp_and_udp() {
    let cam = camera();
    let node = puller(&cam, false);
    // Pulled with nobody watching: live, and the camera has one viewer, the node.
    node.wait_live(CAM);
    let info = node.path_info(CAM).expect("camera listed");
    assert_eq!(info["source"], cam.url(DEMO), "{info}");
    assert_eq!(info["codecs"], serde_json::json!(["H264"]), "{info}");
    let upstream = play_sessions(&cam);
    assert_eq!(upstream.len(), 1, "camera sessions: {upstream:?}");
    assert!(
        upstream[0]["transport"]
            .as_str()
            .is_some_and(|t| t.contains("RTP/AVP/TCP")),
        "pull is TCP interleaved by default: {upstream:?}"
    );

    let url = node.url(CAM);
    let timeout = Duration::from_secs(25);
    let tcp = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "75"],
        timeout,
    );
    let udp = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "udp"],
        &["-frames:v", "75"],
        timeout,
    );
    tcp.join()
        .expect("reader thread")
        .assert_plays("TCP reader of the pulled path", 75, 75);
    udp.join()
        .expect("reader thread")
        .assert_plays("UDP reader of the pulled path", 75, 75);
    // Still one upstream connection, shared by every reader.
    assert_eq!(play_sessions(&cam).len(), 1);
}

#[test]
fn on_demand_pull_starts_with_the_first_reader_and_stops_after_the_last() {
    let cam = camera();
    let node = puller(&cam, true);
    let info = node.path_info(CAM).expect("camera listed");
    assert_eq!(info["live"], false, "on-demand camera pulled early: {info}");
    assert!(play_sessions(&cam).is_empty(), "camera has viewers already");

    // The first DESCRIBE starts the pull; the reader does not wait for the path to be live.
    let url = node.url(CAM);
    let reader = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(25),
    );
    poll_until(
        Duration::from_secs(10),
        "the node to pull the camera",
        || (play_sessions(&cam).len() == 1).then_some(()),
    );
    reader.join().expect("reader thread").assert_plays(
        "first reader of the on-demand path",
        50,
        50,
    );

    // The last reader left: after the grace period (0.5 s) the node lets go of the camera.
    poll_until(Duration::from_secs(10), "the pull to stop", || {
        let live = node.path_info(CAM).is_some_and(|p| p["live"] == true);
        (!live && play_sessions(&cam).is_empty()).then_some(())
    });

    // And a new reader starts it again.
    ffmpeg_decode(
        &url,
        &["-rtsp_transport", "udp"],
        &["-frames:v", "25"],
        Duration::from_secs(25),
    )
    .assert_plays("reader after the pull stopped", 25, 25);
}

/// One RTP packet as the raw reader saw it.
struct Seen {
    at: Instant,
    ssrc: u32,
    seq: u16,
    ts: u32,
    keyframe: bool,
}

/// Play `url` over TCP and record every RTP packet of channel 0 until `stop`.
fn raw_reader(
    addr: std::net::SocketAddr,
    url: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Seen>> {
    std::thread::spawn(move || {
        let mut c = RtspConn::connect(addr);
        c.play_tcp(&url);
        let mut seen = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            match c.receive().expect("raw reader: read") {
                Incoming::Data {
                    channel: 0,
                    payload,
                } => {
                    let (h, range) = vigil_proto::rtp::parse(&payload).expect("valid RTP");
                    seen.push(Seen {
                        at: Instant::now(),
                        ssrc: h.ssrc,
                        seq: h.sequence,
                        ts: h.timestamp,
                        keyframe: starts_keyframe(Codec::H264, &payload[range]),
                    });
                }
                Incoming::Data { .. } | Incoming::Response(_) => {}
                Incoming::Closed => panic!("raw reader: the node closed the connection"),
            }
        }
        seen
    })
}

#[test]
fn upstream_restart_keeps_downstream_readers_playing() {
    let mut cam = camera();
    let node = puller(&cam, false);
    node.wait_live(CAM);
    let url = node.url(CAM);
    // 10 s of output: the timeline runs on through the outage, so this spans the restart.
    let ffmpeg = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-t", "10"],
        Duration::from_secs(30),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let raw = raw_reader(node.rtsp, url.clone(), stop.clone());
    // Both readers have played a good second (the demo is ~75 kB/s).
    poll_until(Duration::from_secs(10), "both readers to play", || {
        let s = play_sessions(&node);
        (s.len() == 2 && s.iter().all(|s| s["bytes"].as_u64().unwrap_or(0) > 100_000)).then_some(())
    });

    cam.kill();
    let killed = Instant::now();
    cam.restart();
    let p0 = packets_in(&node, CAM);
    poll_until(Duration::from_secs(15), "the pull to resume", || {
        (packets_in(&node, CAM) > p0 + 50).then_some(())
    });
    // An upper bound of the time without media.
    let outage = killed.elapsed();
    assert_eq!(play_sessions(&node).len(), 2, "a reader was dropped");

    // ffmpeg decodes on across the splice: 10 s of output at 25 fps, less the outage.
    let lost = (outage.as_secs_f64() * 25.0).ceil() as u64;
    ffmpeg.join().expect("ffmpeg thread").assert_plays(
        "ffmpeg reader across the upstream restart",
        250u64.saturating_sub(lost + 25),
        251,
    );

    // The raw reader ran alongside ffmpeg, so it too has had seconds of media since.
    stop.store(true, Ordering::Relaxed);
    let seen = raw.join().expect("raw reader thread");
    assert!(seen.len() > 200, "only {} packets", seen.len());
    assert!(seen[0].keyframe, "the first packet is not a keyframe");
    assert!(
        seen.iter().all(|p| p.ssrc == seen[0].ssrc),
        "the SSRC changed"
    );
    for w in seen.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq.wrapping_add(1),
            "sequence numbers jump ({} → {})",
            w[0].seq,
            w[1].seq
        );
    }
    // The demo's frames are 3600 ticks apart. Exactly one step differs: the splice onto the
    // restarted camera, where media resumes on a keyframe and the timestamps jump forward by
    // about the time that passed (at least the pause the viewer saw, at most the outage).
    let splices: Vec<usize> = (1..seen.len())
        .filter(|&i| !matches!(seen[i].ts.wrapping_sub(seen[i - 1].ts), 0 | 3600))
        .collect();
    assert_eq!(
        splices.len(),
        1,
        "timestamp discontinuities at packets {splices:?}"
    );
    let i = splices[0];
    assert!(
        seen[i].keyframe,
        "the first packet after the restart is not a keyframe"
    );
    let advance = f64::from(seen[i].ts.wrapping_sub(seen[i - 1].ts)) / 90_000.0;
    let pause = (seen[i].at - seen[i - 1].at).as_secs_f64();
    assert!(
        advance >= 0.5 * pause && advance <= outage.as_secs_f64() + 0.04,
        "timestamps advanced {advance:.3} s over a {pause:.3} s pause (outage {outage:?})"
    );
    assert!(
        seen.len() - i > 50,
        "only {} packets after the restart",
        seen.len() - i
    );
}
