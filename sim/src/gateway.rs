//! §B in virtual time: patrol tours on data gateways, fixed ("manual") camera binding
//! against the balanced gateway, which runs the unchanged `vigil_cluster::gateway` code
//! every T_s: GL (eq. 1–4), Brown forecast and overload judgement (B.3), which idle camera
//! to move (B.5), the roulette destination (B.4) and device sleep (B.1).
//!
//! Model choices: a gateway's CPU is `cpu_per_camera` per awake camera (its ingest and
//! recording) plus `cpu_per_viewer` per live viewer; memory bandwidth counts each awake
//! camera's and each viewer's bytes once. A live start costs `start_ms / (1 − R_cpu)` on the
//! gateway holding the camera, plus `wake_ms` when the camera sleeps. A tour shows its
//! cameras one at a time, switching every `switch_secs`; tours start one by one over each
//! ramp step (the ramp's levels are tours running in the whole cluster, dealt to gateways in
//! proportion to `tours_per_node`).

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use vigil_cluster::gateway::{
    awake_share, camera_to_move, cameras_to_sleep, gateway_load, is_overloaded, r_membw, roulette,
    Brown, CameraUsage, GatewayLoad, Zone,
};

use crate::engine::{secs, Micros, Queue, MS, SEC};
use crate::report::{Plot, Report, Series, SessionRow, Table};
use crate::scenario::{Arm, Scenario};
use crate::vod::quantile;

/// The §B workload: tours per gateway and what serving costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySpec {
    /// Tours (patrol groups) whose cameras are bound to each gateway at the start.
    pub tours_per_node: Vec<u32>,
    pub cameras_per_tour: u32,
    pub switch_secs: f64,
    pub cpu_per_camera: f64,
    pub cpu_per_viewer: f64,
    pub start_ms: f64,
    pub wake_ms: f64,
    /// §B.2 X_l, the memory bandwidth one stream (an awake camera or a viewer) takes, MB/s.
    /// Unset: its bitrate (relay without transcoding, as vigil does).
    #[serde(default)]
    pub x_mbytes_per_stream: Option<f64>,
}

/// The tours in the order they start, as (gateway, its tour number): interleaved, the
/// first tour of every gateway, then the second…, so each step adds tours on every gateway
/// in proportion to `tours_per_node`. Shared with `vigil lab`, whose tours start alike.
pub fn tour_order(g: &GatewaySpec) -> Vec<(usize, usize)> {
    let most = g.tours_per_node.iter().copied().max().unwrap_or(0) as usize;
    (0..most)
        .flat_map(|i| {
            g.tours_per_node
                .iter()
                .enumerate()
                .filter(move |(_, &t)| i < t as usize)
                .map(move |(k, _)| (k, i))
        })
        .collect()
}

/// When each of the first tours of [`tour_order`] starts: the ramp's level is the tours
/// running; a step's new tours start evenly over its spread. At most `tours` entries.
pub fn tour_starts(r: &crate::scenario::Ramp, tours: usize) -> Vec<Micros> {
    let mut out = Vec::new();
    for (i, &level) in r.steps.iter().enumerate() {
        let level = (level as usize).min(tours);
        let new = level.saturating_sub(out.len());
        for j in 0..new {
            out.push(secs(r.step_secs) * i as i64 + secs(r.spread()) * j as i64 / new as i64);
        }
    }
    out
}

enum Ev {
    StartTour(usize),
    Switch(usize),
    Sample,
}

struct Cam {
    node: usize,
    asleep: bool,
    viewers: u32,
    usage: CameraUsage,
    busy_since: Option<Micros>,
}

struct Sim<'a> {
    sc: &'a Scenario,
    g: &'a GatewaySpec,
    balanced: bool,
    q: Queue<Ev>,
    cams: Vec<Cam>,
    /// Each tour's cameras and the index shown now.
    tours: Vec<(Vec<usize>, usize)>,
    brown: Vec<Brown>,
    rng: StdRng,
    starts: Vec<Vec<f64>>,
    rows: Vec<SessionRow>,
    trace: Vec<(f64, Vec<f64>)>,
    moves: Vec<(usize, usize)>,
    slept: u64,
}

