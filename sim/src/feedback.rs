//! §C in virtual time: live viewers placed by the unchanged `vigil_cluster::place`
//! (`least-connections` or `knn-class`) over a view that only changes when a node reports —
//! on the §C.5 dynamic period (`FeedbackPeriod`, ticked every second with the cluster's task
//! count) — plus what the scheduler itself applied since (§A.4 step 5). Nodes may differ in
//! capacity (`nodes.capacity`), which least connections cannot see and θ can.
//!
//! Model choices: a viewer costs its bitrate on the node's link and `cpu_per_gbps` of CPU
//! per Gb/s, divided by the node's capacity; memory is `ram_base_mb` plus 2 MiB per viewer;
//! θ_links counts against `max_sessions` (1000 when unset). Response time = the RTSP round
//! trips (as in `vod`) at `request_ms / (1 − ρ)` each, ρ = max(θ_cpu, θ_net), plus the first
//! keyframe from the GOP cache over the node's spare bandwidth. Report traffic is the JSON
//! size of each report (`NodeView`) times the reports sent.

use rand::rngs::StdRng;
use rand::Rng;
use vigil_cluster::{
    apply, load_variance, load_weight, place, ClusterView, Decision, FeedbackPeriod, Indicators,
    NodeView, PlaceState, Request, RequestKind, Stream, StreamSource,
};

use crate::dist::{client_rng, offset, policy_rng, ExpMean, Picker};
use crate::engine::{secs, Micros, Queue, MS, SEC};
use crate::report::{Plot, Report, Series, SessionRow, Speed, Table};
use crate::scenario::{Arm, Scenario};
use crate::vod::quantile;

const SCHEDULER: usize = 0;
const SESSION_MEM_MB: f64 = 2.0;

enum Ev {
    Step(usize),
    Request(u32),
    End { node: usize, client: u32 },
    Tick,
    Report(usize),
}

/// One step's counters of an arm: simulated here, measured by `vigil lab` (which fills
/// `reports` and `report_bytes` from the nodes' gossip counters).
#[derive(Debug, Default, Clone)]
pub struct StepAcc {
    pub requests: u64,
    pub rejected: u64,
    /// Response times (ms) of the accepted requests.
    pub responses: Vec<f64>,
    pub reports: u64,
    pub report_bytes: u64,
    /// Samples of the per-node load weight L (one a second) and their sums.
    pub samples: u64,
    pub variance_sum: f64,
    pub mean_sum: f64,
    pub max_sum: f64,
}

/// One arm's outcome: what the figures table and the plots are made of.
pub struct ArmOutcome {
    pub arm: Arm,
    pub steps: Vec<StepAcc>,
    /// (seconds since the start, L per node).
    pub trace: Vec<(f64, Vec<f64>)>,
    pub rows: Vec<SessionRow>,
}

/// How a runner names its report traffic and its time axis.
pub struct Labels {
    /// The two traffic columns (count, KiB).
    pub traffic: [&'static str; 2],
    pub time: &'static str,
}

/// The simulator's labels: report JSON as the model counts it, virtual time.
pub const SIM_LABELS: Labels = Labels {
    traffic: ["reports", "report KiB"],
    time: "virtual time (s)",
};

struct Sim<'a> {
    sc: &'a Scenario,
    arm: Arm,
    q: Queue<Ev>,
    sessions: Vec<u32>,
    cap: Vec<f64>,
    period: Vec<FeedbackPeriod>,
    next_report: Vec<Micros>,
    view: ClusterView,
    state: PlaceState,
    rng: StdRng,
    clients: Vec<StdRng>,
    think: Vec<f64>,
    active: u32,
    picker: Picker,
    lengths: ExpMean,
    thinks: ExpMean,
    acc: Vec<StepAcc>,
    trace: Vec<(f64, Vec<f64>)>,
    rows: Vec<SessionRow>,
}

impl<'a> Sim<'a> {
    fn new(sc: &'a Scenario, arm: Arm) -> Self {
        let n = sc.nodes.count;
        let cfg = &sc.cluster;
        let mut s = Self {
            sc,
            arm,
            q: Queue::default(),
            sessions: vec![0; n],
            cap: (0..n).map(|i| sc.nodes.capacity_of(i)).collect(),
            period: vec![FeedbackPeriod::new(&cfg.feedback); n],
            next_report: vec![0; n],
            view: ClusterView::new(Vec::new(), cfg.sched.weights),
            state: PlaceState::default(),
            rng: policy_rng(sc.seed),
            clients: Vec::new(),
            think: Vec::new(),
            active: 0,
            picker: Picker::new(sc.workload.choice, sc.workload.cameras),
            lengths: ExpMean::new(sc.workload.session_mean_secs),
            thinks: ExpMean::new(sc.workload.think_mean_secs),
            acc: vec![StepAcc::default(); sc.ramp.as_ref().map_or(0, |r| r.steps.len())],
            trace: Vec::new(),
            rows: Vec::new(),
        };
        let views = (0..n).map(|i| s.node_view(i)).collect();
        s.view = ClusterView::new(views, cfg.sched.weights);
        s.view.classify_nodes(&cfg.knn);
        s
    }

