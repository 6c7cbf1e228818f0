//! `vigil-sim`: the seeds' experiments (ALGORITHMS.md §A–§D) as scenarios, a discrete-event
//! simulator that runs them in virtual time on the unchanged `vigil-cluster` policies, and
//! the report folder both this simulator and a real-process runner write.
//!
//! For a runner on real processes (`vigil lab`), the pieces to reuse:
//! - [`scenario::load`] → a validated [`scenario::Scenario`]: `nodes` (count, Bord, cache,
//!   capacity), `storage` (the `[storage.emulate]` latency to set on each node), `workload`,
//!   `ramp` (levels, step length, settle time, arrival spread) or `sweep`, and
//!   [`scenario::Scenario::arms`] (each a `vigil_cluster::Policy` and whether REM runs).
//! - [`dist::client_rng`] per client and [`dist::Asker::ask`]: the same seeded requests,
//!   lengths, VCR changes, pauses and entry nodes the simulator uses, so a lab run and a
//!   simulated run of a seed see the same workload.
//! - [`report::Report`] with `mode = "lab"`: one [`report::SessionRow`] per request (the
//!   CSV), [`report::Table`]s, [`report::Plot`]s, then [`report::Report::write`]; a
//!   calibration note can put both runs' ratios side by side.
//!
//! Pure and deterministic: a scenario and its seed give the same report, byte for byte
//! except the wall-clock speed figures. No I/O except `Report::write`.

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
