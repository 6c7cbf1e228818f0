//! Live edges (issue 11 §3): where a new live viewer of a camera is served.
//!
//! One node holds a camera (it publishes there, or that node pulls it). While the holder is
//! light its viewers go to it; once its load passes `holder_load`, each new viewer goes to
//! the node with the lowest estimated load after taking it, which relays the camera from
//! the holder (one upstream per edge however many viewers, one hop: an edge never feeds
//! another edge). The estimate counts a live viewer once (§A.1: like a cached stream) and,
//! on a node that does not relay the camera yet, the relay's own inbound stream too, so an
//! existing edge is preferred over opening a new one at equal load.
//!
//! Pure: the view, the holder, the nodes already relaying, the config in; a
//! [`Decision`](crate::Decision) out, which [`apply`](crate::apply) adds to the view like a
//! placement, so a burst of viewers before the next report spreads instead of piling up.

use crate::config::{EdgeConfig, SchedConfig};
use crate::load::{delta_load, load_state, LoadState};
use crate::place::Decision;
use crate::view::{ClusterView, Stream, StreamSource};

/// A new live viewer of `camera`, held by `holder` and relayed by the nodes in `edges`.
#[derive(Debug, Clone, Copy)]
pub struct LiveRequest<'a> {
    pub camera: &'a str,
    pub holder: &'a str,
    pub edges: &'a [String],
    /// The camera's bitrate (bits/s).
    pub vbr_bps: f64,
    pub now_ms: i64,
}

