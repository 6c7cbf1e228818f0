//! `vigil lab` for a `feedback` scenario (§C): the arms (`least-connections`, `knn-class`)
//! on real nodes of unequal Bord, the nodes reporting on the server's own §C.5 period.
//!
//! The vod lab's machinery is reused as it is: the nodes (`nodes`), the recordings
//! (`media`), the closed-loop clients (`clients`: every arm sees one seeded workload) and
//! the nodes' counters (`probe`). What differs is what is sampled and reported:
//! - once a second, each node's §C.2 load weight L as the scheduler's view has it (its
//!   last report's indicators, `/api/cluster/nodes` `weight`), for the per-node load
//!   curves and the mean/max/variance of L per step;
//! - the report traffic: every node's own gossip counters (bytes and datagrams sent, from
//!   its `/api/cluster/nodes`) over each step's measured window;
//! - the report itself is `vigil_sim::feedback::feedback_report`, the simulator's, filled
//!   from measurements, with the simulation of the same scenario and seed beside it.
//!
//! A request placed by the arm's policy is a playback of its camera's recording from the
//! start: a live DESCRIBE goes to the camera's holder in vigil (issue 11 §3), not through
//! the placement policy, so the §C flow (scheduler picks a node, the camera's stream is
//! served there) is a placed playback here. The report says so.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::ProgressBar;
use vigil_sim::feedback::{feedback_report, ArmOutcome, Labels, StepAcc};
use vigil_sim::report::{Report, SessionRow, Table};
use vigil_sim::scenario::{Arm, Ramp, Scenario};

use super::clients::{self, Plan, Shared};
use super::nodes::Cluster;
use super::probe::{self, NodeCounters};

/// The lab's traffic columns: what the nodes' own gossip counters say.
const LAB_LABELS: Labels = Labels {
    traffic: ["gossip datagrams", "gossip KiB"],
    time: "seconds since the arm's start",
};

pub(super) fn run(sc: Scenario, out: &Path, command: &str, threads: usize) -> anyhow::Result<()> {
    for arm in sc.arms() {
        if !matches!(arm, Arm::Place { .. }) {
            bail!("scenario {}: arm {arm} is not a placement policy", sc.name);
        }
    }
    let Some(ramp) = sc.ramp.clone() else {
        bail!("scenario {}: a feedback lab run needs a [ramp]", sc.name);
    };
    let simulated = vigil_sim::feedback::run(&sc, command);
    let (_tmp, site) = super::prepare_site(&sc)?;
    let runtime = crate::bench::runtime(threads)?;
    let sc = Arc::new(sc);
    let mut arms = Vec::new();
    let mut runs = Vec::new();
    for (k, arm) in sc.arms().into_iter().enumerate() {
        let mut cluster = Cluster::start(&site, &sc, arm, k)?;
        let (outcome, run) = runtime.block_on(run_arm(sc.clone(), &ramp, arm, &cluster));
        cluster.stop();
        arms.push(outcome);
        runs.push(run);
    }
    drop(runtime);
    let mut report = lab_report(&sc, arms, runs, &simulated, command);
    report.notes.push((
        "Storage emulation (lab)".into(),
        super::nodes::emulation_note(&sc),
    ));
    super::write_report(&report, out, "Figures")
}

/// What the report says about one arm besides its figures.
struct Run {
    arm: Arm,
    note: String,
    counters: Vec<NodeCounters>,
}

/// Per second: L per node (the scheduler's view) and the cluster's gossip totals.
struct Samples {
    /// (seconds since the start, L per node).
    trace: Vec<(f64, Vec<f64>)>,
    /// (seconds since the start, bytes sent, datagrams sent), summed over the nodes.
    gossip: Vec<(f64, u64, u64)>,
}

async fn sample(
    plan: Arc<Plan>,
    apis: Vec<String>,
    ids: Vec<String>,
    shared: Arc<Shared>,
    bar: ProgressBar,
) -> Samples {
    let mut out = Samples {
        trace: Vec::new(),
        gossip: Vec::new(),
    };
    let mut tick = plan.start;
    loop {
        let at = tick.saturating_duration_since(plan.start).as_secs_f64();
        let mut total = Some((0, 0));
        for api in &apis {
            total = match (total, probe::gossip_sent(api).await) {
                (Some((b, d)), Some((b1, d1))) => Some((b + b1, d + d1)),
                _ => None,
            };
        }
        if let Some((b, d)) = total {
            out.gossip.push((at, b, d));
        }
        if let Some(l) = probe::per_node(&apis[0], &ids, "weight").await {
            out.trace.push((at, l));
        }
        bar.set_position(at as u64);
        bar.set_message(format!(
            "{} · {} playing · {} sessions, {} rejected, {} failed",
            plan.arm,
            shared.playing.load(std::sync::atomic::Ordering::Relaxed),
            shared.started.load(std::sync::atomic::Ordering::Relaxed),
            shared.rejected.load(std::sync::atomic::Ordering::Relaxed),
            shared.failed.load(std::sync::atomic::Ordering::Relaxed),
        ));
        tick += Duration::from_secs(1);
        if tick > plan.end {
            return out;
        }
        tokio::time::sleep_until(tick.into()).await;
    }
}