impl<'a> Sim<'a> {
    fn new(sc: &'a Scenario, g: &'a GatewaySpec, balanced: bool) -> Self {
        let n = sc.nodes.count;
        let per = sc.workload.cameras / n;
        let cams = (0..sc.workload.cameras)
            .map(|c| Cam {
                node: (c / per.max(1)).min(n - 1),
                asleep: false,
                viewers: 0,
                usage: CameraUsage {
                    camera: format!("cam-{c:06}"),
                    idle: true,
                    asleep: false,
                    last_finished_ms: None,
                    online_since_ms: 0,
                    busy_ms: 0,
                },
                busy_since: None,
            })
            .collect();
        // Tours: gateway k's tours take its first cameras, 4 by 4; started interleaved.
        let cpt = g.cameras_per_tour as usize;
        let tours = tour_order(g)
            .into_iter()
            .map(|(k, i)| {
                let c0 = k * per + i * cpt;
                ((c0..c0 + cpt).collect(), 0)
            })
            .collect();
        let alpha = sc.cluster.gateway.alpha;
        Self {
            sc,
            g,
            balanced,
            q: Queue::default(),
            cams,
            tours,
            brown: vec![Brown::new(alpha); n],
            rng: crate::dist::policy_rng(sc.seed),
            starts: vec![Vec::new(); sc.ramp.as_ref().map_or(0, |r| r.steps.len())],
            rows: Vec::new(),
            trace: Vec::new(),
            moves: Vec::new(),
            slept: 0,
        }
    }

    /// What gateway k knows of its cameras' use (§B.1, §B.5 inputs).
    fn usage(&self, k: usize) -> Vec<CameraUsage> {
        self.cams
            .iter()
            .filter(|c| c.node == k)
            .map(|c| c.usage.clone())
            .collect()
    }

    fn r_cpu(&self, k: usize) -> f64 {
        let (mut awake, mut viewers) = (0u32, 0u32);
        for c in self.cams.iter().filter(|c| c.node == k) {
            awake += u32::from(!c.asleep);
            viewers += c.viewers;
        }
        (self.g.cpu_per_camera * f64::from(awake) + self.g.cpu_per_viewer * f64::from(viewers))
            .min(1.0)
    }

    /// §B.2 GL of gateway k.
    fn gl(&self, k: usize) -> f64 {
        let cfg = &self.sc.cluster.gateway;
        let bytes = self
            .g
            .x_mbytes_per_stream
            .map_or(self.sc.workload.bitrate_mbps * 1e6 / 8.0, |x| x * 1e6);
        let (mut total, mut awake, mut x) = (0u32, 0u32, Vec::new());
        for c in self.cams.iter().filter(|c| c.node == k) {
            total += 1;
            if !c.asleep {
                awake += 1;
                x.push(bytes * f64::from(1 + c.viewers));
            }
        }
        let membw = r_membw(&x, cfg.mem_transfer_rate, cfg.mem_bus_bits);
        gateway_load(self.r_cpu(k), membw, awake_share(awake, total), cfg)
    }

    fn step_of(&self) -> Option<usize> {
        self.sc.ramp.as_ref()?.measured_step(self.q.now())
    }

    fn run(&mut self) -> u64 {
        let Some(r) = self.sc.ramp.clone() else {
            return 0;
        };
        let end = r.end_us();
        for (t, at) in tour_starts(&r, self.tours.len()).into_iter().enumerate() {
            self.q.at(at, Ev::StartTour(t));
        }
        self.q.at(0, Ev::Sample);
        while let Some(ev) = self.q.next_until(end) {
            match ev {
                Ev::StartTour(t) => self.show(t),
                Ev::Switch(t) => {
                    let (c, next) = {
                        let (cams, i) = &self.tours[t];
                        (cams[*i], (*i + 1) % cams.len())
                    };
                    self.stop_viewing(c);
                    self.tours[t].1 = next;
                    self.show(t);
                }
                Ev::Sample => {
                    self.sample();
                    self.q.after(
                        self.sc.cluster.gateway.sample_period_ms as i64 * MS,
                        Ev::Sample,
                    );
                }
            }
        }
        self.q.processed()
    }

    /// A tour switches to its next camera: a live start on the camera's gateway.
    fn show(&mut self, t: usize) {
        let (cams, i) = &self.tours[t];
        let c = cams[*i];
        let now = self.q.now();
        let k = self.cams[c].node;
        let rho = self.r_cpu(k).min(0.98);
        let mut ms = self.g.start_ms / (1.0 - rho) + 2.0 * self.sc.workload.rtt_ms;
        let step = self.step_of();
        let cam = &mut self.cams[c];
        if cam.asleep {
            cam.asleep = false;
            cam.usage.asleep = false;
            ms += self.g.wake_ms;
        }
        cam.viewers += 1;
        cam.usage.idle = false;
        cam.busy_since.get_or_insert(now);
        if let Some(s) = step {
            self.starts[s].push(ms);
        }
        self.rows.push(SessionRow {
            policy: if self.balanced { "balanced" } else { "manual" }.into(),
            step: self
                .sc
                .ramp
                .as_ref()
                .map_or(String::new(), |r| r.label_at(now)),
            session: self.rows.len() as u64,
            client: t as u64,
            camera: cam.usage.camera.clone(),
            requested_s: now as f64 / SEC as f64,
            node: format!("V{}", k + 1),
            response_ms: Some(ms),
            scale: 1.0,
            ended_s: Some((now + secs(self.g.switch_secs)) as f64 / SEC as f64),
            ..SessionRow::default()
        });
        self.q.after(secs(self.g.switch_secs), Ev::Switch(t));
    }

