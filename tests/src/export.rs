//! Helpers for the MP4 export and HLS tests: raw HTTP answers of the admin API, exports
//! through `vigil ctl export`, ffprobe/ffmpeg checks of a file, and a synthetic recording
//! written straight into a storage root (the demo clip looped, for long exports).

use crate::{ctl, rfc3339, run_with_timeout, Decoded, Node};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One HTTP answer, whatever its status.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET http://<node's API><path>` (with the admin token).
pub fn http_get(node: &Node, path: &str) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut resp = agent
        .get(format!("http://{}{path}", node.api))
        .header("Authorization", format!("Bearer {}", crate::ADMIN_TOKEN))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .unwrap_or_else(|e| panic!("GET {path}: body: {e}"));
    Answer {
        status,
        headers,
        body,
    }
}

/// The export query of `[start_ms, end_ms)`.
pub fn export_path(camera: &str, start_ms: i64, end_ms: i64, download: bool) -> String {
    format!(
        "/api/export/{camera}?start={}&end={}{}",
        rfc3339(start_ms),
        rfc3339(end_ms),
        if download { "&download=1" } else { "" }
    )
}

/// `vigil ctl export` of `[start_ms, end_ms)` into a file in the node's directory; also the
/// time of the keyframe it starts on, as ctl reports it.
pub fn ctl_export(
    node: &Node,
    camera: &str,
    start_ms: i64,
    end_ms: i64,
    fragmented: bool,
) -> (PathBuf, i64) {
    let out = node.dir.path().join(format!(
        "{camera}-{start_ms}-{}.mp4",
        if fragmented { "frag" } else { "plain" }
    ));
    let (s, e) = (rfc3339(start_ms), rfc3339(end_ms));
    let mut args = vec!["export", camera, "--start", &s, "--end", &e, "-o"];
    let o = out.to_string_lossy().into_owned();
    args.push(&o);
    if fragmented {
        args.push("--fragmented");
    }
    let said = ctl(node, &args);
    let started = said
        .rsplit("from the keyframe at ")
        .next()
        .and_then(|t| vigil_proto::rtsp::UtcTime::parse_rfc3339(t.trim()).ok())
        .unwrap_or_else(|| panic!("ctl export did not name its keyframe: {said}"))
        .unix_millis;
    (out, started)
}

/// What ffprobe says about a file.
#[derive(Debug)]
pub struct Probe {
    /// Container duration, seconds.
    pub duration: f64,
    /// Codec names, one per stream.
    pub codecs: Vec<String>,
    /// Presentation times of the video packets, sorted, seconds.
    pub video_pts: Vec<f64>,
}

impl Probe {
    /// The largest step between two consecutive video frames, and where it starts.
    pub fn largest_step(&self) -> (f64, f64) {
        self.video_pts
            .windows(2)
            .map(|w| (w[1] - w[0], w[0]))
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
    }
}

pub fn ffprobe(path: &Path) -> Probe {
    let out = run_with_timeout(
        Command::new("ffprobe")
            .args([
                "-v",
                "error",
                "-of",
                "json",
                "-show_format",
                "-show_streams",
            ])
            .args(["-show_entries", "packet=pts_time,stream_index"])
            .arg(path),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "ffprobe {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ffprobe JSON");
    let streams = v["streams"].as_array().cloned().unwrap_or_default();
    let video = streams
        .iter()
        .find(|s| s["codec_type"] == "video")
        .and_then(|s| s["index"].as_i64());
    let mut video_pts: Vec<f64> = v["packets"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter(|p| p["stream_index"].as_i64() == video)
                .filter_map(|p| p["pts_time"].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    video_pts.sort_by(f64::total_cmp);
    Probe {
        duration: v["format"]["duration"]
            .as_str()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0.0),
        codecs: streams
            .iter()
            .filter_map(|s| s["codec_name"].as_str().map(str::to_string))
            .collect(),
        video_pts,
    }
}

/// `ffmpeg -v error -i FILE -f null -`: frames decoded and everything it printed.
pub fn decode_file(path: &Path) -> Decoded {
    let start = Instant::now();
    let out = run_with_timeout(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-nostats", "-v", "error", "-i"])
            .arg(path)
            .args(["-f", "null", "-", "-progress", "pipe:1"]),
        Duration::from_secs(120),
    );
    Decoded {
        frames: crate::progress_frames(&String::from_utf8_lossy(&out.stdout)),
        out_time: None,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        warnings: String::new(),
        status: out.status,
        elapsed: start.elapsed(),
        // Not a network reader: nothing was counted.
        kernel_drops: crate::KernelDrops::default(),
    }
}

/// Writes `secs` of the demo clip, looped, as camera `camera` into the storage root (4 s
/// segments), recorded as if it had started at `start_ms`. Returns the recorded range.
pub fn synthetic_recording(root: &Path, camera: &str, start_ms: i64, secs: u64) -> (i64, i64) {
    vigil_testkit::media::write_recording(root, camera, start_ms, secs, Duration::from_secs(4))
        .expect("write the synthetic recording")
}
