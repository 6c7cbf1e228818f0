//! Scenario definitions: what a run sets up (nodes, storage, clients, the load over time)
//! and which policies it compares on the same seeded workload.
//!
//! One TOML format serves the simulator (`vigil sim`) and the real-process runner
//! (`vigil lab`, later): a scenario says what the papers' experiments do, not how a runner
//! carries it out. The four seeds' scenarios ship embedded ([`builtin`]); a file given by
//! path replaces them ([`load`]). Every number is validated before a run starts, with an
//! error naming the field, so a typo fails in milliseconds rather than after an hour's run.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use vigil_cluster::{ClusterConfig, Policy};

mod validate;

/// A bad scenario: which one, which field, and why.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("unknown scenario {0:?}: built in are {list}", list = BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))]
    Unknown(String),
    #[error("reading scenario file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("scenario {name}: {source}")]
    Parse {
        name: String,
        source: Box<toml::de::Error>,
    },
    #[error("scenario {name}: {field}: {why}")]
    Invalid {
        name: String,
        field: &'static str,
        why: String,
    },
}

/// Which experiment a scenario is (which driver runs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// §A: playback placement and REM under a ramp of concurrent playbacks.
    Vod,
    /// §B: live patrol groups on gateways, manual binding vs the balanced gateway.
    Gateway,
    /// §C: live requests, least connections vs KNN classes with the feedback period.
    Feedback,
    /// §D.2: admission of Poisson arrivals on capped nodes holding replicas.
    Planner,
}

/// A compared policy: a placement policy, optionally with §A.5 REM, or one of the
/// non-placement arms of §B–§D. Written as in the scenario file: `least-load`,
/// `similarity+rem`, `manual`, `balanced`, `no-planner`, `planner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arm {
    Place {
        policy: Policy,
        rem: bool,
    },
    /// §B: cameras stay on the gateway they were bound to.
    Manual,
    /// §B: sleep, Brown forecast and roulette migration.
    Balanced,
    /// §D.2 without / with the migration planner.
    NoPlanner,
    Planner,
}

impl fmt::Display for Arm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arm::Place { policy, rem: false } => write!(f, "{policy}"),
            Arm::Place { policy, rem: true } => write!(f, "{policy}+rem"),
            Arm::Manual => f.write_str("manual"),
            Arm::Balanced => f.write_str("balanced"),
            Arm::NoPlanner => f.write_str("no-planner"),
            Arm::Planner => f.write_str("planner"),
        }
    }
}

impl FromStr for Arm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "manual" => return Ok(Arm::Manual),
            "balanced" => return Ok(Arm::Balanced),
            "no-planner" => return Ok(Arm::NoPlanner),
            "planner" => return Ok(Arm::Planner),
            _ => {}
        }
        let (name, rem) = match s.strip_suffix("+rem") {
            Some(n) => (n, true),
            None => (s, false),
        };
        let policy = Policy::from_str(name).map_err(|e| e.to_string())?;
        Ok(Arm::Place { policy, rem })
    }
}

/// How a client picks what to play (§A: uniform; §D: Zipf).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", deny_unknown_fields)]
pub enum Choice {
    Uniform,
    /// Rank k (1-based) with probability ∝ 1/k^s.
    Zipf {
        s: f64,
    },
}

/// One VCR speed and the share of sessions that switch to it after they start (§A).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vcr {
    pub scale: f64,
    pub share: f64,
}

