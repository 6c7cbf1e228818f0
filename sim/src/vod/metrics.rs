//! Per-step figures of a vod run and the report made of them.

use std::collections::HashMap;
use std::time::Duration;

use crate::report::{Plot, Report, Series, SessionRow, Speed, Table};
use crate::scenario::{Arm, Scenario};

/// Node load traces are kept for clusters up to this size (one line per node).
pub const TRACE_NODES: usize = 20;

/// Counters of one ramp step's measured window.
#[derive(Debug, Clone, Default)]
pub struct StepAcc {
    pub requests: u64,
    pub rejected: u64,
    pub responses: Vec<f64>,
    /// Requests whose first segment was in the chosen node's cache.
    pub first_hits: u64,
    pub hits: u64,
    pub misses: u64,
    pub reads: u64,
    pub migrations: u64,
    pub samples: u64,
    pub variance_sum: f64,
    pub load_sum: f64,
    pub load_max_sum: f64,
}

#[derive(Debug, Default)]
pub struct Acc {
    pub steps: Vec<StepAcc>,
    /// Pause a client takes after each session (drawn with its request).
    pub think: HashMap<u32, f64>,
    /// (seconds, Load per node) once a second in measured windows.
    pub load_trace: Vec<(f64, Vec<f64>)>,
}

impl Acc {
    pub fn new(steps: usize) -> Self {
        Self {
            steps: vec![StepAcc::default(); steps],
            ..Self::default()
        }
    }
}

/// The figures of one step (concurrent-client level).
#[derive(Debug, Clone, PartialEq)]
pub struct StepFigures {
    pub level: u32,
    pub requests: u64,
    pub rejected: u64,
    pub mean_ms: f64,
    pub p95_ms: f64,
    /// §A.2 λ, averaged over the window's samples.
    pub variance: f64,
    pub mean_load: f64,
    pub max_load: f64,
    /// Segment lookups (first segments and playing sessions') answered by the cache.
    pub hit_ratio: f64,
    /// Placed requests whose first segment was cached on the chosen node.
    pub first_hit_ratio: f64,
    pub reads: u64,
    pub migrations: u64,
}

impl StepFigures {
    /// The figures of a step's counters (a simulated step's, or a lab run's measurements).
    pub fn from_acc(level: u32, a: &StepAcc) -> StepFigures {
        let mut r = a.responses.clone();
        let n = a.samples.max(1) as f64;
        StepFigures {
            level,
            requests: a.requests,
            rejected: a.rejected,
            mean_ms: if r.is_empty() {
                f64::NAN
            } else {
                r.iter().sum::<f64>() / r.len() as f64
            },
            p95_ms: quantile(&mut r, 0.95),
            variance: a.variance_sum / n,
            mean_load: a.load_sum / n,
            max_load: a.load_max_sum / n,
            hit_ratio: a.hits as f64 / (a.hits + a.misses).max(1) as f64,
            first_hit_ratio: a.first_hits as f64 / (a.requests - a.rejected).max(1) as f64,
            reads: a.reads,
            migrations: a.migrations,
        }
    }
}

/// One arm's outcome.
pub struct ArmResult {
    pub arm: Arm,
    pub steps: Vec<StepFigures>,
    pub rows: Vec<SessionRow>,
    pub events: u64,
    pub wall: Duration,
    pub simulated: Duration,
    pub load_trace: Vec<(f64, Vec<f64>)>,
}

