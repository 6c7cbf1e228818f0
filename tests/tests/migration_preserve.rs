//! `preserve` source-address mode (issue 7 §1): the node continuing a moved session sends
//! with the original node's address and ports (raw socket; the tests run as root, as CI
//! does), so clients that drop media from a new source keep decoding: GStreamer rtspsrc and
//! `ffmpeg -rtsp_flags filter_src` and retina (all three keep only the source announced at
//! SETUP), next to the project's client, which checks that every datagram came from that
//! address. Every wait polls a deadline.

use std::collections::BTreeSet;
use std::time::Duration;

use vigil_tests::secure_cluster::{self, assert_one_stream, spawn_viewer, SecureCluster};
use vigil_tests::{gst_decode_h264, poll_until, rfc3339, spawn_ffmpeg_decode, Node};

/// Moves session `id` (steered by A = node 1) A → B → C → A in preserve mode, letting each
/// sender play a second of media.
fn tour(c: &SecureCluster, id: &str) {
    secure_cluster::move_through(c, id, [1, 2, 0], "preserve");
}

/// The playback sessions of `n` not yet in `known`.
fn new_sessions(n: &Node, known: &BTreeSet<String>) -> Vec<String> {
    n.api_json("/api/sessions")
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|s| s["kind"] == "playback" && s["steered_by"].is_null())
                .filter_map(|s| s["id"].as_str().map(str::to_string))
                .filter(|id| !known.contains(id))
                .collect()
        })
        .unwrap_or_default()
}

fn next_session(n: &Node, known: &mut BTreeSet<String>) -> String {
    let id = poll_until(Duration::from_secs(15), "a new playback session", || {
        new_sessions(n, known).into_iter().next()
    });
    known.insert(id.clone());
    id
}

/// retina over UDP (its sockets are connected to the server's address and ports): the
/// number of video frames it demuxes before `frames` or the end, and its first error.
fn retina_udp_frames(url: &str, frames: u64) -> (u64, Option<String>) {
    use futures::StreamExt;
    use retina::client::{PlayOptions, SessionOptions, SetupOptions, Transport};
    use retina::codec::CodecItem;
    let url = url::Url::parse(url).expect("url");
    let rt = secure_cluster::runtime();
    rt.block_on(async {
        let mut session = retina::client::Session::describe(url, SessionOptions::default())
            .await
            .expect("describe");
        session
            .setup(
                0,
                SetupOptions::default().transport(Transport::Udp(Default::default())),
            )
            .await
            .expect("setup");
        let playing = session.play(PlayOptions::default()).await.expect("play");
        let mut demuxed = Box::pin(playing.demuxed().expect("demuxed"));
        let mut n = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while n < frames {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match tokio::time::timeout(left, demuxed.next()).await {
                Err(_) => return (n, Some("timed out".into())),
                Ok(None) => break,
                Ok(Some(Err(e))) => return (n, Some(e.to_string())),
                Ok(Some(Ok(CodecItem::VideoFrame(_)))) => n += 1,
                Ok(Some(Ok(_))) => {}
            }
        }
        (n, None)
    })
}

