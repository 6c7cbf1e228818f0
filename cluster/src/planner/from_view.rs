//! The planner's instance from the scheduler's cluster view: alive nodes with their cap,
//! every stream as a session of its content (`playback/<camera>` movable, `live/<camera>`
//! not), r_ij from the config's replica rule and the live cameras' holders.

use std::collections::{BTreeMap, BTreeSet};

use super::{Content, Instance, Move, PlanNode};
use crate::config::{PlannerConfig, Replicas};
use crate::view::{CameraId, ClusterView, NodeId, StreamSource};

/// The content a stream belongs to.
pub fn content_of(camera: &str, source: StreamSource) -> String {
    match source {
        StreamSource::Live => format!("live/{camera}"),
        _ => format!("playback/{camera}"),
    }
}

/// `holders`: camera → nodes holding it live (they alone serve its live requests unless
/// `live_edges`: with live edges (issue 11 §3) any alive node can relay a held camera). A
/// live camera nobody holds yet is served by nobody: its requests stay unmet (binding and
/// waking it are §B's business, not a session move's).
pub fn instance(
    view: &ClusterView,
    holders: &BTreeMap<CameraId, Vec<NodeId>>,
    requests: &BTreeMap<String, u32>,
    cfg: &PlannerConfig,
    live_edges: bool,
) -> Instance {
    let alive: Vec<usize> = (0..view.len()).filter(|&i| view.node(i).alive).collect();
    let pos = |i: usize| alive.iter().position(|&a| a == i);
    let nodes = alive
        .iter()
        .map(|&i| {
            let n = view.node(i);
            PlanNode {
                id: n.id.clone(),
                cap: if cfg.node_cap == 0 {
                    n.max_sessions
                } else {
                    cfg.node_cap
                },
                fixed: 0,
            }
        })
        .collect();
    let mut sessions: BTreeMap<String, BTreeMap<usize, u32>> = BTreeMap::new();
    for (j, &i) in alive.iter().enumerate() {
        for s in &view.node(i).streams {
            *sessions
                .entry(content_of(&s.camera, s.source))
                .or_default()
                .entry(j)
                .or_default() += 1;
        }
    }
    let all: Vec<usize> = (0..alive.len()).collect();
    let ids: BTreeSet<&String> = sessions.keys().chain(requests.keys()).collect();
    let contents = ids
        .into_iter()
        .map(|id| {
            let (live, camera) = match id.split_once('/') {
                Some(("live", c)) => (true, c),
                Some((_, c)) => (false, c),
                None => (false, id.as_str()),
            };
            let servers: Vec<usize> = if live {
                let mut s: Vec<usize> = holders
                    .get(camera)
                    .into_iter()
                    .flatten()
                    .filter_map(|h| view.index_of(h).and_then(pos))
                    .collect();
                s.sort_unstable();
                s.dedup();
                if live_edges && !s.is_empty() {
                    all.clone()
                } else {
                    s
                }
            } else {
                match cfg.replicas {
                    Replicas::Shared => all.clone(),
                    Replicas::Resident => {
                        let mut s: Vec<usize> = view
                            .caching(camera)
                            .chain(view.playing(camera).iter().map(|(i, _)| *i))
                            .filter_map(pos)
                            .collect();
                        s.sort_unstable();
                        s.dedup();
                        if s.is_empty() {
                            all.clone()
                        } else {
                            s
                        }
                    }
                }
            };
            Content {
                id: id.clone(),
                requests: requests.get(id).copied().unwrap_or(0),
                sessions: sessions.get(id).cloned().unwrap_or_default(),
                servers,
                movable: !live,
            }
        })
        .collect();
    Instance { nodes, contents }
}

