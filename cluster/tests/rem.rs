//! §A.5 REM migration, one step at a time.

mod common;

use common::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use vigil_cluster::{apply_migration, rem_step, ClusterView, SchedConfig, StreamSource};

/// n0 reports; it plays camA at 1 000 and 1 050 (FD 2 each) and camB at 50 000 (FD 1).
/// n1 (30) plays camB at 52 000; n2 (10) plays nothing.
fn rem_view(load_high: f64) -> ClusterView {
    view(vec![
        node(
            "n0",
            load_high,
            &[("camA", 1_000), ("camA", 1_050), ("camB", 50_000)],
        ),
        node("n1", 30.0, &[("camB", 52_000)]),
        node("n2", 10.0, &[]),
    ])
}

#[test]
fn not_a_high_node_stops() {
    // Loads 30, 30, 30: σ = 30, nobody is above it.
    let v = view(vec![
        node("n0", 30.0, &[("c", 0)]),
        node("n1", 30.0, &[]),
        node("n2", 30.0, &[]),
    ]);
    let mut rng = StdRng::seed_from_u64(0);
    assert!(rem_step(&v, "n0", &SchedConfig::default(), &mut rng).is_none());
    // n1 in rem_view is below σ.
    assert!(rem_step(&rem_view(96.0), "n1", &SchedConfig::default(), &mut rng).is_none());
}

#[test]
fn moves_the_least_similar_stream_to_max_fd_low_node() {
    // Loads 96, 30, 10: σ = sqrt((9216 + 900 + 100)/3) = sqrt(3405.33) = 58.36; n0 high,
    // A = {n1, n2}. Smallest FD on n0: camB (1 < 2). p(96) = 1 → always continue.
    // B = {n1} (plays camB; FD = f(2 000) = 8 000/9 900 = 0.81) → cand n1.
    // ΔLoad on n1: hit (within T_max) → 0.28 → to_load 30.28; n0 frees its storage-read
    // share 0.7·100·2·4e6/1e9 = 0.56 → from_load 95.44.
    let cfg = SchedConfig::default();
    for seed in 0..20 {
        let mut rng = StdRng::seed_from_u64(seed);
        let m = rem_step(&rem_view(96.0), "n0", &cfg, &mut rng).expect("p = 1");
        assert_eq!((m.from.as_str(), m.to.as_str()), ("n0", "n1"));
        assert_eq!(m.stream.camera, "camB");
        assert_eq!(m.stream_index, 2);
        assert_eq!(m.stream.source, StreamSource::Cache);
        assert!(close(m.to_load, 30.0 + HIT), "{}", m.to_load);
        assert!(close(m.from_load, 96.0 - MISS), "{}", m.from_load);
        assert!(
            m.reason.starts_with("REM: n0 load 96.0 > σ 58.4 (p=1.00)"),
            "{}",
            m.reason
        );
    }
}

#[test]
fn overloaded_candidate_is_skipped() {
    // Loads 99, 60, 10: σ = sqrt((9801 + 3600 + 100)/3) = 67.08 → n0 high, A = {n1, n2};
    // camB's only other player is n1 → B = {n1}.
    let mut v = view(vec![
        node("n0", 99.0, &[("camB", 50_000)]),
        node("n1", 60.0, &[("camB", 52_000)]),
        node("n2", 10.0, &[]),
    ]);
    let cfg = SchedConfig::default();
    let mut rng = StdRng::seed_from_u64(0);
    // Bord(n1) = 10 Mb/s: ΔLoad(hit) = 0.7·100·1·4e6/1e7 = 28 → 88, moderate: n1 takes it.
    let mut n1 = v.node(1).clone();
    n1.bord_bps = 1e7;
    v.update_node(n1);
    let m = rem_step(&v, "n0", &cfg, &mut rng).unwrap();
    assert_eq!(m.to, "n1");
    assert!(close(m.to_load, 88.0));
    // Bord(n1) = 5 Mb/s: ΔLoad = 56 → 116, overloaded → removed from A and B; B = ∅ →
    // least load of A = n2, a miss there: 10 + 0.56.
    let mut n1 = v.node(1).clone();
    n1.bord_bps = 5e6;
    v.update_node(n1);
    let m = rem_step(&v, "n0", &cfg, &mut rng).unwrap();
    assert_eq!(m.to, "n2");
    assert!(close(m.to_load, 10.0 + MISS));
    assert_eq!(m.stream.source, StreamSource::Storage);
}

#[test]
fn migration_probability_follows_eq7() {
    // Load 72.5 in a cluster with σ below it: p = 0.8·22.5/45 = 0.4.
    let v = rem_view(72.5);
    let cfg = SchedConfig::default();
    let mut rng = StdRng::seed_from_u64(2024);
    let n = 20_000;
    let moved = (0..n)
        .filter(|_| rem_step(&v, "n0", &cfg, &mut rng).is_some())
        .count();
    let p = moved as f64 / n as f64;
    assert!((p - 0.4).abs() < 0.015, "{p}");
    // Below Load_min a high node never migrates: loads 45, 10, 10 (σ 27.1).
    let v = view(vec![
        node("n0", 45.0, &[("c", 0)]),
        node("n1", 10.0, &[]),
        node("n2", 10.0, &[]),
    ]);
    assert!((0..1000).all(|_| rem_step(&v, "n0", &cfg, &mut rng).is_none()));
}

#[test]
fn caller_loop_terminates_and_balances() {
    // The caller's loop (§A.5 step 6 "go to 1"): apply and step again until None.
    let mut v = view(vec![
        node(
            "n0",
            99.0,
            &(0..40).map(|k| ("cam", k * 20_000)).collect::<Vec<_>>(),
        ),
        node("n1", 20.0, &[]),
        node("n2", 10.0, &[]),
    ]);
    let cfg = SchedConfig::default();
    let mut rng = StdRng::seed_from_u64(8);
    let mut moves = 0;
    while let Some(m) = rem_step(&v, "n0", &cfg, &mut rng) {
        apply_migration(&mut v, &m).unwrap();
        moves += 1;
        assert!(moves < 100);
    }
    assert!(moves > 0);
    assert_eq!(v.node(0).streams.len(), 40 - moves);
    assert_eq!(v.node(1).streams.len() + v.node(2).streams.len(), moves);
    // A stale migration (stream already moved) is refused.
    let m = {
        let mut v2 = view(vec![node("a", 99.0, &[("c", 0)]), node("b", 0.0, &[])]);
        let m = rem_step(&v2, "a", &cfg, &mut StdRng::seed_from_u64(1)).unwrap();
        apply_migration(&mut v2, &m).unwrap();
        assert!(apply_migration(&mut v2, &m).is_err());
        m
    };
    assert_eq!(m.to, "b");
}
