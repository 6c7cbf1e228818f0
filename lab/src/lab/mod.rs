//! `vigil-lab lab <scenario>` (also `vigil lab`): a scenario of the seeds' experiments on
//! real processes. Starts the scenario's nodes (`vigil serve`, the binary beside this one,
//! on 127.0.0.1…N, one shared storage root in a temp dir, cluster certificates, the arm's
//! placement policy and REM switch, `[storage.emulate]` from the scenario), writes the
//! cameras' recordings, runs the scenario's closed-loop clients in this process, and writes
//! the same report folder as `vigil sim` (mode "lab") plus the calibration against a
//! simulation of the same scenario and seed.
//!
//! Reused, not rewritten: the scenario format and its validation, the clients' seeded draws
//! and the report folder (Markdown, CSVs, plots) are `vigil-sim`'s; the per-step figures are
//! its `StepFigures` filled from measurements; the clients are `vigil_testkit::client`'s
//! viewer and the nodes `vigil_testkit::serve`'s processes. `vod` scenarios (§A) run here;
//! `gateway` scenarios (§B) in `gateway` (with `tours`), `feedback` scenarios (§C) in
//! [`feedback`], `planner` scenarios (§D.2) in [`planner`].

mod binding;
mod calibrate;
pub mod clients;
mod feedback;
mod gateway;
pub mod nodes;
mod planner;
mod probe;
mod tours;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use vigil_sim::report::SessionRow;
use vigil_sim::scenario::{Arm, Kind, Scenario};
use vigil_sim::vod::{ArmResult, StepAcc, StepFigures};

use clients::{camera_name, recording_start_ms, Plan, Shared};
use nodes::{Cluster, Site};
use vigil_testkit::media;

/// Where a lab run's nodes and clients run.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hosts {
    /// Every node on 127.0.0.x, the clients in this process, all on one loopback.
    Loopback,
    /// A bed of hosts (`vigil_testkit::hosts`): each node in a network namespace of its
    /// own with its own address on one bridge, the clients and the lab's probes in
    /// another; real sockets between them, no loopback shortcut.
    Netns,
}

pub fn run(
    scenario: &str,
    out: Option<PathBuf>,
    seed: Option<u64>,
    no_emulation: bool,
    threads: usize,
    hosts: Hosts,
) -> anyhow::Result<()> {
    let (sc, out, command) = crate::sim::prepare("lab", scenario, out, seed, no_emulation)?;
    match (sc.kind, hosts) {
        (Kind::Vod, _) => {}
        (kind, Hosts::Netns) => bail!(
            "scenario {}: --hosts netns runs vod scenarios; a {kind:?} scenario runs on loopback",
            sc.name
        ),
        (Kind::Gateway, _) => return gateway::run(sc, out, command, threads),
        (Kind::Feedback, _) => return feedback::run(sc, &out, &command, threads),
        (Kind::Planner, _) => return planner::run(sc, &out, &command, threads),
    }
    for arm in sc.arms() {
        if !matches!(arm, Arm::Place { .. }) {
            bail!("scenario {}: arm {arm} is not a placement policy", sc.name);
        }
    }
    // The simulation of the same scenario and seed, for the calibration table.
    let simulated = vigil_sim::vod::run_vod(&sc);

    let (_tmp, mut site) = prepare_site(&sc)?;
    let sc = Arc::new(sc);
    let arms = |site: &Site| -> anyhow::Result<_> {
        let runtime = crate::bench::runtime(threads)?;
        let mut results = Vec::new();
        let mut runs = Vec::new();
        for (k, arm) in sc.arms().into_iter().enumerate() {
            let mut cluster = Cluster::start(site, &sc, arm, k)?;
            let (res, note) = runtime.block_on(run_arm(sc.clone(), arm, &cluster));
            cluster.stop();
            runs.push(note);
            results.push(res);
        }
        Ok((results, runs))
    };
    let (results, mut runs) = match hosts {
        Hosts::Loopback => arms(&site)?,
        Hosts::Netns => {
            let (bed, clients) = nodes::on_hosts(&mut site, sc.nodes.count)?;
            // Everything that talks to the nodes — the start-up waits, the clients, the
            // probes, the runtime's threads — runs inside the clients' host.
            let r = bed.within(&clients, || arms(&site))?;
            drop(bed);
            r
        }
    };
    if hosts == Hosts::Netns {
        for r in &mut runs {
            r.note = format!(
                "{}, the nodes on a bed of hosts (`--hosts netns`: each in its own network namespace, the clients in another, on one bridge, 198.18.0.0/24)",
                r.note
            );
        }
    }
    let report = calibrate::lab_report(&sc, results, simulated, runs, &command);
    write_report(&report, &out, "Calibration")
}

