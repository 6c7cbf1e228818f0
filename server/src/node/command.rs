//! Commands to the task that owns a session (its RTSP connection): move its media to
//! another node, take it back. The session registry carries each session's command channel
//! (`SessionInfo::commands`), so the contract lives here, below both the connection that
//! obeys it and the migration that sends it; the move's mode and its report travel the
//! cluster RPC too (`handoff`).

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// A command to the task that owns a session (its RTSP connection).
#[derive(Debug)]
pub enum SessionCommand {
    /// Move the session's media to `to` (this node's id brings it home).
    Move {
        to: String,
        mode: Option<SourceMode>,
        reply: oneshot::Sender<Result<MoveReport, String>>,
    },
    /// The node sending the media stopped answering: send from here again.
    TakeBack { node: String },
}

/// Where the sending node's datagrams come from: the config's `cluster.migration.mode`
/// names it, so its one parser is the config crate's.
pub use vigil_conf::SourceMode;

/// The outcome of one move, as `vigil ctl migrate` prints it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MoveReport {
    pub session: String,
    pub from: String,
    pub to: String,
    pub mode: SourceMode,
    /// Last frame sent by the old sender → first frame sent by the new one (ms); None when
    /// the session was paused.
    pub gap_ms: Option<f64>,
    /// Prepare → ready (ms).
    pub prepare_ms: f64,
    /// The whole move (ms).
    pub total_ms: f64,
}
