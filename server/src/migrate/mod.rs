//! Sessions that move between nodes while they play (issue 7; ALGORITHMS.md §A.5, §D.1).
//!
//! A playback session's RTSP connection never moves: the node that accepted it keeps it and
//! *steers* the session (`steer`), while the media may be sent by another node (`host`).
//! The RTSP connection and the method handlers see one thing, the session's sender
//! (`playback::sender::PlaybackSender`, `live_sender::LiveSender`), which is either a task
//! here or a [`steer::Remote`] / [`steer_live::RemoteLive`] behind a trait; they do not learn
//! about migration, and this module sees the session only as the `steering::Steered` view
//! the connection lends it with each command. Calls between nodes ride the cluster RPC (QUIC, mutual TLS): see `wire`.
//!
//! Dependencies flow one way: this module uses the node, the playback sender and the
//! cluster shell; the cluster reaches it only through the narrow
//! [`crate::cluster::rpc::MigrationService`] trait registered at start-up.

pub mod drain;
pub mod heartbeat;
pub mod host;
mod mover;
pub mod steer;
pub mod steer_live;

use crate::cluster::Cluster;
use crate::handoff::{MigrationCall, MigrationReply};
use crate::node::command::{MoveError, MoveReport, SessionCommand, SourceMode};
use crate::node::events::Event;
use crate::node::Node;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Registers the steering of moved sessions ([`steer::handle`]) as the node's
/// session-command handler (`steering::CommandHandler`): the RTSP connection finds it in
/// `node.extensions` and runs the moves and take-backs sent to its session without naming
/// this module. Called once at
/// start-up, with or without a cluster (without one a move is refused as before).
pub fn install_commands(node: &Node) {
    node.extensions.get_or_init(|| {
        Arc::new(crate::steering::CommandHandler(
            |node, cluster, session, cmd| Box::pin(steer::handle(node, cluster, session, cmd)),
        ))
    });
}

/// When a new sender's first frame went out (µs since the epoch): at most one frame
/// interval after it started, so two seconds without it means it never will.
pub async fn first_sent(rx: oneshot::Receiver<i64>) -> Option<i64> {
    tokio::time::timeout(Duration::from_secs(2), rx)
        .await
        .ok()
        .and_then(Result::ok)
}

/// Counts outcomes in `vigil_migrations_total{result}`.
pub fn count(result: &'static str) {
    metrics::counter!("vigil_migrations_total", "result" => result).increment(1);
}

/// Moves session `id` of this node to `to`, through the task that owns it.
pub async fn move_local(
    node: &Node,
    id: &str,
    to: &str,
    mode: Option<SourceMode>,
) -> Result<MoveReport, MoveError> {
    let id_ = || id.to_string();
    let info = node
        .session(id)
        .ok_or_else(|| MoveError::NoSession { id: id_() })?;
    if let Some(by) = info.steered_by() {
        return Err(MoveError::SteeredElsewhere { id: id_(), by });
    }
    let tx = info
        .commands
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or_else(|| MoveError::Ending { id: id_() })?;
    let (reply, rx) = oneshot::channel();
    // One bound for handing the command over and for the move: a connection busy with
    // something else must not hold a drain or an operator's call.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let command = SessionCommand::Move {
        to: to.to_string(),
        mode,
        reply,
    };
    match tokio::time::timeout_at(deadline, tx.send(command)).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Err(MoveError::Ended { id: id_() }),
        Err(_) => return Err(MoveError::Busy { id: id_() }),
    }
    let r = match tokio::time::timeout_at(deadline, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(MoveError::EndedDuringMove { id: id_() }),
        Err(_) => Err(MoveError::Timeout { id: id_() }),
    };
    count(if r.is_ok() { "moved" } else { "failed" });
    node.events.emit(match &r {
        Ok(m) => Event::MigrationDone {
            session: id_(),
            to: m.to.clone(),
            gap_ms: m.gap_ms,
        },
        Err(e) => Event::MigrationFailed {
            session: id_(),
            to: to.to_string(),
            error: e.to_string(),
        },
    });
    r
}