    fn bord(&self, i: usize) -> f64 {
        self.sc.nodes.bord_mbps * 1e6 * self.cap[i]
    }

    fn theta(&self, i: usize) -> Indicators {
        let nc = &self.sc.nodes;
        let out = f64::from(self.sessions[i]) * self.sc.workload.bitrate_mbps * 1e6;
        let max = if nc.max_sessions == 0 {
            1000
        } else {
            nc.max_sessions
        };
        Indicators {
            cpu: (nc.cpu_per_gbps * out / 1e9 / self.cap[i]).min(1.0),
            mem: ((nc.ram_base_mb + SESSION_MEM_MB * f64::from(self.sessions[i])) / nc.ram_mb)
                .min(1.0),
            net: (out / self.bord(i)).min(1.0),
            links: (f64::from(self.sessions[i]) / f64::from(max)).min(1.0),
        }
    }

    fn node_view(&self, i: usize) -> NodeView {
        let t = self.theta(i);
        let mut v = NodeView::new(format!("n{i}"), self.bord(i));
        v.cpu = t.cpu;
        v.mem = t.mem;
        v.indicators = t;
        v.sessions = self.sessions[i];
        v.max_sessions = match self.sc.nodes.max_sessions {
            0 => u32::MAX,
            m => m,
        };
        let vbr = self.sc.workload.bitrate_mbps * 1e6;
        // The streams as the report lists them (up to the server's 50), for the bytes.
        v.streams = (0..self.sessions[i].min(50))
            .map(|k| Stream {
                camera: format!("cam-{k:06}"),
                position_ms: 1_767_225_600_000,
                vbr_bps: vbr,
                source: StreamSource::Live,
                session: Some(format!("{k:016x}")),
            })
            .collect();
        v
    }

    fn step_of(&self) -> Option<usize> {
        self.sc.ramp.as_ref()?.measured_step(self.q.now())
    }

    fn run(&mut self) -> u64 {
        let Some(r) = self.sc.ramp.clone() else {
            return 0;
        };
        let end = r.end_us();
        self.q.at(0, Ev::Step(0));
        self.q.at(SEC, Ev::Tick);
        for i in 0..self.sessions.len() {
            // Staggered first reports, as nodes start at different instants.
            let first = SEC * (1 + i as i64) / self.sessions.len() as i64;
            self.next_report[i] = first;
            self.q.at(first, Ev::Report(i));
        }
        while let Some(ev) = self.q.next_until(end) {
            match ev {
                Ev::Step(i) => {
                    let target = r.steps[i];
                    let spread = secs(r.spread());
                    while (self.clients.len() as u32) < target {
                        let id = self.clients.len() as u64;
                        let mut rng = client_rng(self.sc.seed, id);
                        let at = self.q.now() + offset(spread, &mut rng);
                        self.clients.push(rng);
                        self.think.push(0.0);
                        self.q.at(at, Ev::Request(id as u32));
                    }
                    self.active = target;
                    if i + 1 < r.steps.len() {
                        self.q
                            .at(secs(r.step_secs) * (i as i64 + 1), Ev::Step(i + 1));
                    }
                }
                Ev::Request(c) => self.request(c),
                Ev::End { node, client } => {
                    self.sessions[node] -= 1;
                    let t = self.think[client as usize];
                    self.q.after(secs(t), Ev::Request(client));
                }
                Ev::Tick => self.tick(),
                Ev::Report(i) => self.report(i),
            }
        }
        self.q.processed()
    }

    /// §C.5: every second each node ticks its period with the cluster's task count; a node
    /// whose period has run out since its last report reports now.
    fn tick(&mut self) {
        let links: u64 = self.sessions.iter().map(|&s| u64::from(s)).sum();
        let now = self.q.now();
        for i in 0..self.sessions.len() {
            let p = self.period[i].tick(links, &self.sc.cluster.feedback);
            let due = self.next_report[i].min(now + SEC * i64::from(p));
            self.next_report[i] = due;
        }
        // Per-node load weight L (§C.2) for the figures.
        let omega = self.sc.cluster.knn.omega;
        let loads: Vec<f64> = (0..self.sessions.len())
            .map(|i| load_weight(&self.theta(i), &omega))
            .collect();
        if let Some(s) = self.step_of() {
            let a = &mut self.acc[s];
            a.samples += 1;
            a.variance_sum += load_variance(&loads);
            a.mean_sum += loads.iter().sum::<f64>() / loads.len() as f64;
            a.max_sum += loads.iter().copied().fold(0.0, f64::max);
        }
        if loads.len() <= crate::vod::TRACE_NODES {
            self.trace.push((now as f64 / SEC as f64, loads));
        }
        self.q.after(SEC, Ev::Tick);
    }

