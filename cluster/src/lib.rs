//! `vigil-cluster`: the cluster's *policy* layer (issue 4).
//!
//! Pure, deterministic functions over a [`ClusterView`] snapshot: placement (§A.4 and the
//! baselines, §C.3–C.4), REM migration (§A.5), gateway load, forecast, roulette and camera
//! binding (§B), the feedback period (§C.5). Randomness comes only from the `rand::Rng`
//! passed in, so the live scheduler, a simulator and the tests run the same code and a seed
//! reproduces a run. No I/O, no clocks, no async here: membership, gossip and the QUIC calls
//! live in the server and feed this crate snapshots. Section numbers refer to
//! `shared/ALGORITHMS.md`.

pub mod affinity;
pub mod camera_move;
pub mod config;
pub mod edge;
pub mod election;
pub mod feedback;
pub mod gateway;
pub mod knn;
pub mod liveness;
pub mod load;
pub mod place;
pub mod planner;
pub mod records;
pub mod rem;
pub mod similarity;
pub mod view;
pub mod view_cache;

pub use config::{
    default_training_set, ClusterConfig, EdgeConfig, FeedbackConfig, GatewayConfig, KnnConfig,
    LoadWeights, NodeClass, PlannerConfig, Replicas, SchedConfig, TrainingSample,
};
pub use edge::{place_live, LiveRequest};
pub use election::{elect, elect_watched, next_term, Candidate, Watched};
pub use feedback::{next_period, period_delta, FeedbackPeriod};
pub use knn::{classify, load_weight, Indicators};
pub use liveness::{Liveness, LivenessConfig};
pub use load::{delta_load, load_state, load_variance, node_load, quadratic_mean, LoadState};
pub use place::{apply, place, Decision, PlaceState, Policy};
pub use rem::{apply_migration, rem_probability, rem_step, Migration};
pub use view::{
    cached_summary, CachedRanges, CameraId, ClusterView, NodeId, NodeView, Request, RequestKind,
    Stream, StreamSource, CACHE_GAP_MS,
};
pub use view_cache::{ViewCache, ViewEntry};

/// Errors of the policy layer: names that do not resolve against the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("unknown placement policy {0:?} (expected one of {names})", names = place::policy_names())]
    UnknownPolicy(String),
    #[error("node {0:?} is not in the cluster view")]
    UnknownNode(NodeId),
    #[error("migration from {0:?} refers to stream {1}, which has changed since the decision")]
    StaleMigration(NodeId, usize),
}
