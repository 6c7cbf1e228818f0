//! `vigil lab` for a `planner` scenario (§D.2): acceptance and migrations without and
//! with the scheduler's migration planner, on real nodes capped at `max_sessions` each.
//!
//! Contents with few replicas are what the planner is for. On vigil's shared storage every
//! node can play every recording, so the restricted contents here are live cameras: camera
//! k is held live by node k mod N alone (the demo clip as its source, `[cluster.edge]`
//! off, so only its holder can serve its viewers, the planner's r_ij), and playbacks of
//! the recordings can go anywhere (placed by least connections) and be moved. A share of
//! the requests (`sweep.playback_share`) are playbacks, the rest live views; both pick the
//! camera by the scenario's choice (Zipf). Arrivals are Poisson at each rate of the sweep
//! and every session lasts exp(`session_mean_secs`); the seeded arrivals are the same for
//! both arms. Each (arm, rate) runs on a fresh cluster, so the nodes' counters
//! (`vigil_sessions_opened_total`, the 503 counters, `vigil_migrations_total`) are that
//! run's alone and the report puts them beside the clients' counts.
//!
//! The clients are the vod lab's (`clients::watch`): connect → first keyframe, 302
//! followed, a 503 counted as a refusal, a media-source change counted as a migration.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vigil_cluster::Policy;
use vigil_sim::dist::{Ask, ExpMean, Picker};
use vigil_sim::report::{Plot, Report, Series, SessionRow, Table};
use vigil_sim::scenario::{Arm, Scenario};

use super::clients::{self, camera_name, recording_start_ms, Plan, Shared, Target};
use super::nodes::Cluster;
use super::probe::{self, NodeCounters};

/// One request of the seeded arrival process.
struct Arrival {
    at_s: f64,
    camera: usize,
    live: bool,
    length_s: f64,
    entry: usize,
}

/// The arrivals of one rate: the same for every arm (their own stream per rate).
fn arrivals(sc: &Scenario, lambda_per_min: f64, k: usize, duration_s: f64) -> Vec<Arrival> {
    let mut rng = StdRng::seed_from_u64(
        sc.seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(k as u64 + 1),
    );
    let gaps = ExpMean::new(60.0 / lambda_per_min);
    let lengths = ExpMean::new(sc.workload.session_mean_secs);
    let picker = Picker::new(sc.workload.choice, sc.workload.cameras);
    let share = sc.sweep.as_ref().map_or(0.0, |s| s.playback_share);
    let mut out = Vec::new();
    let mut t = gaps.sample(&mut rng);
    while t < duration_s {
        out.push(Arrival {
            at_s: t,
            camera: picker.sample(&mut rng),
            live: rng.gen::<f64>() >= share,
            length_s: lengths.sample(&mut rng),
            entry: rng.gen_range(0..sc.nodes.count),
        });
        t += gaps.sample(&mut rng);
    }
    out
}

/// The extra configuration of node `i`: the cameras it holds live, no live edges, the
/// scenario's planner switched on or off by the arm.
fn node_extra(sc: &Scenario, arm: Arm, i: usize) -> anyhow::Result<String> {
    let mut planner = sc.cluster.planner;
    planner.enabled = arm == Arm::Planner;
    let mut edge = sc.cluster.edge;
    edge.enabled = false;
    let mut c = toml::Table::new();
    c.insert(
        "planner".into(),
        toml::Value::try_from(planner).context("planner constants")?,
    );
    c.insert(
        "edge".into(),
        toml::Value::try_from(edge).context("edge constants")?,
    );
    let mut t = toml::Table::new();
    t.insert("cluster".into(), c.into());
    let mut s = toml::to_string(&t).context("planner constants")?;
    for cam in (0..sc.workload.cameras).filter(|c| c % sc.nodes.count == i) {
        s += &format!(
            "\n[[camera]]\nid = \"{}\"\nsource = \"demo\"\nrecord = false\n",
            camera_name(cam)
        );
    }
    Ok(s)
}

pub(super) fn run(sc: Scenario, out: &Path, command: &str, threads: usize) -> anyhow::Result<()> {
    let Some(sweep) = sc.sweep.clone() else {
        bail!("scenario {}: a planner lab run needs a [sweep]", sc.name);
    };
    if sc.nodes.max_sessions == 0 {
        bail!(
            "scenario {}: a planner lab run needs nodes.max_sessions (the cap)",
            sc.name
        );
    }
    let arms = sc.arms();
    let (_tmp, site) = super::prepare_site(&sc)?;
    let runtime = crate::bench::runtime(threads)?;
    let sc = Arc::new(sc);
    let duration = sweep.duration_min * 60.0;
    let mut runs = Vec::new();
    let mut k = 0;
    for &arm in &arms {
        for (r, &lambda) in sweep.lambdas_per_min.iter().enumerate() {
            let extra = |i: usize| node_extra(&sc, arm, i);
            let mut cluster =
                Cluster::start_with(&site, &sc, Policy::LeastConnections, false, &extra, k)?;
            k += 1;
            let reqs = arrivals(&sc, lambda, r, duration);
            let run = runtime.block_on(run_rate(sc.clone(), arm, lambda, reqs, &cluster, duration));
            cluster.stop();
            runs.push(run);
        }
    }
    drop(runtime);
    let mut report = lab_report(&sc, runs, command);
    report.notes.push((
        "Storage emulation (lab)".into(),
        super::nodes::emulation_note(&sc),
    ));
    super::write_report(&report, out, "Acceptance")
}

