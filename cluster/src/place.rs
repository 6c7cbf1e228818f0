//! Placement of one request: §A.4 similarity-first light-load scheduling, its cache-aware
//! variant, the baselines (least load, least connections, round robin) and §C.3–C.4 KNN
//! classes. Pure: the view, the request, the config and the RNG in; a `Decision` out.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::affinity::{bucket, load_bound, rank};
use crate::config::NodeClass;
use crate::config::{ClusterConfig, SchedConfig};
use crate::load::{delta_load, load_state, LoadState};
use crate::similarity::{cache_hit, fd_indexed, fd_positions};
use crate::view::{ClusterView, NodeId, Request, Stream, StreamSource};
use crate::ClusterError;

/// The placement policies of issue 4, as named in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// §A.4 with FD from current playback positions (default for playback).
    Similarity,
    /// §A.4 with FD from the resident cached ranges.
    CacheAware,
    /// Light-load-first: the baseline the paper beats.
    LeastLoad,
    LeastConnections,
    RoundRobin,
    /// §C.3–C.4.
    KnnClass,
    /// Beyond the papers: each stretch of a recording ranked to one node by rendezvous
    /// hashing, under a bounded load (`affinity`).
    Affinity,
}

impl Policy {
    pub const ALL: [Policy; 7] = [
        Policy::Similarity,
        Policy::CacheAware,
        Policy::LeastLoad,
        Policy::LeastConnections,
        Policy::RoundRobin,
        Policy::KnnClass,
        Policy::Affinity,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Similarity => "similarity",
            Policy::CacheAware => "cache-aware",
            Policy::LeastLoad => "least-load",
            Policy::LeastConnections => "least-connections",
            Policy::RoundRobin => "round-robin",
            Policy::KnnClass => "knn-class",
            Policy::Affinity => "affinity",
        }
    }
}

/// Every policy name, comma-separated (for the error that lists them).
pub fn policy_names() -> String {
    Policy::ALL.map(Policy::name).join(", ")
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = ClusterError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| ClusterError::UnknownPolicy(s.to_string()))
    }
}

/// The little state a policy keeps between decisions (round robin's cursor). The scheduler
/// owns one; a new scheduler starts from the default (the state is soft, issue 4 §3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaceState {
    pub rr_next: usize,
}

/// The outcome of a placement. `Reject` becomes RTSP 503 with the reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    Assign {
        node: NodeId,
        /// §A.4 step 5: Load(cand) + ΔLoad, to be set at once by [`apply`].
        estimated_load: f64,
        reason: String,
        /// The stream the node will serve (source = cache on an expected hit), so that
        /// [`apply`] can add it to the view and the next similar request sees it.
        stream: Stream,
    },
    Reject {
        reason: String,
    },
}

/// §A.4 step 5: sets Load(node) := est and records the new stream (position, VBR, source)
/// and session, so a burst of requests before the next report neither piles onto one node
/// nor misses the similarity it just created. A `Reject` changes nothing.
pub fn apply(view: &mut ClusterView, decision: &Decision) -> Result<(), ClusterError> {
    if let Decision::Assign {
        node,
        estimated_load,
        stream,
        ..
    } = decision
    {
        let i = view
            .index_of(node)
            .ok_or_else(|| ClusterError::UnknownNode(node.clone()))?;
        view.push_stream(i, stream.clone());
        view.set_estimate(i, *estimated_load);
    }
    Ok(())
}

/// Places `req` with `policy`. Deterministic: the same view, request, state and RNG state
/// give the same decision. Only `KnnClass` draws from `rng`. Dead nodes never receive work.
pub fn place(
    view: &ClusterView,
    req: &Request,
    policy: Policy,
    state: &mut PlaceState,
    cfg: &ClusterConfig,
    rng: &mut impl Rng,
) -> Decision {
    let s = &cfg.sched;
    match policy {
        Policy::Similarity => similarity_first(view, req, s, false),
        Policy::CacheAware => similarity_first(view, req, s, true),
        Policy::LeastLoad => first_fit(view, req, s, "least load", |v, a| {
            argmin(alive_in(a), |i| (v.load(i), 0.0))
        }),
        // Ties on the session count go to the lighter node, then to node order.
        Policy::LeastConnections => first_fit(view, req, s, "least connections", |v, a| {
            argmin(alive_in(a), |i| (v.node(i).sessions as f64, v.load(i)))
        }),
        Policy::RoundRobin => round_robin(view, req, s, state),
        Policy::KnnClass => knn_class(view, req, cfg, rng),
        Policy::Affinity => affinity(view, req, s),
    }
}

