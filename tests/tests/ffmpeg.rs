//! ffmpeg and ffprobe against a node: ffmpeg publishes (UDP and TCP), ffmpeg reads (TCP,
//! UDP, UDP with `-rtsp_flags filter_src`) and ffprobe probes, for H.264+AAC and H.265; the
//! SDP of DESCRIBE names the codecs; a second publisher is refused, or takes over; a UDP
//! reader behind when its publisher leaves still gets every frame.
//!
//! Counting frames of a whole publish: the readers start the moment the path is live and
//! run until the node ends them (the publisher leaves → RTCP BYE → close). A reader that
//! joins late misses what came before its join, except the GOP cache: it starts at the
//! newest keyframe. So a reader decodes at least `250 - frames elapsed at its join` frames
//! and at most 250. The join time used is an upper bound measured from the publisher's
//! spawn to the moment the node lists every reader's session, so it holds however slowly
//! the clients start on a loaded machine; one GOP of tolerance covers the end of stream.

use std::process::Command;
use std::time::{Duration, Instant};
use vigil_tests::{
    expected_window, ffmpeg_decode, ffmpeg_publish, ffprobe_streams, fixture, metric_value,
    poll_until, run_with_timeout, spawn_ffmpeg_decode, wait_background, Node, NodeBuilder,
    RtspConn, TWO_TRACK_SDP,
};

const READ_TIMEOUT: Duration = Duration::from_secs(40);

/// The readers of a publish case: (label, input options). Each decodes every stream it
/// set up (`-map 0`).
///
/// With audio, the UDP readers set up the video track only (`-allowed_media_types video`),
/// so the two transports are exercised both ways; audio with video over UDP has its own test
/// (`h264_aac_over_udp_audio_and_video_together`).
fn readers(with_audio: bool) -> Vec<(&'static str, Vec<&'static str>)> {
    let video_only: &[&str] = if with_audio {
        &["-allowed_media_types", "video"]
    } else {
        &[]
    };
    vec![
        ("TCP", vec!["-rtsp_transport", "tcp"]),
        ("UDP", [&["-rtsp_transport", "udp"], video_only].concat()),
        (
            "UDP filter_src",
            [
                &["-rtsp_transport", "udp", "-rtsp_flags", "filter_src"],
                video_only,
            ]
            .concat(),
        ),
    ]
}

/// Play sessions the node currently lists for `path`.
fn play_sessions(node: &Node, path: &str) -> Vec<serde_json::Value> {
    node.api_json("/api/sessions")
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s["path"] == path && s["kind"] == "play")
        .collect()
}

/// The SDP of a raw DESCRIBE.
fn describe(node: &Node, path: &str) -> String {
    let mut c = RtspConn::connect(node.rtsp);
    let r = c.request(
        "DESCRIBE",
        &node.url(path),
        &[("Accept", "application/sdp")],
        None,
    );
    assert_eq!(r.status.0, 200, "DESCRIBE {path}: {}", r.reason);
    assert_eq!(
        r.headers.get("Content-Type"),
        Some("application/sdp"),
        "DESCRIBE answer type"
    );
    String::from_utf8(r.body.to_vec()).expect("SDP is UTF-8")
}

/// The `a=rtpmap` and `a=fmtp` lines of the SDP's `m=` section of `kind` (video/audio).
fn media_section<'a>(sdp: &'a str, kind: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in sdp.lines().map(str::trim_end) {
        if let Some(m) = line.strip_prefix("m=") {
            inside = m.starts_with(kind);
            if inside {
                out.push(line);
            }
        } else if inside {
            out.push(line);
        }
    }
    out
}

fn has_line(section: &[&str], pred: impl Fn(&str) -> bool) -> bool {
    section.iter().any(|l| pred(l))
}

#[derive(Clone, Copy)]
enum Codecs {
    H264Aac,
    H265,
}