    fn report(&mut self, i: usize) {
        let now = self.q.now();
        if now < self.next_report[i] {
            self.q.at(self.next_report[i], Ev::Report(i));
            return;
        }
        let v = self.node_view(i);
        let bytes = serde_json::to_vec(&v).map_or(0, |b| b.len() as u64);
        let mut nodes = self.view.nodes().to_vec();
        nodes[i] = v;
        self.view = ClusterView::new(nodes, self.sc.cluster.sched.weights);
        self.view.classify_nodes(&self.sc.cluster.knn);
        if let Some(s) = self.step_of() {
            self.acc[s].reports += 1;
            self.acc[s].report_bytes += bytes;
        }
        let p = self.period[i].period_s;
        self.next_report[i] = now + SEC * i64::from(p);
        self.q.at(self.next_report[i], Ev::Report(i));
    }

    fn proc(&self, i: usize) -> Micros {
        let t = self.theta(i);
        let rho = t.cpu.max(t.net).min(0.98);
        secs(self.sc.nodes.request_ms / 1000.0 / (1.0 - rho))
    }

    fn request(&mut self, client: u32) {
        if client >= self.active {
            return;
        }
        let w = &self.sc.workload;
        let c = &mut self.clients[client as usize];
        let cam = self.picker.sample(c);
        let length = self.lengths.sample(c);
        let think = self.thinks.sample(c);
        let entry = c.gen_range(0..self.sessions.len());
        self.think[client as usize] = think;
        let Arm::Place { policy, .. } = self.arm else {
            return;
        };
        let req = Request {
            camera: format!("cam-{cam:06}"),
            time_ms: 0,
            vbr_bps: w.bitrate_mbps * 1e6,
            kind: RequestKind::Live,
        };
        let d = place(
            &self.view,
            &req,
            policy,
            &mut self.state,
            &self.sc.cluster,
            &mut self.rng,
        );
        let now = self.q.now();
        let step = self.step_of();
        let mut row = SessionRow {
            policy: self.arm.to_string(),
            step: self
                .sc
                .ramp
                .as_ref()
                .map_or(String::new(), |r| r.label_at(now)),
            session: self.rows.len() as u64,
            client: u64::from(client),
            camera: req.camera.clone(),
            requested_s: now as f64 / SEC as f64,
            scale: 1.0,
            ..SessionRow::default()
        };
        let n = match &d {
            Decision::Assign { node, .. } => self.view.index_of(node),
            Decision::Reject { .. } => None,
        };
        let Some(n) = n else {
            row.rejected = true;
            self.rows.push(row);
            if let Some(s) = step {
                self.acc[s].requests += 1;
                self.acc[s].rejected += 1;
            }
            self.q.after(secs(think.max(1.0)), Ev::Request(client));
            return;
        };
        let _ = apply(&mut self.view, &d);
        let rtt = secs(w.rtt_ms / 1000.0);
        let mut t = rtt + self.proc(entry);
        if entry != SCHEDULER {
            t += rtt;
        }
        if n != entry {
            t += 2 * rtt;
        }
        self.sessions[n] += 1;
        let pn = self.proc(n);
        let spare = (1.0 - self.theta(n).net).max(0.02);
        let gop = secs(w.bitrate_mbps * 1e6 / (self.bord(n) * spare));
        t += 3 * (rtt + pn) + gop + rtt / 2;
        let ms = t as f64 / MS as f64;
        row.node = format!("n{n}");
        row.redirected = n != entry;
        row.response_ms = Some(ms);
        row.ended_s = Some((now + t + secs(length)) as f64 / SEC as f64);
        self.rows.push(row);
        if let Some(s) = step {
            self.acc[s].requests += 1;
            self.acc[s].responses.push(ms);
        }
        self.q.after(t + secs(length), Ev::End { node: n, client });
    }
}

