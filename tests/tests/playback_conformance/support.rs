//! What the conformance tests share: the recording with a gap, nodes on it, and a raw RTSP
//! session over TCP that reads media up to RTCP BYE.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use vigil_proto::rtcp::{parse_compound, RtcpPacket};
use vigil_proto::rtsp::UtcTime;
use vigil_testkit::client::{Player, ReceivedPacket};
pub use vigil_tests::multi_thread_runtime as runtime;
use vigil_tests::{
    fixture, poll_until, rfc3339, spawn_background, wait_background, Incoming, Node, NodeBuilder,
    RtspConn,
};

pub const CAM: &str = "gaps";
/// Video clock rate and frame interval of the fixture.
pub const CLOCK: u32 = 90_000;
pub const FRAME_MS: i64 = 40;
pub const FRAME_TICKS: u32 = CLOCK / 25;

// ---------------------------------------------------------------------------------------
// The shared recording: two ranges with a gap

pub struct Recording {
    root: tempfile::TempDir,
    /// The two recorded ranges (UTC ms), from the recording node's API.
    pub a: (i64, i64),
    pub b: (i64, i64),
}

use vigil_storage::now_ms;

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

pub fn recording() -> &'static Recording {
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

pub fn node_on(rec: &Recording, extra: &str) -> Node {
    NodeBuilder::new()
        .extra(&format!("{}\n{extra}", storage(rec.root.path())))
        .start()
}

pub fn url(node: &Node, start_ms: i64, end_ms: Option<i64>) -> String {
    let mut u = node.url(&format!("playback/{CAM}?start={}", rfc3339(start_ms)));
    if let Some(e) = end_ms {
        u.push_str(&format!("&end={}", rfc3339(e)));
    }
    u
}

pub fn clock(ms: i64) -> String {
    UtcTime { unix_millis: ms }.to_clock_string()
}

pub fn secs(ms: i64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

// ---------------------------------------------------------------------------------------
// A raw RTSP session over TCP

/// DESCRIBE and SETUP every track over TCP (track N on channels 2N, 2N+1). Returns the SDP,
/// the aggregate URL and the video track.
pub fn setup(c: &mut RtspConn, url: &str) -> (String, String, usize) {
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
pub fn play_ok(c: &mut RtspConn, base: &str, headers: &[(&str, &str)]) -> (String, String) {
    let r = c.request("PLAY", base, headers, None);
    assert_eq!(r.status.0, 200, "PLAY {headers:?}: {}", r.reason);
    (
        r.headers.get("Range").unwrap_or_default().to_string(),
        r.headers.get("RTP-Info").unwrap_or_default().to_string(),
    )
}

/// The video frames a raw session received up to RTCP BYE on the video's RTCP channel.
#[derive(Debug, Default)]
pub struct Frames {
    /// RTP timestamps of the video frames (marker packets), in arrival order.
    pub ts: Vec<u32>,
    pub first_seq: Option<u16>,
    pub last_seq: u16,
    pub bye: bool,
}

impl Frames {
    /// Media time from the first frame to the latest timestamp (B-frames: not the last).
    fn span_ms(&self) -> i64 {
        let first = self.ts[0];
        let max = self
            .ts
            .iter()
            .map(|t| t.wrapping_sub(first))
            .max()
            .unwrap_or(0);
        i64::from(max) * 1000 / i64::from(CLOCK)
    }
}

pub fn read_to_bye(c: &mut RtspConn, video: usize) -> Frames {
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
pub fn assert_range(f: &Frames, ms: i64, what: &str) {
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

pub fn video_track(p: &Player) -> usize {
    p.tracks()
        .iter()
        .position(|t| t.codec.is_video())
        .expect("a video track")
}

/// The last packet (marker) of each of the next `n` video frames; the sequence must be
/// gapless.
pub async fn video_frames(p: &mut Player, v: usize, n: usize) -> Vec<ReceivedPacket> {
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
