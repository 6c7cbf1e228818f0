//! §A.4 similarity-first light-load scheduling on small hand-built views.

mod common;

use common::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use vigil_cluster::{apply, place, ClusterConfig, Decision, PlaceState, Policy, Request};

fn run(v: &vigil_cluster::ClusterView, req: &Request, policy: Policy) -> Decision {
    let mut rng = StdRng::seed_from_u64(1);
    place(
        v,
        req,
        policy,
        &mut PlaceState::default(),
        &ClusterConfig::default(),
        &mut rng,
    )
}

fn assigned(d: &Decision) -> (&str, f64, &str) {
    match d {
        Decision::Assign {
            node,
            estimated_load,
            reason,
            ..
        } => (node.as_str(), *estimated_load, reason.as_str()),
        Decision::Reject { reason } => panic!("rejected: {reason}"),
    }
}

#[test]
fn b_empty_goes_to_least_load() {
    // Nobody plays "cam": cand = argmin Load = n1 (20); miss → est = 20 + 0.56 = 20.56.
    let v = view(vec![
        node("n0", 40.0, &[("other", 0)]),
        node("n1", 20.0, &[]),
        node("n2", 30.0, &[]),
    ]);
    let d = run(
        &v,
        &Request::playback("cam", 60_000, VBR),
        Policy::Similarity,
    );
    let (n, est, why) = assigned(&d);
    assert_eq!(n, "n1");
    assert!(close(est, 20.0 + MISS), "{est}");
    assert!(why.contains("least load"), "{why}");
}

#[test]
fn b_non_empty_goes_to_max_fd() {
    // T = 60 000. n0 (load 40) plays 60 000 and 60 050: FD = 1 + 1 = 2.
    // n1 (load 20) plays 65 050: FD = f(5 050) = 4 950/9 900 = 0.5. n2 (10) plays nothing.
    // argmax FD = n0; hit → est = 40 + 0.28 = 40.28 (light): assigned to n0.
    let v = view(vec![
        node("n0", 40.0, &[("cam", 60_000), ("cam", 60_050)]),
        node("n1", 20.0, &[("cam", 65_050)]),
        node("n2", 10.0, &[]),
    ]);
    let d = run(
        &v,
        &Request::playback("cam", 60_000, VBR),
        Policy::Similarity,
    );
    let (n, est, why) = assigned(&d);
    assert_eq!(n, "n0");
    assert!(close(est, 40.0 + HIT), "{est}");
    assert_eq!(why, "similarity FD=2.00 on n0, est load 40.3");
    // The stream the decision carries is a cache hit at T.
    let Decision::Assign { stream, .. } = &d else {
        unreachable!()
    };
    assert_eq!(stream.source, vigil_cluster::StreamSource::Cache);
    assert_eq!(stream.position_ms, 60_000);
}

#[test]
fn overloaded_estimate_moves_to_next_candidate() {
    // n0 has FD 2 but 94.9 + 0.28 = 95.18 > Load_max 95 → removed from A and B.
    // B = {n1}: FD 0.5, est = 20 + 0.28 = 20.28 → n1.
    let v = view(vec![
        node("n0", 94.9, &[("cam", 60_000), ("cam", 60_050)]),
        node("n1", 20.0, &[("cam", 65_050)]),
        node("n2", 10.0, &[]),
    ]);
    let d = run(
        &v,
        &Request::playback("cam", 60_000, VBR),
        Policy::Similarity,
    );
    let (n, est, why) = assigned(&d);
    assert_eq!(n, "n1");
    assert!(close(est, 20.0 + HIT));
    assert!(
        why.ends_with("after skipping 1 overloaded, 0 beyond LD"),
        "{why}"
    );
}

#[test]
fn moderate_beyond_ld_moves_to_next_candidate() {
    // n0: FD 2, est = 60.28 (moderate); min_A Load = 10 (n2); 60.28 − 10 = 50.28 > LD 30
    // → removed. B = {n1}: est 20.28 (light) → n1.
    let v = view(vec![
        node("n0", 60.0, &[("cam", 60_000), ("cam", 60_050)]),
        node("n1", 20.0, &[("cam", 65_050)]),
        node("n2", 10.0, &[]),
    ]);
    let d = run(
        &v,
        &Request::playback("cam", 60_000, VBR),
        Policy::Similarity,
    );
    let (n, _, why) = assigned(&d);
    assert_eq!(n, "n1");
    assert!(
        why.ends_with("after skipping 0 overloaded, 1 beyond LD"),
        "{why}"
    );

    // Within LD: n0 at 55 → est 55.28, 55.28 − 30 = 25.28 ≤ 30 → n0 keeps it (moderate).
    let v = view(vec![
        node("n0", 55.0, &[("cam", 60_000), ("cam", 60_050)]),
        node("n1", 30.0, &[]),
    ]);
    let d = run(
        &v,
        &Request::playback("cam", 60_000, VBR),
        Policy::Similarity,
    );
    assert_eq!(assigned(&d).0, "n0");
}

#[test]
fn b_exhausted_falls_back_to_least_load() {
    // n0 (FD 2) is overloaded by the estimate; B becomes ∅ → least load of A = n2.
    let v = view(vec![
        node("n0", 95.0, &[("cam", 60_000), ("cam", 60_050)]),
        node("n1", 20.0, &[]),
        node("n2", 10.0, &[]),
    ]);
    let d = run(
        &v,
        &Request::playback("cam", 60_000, VBR),
        Policy::Similarity,
    );
    let (n, est, _) = assigned(&d);
    assert_eq!(n, "n2");
    assert!(close(est, 10.0 + MISS));
}

