//! `vigil-sim`: the seeds' experiments (ALGORITHMS.md §A–§D) as scenarios, a discrete-event
//! simulator that runs them in virtual time on the unchanged `vigil-cluster` policies, and
//! the report folder both this simulator and a real-process runner write.
//!
//! For a runner on real processes (`vigil lab`): [`scenario`] gives the parsed, validated
//! scenario (nodes, storage emulation, workload, ramp or sweep, compared arms) and
//! [`report`] the folder format (`Report::write`: Markdown table, per-session CSV, PNG
//! plots); [`dist`] draws the same seeded workload (Zipf/uniform choice, exponential
//! lengths, Poisson gaps, VCR mix).
//!
//! Pure and deterministic: a scenario and its seed give the same report, byte for byte
//! except the wall-clock speed figures. No I/O except `Report::write`; never call it inside
//! a tokio runtime (see [`cache`]).

pub mod cache;
pub mod dist;
pub mod engine;
pub mod feedback;
pub mod gateway;
pub mod planner;
pub mod report;
pub mod scenario;
pub mod vod;

use report::Report;
use scenario::{Kind, Scenario};

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("scenario {name}: the simulator has no model of {kind:?} scenarios yet (see docs/EVALUATION.md)")]
    NotSimulated { name: String, kind: Kind },
}

/// Runs every arm of `sc` and returns the report; `command` is written into it.
pub fn simulate(sc: &Scenario, command: &str) -> Result<Report, SimError> {
    match sc.kind {
        Kind::Vod => Ok(vod::vod_report(sc, vod::run_vod(sc), command)),
        Kind::Planner => Ok(planner::run(sc, command)),
        Kind::Feedback => Ok(feedback::run(sc, command)),
        Kind::Gateway => match &sc.gateway {
            Some(g) => Ok(gateway::run(sc, g, command)),
            None => Err(SimError::NotSimulated {
                name: sc.name.clone(),
                kind: sc.kind,
            }),
        },
    }
}