/// Eligible = alive and below its session limit.
fn eligible(view: &ClusterView) -> Vec<bool> {
    view.nodes()
        .iter()
        .map(|n| n.alive && n.sessions < n.max_sessions)
        .collect()
}

fn alive_in(a: &[bool]) -> impl Iterator<Item = usize> + '_ {
    a.iter().enumerate().filter(|(_, &x)| x).map(|(i, _)| i)
}

/// Lexicographic argmin of `key` over `items`; the first of equals wins (node order).
fn argmin(items: impl Iterator<Item = usize>, key: impl Fn(usize) -> (f64, f64)) -> Option<usize> {
    let mut best: Option<(usize, (f64, f64))> = None;
    for i in items {
        let k = key(i);
        if best.is_none_or(|(_, bk)| k.0 < bk.0 || (k.0 == bk.0 && k.1 < bk.1)) {
            best = Some((i, k));
        }
    }
    best.map(|(i, _)| i)
}

/// ΔLoad and the hit flag for `req` on node i (§A.4 step 4).
fn estimate(view: &ClusterView, i: usize, req: &Request, s: &SchedConfig) -> (f64, bool) {
    let hit = cache_hit(view, i, req, s);
    let d = delta_load(req.vbr_bps, view.node(i).bord_bps, hit, view.weights());
    (view.load(i) + d, hit)
}

fn assign(
    view: &ClusterView,
    i: usize,
    req: &Request,
    est: f64,
    hit: bool,
    reason: String,
) -> Decision {
    Decision::Assign {
        node: view.node(i).id.clone(),
        estimated_load: est,
        reason,
        stream: Stream {
            camera: req.camera.clone(),
            position_ms: req.time_ms,
            vbr_bps: req.vbr_bps,
            source: if hit {
                StreamSource::Cache
            } else {
                StreamSource::Storage
            },
            session: None,
        },
    }
}

/// Why candidates were dropped, for the reason string.
#[derive(Default)]
struct Skips {
    overloaded: usize,
    beyond_ld: usize,
}

impl Skips {
    fn suffix(&self) -> String {
        match (self.overloaded, self.beyond_ld) {
            (0, 0) => String::new(),
            (o, l) => format!(" after skipping {o} overloaded, {l} beyond LD"),
        }
    }

    fn reject(&self, ld: f64) -> Decision {
        let reason = match (self.overloaded, self.beyond_ld) {
            (0, 0) => "no alive node with a free session".to_string(),
            (o, 0) => format!("all nodes overloaded ({o} would exceed Load_max)"),
            (o, l) => format!(
                "no node can take it: {o} would be overloaded, {l} more than LD={ld} above the lightest"
            ),
        };
        Decision::Reject { reason }
    }
}

/// Lightest node of A, kept cheaply across removals: a linear scan first, and a sorted
/// order only if the lightest one gets removed (then each later minimum is O(1) amortised).
struct MinOfA {
    sorted: Option<Vec<usize>>,
    cursor: usize,
    cached: Option<usize>,
}

impl MinOfA {
    fn new(view: &ClusterView, a: &[bool]) -> Self {
        Self {
            sorted: None,
            cursor: 0,
            cached: argmin(alive_in(a), |i| (view.load(i), 0.0)),
        }
    }

    fn get(&mut self, view: &ClusterView, a: &[bool]) -> Option<usize> {
        if let Some(i) = self.cached.filter(|&i| a[i]) {
            return Some(i);
        }
        let sorted = self.sorted.get_or_insert_with(|| {
            let mut v: Vec<usize> = (0..a.len()).filter(|&i| a[i]).collect();
            v.sort_by(|&x, &y| view.load(x).total_cmp(&view.load(y)).then(x.cmp(&y)));
            v
        });
        while self.cursor < sorted.len() && !a[sorted[self.cursor]] {
            self.cursor += 1;
        }
        self.cached = sorted.get(self.cursor).copied();
        self.cached
    }
}