#[test]
fn source_filtering_clients_play_through_moves_in_preserve_mode() {
    let c = secure_cluster::start(3, "", |_| String::new());
    let first = c.recorded_for(14_000);
    let a = c.node(0);
    let url = || {
        secure_cluster::placed(&format!(
            "{}?start={}&end={}",
            a.url("playback/demo"),
            rfc3339(first),
            rfc3339(first + 12_000)
        ))
    };
    let mut known = BTreeSet::new();

    // The project's client: every datagram from the one source it saw first.
    let (seen, viewer) = spawn_viewer(url(), None);
    let id = next_session(a, &mut known);
    tour(&c, &id);
    viewer.join().expect("viewer");
    let seen = seen.lock().unwrap().clone();
    let gaps = assert_one_stream(&seen, "preserve A→B→C→A");
    assert!(gaps.is_empty(), "the source changed: {gaps:?}");
    let sources: BTreeSet<_> = seen.iter().filter_map(|s| s.from).collect();
    assert_eq!(sources.len(), 1, "sources {sources:?}");
    assert!(
        sources.iter().all(|s| s.ip().to_string() == "127.0.0.1"),
        "{sources:?}"
    );

    // ffmpeg with filter_src (a connected socket: it drops any other source).
    let ff = spawn_ffmpeg_decode(
        &url(),
        &["-rtsp_transport", "udp", "-rtsp_flags", "filter_src"],
        &[],
        Duration::from_secs(40),
    );
    let id = next_session(a, &mut known);
    tour(&c, &id);
    ff.join()
        .expect("ffmpeg")
        .assert_plays("ffmpeg filter_src through preserve moves", 299, 301);

    // GStreamer rtspsrc over UDP (its session drops a new source address or port).
    let gst_url = url();
    let gst =
        std::thread::spawn(move || gst_decode_h264(&gst_url, "udp", 280, Duration::from_secs(40)));
    let id = next_session(a, &mut known);
    tour(&c, &id);
    let g = gst.join().expect("gst");
    assert!(g.errors.is_empty(), "GStreamer errors: {:?}", g.errors);
    assert_eq!(g.frames, 280, "GStreamer frames; output:\n{}", g.output);

    // retina over UDP.
    let r_url = url();
    let retina = std::thread::spawn(move || retina_udp_frames(&r_url, 280));
    let id = next_session(a, &mut known);
    tour(&c, &id);
    let (frames, err) = retina.join().expect("retina");
    assert_eq!(err, None, "retina after {frames} frames");
    assert_eq!(frames, 280, "retina frames");
}

/// A live UDP viewer session of `n` (steered from there) not yet in `known`, once one plays.
fn next_live(n: &Node, known: &mut BTreeSet<String>) -> String {
    let id = poll_until(Duration::from_secs(15), "a new live viewer session", || {
        n.api_json("/api/sessions")
            .as_array()?
            .iter()
            .filter(|s| s["kind"] == "play" && s["steered_by"].is_null())
            // A viewer over UDP, not an edge's relay (which reads over TCP).
            .filter(|s| {
                s["transport"]
                    .as_str()
                    .is_some_and(|t| t.contains("client_port="))
            })
            .filter_map(|s| s["id"].as_str().map(str::to_string))
            .find(|id| !known.contains(id))
    });
    known.insert(id.clone());
    id
}

/// Live viewers of the demo camera (held by node 1) moved 1 → 2 → 3 → 1 in preserve mode
/// (nodes 2 and 3 relay the camera as edges): GStreamer rtspsrc and retina, which keep only
/// the source announced at SETUP, decode every frame without an error.
#[test]
fn source_filtering_clients_play_live_through_moves_in_preserve_mode() {
    let c = secure_cluster::start(3, "", |_| String::new());
    let a = c.node(0);
    a.wait_live("live/demo");
    secure_cluster::holder_known(&c);
    let url = || secure_cluster::placed(&a.url("live/demo"));
    let mut known = BTreeSet::new();

    let gst_url = url();
    let gst =
        std::thread::spawn(move || gst_decode_h264(&gst_url, "udp", 150, Duration::from_secs(40)));
    let id = next_live(a, &mut known);
    tour(&c, &id);
    let g = gst.join().expect("gst");
    assert!(g.errors.is_empty(), "GStreamer errors: {:?}", g.errors);
    assert_eq!(g.frames, 150, "GStreamer frames; output:\n{}", g.output);

    let r_url = url();
    let retina = std::thread::spawn(move || retina_udp_frames(&r_url, 150));
    let id = next_live(a, &mut known);
    tour(&c, &id);
    let (frames, err) = retina.join().expect("retina");
    assert_eq!(err, None, "retina after {frames} frames");
    assert_eq!(frames, 150, "retina frames");
}