/// Runs the arms of a feedback scenario and writes their report.
pub fn run(sc: &Scenario, command: &str) -> Report {
    let simulated = sc
        .ramp
        .as_ref()
        .map_or(0.0, |r| r.step_secs * r.steps.len() as f64);
    let mut speed = Vec::new();
    let mut arms = Vec::new();
    for arm in sc.arms() {
        let wall = std::time::Instant::now();
        let mut sim = Sim::new(sc, arm);
        let events = sim.run();
        speed.push(Speed {
            arm: arm.to_string(),
            simulated_s: simulated,
            wall_s: wall.elapsed().as_secs_f64(),
            events,
        });
        arms.push(ArmOutcome {
            arm,
            steps: sim.acc,
            trace: sim.trace,
            rows: sim.rows,
        });
    }
    let mut r = feedback_report(sc, arms, &SIM_LABELS, command);
    r.tables.push(Table::speed(&speed));
    r.notes.extend([
        (
            "Model".into(),
            "Live viewers; the scheduler sees a node only through its reports, sent on the §C.5 period (vigil-cluster's FeedbackPeriod), and what it applied itself since. A viewer costs its bitrate on the link and cpu_per_gbps of CPU, both divided by the node's capacity; response time grows as 1/(1 − ρ) with ρ = max(θ_cpu, θ_net).".into(),
        ),
        (
            "Calibration".into(),
            "`vigil lab seed-feedback-lab` runs this scenario's scaled twin on real processes (docs/EVALUATION.md); nothing here was fitted to it.".into(),
        ),
    ]);
    r
}

/// Milliseconds for the table; "–" for a step without a single response.
fn ms(x: f64, none: bool) -> String {
    if none || !x.is_finite() {
        "–".into()
    } else {
        format!("{x:.2}")
    }
}

/// The report of a feedback scenario's arms (simulated or measured): the figures per
/// step, mean and p95 response time per level, and each arm's load weight L per node
/// over time.
pub fn feedback_report(
    sc: &Scenario,
    arms: Vec<ArmOutcome>,
    labels: &Labels,
    command: &str,
) -> Report {
    let levels = sc.levels();
    let mut columns: Vec<String> = [
        "clients",
        "policy",
        "requests",
        "rejected",
        "mean ms",
        "p95 ms",
        "mean L",
        "max L",
        "variance of L",
    ]
    .map(String::from)
    .to_vec();
    columns.extend(labels.traffic.map(String::from));
    let mut table = Table {
        title: "Figures per step (measured after each step's settle time)".into(),
        columns,
        rows: Vec::new(),
    };
    let mut per_arm = Vec::new();
    let mut sessions = Vec::new();
    let mut traces = Vec::new();
    for a in arms {
        let arm = a.arm;
        let mut figs = Vec::new();
        for (s, level) in a.steps.iter().zip(&levels) {
            let mut r = s.responses.clone();
            let mean = r.iter().sum::<f64>() / r.len().max(1) as f64;
            let p95 = quantile(&mut r, 0.95);
            let n = s.samples.max(1) as f64;
            figs.push((*level, mean, p95));
            table.rows.push(vec![
                level.to_string(),
                arm.to_string(),
                s.requests.to_string(),
                s.rejected.to_string(),
                ms(mean, s.responses.is_empty()),
                ms(p95, s.responses.is_empty()),
                format!("{:.3}", s.mean_sum / n),
                format!("{:.3}", s.max_sum / n),
                format!("{:.4}", s.variance_sum / n),
                s.reports.to_string(),
                format!("{:.1}", s.report_bytes as f64 / 1024.0),
            ]);
        }
        if let Some(n) = a.trace.first().map(|t| t.1.len()) {
            traces.push(Plot {
                file: format!("node_load_{arm}"),
                title: format!("Load weight L per node ({arm})"),
                x_label: labels.time.into(),
                y_label: "L (§C.2)".into(),
                series: (0..n)
                    .map(|i| Series {
                        name: format!("n{i} (capacity {})", sc.nodes.capacity_of(i)),
                        points: a
                            .trace
                            .iter()
                            .filter_map(|(t, l)| Some((*t, *l.get(i)?)))
                            .collect(),
                    })
                    .collect(),
            });
        }
        per_arm.push((arm, figs));
        sessions.extend(a.rows);
    }
    let line = |file: &str, title: &str, f: fn(&(u32, f64, f64)) -> f64| Plot {
        file: file.into(),
        title: title.into(),
        x_label: "concurrent live viewers".into(),
        y_label: "ms".into(),
        series: per_arm
            .iter()
            .map(|(a, figs)| Series {
                name: a.to_string(),
                points: figs.iter().map(|x| (f64::from(x.0), f(x))).collect(),
            })
            .collect(),
    };
    let mut plots = vec![
        line("response_mean", "Mean response time (live start)", |x| x.1),
        line("response_p95", "p95 response time (live start)", |x| x.2),
    ];
    plots.extend(traces);
    Report {
        notes: vec![
            ("Paper".into(), sc.paper.clone()),
            ("Scaling".into(), sc.scaling.clone()),
        ],
        tables: vec![table],
        plots,
        sessions,
        ..Report::simulation(sc, command)
    }
}
