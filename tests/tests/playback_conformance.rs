//! Playback as VLC, NVR clients and RFC 2326 expect it (issue 9), against real nodes: range
//! ends honoured in PLAY and in the URL (the earlier wins) with the range actually served in
//! the answer; starts in a gap or just before the first recording play from the next
//! recorded moment; gaps are skipped while playing; npt counts from the first frame served;
//! Scale edges; checked npt arithmetic; no burst after a storage stall. Each with a raw RTSP
//! client (exact header values) and with ffmpeg and GStreamer where they send it.
//!
//! The tests share one recording ([`recording`]): the 10 s H.264 + AAC fixture published
//! twice with `ffmpeg -re`, at least 3 s apart, recorded in 2 s segments: two recorded
//! ranges with a gap between. The fixture is 25 fps with a keyframe every second (B-frames,
//! decode order I0 P4 B2 b1 b3 …), and each recording starts on a keyframe, so keyframes
//! fall on whole seconds from a range's first frame.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vigil_proto::rtcp::{parse_compound, RtcpPacket};
use vigil_proto::rtsp::UtcTime;
use vigil_server::client::{play, ClientTransport, PlayOptions, Player, ReceivedPacket};
use vigil_tests::{
    ffmpeg_decode, fixture, gst_decode_h264, poll_until, rfc3339, spawn_background,
    wait_background, Incoming, Node, NodeBuilder, RtspConn,
};

const CAM: &str = "gaps";
/// Video clock rate and frame interval of the fixture.
const CLOCK: u32 = 90_000;
const FRAME_MS: i64 = 40;
const FRAME_TICKS: u32 = CLOCK / 25;

// ---------------------------------------------------------------------------------------
// The shared recording: two ranges with a gap

struct Recording {
    root: tempfile::TempDir,
    /// The two recorded ranges (UTC ms), from the recording node's API.
    a: (i64, i64),
    b: (i64, i64),
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn storage(root: &Path) -> String {
    format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = 2.0",
        root.display()
    )
}

fn ranges(node: &Node) -> Option<Vec<(i64, i64)>> {
    let v: serde_json::Value =
        serde_json::from_str(&node.try_api(&format!("/api/recordings/{CAM}"))?).ok()?;
    v["ranges"]
        .as_array()?
        .iter()
        .map(|r| Some((r["start_ms"].as_i64()?, r["end_ms"].as_i64()?)))
        .collect()
}

fn recorder_waiting(node: &Node) -> bool {
    let Some(body) = node.try_api("/api/recordings") else {
        return false;
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v.as_array().is_some_and(|a| {
        a.iter()
            .any(|s| s["camera"] == CAM && s["state"] == "waiting")
    })
}

fn publish_once(node: &Node) {
    let mut publisher = spawn_background(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-v", "error", "-re", "-i"])
            .arg(fixture("h264_aac.mp4"))
            .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp"])
            .arg(node.url(&format!("live/{CAM}"))),
    );
    let (status, err) = wait_background(&mut publisher, Duration::from_secs(40));
    assert!(status.success(), "the publisher failed ({status}): {err}");
}

fn recording() -> &'static Recording {
    static REC: OnceLock<Recording> = OnceLock::new();
    REC.get_or_init(|| {
        let root = tempfile::tempdir().expect("temp dir");
        let node = NodeBuilder::new().extra(&storage(root.path())).start();
        publish_once(&node);
        let first = poll_until(Duration::from_secs(15), "the first recording", || {
            let r = ranges(&node)?;
            (recorder_waiting(&node) && r.len() == 1 && r[0].1 - r[0].0 >= 9_000).then(|| r[0])
        });
        // The gap: wall time has to pass between the two publishes.
        poll_until(Duration::from_secs(10), "3 s of gap", || {
            (now_ms() >= first.1 + 3_000).then_some(())
        });
        publish_once(&node);
        let both = poll_until(Duration::from_secs(15), "the second recording", || {
            let r = ranges(&node)?;
            (recorder_waiting(&node) && r.len() == 2 && r[1].1 - r[1].0 >= 9_000).then_some(r)
        });
        assert_eq!(both[0], first, "the first range changed");
        drop(node);
        Recording {
            root,
            a: both[0],
            b: both[1],
        }
    })
}