/// Where the live viewer `req` is served.
pub fn place_live(
    view: &ClusterView,
    req: &LiveRequest<'_>,
    edge: &EdgeConfig,
    s: &SchedConfig,
) -> Decision {
    let LiveRequest {
        camera,
        holder,
        edges,
        vbr_bps,
        now_ms,
    } = *req;
    let Some(h) = view.index_of(holder).filter(|&h| view.node(h).alive) else {
        return Decision::Reject {
            reason: format!("camera {camera} is held by {holder}, which is not alive"),
        };
    };
    let w = view.weights();
    let viewer = |i: usize| delta_load(vbr_bps, view.node(i).bord_bps, true, w);
    let est = |i: usize| {
        let relay = if i == h || edges.iter().any(|e| *e == view.node(i).id) {
            0.0
        } else {
            viewer(i)
        };
        view.load(i) + viewer(i) + relay
    };
    let assign = |i: usize, reason: String| Decision::Assign {
        node: view.node(i).id.clone(),
        estimated_load: est(i),
        reason,
        stream: Stream {
            camera: camera.to_string(),
            position_ms: now_ms,
            vbr_bps,
            source: StreamSource::Live,
            session: None,
        },
    };
    let holder_load = view.load(h);
    if !edge.enabled || holder_load < edge.holder_load {
        return assign(
            h,
            format!("live {camera} on its holder {holder} (load {holder_load:.1})"),
        );
    }
    // Lowest estimate wins; on equal estimates the holder, then an existing edge, then node
    // order (determinism).
    let rank = |i: usize| {
        let tier = if i == h {
            0
        } else if edges.iter().any(|e| *e == view.node(i).id) {
            1
        } else {
            2
        };
        (est(i), tier, i)
    };
    let best = (0..view.len())
        .filter(|&i| {
            let n = view.node(i);
            n.alive && n.sessions < n.max_sessions
        })
        .filter(|&i| load_state(est(i), s) != LoadState::Overloaded)
        .min_by(|&x, &y| {
            let (ex, tx, ix) = rank(x);
            let (ey, ty, iy) = rank(y);
            ex.total_cmp(&ey).then(tx.cmp(&ty)).then(ix.cmp(&iy))
        });
    match best {
        None => Decision::Reject {
            reason: format!("live {camera}: every node would exceed Load_max"),
        },
        Some(i) if i == h => assign(
            h,
            format!(
                "live {camera} on its holder {holder}: load {holder_load:.1} ≥ {:.1} but no edge is lighter",
                edge.holder_load
            ),
        ),
        Some(i) => {
            let id = &view.node(i).id;
            let how = if edges.iter().any(|e| e == id) {
                "relaying already"
            } else {
                "opens a relay"
            };
            assign(
                i,
                format!(
                    "live {camera}: holder {holder} at load {holder_load:.1} ≥ {:.1}; edge {id} ({how}), est load {:.1}",
                    edge.holder_load,
                    est(i)
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LoadWeights;
    use crate::place::apply;
    use crate::view::NodeView;

    /// Three 100 Mb/s nodes with the given CPU (so load = 0.1·100·cpu + 0.7·100·net).
    fn view(cpus: [f64; 3]) -> ClusterView {
        let nodes = cpus
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let mut n = NodeView::new(format!("n{}", i + 1), 100e6);
                n.cpu = c;
                n
            })
            .collect();
        ClusterView::new(nodes, LoadWeights::default())
    }

    /// A 2 Mb/s viewer of camera "c" at time 0.
    fn live<'a>(holder: &'a str, edges: &'a [String]) -> LiveRequest<'a> {
        LiveRequest {
            camera: "c",
            holder,
            edges,
            vbr_bps: 2e6,
            now_ms: 0,
        }
    }

    fn node_of(d: &Decision) -> &str {
        match d {
            Decision::Assign { node, .. } => node,
            Decision::Reject { reason } => panic!("rejected: {reason}"),
        }
    }

    #[test]
    fn a_light_holder_serves_its_own_viewers() {
        let v = view([0.2, 0.0, 0.0]); // holder load 2.0
        let d = place_live(
            &v,
            &live("n1", &[]),
            &EdgeConfig::default(),
            &SchedConfig::default(),
        );
        assert_eq!(node_of(&d), "n1");
    }

    #[test]
    fn a_loaded_holder_sends_viewers_to_the_lightest_edge() {
        let cfg = EdgeConfig {
            holder_load: 5.0,
            ..EdgeConfig::default()
        };
        // Loads 6, 3, 1: n3 opens a relay (1 + 1.4 viewer + 1.4 relay = 3.8 < 3 + 2.8).
        let v = view([0.6, 0.3, 0.1]);
        let d = place_live(&v, &live("n1", &[]), &cfg, &SchedConfig::default());
        assert_eq!(node_of(&d), "n3");
        match &d {
            Decision::Assign {
                estimated_load,
                stream,
                ..
            } => {
                assert!((estimated_load - 3.8).abs() < 1e-9, "{estimated_load}");
                assert_eq!(stream.source, StreamSource::Live);
            }
            Decision::Reject { .. } => unreachable!(),
        }
        // Loads 6, 2, 1 with n2 relaying already: 2 + 1.4 = 3.4 < n3's 3.8, the existing
        // edge wins.
        let v = view([0.6, 0.2, 0.1]);
        let edges = ["n2".to_string()];
        let d = place_live(&v, &live("n1", &edges), &cfg, &SchedConfig::default());
        assert_eq!(node_of(&d), "n2");
    }

    #[test]
    fn applied_decisions_spread_a_burst_of_viewers() {
        let cfg = EdgeConfig {
            holder_load: 0.0,
            ..EdgeConfig::default()
        };
        let mut v = view([0.0, 0.0, 0.0]);
        let mut edges: Vec<String> = Vec::new();
        let mut count = std::collections::BTreeMap::new();
        for _ in 0..30 {
            let d = place_live(&v, &live("n1", &edges), &cfg, &SchedConfig::default());
            let n = node_of(&d).to_string();
            if n != "n1" && !edges.contains(&n) {
                edges.push(n.clone());
            }
            *count.entry(n).or_insert(0) += 1;
            apply(&mut v, &d).unwrap();
        }
        // Each viewer adds 1.4; the edges also carry their relay (1.4 once): 30 viewers
        // end as 11 / 10 / 9 or so, never all on one node.
        assert_eq!(count.len(), 3, "{count:?}");
        for (n, c) in &count {
            assert!((9..=11).contains(c), "{n}: {c} of 30 ({count:?})");
        }
    }

    #[test]
    fn dead_holder_disabled_edges_and_overload() {
        let mut v = view([0.9, 0.0, 0.0]);
        let off = EdgeConfig {
            enabled: false,
            ..EdgeConfig::default()
        };
        let s = SchedConfig::default();
        assert_eq!(node_of(&place_live(&v, &live("n1", &[]), &off, &s)), "n1");
        let all_over = SchedConfig {
            load_min: 0.5,
            load_max: 0.5,
            ..s
        };
        let cfg = EdgeConfig {
            holder_load: 0.0,
            ..EdgeConfig::default()
        };
        assert!(matches!(
            place_live(&v, &live("n1", &[]), &cfg, &all_over),
            Decision::Reject { .. }
        ));
        v.set_alive("n1", false);
        assert!(matches!(
            place_live(&v, &live("n1", &[]), &cfg, &s),
            Decision::Reject { .. }
        ));
    }
}
