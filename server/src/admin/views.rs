//! The JSON shapes of the admin API, shared by the server and `vigil ctl`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathView {
    pub path: String,
    /// "push", "demo" or the pull URL with credentials removed.
    pub source: String,
    pub live: bool,
    pub codecs: Vec<String>,
    pub bitrate_kbps: u64,
    pub readers: usize,
    pub packets_in: u64,
}

/// `GET /api/recordings/<camera>`: what is on disk, as ranges and the gaps between them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordingsView {
    pub camera: String,
    pub segments: usize,
    pub bytes: u64,
    pub ranges: Vec<TimeRange>,
    pub gaps: Vec<TimeRange>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimeRange {
    pub start: String,
    pub end: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub secs: f64,
}

impl TimeRange {
    pub fn new(start_ms: i64, end_ms: i64) -> TimeRange {
        let t = |ms| vigil_proto::rtsp::UtcTime { unix_millis: ms }.to_rfc3339();
        TimeRange {
            start: t(start_ms),
            end: t(end_ms),
            start_ms,
            end_ms,
            secs: (end_ms - start_ms) as f64 / 1000.0,
        }
    }
}

/// `GET /api/cache`: the playback cache's counters and what it holds per camera.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheView {
    pub stats: serde_json::Value,
    pub resident: std::collections::BTreeMap<String, Vec<TimeRange>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionView {
    pub id: String,
    pub path: String,
    pub kind: String,
    pub transport: String,
    pub client: String,
    pub bytes: u64,
    pub packets: u64,
    pub duration_secs: f64,
    pub bitrate_kbps: u64,
    /// Current sending rate (playback grows with Scale).
    #[serde(default)]
    pub current_kbps: u64,
}
