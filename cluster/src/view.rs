//! The snapshot of the cluster every policy reads (ALGORITHMS.md §A.3 last paragraph: the
//! scheduler keeps per node `(node_id, Load, Bord)` and per playing camera
//! `(camera_id, node_id, [playback positions])`; §A.4 adds resident cache ranges for
//! cache-aware scheduling; §C.1 the indicators θ).
//!
//! The view travels over gossip later, so the reported data are plain serde types. The
//! indexes the scheduler needs to decide in microseconds (per-node load, camera → nodes with
//! their positions, camera → nodes caching it) are derived, never serialized, and rebuilt on
//! deserialization and on every node update.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::config::{KnnConfig, LoadWeights, NodeClass};
use crate::knn::{classify, load_weight, Indicators};
use crate::load::node_load;

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

/// Derived, never serialized: what makes a decision O(|B|) instead of O(streams).
#[derive(Debug, Clone, Default)]
struct Index {
    /// Effective Load per node: the estimate if one is set, else eq. 1 from the report.
    loads: Vec<f64>,
    by_id: HashMap<NodeId, usize>,
    /// camera → [(node index, current positions)] over alive and dead nodes alike.
    playing: HashMap<CameraId, Vec<(usize, Vec<i64>)>>,
    /// camera → the resident ranges of every node holding some, in node order.
    caching: HashMap<CameraId, Vec<CachedRanges>>,
    /// §C.3 class and §C.2 weight per node, with the config they were computed with.
    knn: Option<(KnnConfig, Vec<(NodeClass, f64)>)>,
}

/// One node's resident ranges of one camera, indexed for the cache-aware policy (issue 13):
/// sorted by start, with the longest range's length, so the ranges within `d` of a time T
/// are among those starting in (T − d − longest, T + d), found by two binary searches
/// instead of a scan of every range. A node's cache reports merged (disjoint, bounded)
/// ranges, so that window holds a few ranges whatever the camera's history.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedRanges {
    pub node: usize,
    ranges: Vec<(i64, i64)>,
    longest: i64,
}

impl CachedRanges {
    fn new(node: usize, ranges: &[(i64, i64)]) -> Self {
        let mut ranges = ranges.to_vec();
        ranges.sort_unstable();
        let longest = ranges
            .iter()
            .map(|&(a, b)| b.saturating_sub(a).max(0))
            .max()
            .unwrap_or(0);
        Self {
            node,
            ranges,
            longest,
        }
    }

    /// Every range whose distance to `t_ms` may be below `d_ms` (a superset: the caller
    /// measures each); every range nearer than `d_ms` is in it.
    pub fn near(&self, t_ms: i64, d_ms: i64) -> &[(i64, i64)] {
        let lo = t_ms.saturating_sub(d_ms).saturating_sub(self.longest);
        let hi = t_ms.saturating_add(d_ms);
        let a = self.ranges.partition_point(|r| r.0 <= lo);
        let b = self.ranges.partition_point(|r| r.0 < hi);
        &self.ranges[a..b.max(a)]
    }
}

/// The serialized form: the reports and the weights they were computed with.
#[derive(Serialize, Deserialize)]
struct ViewWire {
    weights: LoadWeights,
    nodes: Vec<NodeView>,
}

/// The cluster as the scheduler sees it. Node order is the order given (it is the
/// deterministic tie-break of every policy).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "ViewWire", into = "ViewWire")]
pub struct ClusterView {
    weights: LoadWeights,
    nodes: Vec<NodeView>,
    index: Index,
}

impl From<ViewWire> for ClusterView {
    fn from(w: ViewWire) -> Self {
        ClusterView::new(w.nodes, w.weights)
    }
}

impl From<ClusterView> for ViewWire {
    fn from(v: ClusterView) -> Self {
        ViewWire {
            weights: v.weights,
            nodes: v.nodes,
        }
    }
}

impl PartialEq for ClusterView {
    fn eq(&self, other: &Self) -> bool {
        self.weights == other.weights && self.nodes == other.nodes
    }
}

impl ClusterView {
    /// Builds the view and its indexes; Load uses `weights` (§A.1 eq. 1).
    pub fn new(nodes: Vec<NodeView>, weights: LoadWeights) -> Self {
        let mut v = Self {
            weights,
            nodes,
            index: Index::default(),
        };
        v.reindex();
        v
    }

    fn reindex(&mut self) {
        let knn = self.index.knn.take().map(|(c, _)| c);
        let mut idx = Index {
            loads: Vec::with_capacity(self.nodes.len()),
            ..Index::default()
        };
        for (i, n) in self.nodes.iter().enumerate() {
            idx.loads.push(effective_load(n, &self.weights));
            idx.by_id.insert(n.id.clone(), i);
            index_node(&mut idx, i, n);
        }
        self.index = idx;
        if let Some(c) = knn {
            self.classify_nodes(&c);
        }
    }