async fn run_arm(sc: Arc<Scenario>, ramp: &Ramp, arm: Arm, cluster: &Cluster) -> (ArmOutcome, Run) {
    let total = ramp.step_secs * ramp.steps.len() as f64;
    let plan = Plan::new(sc.clone(), arm, cluster, total);
    let shared = Arc::new(Shared::default());
    let apis = cluster.apis();
    let ids = cluster.ids();
    let bar = probe::progress(total);
    let wall = Instant::now();
    let (_, samples) = tokio::join!(
        clients::run(plan.clone(), shared.clone()),
        sample(
            plan.clone(),
            apis.clone(),
            ids.clone(),
            shared.clone(),
            bar.clone()
        ),
    );
    bar.finish();
    let counters = probe::node_counters(&apis, &ids).await;
    let wall = wall.elapsed();
    let mut rows: Vec<SessionRow> = shared.rows.lock().map(|r| r.clone()).unwrap_or_default();
    rows.sort_by(|a, b| a.requested_s.total_cmp(&b.requested_s));
    let measured = |t: f64| ramp.measured_step(vigil_sim::engine::secs(t));
    let steps = (0..ramp.steps.len())
        .map(|s| {
            let asked: Vec<&SessionRow> = rows
                .iter()
                .filter(|r| measured(r.requested_s) == Some(s))
                .collect();
            let mut acc = StepAcc {
                requests: asked.len() as u64,
                rejected: asked.iter().filter(|r| r.rejected).count() as u64,
                responses: asked.iter().filter_map(|r| r.response_ms).collect(),
                ..StepAcc::default()
            };
            for (_, l) in samples
                .trace
                .iter()
                .filter(|(t, _)| measured(*t) == Some(s))
            {
                acc.samples += 1;
                acc.variance_sum += vigil_cluster::load_variance(l);
                acc.mean_sum += l.iter().sum::<f64>() / l.len().max(1) as f64;
                acc.max_sum += l.iter().copied().fold(0.0, f64::max);
            }
            // The gossip counters over the window: first and last sample inside it.
            let inside: Vec<_> = samples
                .gossip
                .iter()
                .filter(|(t, ..)| measured(*t) == Some(s))
                .collect();
            if let (Some(a), Some(b)) = (inside.first(), inside.last()) {
                acc.report_bytes = b.1.saturating_sub(a.1);
                acc.reports = b.2.saturating_sub(a.2);
            }
            acc
        })
        .collect();
    let note = shared.note(arm, rows.len(), wall);
    (
        ArmOutcome {
            arm,
            steps,
            trace: samples.trace,
            rows,
        },
        Run {
            arm,
            note,
            counters,
        },
    )
}