/// §A.4 steps 1–5. `cached` selects the cache-aware FD (resident ranges) and the B set of
/// nodes caching the camera; otherwise FD and B come from current playback positions.
/// Ties on FD go to the lighter node, then to node order (determinism). As written in §A.4,
/// a node of B is preferred over the lightest node even when its FD is 0 (it plays the
/// camera, but far from T); LD and the overload check bound what that preference costs.
fn similarity_first(view: &ClusterView, req: &Request, s: &SchedConfig, cached: bool) -> Decision {
    let mut a = eligible(view);
    let mut b: Vec<(usize, f64)> = if cached {
        view.cached_ranges(&req.camera)
            .iter()
            .filter(|c| a[c.node])
            .map(|c| (c.node, fd_indexed(c, req.time_ms, s)))
            .collect()
    } else {
        view.playing(&req.camera)
            .iter()
            .filter(|(i, _)| a[*i])
            .map(|(i, p)| (*i, fd_positions(p, req.time_ms, s)))
            .collect()
    };
    let mut lightest = MinOfA::new(view, &a);
    let mut skips = Skips::default();
    let label = if cached { "cache-aware" } else { "similarity" };
    loop {
        // Step 1: A = ∅ → reject.
        let Some(min_a) = lightest.get(view, &a) else {
            return skips.reject(s.ld);
        };
        // Steps 2–3: least load when no node plays the camera, else max FD.
        let (cand, fd_val) = match b.iter().copied().reduce(|x, y| {
            if y.1 > x.1 || (y.1 == x.1 && view.load(y.0) < view.load(x.0)) {
                y
            } else {
                x
            }
        }) {
            Some((i, f)) => (i, Some(f)),
            None => (min_a, None),
        };
        // Step 4.
        let (est, hit) = estimate(view, cand, req, s);
        let drop = match load_state(est, s) {
            LoadState::Overloaded => {
                skips.overloaded += 1;
                true
            }
            LoadState::Moderate if est - view.load(min_a) > s.ld => {
                skips.beyond_ld += 1;
                true
            }
            _ => false,
        };
        if drop {
            a[cand] = false;
            b.retain(|&(i, _)| i != cand);
            continue;
        }
        // Step 5.
        let id = &view.node(cand).id;
        let reason = match fd_val {
            Some(f) => format!("{label} FD={f:.2} on {id}, est load {est:.1}"),
            None => format!(
                "{label}: camera {} not on any candidate, least load {:.1} on {id}, est load {est:.1}",
                req.camera,
                view.load(cand)
            ),
        } + &skips.suffix();
        return assign(view, cand, req, est, hit, reason);
    }
}

/// The baselines: pick with `pick` over the eligible nodes, drop a pick whose estimate is
/// overloaded (§A.1) and pick again.
fn first_fit(
    view: &ClusterView,
    req: &Request,
    s: &SchedConfig,
    label: &str,
    pick: impl Fn(&ClusterView, &[bool]) -> Option<usize>,
) -> Decision {
    let mut a = eligible(view);
    let mut skips = Skips::default();
    while let Some(i) = pick(view, &a) {
        let (est, hit) = estimate(view, i, req, s);
        if load_state(est, s) == LoadState::Overloaded {
            skips.overloaded += 1;
            a[i] = false;
            continue;
        }
        let n = view.node(i);
        let reason = format!(
            "{label} on {} (load {:.1}, {} sessions), est load {est:.1}",
            n.id,
            view.load(i),
            n.sessions
        ) + &skips.suffix();
        return assign(view, i, req, est, hit, reason);
    }
    skips.reject(s.ld)
}

/// Recording affinity (module `affinity`): the nodes in rendezvous order for the request's
/// stretch `(camera, ⌊T / affinity_bucket_ms⌋)`; the first whose estimate stays within the
/// bounded-load limit and is not overloaded takes it. The limit always admits the lightest
/// node, so a request is refused only when every node would be overloaded.
fn affinity(view: &ClusterView, req: &Request, s: &SchedConfig) -> Decision {
    let a = eligible(view);
    let n = alive_in(&a).count();
    let sum: f64 = alive_in(&a).map(|i| view.load(i)).sum();
    // One request's worth on a miss (the larger ΔLoad) on the lightest node: the "+1 ball".
    let delta = argmin(alive_in(&a), |i| (view.load(i), 0.0)).map_or(0.0, |i| {
        delta_load(req.vbr_bps, view.node(i).bord_bps, false, view.weights())
    });
    let bound = load_bound(sum, n, delta, s.affinity_slack);
    let stretch = bucket(req.time_ms, s.affinity_bucket_ms);
    let order = rank(
        &req.camera,
        stretch,
        alive_in(&a).map(|i| (i, view.node(i).id.as_str())),
    );
    let mut skips = Skips::default();
    for (k, &i) in order.iter().enumerate() {
        let (est, hit) = estimate(view, i, req, s);
        if load_state(est, s) == LoadState::Overloaded {
            skips.overloaded += 1;
            continue;
        }
        if est > bound {
            continue;
        }
        let reason = format!(
            "affinity rank {} of {n} for {} stretch {stretch} on {}, est load {est:.1} (bound {bound:.1})",
            k + 1,
            req.camera,
            view.node(i).id
        ) + &skips.suffix();
        return assign(view, i, req, est, hit, reason);
    }
    skips.reject(s.ld)
}