    /// Precomputes every node's §C.3 class and §C.2 weight L for `knn-class` placement.
    /// θ only changes with a report, so classifying once per report instead of once per
    /// request takes KNN out of the decision path (bench, 500 nodes: 74 µs → 3.2 µs).
    /// Kept across [`ClusterView::update_node`]; ignored when asked with another config.
    pub fn classify_nodes(&mut self, cfg: &KnnConfig) {
        let v = self
            .nodes
            .iter()
            .map(|n| {
                (
                    classify(&n.indicators, &cfg.training, cfg.k),
                    load_weight(&n.indicators, &cfg.omega),
                )
            })
            .collect();
        self.index.knn = Some((cfg.clone(), v));
    }

    /// The precomputed (class, L) per node, if [`ClusterView::classify_nodes`] was run with
    /// this config (compared once per decision, not per node).
    pub fn class_table(&self, cfg: &KnnConfig) -> Option<&[(NodeClass, f64)]> {
        match &self.index.knn {
            Some((c, v)) if c == cfg => Some(v),
            _ => None,
        }
    }

    /// Node i's §C.3 class and §C.2 weight L: from the table when it was built with this
    /// config, computed on the spot otherwise.
    pub fn node_class(&self, i: usize, cfg: &KnnConfig) -> (NodeClass, f64) {
        match self.class_table(cfg) {
            Some(v) => v[i],
            None => {
                let t = &self.nodes[i].indicators;
                (
                    classify(t, &cfg.training, cfg.k),
                    load_weight(t, &cfg.omega),
                )
            }
        }
    }

    pub fn weights(&self) -> &LoadWeights {
        &self.weights
    }

    pub fn nodes(&self) -> &[NodeView] {
        &self.nodes
    }

    pub fn node(&self, i: usize) -> &NodeView {
        &self.nodes[i]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.index.by_id.get(id).copied()
    }

    /// Effective Load of node `i` (0–100): the scheduler's estimate if set, else eq. 1.
    pub fn load(&self, i: usize) -> f64 {
        self.index.loads[i]
    }

    pub fn loads(&self) -> &[f64] {
        &self.index.loads
    }

    /// Nodes playing `camera`, with their current positions (§A.3's per-camera table).
    pub fn playing(&self, camera: &str) -> &[(usize, Vec<i64>)] {
        self.index
            .playing
            .get(camera)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Positions of `camera` served by node `i`.
    pub fn positions(&self, i: usize, camera: &str) -> &[i64] {
        self.playing(camera)
            .iter()
            .find(|(n, _)| *n == i)
            .map(|(_, p)| p.as_slice())
            .unwrap_or(&[])
    }

    /// Nodes holding cached ranges of `camera`, in node order.
    pub fn caching(&self, camera: &str) -> impl Iterator<Item = usize> + '_ {
        self.cached_ranges(camera).iter().map(|c| c.node)
    }

