//! Recording and playback end to end (issue 3): a node records what ffmpeg publishes (or its
//! demo camera) into the store, and ffmpeg, GStreamer and the project's own client play it
//! back over `rtsp://HOST/playback/<camera>?start=…[&end=…]` with seeks (`Range: npt=`,
//! `Range: clock=`), trick play (`Scale`), PAUSE and resume; a crash loses at most the segment
//! being written; two nodes share one root; concurrent sessions read each segment from
//! storage once; a full disk stops recording visibly while live viewing goes on; bad playback
//! URLs get clear 4xx answers; `vigil ctl` shows recordings and the cache.
//!
//! Most tests play one shared recording ([`recording`]): 20 s of the H.264 + AAC fixture
//! (10 s, looped once) published with `ffmpeg -re`, recorded in 2 s segments by a node that
//! is stopped afterwards. Each test plays it with a node of its own on the same root, so
//! each starts with an empty playback cache. The fixture has a keyframe every second (a GOP
//! of 25 frames at 25 fps), which bounds "the keyframe at or before" a requested time.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vigil_proto::codec::starts_keyframe;
use vigil_server::client::{
    play, ClientTransport, PlayOptions, PlayRequest, Player, ReceivedPacket, TrackStats,
};
use vigil_tests::ctl;
use vigil_tests::rfc3339;
use vigil_tests::{
    ffmpeg_decode, fixture, gst_decode_h264, poll_until, spawn_background, spawn_ffmpeg_decode,
    wait_background, Node, NodeBuilder, RtspConn, DEMO_CAMERA,
};

/// Camera id of the shared recording.
const CAM: &str = "rec";
/// Video clock rate of every recording here.
const CLOCK: u32 = 90_000;
/// Frames per second and keyframe interval of the fixtures and the demo clip.
const FPS: f64 = 25.0;
const GOP_MS: i64 = 1000;
/// Longest wait for one RTP packet.
const PACKET_WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Helpers

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The `[storage]` table for a root and a segment length.
fn storage(root: &Path, segment_secs: f64) -> String {
    format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = {segment_secs:.1}",
        root.display()
    )
}

fn playback_url(node: &Node, camera: &str, start_ms: i64, end_ms: Option<i64>) -> String {
    let mut url = node.url(&format!("playback/{camera}?start={}", rfc3339(start_ms)));
    if let Some(e) = end_ms {
        url.push_str(&format!("&end={}", rfc3339(e)));
    }
    url
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The node's `/api/recordings` entry of `camera` (recording state).
fn record_status(node: &Node, camera: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&node.try_api("/api/recordings")?).ok()?;
    v.as_array()?
        .iter()
        .find(|s| s["camera"] == camera)
        .cloned()
}

/// `/api/recordings/<camera>` (what is on disk), if the node answers 200.
fn recordings(node: &Node, camera: &str) -> Option<serde_json::Value> {
    let body = node.try_api(&format!("/api/recordings/{camera}"))?;
    serde_json::from_str(&body).ok()
}

fn cache_stats(node: &Node) -> serde_json::Value {
    node.api_json("/api/cache")["stats"].clone()
}

fn stat(stats: &serde_json::Value, key: &str) -> u64 {
    stats[key]
        .as_u64()
        .unwrap_or_else(|| panic!("cache stats without {key}: {stats}"))
}

/// The cache's stats once no storage read is in flight (read-ahead ends quickly).
fn settled_cache_stats(node: &Node) -> serde_json::Value {
    poll_until(Duration::from_secs(5), "no load in flight", || {
        let s = cache_stats(node);
        (stat(&s, "load_count") == stat(&s, "loads")).then_some(s)
    })
}