/// The sessions a move names: the first `m.sessions` streams of its content on `m.from`
/// (in the node's report order) that carry a session id and are not in `busy` (moving).
pub fn pick_sessions(view: &ClusterView, m: &Move, busy: &BTreeSet<String>) -> Vec<String> {
    let Some(i) = view.index_of(&m.from) else {
        return Vec::new();
    };
    view.node(i)
        .streams
        .iter()
        .filter(|s| content_of(&s.camera, s.source) == m.content)
        .filter_map(|s| s.session.clone())
        .filter(|id| !busy.contains(id))
        .take(m.sessions as usize)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LoadWeights;
    use crate::view::{NodeView, Stream};

    fn stream(camera: &str, source: StreamSource, session: &str) -> Stream {
        Stream {
            camera: camera.into(),
            position_ms: 1,
            vbr_bps: 1e6,
            source,
            session: Some(session.into()),
        }
    }

    #[test]
    fn live_is_pinned_to_its_holder_and_playback_goes_anywhere() {
        let mut a = NodeView::new("a", 1e9);
        a.streams = vec![
            stream("gate", StreamSource::Live, "s1"),
            stream("yard", StreamSource::Storage, "s2"),
        ];
        let b = NodeView::new("b", 1e9);
        let mut dead = NodeView::new("dead", 1e9);
        dead.alive = false;
        let view = ClusterView::new(vec![a, b, dead], LoadWeights::default());
        let holders = BTreeMap::from([("gate".to_string(), vec!["a".to_string()])]);
        let req = BTreeMap::from([
            ("live/gate".to_string(), 2),
            ("playback/door".to_string(), 1),
        ]);
        let cfg = PlannerConfig {
            node_cap: 2,
            ..PlannerConfig::default()
        };
        // With live edges any node can relay gate: nothing needs to move.
        let edges = instance(&view, &holders, &req, &cfg, true);
        let gate = edges.contents.iter().find(|c| c.id == "live/gate").unwrap();
        assert_eq!(gate.servers, vec![0, 1]);
        assert_eq!(
            super::super::plan(&edges, &cfg, std::time::Duration::from_secs(10)).moved,
            0
        );
        let inst = instance(&view, &holders, &req, &cfg, false);
        assert_eq!(inst.nodes.len(), 2);
        assert!(inst.nodes.iter().all(|n| n.cap == 2));
        let c = |id: &str| inst.contents.iter().find(|c| c.id == id).unwrap();
        assert_eq!(c("live/gate").servers, vec![0]);
        assert!(!c("live/gate").movable);
        assert_eq!(c("live/gate").requests, 2);
        assert_eq!(c("playback/yard").servers, vec![0, 1]);
        assert_eq!(c("playback/yard").sessions, BTreeMap::from([(0, 1)]));
        assert_eq!(c("playback/door").requests, 1);
        // a is full (2 of 2) and gate wants 2 more there: the yard playback moves to b;
        // one gate request cannot be served by any move.
        let p = super::super::plan(&inst, &cfg, std::time::Duration::from_secs(10));
        assert_eq!((p.moved, p.unmet), (1, 1), "{p:?}");
        let m = &p.moves[0];
        assert_eq!((m.content.as_str(), m.to.as_str()), ("playback/yard", "b"));
        assert_eq!(pick_sessions(&view, m, &BTreeSet::new()), vec!["s2"]);
        assert!(pick_sessions(&view, m, &BTreeSet::from(["s2".to_string()])).is_empty());
    }

    #[test]
    fn resident_replicas_are_the_nodes_caching_or_playing() {
        let mut a = NodeView::new("a", 1e9);
        a.cached.insert("yard".into(), vec![(0, 10)]);
        let mut b = NodeView::new("b", 1e9);
        b.streams = vec![stream("door", StreamSource::Cache, "s1")];
        let view = ClusterView::new(vec![a, b, NodeView::new("c", 1e9)], LoadWeights::default());
        let req = BTreeMap::from([
            ("playback/yard".to_string(), 1),
            ("playback/new".to_string(), 1),
        ]);
        let cfg = PlannerConfig {
            replicas: Replicas::Resident,
            ..PlannerConfig::default()
        };
        let inst = instance(&view, &BTreeMap::new(), &req, &cfg, false);
        let c = |id: &str| inst.contents.iter().find(|c| c.id == id).unwrap();
        assert_eq!(c("playback/yard").servers, vec![0]);
        assert_eq!(c("playback/door").servers, vec![1]);
        // Nobody has it: any node loads it.
        assert_eq!(c("playback/new").servers, vec![0, 1, 2]);
    }
}
