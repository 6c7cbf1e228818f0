//! The node's cluster shell (issue 4): gossip membership over an authenticated transport,
//! the node's load report, scheduler election, and placement of DESCRIBEs by redirect.
//!
//! It lives in the server, not in `vigil-cluster`, because it reads the node's own state
//! (sessions, cache, live paths) and runs tokio tasks; `vigil-cluster` stays the pure policy
//! layer (placement, election, load model) that this shell feeds snapshots to.
//!
//! Placement: a playback DESCRIBE on a node that is not the scheduler asks the elected
//! scheduler over QUIC with mutual TLS ([`rpc`]); the scheduler decides with the configured
//! policy and applies the decision to its view at once (§A.4 step 5), so bursts arriving on
//! different nodes do not pile up. On timeout or error (or without cluster certificates) the
//! node decides from its own gossip view with the same policy (issue 4 §4's fallback); each
//! decision records the path taken.

mod bindings;
pub mod camera_move;
mod edge;
mod election;
mod marker;
mod membership;
mod placement;
pub mod planner;
mod publish;
pub mod rem;
pub mod report;
pub mod report_keys;
mod reservations;
pub mod rpc;
mod shell;
pub mod synthetic;
pub mod transport;
mod watch;

use std::sync::atomic::Ordering;

pub use bindings::CameraBindings;
pub use camera_move::CameraHost;
pub use marker::redirect_url as signed_redirect_url;
pub use marker::{strip_marker, Marker, MARKER_TTL, PLACED_MARKER};
/// Signing markers outside a running cluster (tests place a viewer on a node by hand).
pub use membership::IdConflict;
pub use placement::{IngestTarget, Placement};
pub use planner::{PlanRecord, PlanView, PlannedMove};
pub use rpc::CameraMoveRecord;
pub use shell::{Cluster, DecisionRecord, Member, PLACEMENT_KINDS, PLACEMENT_RESULTS};

pub use vigil_storage::now_ms;

/// Bitrate of a session, for the fingerprint of significant changes.
pub(crate) fn session_rate(s: &crate::node::SessionInfo) -> u64 {
    s.rate_bps.load(Ordering::Relaxed)
}
