//! What the playback tests share: the recording every test plays, nodes on it, and
//! helpers that read the store, the API and a session's packets.

pub use std::path::Path;
pub use std::process::Command;
pub use std::sync::OnceLock;
pub use std::time::{Duration, Instant};
pub use vigil_proto::codec::starts_keyframe;
pub use vigil_testkit::client::{
    play, ClientTransport, PlayOptions, PlayRequest, Player, ReceivedPacket, TrackStats,
};
pub use vigil_tests::ctl;
pub use vigil_tests::multi_thread_runtime as runtime;
pub use vigil_tests::rfc3339;
pub use vigil_tests::{
    ffmpeg_decode, fixture, gst_decode_h264, poll_until, spawn_background, spawn_ffmpeg_decode,
    start_ffmpeg_decode, wait_background, Node, NodeBuilder, RtspConn, DEMO_CAMERA,
};

/// Camera id of the shared recording.
pub const CAM: &str = "rec";
/// Video clock rate of every recording here.
pub const CLOCK: u32 = 90_000;
/// Frames per second and keyframe interval of the fixtures and the demo clip.
pub const FPS: f64 = 25.0;
pub const GOP_MS: i64 = 1000;
/// Longest wait for one RTP packet.
pub const PACKET_WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Helpers

pub use vigil_storage::now_ms;

/// The `[storage]` table for a root and a segment length.
pub fn storage(root: &Path, segment_secs: f64) -> String {
    format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = {segment_secs:.1}",
        root.display()
    )
}

pub fn playback_url(node: &Node, camera: &str, start_ms: i64, end_ms: Option<i64>) -> String {
    let mut url = node.url(&format!("playback/{camera}?start={}", rfc3339(start_ms)));
    if let Some(e) = end_ms {
        url.push_str(&format!("&end={}", rfc3339(e)));
    }
    url
}

/// The node's `/api/recordings` entry of `camera` (recording state).
pub fn record_status(node: &Node, camera: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&node.try_api("/api/recordings")?).ok()?;
    v.as_array()?
        .iter()
        .find(|s| s["camera"] == camera)
        .cloned()
}

/// `/api/recordings/<camera>` (what is on disk), if the node answers 200.
pub fn recordings(node: &Node, camera: &str) -> Option<serde_json::Value> {
    let body = node.try_api(&format!("/api/recordings/{camera}"))?;
    serde_json::from_str(&body).ok()
}

/// Where the node's one playback is: the recording time of the latest frame it sent (None
/// before the first, or once the session is gone).
pub fn playback_position(node: &Node) -> Option<i64> {
    node.api_json("/api/sessions")
        .as_array()?
        .iter()
        .find_map(|s| s["position_ms"].as_i64())
}

pub fn cache_stats(node: &Node) -> serde_json::Value {
    node.api_json("/api/cache")["stats"].clone()
}

pub fn stat(stats: &serde_json::Value, key: &str) -> u64 {
    stats[key]
        .as_u64()
        .unwrap_or_else(|| panic!("cache stats without {key}: {stats}"))
}

/// The cache's stats once no storage read is in flight (read-ahead ends quickly).
pub fn settled_cache_stats(node: &Node) -> serde_json::Value {
    poll_until(Duration::from_secs(5), "no load in flight", || {
        let s = cache_stats(node);
        (stat(&s, "load_count") == stat(&s, "loads")).then_some(s)
    })
}

/// A counter of `/metrics` with labels, e.g. `vigil_recording_errors_total{camera="demo"}`.
pub fn labelled_metric(node: &Node, name: &str, label: &str) -> f64 {
    let text = node.try_api("/metrics").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .find_map(|l| l.rsplit_once(' ')?.1.trim().parse().ok())
        .unwrap_or(0.0)
}

pub use vigil_testkit::media::{segment_files, SegFile};