fn check_sdp(sdp: &str, codecs: Codecs) {
    let video = media_section(sdp, "video");
    assert!(!video.is_empty(), "no video in SDP:\n{sdp}");
    assert!(
        has_line(&video, |l| l.starts_with("a=control:")),
        "video track without a=control:\n{sdp}"
    );
    match codecs {
        Codecs::H264Aac => {
            assert!(
                has_line(&video, |l| l.starts_with("a=rtpmap:")
                    && l.ends_with(" H264/90000")),
                "no H264 rtpmap:\n{sdp}"
            );
            assert!(
                has_line(&video, |l| l.starts_with("a=fmtp:")
                    && l.contains("sprop-parameter-sets=")
                    && l.contains("packetization-mode=1")),
                "no sprop-parameter-sets:\n{sdp}"
            );
            let audio = media_section(sdp, "audio");
            assert!(
                has_line(&audio, |l| l.starts_with("a=rtpmap:")
                    && l.to_ascii_uppercase().contains(" MPEG4-GENERIC/44100")),
                "no MPEG4-GENERIC rtpmap:\n{sdp}"
            );
            assert!(
                has_line(&audio, |l| l.starts_with("a=fmtp:")
                    && l.contains("config=")
                    && l.to_ascii_lowercase().contains("mode=aac-hbr")),
                "no AAC fmtp config:\n{sdp}"
            );
        }
        Codecs::H265 => {
            assert!(
                has_line(&video, |l| l.starts_with("a=rtpmap:")
                    && l.ends_with(" H265/90000")),
                "no H265 rtpmap:\n{sdp}"
            );
            assert!(
                has_line(&video, |l| l.starts_with("a=fmtp:")
                    && l.contains("sprop-sps=")),
                "no H265 parameter sets in fmtp:\n{sdp}"
            );
            assert!(
                media_section(sdp, "audio").is_empty(),
                "unexpected audio:\n{sdp}"
            );
        }
    }
}

fn check_probe(streams: &[serde_json::Value], codecs: Codecs) {
    let video: Vec<_> = streams
        .iter()
        .filter(|s| s["codec_type"] == "video")
        .collect();
    assert_eq!(video.len(), 1, "video streams: {streams:?}");
    let want = match codecs {
        Codecs::H264Aac => "h264",
        Codecs::H265 => "hevc",
    };
    assert_eq!(video[0]["codec_name"], want, "{streams:?}");
    assert_eq!(video[0]["width"], 320, "{streams:?}");
    assert_eq!(video[0]["height"], 240, "{streams:?}");
    let audio: Vec<_> = streams
        .iter()
        .filter(|s| s["codec_type"] == "audio")
        .collect();
    match codecs {
        Codecs::H264Aac => {
            assert_eq!(audio.len(), 1, "audio streams: {streams:?}");
            assert_eq!(audio[0]["codec_name"], "aac", "{streams:?}");
            assert_eq!(audio[0]["sample_rate"], "44100", "{streams:?}");
        }
        Codecs::H265 => assert!(audio.is_empty(), "{streams:?}"),
    }
}

/// ffmpeg publishes `file` over UDP or TCP; three ffmpeg readers (TCP, UDP, UDP
/// filter_src) decode the whole publish with zero errors; ffprobe and DESCRIBE name the
/// codecs.
fn publish_case(file: &str, codecs: Codecs, publish_tcp: bool) {
    let node = NodeBuilder::new().start();
    let path = "live/cam1";
    let url = node.url(path);
    let file = fixture(file);
    let started = Instant::now();
    let mut publisher = ffmpeg_publish(&file, &url, publish_tcp);
    node.wait_live(path);
    // A publisher over TCP is received on the node's ingest runtime from its RECORD on.
    poll_until(Duration::from_secs(10), "the publisher's move", || {
        let moved = metric_value(&node, "vigil_rtsp_connections_to_ingest_total");
        (moved == if publish_tcp { 1.0 } else { 0.0 }).then_some(())
    });
    let readers: Vec<_> = readers(matches!(codecs, Codecs::H264Aac))
        .into_iter()
        .map(|(label, input)| {
            (
                label,
                spawn_ffmpeg_decode(&url, &input, &["-map", "0"], READ_TIMEOUT),
            )
        })
        .collect();
    poll_until(Duration::from_secs(10), "the readers to join", || {
        (play_sessions(&node, path).len() >= readers.len()).then_some(())
    });
    let joined = started.elapsed();

    // While they play: the SDP and ffprobe's view of it.
    check_sdp(&describe(&node, path), codecs);
    check_probe(&ffprobe_streams(&url, "tcp"), codecs);
    let info = node.path_info(path).expect("path listed");
    let want: &[&str] = match codecs {
        Codecs::H264Aac => &["H264", "AAC"],
        Codecs::H265 => &["H265"],
    };
    assert_eq!(info["codecs"], serde_json::json!(want), "{info}");

    let (status, err) = wait_background(&mut publisher, Duration::from_secs(30));
    assert!(
        status.success() && err.trim().is_empty(),
        "publisher: {status}: {err}"
    );
    let (min, max) = expected_window(joined);
    for (label, reader) in readers {
        let decoded = reader.join().expect("reader thread");
        decoded.assert_plays(&format!("{label} reader"), min, max);
    }
    // The publisher left and so did every reader: the unlisted push path is forgotten.
    poll_until(Duration::from_secs(5), "the push path to go", || {
        node.path_info(path).is_none().then_some(())
    });
}

