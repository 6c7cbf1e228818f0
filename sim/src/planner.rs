//! §D.2's setting in virtual time: Poisson arrivals of Zipf-popular videos on nodes with a
//! session cap, each node holding replicas of some videos (r_ij). A request is admitted on
//! the node `vigil_cluster::place` picks with `least-connections` among the nodes holding a
//! replica with a free slot, or rejected.
//!
//! The `planner` arm adds §D.2's planner, the unchanged `vigil_cluster::planner` the live
//! scheduler runs: every `[cluster.planner] period_ms` of virtual time it predicts the next
//! period's requests from the last Δt of arrivals (`planner::predict`), builds the instance
//! from the simulated sessions and replicas, plans (eq. 1, else eq. 2) and the simulation
//! carries out up to `max_moves` of its session moves at once (a move is instantaneous here:
//! no handoff gap is modelled). Both arms see the same requests: the workload has its own
//! RNG, placement another.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use vigil_cluster::planner::{self, Content, Instance, Method, PlanNode};
use vigil_cluster::{
    place, ClusterConfig, ClusterView, Decision, NodeView, PlaceState, PlannerConfig, Policy,
    Request,
};

use crate::dist::{poisson_gaps, zipf_pmf, ExpMean, Picker};
use crate::engine::{secs, Micros, Queue, SEC};
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
    arm: Arm,
    lambda: f64,
    layout: Layout,
    arrivals: u64,
    accepted: u64,
    no_replica_free: u64,
    peak: u64,
    events: u64,
    /// Sessions moved by the planner's plans.
    migrations: u64,
    /// Plans made, and those where eq. 1 failed (eq. 2 solved).
    plans: u64,
    plans_eq2: u64,
    /// Eq. 2 plans that fell back to the greedy plan or stopped at the time limit.
    plans_not_optimal: u64,
}

enum Ev {
    Arrival,
    Departure { session: usize },
    Plan,
}

/// The planner's settings in the simulator: the live scheduler's defaults, with the
/// solver's wall-clock time limit lifted so that a plan depends on the simulated state
/// only (a run is the same for a seed on any machine, however loaded).
pub fn sim_planner_config() -> PlannerConfig {
    PlannerConfig {
        time_limit_ms: 600_000,
        ..ClusterConfig::default().planner
    }
}

/// The planner's instance over the simulated state: every video with sessions or predicted
/// requests, served by the nodes holding a replica; every node capped at `cap`.
fn instance(
    ids: &[String],
    cap: u32,
    holds: &[Vec<bool>],
    at: &[BTreeMap<usize, BTreeSet<usize>>],
    requests: &BTreeMap<String, u32>,
) -> Instance {
    let contents = (0..holds.len())
        .filter_map(|v| {
            let id = format!("video-{v}");
            let r = requests.get(&id).copied().unwrap_or(0);
            if r == 0 && at[v].is_empty() {
                return None;
            }
            Some(Content {
                requests: r,
                sessions: at[v].iter().map(|(j, s)| (*j, s.len() as u32)).collect(),
                servers: (0..ids.len()).filter(|&j| holds[v][j]).collect(),
                movable: true,
                id,
            })
        })
        .collect();
    Instance {
        nodes: ids
            .iter()
            .map(|id| PlanNode {
                id: id.clone(),
                cap,
                fixed: 0,
            })
            .collect(),
        contents,
    }
}

