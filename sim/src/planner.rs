//! §D.2's setting in virtual time: Poisson arrivals of Zipf-popular videos on nodes with a
//! session cap, each node holding replicas of some videos (r_ij). A request is admitted on
//! the node `vigil_cluster::place` picks with `least-connections` among the nodes holding a
//! replica with a free slot, or rejected.
//!
//! The §D.2 migration planner itself is not in `vigil-cluster`, so only the `no-planner`
//! arm runs; a scenario asking for `planner` gets that said in its report instead of a
//! figure.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use vigil_cluster::{
    place, ClusterConfig, ClusterView, Decision, NodeView, PlaceState, Policy, Request,
};

use crate::dist::{poisson_gaps, zipf_pmf, ExpMean, Picker};
use crate::engine::{secs, Queue, SEC};
use crate::report::{Plot, Report, Series, SessionRow, Speed, Table};
use crate::scenario::{Arm, Choice, Layout, Scenario};

/// Replica counts per video: ≥ 1 each, the rest in proportion to popularity (largest
/// remainders), at most one per node; `total` slots in all.
pub fn replica_counts(pmf: &[f64], total: usize, nodes: usize) -> Vec<usize> {
    let n = pmf.len();
    let spare = total.saturating_sub(n) as f64;
    let want: Vec<f64> = pmf.iter().map(|p| p * spare).collect();
    let mut c: Vec<usize> = want.iter().map(|w| (1 + *w as usize).min(nodes)).collect();
    let mut left = total.saturating_sub(c.iter().sum());
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        (want[b] - want[b].floor())
            .total_cmp(&(want[a] - want[a].floor()))
            .then(a.cmp(&b))
    });
    let mut i = 0;
    while left > 0 && i < order.len() * nodes {
        let v = order[i % n];
        if c[v] < nodes {
            c[v] += 1;
            left -= 1;
        }
        i += 1;
    }
    c
}

/// Deals replicas to nodes of `per_node` slots: most-replicated videos first, each copy on
/// the node with the most free slots that lacks the video (ties: lower index).
pub fn deal(counts: &[usize], nodes: usize, per_node: usize) -> Vec<Vec<bool>> {
    let mut holds = vec![vec![false; nodes]; counts.len()];
    let mut free = vec![per_node; nodes];
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
    for v in order {
        for _ in 0..counts[v] {
            let best = (0..nodes)
                .filter(|&j| !holds[v][j] && free[j] > 0)
                .max_by(|&a, &b| free[a].cmp(&free[b]).then(b.cmp(&a)));
            if let Some(j) = best {
                holds[v][j] = true;
                free[j] -= 1;
            }
        }
    }
    holds
}

struct Outcome {
    lambda: f64,
    layout: Layout,
    arrivals: u64,
    accepted: u64,
    no_replica_free: u64,
    peak: u64,
    events: u64,
}

enum Ev {
    Arrival,
    Departure { node: usize },
}

fn run_one(sc: &Scenario, lambda: f64, layout: Layout, rows: &mut Vec<SessionRow>) -> Outcome {
    let Some(sw) = &sc.sweep else {
        unreachable!("validated: a planner scenario has [sweep]");
    };
    let nodes = sc.nodes.count;
    let cap = sc.nodes.max_sessions;
    let videos = sc.workload.cameras;
    let s = match sc.workload.choice {
        Choice::Zipf { s } => s,
        Choice::Uniform => 0.0,
    };
    let pmf = zipf_pmf(videos, s);
    let counts = replica_counts(&pmf, sw.replicas_per_node * nodes, nodes);
    let mut layout_rng = StdRng::seed_from_u64(sc.seed ^ 0x1a70_u64);
    let counts = match layout {
        Layout::Matched => counts,
        Layout::Mismatched => {
            // The same counts, given to a shuffled popularity order.
            let mut perm: Vec<usize> = (0..videos).collect();
            perm.shuffle(&mut layout_rng);
            let mut c = vec![0; videos];
            for (rank, &v) in perm.iter().enumerate() {
                c[v] = counts[rank];
            }
            c
        }
    };
    let holds = deal(&counts, nodes, sw.replicas_per_node);
    // The workload depends on the seed and λ only: both layouts see the same requests.
    let mut rng = StdRng::seed_from_u64(sc.seed.wrapping_mul(31).wrapping_add(lambda.to_bits()));
    let picker = Picker::new(sc.workload.choice, videos);
    let gaps = poisson_gaps(lambda / 60.0);
    let lengths = ExpMean::new(sc.workload.session_mean_secs);
    let cfg = ClusterConfig::default();
    let mut st = PlaceState::default();
    let mut sessions = vec![0u32; nodes];
    let ids: Vec<String> = (0..nodes).map(|j| format!("n{j:02}")).collect();
    let mut q = Queue::default();
    let end = secs(sw.duration_min * 60.0);
    q.at(secs(gaps.sample(&mut rng)), Ev::Arrival);
    let mut out = Outcome {
        lambda,
        layout,
        arrivals: 0,
        accepted: 0,
        no_replica_free: 0,
        peak: 0,
        events: 0,
    };
    while let Some(ev) = q.next_until(end) {
        match ev {
            Ev::Departure { node } => sessions[node] -= 1,
            Ev::Arrival => {
                q.after(secs(gaps.sample(&mut rng)), Ev::Arrival);
                let v = picker.sample(&mut rng);
                let length = lengths.sample(&mut rng);
                out.arrivals += 1;
                // r_ij: only nodes holding a replica can serve; the cap is max_sessions.
                let view = ClusterView::new(
                    (0..nodes)
                        .map(|j| {
                            let mut n = NodeView::new(ids[j].clone(), sc.nodes.bord_mbps * 1e6);
                            n.alive = holds[v][j];
                            n.sessions = sessions[j];
                            n.max_sessions = cap;
                            n
                        })
                        .collect(),
                    cfg.sched.weights,
                );
                let req = Request::playback(format!("video-{v}"), 0, 0.0);
                let d = place(
                    &view,
                    &req,
                    Policy::LeastConnections,
                    &mut st,
                    &cfg,
                    &mut rng,
                );
                let mut row = SessionRow {
                    policy: format!("no-planner/{layout}"),
                    step: format!("{lambda}"),
                    session: out.arrivals,
                    camera: req.camera.clone(),
                    requested_s: q.now() as f64 / SEC as f64,
                    scale: 1.0,
                    ..SessionRow::default()
                };
                match d {
                    Decision::Assign { node, .. } => {
                        let j = view.index_of(&node).unwrap_or(0);
                        sessions[j] += 1;
                        out.accepted += 1;
                        q.after(secs(length), Ev::Departure { node: j });
                        row.node = node;
                        row.ended_s = Some((q.now() + secs(length)).min(end) as f64 / SEC as f64);
                    }
                    Decision::Reject { .. } => {
                        row.rejected = true;
                        out.no_replica_free += 1;
                    }
                }
                rows.push(row);
                out.peak = out.peak.max(sessions.iter().map(|&x| u64::from(x)).sum());
            }
        }
    }
    out.events = q.processed();
    out
}