/// The serving nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nodes {
    pub count: usize,
    /// Bord: each node's network bandwidth (§A.1).
    pub bord_mbps: f64,
    /// Memory of a node; M = (base + cache bytes) / RAM (§A.1).
    #[serde(default = "d_ram")]
    pub ram_mb: f64,
    /// Memory in use before any cache (process, OS).
    #[serde(default = "d_ram_base")]
    pub ram_base_mb: f64,
    /// Playback cache budget (the node's `[cache] budget_mb`).
    #[serde(default = "d_cache")]
    pub cache_mb: f64,
    /// Share of the cache kept for the segments where playbacks began (the node's
    /// `[cache] start_share`).
    #[serde(default = "d_start_share")]
    pub cache_start_share: f64,
    /// Segments read ahead of each playing session (`[cache] read_ahead_segments`).
    #[serde(default = "d_read_ahead")]
    pub read_ahead_segments: u32,
    /// Concurrent sessions a node accepts; 0 = no limit (§D.2's cap).
    #[serde(default)]
    pub max_sessions: u32,
    /// CPU utilisation per Gb/s a node sends (C of §A.1 grows with the bytes moved).
    #[serde(default = "d_cpu_per_gbps")]
    pub cpu_per_gbps: f64,
    /// Service time of one RTSP request on an idle node (ms); it grows as 1/(1 − ρ).
    #[serde(default = "d_request_ms")]
    pub request_ms: f64,
    /// `vod`: a node's changes reach the scheduler within this (ms); REM runs on them.
    #[serde(default = "d_report_ms")]
    pub report_ms: u64,
    /// `vod`: from a report being built to the scheduler reading it (gossip's delivery;
    /// 0 = at once). What the scheduler placed on the node meanwhile is dropped when the
    /// report arrives, as the real scheduler drops a node's reservations on a new report
    /// version. The scheduler's own report is read at once.
    #[serde(default)]
    pub report_delay_ms: u64,
    /// Relative capacity per node (link and CPU), heterogeneous nodes; empty = all 1.
    #[serde(default)]
    pub capacity: Vec<f64>,
    /// All nodes on one machine (`vigil lab`): a node reads C and M (§A.1) from the
    /// machine's /proc, so every node reports the same — modelled as the mean of the nodes'
    /// own — and only N tells the nodes apart, as in the lab. Their Bord is a configured
    /// figure, not a link (loopback): requests do not queue behind N (ρ = C) and the first
    /// packet's transmission is not modelled.
    #[serde(default)]
    pub shared_host: bool,
}

impl Nodes {
    /// Node i's relative capacity (1 when not given).
    pub fn capacity_of(&self, i: usize) -> f64 {
        self.capacity.get(i).copied().unwrap_or(1.0)
    }
}

fn d_ram() -> f64 {
    2048.0
}
fn d_ram_base() -> f64 {
    512.0
}
fn d_cache() -> f64 {
    512.0
}
fn d_start_share() -> f64 {
    vigil_conf::DEFAULT_CACHE_START_SHARE
}
fn d_read_ahead() -> u32 {
    2
}
fn d_cpu_per_gbps() -> f64 {
    0.3
}
fn d_request_ms() -> f64 {
    1.0
}
fn d_report_ms() -> u64 {
    1000
}

/// The shared storage (IPSAN LUN): a FIFO of reads at `bandwidth_mbps` after a fixed
/// `latency_ms` — the `[storage.emulate]` knob of the real node, said in every report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    pub latency_ms: f64,
    pub bandwidth_mbps: f64,
    /// false: no emulation — reads cost what the machine's own disk costs (the lab's nodes
    /// run without `[storage.emulate]`; the simulation reads in zero time). Every scenario
    /// runs both ways (`--no-emulation`), so a result can be told apart from the knob.
    #[serde(default = "d_emulate")]
    pub emulate: bool,
}

fn d_emulate() -> bool {
    true
}

impl Storage {
    /// The read latency applied, in ms (0 without emulation).
    pub fn read_latency_ms(&self) -> f64 {
        if self.emulate {
            self.latency_ms
        } else {
            0.0
        }
    }

    /// The shared read bandwidth applied, in Mb/s (`None`: unlimited, without emulation).
    pub fn read_mbps(&self) -> Option<f64> {
        self.emulate.then_some(self.bandwidth_mbps)
    }