/// The nodes' own counters over each whole arm next to what the clients recorded: every
/// client connection is counted by the node it reached (entry, and the 302's target);
/// every session a client got a keyframe from was opened by a SETUP on some node; every
/// 503 a client got was counted by the node that answered it (placement or session cap).
fn counters(arms: &[ArmOutcome], runs: &[Run]) -> Table {
    let mut t = Table {
        title: "Nodes' own counters over each whole run (clients' view alongside)".into(),
        columns: [
            "policy",
            "node",
            "RTSP connections: node / clients",
            "sessions opened: node / clients",
            "503s: node / clients",
            "gossip KiB sent",
            "gossip datagrams sent",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (a, run) in arms.iter().zip(runs) {
        let arm = run.arm.to_string();
        for c in &run.counters {
            let served = a.rows.iter().filter(|r| r.node == c.id).count();
            t.rows.push(vec![
                arm.clone(),
                c.id.clone(),
                format!("{} / –", c.connections),
                format!("{} / {served}", c.opened),
                format!("{} / –", c.rejected),
                format!("{:.1}", c.gossip_bytes as f64 / 1024.0),
                c.gossip_datagrams.to_string(),
            ]);
        }
        let sum = |f: fn(&NodeCounters) -> u64| -> u64 { run.counters.iter().map(f).sum() };
        let redirects = a.rows.iter().filter(|r| r.redirected).count();
        t.rows.push(vec![
            arm,
            "all".into(),
            format!("{} / {}", sum(|c| c.connections), a.rows.len() + redirects),
            format!(
                "{} / {}",
                sum(|c| c.opened),
                a.rows.iter().filter(|r| r.response_ms.is_some()).count()
            ),
            format!(
                "{} / {}",
                sum(|c| c.rejected),
                a.rows.iter().filter(|r| r.rejected).count()
            ),
            format!("{:.1}", sum(|c| c.gossip_bytes) as f64 / 1024.0),
            sum(|c| c.gossip_datagrams).to_string(),
        ]);
    }
    t
}

/// Per step and policy: the simulation's figure beside the measured one, and each as a
/// ratio to the first (baseline) policy.
fn side_by_side(sim: &Report, lab: &Report) -> Table {
    let mut t = Table {
        title: "Simulation beside this lab run (same scenario and seed)".into(),
        columns: [
            "clients",
            "policy",
            "mean ms sim / lab",
            "mean ratio to baseline sim / lab",
            "p95 ms sim / lab",
            "variance of L sim / lab",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    let (Some(s), Some(l)) = (sim.tables.first(), lab.tables.first()) else {
        return t;
    };
    let num = |r: &[String], i: usize| r.get(i).and_then(|c| c.parse::<f64>().ok());
    let base = |rows: &[Vec<String>], level: &str| {
        rows.iter().find(|r| r[0] == level).and_then(|r| num(r, 4))
    };
    let f = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.2}"));
    for lr in &l.rows {
        let Some(sr) = s.rows.iter().find(|r| r[0] == lr[0] && r[1] == lr[1]) else {
            continue;
        };
        let ratio = |rows: &[Vec<String>], r: &[String]| {
            Some(num(r, 4)? / base(rows, &r[0]).filter(|b| *b > 0.0)?)
        };
        t.rows.push(vec![
            lr[0].clone(),
            lr[1].clone(),
            format!("{} / {}", f(num(sr, 4)), f(num(lr, 4))),
            format!("{} / {}", f(ratio(&s.rows, sr)), f(ratio(&l.rows, lr))),
            format!("{} / {}", f(num(sr, 5)), f(num(lr, 5))),
            format!(
                "{} / {}",
                num(sr, 8).map_or("–".into(), |x| format!("{x:.4}")),
                num(lr, 8).map_or("–".into(), |x| format!("{x:.4}"))
            ),
        ]);
    }
    t
}

fn lab_report(
    sc: &Scenario,
    arms: Vec<ArmOutcome>,
    runs: Vec<Run>,
    simulated: &Report,
    command: &str,
) -> Report {
    let own = counters(&arms, &runs);
    let mut r = feedback_report(sc, arms, &LAB_LABELS, command);
    r.mode = "lab".into();
    let beside = side_by_side(simulated, &r);
    r.tables.push(own);
    r.tables.push(beside);
    let caps: Vec<String> = (0..sc.nodes.count)
        .map(|i| format!("{:.0}", sc.nodes.bord_mbps * sc.nodes.capacity_of(i)))
        .collect();
    r.notes.extend([
        (
            "Lab".into(),
            format!(
                "real processes: {n} `vigil serve` nodes (the `vigil` beside `vigil-lab`) on 127.0.0.1…{n} (shared storage root in a temp dir, cluster certificates, placement over QUIC), restarted for every policy; Bord {} Mb/s, `[limits] max_sessions` {} (θ_links), the scenario's `[cluster.knn]` and `[cluster.feedback]`: each node publishes its report on the server's §C.5 period and at once when a session starts or ends. {} cameras × 1 recording of {} s of the demo clip ({:.2} Mb/s, a keyframe a second), hard-linked per camera. A viewer is a playback of its camera's recording from its start placed by the arm's policy (a live DESCRIBE in vigil goes to the camera's holder, not through the placement policy); vigil's own RTSP client over UDP in this process, drawing its requests from the simulator's seeded streams. Response time = connect to the entry node → first RTP packet of a keyframe (DESCRIBE, the scheduler's 302, SETUP, PLAY). L: the §C.2 weight of each node's last report (`/api/cluster/nodes` `weight` at the scheduler) once a second. Report traffic: the nodes' own gossip counters (`/api/cluster/nodes` `gossip`: every datagram, reports and heartbeats) over each measured window. All nodes share one machine: θ_cpu and θ_mem are the machine's for every node, so only θ_net (stream bitrates over Bord) and θ_links tell them apart, and a node's real speed does not depend on its Bord.",
                caps.join(", "),
                sc.nodes.max_sessions,
                sc.workload.cameras,
                sc.workload.recording_secs,
                vigil_testkit::media::demo_bitrate_bps() / 1e6,
                n = sc.nodes.count,
            ),
        ),
        ("Machine".into(), super::calibrate::machine()),
        (
            "Runs".into(),
            runs.iter().map(|r| r.note.as_str()).collect::<Vec<_>>().join(". "),
        ),
        (
            "Simulation".into(),
            "The simulation of the same scenario and seed (`vigil sim`) is run by this command too and put beside the measurements; nothing in the simulator was fitted to this run.".into(),
        ),
    ]);
    r
}
