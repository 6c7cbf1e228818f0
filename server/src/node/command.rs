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
        reply: oneshot::Sender<Result<MoveReport, MoveError>>,
    },
    /// The node sending the media stopped answering: send from here again.
    TakeBack { node: String },
}

/// Why a session's media did not move. Typed so that the API picks its HTTP status from
/// the kind (see [`MoveError::not_found`]), not from the text; the texts are what the
/// operator reads (`vigil ctl migrate`, the drain's report) and the end-to-end tests match,
/// so they are kept as they were. Between nodes the error travels as its text
/// (`MigrationReply::Failed`) and comes back as [`MoveError::Refused`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    #[error("no session {id} on this node")]
    NoSession { id: String },
    #[error("no session {id} in the cluster")]
    NoSessionInCluster { id: String },
    /// The session's RTSP connection is on node `by`: only that node can move it.
    #[error("session {id} is steered by node {by}: ask it (its RTSP connection is there)")]
    SteeredElsewhere { id: String, by: String },
    /// The session's command channel is gone: its connection is closing.
    #[error("session {id} cannot be steered (it is ending)")]
    Ending { id: String },
    #[error("session {id} ended")]
    Ended { id: String },
    #[error("session {id} ended during the move")]
    EndedDuringMove { id: String },
    /// The connection task did not take the command (busy with another request).
    #[error("session {id} took no command for 10 s")]
    Busy { id: String },
    #[error("moving session {id} took longer than 10 s")]
    Timeout { id: String },
    #[error("the cluster is off")]
    ClusterOff,
    #[error("node {node} is not a live member of the cluster")]
    NodeNotAlive { node: String },
    #[error("the session is already on {node}")]
    AlreadyThere { node: String },
    /// The session is not one that can move, with why (said to the operator as is).
    #[error("{0}")]
    NotMovable(&'static str),
    /// A node answered a migration call with an error: its text, as it said it.
    #[error("{reason}")]
    Refused { node: String, reason: String },
    /// The cluster RPC to `node` failed (unreachable, timed out, TLS).
    #[error("{error}")]
    Rpc { node: String, error: String },
    /// A node answered a migration call with an answer that does not fit it.
    #[error("{node} answered {answer} to {call}")]
    UnexpectedAnswer {
        node: String,
        call: &'static str,
        answer: String,
    },
    #[error("{node} could not prepare: {source}")]
    NotPrepared {
        node: String,
        source: Box<MoveError>,
    },
    /// The target failed to start the playback; it goes on from `here`.
    #[error("{node} could not start the session: it plays on {here}")]
    NotStarted { node: String, here: String },
    /// The target failed to start the live viewer; it goes on from `here`.
    #[error("{node} could not start the viewer ({answer}): it plays on {here}")]
    LiveNotStarted {
        node: String,
        here: String,
        answer: String,
    },
    /// The sending node did not hand the live viewer back; it goes on sending it.
    #[error("{node} did not stop the viewer: {answer}")]
    NotStopped { node: String, answer: String },
    /// The stopped sender's position could not be found in this node's index.
    #[error("{0}")]
    Resume(String),
    #[error("the playback ended during the move")]
    PlaybackEnded,
    #[error("the viewer's sender task failed")]
    SenderFailed,
    #[error("the viewer is between two senders")]
    BetweenSenders,
}

impl MoveError {
    /// The move named something that does not exist (a session, a live node): the API
    /// answers 404; every other refusal is a 409 (the session is there but cannot move now).
    pub fn not_found(&self) -> bool {
        matches!(
            self,
            MoveError::NoSession { .. }
                | MoveError::NoSessionInCluster { .. }
                | MoveError::NodeNotAlive { .. }
        )
    }
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