/// Moves session `id` wherever it is in the cluster: here, or through the node holding it.
/// `cluster`: the node's cluster shell (None when off: only a session here can move).
pub async fn move_anywhere(
    node: &Node,
    cluster: Option<&Arc<Cluster>>,
    id: &str,
    to: &str,
    mode: Option<SourceMode>,
) -> Result<MoveReport, MoveError> {
    if node.session(id).is_some_and(|s| s.steered_by().is_none()) {
        return move_local(node, id, to, mode).await;
    }
    let cluster = cluster.ok_or_else(|| MoveError::NoSession { id: id.to_string() })?;
    // The node holding the session's RTSP connection: the one a copy hosted here names,
    // else the one whose report lists it as its own.
    let owner = match node.session(id).and_then(|s| s.steered_by()) {
        Some(by) => by,
        None => cluster
            .members()
            .into_iter()
            .filter(|m| m.alive && m.id != cluster.self_id)
            .find(|m| {
                m.report
                    .as_ref()
                    .is_some_and(|r| r.session_list.iter().any(|s| s.id == id && !s.hosted))
            })
            .map(|m| m.id)
            .ok_or_else(|| MoveError::NoSessionInCluster { id: id.to_string() })?,
    };
    let call = MigrationCall::MoveOut {
        session: id.to_string(),
        to: to.to_string(),
        mode,
    };
    match steer::call_node(cluster, &owner, call, Duration::from_secs(12)).await? {
        MigrationReply::Moved(m) => Ok(m),
        other => Err(MoveError::UnexpectedAnswer {
            node: owner,
            call: "MoveOut",
            answer: format!("{other:?}"),
        }),
    }
}

/// The node's side of the migration calls (registered with the cluster RPC).
pub struct Service {
    node: std::sync::Weak<Node>,
    /// The shell this service is registered with (weak: the shell holds the service).
    cluster: std::sync::Weak<Cluster>,
    pub host: Arc<host::Host>,
    pub drain: Arc<drain::Drain>,
}

impl Service {
    /// Registers the node's migration service with its cluster shell.
    pub fn install(node: &Arc<Node>, cluster: &Arc<Cluster>) -> Arc<Service> {
        let lease = Duration::from_millis(node.config.cluster.migration.lease_ms);
        let svc = Arc::new(Service {
            node: Arc::downgrade(node),
            cluster: Arc::downgrade(cluster),
            host: host::Host::new(node.clone(), cluster, lease),
            drain: drain::Drain::new(),
        });
        let _ = cluster.migration.set(svc.clone());
        svc
    }
}

impl crate::cluster::rpc::MigrationService for Service {
    fn handle(&self, call: MigrationCall) -> futures::future::BoxFuture<'static, MigrationReply> {
        let host = self.host.clone();
        let drain = self.drain.clone();
        let (node, cluster) = (self.node.upgrade(), self.cluster.upgrade());
        Box::pin(async move {
            let (Some(node), Some(cluster)) = (node, cluster) else {
                return MigrationReply::Failed("shutting down".into());
            };
            match call {
                MigrationCall::Prepare(spec) if spec.live => host.prepare_live(spec).await,
                MigrationCall::Prepare(spec) => host.prepare(spec).await,
                MigrationCall::StartLive { session, handoff } => {
                    host.start_live(&session, handoff).await
                }
                MigrationCall::StopLive { session } => host.stop_live(&session).await,
                MigrationCall::PauseLive { session, paused } => host.pause_live(&session, paused),
                MigrationCall::Start { session, run } => host.start(&session, run).await,
                MigrationCall::Stop { session } => host.stop(&session).await,
                MigrationCall::Status { sessions } => host.status(&sessions),
                MigrationCall::Release { session } => host.release(&session),
                // A session hosted here (steered elsewhere) is moved through its owner.
                MigrationCall::MoveOut { session, to, mode } => {
                    match move_anywhere(&node, Some(&cluster), &session, &to, mode).await {
                        Ok(m) => MigrationReply::Moved(m),
                        Err(e) => MigrationReply::Failed(e.to_string()),
                    }
                }
                MigrationCall::Drain { undrain } => {
                    MigrationReply::Drain(drain::Drain::set(&drain, &node, &cluster, !undrain))
                }
                MigrationCall::DrainStatus => MigrationReply::Drain(drain.status()),
            }
        })
    }
}
