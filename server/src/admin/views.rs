//! The JSON shapes of the admin API, shared by the server and `vigil ctl`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathView {
    pub path: String,
    /// "push", "demo", the pull URL with credentials removed, or "relay from <node>" on a
    /// cluster edge.
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
        let t = vigil_proto::rtsp::rfc3339;
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
    /// The node sending the session's media (this one unless it migrated).
    #[serde(default)]
    pub node: String,
    /// How often the session's media moved between nodes.
    #[serde(default)]
    pub moves: u32,
    /// Hosted here for the node that holds the viewer's RTSP connection.
    #[serde(default)]
    pub steered_by: Option<String>,
    /// A playback sent from this node: the recording time (ms since the epoch) of the
    /// latest frame sent, or where it starts before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_ms: Option<i64>,
    /// The viewer's reception as its RTCP tells (WebRTC viewers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<crate::node::Feedback>,
}

/// `GET /api/cluster/nodes`: the membership as this node sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterNodesView {
    /// The node that answered.
    pub self_id: String,
    pub scheduler: Option<String>,
    pub term: u64,
    pub gossip: GossipView,
    pub nodes: Vec<ClusterNodeView>,
    /// Node ids that more than one live node gossips under: a misconfiguration the cluster
    /// cannot resolve itself (it sees them as one node).
    #[serde(default)]
    pub id_conflicts: Vec<IdConflictView>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdConflictView {
    pub id: String,
    /// The gossip addresses claiming it.
    pub gossip: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GossipView {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    /// Datagrams dropped for a missing or wrong cluster-key HMAC (or stale timestamp).
    pub rejected: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterNodeView {
    pub id: String,
    pub gossip: String,
    pub rtsp: Option<String>,
    pub api: Option<String>,
    pub alive: bool,
    pub scheduler: bool,
    /// §A.1 Load (0–100) as this node's placement view has it (own estimates included).
    pub load: Option<f64>,
    /// Its parts: 100·w_cpu·C, 100·w_mem·M, 100·w_net·N.
    pub load_cpu: f64,
    pub load_mem: f64,
    pub load_net: f64,
    /// Placements this node has made to it that are held against its load until they lapse
    /// (`[cluster] reservation_ms`) or its report shows them.
    #[serde(default)]
    pub reserved: usize,
    /// §C.3 class from the §C.1 indicators.
    pub class: Option<String>,
    /// §C.2 load weight L = ω·θ of its last report's indicators (0–1).
    #[serde(default)]
    pub weight: Option<f64>,
    /// The §C.5 period (s) its last report was published on.
    #[serde(default)]
    pub period_s: Option<u32>,
    pub sessions: u32,
    pub streams: usize,
    pub cache_bytes: u64,
    /// Resident cache ranges in its report, over every camera.
    #[serde(default)]
    pub cached_ranges: usize,
    pub live: Vec<String>,
    /// Cameras it relays from their holder (a live edge).
    #[serde(default)]
    pub edges: Vec<String>,
    pub priority: Option<u32>,
    pub report_age_ms: Option<i64>,
    /// Being drained: it takes no placement.
    #[serde(default)]
    pub draining: bool,
}

/// `GET /api/cluster/scheduler`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SchedulerView {
    pub self_id: String,
    pub scheduler: Option<String>,
    pub term: u64,
    pub policy: String,
    /// Who decided: this increment places on the node that received the DESCRIBE, over its
    /// own gossip view (the fallback of issue 4 §4); the QUIC call to the scheduler is next.
    pub decided_by: String,
    /// Newest first; the last 50 placements made on this node.
    pub decisions: Vec<DecisionView>,
    /// Newest first; the last 50 §A.5 REM steps this node ran as the scheduler.
    #[serde(default)]
    pub migrations: Vec<crate::cluster::rem::RemRecord>,
    /// Newest first; the last 50 camera-move decisions (§B.3–§B.5, and the operator's)
    /// this node made as the scheduler, with their inputs and outcomes.
    #[serde(default)]
    pub camera_moves: Vec<crate::cluster::CameraMoveRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionView {
    pub at: String,
    pub kind: String,
    pub camera: String,
    pub time: String,
    pub node: Option<String>,
    pub redirected: bool,
    pub reason: String,
    /// "scheduler", "local fallback" or "local".
    #[serde(default)]
    pub via: String,
    #[serde(default)]
    pub decided_by: Option<String>,
    #[serde(default)]
    pub asked_by: Option<String>,
    /// A playback's expected bitrate (bits/s), what the decision added to the chosen
    /// node's estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vbr_bps: Option<f64>,
}

/// `GET /api/ingest/<camera>`: where a camera should push.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IngestView {
    pub camera: String,
    /// The chosen node's id.
    pub node: String,
    /// `rtsp://<node>/live/<camera>`.
    pub url: String,
    pub reason: String,
}

/// `GET /api/cluster/sessions`: every node's sessions, from the gossip reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterSessionsView {
    /// The node that answered.
    pub self_id: String,
    pub sessions: Vec<ClusterSessionView>,
    /// Nodes that have more sessions than their report lists (the list is capped).
    pub truncated: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterSessionView {
    pub node: String,
    pub id: String,
    pub path: String,
    pub kind: String,
    pub client: String,
    pub kbps: u64,
}