/// A temp dir (removed when the first value drops) holding the run's storage root with
/// every camera's recordings and the nodes' certificates.
fn prepare_site(sc: &Scenario) -> anyhow::Result<(tempfile::TempDir, Site)> {
    let tmp = tempfile::Builder::new()
        .prefix("vigil-lab-")
        .tempdir()
        .context("creating the lab's temp dir")?;
    let site = Site::new(tmp.path(), sc.nodes.count)?;
    let wrote = Instant::now();
    write_library(sc, &site.root)?;
    eprintln!(
        "vigil lab: {} cameras × {} recordings of {} s written in {:.1} s",
        sc.workload.cameras,
        sc.workload.recordings_per_camera,
        sc.workload.recording_secs,
        wrote.elapsed().as_secs_f64()
    );
    Ok((tmp, site))
}

/// Writes the report folder, shows the table whose title starts with `show` on stderr
/// and prints the report's path.
fn write_report(report: &vigil_sim::report::Report, out: &Path, show: &str) -> anyhow::Result<()> {
    let written = report
        .write(out)
        .with_context(|| format!("writing the report to {}", out.display()))?;
    if let Some(t) = report.tables.iter().find(|t| t.title.starts_with(show)) {
        eprint!("{}", t.markdown());
    }
    println!("{}", written.dir.join("report.md").display());
    Ok(())
}

/// Every camera's recordings: one camera written, the others linked to it (`media`).
fn write_library(sc: &Scenario, root: &Path) -> anyhow::Result<()> {
    let w = &sc.workload;
    let first = camera_name(0);
    let segment = Duration::from_secs_f64(w.segment_secs);
    for rec in 0..w.recordings_per_camera {
        media::write_recording(
            root,
            &first,
            recording_start_ms(sc, rec),
            w.recording_secs.ceil() as u64,
            segment,
        )
        .with_context(|| format!("writing recording {rec} of {first}"))?;
    }
    for cam in 1..w.cameras {
        media::link_camera(root, &first, &camera_name(cam))
            .with_context(|| format!("linking the recordings of {}", camera_name(cam)))?;
    }
    Ok(())
}

/// What the report says about one arm's run besides its figures.
pub(crate) struct ArmRun {
    pub note: String,
    pub counters: Vec<probe::NodeCounters>,
}

/// One arm on a fresh cluster: clients, λ sampler and cache windows side by side.
async fn run_arm(sc: Arc<Scenario>, arm: Arm, cluster: &Cluster) -> (ArmResult, ArmRun) {
    let ramp = sc.ramp.clone().unwrap_or(vigil_sim::scenario::Ramp {
        steps: Vec::new(),
        step_secs: 1.0,
        settle_secs: 0.0,
        spread_secs: None,
    });
    let total = ramp.step_secs * ramp.steps.len() as f64;
    let plan = Plan::new(sc.clone(), arm, cluster, total);
    let shared = Arc::new(Shared::default());
    let apis = cluster.apis();
    let ids = cluster.ids();
    let bar = probe::progress(total);
    let wall = Instant::now();
    let (_, sampled, cache) = tokio::join!(
        clients::run(plan.clone(), shared.clone()),
        probe::sample(
            plan.clone(),
            apis.clone(),
            ids.clone(),
            shared.clone(),
            bar.clone()
        ),
        probe::cache_windows(plan.clone(), apis.clone()),
    );
    bar.finish();
    // Every client has stopped: the nodes' own totals, for the consistency table.
    let counters = probe::node_counters(&apis, &ids).await;
    let wall = wall.elapsed();
    let mut rows: Vec<SessionRow> = shared.rows.lock().map(|r| r.clone()).unwrap_or_default();
    rows.sort_by(|a, b| a.requested_s.total_cmp(&b.requested_s));
    let moves: Vec<f64> = shared.moves.lock().map(|m| m.clone()).unwrap_or_default();
    let steps = ramp
        .steps
        .iter()
        .enumerate()
        .map(|(s, &level)| {
            let in_window = |t: f64| ramp.measured_step(vigil_sim::engine::secs(t)) == Some(s);
            let asked: Vec<&SessionRow> =
                rows.iter().filter(|r| in_window(r.requested_s)).collect();
            let l = sampled.steps.get(s).cloned().unwrap_or_default();
            let c = cache.get(s).copied().unwrap_or_default();
            let acc = StepAcc {
                requests: asked.len() as u64,
                rejected: asked.iter().filter(|r| r.rejected).count() as u64,
                responses: asked.iter().filter_map(|r| r.response_ms).collect(),
                hits: c.hits,
                misses: c.misses,
                reads: c.loads,
                migrations: moves.iter().filter(|&&t| in_window(t)).count() as u64,
                ..l
            };
            StepFigures {
                // The nodes' count: a client cannot see where its first segment came from.
                first_hit_ratio: match c.opens {
                    0 => f64::NAN,
                    n => c.opens_cached as f64 / n as f64,
                },
                ..StepFigures::from_acc(level, &acc)
            }
        })
        .collect();
    let note = shared.note(arm, rows.len(), wall);
    (
        ArmResult {
            arm,
            steps,
            rows,
            events: 0,
            wall,
            simulated: Duration::from_secs_f64(total),
            load_trace: sampled.trace,
        },
        ArmRun { note, counters },
    )
}