    /// The indexed resident ranges of `camera` per node holding some, in node order.
    pub fn cached_ranges(&self, camera: &str) -> &[CachedRanges] {
        self.index
            .caching
            .get(camera)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Node `i`'s indexed resident ranges of `camera`.
    pub fn cached_ranges_of(&self, i: usize, camera: &str) -> Option<&CachedRanges> {
        let v = self.cached_ranges(camera);
        v.binary_search_by_key(&i, |c| c.node).ok().map(|k| &v[k])
    }

    /// Replaces (or adds) a node's report: a fresh report drops the scheduler's estimate
    /// unless the report itself carries one.
    pub fn update_node(&mut self, node: NodeView) {
        match self.index_of(&node.id) {
            Some(i) => self.nodes[i] = node,
            None => self.nodes.push(node),
        }
        self.reindex();
    }

    /// Replaces node `i`'s report and updates the indexes for that node only (issue 13: a
    /// node rebuilt the whole view, every node's streams and ranges, on each DESCRIBE). The
    /// result is the view [`ClusterView::new`] would build from the same nodes.
    pub fn replace_node(&mut self, i: usize, node: NodeView) {
        let old = std::mem::replace(&mut self.nodes[i], node);
        for s in old
            .streams
            .iter()
            .filter(|s| s.source != StreamSource::Live)
        {
            if let Some(e) = self.index.playing.get_mut(&s.camera) {
                e.retain(|(n, _)| *n != i);
                if e.is_empty() {
                    self.index.playing.remove(&s.camera);
                }
            }
        }
        for cam in old.cached.keys() {
            if let Some(e) = self.index.caching.get_mut(cam) {
                e.retain(|c| c.node != i);
                if e.is_empty() {
                    self.index.caching.remove(cam);
                }
            }
        }
        let n = &self.nodes[i];
        if old.id != n.id {
            self.index.by_id.remove(&old.id);
            self.index.by_id.insert(n.id.clone(), i);
        }
        self.index.loads[i] = effective_load(n, &self.weights);
        if let Some((cfg, v)) = &mut self.index.knn {
            v[i] = (
                classify(&n.indicators, &cfg.training, cfg.k),
                load_weight(&n.indicators, &cfg.omega),
            );
        }
        for s in n.streams.iter().filter(|s| s.source != StreamSource::Live) {
            insert_position(&mut self.index.playing, &s.camera, i, s.position_ms);
        }
        for (cam, ranges) in &n.cached {
            if !ranges.is_empty() {
                let e = self.index.caching.entry(cam.clone()).or_default();
                let at = e.partition_point(|c| c.node < i);
                e.insert(at, CachedRanges::new(i, ranges));
            }
        }
    }

    /// Whether the indexes are those a fresh [`ClusterView::new`] of the same nodes (and the
    /// same KNN table) would build: the check of the incremental updates' tests.
    #[doc(hidden)]
    pub fn index_matches_rebuild(&self) -> bool {
        let mut fresh = ClusterView::new(self.nodes.clone(), self.weights);
        if let Some((c, _)) = &self.index.knn {
            fresh.classify_nodes(c);
        }
        let (a, b) = (&self.index, &fresh.index);
        a.loads == b.loads
            && a.by_id == b.by_id
            && a.playing == b.playing
            && a.caching == b.caching
            && a.knn == b.knn
    }

    /// Marks a node dead (membership lost it); it stays for the tie-break order.
    pub fn set_alive(&mut self, id: &str, alive: bool) {
        if let Some(i) = self.index_of(id) {
            self.nodes[i].alive = alive;
        }
    }

    /// Sets node `i`'s estimated load (§A.4 step 5, §A.5 step 6).
    pub(crate) fn set_estimate(&mut self, i: usize, est: f64) {
        self.nodes[i].estimated_load = Some(est);
        self.index.loads[i] = est;
    }

    /// Adds a stream to node `i` and keeps the camera index current, without a rebuild.
    pub(crate) fn push_stream(&mut self, i: usize, s: Stream) {
        if s.source != StreamSource::Live {
            insert_position(&mut self.index.playing, &s.camera, i, s.position_ms);
        }
        self.nodes[i].push_stream(s);
    }

    /// Removes stream `k` of node `i` (a migration source) and rebuilds that camera's entry.
    pub(crate) fn remove_stream(&mut self, i: usize, k: usize) -> Stream {
        let s = self.nodes[i].streams.remove(k);
        self.nodes[i].sessions = self.nodes[i].sessions.saturating_sub(1);
        if let Some(entry) = self.index.playing.get_mut(&s.camera) {
            if let Some(pos) = entry.iter().position(|(n, _)| *n == i) {
                let p = &mut entry[pos].1;
                if let Some(j) = p.iter().position(|&x| x == s.position_ms) {
                    p.swap_remove(j);
                }
                if p.is_empty() {
                    entry.remove(pos);
                }
            }
        }
        s
    }
}

fn effective_load(n: &NodeView, w: &LoadWeights) -> f64 {
    n.estimated_load.unwrap_or_else(|| node_load(n, w))
}

/// Adds a position of node `i` to `camera`'s entry, keeping the entry in node order (as
/// [`index_node`] builds it: the order is the policies' tie-break).
fn insert_position(
    playing: &mut HashMap<CameraId, Vec<(usize, Vec<i64>)>>,
    camera: &str,
    i: usize,
    position_ms: i64,
) {
    let entry = match playing.get_mut(camera) {
        Some(e) => e,
        None => playing.entry(camera.to_string()).or_default(),
    };
    let at = entry.partition_point(|(n, _)| *n < i);
    match entry.get_mut(at) {
        Some((n, p)) if *n == i => p.push(position_ms),
        _ => entry.insert(at, (i, vec![position_ms])),
    }
}

fn index_node(idx: &mut Index, i: usize, n: &NodeView) {
    for s in n.streams.iter().filter(|s| s.source != StreamSource::Live) {
        let entry = idx.playing.entry(s.camera.clone()).or_default();
        match entry.last_mut() {
            Some((last, p)) if *last == i => p.push(s.position_ms),
            _ => entry.push((i, vec![s.position_ms])),
        }
    }
    for (cam, ranges) in &n.cached {
        if !ranges.is_empty() {
            idx.caching
                .entry(cam.clone())
                .or_default()
                .push(CachedRanges::new(i, ranges));
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