#[test]
fn h264_aac_published_over_udp_plays_over_tcp_udp_and_filter_src() {
    publish_case("h264_aac.mp4", Codecs::H264Aac, false);
}

#[test]
fn h264_aac_published_over_tcp_plays_over_tcp_udp_and_filter_src() {
    publish_case("h264_aac.mp4", Codecs::H264Aac, true);
}

#[test]
fn h265_published_over_udp_plays_over_tcp_udp_and_filter_src() {
    publish_case("h265.mp4", Codecs::H265, false);
}

#[test]
fn h265_published_over_tcp_plays_over_tcp_udp_and_filter_src() {
    publish_case("h265.mp4", Codecs::H265, true);
}

/// Audio and video of one session over UDP, decoded together. ffmpeg aligns the streams of
/// a session on the first RTCP sender report of each, so the node's NTP↔RTP mapping must be
/// the same line for the whole session (anchored at each track's first forwarded packet): a
/// mapping that moved with arrival jitter or B-frame reordering made the video step back
/// ("non monotonically increasing dts").
#[test]
fn h264_aac_over_udp_audio_and_video_together() {
    let node = NodeBuilder::new().start();
    let path = "live/cam4";
    let url = node.url(path);
    let started = Instant::now();
    let _publisher = ffmpeg_publish(&fixture("h264_aac.mp4"), &url, false);
    node.wait_live(path);
    let reader = spawn_ffmpeg_decode(
        &url,
        &["-rtsp_transport", "udp"],
        &["-map", "0"],
        READ_TIMEOUT,
    );
    poll_until(Duration::from_secs(10), "the reader to join", || {
        (!play_sessions(&node, path).is_empty()).then_some(())
    });
    let (min, max) = expected_window(started.elapsed());
    reader
        .join()
        .expect("reader thread")
        .assert_plays("UDP audio+video reader", min, max);
}

#[test]
fn second_publisher_is_refused_by_default() {
    let node = NodeBuilder::new().start();
    let path = "live/cam2";
    let url = node.url(path);
    let file = fixture("h264.mp4");
    let _first = ffmpeg_publish(&file, &url, true);
    node.wait_live(path);

    // The exact answer: 455 with a reason that says why.
    let mut raw = RtspConn::connect(node.rtsp);
    let r = raw.request(
        "ANNOUNCE",
        &url,
        &[],
        Some(("application/sdp", TWO_TRACK_SDP)),
    );
    assert_eq!(
        r.status.0, 455,
        "second ANNOUNCE: {} {}",
        r.status.0, r.reason
    );
    assert!(
        r.reason.contains("already has a publisher"),
        "reason: {}",
        r.reason
    );

    // ffmpeg as the second publisher fails at once and says so.
    let out = run_with_timeout(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-v", "error", "-re", "-i"])
            .arg(&file)
            .args(["-c", "copy", "-f", "rtsp", &url]),
        Duration::from_secs(15),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "second ffmpeg publisher succeeded");
    assert!(err.contains("455"), "second publisher's error: {err}");

    // The first publisher is unaffected: its stream still plays.
    let decoded = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(20),
    );
    decoded.assert_plays("reader after the refusal", 50, 50);
}