/// A counter of `/metrics` with labels, e.g. `vigil_recording_errors_total{camera="demo"}`.
fn labelled_metric(node: &Node, name: &str, label: &str) -> f64 {
    let text = node.try_api("/metrics").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .find_map(|l| l.rsplit_once(' ')?.1.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A complete segment file of the store, from its name (`<start>_<end>_<frames>_<bytes>_<crc>.seg`,
/// see storage/FORMAT.md): the directory listing is the index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SegFile {
    start_ms: i64,
    end_ms: i64,
    name: String,
}

fn segment_files(root: &Path, camera: &str) -> Vec<SegFile> {
    let mut out = Vec::new();
    let Ok(hours) = std::fs::read_dir(root.join("cameras").join(camera)) else {
        return out;
    };
    for hour in hours.flatten().filter(|e| e.path().is_dir()) {
        for f in std::fs::read_dir(hour.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = f.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".seg") else {
                continue;
            };
            let mut it = stem.split('_');
            if let (Some(Ok(start_ms)), Some(Ok(end_ms))) =
                (it.next().map(str::parse), it.next().map(str::parse))
            {
                out.push(SegFile {
                    start_ms,
                    end_ms,
                    name,
                });
            }
        }
    }
    out.sort();
    out
}

fn tmp_files(root: &Path, camera: &str) -> Vec<String> {
    std::fs::read_dir(root.join("cameras").join(camera).join(".tmp"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The next RTP packet, bounded; panics if the stream ends or fails.
async fn next(p: &mut Player, what: &str) -> ReceivedPacket {
    match tokio::time::timeout(PACKET_WAIT, p.next_packet()).await {
        Err(_) => panic!("{what}: no packet within {PACKET_WAIT:?}"),
        Ok(Err(e)) => panic!("{what}: {e}"),
        Ok(Ok(None)) => panic!("{what}: the stream ended"),
        Ok(Ok(Some(pkt))) => pkt,
    }
}

fn video_track(p: &Player) -> usize {
    p.tracks()
        .iter()
        .position(|t| t.codec.is_video())
        .expect("a video track")
}

/// Whether `seq` is at or after `from` in the 16-bit sequence space.
fn seq_at_or_after(seq: u16, from: u16) -> bool {
    seq.wrapping_sub(from) < 0x8000
}

/// Everything one session received, per track, as the client's own counters see it: loss
/// from sequence numbers, SSRC changes, timestamp regressions (steps back by more than half
/// a second; B-frames step back less).
struct Continuity {
    tracks: Vec<TrackStats>,
}

impl Continuity {
    fn new(p: &Player) -> Continuity {
        Continuity {
            tracks: p
                .tracks()
                .iter()
                .map(|t| TrackStats::new(t.codec, t.clock_rate))
                .collect(),
        }
    }

    fn see(&mut self, pkt: &ReceivedPacket) {
        self.tracks[pkt.track].record(
            &pkt.header,
            &pkt.payload,
            12 + pkt.payload.len(),
            Duration::ZERO,
        );
    }

    fn assert_continuous(&self, what: &str) {
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
async fn first_of_range(
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
async fn frame_is_keyframe(
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
async fn assert_starts_on_keyframe(
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
async fn play_from_a_keyframe(url: &str, what: &str) -> Player {
    let mut p = play(url, PlayOptions::new(ClientTransport::Tcp))
        .await
        .unwrap_or_else(|e| panic!("play ({what}): {e}"));
    let mut cont = Continuity::new(&p);
    assert_starts_on_keyframe(&mut p, &mut cont, what).await;
    p
}

/// Read until `track`'s media clock has moved `secs` past `from` (RTP timestamp).
async fn play_for(
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
struct Recording {
    root: tempfile::TempDir,
    /// First and last recorded instant (UTC ms), from the recording node's API.
    first_ms: i64,
    last_ms: i64,
    segments: Vec<SegFile>,
}

fn recording() -> &'static Recording {
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
fn playback_node(rec: &Recording) -> Node {
    NodeBuilder::new()
        .extra(&storage(rec.root.path(), 2.0))
        .start()
}

// ---------------------------------------------------------------------------------------
// Playing a recording from a moment

/// ffmpeg and GStreamer play the recording from t0 + 5 s with zero errors; the project's
/// client shows that the stream starts at the keyframe at or before t0 + 5 s.
#[test]
fn ffmpeg_gstreamer_and_client_play_from_t0_plus_5s() {
    let rec = recording();
    let node = playback_node(rec);
    let t5 = rec.first_ms + 5_000;
    let url5 = playback_url(&node, CAM, t5, None);

    // DESCRIBE advertises the recorded range (players enable seeking with an end).
    let mut c = RtspConn::connect(node.rtsp);
    let d = c.request(
        "DESCRIBE",
        &playback_url(&node, CAM, rec.first_ms, None),
        &[("Accept", "application/sdp")],
        None,
    );
    assert_eq!(d.status.0, 200, "DESCRIBE: {}", d.reason);
    let sdp = String::from_utf8_lossy(&d.body).into_owned();
    let end: f64 = sdp
        .lines()
        .find_map(|l| l.strip_prefix("a=range:npt=0-"))
        .unwrap_or_else(|| panic!("no a=range:npt=0-<end> in\n{sdp}"))
        .trim()
        .parse()
        .expect("npt end");
    let recorded = (rec.last_ms - rec.first_ms) as f64 / 1000.0;
    assert!(
        (end - recorded).abs() < 0.01,
        "a=range end {end} of {recorded} s"
    );
    drop(c);

    // ffmpeg (both tracks, TCP) and GStreamer (video) at once.
    let ffmpeg = spawn_ffmpeg_decode(
        &url5,
        &["-rtsp_transport", "tcp"],
        &["-map", "0", "-t", "3"],
        Duration::from_secs(40),
    );
    let gst = gst_decode_h264(&url5, "tcp", 50, Duration::from_secs(40));
    let ff = ffmpeg.join().unwrap();
    ff.assert_plays("ffmpeg from t0+5s", 70, 80);
    // identity passes 50 decoded frames then EOS; the decoder then drains the frames it
    // held back for B-frame reordering (up to 3 with this fixture) after them.
    assert!(
        (50..=53).contains(&gst.frames),
        "GStreamer decoded {} frames:\n{}",
        gst.frames,
        gst.output
    );
    assert!(
        gst.errors.is_empty(),
        "GStreamer errors while playing:\n{}",
        gst.errors.join("\n")
    );

    // The project's client: from t0 with `Range: npt=5`, and from t0+5 s without Range.
    runtime().block_on(async {
        let url0 = playback_url(&node, CAM, rec.first_ms, None);
        let mut opts = PlayOptions::new(ClientTransport::Tcp);
        opts.play = PlayRequest::new().npt(5.0);
        let mut a = play(&url0, opts).await.expect("play from t0, npt=5");
        let npt = a
            .answer()
            .npt_start()
            .expect("Range npt in the PLAY answer");
        assert!(
            npt <= 5.0 && npt > 5.0 - GOP_MS as f64 / 1000.0,
            "PLAY npt=5 starts at npt {npt}: not the keyframe at or before 5 s"
        );
        assert!(
            (a.answer().npt_end().expect("npt end") - recorded).abs() < 0.01,
            "Range end of the PLAY answer: {:?}",
            a.answer().range
        );
        let mut cont = Continuity::new(&a);
        let first_a = assert_starts_on_keyframe(&mut a, &mut cont, "npt=5").await;
        // The audio track starts where its RTP-Info says too.
        let audio = 1 - video_track(&a);
        first_of_range(&mut a, audio, &mut cont, "npt=5 audio").await;

        let mut b = play(&url5, PlayOptions::new(ClientTransport::Tcp))
            .await
            .expect("play from t0+5s");
        assert_eq!(
            b.answer().npt_start(),
            Some(0.0),
            "start of the URL's range: {:?}",
            b.answer().range
        );
        let mut cont_b = Continuity::new(&b);
        let first = next(&mut b, "start=t0+5s").await;
        assert_eq!(
            first.track,
            video_track(&b),
            "the very first packet is video"
        );
        let v = video_track(&b);
        let info = b.rtp_info_of(v).expect("RTP-Info of video").clone();
        assert_eq!(
            Some(first.header.sequence),
            info.seq,
            "first seq vs RTP-Info"
        );
        assert_eq!(
            Some(first.header.timestamp),
            info.rtptime,
            "first timestamp vs RTP-Info"
        );
        cont_b.see(&first);
        assert!(frame_is_keyframe(&mut b, &first, &mut cont_b, "t0+5s").await);
        assert_eq!(
            first.payload, first_a.payload,
            "start=t0+5s and npt=5 begin with different keyframes"
        );
        // Play a second of media: continuous, one SSRC per track.
        play_for(&mut b, v, first.header.timestamp, 1.0, &mut cont_b, "t0+5s").await;
        cont_b.assert_continuous("start=t0+5s");
        cont.assert_continuous("npt=5");
    });
}

/// ffmpeg's seek (`-ss`: PAUSE, then PLAY with `Range: npt=8-`) decodes with zero errors.
/// Without the seek the server would pace 8 s of media before reaching the output range,
/// so the run time shows that the server jumped.
#[test]
fn ffmpeg_seek_decodes_cleanly() {
    let rec = recording();
    let node = playback_node(rec);
    let url = playback_url(&node, CAM, rec.first_ms, None);
    let run = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp", "-ss", "8"],
        &["-map", "0", "-t", "3"],
        Duration::from_secs(40),
    );
    run.assert_plays("ffmpeg -ss 8", 70, 80);
    assert!(
        run.elapsed < Duration::from_secs(8),
        "ffmpeg -ss 8 -t 3 took {:?}: the server did not seek",
        run.elapsed
    );
}

/// The project's client: a `Range: clock=` seek while playing, Scale 2 (twice the frames
/// per wall second, media-time spacing kept in the timestamps), Speed echoed, Scale 4
/// (keyframes only). Across all of it the session's RTP stays one continuous stream.
#[test]
fn clock_seek_and_scale_with_own_client() {
    let rec = recording();
    let node = playback_node(rec);
    let url = playback_url(&node, CAM, rec.first_ms, None);
    runtime().block_on(async {
        let mut p = play(&url, PlayOptions::new(ClientTransport::Tcp))
            .await
            .expect("play");
        let v = video_track(&p);
        let audio = 1 - v;
        let codec = p.tracks()[v].codec;
        let mut cont = Continuity::new(&p);
        let first = assert_starts_on_keyframe(&mut p, &mut cont, "start").await;
        play_for(&mut p, v, first.header.timestamp, 0.5, &mut cont, "start").await;

        // clock= seek while playing: absolute time t0 + 4.5 s → the keyframe of t0 + 4 s.
        let answer = p
            .play(PlayRequest::new().clock(rec.first_ms + 4_500))
            .await
            .expect("PLAY Range: clock=")
            .clone();
        // A clock request is answered in clock times: the keyframe at or before t0 + 4.5 s.
        let at = answer.clock_start().expect("a clock= Range in the answer");
        let want = rec.first_ms + 4_500;
        assert!(
            at <= want && at > want - GOP_MS,
            "clock seek to t0+4.5s answered {:?}",
            answer.range
        );
        let k = assert_starts_on_keyframe(&mut p, &mut cont, "clock seek").await;
        play_for(&mut p, v, k.header.timestamp, 0.5, &mut cont, "clock seek").await;

        // Scale 2 from npt 2: 10 s of media in 5 s of wall time.
        let answer = p
            .play(PlayRequest::new().npt(2.0).scale(2.0))
            .await
            .expect("PLAY Scale: 2")
            .clone();
        assert_eq!(answer.scale, Some(2.0), "Scale not echoed");
        let k = assert_starts_on_keyframe(&mut p, &mut cont, "scale 2").await;
        let (from, to) = (
            k.at + Duration::from_millis(250),
            k.at + Duration::from_millis(5_250),
        );
        let (mut frames, mut ts_first, mut ts_last) = (0u32, None, 0u32);
        loop {
            let pkt = next(&mut p, "scale 2").await;
            cont.see(&pkt);
            if pkt.at >= to {
                break;
            }
            if pkt.track == v && pkt.at >= from && pkt.header.marker {
                frames += 1;
                ts_first.get_or_insert(pkt.header.timestamp);
                ts_last = pkt.header.timestamp;
            }
        }
        let fps = f64::from(frames) / 5.0;
        assert!(
            (2.0 * FPS * 0.9..=2.0 * FPS * 1.1).contains(&fps),
            "Scale 2 delivered {fps:.1} frames per second, want {:.0} ± 10 %",
            2.0 * FPS
        );
        let media = f64::from(ts_last.wrapping_sub(ts_first.unwrap())) / f64::from(CLOCK);
        assert!(
            (9.0..=11.0).contains(&media),
            "Scale 2: timestamps cover {media:.2} s of media in 5 s (media spacing kept)"
        );

        // Speed is echoed as Speed.
        let answer = p
            .play(PlayRequest::new().npt(2.0).speed(2.0))
            .await
            .expect("PLAY Speed: 2")
            .clone();
        assert_eq!((answer.speed, answer.scale), (Some(2.0), None));
        assert_starts_on_keyframe(&mut p, &mut cont, "speed 2").await;

        // Scale 4: above keyframes_only_above_scale (2.0), only keyframes, no audio.
        let answer = p
            .play(PlayRequest::new().npt(2.0).scale(4.0))
            .await
            .expect("PLAY Scale: 4")
            .clone();
        assert_eq!(answer.scale, Some(4.0), "Scale not echoed");
        let audio_from = p.rtp_info_of(audio).and_then(|i| i.seq).expect("audio seq");
        let k = assert_starts_on_keyframe(&mut p, &mut cont, "scale 4").await;
        let to = k.at + Duration::from_secs(3);
        // Frames are runs of video packets with one timestamp; each must hold a keyframe
        // (its first NAL may be an SEI, so any packet of the run may start it).
        let (mut keyframes, mut frame_ts, mut frame_key) = (0u32, k.header.timestamp, true);
        loop {
            let pkt = next(&mut p, "scale 4").await;
            cont.see(&pkt);
            if pkt.at >= to {
                break;
            }
            if pkt.track == audio {
                assert!(
                    !seq_at_or_after(pkt.header.sequence, audio_from),
                    "Scale 4 sent audio"
                );
                continue;
            }
            if pkt.header.timestamp != frame_ts {
                assert!(frame_key, "Scale 4 sent a frame that is not a keyframe");
                keyframes += 1;
                let step = pkt.header.timestamp.wrapping_sub(frame_ts);
                assert!(
                    (CLOCK * 9 / 10..=CLOCK * 11 / 10).contains(&step),
                    "keyframes {step} ticks apart, want one GOP (1 s)"
                );
                frame_ts = pkt.header.timestamp;
                frame_key = false;
            }
            frame_key |= starts_keyframe(codec, &pkt.payload);
        }
        // 4 keyframes (4 s of media) per wall second: the first at 0 s, then 11 more
        // within the 3 s window (± 1 for timing at either end).
        assert!(
            (10..=12).contains(&keyframes),
            "Scale 4 sent {} keyframes in 3 s, want 12",
            keyframes + 1
        );
        cont.assert_continuous("seeks and scales");
    });
}

/// PAUSE, then PLAY without Range resumes where it paused: the sequence continues with no
/// gap, the timestamp continues one frame on (not by the wall time paused), same SSRC.
/// Packets the server sent before the pause may still arrive after the PAUSE answer (or,
/// over TCP, after the next PLAY answer); RTP-Info's seq tells them from the resumed range.
fn pause_and_resume(transport: ClientTransport) {
    let rec = recording();
    let node = playback_node(rec);
    let url = playback_url(&node, CAM, rec.first_ms + 2_000, None);
    runtime().block_on(async {
        let mut p = play(&url, PlayOptions::new(transport)).await.expect("play");
        let v = video_track(&p);
        let tracks = p.tracks().len();
        let mut cont = Continuity::new(&p);
        let first = assert_starts_on_keyframe(&mut p, &mut cont, "start").await;
        let ssrcs: Vec<Option<u32>> = {
            play_for(
                &mut p,
                v,
                first.header.timestamp,
                1.3,
                &mut cont,
                "before pause",
            )
            .await;
            cont.tracks.iter().map(|t| t.ssrc).collect()
        };
        // Pause mid-GOP, for a second of wall time, then resume.
        p.pause().await.expect("PAUSE");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answer = p.play(PlayRequest::new()).await.expect("resume").clone();
        assert!(answer.range.is_some(), "resume answer without Range");
        let info: Vec<_> = (0..tracks)
            .map(|t| p.rtp_info_of(t).expect("RTP-Info per track").clone())
            .collect();
        // The packets before the pause, up to the first of the resumed range per track.
        let mut max_ts_before = cont.tracks[v].highest_timestamp.expect("video before");
        let mut resumed = vec![false; tracks];
        while resumed.iter().any(|r| !r) {
            let pkt = next(&mut p, "resume").await;
            cont.see(&pkt);
            let t = pkt.track;
            let seq = info[t].seq.expect("RTP-Info seq");
            if !seq_at_or_after(pkt.header.sequence, seq) {
                if t == v && pkt.header.timestamp.wrapping_sub(max_ts_before) < 0x8000_0000 {
                    max_ts_before = pkt.header.timestamp;
                }
                continue;
            }
            if std::mem::replace(&mut resumed[t], true) {
                continue;
            }
            assert_eq!(
                pkt.header.sequence, seq,
                "track {t}: first seq after resume"
            );
            assert_eq!(
                Some(pkt.header.timestamp),
                info[t].rtptime,
                "track {t}: first timestamp after resume vs RTP-Info"
            );
            assert_eq!(Some(pkt.header.ssrc), ssrcs[t], "track {t}: SSRC changed");
        }
        // No packet lost across the pause (sequence numbers run on without a gap up to
        // RTP-Info's seq), and the media clock did not jump by the second paused.
        for (t, track) in cont.tracks.iter().enumerate() {
            assert_eq!(
                track.seq.lost(),
                0,
                "track {t}: packets lost across the pause"
            );
        }
        let resumed_ts = info[v].rtptime.expect("rtptime");
        let step = resumed_ts.wrapping_sub(max_ts_before) as i32;
        assert!(
            step.unsigned_abs() < CLOCK / 5,
            "the timestamp moved {step} ticks across a 1 s pause: it should continue \
             with the media, not the wall clock"
        );
        let mut ts = play_for(&mut p, v, resumed_ts, 0.5, &mut cont, "after resume")
            .await
            .header
            .timestamp;
        // A few quick pauses and resumes mid-GOP: still one continuous stream.
        for i in 0..5 {
            p.pause().await.expect("PAUSE");
            p.play(PlayRequest::new()).await.expect("resume");
            ts = play_for(
                &mut p,
                v,
                ts,
                0.1 + 0.07 * f64::from(i),
                &mut cont,
                "cycles",
            )
            .await
            .header
            .timestamp;
        }
        cont.assert_continuous("pause and resume");
    });
}

#[test]
fn pause_then_play_without_range_resumes_tcp() {
    pause_and_resume(ClientTransport::Tcp);
}

#[test]
fn pause_then_play_without_range_resumes_udp() {
    pause_and_resume(ClientTransport::Udp);
}

/// `&end=` ends the stream at that time with RTCP BYE, and the session ends.
#[test]
fn end_of_range_ends_stream_with_bye() {
    let rec = recording();
    let node = playback_node(rec);
    let start = rec.first_ms + 3_000;
    let url = playback_url(&node, CAM, start, Some(start + 3_000));
    runtime().block_on(async {
        for transport in [ClientTransport::Tcp, ClientTransport::Udp] {
            let mut p = play(&url, PlayOptions::new(transport)).await.expect("play");
            assert_eq!(p.answer().npt_end(), Some(3.0), "{:?}", p.answer().range);
            let v = video_track(&p);
            let mut cont = Continuity::new(&p);
            let first = assert_starts_on_keyframe(&mut p, &mut cont, "ranged").await;
            let mut last_ts = first.header.timestamp;
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let got = tokio::time::timeout_at(deadline.into(), p.next_packet())
                    .await
                    .expect("the stream to end within 10 s")
                    .expect("no error");
                match got {
                    None => break,
                    Some(pkt) => {
                        cont.see(&pkt);
                        if pkt.track == v {
                            last_ts = pkt.header.timestamp;
                        }
                    }
                }
            }
            assert!(p.rtcp_seen(v).1, "{transport:?}: no RTCP BYE at the end");
            let media = f64::from(last_ts.wrapping_sub(first.header.timestamp)) / f64::from(CLOCK);
            assert!(
                (2.5..3.05).contains(&media),
                "{transport:?}: {media:.2} s of media for a 3 s range"
            );
            cont.assert_continuous("ranged");
        }
    });
    poll_until(Duration::from_secs(5), "the sessions to end", || {
        node.api_json("/api/sessions")
            .as_array()?
            .is_empty()
            .then_some(())
    });
}

// ---------------------------------------------------------------------------------------
// Crash, shared root, cache

/// `kill -9` while recording the demo camera, restart: every complete segment is still
/// there and plays with zero errors, the index covers the recorded time up to the crash
/// (at most the segment being written is lost), and the restarted node records again.
#[test]
fn kill_9_during_recording_keeps_earlier_segments() {
    let root = tempfile::tempdir().unwrap();
    let mut node = NodeBuilder::new()
        .extra(DEMO_CAMERA)
        .extra(&storage(root.path(), 1.0))
        .start();
    poll_until(Duration::from_secs(30), "5 recorded segments", || {
        (segment_files(root.path(), "demo").len() >= 5).then_some(())
    });
    let killed_at = now_ms();
    node.kill();
    let before = segment_files(root.path(), "demo");
    let tmp_before = tmp_files(root.path(), "demo");
    node.restart();
    // The restarted node takes its lease over, clears the dead writer's temp file and
    // records again.
    poll_until(
        Duration::from_secs(20),
        "recording after the restart",
        || {
            let after = segment_files(root.path(), "demo");
            after.iter().any(|s| s.start_ms > killed_at).then_some(())
        },
    );
    let leftovers: Vec<_> = tmp_files(root.path(), "demo")
        .into_iter()
        .filter(|t| tmp_before.contains(t))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temp files of the killed writer: {leftovers:?}"
    );
    let after = segment_files(root.path(), "demo");
    for s in &before {
        assert!(
            after.contains(s),
            "segment {} lost after the restart",
            s.name
        );
    }
    let pre_end = before.last().unwrap().end_ms;
    assert!(
        pre_end <= killed_at && killed_at - pre_end <= 3_500,
        "the last complete segment ends {} ms before the kill: more than the open segment lost",
        killed_at - pre_end
    );
    // No segment claims the time of the crash: the pre-crash ones end before it, the
    // restarted node's start after it.
    assert!(
        after
            .iter()
            .all(|s| s.end_ms <= killed_at || s.start_ms > killed_at),
        "a segment spans the kill at {killed_at}: {after:?}"
    );
    // The index as the API shows it covers the pre-crash recording (a gap shorter than
    // the API's 1.5 s tolerance after a quick restart is merged into one range).
    let view = recordings(&node, "demo").expect("recordings after restart");
    let ranges = view["ranges"].as_array().unwrap();
    assert_eq!(
        ranges[0]["start_ms"].as_i64(),
        Some(before[0].start_ms),
        "{view}"
    );
    assert!(ranges[0]["end_ms"].as_i64() >= Some(pre_end), "{view}");
    let listed = view["segments"].as_u64().unwrap() as usize;
    assert!(
        listed >= after.len(),
        "the API lists {listed} segments, the directory had {}: {view}",
        after.len()
    );
    // The earlier segments play with zero errors (4 s of them, ended by the range's BYE).
    let start = before[0].start_ms;
    let url = playback_url(&node, "demo", start, Some(start + 4_000));
    let run = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(30),
    );
    run.assert_plays("ffmpeg of pre-crash segments", 95, 101);
}

/// Two nodes share one root: A records what ffmpeg publishes, B plays it back while A is
/// still recording (crossing segments A writes after B started), with zero errors.
#[test]
fn two_nodes_share_one_root() {
    let root = tempfile::tempdir().unwrap();
    let a = NodeBuilder::new().extra(&storage(root.path(), 1.0)).start();
    let b = NodeBuilder::new().extra(&storage(root.path(), 1.0)).start();
    // Looped, so A is still recording when B has played.
    let _publisher = spawn_background(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-v", "error", "-re"])
            .args(["-stream_loop", "-1", "-i"])
            .arg(fixture("h264_aac.mp4"))
            .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp"])
            .arg(a.url("live/shared")),
    );
    // B sees A's segments through the shared root.
    let first_ms = poll_until(Duration::from_secs(30), "B to list 3 segments", || {
        let v = recordings(&b, "shared")?;
        (v["segments"].as_u64()? >= 3).then(|| v["ranges"][0]["start_ms"].as_i64())?
    });
    let url = playback_url(&b, "shared", first_ms, None);
    let run = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-map", "0", "-t", "5"],
        Duration::from_secs(40),
    );
    run.assert_plays("B playing A's recording", 120, 130);
    let a_status = record_status(&a, "shared").expect("A records the camera");
    assert_eq!(a_status["state"], "recording", "{a_status}");
    assert!(
        record_status(&b, "shared").is_none(),
        "B must not record a camera it does not ingest"
    );
    assert!(stat(&cache_stats(&b), "loads") >= 5, "B read the segments");
    assert_eq!(stat(&cache_stats(&a), "loads"), 0, "A served no playback");
}

/// The segment a playback began at (its DESCRIBE) is moved to the cache's protected start
/// list (`[cache] start_share`), the segments read ahead after it are not; a second
/// playback from that moment opens from memory; with `start_share = 0` nothing is kept apart.
#[test]
fn the_segment_a_playback_began_at_is_kept_in_the_start_list() {
    let rec = recording();
    let with_share = |share: f64| {
        let extra = format!(
            "{}\n[cache]\nbudget_mb = 8\nstart_share = {share}\n",
            storage(rec.root.path(), 2.0)
        );
        NodeBuilder::new().extra(&extra).start()
    };
    let describe = |node: &Node| {
        let mut c = RtspConn::connect(node.rtsp);
        let url = playback_url(node, CAM, rec.first_ms + 4_050, None);
        let r = c.request("DESCRIBE", &url, &[("Accept", "application/sdp")], None);
        assert_eq!(r.status.0, 200, "DESCRIBE: {}", r.reason);
    };
    let node = with_share(0.5);
    let s = cache_stats(&node);
    assert_eq!(stat(&s, "start_limit_bytes"), 4 << 20, "{s}");
    assert_eq!(stat(&s, "start_bytes"), 0, "{s}");
    describe(&node);
    let s = settled_cache_stats(&node);
    let start = stat(&s, "start_bytes");
    assert!(start > 0, "the opened segment is protected: {s}");
    assert_eq!(start, stat(&s, "bytes"), "it is all the cache holds: {s}");
    // Playing from that moment opens it from memory and reads the next segments ahead:
    // those are not starts.
    let url = playback_url(&node, CAM, rec.first_ms + 4_050, None);
    runtime().block_on(async {
        let p = play_from_a_keyframe(&url, "start list").await;
        p.teardown().await.expect("teardown");
    });
    let s = settled_cache_stats(&node);
    assert_eq!((stat(&s, "opens"), stat(&s, "opens_cached")), (2, 1), "{s}");
    assert!(stat(&s, "prefetches") > 0, "read-ahead ran: {s}");
    assert_eq!(
        stat(&s, "start_bytes"),
        start,
        "read-ahead is not protected: {s}"
    );
    assert!(stat(&s, "bytes") > start, "{s}");

    let plain = with_share(0.0);
    describe(&plain);
    let s = settled_cache_stats(&plain);
    assert_eq!(stat(&s, "start_bytes"), 0, "{s}");
    assert!(stat(&s, "bytes") > 0, "{s}");
}

/// 20 clients of one camera at nearby moments at once read each segment from storage once
/// (single flight), whatever the interleaving. First 20 DESCRIBEs of one segment sent at the
/// same instant (raw connections, all requests written before any answer is read): one
/// storage read. Then 20 sessions of the project's client play 3 s each from nearby
/// moments: every segment they touch (and the cache reads ahead) is read once.
#[test]
fn twenty_concurrent_playbacks_read_each_segment_once() {
    let rec = recording();
    let node = playback_node(rec);
    let describe_at = |t: i64, cseq: u32| {
        format!(
            "DESCRIBE {} RTSP/1.0\r\nCSeq: {cseq}\r\nAccept: application/sdp\r\n\r\n",
            playback_url(&node, CAM, t, None)
        )
    };
    let mut conns: Vec<RtspConn> = (0..20).map(|_| RtspConn::connect(node.rtsp)).collect();
    let burst = rec.first_ms + 4_050;
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(describe_at(burst + i as i64 * 90, 1).as_bytes())
            .expect("send DESCRIBE");
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let r = c.response().expect("answer").expect("not closed");
        assert_eq!(r.status.0, 200, "DESCRIBE {i}: {}", r.reason);
    }
    drop(conns);
    let s = cache_stats(&node);
    eprintln!("cache after 20 simultaneous DESCRIBEs: {s}");
    assert_eq!(stat(&s, "loads"), 1, "20 DESCRIBEs of one segment: {s}");
    assert_eq!(stat(&s, "hits") + stat(&s, "misses"), 20, "{s}");
    assert_eq!(stat(&s, "misses") - stat(&s, "coalesced"), 1, "{s}");
    // Playback opens: 20, and the first of them found its segment not yet read.
    assert_eq!(stat(&s, "opens"), 20, "{s}");
    let cached = stat(&s, "opens_cached");
    assert!(cached < 20, "the first open read its segment: {s}");
    // One more open of that moment, the segment resident now: a cached open.
    let mut c = RtspConn::connect(node.rtsp);
    c.send(describe_at(burst, 1).as_bytes())
        .expect("send DESCRIBE");
    let r = c.response().expect("answer").expect("not closed");
    assert_eq!(r.status.0, 200, "DESCRIBE: {}", r.reason);
    let s = cache_stats(&node);
    assert_eq!(stat(&s, "opens"), 21, "{s}");
    assert_eq!(stat(&s, "opens_cached"), cached + 1, "{s}");

    let base = rec.first_ms + 10_050;
    let urls: Vec<String> = (0..20)
        .map(|i| playback_url(&node, CAM, base + i * 90, None))
        .collect();
    runtime().block_on(async {
        let sessions: Vec<_> = urls
            .into_iter()
            .map(|url| {
                tokio::spawn(async move {
                    let mut p = play(&url, PlayOptions::new(ClientTransport::Tcp))
                        .await
                        .expect("play");
                    let v = video_track(&p);
                    let mut cont = Continuity::new(&p);
                    let first = assert_starts_on_keyframe(&mut p, &mut cont, "concurrent").await;
                    play_for(
                        &mut p,
                        v,
                        first.header.timestamp,
                        3.0,
                        &mut cont,
                        "concurrent",
                    )
                    .await;
                    cont.assert_continuous("concurrent");
                    p.teardown().await.expect("teardown");
                })
            })
            .collect();
        for s in sessions {
            s.await.expect("session task");
        }
    });
    // Loads still in flight (read-ahead) finish quickly; then every read is resident.
    let stats = settled_cache_stats(&node);
    let loads = stat(&stats, "loads");
    eprintln!("cache after 20 concurrent sessions: {stats}");
    // One open per session: its DESCRIBE. The SETUP after it reads the same segment but
    // is not a second (cached) open, which would make every other open look like a hit.
    assert_eq!(stat(&stats, "opens"), 41, "{stats}");
    assert_eq!(stat(&stats, "load_errors"), 0, "{stats}");
    assert_eq!(stat(&stats, "evictions"), 0, "{stats}");
    assert_eq!(
        loads,
        stat(&stats, "entries"),
        "a segment was read from storage more than once: {stats}"
    );
    // The burst's segment, then those of t0+10 s .. ~t0+15 s (2 s each) and up to two
    // read ahead of the last.
    let touched = 1 + rec
        .segments
        .iter()
        .filter(|s| s.end_ms > base && s.start_ms < base + 1_800 + 3_000)
        .count() as u64;
    assert!(
        (touched..=touched + 2).contains(&loads),
        "{loads} storage reads for {touched} segments played (+ up to 2 read ahead): {stats}"
    );
    // Every lookup that led a load is a miss that did not join one in flight.
    assert_eq!(
        stat(&stats, "misses") - stat(&stats, "coalesced"),
        loads - stat(&stats, "prefetches"),
        "{stats}"
    );
    assert!(
        stat(&stats, "hits") >= 40,
        "the sessions' lookups were not served from memory: {stats}"
    );
}

// ---------------------------------------------------------------------------------------
// Full disk

/// A tmpfs mounted for the test, unmounted on drop (also when the test fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Busy (a process still holds a file): detach it now, freed when released.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Fill `path` with zeros until the file system is full (or `limit` bytes are written).
fn fill(path: &Path, limit: u64) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("filler file");
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    while written < limit {
        let n = (limit - written).min(chunk.len() as u64) as usize;
        match f.write(&chunk[..n]) {
            Ok(0) | Err(_) => break,
            Ok(n) => written += n as u64,
        }
    }
    let _ = f.sync_all();
    written
}

/// The storage root fills up: recording stops with the error in the API (state "error",
/// "disk full") and the metric, while a live viewer of the same camera keeps receiving
/// every packet; freeing space resumes recording by itself.
#[test]
fn full_disk_stops_recording_visibly_and_resumes() {
    let fs = match Tmpfs::mount("4m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED full_disk_stops_recording_visibly_and_resumes: cannot mount a tmpfs ({why})");
            return;
        }
    };
    let root = fs.path().join("root");
    std::fs::create_dir(&root).unwrap();
    // Leave ~300 KB: a few seconds of the demo camera (≈ 75 KB/s).
    let filler = fs.path().join("filler");
    fill(&filler, 4 * 1024 * 1024 - 300 * 1024);
    let node = NodeBuilder::new()
        .extra(DEMO_CAMERA)
        .extra(&storage(&root, 1.0))
        .start();
    node.wait_live("live/demo");
    let rt = runtime();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let viewer = {
        let url = node.url("live/demo");
        rt.spawn(async move {
            let p = play(&url, PlayOptions::new(ClientTransport::Tcp))
                .await
                .expect("live viewer");
            p.collect_stats(
                async {
                    let _ = stop_rx.await;
                },
                None,
            )
            .await
        })
    };
    let status = poll_until(
        Duration::from_secs(30),
        "a disk-full recording error",
        || record_status(&node, "demo").filter(|s| s["state"] == "error"),
    );
    let error = status["error"].as_str().unwrap_or_default().to_lowercase();
    assert!(error.contains("disk full"), "recording error: {status}");
    // Now take what is left too, so not even a small segment fits, and watch for longer
    // than the 2 s retry interval: recording stays stopped and says so.
    let topup = fs.path().join("topup");
    fill(&topup, u64::MAX);
    let files_full = segment_files(&root, "demo");
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        let s = record_status(&node, "demo").expect("status");
        assert_eq!(s["state"], "error", "state while the disk is full: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        segment_files(&root, "demo"),
        files_full,
        "segments appeared on a full disk"
    );
    assert!(
        labelled_metric(&node, "vigil_recording_errors_total", "camera=\"demo\"") > 0.0,
        "vigil_recording_errors_total"
    );
    let errors_before = status["errors"].as_u64().unwrap_or(0);
    assert!(errors_before > 0, "{status}");
    // Free space: recording resumes by itself, new segments appear.
    let freed_at = now_ms();
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(&topup).unwrap();
    poll_until(Duration::from_secs(20), "recording to resume", || {
        let s = record_status(&node, "demo")?;
        let new = segment_files(&root, "demo")
            .iter()
            .any(|f| f.start_ms >= freed_at);
        (s["state"] == "recording" && s["error"].is_null() && new).then_some(())
    });
    // The live viewer saw the whole episode without a gap.
    let _ = stop_tx.send(());
    let stats = rt.block_on(viewer).expect("viewer task");
    assert!(stats.error.is_none(), "live viewer: {:?}", stats.error);
    let t = &stats.tracks[0];
    assert!(t.packets > 500, "live viewer got {} packets", t.packets);
    assert_eq!(stats.lost(), 0, "live viewer lost packets");
    assert_eq!(t.ssrc_changes, 0);
    assert!(
        t.max_timestamp_step < CLOCK / 2,
        "live viewer saw a gap of {} ticks",
        t.max_timestamp_step
    );
    drop(node);
}

// ---------------------------------------------------------------------------------------
// Bad input, ctl

/// Unknown camera → 404; a start outside the recordings → 404 naming the recorded range;
/// a malformed time → 400; Scale 0 or negative → 456; the node serves on afterwards.
#[test]
fn bad_playback_requests_get_clear_errors() {
    let rec = recording();
    let node = playback_node(rec);
    let describe = |url: &str| {
        let mut c = RtspConn::connect(node.rtsp);
        c.request("DESCRIBE", url, &[("Accept", "application/sdp")], None)
    };
    let r = describe(&playback_url(&node, "nosuchcam", rec.first_ms, None));
    assert_eq!(r.status.0, 404, "unknown camera: {}", r.reason);
    for (what, t) in [
        ("before", rec.first_ms - 3_600_000),
        ("after", rec.last_ms + 60_000),
    ] {
        let r = describe(&playback_url(&node, CAM, t, None));
        assert_eq!(r.status.0, 404, "start {what} the recording: {}", r.reason);
        assert!(
            r.reason.contains("recorded from") && r.reason.contains(&rfc3339(rec.first_ms)),
            "start {what} the recording: the reason should name the recorded range: {}",
            r.reason
        );
    }
    for bad in ["yesterday", "2026-13-40T08:00:00Z", "2026-11-29T08:00:00"] {
        let r = describe(&node.url(&format!("playback/{CAM}?start={bad}")));
        assert_eq!(r.status.0, 400, "start={bad}: {}", r.reason);
    }
    let r = describe(&node.url(&format!("playback/{CAM}")));
    assert_eq!(r.status.0, 400, "no start: {}", r.reason);

    // Scale and Speed that are not positive: 456 on a set-up session, which then still plays.
    let url = playback_url(&node, CAM, rec.first_ms + 1_000, None);
    let mut c = RtspConn::connect(node.rtsp);
    let d = c.request("DESCRIBE", &url, &[("Accept", "application/sdp")], None);
    assert_eq!(d.status.0, 200);
    let base = d.headers.get("Content-Base").unwrap_or(&url).to_string();
    let sdp = String::from_utf8_lossy(&d.body).into_owned();
    for (i, control) in sdp
        .lines()
        .filter_map(|l| l.strip_prefix("a=control:"))
        .filter(|c| c.contains("trackID="))
        .enumerate()
    {
        let transport = format!("RTP/AVP/TCP;unicast;interleaved={}-{}", 2 * i, 2 * i + 1);
        let s = c.request("SETUP", control.trim(), &[("Transport", &transport)], None);
        assert_eq!(s.status.0, 200, "SETUP {control}: {}", s.reason);
    }
    for (header, value) in [
        ("Scale", "0"),
        ("Scale", "-1"),
        ("Scale", "-0.5"),
        ("Scale", "abc"),
        ("Scale", "1e400"),
        ("Speed", "0"),
        ("Speed", "-2"),
    ] {
        let r = c.request("PLAY", &base, &[(header, value)], None);
        assert!(
            matches!(r.status.0, 456 | 400),
            "{header}: {value} answered {} {}",
            r.status.0,
            r.reason
        );
    }
    let r = c.request("PLAY", &base, &[("Range", "npt=abc-")], None);
    assert_eq!(r.status.0, 457, "bad Range: {}", r.reason);
    let r = c.request("PLAY", &base, &[("Scale", "1")], None);
    assert_eq!(
        r.status.0, 200,
        "a good PLAY after the bad ones: {}",
        r.reason
    );
    drop(c);
    // The node still serves: a new playback plays.
    runtime().block_on(async {
        play_from_a_keyframe(&url, "after bad input").await;
    });
}

/// `vigil ctl recordings <camera>` prints the recorded range; `vigil ctl cache` the cache
/// counters and the resident range of the camera that was played.
#[test]
fn ctl_shows_recordings_and_cache() {
    let rec = recording();
    let node = playback_node(rec);
    let text = ctl(&node, &["recordings", CAM]);
    assert!(
        text.contains(&format!("{CAM}: {} segments", rec.segments.len())),
        "{text}"
    );
    assert!(
        text.contains("recorded")
            && text.contains(&rfc3339(rec.first_ms))
            && text.contains(&rfc3339(rec.last_ms)),
        "vigil ctl recordings:\n{text}"
    );
    // One DESCRIBE loads the first segment into the cache.
    let mut c = RtspConn::connect(node.rtsp);
    let d = c.request(
        "DESCRIBE",
        &playback_url(&node, CAM, rec.first_ms, None),
        &[("Accept", "application/sdp")],
        None,
    );
    assert_eq!(d.status.0, 200);
    let text = ctl(&node, &["cache"]);
    assert!(text.contains("storage reads 1"), "vigil ctl cache:\n{text}");
    assert!(
        text.contains("start list: ") && text.contains("playback opens 1, from memory 0"),
        "vigil ctl cache:\n{text}"
    );
    let seg = &rec.segments[0];
    assert!(
        text.contains(CAM) && text.contains(&rfc3339(seg.start_ms)),
        "vigil ctl cache lists the resident segment:\n{text}"
    );
    let json = ctl(&node, &["--json", "cache"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("ctl --json cache");
    assert_eq!(v["stats"]["loads"], 1, "{v}");
    // The opened segment is the start list's one entry: all the cache holds.
    assert_eq!(v["stats"]["start_bytes"], v["stats"]["bytes"], "{v}");
    assert!(v["stats"]["start_bytes"].as_u64() > Some(0), "{v}");
}
