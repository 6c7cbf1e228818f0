//! Hand-solved instances of eq. 1 and eq. 2, the prediction by hand, and the greedy plan at
//! the paper's size under a 1 ms limit.

use std::collections::BTreeMap;

use rand::SeedableRng;

use super::sim::{paper_instance, PaperSetup};
use super::*;

fn nodes(caps: &[u32]) -> Vec<PlanNode> {
    caps.iter()
        .enumerate()
        .map(|(j, c)| PlanNode {
            id: format!("n{j}"),
            cap: *c,
            fixed: 0,
        })
        .collect()
}

fn content(id: &str, requests: u32, sessions: &[(usize, u32)], servers: &[usize]) -> Content {
    Content {
        id: id.into(),
        requests,
        sessions: sessions.iter().copied().collect(),
        servers: servers.to_vec(),
        movable: true,
    }
}

/// Time enough for the solver at these sizes (the paper's in tens of ms).
const IN_TIME: Duration = Duration::from_secs(10);

fn cfg() -> PlannerConfig {
    PlannerConfig {
        time_limit_ms: 10_000,
        mip_gap: 0.0,
        ..PlannerConfig::default()
    }
}

#[test]
fn feasible_instance_moves_nothing() {
    // n0 cap 2 holds one A; A is wanted once more and may play on n0 or n1: free (1, 2)
    // takes it (eq. 1 holds).
    let inst = Instance {
        nodes: nodes(&[2, 2]),
        contents: vec![content("A", 1, &[(0, 1)], &[0, 1])],
    };
    let p = plan(&inst, &cfg(), IN_TIME);
    assert_eq!(p.method, Method::Feasible);
    assert_eq!((p.moved, p.unmet, p.unmet_before), (0, 0, 0));
    assert!(p.moves.is_empty());
}

#[test]
fn live_demand_on_its_holder_moves_exactly_the_playbacks_it_needs() {
    // n0 holds live camera L (only n0 serves it) and is full with two playbacks of P (any
    // node): two L viewers are due, so both P sessions must leave n0; n1 and n2 have room.
    // Minimum by hand: Z = 2.
    let mut live = content("live/L", 2, &[], &[0]);
    live.movable = false;
    let inst = Instance {
        nodes: nodes(&[2, 2, 2]),
        contents: vec![live, content("playback/P", 0, &[(0, 2)], &[0, 1, 2])],
    };
    let p = plan(&inst, &cfg(), IN_TIME);
    assert_eq!(p.unmet_before, 2);
    assert_eq!(p.method, Method::Optimal);
    assert_eq!((p.moved, p.unmet), (2, 0));
    assert!(p
        .moves
        .iter()
        .all(|m| m.content == "playback/P" && m.from == "n0" && m.to != "n0"));
    check(&inst, &p).unwrap();
}

#[test]
fn a_chain_of_two_moves_that_greedy_cannot_see() {
    // cap 1 each. X is due once and only n0 serves it; n0 holds Y (n0 or n1), n1 holds Z
    // (n1 or n2), n2 is empty. One hop frees nothing (n1 is full); two do: Z n1 → n2, then
    // Y n0 → n1. Minimum by hand: Z = 2, all served; greedy: no move, 1 unmet.
    let inst = Instance {
        nodes: nodes(&[1, 1, 1]),
        contents: vec![
            content("X", 1, &[], &[0]),
            content("Y", 0, &[(0, 1)], &[0, 1]),
            content("Z", 0, &[(1, 1)], &[1, 2]),
        ],
    };
    let p = plan(&inst, &cfg(), IN_TIME);
    assert_eq!(p.method, Method::Optimal);
    assert_eq!((p.moved, p.unmet), (2, 0));
    assert_eq!(p.greedy_moved, Some(0));
    let mut moves: Vec<(String, String, String)> = p
        .moves
        .iter()
        .map(|m| (m.content.clone(), m.from.clone(), m.to.clone()))
        .collect();
    moves.sort();
    assert_eq!(
        moves,
        vec![
            ("Y".into(), "n0".into(), "n1".into()),
            ("Z".into(), "n1".into(), "n2".into())
        ]
    );
    check(&inst, &p).unwrap();
    let g = greedy::solve(&inst, &classes(&inst));
    assert_eq!(g.unmet, 1);
}