/// One (arm, rate) run: its sessions and the nodes' own counters after it.
struct RateRun {
    arm: Arm,
    lambda: f64,
    rows: Vec<SessionRow>,
    counters: Vec<NodeCounters>,
    note: String,
}

async fn run_rate(
    sc: Arc<Scenario>,
    arm: Arm,
    lambda: f64,
    reqs: Vec<Arrival>,
    cluster: &Cluster,
    duration: f64,
) -> RateRun {
    let plan = Plan::new(sc.clone(), arm, cluster, duration);
    let shared = Arc::new(Shared::default());
    let apis = cluster.apis();
    let ids = cluster.ids();
    let bar = probe::progress(duration);
    bar.set_message(format!(
        "{arm} · λ = {lambda}/min · {} requests",
        reqs.len()
    ));
    let wall = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (id, a) in reqs.into_iter().enumerate() {
        let (plan, shared) = (plan.clone(), shared.clone());
        let sc = sc.clone();
        tasks.spawn(async move {
            tokio::time::sleep_until((plan.start + Duration::from_secs_f64(a.at_s)).into()).await;
            let camera = camera_name(a.camera);
            let node = plan.nodes[a.entry.min(plan.nodes.len() - 1)];
            let target = if a.live {
                Target {
                    url: format!("rtsp://{node}/live/{camera}"),
                    entry: a.entry,
                    camera,
                    time_ms: 0,
                }
            } else {
                let begin = recording_start_ms(&sc, 0);
                let start = vigil_proto::rtsp::rfc3339(begin);
                Target {
                    url: format!("rtsp://{node}/playback/{camera}?start={start}"),
                    entry: a.entry,
                    camera,
                    time_ms: begin,
                }
            };
            let ask = Ask {
                recording: a.camera,
                length_s: a.length_s,
                vcr: None,
                think_s: 0.0,
                entry: a.entry,
            };
            clients::watch(id as u64, &target, &ask, &plan, &shared).await;
        });
    }
    let ticker = async {
        let mut t = plan.start;
        while t < plan.end {
            t += Duration::from_secs(1);
            tokio::time::sleep_until(t.into()).await;
            bar.set_position(t.saturating_duration_since(plan.start).as_secs());
        }
    };
    tokio::join!(async { while tasks.join_next().await.is_some() {} }, ticker);
    bar.finish();
    let counters = probe::node_counters(&apis, &ids).await;
    let mut rows: Vec<SessionRow> = shared.rows.lock().map(|r| r.clone()).unwrap_or_default();
    rows.sort_by(|a, b| a.requested_s.total_cmp(&b.requested_s));
    for r in &mut rows {
        r.step = format!("{lambda}");
    }
    let note = format!(
        "λ = {lambda}/min: {}",
        shared.note(arm, rows.len(), wall.elapsed())
    );
    RateRun {
        arm,
        lambda,
        rows,
        counters,
        note,
    }
}

/// Acceptance in percent of `rows`.
fn pct(rows: &[&SessionRow]) -> f64 {
    let ok = rows.iter().filter(|r| r.response_ms.is_some()).count();
    100.0 * ok as f64 / rows.len().max(1) as f64
}