fn run_one(
    sc: &Scenario,
    arm: Arm,
    lambda: f64,
    layout: Layout,
    rows: &mut Vec<SessionRow>,
) -> Outcome {
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
    let mut place_rng = StdRng::seed_from_u64(sc.seed ^ 0x91ace);
    let picker = Picker::new(sc.workload.choice, videos);
    let gaps = poisson_gaps(lambda / 60.0);
    let lengths = ExpMean::new(sc.workload.session_mean_secs);
    let cfg = ClusterConfig::default();
    let mut st = PlaceState::default();
    let mut sessions = vec![0u32; nodes];
    // Where each session is (video, node), and each video's sessions per node.
    let mut loc: Vec<(usize, usize)> = Vec::new();
    let mut at: Vec<BTreeMap<usize, BTreeSet<usize>>> = vec![BTreeMap::new(); videos];
    let ids: Vec<String> = (0..nodes).map(|j| format!("n{j:02}")).collect();
    let pcfg = sim_planner_config();
    // Arrivals (virtual ms, content) of the last Δt, for the prediction.
    let mut recent: VecDeque<(i64, String)> = VecDeque::new();
    let mut q = Queue::default();
    let end = secs(sw.duration_min * 60.0);
    q.at(secs(gaps.sample(&mut rng)), Ev::Arrival);
    if arm == Arm::Planner {
        q.at(secs(pcfg.period_ms as f64 / 1000.0), Ev::Plan);
    }
    let mut out = Outcome {
        arm,
        lambda,
        layout,
        arrivals: 0,
        accepted: 0,
        no_replica_free: 0,
        peak: 0,
        events: 0,
        migrations: 0,
        plans: 0,
        plans_eq2: 0,
        plans_not_optimal: 0,
    };
    let ms = |t: Micros| t / (SEC / 1000);
    while let Some(ev) = q.next_until(end) {
        match ev {
            Ev::Departure { session } => {
                let (v, j) = loc[session];
                sessions[j] -= 1;
                if let Some(set) = at[v].get_mut(&j) {
                    set.remove(&session);
                    if set.is_empty() {
                        at[v].remove(&j);
                    }
                }
            }
            Ev::Plan => {
                q.after(secs(pcfg.period_ms as f64 / 1000.0), Ev::Plan);
                let now = ms(q.now());
                let since = now - pcfg.window_ms as i64;
                while recent.front().is_some_and(|(t, _)| *t < since) {
                    recent.pop_front();
                }
                let mut counts: BTreeMap<String, u32> = BTreeMap::new();
                for (_, c) in &recent {
                    *counts.entry(c.clone()).or_default() += 1;
                }
                let pred = planner::predict(
                    &counts,
                    pcfg.window_ms,
                    pcfg.horizon(),
                    pcfg.quantile,
                    pcfg.zipf_max_s,
                );
                let inst = instance(&ids, cap, &holds, &at, &pred.requests);
                let plan = planner::plan(
                    &inst,
                    &pcfg,
                    std::time::Duration::from_millis(pcfg.time_limit_ms),
                );
                out.plans += 1;
                if plan.method != Method::Feasible {
                    out.plans_eq2 += 1;
                }
                if matches!(plan.method, Method::Greedy | Method::TimeLimit) {
                    out.plans_not_optimal += 1;
                }
                // The live scheduler's cap on moves carried out per plan.
                let mut budget = pcfg.max_moves;
                for m in &plan.moves {
                    let (Some(v), Some(f), Some(t)) = (
                        m.content
                            .strip_prefix("video-")
                            .and_then(|x| x.parse::<usize>().ok()),
                        ids.iter().position(|i| *i == m.from),
                        ids.iter().position(|i| *i == m.to),
                    ) else {
                        continue;
                    };
                    // The oldest sessions of the content on `from` move first.
                    let movers: Vec<usize> = at[v]
                        .get(&f)
                        .into_iter()
                        .flatten()
                        .copied()
                        .take(m.sessions.min(budget) as usize)
                        .collect();
                    for sid in movers {
                        if let Some(set) = at[v].get_mut(&f) {
                            set.remove(&sid);
                            if set.is_empty() {
                                at[v].remove(&f);
                            }
                        }
                        at[v].entry(t).or_default().insert(sid);
                        loc[sid] = (v, t);
                        sessions[f] -= 1;
                        sessions[t] += 1;
                        out.migrations += 1;
                        budget -= 1;
                    }
                }
            }
            Ev::Arrival => {
                q.after(secs(gaps.sample(&mut rng)), Ev::Arrival);
                let v = picker.sample(&mut rng);
                let length = lengths.sample(&mut rng);
                out.arrivals += 1;
                recent.push_back((ms(q.now()), format!("video-{v}")));
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
                    &mut place_rng,
                );
                let mut row = SessionRow {
                    policy: format!("{arm}/{layout}"),
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
                        let sid = loc.len();
                        loc.push((v, j));
                        at[v].entry(j).or_default().insert(sid);
                        q.after(secs(length), Ev::Departure { session: sid });
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

/// Acceptance in percent.
fn pct(o: &Outcome) -> f64 {
    100.0 * o.accepted as f64 / o.arrivals.max(1) as f64
}

/// Runs the sweep (each arm × each layout × each rate) and writes its report.
pub fn run(sc: &Scenario, command: &str) -> Report {
    let Some(sw) = &sc.sweep else {
        return Report::default();
    };
    let arms: Vec<Arm> = sc
        .arms()
        .into_iter()
        .filter(|a| matches!(a, Arm::NoPlanner | Arm::Planner))
        .collect();
    let mut rows = Vec::new();
    let mut outs = Vec::new();
    let mut speeds = Vec::new();
    for &arm in &arms {
        let wall = Instant::now();
        let mut events = 0;
        for &layout in &sw.layouts {
            for &lambda in &sw.lambdas_per_min {
                let o = run_one(sc, arm, lambda, layout, &mut rows);
                events += o.events;
                outs.push(o);
            }
        }
        speeds.push(Speed {
            arm: arm.to_string(),
            simulated_s: sw.duration_min
                * 60.0
                * (sw.layouts.len() * sw.lambdas_per_min.len()) as f64,
            wall_s: wall.elapsed().as_secs_f64(),
            events,
        });
    }
    let mut t = Table {
        title: "Acceptance and migrations without and with the planner".into(),
        columns: [
            "arm",
            "λ /min",
            "replicas",
            "arrivals",
            "accepted",
            "acceptance",
            "peak sessions",
            "migrations",
            "plans (eq. 2)",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for o in &outs {
        t.rows.push(vec![
            o.arm.to_string(),
            format!("{}", o.lambda),
            o.layout.to_string(),
            o.arrivals.to_string(),
            o.accepted.to_string(),
            format!("{:.2} %", pct(o)),
            o.peak.to_string(),
            o.migrations.to_string(),
            if o.arm == Arm::Planner {
                format!("{} ({})", o.plans, o.plans_eq2)
            } else {
                "-".into()
            },
        ]);
    }
    let speed = Table::speed(&speeds);
    let series = |f: fn(&Outcome) -> f64| -> Vec<Series> {
        arms.iter()
            .flat_map(|&a| sw.layouts.iter().map(move |&l| (a, l)))
            .map(|(a, l)| Series {
                name: format!("{a}, replicas {l}"),
                points: outs
                    .iter()
                    .filter(|o| o.arm == a && o.layout == l)
                    .map(|o| (o.lambda, f(o)))
                    .collect(),
            })
            .collect()
    };
    let plots = vec![
        Plot {
            file: "acceptance".into(),
            title: "Acceptance rate without and with the planner".into(),
            x_label: "λ (requests per minute)".into(),
            y_label: "accepted / arrivals (%)".into(),
            series: series(pct),
        },
        Plot {
            file: "migrations".into(),
            title: "Sessions moved by the planner".into(),
            x_label: "λ (requests per minute)".into(),
            y_label: "migrations per run".into(),
            series: series(|o| o.migrations as f64),
        },
    ];
    let pcfg = sim_planner_config();
    let not_optimal: u64 = outs.iter().map(|o| o.plans_not_optimal).sum();
    let sim_h: f64 = speeds.iter().map(|s| s.simulated_s).sum::<f64>() / 3600.0;
    let wall: f64 = speeds.iter().map(|s| s.wall_s).sum();
    let notes = vec![
        ("Paper".into(), sc.paper.clone()),
        ("Scaling".into(), sc.scaling.clone()),
        (
            "Planner".into(),
            format!(
                "vigil_cluster::planner unchanged, every {} s of virtual time: prediction from the requests of the last {} s (Poisson quantile {}, Zipf fit), eq. 1, else eq. 2 (MILP, gap {}; the wall-clock time limit lifted to {} s so that a run depends on its seed only); at most {} session moves carried out per plan, each instantaneous (no handoff gap). {} eq. 2 plans were not solved to the gap (greedy or time limit).",
                pcfg.period_ms as f64 / 1000.0,
                pcfg.window_ms as f64 / 1000.0,
                pcfg.quantile,
                pcfg.mip_gap,
                pcfg.time_limit_ms / 1000,
                pcfg.max_moves,
                not_optimal,
            ),
        ),
        (
            "Calibration".into(),
            "None needed for admission counting (no timing model); not compared with a real run.".into(),
        ),
        (
            "Speed".into(),
            format!("{sim_h:.0} simulated hours in {wall:.2} s of wall time."),
        ),
    ];
    Report {
        notes,
        tables: vec![t, speed],
        plots,
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
