//! What a node gossips about itself (issue 4 §2): its §A.1 load inputs and §C.1 indicators,
//! Bord, the streams it serves with their playback positions, a compact summary of its cache,
//! the live cameras it holds and its RTSP URL. Published on the §C.5 adaptive period and at
//! once on a significant change (`publish` sends it).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use vigil_cluster::{Indicators, NodeView, Stream, StreamSource};

use super::{now_ms, Cluster};
use crate::node::{Node, SessionKindView};

/// Sessions listed in the report (the busiest first): with ~110 bytes of JSON each, at most
/// ~5.5 KB of the report's datagram budget; `sessions` still counts them all.
pub const MAX_SESSIONS_LISTED: usize = 50;
/// Bitrate assumed for a session that has not measured one yet.
pub const DEFAULT_VBR_BPS: f64 = 2e6;

/// The gossiped report (JSON under the `report` key).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub rtsp: String,
    pub api: String,
    /// The node's QUIC endpoint (cluster RPC), when it has a cluster certificate.
    #[serde(default)]
    pub rpc: Option<String>,
    pub priority: u32,
    pub started_ms: i64,
    pub bord_bps: f64,
    /// C and M of §A.1 (= θ_cpu and θ_mem of §C.1).
    pub cpu: f64,
    pub mem: f64,
    pub indicators: Indicators,
    pub sessions: u32,
    pub max_sessions: u32,
    /// The node's sessions, capped at [`MAX_SESSIONS_LISTED`] (for `/api/cluster/sessions`).
    #[serde(default)]
    pub session_list: Vec<SessionBrief>,
    pub streams: Vec<Stream>,
    #[serde(default)]
    pub cached: BTreeMap<String, Vec<(i64, i64)>>,
    pub cache_bytes: u64,
    /// Live cameras this node holds (live paths with a producer of this node's own).
    pub live: Vec<String>,
    /// Pull cameras this node holds asleep (§B.1).
    #[serde(default)]
    pub asleep: Vec<String>,
    /// Live cameras this node relays from their holder (an edge, issue 11 §3): never
    /// a source for another edge.
    #[serde(default)]
    pub edges: Vec<String>,
    /// The §C.5 period the node reports on (s).
    pub period_s: u32,
    pub at_ms: i64,
    /// The node is being drained: no placements (every view treats it as unavailable).
    #[serde(default)]
    pub draining: bool,
    /// Cameras this node's recorders write now (it holds their leases on the shared
    /// storage). When two sides' bindings meet after a partition, a camera stays with the
    /// side that recorded it through the cut (`bindings::merge`).
    #[serde(default)]
    pub recording: Vec<String>,
    /// §B.5 candidates: the `recent_m` most recently finished of this node's awake pull
    /// cameras with no viewer (wall-clock ms), for the scheduler's camera moves.
    #[serde(default)]
    pub movable: Vec<vigil_cluster::gateway::CameraUsage>,
    /// The node reads the recordings (`[storage] enabled`): a playback may be placed on it.
    /// A relay-only member (storage off) is left out of playback placements.
    #[serde(default = "plays_recordings_default")]
    pub plays_recordings: bool,
}

/// A report from a node older than the field: it played recordings as every node did.
fn plays_recordings_default() -> bool {
    true
}

/// One session as the report lists it: compact, no counters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionBrief {
    pub id: String,
    pub path: String,
    /// play, playback or record.
    pub kind: String,
    pub client: String,
    /// Current sending (or, for a publisher, receiving) rate.
    pub kbps: u64,
    /// A migrated session's media, sent here for the node holding its RTSP connection.
    #[serde(default)]
    pub hosted: bool,
    /// The node sending this session's media, when it migrated away from here.
    #[serde(default)]
    pub media_node: Option<String>,
    #[serde(default)]
    pub moves: u32,
}

/// The node's sessions for the report: busiest first, then by id; at most `cap`.
pub fn session_list(node: &Node, cap: usize) -> Vec<SessionBrief> {
    let mut v: Vec<SessionBrief> = node
        .sessions()
        .iter()
        .map(|s| SessionBrief {
            id: s.id.clone(),
            path: s.path.clone(),
            kind: format!("{:?}", s.kind).to_lowercase(),
            client: s.client.to_string(),
            kbps: super::session_rate(s) / 1000,
            hosted: s.steered_by().is_some(),
            media_node: s.media_node(),
            moves: s.moves.load(Ordering::Relaxed),
        })
        .collect();
    v.sort_by(|a, b| b.kbps.cmp(&a.kbps).then_with(|| a.id.cmp(&b.id)));
    v.truncate(cap);
    v
}

impl Report {
    pub fn node_view(&self, id: &str, alive: bool) -> NodeView {
        NodeView {
            id: id.to_string(),
            // A draining node is out of every placement and REM choice.
            alive: alive && !self.draining,
            bord_bps: self.bord_bps,
            cpu: self.cpu,
            mem: self.mem,
            streams: self.streams.clone(),
            cached: self.cached.clone(),
            indicators: self.indicators,
            sessions: self.sessions,
            max_sessions: self.max_sessions,
            estimated_load: None,
        }
    }
}

/// CPU (from /proc/stat deltas) and memory (MemAvailable) of the machine.
pub struct Sampler {
    last: Option<(u64, u64)>,
    pub cpu: f64,
}

impl Default for Sampler {
    fn default() -> Self {
        Self::new()
    }
}

