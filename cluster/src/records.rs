//! The reported records every policy reads: a node's report as the scheduler keeps it
//! (`NodeView`: Load inputs, Bord, the streams it serves with their positions, its
//! resident cache ranges, §C.1 indicators) and a placement request. Plain serde types that
//! travel over gossip, below the cluster view that indexes them (`view`) and the formulas
//! over one node (`load`), so neither of those names the other's module for them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::knn::Indicators;

/// A node's id as the membership layer names it.
pub type NodeId = String;
/// A camera's id (`camera_id` in ALGORITHMS.md), the same key the cache and storage use.
pub type CameraId = String;

/// Gaps between resident segments shorter than this merge into one reported range.
pub const CACHE_GAP_MS: i64 = 1500;
/// Resident ranges a report keeps per camera (the newest), and cameras it keeps.
pub const MAX_RANGES_PER_CAMERA: usize = 16;
pub const MAX_CACHED_CAMERAS: usize = 256;

/// A node's resident cache ranges (`cache.resident(CACHE_GAP_MS)`) cut to what its report
/// carries: the newest [`MAX_RANGES_PER_CAMERA`] per camera, the first
/// [`MAX_CACHED_CAMERAS`] cameras. The node and the simulator report the same summary.
pub fn cached_summary(
    mut resident: BTreeMap<CameraId, Vec<(i64, i64)>>,
) -> BTreeMap<CameraId, Vec<(i64, i64)>> {
    for ranges in resident.values_mut() {
        let n = ranges.len();
        if n > MAX_RANGES_PER_CAMERA {
            ranges.drain(..n - MAX_RANGES_PER_CAMERA);
        }
    }
    while resident.len() > MAX_CACHED_CAMERAS {
        resident.pop_last();
    }
    resident
}

/// Where a served stream's bytes come from: §A.1 counts a storage-read stream twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamSource {
    /// The node's memory cache (`S_mem` in eq. 2).
    Cache,
    /// Central storage (`S_ipsan` in eq. 2): read in and sent out.
    Storage,
    /// A live viewer: relayed from the camera's hub (counted once, like a cached stream),
    /// and not a playback position: similarity (§A.3) and REM (§A.5) leave it out.
    Live,
}

/// One stream a node serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    pub camera: CameraId,
    /// Current playback position (ms, recording time): start + elapsed·scale (§A.3 choice).
    pub position_ms: i64,
    /// Current bitrate (bits/s); grows with Scale (§A.1).
    pub vbr_bps: f64,
    pub source: StreamSource,
    /// The session serving it (the node's own id), so that a REM decision can name the
    /// session to move.
    #[serde(default)]
    pub session: Option<String>,
}

/// What one node reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub id: NodeId,
    pub alive: bool,
    /// Bord: configured network bandwidth (bits/s), heterogeneous nodes allowed (§A.1).
    pub bord_bps: f64,
    /// C: measured CPU utilisation in [0, 1].
    pub cpu: f64,
    /// M: measured memory utilisation in [0, 1].
    pub mem: f64,
    pub streams: Vec<Stream>,
    /// Resident cache ranges (start_ms, end_ms) per camera, merged as the cache reports them.
    #[serde(default)]
    pub cached: BTreeMap<CameraId, Vec<(i64, i64)>>,
    #[serde(default)]
    pub indicators: Indicators,
    pub sessions: u32,
    pub max_sessions: u32,
    /// The scheduler's own estimate (§A.4 step 5, §A.5 step 6) that replaces the computed
    /// load until the node's next report. `None` in a fresh report.
    #[serde(default)]
    pub estimated_load: Option<f64>,
}

impl NodeView {
    /// Adds a stream it serves (a placement applied): one more session.
    pub fn push_stream(&mut self, s: Stream) {
        self.sessions = self.sessions.saturating_add(1);
        self.streams.push(s);
    }

    /// A node with nothing running; tests and simulators fill in the rest.
    pub fn new(id: impl Into<NodeId>, bord_bps: f64) -> Self {
        Self {
            id: id.into(),
            alive: true,
            bord_bps,
            cpu: 0.0,
            mem: 0.0,
            streams: Vec::new(),
            cached: BTreeMap::new(),
            indicators: Indicators::default(),
            sessions: 0,
            max_sessions: u32::MAX,
            estimated_load: None,
        }
    }
}

/// Playback or live: the same placement applies (a live stream's position is "now").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RequestKind {
    Playback,
    Live,
}

/// `Req(camera_id, T)` of §A.3 with the bitrate the stream is expected to need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub camera: CameraId,
    /// T: requested recording time (ms).
    pub time_ms: i64,
    /// Expected VBR (bits/s) at the requested Scale.
    pub vbr_bps: f64,
    pub kind: RequestKind,
}

impl Request {
    pub fn playback(camera: impl Into<CameraId>, time_ms: i64, vbr_bps: f64) -> Self {
        Self {
            camera: camera.into(),
            time_ms,
            vbr_bps,
            kind: RequestKind::Playback,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 ranges of one camera keep the newest 16; 300 cameras keep the first 256.
    #[test]
    fn the_cached_summary_keeps_the_newest_ranges_of_the_first_cameras() {
        let one: BTreeMap<CameraId, Vec<(i64, i64)>> = [(
            "c".to_string(),
            (0..20).map(|k| (k * 10, k * 10 + 5)).collect(),
        )]
        .into();
        let s = cached_summary(one);
        assert_eq!(s["c"].len(), 16);
        assert_eq!(s["c"][0], (40, 45));
        let many: BTreeMap<CameraId, Vec<(i64, i64)>> = (0..300)
            .map(|k| (format!("c{k:03}"), vec![(0, 1)]))
            .collect();
        let s = cached_summary(many);
        assert_eq!(s.len(), 256);
        assert_eq!(s.keys().last().map(String::as_str), Some("c255"));
    }
}