#[test]
fn second_publisher_takes_over_and_readers_continue() {
    let node = NodeBuilder::new()
        .rtsp("publisher_conflict = \"takeover\"")
        .start();
    let path = "live/cam3";
    let url = node.url(path);
    let file = fixture("h264.mp4");
    let mut first = ffmpeg_publish(&file, &url, true);
    node.wait_live(path);
    let reader = spawn_ffmpeg_decode(&url, &["-rtsp_transport", "tcp"], &[], READ_TIMEOUT);
    // Let the reader get a good second of the first publisher (~37 kB/s).
    let session = poll_until(Duration::from_secs(10), "the reader to play", || {
        play_sessions(&node, path)
            .into_iter()
            .find(|s| s["bytes"].as_u64().unwrap_or(0) > 40_000)
    });

    let mut second = ffmpeg_publish(&file, &url, false);
    // The first publisher is disconnected...
    let (status, _) = wait_background(&mut first, Duration::from_secs(10));
    assert!(!status.success(), "first publisher was not disconnected");
    // ...the same reader session goes on receiving, now from the second one...
    let before = session["bytes"].as_u64().unwrap_or(0);
    poll_until(
        Duration::from_secs(10),
        "the reader to receive the second publisher",
        || {
            play_sessions(&node, path)
                .into_iter()
                .find(|s| s["id"] == session["id"])
                .filter(|s| s["bytes"].as_u64().unwrap_or(0) > before + 80_000)
        },
    );
    // ...which publishes its whole file.
    let (status, err) = wait_background(&mut second, Duration::from_secs(30));
    assert!(
        status.success() && err.trim().is_empty(),
        "second publisher: {status}: {err}"
    );
    let decoded = reader.join().expect("reader thread");
    // All 250 frames of the second publisher (the reader was there before it started), plus
    // the second or more of the first one it had already decoded, less one GOP.
    decoded.assert_plays("reader across the takeover", 250, 500);
}

/// A UDP viewer that is behind when its publisher leaves still decodes every frame: the
/// node's RTCP BYE waits for the last packets to be read (ffmpeg reads a ready RTCP socket
/// before a ready RTP one and stops at BYE). The project's publisher sends two GOPs and
/// waits; ffmpeg joins (the node sends it the GOP in progress: 25 frames) and is then held
/// off the CPU (SIGSTOP) while the publisher sends two more GOPs (50 frames) and leaves; it
/// is let go once the node has answered the TEARDOWN, and must decode all 75.
#[test]
fn a_udp_viewer_behind_when_the_publisher_leaves_decodes_every_frame() {
    use vigil_testkit::client::{Clip, Publisher};
    let node = NodeBuilder::new().start();
    let path = "live/cam5";
    let url = node.url(path);
    let demo = std::fs::read(vigil_tests::workspace().join("server/assets/demo.h264"))
        .expect("the demo clip");
    let clip = Clip::from_annexb(&demo, 25.0).expect("SPS and PPS in the demo clip");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut ts: u32 = 0;
    // Frames `range` of the clip (a keyframe every 25), paced at 25 fps.
    let mut send = |publisher: &mut Publisher, range: std::ops::Range<usize>| {
        rt.block_on(async {
            for frame in &clip.frames[range] {
                publisher.send_frame(frame, ts).await.expect("send a frame");
                ts = ts.wrapping_add(3600);
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        })
    };
    let mut publisher = rt
        .block_on(Publisher::announce(&url, &clip, Duration::from_secs(10)))
        .expect("ANNOUNCE/RECORD");
    send(&mut publisher, 0..50);
    let viewer = vigil_tests::start_ffmpeg_decode(&url, &["-rtsp_transport", "udp"], &[]);
    poll_until(
        Duration::from_secs(20),
        "the viewer sent its first GOP",
        || {
            play_sessions(&node, path)
                .first()
                .is_some_and(|s| s["packets"].as_u64() > Some(0))
                .then_some(())
        },
    );
    viewer.freeze();
    send(&mut publisher, 50..100);
    rt.block_on(publisher.teardown()).expect("TEARDOWN");
    viewer.thaw();
    viewer
        .finish(READ_TIMEOUT)
        .assert_plays("a UDP viewer behind when the publisher left", 75, 75);
}