/// p-quantile by the nearest-rank method (p in [0, 1]).
pub fn quantile(xs: &mut [f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let rank = ((p * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

impl ArmResult {
    pub(super) fn from_sim(arm: Arm, sim: super::VodSim<'_>, events: u64, wall: Duration) -> Self {
        let levels = sim.sc.levels();
        let simulated = sim
            .sc
            .ramp
            .as_ref()
            .map_or(0.0, |r| r.step_secs * r.steps.len() as f64);
        let steps = sim
            .m
            .steps
            .iter()
            .zip(levels)
            .map(|(a, level)| StepFigures::from_acc(level, a))
            .collect();
        ArmResult {
            arm,
            steps,
            rows: sim.rows,
            events,
            wall,
            simulated: Duration::from_secs_f64(simulated),
            load_trace: sim.m.load_trace,
        }
    }

    /// Simulated hours per wall-clock second.
    pub fn speed(&self) -> f64 {
        self.simulated.as_secs_f64() / 3600.0 / self.wall.as_secs_f64().max(1e-9)
    }
}

fn pct(new: f64, base: f64) -> String {
    if base.abs() < 1e-12 || !new.is_finite() || !base.is_finite() {
        "–".into()
    } else {
        format!("{:+.1} %", (new - base) / base * 100.0)
    }
}

fn plot(
    file: &str,
    title: &str,
    y: &str,
    res: &[ArmResult],
    f: impl Fn(&StepFigures) -> f64,
) -> Plot {
    Plot {
        file: file.into(),
        title: title.into(),
        x_label: "concurrent playback clients".into(),
        y_label: y.into(),
        series: res
            .iter()
            .map(|r| Series {
                name: r.arm.to_string(),
                points: r.steps.iter().map(|s| (f64::from(s.level), f(s))).collect(),
            })
            .collect(),
    }
}

/// The report of a vod scenario's arms.
pub fn vod_report(sc: &Scenario, res: Vec<ArmResult>, command: &str) -> Report {
    let mut figures = Table {
        title: "Figures per step (measured after each step's settle time)".into(),
        columns: [
            "clients",
            "policy",
            "requests",
            "rejected",
            "mean ms",
            "p95 ms",
            "λ",
            "mean Load",
            "max Load",
            "hit ratio",
            "first-segment hits",
            "storage reads",
            "migrations",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    let levels: Vec<u32> = res
        .first()
        .map(|r| r.steps.iter().map(|s| s.level).collect())
        .unwrap_or_default();
    for (i, level) in levels.iter().enumerate() {
        for r in &res {
            let s = &r.steps[i];
            figures.rows.push(vec![
                level.to_string(),
                r.arm.to_string(),
                s.requests.to_string(),
                s.rejected.to_string(),
                format!("{:.2}", s.mean_ms),
                format!("{:.2}", s.p95_ms),
                format!("{:.1}", s.variance),
                format!("{:.1}", s.mean_load),
                format!("{:.1}", s.max_load),
                format!("{:.3}", s.hit_ratio),
                format!("{:.3}", s.first_hit_ratio),
                s.reads.to_string(),
                s.migrations.to_string(),
            ]);
        }
    }
    let mut versus = Table {
        title: format!(
            "Against {} (the paper's light-load first), per step",
            res.first().map_or(String::new(), |r| r.arm.to_string())
        ),
        columns: [
            "clients",
            "policy",
            "mean response",
            "p95 response",
            "λ",
            "storage reads",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    if let Some(base) = res.first() {
        for (i, level) in levels.iter().enumerate() {
            let b = &base.steps[i];
            for r in res.iter().skip(1) {
                let s = &r.steps[i];
                versus.rows.push(vec![
                    level.to_string(),
                    r.arm.to_string(),
                    pct(s.mean_ms, b.mean_ms),
                    pct(s.p95_ms, b.p95_ms),
                    pct(s.variance, b.variance),
                    pct(s.reads as f64, b.reads as f64),
                ]);
            }
        }
    }
    let speed = Table::speed(
        &res.iter()
            .map(|r| Speed {
                arm: r.arm.to_string(),
                simulated_s: r.simulated.as_secs_f64(),
                wall_s: r.wall.as_secs_f64(),
                events: r.events,
            })
            .collect::<Vec<_>>(),
    );
    let mut plots = vec![
        plot("response_mean", "Mean response time", "ms", &res, |s| {
            s.mean_ms
        }),
        plot("response_p95", "p95 response time", "ms", &res, |s| {
            s.p95_ms
        }),
        plot("variance", "Load variance λ (§A.2)", "λ", &res, |s| {
            s.variance
        }),
        plot(
            "hit_ratio",
            "Cache hit ratio (all segment lookups)",
            "hits / lookups",
            &res,
            |s| s.hit_ratio,
        ),
        plot(
            "first_hit_ratio",
            "First segment from the cache",
            "share of placed requests",
            &res,
            |s| s.first_hit_ratio,
        ),
        plot(
            "storage_reads",
            "Storage reads per measured window",
            "reads",
            &res,
            |s| s.reads as f64,
        ),
        plot(
            "migrations",
            "REM migrations per measured window",
            "moves",
            &res,
            |s| s.migrations as f64,
        ),
        plot(
            "rejections",
            "Rejected requests per measured window",
            "requests",
            &res,
            |s| s.rejected as f64,
        ),
    ];
    if let Some(r) = res.iter().find(|r| !r.load_trace.is_empty()) {
        let n = r.load_trace[0].1.len();
        plots.push(Plot {
            file: "node_load".into(),
            title: format!("Load per node over time ({})", r.arm),
            x_label: "virtual time (s)".into(),
            y_label: "Load (0–100)".into(),
            series: (0..n)
                .map(|i| Series {
                    name: format!("n{i}"),
                    points: r.load_trace.iter().map(|(t, l)| (*t, l[i])).collect(),
                })
                .collect(),
        });
    }
    let storage = &sc.storage;
    let notes = vec![
        ("Paper".into(), sc.paper.clone()),
        ("Scaling".into(), sc.scaling.clone()),
        (
            "Storage emulation".into(),
            format!(
                "{}; {} MiB cache per node (up to {:.0} % of it keeping the segments where playbacks began), {} segments read ahead.",
                storage.describe(),
                sc.nodes.cache_mb,
                sc.nodes.cache_start_share * 100.0,
                sc.nodes.read_ahead_segments
            ),
        ),
        (
            "Model".into(),
            "Virtual time; the placement and REM code is vigil-cluster's, unchanged; each node's cache is vigil-cache's SegmentCache (same byte budget, LRU and protected start list). Response time = RTSP round trips (DESCRIBE at a random entry node, the scheduler call, the 302, DESCRIBE/SETUP/PLAY at the chosen node, each costing request_ms/(1−ρ)) + the first segment (cache or storage) + the keyframe's first RTP packet over the node's spare bandwidth (what the lab measures). Nodes report within report_ms of every change (reaching the scheduler report_delay_ms later, which keeps the placements made since the report was built, as the server does); REM runs on each report.".into(),
        ),
        (
            "Calibration".into(),
            "This report alone is not calibrated: `vigil lab` runs a vod scenario on real processes and puts its ratios and this simulation's side by side (docs/EVALUATION.md).".into(),
        ),
    ];
    let mut sessions = Vec::new();
    for r in res {
        sessions.extend(r.rows);
    }
    Report {
        notes,
        tables: vec![figures, versus, speed],
        plots,
        sessions,
        ..Report::simulation(sc, command)
    }
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn nearest_rank_quantile_by_hand() {
        // 20 values 1..=20: p95 is rank ceil(19) = 19; median rank 10.
        let mut xs: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(quantile(&mut xs, 0.95), 19.0);
        assert_eq!(quantile(&mut xs, 0.5), 10.0);
        assert!(quantile(&mut [], 0.5).is_nan());
    }
}