#[test]
fn when_nothing_can_serve_everything_no_useless_move() {
    // Two nodes of cap 1, n0 plays P, P is due twice: one request fits on n1, the other
    // nowhere, and no move changes that. Plan: serve 1, move 0.
    let inst = Instance {
        nodes: nodes(&[1, 1]),
        contents: vec![content("P", 2, &[(0, 1)], &[0, 1])],
    };
    let p = plan(&inst, &cfg(), IN_TIME);
    assert_eq!(p.unmet_before, 1);
    assert_eq!((p.moved, p.unmet), (0, 1));
    check(&inst, &p).unwrap();
}

#[test]
fn fewest_moves_prefers_the_node_with_one_session_to_move() {
    // A is due 2 and only n0 or n1 serve it. n0 (cap 3) holds 3 B, n1 (cap 3) holds 1 A
    // and 1 C: n1 has 1 free; B cannot leave n0, so one move (C n1 → n2) frees the second
    // slot. Z = 1.
    let inst = Instance {
        nodes: nodes(&[3, 3, 3]),
        contents: vec![
            content("A", 2, &[(1, 1)], &[0, 1]),
            content("B", 0, &[(0, 3)], &[0]),
            content("C", 0, &[(1, 1)], &[1, 2]),
        ],
    };
    let p = plan(&inst, &cfg(), IN_TIME);
    assert_eq!((p.moved, p.unmet), (1, 0), "{p:?}");
    assert_eq!(p.moves[0].content, "C");
    check(&inst, &p).unwrap();
}

#[test]
fn contents_with_the_same_servers_form_one_class() {
    let inst = Instance {
        nodes: nodes(&[4, 4]),
        contents: vec![
            content("a", 1, &[(0, 1)], &[0, 1]),
            content("b", 0, &[(0, 2)], &[0, 1]),
            content("c", 1, &[], &[1]),
        ],
    };
    let cl = classes(&inst);
    assert_eq!(cl.len(), 2);
    let ab = cl.iter().find(|c| c.members == vec![0, 1]).unwrap();
    assert_eq!(ab.requests, 1);
    assert_eq!(ab.sessions, BTreeMap::from([(0, 3)]));
}

#[test]
fn a_deadline_already_passed_takes_the_greedy_plan() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let inst = paper_instance(&PaperSetup::default(), &mut rng);
    let p = plan(&inst, &cfg(), Duration::ZERO);
    assert!(
        p.unmet_before > 0,
        "the set-up must be infeasible as it stands"
    );
    assert_eq!(p.method, Method::Greedy, "{p:?}");
    let cl = classes(&inst);
    let g = greedy::solve(&inst, &cl);
    assert_eq!(p.moved, g.moved(&cl));
    assert_eq!(p.greedy_moved, Some(g.moved(&cl)));
    assert_eq!(p.unmet, g.unmet);
    assert!(
        p.note.as_deref().is_some_and(|n| n.contains("deadline")),
        "{p:?}"
    );
    check(&inst, &p).unwrap();
    assert!(p.unmet < p.unmet_before, "{p:?}");
    // With time, the same instance is solved, and no worse.
    let solved = plan(&inst, &cfg(), IN_TIME);
    assert_ne!(solved.method, Method::Greedy, "{solved:?}");
    assert!((solved.unmet, solved.moved) <= (p.unmet, p.moved));
}

#[test]
fn paper_size_optimum_is_valid_and_no_worse_than_greedy() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let inst = paper_instance(&PaperSetup::default(), &mut rng);
    let p = plan(&inst, &cfg(), IN_TIME);
    check(&inst, &p).unwrap();
    let g = greedy::solve(&inst, &classes(&inst));
    let gm = g.moved(&classes(&inst));
    assert!((p.unmet, p.moved) <= (g.unmet, gm), "{p:?} vs greedy {gm}");
}

