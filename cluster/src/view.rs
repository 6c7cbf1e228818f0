//! The snapshot of the cluster every policy reads (ALGORITHMS.md §A.3 last paragraph: the
//! scheduler keeps per node `(node_id, Load, Bord)` and per playing camera
//! `(camera_id, node_id, [playback positions])`; §A.4 adds resident cache ranges for
//! cache-aware scheduling; §C.1 the indicators θ).
//!
//! The view travels over gossip later, so the reported data are plain serde types. The
//! indexes the scheduler needs to decide in microseconds (per-node load, camera → nodes with
//! their positions, camera → nodes caching it) are derived, never serialized, and rebuilt on
//! deserialization and on every node update.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::config::{KnnConfig, LoadWeights, NodeClass};
use crate::knn::{classify, load_weight};
use crate::load::node_load;

pub use crate::records::{
    cached_summary, CameraId, NodeId, NodeView, Request, RequestKind, Stream, StreamSource,
    CACHE_GAP_MS, MAX_CACHED_CAMERAS, MAX_RANGES_PER_CAMERA,
};

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