fn node_on(rec: &Recording, extra: &str) -> Node {
    NodeBuilder::new()
        .extra(&format!("{}\n{extra}", storage(rec.root.path())))
        .start()
}

fn url(node: &Node, start_ms: i64, end_ms: Option<i64>) -> String {
    let mut u = node.url(&format!("playback/{CAM}?start={}", rfc3339(start_ms)));
    if let Some(e) = end_ms {
        u.push_str(&format!("&end={}", rfc3339(e)));
    }
    u
}

fn clock(ms: i64) -> String {
    UtcTime { unix_millis: ms }.to_clock_string()
}

fn secs(ms: i64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// A raw RTSP session over TCP

/// DESCRIBE and SETUP every track over TCP (track N on channels 2N, 2N+1). Returns the SDP,
/// the aggregate URL and the video track.
fn setup(c: &mut RtspConn, url: &str) -> (String, String, usize) {
    let d = c.request("DESCRIBE", url, &[("Accept", "application/sdp")], None);
    assert_eq!(d.status.0, 200, "DESCRIBE {url}: {}", d.reason);
    let base = d.headers.get("Content-Base").unwrap_or(url).to_string();
    let sdp = String::from_utf8_lossy(&d.body).into_owned();
    let media: Vec<&str> = sdp.lines().filter(|l| l.starts_with("m=")).collect();
    let video = media
        .iter()
        .position(|m| m.starts_with("m=video"))
        .expect("a video track");
    let controls: Vec<String> = sdp
        .lines()
        .filter_map(|l| l.strip_prefix("a=control:"))
        .filter(|c| c.contains("trackID="))
        .map(|c| c.trim().to_string())
        .collect();
    assert_eq!(controls.len(), media.len(), "one control per track:\n{sdp}");
    for (t, control) in controls.iter().enumerate() {
        let transport = format!("RTP/AVP/TCP;unicast;interleaved={}-{}", 2 * t, 2 * t + 1);
        let s = c.request("SETUP", control, &[("Transport", &transport)], None);
        assert_eq!(s.status.0, 200, "SETUP {control}: {}", s.reason);
    }
    (sdp, base, video)
}

/// PLAY with headers; asserts 200 and returns the answer's Range header.
fn play_ok(c: &mut RtspConn, base: &str, headers: &[(&str, &str)]) -> (String, String) {
    let r = c.request("PLAY", base, headers, None);
    assert_eq!(r.status.0, 200, "PLAY {headers:?}: {}", r.reason);
    (
        r.headers.get("Range").unwrap_or_default().to_string(),
        r.headers.get("RTP-Info").unwrap_or_default().to_string(),
    )
}

/// The video frames a raw session received up to RTCP BYE on the video's RTCP channel.
#[derive(Debug, Default)]
struct Frames {
    /// RTP timestamps of the video frames (marker packets), in arrival order.
    ts: Vec<u32>,
    first_seq: Option<u16>,
    last_seq: u16,
    bye: bool,
}

impl Frames {
    /// Media time from the first frame to the latest timestamp (B-frames: not the last).
    fn span_ms(&self) -> i64 {
        let first = self.ts[0];
        let max = self.ts.iter().map(|t| t.wrapping_sub(first)).max().unwrap_or(0);
        i64::from(max) * 1000 / i64::from(CLOCK)
    }
}

fn read_to_bye(c: &mut RtspConn, video: usize) -> Frames {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut f = Frames::default();
    while Instant::now() < deadline {
        match c.receive().expect("media or BYE") {
            Incoming::Data { channel, payload } if usize::from(channel) == 2 * video => {
                let (h, _) = vigil_proto::rtp::parse(&payload).expect("RTP");
                f.first_seq.get_or_insert(h.sequence);
                f.last_seq = h.sequence;
                if h.marker {
                    f.ts.push(h.timestamp);
                }
            }
            Incoming::Data { channel, payload } if usize::from(channel) == 2 * video + 1 => {
                let bye = parse_compound(&payload)
                    .is_ok_and(|p| p.iter().any(|p| matches!(p, RtcpPacket::Bye { .. })));
                if bye {
                    f.bye = true;
                    return f;
                }
            }
            Incoming::Data { .. } => {}
            Incoming::Response(r) => panic!("unexpected response {r:?}"),
            Incoming::Closed => return f,
        }
    }
    panic!("no BYE within 30 s ({} frames)", f.ts.len());
}

/// The frame count and the latest timestamp of a range of `ms` from a keyframe: one frame
/// per 40 ms (frames whose decode time is before the end), the last starting within one
/// frame of the end.
fn assert_range(f: &Frames, ms: i64, what: &str) {
    assert!(f.bye, "{what}: no RTCP BYE at the end of the range");
    let want = ms / FRAME_MS;
    let got = f.ts.len() as i64;
    assert!(
        (want - 1..=want + 1).contains(&got),
        "{what}: {got} video frames for {ms} ms, want {want} ± 1"
    );
    let span = f.span_ms();
    assert!(
        (ms - 2 * FRAME_MS..=ms).contains(&span),
        "{what}: the latest frame starts {span} ms after the first, want within one frame \
         before the end ({} ms)",
        ms - FRAME_MS
    );
}

// ---------------------------------------------------------------------------------------
// Range ends

/// `Range: npt=0.000-6.000` is answered as such, 6 s of video (150 frames) then RTCP BYE;
/// the session stays and a PLAY without Range continues at 6 s, the sequence unbroken.
#[test]
fn play_range_end_stops_there_and_play_continues() {
    let rec = recording();
    let node = node_on(rec, "");
    let mut c = RtspConn::connect(node.rtsp);
    let (sdp, base, v) = setup(&mut c, &url(&node, rec.a.0, None));
    let total = secs(rec.b.1 - rec.a.0);
    assert!(
        sdp.contains(&format!("a=range:npt=0-{total}\r\n")),
        "DESCRIBE's a=range, want npt=0-{total}:\n{sdp}"
    );
    let (range, _) = play_ok(&mut c, &base, &[("Range", "npt=0.000-6.000")]);
    assert_eq!(range, "npt=0.000-6.000");
    let f = read_to_bye(&mut c, v);
    assert_range(&f, 6_000, "npt=0-6");

    let (range, info) = play_ok(&mut c, &base, &[]);
    assert_eq!(range, format!("npt=6.000-{total}"), "the PLAY that continues");
    let next_seq = f.last_seq.wrapping_add(1);
    assert!(
        info.contains(&format!("seq={next_seq};")),
        "RTP-Info {info} does not continue at seq {next_seq}"
    );
    let r = c.request("PAUSE", &base, &[], None);
    assert_eq!(r.status.0, 200, "PAUSE: {}", r.reason);
}

/// A clock range with an end is answered in clock times: where it starts (the keyframe at
/// the asked second) and ends.
#[test]
fn clock_range_end_is_answered_in_clock_times() {
    let rec = recording();
    let node = node_on(rec, "");
    let mut c = RtspConn::connect(node.rtsp);
    let (_, base, v) = setup(&mut c, &url(&node, rec.a.0, None));
    let (from, to) = (rec.a.0 + 2_000, rec.a.0 + 5_000);
    let asked = format!("clock={}-{}", clock(from + 300), clock(to));
    let (range, _) = play_ok(&mut c, &base, &[("Range", &asked)]);
    assert_eq!(range, format!("clock={}-{}", clock(from), clock(to)));
    assert_range(&read_to_bye(&mut c, v), to - from, "clock range");
}

/// The earlier of the URL's `end=` and the Range's end wins; the URL's end ends the session.
#[test]
fn the_earlier_end_wins_and_the_urls_ends_the_session() {
    let rec = recording();
    let node = node_on(rec, "");
    let u = url(&node, rec.a.0, Some(rec.a.0 + 8_000));

    let mut c = RtspConn::connect(node.rtsp);
    let (sdp, base, _) = setup(&mut c, &u);
    assert!(sdp.contains("a=range:npt=0-8.000\r\n"), "a=range:\n{sdp}");
    let (range, _) = play_ok(&mut c, &base, &[("Range", "npt=0-10")]);
    assert_eq!(range, "npt=0.000-8.000", "the URL's end is earlier");
    let r = c.request("TEARDOWN", &base, &[], None);
    assert_eq!(r.status.0, 200);

    let mut c = RtspConn::connect(node.rtsp);
    let (_, base, v) = setup(&mut c, &u);
    let (range, _) = play_ok(&mut c, &base, &[("Range", "npt=2-5")]);
    assert_eq!(range, "npt=2.000-5.000", "the Range's end is earlier");
    assert_range(&read_to_bye(&mut c, v), 3_000, "npt=2-5");
    let (range, _) = play_ok(&mut c, &base, &[]);
    assert_eq!(range, "npt=5.000-8.000");
    assert_range(&read_to_bye(&mut c, v), 3_000, "5 s to the URL's end");
    poll_until(Duration::from_secs(5), "the session to end", || {
        node.api_json("/api/sessions")
            .as_array()?
            .is_empty()
            .then_some(())
    });
}

/// ffmpeg: `-ss 2 -t 3` decodes 3 s (75 frames) with zero errors, and a URL with `end=`
/// plays to it (100 frames for 4 s, the output ending within a frame of 4 s) and exits 0
/// at the server's BYE.
#[test]
fn ffmpeg_ss_t_and_url_end() {
    let rec = recording();
    let node = node_on(rec, "");
    let run = ffmpeg_decode(
        &url(&node, rec.a.0, None),
        &["-rtsp_transport", "tcp", "-ss", "2"],
        &["-t", "3"],
        Duration::from_secs(30),
    );
    run.assert_plays("ffmpeg -ss 2 -t 3", 74, 76);

    let run = ffmpeg_decode(
        &url(&node, rec.a.0 + 1_000, Some(rec.a.0 + 5_000)),
        &["-rtsp_transport", "tcp"],
        &["-map", "0:v"],
        Duration::from_secs(30),
    );
    run.assert_plays("ffmpeg to the URL's end", 99, 101);
    let out = run.out_time.expect("ffmpeg's out_time").as_millis() as i64;
    assert!(
        (4_000 - 2 * FRAME_MS..=4_000 + FRAME_MS).contains(&out),
        "ffmpeg's output ends at {out} ms of a 4 s range"
    );
}

// ---------------------------------------------------------------------------------------
// Starts, gaps and the true origin

/// A start inside the gap plays from the second recording, said in the answer (clock= for a
/// clock request); ffmpeg and GStreamer decode from there with zero errors. A start just
/// before the first recording plays from its first frame; one earlier than the tolerance,
/// after the last recording, or in a gap with the end before the next recording is 404.
#[test]
fn starts_in_a_gap_or_just_before_the_first_recording() {
    let rec = recording();
    let node = node_on(rec, "");
    let mid_gap = (rec.a.1 + rec.b.0) / 2;
    let gap_url = url(&node, mid_gap, None);

    let mut c = RtspConn::connect(node.rtsp);
    let (sdp, base, _) = setup(&mut c, &gap_url);
    let len = secs(rec.b.1 - rec.b.0);
    assert!(sdp.contains(&format!("a=range:npt=0-{len}\r\n")), "{sdp}");
    let asked = format!("clock={}-", clock(mid_gap));
    let (range, _) = play_ok(&mut c, &base, &[("Range", &asked)]);
    assert_eq!(range, format!("clock={}-{}", clock(rec.b.0), clock(rec.b.1)));
    let (range, _) = play_ok(&mut c, &base, &[("Range", "npt=0-")]);
    assert_eq!(range, format!("npt=0.000-{len}"));
    drop(c);

    let ff = ffmpeg_decode(
        &gap_url,
        &["-rtsp_transport", "tcp"],
        &["-t", "3"],
        Duration::from_secs(30),
    );
    ff.assert_plays("ffmpeg from a gap", 74, 76);
    let gst = gst_decode_h264(&gap_url, "tcp", 50, Duration::from_secs(30));
    assert!(
        (50..=53).contains(&gst.frames) && gst.errors.is_empty(),
        "GStreamer from a gap: {} frames, errors:\n{}",
        gst.frames,
        gst.errors.join("\n")
    );

    let mut c = RtspConn::connect(node.rtsp);
    let (_, base, _) = setup(&mut c, &url(&node, rec.a.0 - 400, None));
    let (range, _) = play_ok(&mut c, &base, &[]);
    assert_eq!(range, format!("npt=0.000-{}", secs(rec.b.1 - rec.a.0)));
    drop(c);

    for (what, u) in [
        ("11 s before", url(&node, rec.a.0 - 11_000, None)),
        ("after", url(&node, rec.b.1 + 1_000, None)),
        ("gap to gap", url(&node, mid_gap, Some(mid_gap + 500))),
    ] {
        let mut c = RtspConn::connect(node.rtsp);
        let r = c.request("DESCRIBE", &u, &[("Accept", "application/sdp")], None);
        assert_eq!(r.status.0, 404, "{what}: {}", r.reason);
    }
    let mut c = RtspConn::connect(node.rtsp);
    let r = c.request(
        "DESCRIBE",
        &url(&node, rec.a.0 - 11_000, None),
        &[("Accept", "application/sdp")],
        None,
    );
    assert!(
        r.reason.contains(&format!(
            "recorded from {} to {}",
            rfc3339(rec.a.0),
            rfc3339(rec.b.1)
        )),
        "the 404 should name the recorded span: {}",
        r.reason
    );
}

/// npt 0 is the keyframe served for a start mid-GOP, in DESCRIBE's a=range and in PLAY; a
/// seek to npt 1.5 lands on the keyframe at npt 1.
#[test]
fn npt_counts_from_the_keyframe_actually_served() {
    let rec = recording();
    let node = node_on(rec, "");
    let key = rec.a.0 + 2_000;
    let mut c = RtspConn::connect(node.rtsp);
    let (sdp, base, _) = setup(&mut c, &url(&node, key + 500, None));
    let len = secs(rec.b.1 - key);
    assert!(sdp.contains(&format!("a=range:npt=0-{len}\r\n")), "{sdp}");
    let (range, _) = play_ok(&mut c, &base, &[]);
    assert_eq!(range, format!("npt=0.000-{len}"));
    let (range, _) = play_ok(&mut c, &base, &[("Range", "npt=1.5-")]);
    assert_eq!(range, format!("npt=1.000-{len}"));
}

/// Playing across the gap: no wait for the gap's wall time, timestamps continue one frame
/// on (the gap is cut out), sequence numbers unbroken; ffmpeg and GStreamer decode across it
/// with zero errors.
#[test]
fn gaps_are_skipped_while_playing() {
    let rec = recording();
    let node = node_on(rec, "");
    let before_gap = url(&node, rec.a.1 - 2_000, None);
    runtime().block_on(async {
        let mut p = play(&before_gap, PlayOptions::new(ClientTransport::Tcp))
            .await
            .expect("play before the gap");
        let v = video_track(&p);
        let frames = video_frames(&mut p, v, 100).await;
        let mut max_ts = frames[0].header.timestamp;
        let mut prev: Option<&ReceivedPacket> = None;
        for f in &frames {
            if let Some(prev) = prev {
                assert_eq!(
                    f.header.ssrc, prev.header.ssrc,
                    "the SSRC changed across the gap"
                );
                let wait = f.at.duration_since(prev.at);
                assert!(
                    wait < Duration::from_millis(300),
                    "{wait:?} between two frames: the gap was waited out"
                );
                // Decode order: a new frame is at most 4 frames past the latest (P after
                // B-frames), never a jump by the gap's media time.
                let step = f.header.timestamp.wrapping_sub(max_ts) as i32;
                assert!(
                    step <= 4 * FRAME_TICKS as i32,
                    "the timestamp jumped {step} ticks"
                );
                if step > 0 {
                    max_ts = f.header.timestamp;
                }
            }
            prev = Some(f);
        }
    });
    let ff = ffmpeg_decode(
        &before_gap,
        &["-rtsp_transport", "tcp"],
        &["-t", "4"],
        Duration::from_secs(30),
    );
    ff.assert_plays("ffmpeg across the gap", 99, 101);
    let gst = gst_decode_h264(&before_gap, "tcp", 100, Duration::from_secs(30));
    assert!(
        (100..=103).contains(&gst.frames) && gst.errors.is_empty(),
        "GStreamer across the gap: {} frames in {:?}, errors:\n{}\n{}",
        gst.frames,
        gst.elapsed,
        gst.errors.join("\n"),
        gst.output
            .lines()
            .filter_map(|l| l.split_once("pts: ").map(|(_, p)| &p[..16]))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

fn video_track(p: &Player) -> usize {
    p.tracks()
        .iter()
        .position(|t| t.codec.is_video())
        .expect("a video track")
}

/// The last packet (marker) of each of the next `n` video frames; the sequence must be
/// gapless.
async fn video_frames(p: &mut Player, v: usize, n: usize) -> Vec<ReceivedPacket> {
    let mut out = Vec::with_capacity(n);
    let mut seq: Option<u16> = None;
    while out.len() < n {
        let pkt = tokio::time::timeout(Duration::from_secs(10), p.next_packet())
            .await
            .expect("a packet within 10 s")
            .expect("no error")
            .expect("the stream goes on");
        if pkt.track != v {
            continue;
        }
        if let Some(s) = seq {
            assert_eq!(pkt.header.sequence, s.wrapping_add(1), "video packet lost");
        }
        seq = Some(pkt.header.sequence);
        if pkt.header.marker {
            out.push(pkt);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Scale, bad times, pacing

/// Scale and Speed from 0.25 to 16 are accepted and echoed; outside, and reverse, 456 with
/// the supported range in the reason.
#[test]
fn scale_edges() {
    let rec = recording();
    let node = node_on(rec, "");
    let mut c = RtspConn::connect(node.rtsp);
    let (_, base, _) = setup(&mut c, &url(&node, rec.a.0, None));
    for (h, v) in [("Scale", "0.25"), ("Scale", "16"), ("Speed", "16.0")] {
        let r = c.request("PLAY", &base, &[(h, v)], None);
        assert_eq!(r.status.0, 200, "{h}: {v}: {}", r.reason);
        assert_eq!(r.headers.get(h), Some(v), "{h} not echoed");
    }
    for (h, v) in [
        ("Scale", "0.2"),
        ("Scale", "16.5"),
        ("Scale", "-1"),
        ("Scale", "-8"),
        ("Speed", "0.1"),
        ("Speed", "32"),
    ] {
        let r = c.request("PLAY", &base, &[(h, v)], None);
        assert_eq!(r.status.0, 456, "{h}: {v}: {}", r.reason);
        assert!(
            r.reason.contains(&format!("supported {h}: 0.25 to 16")),
            "{h}: {v}: {}",
            r.reason
        );
        if v.starts_with('-') {
            assert!(r.reason.contains("reverse play"), "{}", r.reason);
        }
    }
}

/// Huge or inverted npt values are 457, and the node keeps serving the session.
#[test]
fn huge_and_inverted_times_are_457() {
    let rec = recording();
    let node = node_on(rec, "");
    let mut c = RtspConn::connect(node.rtsp);
    let (_, base, _) = setup(&mut c, &url(&node, rec.a.0, None));
    for range in [
        "npt=99999999999999999999-",
        "npt=0-99999999999999999999",
        "npt=3200000000000-",
        "npt=5-2",
        "clock=99991231T235959Z-",
    ] {
        let r = c.request("PLAY", &base, &[("Range", range)], None);
        assert_eq!(r.status.0, 457, "Range: {range}: {}", r.reason);
    }
    let (range, _) = play_ok(&mut c, &base, &[("Range", "npt=1-")]);
    assert!(range.starts_with("npt=1.000-"), "{range}");
}

/// With every segment read delayed 500 ms and no read-ahead, the sender stalls at each
/// segment boundary; after a stall it goes on at the frame rate: no two frames in a row
/// arrive less than half a frame interval apart.
#[test]
fn no_burst_after_a_storage_stall() {
    let rec = recording();
    let node = node_on(
        rec,
        "[storage.emulate]\nread_latency_ms = 500\n[cache]\nread_ahead_segments = 0",
    );
    runtime().block_on(async {
        let mut p = play(
            &url(&node, rec.a.0, None),
            PlayOptions::new(ClientTransport::Tcp),
        )
        .await
        .expect("play");
        let v = video_track(&p);
        // 7 s of media: segment boundaries at 2, 4 and 6 s.
        let frames = video_frames(&mut p, v, 175).await;
        let gaps: Vec<Duration> = frames.windows(2).map(|w| w[1].at - w[0].at).collect();
        let stalls = gaps
            .iter()
            .filter(|g| **g >= Duration::from_millis(400))
            .count();
        assert!(
            stalls >= 2,
            "the injected 500 ms stalls did not show ({stalls} long gaps): {gaps:?}"
        );
        let half = Duration::from_millis(FRAME_MS as u64 / 2);
        for (i, w) in gaps.windows(2).enumerate() {
            assert!(
                w[0] >= half || w[1] >= half,
                "frames {i}..{} arrived {:?} and {:?} apart: a burst",
                i + 2,
                w[0],
                w[1]
            );
        }
    });
}