impl Sampler {
    pub fn new() -> Self {
        let mut s = Sampler {
            last: None,
            cpu: 0.0,
        };
        s.sample();
        s
    }

    /// θ_cpu = 1 − Δidle/Δtotal over all CPUs since the previous sample (§C.1).
    pub fn sample(&mut self) -> f64 {
        if let Some(crate::procfs::CpuTimes { idle, total, .. }) = crate::procfs::CpuTimes::read() {
            if let Some((i0, t0)) = self.last {
                let dt = total.saturating_sub(t0);
                if dt > 0 {
                    self.cpu = (1.0 - idle.saturating_sub(i0) as f64 / dt as f64).clamp(0.0, 1.0);
                }
            }
            self.last = Some((idle, total));
        }
        self.cpu
    }
}

/// The streams a node serves, for the load model and similarity. Per camera, the stream
/// furthest ahead reads from storage (it loads the segments); one within T_max behind
/// another reads what that one loaded, from the cache (§A.1: storage-read streams count
/// twice).
pub fn streams(node: &Node, t_max_ms: i64) -> Vec<Stream> {
    let now = now_ms();
    let mut out: Vec<Stream> = Vec::new();
    for s in node.sessions() {
        if s.media_node().is_some() {
            // Migrated away: the node sending it reports it.
            continue;
        }
        let (camera, position_ms, vbr, source) = match s.kind {
            SessionKindView::Playback => {
                let Some(cam) = s.path.strip_prefix("playback/") else {
                    continue;
                };
                let pos = s.position_ms.load(Ordering::Relaxed);
                if pos == 0 {
                    // No position: set at SETUP to the start (so a session is listed before
                    // its first frame), this one has none to report.
                    continue;
                }
                (
                    cam.to_string(),
                    pos,
                    super::session_rate(&s) as f64,
                    StreamSource::Storage,
                )
            }
            SessionKindView::Play | SessionKindView::WebRtc => {
                let Some(cam) = s.path.strip_prefix("live/") else {
                    continue;
                };
                let rate = node
                    .path(&s.path)
                    .map_or(0, |p| p.stream.bitrate_bps.load(Ordering::Relaxed));
                (cam.to_string(), now, rate as f64, StreamSource::Live)
            }
            SessionKindView::Record => continue,
        };
        out.push(Stream {
            camera,
            position_ms,
            vbr_bps: if vbr > 0.0 { vbr } else { DEFAULT_VBR_BPS },
            source,
            session: Some(s.id.clone()),
        });
    }
    out.sort_by(|a, b| {
        a.camera
            .cmp(&b.camera)
            .then(b.position_ms.cmp(&a.position_ms))
    });
    for i in 1..out.len() {
        if out[i].source != StreamSource::Live
            && out[i - 1].source != StreamSource::Live
            && out[i].camera == out[i - 1].camera
            && out[i - 1].position_ms - out[i].position_ms <= t_max_ms
        {
            out[i].source = StreamSource::Cache;
        }
    }
    out
}

/// Builds this node's report now.
pub fn build(node: &Node, cluster: &Cluster, sampler: &mut Sampler, period_s: u32) -> Report {
    let cfg = &node.config;
    let streams = streams(node, cluster.policy_cfg.sched.t_max_ms);
    let bord = cfg.cluster.bandwidth_bps;
    let net: f64 = streams
        .iter()
        .map(|s| s.vbr_bps * vigil_cluster::load::stream_factor(s.source))
        .sum::<f64>()
        / bord;
    let sessions = node.session_count() as u32;
    let max_sessions = cfg.limits.max_sessions.min(u32::MAX as usize) as u32;
    let (cached, cache_bytes) = match &node.library {
        Some(lib) => (
            vigil_cluster::cached_summary(lib.cache.resident(vigil_cluster::CACHE_GAP_MS)),
            lib.cache.stats().bytes,
        ),
        None => (BTreeMap::new(), 0),
    };
    let paths = node.paths();
    let cameras = |relayed: bool| {
        paths
            .iter()
            .filter(|p| p.stream.is_live() && p.relay_from().is_some() == relayed)
            .filter_map(|p| p.name.strip_prefix("live/").map(str::to_string))
            .collect::<Vec<_>>()
    };
    let (live, edges) = (cameras(false), cameras(true));
    let asleep = paths
        .iter()
        .filter(|p| p.asleep.load(Ordering::Acquire))
        .filter_map(|p| p.name.strip_prefix("live/").map(str::to_string))
        .collect();
    let cpu = sampler.cpu;
    let mem = crate::procfs::mem_utilisation();
    Report {
        rtsp: cluster.rtsp_base.clone(),
        api: cluster.api.clone(),
        rpc: cluster.rpc_advertise.map(|a| a.to_string()),
        priority: cluster.priority,
        started_ms: cluster.started_ms,
        bord_bps: bord,
        cpu,
        mem,
        indicators: Indicators {
            cpu,
            mem,
            net: net.min(1.0),
            links: f64::from(sessions) / f64::from(max_sessions.max(1)),
        },
        sessions,
        max_sessions,
        session_list: session_list(node, MAX_SESSIONS_LISTED),
        streams,
        cached,
        cache_bytes,
        live,
        asleep,
        edges,
        period_s,
        at_ms: now_ms(),
        draining: cluster.draining.load(Ordering::Relaxed),
        recording: node.recordings.recording(),
        plays_recordings: node.library.is_some(),
        movable: cluster
            .movable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
    }
}