    /// What a report says of the storage model (the simulation's side).
    pub fn describe(&self) -> String {
        match self.read_mbps() {
            Some(mbps) => format!(
                "every segment read waits {} ms and shares {mbps} Mb/s with all other reads (FIFO)",
                self.latency_ms
            ),
            None => "no storage emulation: segment reads take no time".into(),
        }
    }
}

/// What clients ask for and how they behave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub cameras: usize,
    #[serde(default = "d_one")]
    pub recordings_per_camera: usize,
    /// Length of each recording.
    pub recording_secs: f64,
    #[serde(default = "d_segment")]
    pub segment_secs: f64,
    pub bitrate_mbps: f64,
    pub choice: Choice,
    /// Mean of the exponential session length (wall time).
    pub session_mean_secs: f64,
    /// Mean of the exponential pause between a client's sessions (closed-loop clients).
    #[serde(default = "d_think")]
    pub think_mean_secs: f64,
    /// Speeds sessions switch to after they start; the rest stay at 1×.
    #[serde(default)]
    pub vcr: Vec<Vcr>,
    /// Mean of the exponential delay from a session's start to its VCR change.
    #[serde(default = "d_vcr_after")]
    pub vcr_after_mean_secs: f64,
    /// Round trip client ↔ node and node ↔ node (ms).
    #[serde(default = "d_rtt")]
    pub rtt_ms: f64,
}

fn d_one() -> usize {
    1
}
fn d_segment() -> f64 {
    4.0
}
fn d_think() -> f64 {
    2.0
}
fn d_vcr_after() -> f64 {
    20.0
}
fn d_rtt() -> f64 {
    0.5
}

/// §A: a ramp of concurrent clients, each level held for `step_secs`; figures are taken
/// over the part of each step after `settle_secs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ramp {
    pub steps: Vec<u32>,
    pub step_secs: f64,
    pub settle_secs: f64,
    /// New clients of a step arrive spread uniformly over this long (0 = all at once, a
    /// burst); default the settle time, at most 30 s.
    #[serde(default)]
    pub spread_secs: Option<f64>,
}

impl Ramp {
    /// The end of the last step (virtual µs).
    pub fn end_us(&self) -> i64 {
        crate::engine::secs(self.step_secs) * self.steps.len() as i64
    }

    /// The step running at `now_us` (virtual µs since the start).
    pub fn step_at(&self, now_us: i64) -> Option<usize> {
        let i = (now_us / crate::engine::secs(self.step_secs).max(1)) as usize;
        (i < self.steps.len()).then_some(i)
    }

    /// The step whose measured window (after its settle time) contains `now_us`.
    pub fn measured_step(&self, now_us: i64) -> Option<usize> {
        let i = self.step_at(now_us)?;
        let into = now_us - i as i64 * crate::engine::secs(self.step_secs);
        (into >= crate::engine::secs(self.settle_secs)).then_some(i)
    }

    /// The level of the step running at `now_us`, as the sessions' CSV names it.
    pub fn label_at(&self, now_us: i64) -> String {
        self.step_at(now_us)
            .map_or(String::new(), |i| self.steps[i].to_string())
    }

    pub fn spread(&self) -> f64 {
        self.spread_secs
            .unwrap_or_else(|| self.settle_secs.clamp(1.0, 30.0))
    }
}

/// §D.2: Poisson arrivals, each rate run for `duration_min`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    pub lambdas_per_min: Vec<f64>,
    pub duration_min: f64,
    /// Replicas of videos per node (r_ij of §D.2).
    pub replicas_per_node: usize,
    /// "matched" (replica counts follow popularity) and/or "mismatched" (uniform).
    pub layouts: Vec<Layout>,
    /// `vigil lab` only: the share of requests that are playbacks of recordings (any node,
    /// movable); the rest are live views served by the camera's holder alone. The
    /// simulation's videos all have their replicas and ignore it.
    #[serde(default)]
    pub playback_share: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    Matched,
    Mismatched,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Matched => "matched",
            Layout::Mismatched => "mismatched",
        })
    }
}

