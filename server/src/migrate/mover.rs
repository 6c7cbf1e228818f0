//! The one sequence every move of a session's media follows, playback and live alike
//! (issue 24 §2): check → prepare the target → stop the current sender and take its exact
//! state → start the new sender → commit. Each step that can fail undoes what the steps
//! before it did, so a refused move leaves the session playing where it was: a target that
//! could not prepare, or whose sender could not be stopped, is released; a target that
//! could not start is released and the session is sent from here again. What differs
//! between a playback (`steer`) and a live viewer (`steer_live`) sits behind [`Move`].

use super::steer::committed;
use crate::cluster::Cluster;
use crate::handoff::{MigrationCall, MigrationReply, PrepareSpec};
use crate::node::command::{MoveError, MoveReport, SourceMode};
use crate::node::{Node, SessionInfo};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A session's handle on the node that sends (or is prepared to send) its media: what a
/// playback's and a live viewer's handles share.
#[derive(Clone)]
pub(super) struct Peer {
    pub node: String,
    pub session: String,
    pub cluster: Arc<Cluster>,
    pub timeout: Duration,
    /// Cancelled when the session is released there: ends its heartbeat watch.
    pub watchdog: CancellationToken,
}

impl Peer {
    pub fn new(node: &Node, cluster: &Arc<Cluster>, to: &str, session: &str) -> Peer {
        Peer {
            node: to.to_string(),
            session: session.to_string(),
            cluster: cluster.clone(),
            timeout: rpc_timeout(node),
            watchdog: CancellationToken::new(),
        }
    }

    /// One migration call to that node (a `Failed` answer is an error).
    pub async fn call(&self, call: MigrationCall) -> Result<MigrationReply, MoveError> {
        super::steer::call_node(&self.cluster, &self.node, call, self.timeout).await
    }

    /// Forget the session there (in the background: the session goes on without it).
    pub fn release(&self) {
        self.watchdog.cancel();
        super::steer::release_on(&self.cluster, &self.node, &self.session, self.timeout);
    }

    /// The heartbeat watch of that node once it sends the session, keeping its reports in
    /// `last` (taken from the typed handle before it goes into the session).
    pub fn watchdog(&self, last: super::heartbeat::Last) -> Watchdog {
        Watchdog {
            cluster: self.cluster.clone(),
            peer: self.node.clone(),
            last,
            cancel: self.watchdog.clone(),
        }
    }
}

/// A handle on the node sending a session: its [`Peer`] and what its kind of media adds.
pub(super) trait Target {
    fn peer(&self) -> &Peer;
}

/// What the heartbeat needs to watch the node sending a moved session.
pub(super) struct Watchdog {
    cluster: Arc<Cluster>,
    peer: String,
    last: super::heartbeat::Last,
    cancel: CancellationToken,
}

impl Watchdog {
    /// Heartbeats the peer for `info`'s session: on silence past `takeback_ms` it comes home.
    pub fn start(self, node: &Arc<Node>, info: &Arc<SessionInfo>) {
        super::heartbeat::Heartbeats::of(node, &self.cluster).watch(
            &self.peer,
            super::heartbeat::Watched {
                last: self.last,
                info: info.clone(),
                cancel: self.cancel,
            },
        );
    }
}

/// The steps of one move that depend on what the session sends.
pub(super) trait Move {
    type Target: Target;
    fn info(&self) -> Arc<SessionInfo>;
    /// The node sending the media now, or why this session cannot move at all (checked
    /// before "already there").
    fn current(&mut self, here: &str) -> Result<String, MoveError>;
    /// Why the session cannot move now (checked after "already there").
    fn movable(&mut self, node: &Node) -> Result<(), MoveError>;
    /// A handle on `to`, not yet prepared.
    fn target(
        &self,
        node: &Node,
        cluster: &Arc<Cluster>,
        to: &str,
    ) -> Result<Self::Target, MoveError>;
    /// What `to` must prepare: the session's media and where it goes at the client.
    fn spec(&self, node: &Node, cluster: &Cluster, here: &str, mode: SourceMode) -> PrepareSpec;
    /// Stops the current sender after its last frame and keeps its exact state for
    /// [`Move::start`]; returns when the last frame went out (wall µs). On an error the
    /// session is as it was (or ended, if its sender failed).
    async fn stop(&mut self) -> Result<Option<i64>, MoveError>;
    /// Starts the new sender (on `target`, else here) right after the last frame sent;
    /// returns when its first frame went out. On an error the session is sent from here.
    async fn start(
        &mut self,
        node: &Arc<Node>,
        target: Option<Self::Target>,
        to: &str,
        here: &str,
    ) -> Result<Option<i64>, MoveError>;
    /// The move is done: watch the node that sends the media now, if not this one.
    fn watch(&mut self, node: &Arc<Node>);
}

/// Moves the media of one session to `to` (or back here): one handoff.
pub(super) async fn drive<M: Move>(
    node: &Arc<Node>,
    cluster: Option<&Arc<Cluster>>,
    mut m: M,
    to: &str,
    mode: Option<SourceMode>,
) -> Result<MoveReport, MoveError> {
    let cluster = cluster.cloned().ok_or(MoveError::ClusterOff)?;
    let here = cluster.self_id.clone();
    let from = m.current(&here)?;
    if to == from {
        return Err(MoveError::AlreadyThere {
            node: to.to_string(),
        });
    }
    m.movable(node)?;
    if to != here && !cluster.is_alive(to) {
        return Err(MoveError::NodeNotAlive {
            node: to.to_string(),
        });
    }
    let mode = mode.unwrap_or(node.config.cluster.migration.mode);
    let info = m.info();
    let started = Instant::now();
    // 1. Prepare the target (not needed to come home: this node has its sockets).
    let mut target = None;
    if to != here {
        let remote = m.target(node, &cluster, to)?;
        let spec = m.spec(node, &cluster, &here, mode);
        match remote.peer().call(MigrationCall::Prepare(spec)).await {
            Ok(MigrationReply::Ready) => target = Some(remote),
            Ok(other) => {
                remote.peer().release();
                return Err(MoveError::UnexpectedAnswer {
                    node: to.to_string(),
                    call: "Prepare",
                    answer: format!("{other:?}"),
                });
            }
            Err(e) => {
                // Nothing was stopped: the session plays on as if nothing happened.
                remote.peer().release();
                return Err(MoveError::NotPrepared {
                    node: to.to_string(),
                    source: Box::new(e),
                });
            }
        }
    }
    let prepare_ms = started.elapsed().as_secs_f64() * 1000.0;
    // 2. Stop the current sender after its last frame and take its exact state.
    let gap_from = match m.stop().await {
        Ok(last) => last,
        Err(e) => {
            if let Some(t) = target {
                t.peer().release();
            }
            return Err(e);
        }
    };
    // 3. Start the new sender right after it, on the same pacing line.
    let first_sent = m.start(node, target, to, &here).await?;
    // 4. Commit.
    m.watch(node);
    Ok(committed(
        node,
        &info,
        (from, to, &here),
        mode,
        (gap_from, first_sent),
        prepare_ms,
        started,
    ))
}

/// The RPC timeout of migration calls.
pub(super) fn rpc_timeout(node: &Node) -> Duration {
    Duration::from_millis(node.config.cluster.migration.rpc_timeout_ms)
}