fn lab_report(sc: &Scenario, runs: Vec<RateRun>, command: &str) -> Report {
    let warmup = sc.workload.session_mean_secs;
    let mut fig = Table {
        title: format!(
            "Acceptance and migrations without and with the planner (requests after the first {warmup:.0} s)"
        ),
        columns: [
            "arm",
            "λ /min",
            "requests",
            "accepted",
            "acceptance",
            "live: accepted / requests",
            "playback: accepted / requests",
            "migrations",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    let mut own = Table {
        title: "Nodes' own counters over each whole run (clients' view alongside)".into(),
        columns: [
            "arm",
            "λ /min",
            "requests",
            "sessions opened: node / clients",
            "503s: node / clients",
            "migrations: node / clients",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    let mut acc: Vec<(Arm, f64, f64, f64)> = Vec::new();
    for r in &runs {
        let measured: Vec<&SessionRow> =
            r.rows.iter().filter(|s| s.requested_s >= warmup).collect();
        let kind = |live: bool| -> Vec<&SessionRow> {
            measured
                .iter()
                .copied()
                .filter(|s| (s.time_ms == 0) == live)
                .collect()
        };
        let frac = |v: &[&SessionRow]| {
            format!(
                "{} / {}",
                v.iter().filter(|s| s.response_ms.is_some()).count(),
                v.len()
            )
        };
        let moved: u32 = measured.iter().map(|s| s.migrations).sum();
        fig.rows.push(vec![
            r.arm.to_string(),
            r.lambda.to_string(),
            measured.len().to_string(),
            measured
                .iter()
                .filter(|s| s.response_ms.is_some())
                .count()
                .to_string(),
            format!("{:.2} %", pct(&measured)),
            frac(&kind(true)),
            frac(&kind(false)),
            moved.to_string(),
        ]);
        let sum = |f: fn(&NodeCounters) -> u64| -> u64 { r.counters.iter().map(f).sum() };
        let all_moves: u32 = r.rows.iter().map(|s| s.migrations).sum();
        own.rows.push(vec![
            r.arm.to_string(),
            r.lambda.to_string(),
            r.rows.len().to_string(),
            format!(
                "{} / {}",
                sum(|c| c.opened),
                r.rows.iter().filter(|s| s.response_ms.is_some()).count()
            ),
            format!(
                "{} / {}",
                sum(|c| c.rejected),
                r.rows.iter().filter(|s| s.rejected).count()
            ),
            format!("{} / {all_moves}", sum(|c| c.moved)),
        ]);
        acc.push((r.arm, r.lambda, pct(&measured), f64::from(moved)));
    }
    let series = |f: fn(&(Arm, f64, f64, f64)) -> f64| -> Vec<Series> {
        sc.arms()
            .into_iter()
            .map(|a| Series {
                name: a.to_string(),
                points: acc
                    .iter()
                    .filter(|x| x.0 == a)
                    .map(|x| (x.1, f(x)))
                    .collect(),
            })
            .collect()
    };
    let plots = vec![
        Plot {
            file: "acceptance".into(),
            title: "Acceptance rate without and with the planner".into(),
            x_label: "λ (requests per minute)".into(),
            y_label: "accepted / requests (%)".into(),
            series: series(|x| x.2),
        },
        Plot {
            file: "migrations".into(),
            title: "Sessions moved (seen by their clients)".into(),
            x_label: "λ (requests per minute)".into(),
            y_label: "migrations per run".into(),
            series: series(|x| x.3),
        },
    ];
    let p = &sc.cluster.planner;
    let share = sc.sweep.as_ref().map_or(0.0, |s| s.playback_share);
    let notes = vec![
        ("Paper".into(), sc.paper.clone()),
        ("Scaling".into(), sc.scaling.clone()),
        (
            "Lab".into(),
            format!(
                "real processes: {n} `vigil serve` nodes (the `vigil` beside `vigil-lab`) on 127.0.0.1…{n} (shared storage root in a temp dir, cluster certificates: placement over QUIC and session moves by the migration RPC), `[limits] max_sessions` = {cap} (the cap; a SETUP past it gets 503), placement least-connections, REM off, `[cluster.edge]` off; a fresh cluster for every arm and rate. Camera k (of {cams}) is live on node k mod {n} only (the demo clip, 0.6 Mb/s, not recorded): its viewers can only be served there. {play:.0} % of the requests are playbacks of a camera's recording (any node: shared root; movable), the rest live views; the camera by the scenario's choice for both. Poisson arrivals at each rate for {dur:.0} s, sessions exp({len:.0} s), entry node uniform; the same seeded arrivals for both arms. The planner arm: `[cluster.planner]` enabled, every {per} ms, window {win} ms, horizon {hor} ms, quantile {q}, at most {mm} moves per plan. Acceptance counts the requests after the first {warmup:.0} s (the cluster filling up); the counters table counts whole runs. Migrations: media-source changes seen by the clients, beside the nodes' `vigil_migrations_total{{result=\"moved\"}}`.",
                n = sc.nodes.count,
                cap = sc.nodes.max_sessions,
                cams = sc.workload.cameras,
                play = share * 100.0,
                dur = sc.sweep.as_ref().map_or(0.0, |s| s.duration_min * 60.0),
                len = sc.workload.session_mean_secs,
                per = p.period_ms,
                win = p.window_ms,
                hor = p.horizon_ms,
                q = p.quantile,
                mm = p.max_moves,
            ),
        ),
        ("Machine".into(), super::calibrate::machine()),
        (
            "Runs".into(),
            runs.iter().map(|r| r.note.as_str()).collect::<Vec<_>>().join(". "),
        ),
    ];
    Report {
        notes,
        tables: vec![fig, own],
        plots,
        sessions: runs.into_iter().flat_map(|r| r.rows).collect(),
        mode: "lab".into(),
        ..Report::simulation(sc, command)
    }
}