fn round_robin(
    view: &ClusterView,
    req: &Request,
    s: &SchedConfig,
    st: &mut PlaceState,
) -> Decision {
    let a = eligible(view);
    let n = view.len();
    let mut skips = Skips::default();
    for off in 0..n {
        let i = (st.rr_next + off) % n;
        if !a[i] {
            continue;
        }
        let (est, hit) = estimate(view, i, req, s);
        if load_state(est, s) == LoadState::Overloaded {
            skips.overloaded += 1;
            continue;
        }
        st.rr_next = (i + 1) % n;
        let reason =
            format!("round robin on {}, est load {est:.1}", view.node(i).id) + &skips.suffix();
        return assign(view, i, req, est, hit, reason);
    }
    skips.reject(s.ld)
}

/// §C.3–C.4: classify each eligible node by KNN over its θ, draw a class with probability
/// proportional to Σ(1 − L_i) over its nodes (so a burst inside one feedback period spreads
/// over classes), then least connections inside the class (ties: lower L, node order). A
/// node whose §A.1 estimate would be overloaded is dropped and the draw repeated.
fn knn_class(
    view: &ClusterView,
    req: &Request,
    cfg: &ClusterConfig,
    rng: &mut impl Rng,
) -> Decision {
    let s = &cfg.sched;
    let mut a = eligible(view);
    // Classes come from the view's table when `classify_nodes` was run with this config.
    let table = view.class_table(&cfg.knn);
    let info: Vec<(NodeClass, f64)> = (0..view.len())
        .map(|i| match (a[i], table) {
            (false, _) => (NodeClass::Normal, 1.0),
            (true, Some(t)) => t[i],
            (true, None) => view.node_class(i, &cfg.knn),
        })
        .collect();
    let mut skips = Skips::default();
    loop {
        let mut spare = [0.0f64; 3];
        let mut members = [0usize; 3];
        for i in alive_in(&a) {
            let (c, l) = info[i];
            spare[c as usize] += (1.0 - l).max(0.0);
            members[c as usize] += 1;
        }
        if members.iter().all(|&m| m == 0) {
            return skips.reject(s.ld);
        }
        let total: f64 = spare.iter().sum();
        let class = if total > 0.0 {
            let eta = rng.gen::<f64>() * total;
            let mut acc = 0.0;
            let mut chosen = None;
            for c in NodeClass::ALL {
                if spare[c as usize] <= 0.0 {
                    continue;
                }
                acc += spare[c as usize];
                chosen = Some(c);
                if eta < acc {
                    break;
                }
            }
            chosen.unwrap_or(NodeClass::High)
        } else {
            // Every node fully loaded by θ: no spare to weigh by, take the first non-empty.
            *NodeClass::ALL
                .iter()
                .find(|c| members[**c as usize] > 0)
                .unwrap_or(&NodeClass::High)
        };
        let share = if total > 0.0 {
            spare[class as usize] / total
        } else {
            1.0
        };
        let in_class = alive_in(&a).filter(|&i| info[i].0 == class);
        let Some(i) = argmin(in_class, |i| (view.node(i).sessions as f64, info[i].1)) else {
            return skips.reject(s.ld);
        };
        let (est, hit) = estimate(view, i, req, s);
        if load_state(est, s) == LoadState::Overloaded {
            skips.overloaded += 1;
            a[i] = false;
            continue;
        }
        let n = view.node(i);
        let reason = format!(
            "knn-class {} (p={share:.2}), least connections {} on {}, est load {est:.1}",
            class.name(),
            n.sessions,
            n.id
        ) + &skips.suffix();
        return assign(view, i, req, est, hit, reason);
    }
}