pub fn tmp_files(root: &Path, camera: &str) -> Vec<String> {
    std::fs::read_dir(root.join("cameras").join(camera).join(".tmp"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The next RTP packet, bounded; panics if the stream ends or fails.
pub async fn next(p: &mut Player, what: &str) -> ReceivedPacket {
    match tokio::time::timeout(PACKET_WAIT, p.next_packet()).await {
        Err(_) => panic!("{what}: no packet within {PACKET_WAIT:?}"),
        Ok(Err(e)) => panic!("{what}: {e}"),
        Ok(Ok(None)) => panic!("{what}: the stream ended"),
        Ok(Ok(Some(pkt))) => pkt,
    }
}

pub fn video_track(p: &Player) -> usize {
    p.tracks()
        .iter()
        .position(|t| t.codec.is_video())
        .expect("a video track")
}

/// Whether `seq` is at or after `from` in the 16-bit sequence space.
pub fn seq_at_or_after(seq: u16, from: u16) -> bool {
    seq.wrapping_sub(from) < 0x8000
}

/// Everything one session received, per track, as the client's own counters see it: loss
/// from sequence numbers, SSRC changes, timestamp regressions (steps back by more than half
/// a second; B-frames step back less).
pub struct Continuity {
    pub tracks: Vec<TrackStats>,
}

impl Continuity {
    pub fn new(p: &Player) -> Continuity {
        Continuity {
            tracks: p
                .tracks()
                .iter()
                .map(|t| TrackStats::new(t.codec, t.clock_rate))
                .collect(),
        }
    }

    pub fn see(&mut self, pkt: &ReceivedPacket) {
        self.tracks[pkt.track].record(
            &pkt.header,
            &pkt.payload,
            12 + pkt.payload.len(),
            Duration::ZERO,
        );
    }

    pub fn assert_continuous(&self, what: &str) {
        for (i, t) in self.tracks.iter().enumerate() {
            if t.packets == 0 {
                continue;
            }
            assert_eq!(t.seq.lost(), 0, "{what}: track {i} has sequence gaps");
            assert_eq!(t.ssrc_changes, 0, "{what}: track {i} changed SSRC");
            assert_eq!(
                t.timestamp_regressions, 0,
                "{what}: track {i} timestamps went backwards"
            );
        }
    }
}

/// Read `track`'s packets until the first one of the latest PLAY's range (sequence number
/// at or after its RTP-Info `seq`) and return it. Packets of the previous range are seen
/// by `cont` too.
pub async fn first_of_range(
    p: &mut Player,
    track: usize,
    cont: &mut Continuity,
    what: &str,
) -> ReceivedPacket {
    let info = p
        .rtp_info_of(track)
        .unwrap_or_else(|| panic!("{what}: no RTP-Info for track {track}: {:?}", p.rtp_info()))
        .clone();
    let seq = info.seq.expect("RTP-Info seq");
    loop {
        let pkt = next(p, what).await;
        cont.see(&pkt);
        if pkt.track == track && seq_at_or_after(pkt.header.sequence, seq) {
            assert_eq!(
                pkt.header.sequence, seq,
                "{what}: the first packet of the range is not RTP-Info's seq"
            );
            assert_eq!(
                Some(pkt.header.timestamp),
                info.rtptime,
                "{what}: the first packet's timestamp is not RTP-Info's rtptime"
            );
            return pkt;
        }
    }
}

/// Whether the video frame that begins with `first` (read on up to its marker bit) holds a
/// keyframe: its first NAL may be an SEI or an access unit delimiter, so any packet of the
/// frame may start the IDR (or SPS). Other tracks' packets met meanwhile go to `cont`.
pub async fn frame_is_keyframe(
    p: &mut Player,
    first: &ReceivedPacket,
    cont: &mut Continuity,
    what: &str,
) -> bool {
    let v = video_track(p);
    let codec = p.tracks()[v].codec;
    let mut key = starts_keyframe(codec, &first.payload);
    let mut marker = first.header.marker;
    while !marker {
        let pkt = next(p, what).await;
        cont.see(&pkt);
        if pkt.track == v {
            assert_eq!(
                pkt.header.timestamp, first.header.timestamp,
                "{what}: a frame without marker bit"
            );
            key |= starts_keyframe(codec, &pkt.payload);
            marker = pkt.header.marker;
        }
    }
    key
}

/// The checks of a session's start on a keyframe: the first video packet of the new range
/// carries RTP-Info's seq and rtptime, and begins a keyframe's access unit.
pub async fn assert_starts_on_keyframe(
    p: &mut Player,
    cont: &mut Continuity,
    what: &str,
) -> ReceivedPacket {
    let v = video_track(p);
    let first = first_of_range(p, v, cont, what).await;
    assert!(
        frame_is_keyframe(p, &first, cont, what).await,
        "{what}: the first video frame (first NAL header {:#04x}) is not a keyframe",
        first.payload.first().copied().unwrap_or(0)
    );
    first
}

/// A new TCP playback of `url` whose start passes [`assert_starts_on_keyframe`]; the player
/// is returned at that point.
pub async fn play_from_a_keyframe(url: &str, what: &str) -> Player {
    let mut p = play(url, PlayOptions::new(ClientTransport::Tcp))
        .await
        .unwrap_or_else(|e| panic!("play ({what}): {e}"));
    let mut cont = Continuity::new(&p);
    assert_starts_on_keyframe(&mut p, &mut cont, what).await;
    p
}

/// Read until `track`'s media clock has moved `secs` past `from` (RTP timestamp).
pub async fn play_for(
    p: &mut Player,
    track: usize,
    from: u32,
    secs: f64,
    cont: &mut Continuity,
    what: &str,
) -> ReceivedPacket {
    let until = from.wrapping_add((secs * f64::from(CLOCK)) as u32);
    loop {
        let pkt = next(p, what).await;
        cont.see(&pkt);
        if pkt.track == track && pkt.header.timestamp.wrapping_sub(until) as i32 >= 0 {
            return pkt;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The shared recording

/// 20 s of `h264_aac.mp4` recorded by a node that is gone by the time tests play it.
pub struct Recording {
    pub root: tempfile::TempDir,
    /// First and last recorded instant (UTC ms), from the recording node's API.
    pub first_ms: i64,
    pub last_ms: i64,
    pub segments: Vec<SegFile>,
}

pub fn recording() -> &'static Recording {
    static REC: OnceLock<Recording> = OnceLock::new();
    REC.get_or_init(|| {
        let root = tempfile::tempdir().expect("temp dir");
        let node = NodeBuilder::new().extra(&storage(root.path(), 2.0)).start();
        let file = fixture("h264_aac.mp4");
        let mut publisher = spawn_background(
            Command::new("ffmpeg")
                .args(["-hide_banner", "-nostdin", "-v", "error", "-re"])
                .args(["-stream_loop", "1", "-i"])
                .arg(&file)
                .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp"])
                .arg(node.url(&format!("live/{CAM}"))),
        );
        let (status, err) = wait_background(&mut publisher, Duration::from_secs(60));
        assert!(status.success(), "the publisher failed ({status}): {err}");
        // The publisher left: the recorder closes its last segment and waits again.
        poll_until(Duration::from_secs(10), "the recorder to finish", || {
            let s = record_status(&node, CAM)?;
            (s["state"] == "waiting" && s["segments_written"].as_u64() >= Some(9)).then_some(())
        });
        let view = recordings(&node, CAM).expect("recordings of the camera");
        let ranges = view["ranges"].as_array().expect("ranges").clone();
        assert_eq!(ranges.len(), 1, "one recorded range without gaps: {view}");
        let first_ms = ranges[0]["start_ms"].as_i64().unwrap();
        let last_ms = ranges[0]["end_ms"].as_i64().unwrap();
        assert!(
            (19_000..=21_500).contains(&(last_ms - first_ms)),
            "recorded {} ms of a 20 s publish: {view}",
            last_ms - first_ms
        );
        let segments = segment_files(root.path(), CAM);
        assert_eq!(
            view["segments"].as_u64(),
            Some(segments.len() as u64),
            "API and directory disagree"
        );
        assert_eq!(segments[0].start_ms, first_ms);
        drop(node);
        Recording {
            root,
            first_ms,
            last_ms,
            segments,
        }
    })
}

/// A node of its own (fresh cache) on the shared recording's root.
pub fn playback_node(rec: &Recording) -> Node {
    NodeBuilder::new()
        .extra(&storage(rec.root.path(), 2.0))
        .start()
}