    fn stop_viewing(&mut self, c: usize) {
        let now = self.q.now();
        let cam = &mut self.cams[c];
        cam.viewers = cam.viewers.saturating_sub(1);
        if cam.viewers == 0 {
            cam.usage.idle = true;
            cam.usage.last_finished_ms = Some(now / MS);
            if let Some(s) = cam.busy_since.take() {
                cam.usage.busy_ms += (now - s) / MS;
            }
        }
    }

    /// Every T_s: the per-node loads for the figures, and for `balanced` the §B decisions.
    fn sample(&mut self) {
        let n = self.sc.nodes.count;
        let gls: Vec<f64> = (0..n).map(|k| self.gl(k)).collect();
        self.trace
            .push((self.q.now() as f64 / SEC as f64, gls.clone()));
        if !self.balanced {
            return;
        }
        let cfg = self.sc.cluster.gateway;
        let now_ms = self.q.now() / MS;
        for k in 0..n {
            // §B.1 sleep.
            let usage = self.usage(k);
            for name in cameras_to_sleep(&usage, now_ms, &cfg) {
                if let Some(c) = self.cams.iter_mut().find(|c| c.usage.camera == name) {
                    c.asleep = true;
                    c.usage.asleep = true;
                    self.slept += 1;
                }
            }
        }
        let gls: Vec<f64> = (0..n).map(|k| self.gl(k)).collect();
        for (b, gl) in self.brown.iter_mut().zip(gls) {
            b.update(gl);
        }
        for k in 0..n {
            if !is_overloaded(self.gl(k), &self.brown[k], &cfg) {
                continue;
            }
            // §B.5: the idle camera to move; §B.4: where.
            let usage = self.usage(k);
            let Some(pick) = camera_to_move(&usage, now_ms, cfg.recent_m).map(|u| u.camera.clone())
            else {
                continue;
            };
            let dests: Vec<GatewayLoad> = (0..n)
                .filter(|&j| j != k)
                .map(|j| {
                    let gl = self.gl(j);
                    GatewayLoad {
                        node: j.to_string(),
                        gl,
                        overloaded: vigil_cluster::gateway::zone(gl, &cfg) == Zone::Overload,
                    }
                })
                .collect();
            let Some(dest) = roulette(&dests, &mut self.rng).and_then(|d| d.node.parse().ok())
            else {
                continue;
            };
            if let Some(c) = self.cams.iter_mut().find(|c| c.usage.camera == pick) {
                c.node = dest;
                self.moves.push((k, dest));
            }
        }
    }
}

/// One arm's measurements, simulated or measured on real nodes (`vigil lab`): what the
/// §B report is made of.
#[derive(Debug, Clone, Default)]
pub struct GatewayArm {
    pub arm: String,
    /// Live-start response times (ms) per ramp step's measured window.
    pub starts: Vec<Vec<f64>>,
    /// Cameras moved, as (from, to) node indexes.
    pub moves: Vec<(usize, usize)>,
    /// Cameras put to sleep.
    pub slept: u64,
    /// (seconds, GL per node).
    pub trace: Vec<(f64, Vec<f64>)>,
    pub rows: Vec<SessionRow>,
    /// What the report says of the run (events and wall time, or the lab's run).
    pub note: String,
}

/// Runs `manual` and/or `balanced` and writes the report.
pub fn run(sc: &Scenario, g: &GatewaySpec, command: &str) -> Report {
    let arms = sc
        .arms()
        .into_iter()
        .map(|arm| {
            let wall = std::time::Instant::now();
            let mut sim = Sim::new(sc, g, arm == Arm::Balanced);
            let events = sim.run();
            GatewayArm {
                arm: arm.to_string(),
                starts: sim.starts,
                moves: sim.moves,
                slept: sim.slept,
                trace: sim.trace,
                rows: sim.rows,
                note: format!(
                    "{events} events in {:.2} s of wall time",
                    wall.elapsed().as_secs_f64()
                ),
            }
        })
        .collect();
    let mut r = gateway_report(sc, arms, "virtual time (s)", command);
    r.notes.push((
        "Model".into(),
        "A gateway's CPU: cpu_per_camera per awake camera + cpu_per_viewer per viewer; a live start costs start_ms/(1 − R_cpu) (+ wake_ms if the camera slept). The balanced arm runs vigil-cluster's gateway functions every T_s.".into(),
    ));
    r.notes.push((
        "Calibration".into(),
        "Not compared here: `vigil lab` runs this scenario scaled down (`seed-gateway-lab`) on real processes, whose report is separate (docs/EVALUATION.md).".into(),
    ));
    r
}