#[test]
fn arrivals_are_new_session_ids_within_the_window() {
    let mut log = ArrivalLog::default();
    // The first look learns what runs: no arrivals.
    log.observe(0, 10_000, [("s1", "playback/a")]);
    log.observe(1_000, 10_000, [("s1", "playback/a"), ("s2", "playback/a")]);
    log.observe(2_000, 10_000, [("s2", "playback/a"), ("s3", "live/b")]);
    // s2 drops out of the view for a moment (moving) and comes back: not a new arrival.
    log.observe(3_000, 10_000, [("s3", "live/b")]);
    log.observe(4_000, 10_000, [("s2", "playback/a"), ("s3", "live/b")]);
    let c = log.counts(4_000, 10_000);
    assert_eq!(
        c,
        BTreeMap::from([("playback/a".into(), 1), ("live/b".into(), 1)])
    );
    // Past the window they are forgotten.
    log.observe(13_000, 10_000, []);
    assert!(log.counts(13_000, 10_000).is_empty());
}

#[test]
fn prediction_by_hand() {
    // 3 arrivals of a, 2 of b in 20 s: λ = 0.25/s; next 20 s: Poisson(5), median 5
    // (P(X ≤ 4) = 0.440, P(X ≤ 5) = 0.616). Zipf through (ln 1, ln 3), (ln 2, ln 2):
    // s = ln(3/2)/ln 2 = 0.585, shares 1 : 2^-0.585 = 0.6 : 0.4 → 3 and 2.
    let counts = BTreeMap::from([("a".to_string(), 3), ("b".to_string(), 2)]);
    let p = predict(&counts, 20_000, 20_000, 0.5, 3.0);
    assert_eq!(p.arrivals, 5);
    assert!((p.rate_per_s - 0.25).abs() < 1e-12);
    assert_eq!(p.total, 5);
    assert!((p.zipf_s - (1.5f64).ln() / 2f64.ln()).abs() < 1e-9);
    assert_eq!(
        p.requests,
        BTreeMap::from([("a".to_string(), 3), ("b".to_string(), 2)])
    );
    // Horizon a quarter of the window: Poisson(1.25): P(X ≤ 0) = 0.287, P(X ≤ 1) = 0.645
    // → median 1, to the most popular.
    let p = predict(&counts, 20_000, 5_000, 0.5, 3.0);
    assert_eq!(p.total, 1);
    assert_eq!(p.requests, BTreeMap::from([("a".to_string(), 1)]));
    // Quantile 0.9 of Poisson(5) = 8 (P(X ≤ 7) = 0.867, P(X ≤ 8) = 0.932).
    assert_eq!(predict(&counts, 20_000, 20_000, 0.9, 3.0).total, 8);
    assert_eq!(predict(&BTreeMap::new(), 20_000, 20_000, 0.5, 3.0).total, 0);
    // One arrival in 60 s, the next 10 s: Poisson(1/6), P(X = 0) = 0.846 ≥ 0.5 → 0 (the case
    // statrs' own inverse CDF panics on).
    let one = BTreeMap::from([("a".to_string(), 1)]);
    assert_eq!(predict(&one, 60_000, 10_000, 0.5, 3.0).total, 0);
    assert_eq!(predict(&one, 60_000, 10_000, 0.9, 3.0).total, 1);
    // Large means: Poisson(10 000) median 10 000.
    assert_eq!(predict::poisson_quantile(10_000.0, 0.5), 10_000);
}

#[test]
fn zipf_fit_recovers_the_exponent() {
    let counts: Vec<u32> = (1..=50)
        .map(|k| (1000.0 * (k as f64).powf(-0.6)).round() as u32)
        .collect();
    assert!((zipf_fit(&counts) - 0.6).abs() < 0.01);
    assert_eq!(zipf_fit(&[7]), 0.0);
    assert_eq!(zipf_fit(&[4, 4, 4]), 0.0);
}
