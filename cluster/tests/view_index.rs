//! The view's indexes under issue 13's changes, on random views: the cache-aware policy's
//! indexed range lookup gives what the scan of every resident range gave (FD and the
//! cache-hit flag per node), and a view updated node by node has the indexes of a fresh build.

use std::collections::BTreeMap;

use proptest::prelude::*;
use vigil_cluster::similarity::{cache_hit, fd_cache, fd_cached, range_distance};
use vigil_cluster::{
    ClusterView, LoadWeights, NodeView, Request, SchedConfig, Stream, StreamSource, ViewCache,
    ViewEntry,
};

/// Ranges of any shape: overlapping, nested, long, single instants, unsorted.
fn ranges() -> impl Strategy<Value = Vec<(i64, i64)>> {
    prop::collection::vec(
        (
            0i64..200_000,
            prop_oneof![0i64..2_000, 0i64..30_000, 0i64..150_000],
        ),
        0..8,
    )
    .prop_map(|v| v.into_iter().map(|(a, len)| (a, a + len)).collect())
}

/// Node `i`: resident ranges of cam0–2 and streams (camera, position, live or not).
fn node(i: usize) -> impl Strategy<Value = NodeView> {
    (
        prop::collection::vec(ranges(), 3),
        prop::collection::vec((0usize..4, 0i64..200_000, any::<bool>()), 0..6),
    )
        .prop_map(move |(cams, streams)| {
            let mut n = NodeView::new(format!("n{i}"), 1e9);
            n.cached = cams
                .into_iter()
                .enumerate()
                .map(|(c, r)| (format!("cam{c}"), r))
                .collect::<BTreeMap<_, _>>();
            for (c, p, live) in streams {
                n.streams.push(Stream {
                    camera: format!("cam{c}"),
                    position_ms: p,
                    vbr_bps: 1e6,
                    source: if live {
                        StreamSource::Live
                    } else {
                        StreamSource::Storage
                    },
                    session: None,
                });
                n.sessions += 1;
            }
            n
        })
}

fn nodes() -> impl Strategy<Value = Vec<NodeView>> {
    (1usize..6).prop_flat_map(|k| (0..k).map(node).collect::<Vec<_>>())
}

fn view() -> impl Strategy<Value = ClusterView> {
    nodes().prop_map(|ns| ClusterView::new(ns, LoadWeights::default()))
}

proptest! {
    #[test]
    fn indexed_lookup_equals_the_scan(
        v in view(),
        cam in 0usize..4,
        t in -20_000i64..220_000,
        t_max in prop_oneof![Just(10_000i64), 1i64..60_000],
    ) {
        let cfg = SchedConfig { t_min_ms: t_max.min(100) - 1, t_max_ms: t_max, ..SchedConfig::default() };
        let camera = format!("cam{cam}");
        let req = Request::playback(camera.clone(), t, 2e6);
        for i in 0..v.len() {
            let scan = v.node(i).cached.get(&camera);
            let want_fd = scan.map_or(0.0, |r| fd_cached(r, t, &cfg));
            let got_fd = fd_cache(&v, i, &req, &cfg);
            prop_assert!((want_fd - got_fd).abs() < 1e-9, "node {i}: scan {want_fd}, index {got_fd}");
            let playing_near = v.node(i).streams.iter().any(|s| {
                s.camera == camera && s.source != StreamSource::Live && t.abs_diff(s.position_ms) < t_max as u64
            });
            let want_hit = playing_near
                || scan.is_some_and(|r| r.iter().any(|&x| range_distance(t, x) < t_max));
            prop_assert_eq!(cache_hit(&v, i, &req, &cfg), want_hit, "node {}", i);
        }
    }
}

proptest! {
    #[test]
    fn a_view_updated_node_by_node_equals_a_fresh_build(
        before in nodes(),
        after in nodes(),
        changed in prop::collection::vec(any::<bool>(), 6),
    ) {
        let w = LoadWeights::default();
        let old: Vec<ViewEntry> = before.into_iter().map(ViewEntry::new).collect();
        let mut cache = ViewCache::default();
        cache.sync(&old.iter().collect::<Vec<_>>(), w);
        // Same members (ids n0…), some of them with a new report.
        let new: Vec<ViewEntry> = old
            .iter()
            .enumerate()
            .map(|(i, o)| match after.get(i) {
                Some(n) if changed[i] => ViewEntry::new(n.clone()),
                _ => o.clone(),
            })
            .collect();
        let v = cache.sync(&new.iter().collect::<Vec<_>>(), w);
        prop_assert!(v.index_matches_rebuild());
        let fresh = ClusterView::new(new.iter().map(|n| NodeView::clone(n)).collect(), w);
        prop_assert_eq!(&*v, &fresh);
    }

    /// Decisions applied in place (to the view and the chosen entry), some of them to an
    /// entry changed since the last sync, between syncs: the view stays a fresh build of the
    /// entries, and an in-place decision leaves nothing to re-index.
    #[test]
    fn decisions_applied_in_place_keep_the_view_a_fresh_build(
        start in nodes(),
        steps in prop::collection::vec(
            (0usize..6, 0usize..4, 0i64..200_000, any::<bool>(), any::<bool>()),
            1..12,
        ),
    ) {
        let w = LoadWeights::default();
        let mut entries: Vec<ViewEntry> = start.into_iter().map(ViewEntry::new).collect();
        let mut cache = ViewCache::default();
        for (k, (node, cam, pos, live, touch)) in steps.into_iter().enumerate() {
            let i = node % entries.len();
            cache.sync(&entries.iter().collect::<Vec<_>>(), w);
            if touch {
                // Changed behind the cache's back (a new report, an alive change).
                entries[i].node_mut().cpu = 0.01 * k as f64;
            }
            let decision = vigil_cluster::Decision::Assign {
                node: entries[i].id.clone(),
                estimated_load: k as f64,
                reason: String::new(),
                stream: Stream {
                    camera: format!("cam{cam}"),
                    position_ms: pos,
                    vbr_bps: 1e6,
                    source: if live { StreamSource::Live } else { StreamSource::Storage },
                    session: None,
                },
            };
            let streams = entries[i].streams.len();
            cache.apply(&mut entries[i], &decision).unwrap();
            prop_assert_eq!(entries[i].streams.len(), streams + 1);
            let refs: Vec<&ViewEntry> = entries.iter().collect();
            prop_assert_eq!(cache.is_current(&refs), !touch);
            let v = cache.sync(&refs, w);
            prop_assert!(v.index_matches_rebuild());
            let fresh = ClusterView::new(entries.iter().map(|n| NodeView::clone(n)).collect(), w);
            prop_assert_eq!(&*v, &fresh);
        }
    }
}