/// Runs the sweep (each rate × each layout) and writes its report.
pub fn run(sc: &Scenario, command: &str) -> Report {
    let Some(sw) = &sc.sweep else {
        return Report::default();
    };
    let wall = Instant::now();
    let mut rows = Vec::new();
    let mut outs = Vec::new();
    for &layout in &sw.layouts {
        for &lambda in &sw.lambdas_per_min {
            outs.push(run_one(sc, lambda, layout, &mut rows));
        }
    }
    let wall = wall.elapsed().as_secs_f64();
    let sim_h = sw.duration_min / 60.0 * outs.len() as f64;
    let mut t = Table {
        title: "Acceptance without the planner".into(),
        columns: [
            "λ /min",
            "replicas",
            "arrivals",
            "accepted",
            "acceptance",
            "peak sessions",
            "migrations",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for o in &outs {
        t.rows.push(vec![
            format!("{}", o.lambda),
            o.layout.to_string(),
            o.arrivals.to_string(),
            o.accepted.to_string(),
            format!(
                "{:.2} %",
                100.0 * o.accepted as f64 / o.arrivals.max(1) as f64
            ),
            o.peak.to_string(),
            "0".into(),
        ]);
    }
    let events: u64 = outs.iter().map(|o| o.events).sum();
    let speed = Table::speed(&[Speed {
        arm: "no-planner".into(),
        simulated_s: sim_h * 3600.0,
        wall_s: wall,
        events,
    }]);
    let plot = Plot {
        file: "acceptance".into(),
        title: "Acceptance rate without the planner".into(),
        x_label: "λ (requests per minute)".into(),
        y_label: "accepted / arrivals (%)".into(),
        series: sw
            .layouts
            .iter()
            .map(|&l| Series {
                name: format!("replicas {l}"),
                points: outs
                    .iter()
                    .filter(|o| o.layout == l)
                    .map(|o| {
                        (
                            o.lambda,
                            100.0 * o.accepted as f64 / o.arrivals.max(1) as f64,
                        )
                    })
                    .collect(),
            })
            .collect(),
    };
    let planner_asked = sc.arms().contains(&Arm::Planner);
    let mut notes = vec![
        ("Paper".into(), sc.paper.clone()),
        ("Scaling".into(), sc.scaling.clone()),
        (
            "Planner".into(),
            format!(
                "The §D.2 migration planner (feasibility check and minimum-move redistribution) is not implemented in vigil-cluster, so only the baseline without it runs{}; the paper's gains (+≈2 %, +≈1.5 %) cannot be checked yet.",
                if planner_asked { " (the scenario's `planner` arm was skipped)" } else { "" }
            ),
        ),
        (
            "Calibration".into(),
            "None needed for admission counting (no timing model); not compared with a real run.".into(),
        ),
    ];
    notes.push((
        "Speed".into(),
        format!("{sim_h:.0} simulated hours in {wall:.2} s of wall time."),
    ));
    Report {
        notes,
        tables: vec![t, speed],
        plots: vec![plot],
        sessions: rows,
        ..Report::simulation(sc, command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_follow_popularity_and_fill_every_slot() {
        // 4 videos, pmf (0.4, 0.3, 0.2, 0.1), 8 slots on 3 nodes: 1 each + 4 spare →
        // wants 1.6, 1.2, 0.8, 0.4 → 2, 2, 1, 1 (6) + 2 by largest remainder (0.8, 0.6 of
        // video 0) → 2, 2, 2, 1 … = 8 in all, none above 3.
        let c = replica_counts(&[0.4, 0.3, 0.2, 0.1], 8, 3);
        assert_eq!(c.iter().sum::<usize>(), 8);
        assert!(c.iter().all(|&x| (1..=3).contains(&x)));
        assert!(c[0] >= c[3]);
        let holds = deal(&c, 3, 3);
        for (v, h) in holds.iter().enumerate() {
            assert_eq!(h.iter().filter(|&&x| x).count(), c[v]);
        }
        for j in 0..3 {
            assert!(holds.iter().filter(|h| h[j]).count() <= 3);
        }
    }
}