/// A scenario as written in its TOML file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub kind: Kind,
    pub description: String,
    /// What the paper ran and reported, for the report's header.
    pub paper: String,
    /// How this scenario maps the paper's testbed onto the runner (written in the report).
    pub scaling: String,
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// The compared arms, all on the same seeded workload.
    pub policies: Vec<String>,
    pub nodes: Nodes,
    #[serde(default = "d_storage")]
    pub storage: Storage,
    pub workload: Workload,
    #[serde(default)]
    pub ramp: Option<Ramp>,
    #[serde(default)]
    pub sweep: Option<Sweep>,
    /// §B: tours and serving costs of a gateway scenario.
    #[serde(default)]
    pub gateway: Option<crate::gateway::GatewaySpec>,
    /// The policy layer's constants (ALGORITHMS.md figures unless overridden here).
    #[serde(default)]
    pub cluster: ClusterConfig,
}

fn d_seed() -> u64 {
    1
}
fn d_storage() -> Storage {
    Storage {
        latency_ms: 10.0,
        bandwidth_mbps: 4000.0,
        emulate: true,
    }
}

/// The embedded scenarios, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("seed-vod", include_str!("../../scenarios/seed-vod.toml")),
    (
        "seed-vod-lab",
        include_str!("../../scenarios/seed-vod-lab.toml"),
    ),
    (
        "seed-gateway",
        include_str!("../../scenarios/seed-gateway.toml"),
    ),
    (
        "seed-gateway-lab",
        include_str!("../../scenarios/seed-gateway-lab.toml"),
    ),
    (
        "seed-feedback",
        include_str!("../../scenarios/seed-feedback.toml"),
    ),
    (
        "seed-feedback-burst",
        include_str!("../../scenarios/seed-feedback-burst.toml"),
    ),
    (
        "seed-feedback-lab",
        include_str!("../../scenarios/seed-feedback-lab.toml"),
    ),
    (
        "seed-feedback-burst-lab",
        include_str!("../../scenarios/seed-feedback-burst-lab.toml"),
    ),
    (
        "seed-planner",
        include_str!("../../scenarios/seed-planner.toml"),
    ),
    (
        "seed-planner-lab",
        include_str!("../../scenarios/seed-planner-lab.toml"),
    ),
    ("scale-20", include_str!("../../scenarios/scale-20.toml")),
    ("scale-100", include_str!("../../scenarios/scale-100.toml")),
    (
        "scale-1000",
        include_str!("../../scenarios/scale-1000.toml"),
    ),
];

/// A built-in scenario by name.
pub fn builtin(name: &str) -> Result<Scenario, ScenarioError> {
    let (_, text) = BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| ScenarioError::Unknown(name.to_string()))?;
    parse(name, text)
}

/// A built-in name, or a path to a scenario file (anything with a `/` or ending `.toml`).
pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
    if name_or_path.ends_with(".toml") || name_or_path.contains('/') {
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: name_or_path.to_string(),
            source,
        })?;
        parse(name_or_path, &text)
    } else {
        builtin(name_or_path)
    }
}

/// Parses and validates; `origin` names the scenario in errors.
pub fn parse(origin: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
        name: origin.to_string(),
        source: Box::new(e),
    })?;
    s.validate()?;
    Ok(s)
}

impl Scenario {
    /// The compared arms, parsed (validated by [`Scenario::validate`]).
    pub fn arms(&self) -> Vec<Arm> {
        self.policies
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// The ramp's levels (clients per step), none without a ramp.
    pub fn levels(&self) -> Vec<u32> {
        self.ramp
            .as_ref()
            .map(|r| r.steps.clone())
            .unwrap_or_default()
    }

    /// One recorded segment's bytes (what the cache charges for it).
    pub fn segment_bytes(&self) -> usize {
        (self.workload.bitrate_mbps * 1e6 / 8.0 * self.workload.segment_secs).round() as usize
    }
}

#[cfg(test)]
mod tests;