#[test]
fn all_rejected() {
    // Every estimate is above 95: A empties → Reject (RTSP 503).
    let v = view(vec![
        node("n0", 95.0, &[("cam", 60_000)]),
        node("n1", 94.8, &[]),
        node("n2", 99.0, &[]),
    ]);
    for p in [Policy::Similarity, Policy::CacheAware, Policy::LeastLoad] {
        match run(&v, &Request::playback("cam", 60_000, VBR), p) {
            Decision::Reject { reason } => {
                assert_eq!(
                    reason, "all nodes overloaded (3 would exceed Load_max)",
                    "{p}"
                )
            }
            d => panic!("{p}: {d:?}"),
        }
    }
    // No alive node at all.
    let mut v = view(vec![node("n0", 0.0, &[])]);
    v.set_alive("n0", false);
    let d = run(&v, &Request::playback("cam", 0, VBR), Policy::Similarity);
    assert!(matches!(d, Decision::Reject { reason } if reason.contains("no alive node")));
}

#[test]
fn dead_nodes_are_never_chosen() {
    let mut v = view(vec![
        node("n0", 10.0, &[("cam", 60_000)]),
        node("n1", 50.0, &[]),
    ]);
    v.set_alive("n0", false);
    for p in Policy::ALL {
        let mut rng = StdRng::seed_from_u64(3);
        let mut st = PlaceState::default();
        let req = Request::playback("cam", 60_000, VBR);
        let d = place(&v, &req, p, &mut st, &ClusterConfig::default(), &mut rng);
        assert_eq!(assigned(&d).0, "n1", "{p}");
    }
}

#[test]
fn cache_aware_uses_resident_ranges() {
    // n0 (load 40) caches [55 000, 65 000] ∋ T → FD 1; n1 (load 20) caches [0, 55 050]:
    // 4 950 away → FD 0.5; n2 (load 5) caches nothing. → n0, hit: est = 40.28.
    let mut n0 = node("n0", 40.0, &[]);
    n0.cached.insert("cam".into(), vec![(55_000, 65_000)]);
    let mut n1 = node("n1", 20.0, &[]);
    n1.cached.insert("cam".into(), vec![(0, 55_050)]);
    let v = view(vec![n0, n1, node("n2", 5.0, &[])]);
    let req = Request::playback("cam", 60_000, VBR);
    let d = run(&v, &req, Policy::CacheAware);
    let (n, est, why) = assigned(&d);
    assert_eq!(n, "n0");
    assert!(close(est, 40.0 + HIT));
    assert_eq!(why, "cache-aware FD=1.00 on n0, est load 40.3");
    // Positions-based similarity sees no one playing "cam" → least load n2.
    assert_eq!(assigned(&run(&v, &req, Policy::Similarity)).0, "n2");
}

#[test]
fn nearby_moments_cluster_under_similarity_and_spread_under_least_load() {
    // Five empty nodes; 20 requests for camera c1 at T = 1 000 000 + 500·i ms, each applied
    // at once (§A.4 step 5). Similarity: the first goes to the least loaded node, every next
    // one has FD > 0 there → all on one node (its est stays far below LD). Least load:
    // each applied estimate makes the next node the lightest → all five used.
    let cfg = ClusterConfig::default();
    for (policy, expect_nodes) in [(Policy::Similarity, 1usize), (Policy::LeastLoad, 5)] {
        let mut v = view((0..5).map(|i| node(&format!("n{i}"), 0.0, &[])).collect());
        let mut rng = StdRng::seed_from_u64(9);
        let mut st = PlaceState::default();
        let mut used = std::collections::BTreeSet::new();
        for i in 0..20 {
            let req = Request::playback("c1", 1_000_000 + 500 * i, VBR);
            let d = place(&v, &req, policy, &mut st, &cfg, &mut rng);
            used.insert(assigned(&d).0.to_string());
            apply(&mut v, &d).unwrap();
        }
        assert_eq!(used.len(), expect_nodes, "{policy}: {used:?}");
    }
    // Distinct cameras under Similarity spread by load: B is always empty.
    let mut v = view((0..5).map(|i| node(&format!("n{i}"), 0.0, &[])).collect());
    let mut st = PlaceState::default();
    let mut rng = StdRng::seed_from_u64(9);
    let mut used = std::collections::BTreeSet::new();
    for i in 0..10 {
        let req = Request::playback(format!("cam{i}"), 0, VBR);
        let d = place(&v, &req, Policy::Similarity, &mut st, &cfg, &mut rng);
        used.insert(assigned(&d).0.to_string());
        apply(&mut v, &d).unwrap();
    }
    assert_eq!(used.len(), 5);
}

#[test]
fn apply_sets_the_estimate_and_records_the_stream() {
    let mut v = view(vec![node("n0", 10.0, &[]), node("n1", 12.0, &[])]);
    let d = run(
        &v,
        &Request::playback("cam", 5_000, VBR),
        Policy::Similarity,
    );
    apply(&mut v, &d).unwrap();
    // n0: 10 + 0.56 = 10.56, one session, plays cam at 5 000.
    assert!(close(v.load(0), 10.0 + MISS));
    assert_eq!(v.node(0).sessions, 1);
    assert_eq!(v.positions(0, "cam"), &[5_000]);
    // A burst: the next request for the same moment stays on n0 (FD 1) at 10.84.
    let d = run(
        &v,
        &Request::playback("cam", 5_000, VBR),
        Policy::Similarity,
    );
    let (n, est, _) = assigned(&d);
    assert_eq!(n, "n0");
    assert!(close(est, 10.0 + MISS + HIT));
    // Rejects change nothing; unknown nodes are an error.
    apply(&mut v, &Decision::Reject { reason: "x".into() }).unwrap();
    let mut bad = d.clone();
    if let Decision::Assign { node, .. } = &mut bad {
        *node = "nx".into();
    }
    assert!(apply(&mut v, &bad).is_err());
}