/// The §B report of some arms: live-start response time per step, cameras moved and put
/// to sleep, GL per node over time, and every live start as a session row.
pub fn gateway_report(
    sc: &Scenario,
    arms: Vec<GatewayArm>,
    x_label: &str,
    command: &str,
) -> Report {
    let levels = sc.levels();
    let mut table = Table {
        title: "Live-start response time per step (tours running)".into(),
        columns: ["tours", "binding", "starts", "mean ms", "p95 ms"]
            .map(String::from)
            .to_vec(),
        rows: Vec::new(),
    };
    let mut moves_table = Table {
        title: "Cameras moved and put to sleep (balanced)".into(),
        columns: ["from", "to", "cameras"].map(String::from).to_vec(),
        rows: Vec::new(),
    };
    let mut plots = Vec::new();
    let mut means: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut sessions = Vec::new();
    let mut notes = vec![
        ("Paper".into(), sc.paper.clone()),
        ("Scaling".into(), sc.scaling.clone()),
    ];
    for mut a in arms {
        let arm = a.arm.clone();
        let mut pts = Vec::new();
        for (s, level) in a.starts.iter_mut().zip(&levels) {
            let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
            let p95 = quantile(s, 0.95);
            pts.push((f64::from(*level), mean));
            table.rows.push(vec![
                level.to_string(),
                arm.clone(),
                s.len().to_string(),
                format!("{mean:.1}"),
                format!("{p95:.1}"),
            ]);
        }
        let all: Vec<f64> = a.starts.iter().flatten().copied().collect();
        notes.push((
            arm.clone(),
            format!(
                "mean live start over all measured windows {:.1} ms ({} starts); {}",
                all.iter().sum::<f64>() / all.len().max(1) as f64,
                all.len(),
                a.note
            ),
        ));
        means.push((arm.clone(), pts));
        if arm == Arm::Balanced.to_string() {
            let mut counts: BTreeMap<(usize, usize), u32> = BTreeMap::new();
            for m in &a.moves {
                *counts.entry(*m).or_default() += 1;
            }
            for ((f, t), c) in counts {
                moves_table.rows.push(vec![
                    format!("V{}", f + 1),
                    format!("V{}", t + 1),
                    c.to_string(),
                ]);
            }
            moves_table
                .rows
                .push(vec!["(asleep)".into(), "–".into(), a.slept.to_string()]);
        }
        let n = sc.nodes.count;
        plots.push(Plot {
            file: format!("gateway_load_{arm}"),
            title: format!("Gateway load GL per node over time ({arm})"),
            x_label: x_label.into(),
            y_label: "GL (§B.2)".into(),
            series: (0..n)
                .map(|k| Series {
                    name: format!("V{}", k + 1),
                    points: a
                        .trace
                        .iter()
                        .filter_map(|(t, l)| Some((*t, *l.get(k)?)))
                        .collect(),
                })
                .collect(),
        });
        sessions.extend(a.rows);
    }
    plots.insert(
        0,
        Plot {
            file: "live_start_mean".into(),
            title: "Mean live-start response time".into(),
            x_label: "tours running".into(),
            y_label: "ms".into(),
            series: means
                .into_iter()
                .map(|(name, points)| Series { name, points })
                .collect(),
        },
    );
    Report {
        notes,
        tables: vec![table, moves_table],
        plots,
        sessions,
        ..Report::simulation(sc, command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Ramp;

    fn spec(tours: Vec<u32>) -> GatewaySpec {
        GatewaySpec {
            tours_per_node: tours,
            cameras_per_tour: 2,
            switch_secs: 5.0,
            cpu_per_camera: 0.0,
            cpu_per_viewer: 0.0,
            start_ms: 0.0,
            wake_ms: 0.0,
            x_mbytes_per_stream: None,
        }
    }

    #[test]
    fn tours_start_interleaved_across_gateways() {
        assert_eq!(
            tour_order(&spec(vec![3, 1, 2])),
            [(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (0, 2)]
        );
        assert!(tour_order(&spec(vec![0, 0])).is_empty());
    }

    /// Levels 2, 5, 5 over 10 s steps spread over 8 s: two tours at 0 and 4 s, three at
    /// 10, 12.67 and 15.33 s, none in the held step; never more than the tours there are.
    #[test]
    fn tour_starts_follow_the_ramp() {
        let r = Ramp {
            steps: vec![2, 5, 5],
            step_secs: 10.0,
            settle_secs: 0.0,
            spread_secs: Some(8.0),
        };
        let s = tour_starts(&r, 6);
        assert_eq!(s, [0, 4_000_000, 10_000_000, 12_666_666, 15_333_333]);
        assert_eq!(tour_starts(&r, 3).len(), 3);
    }
}
