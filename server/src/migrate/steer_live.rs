//! The steering side of a moved live viewer (issue 7 §1): like a playback, the viewer's
//! RTSP connection and server ports stay here while another node sends its
//! `live/<camera>`; the handoff carries the viewer's RTP identity and names the last packets
//! sent, so the next sender continues right after them (`crate::live::handoff`).

use super::heartbeat::Last;
use super::mover::{Peer, Watchdog};
use super::steer::wire_dests;
use crate::cluster::Cluster;
use crate::handoff::{MigrationCall, MigrationReply, PrepareSpec};
use crate::live::handoff::{Joined, LiveHandoff, Origin};
use crate::live::reader::Reader;
use crate::live::stream::Stream;
use crate::live_sender::{LivePump, LiveSender, RemoteLiveSender};
use crate::node::command::{MoveError, MoveReport, SourceMode};
use crate::node::{Node, SessionInfo};
use crate::playback::task::wall_us;
use crate::steering::LiveViewer;
use futures::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::warn;

/// The node sending a live viewer's media, seen from the node that steers it.
pub struct RemoteLive {
    peer: Peer,
    /// PAUSE/PLAY forwarded in order: each carries a generation, and only the newest is
    /// sent once the one before has been answered.
    pause_gen: Arc<std::sync::atomic::AtomicU64>,
    pause_lock: Arc<tokio::sync::Mutex<()>>,
    /// The viewer's state as the sending node last reported it (the heartbeat's answer).
    last: Arc<Mutex<Option<(LiveHandoff, Instant)>>>,
}

impl RemoteLive {
    /// PAUSE (or the PLAY that resumes) of the viewer, carried to the node sending it (in
    /// the background: the RTSP answer does not wait on another node).
    pub fn set_paused(&self, paused: bool) {
        use std::sync::atomic::Ordering;
        let gen = self.pause_gen.fetch_add(1, Ordering::AcqRel) + 1;
        let (latest, lock) = (self.pause_gen.clone(), self.pause_lock.clone());
        let peer = self.peer.clone();
        let call = MigrationCall::PauseLive {
            session: self.peer.session.clone(),
            paused,
        };
        tokio::spawn(async move {
            let _order = lock.lock().await;
            if latest.load(Ordering::Acquire) != gen {
                return; // a newer PAUSE/PLAY goes instead
            }
            let node = &peer.node;
            match peer.call(call).await {
                Ok(MigrationReply::Done) => {}
                Err(e) => {
                    warn!(%node, paused, "PAUSE/PLAY of a moved live viewer not carried: {e}")
                }
                Ok(other) => warn!(%node, "PAUSE/PLAY of a moved live viewer: {other:?}"),
            }
        });
    }

    /// Forget the viewer there (in the background).
    pub fn release(self) {
        self.peer.release();
    }

    /// Stop the viewer there after its last packet; its state back.
    async fn stop(&self) -> Result<LiveHandoff, MoveError> {
        let call = MigrationCall::StopLive {
            session: self.peer.session.clone(),
        };
        match self.peer.call(call).await {
            Ok(MigrationReply::StoppedLive(h)) => Ok(h),
            Ok(other) => Err(MoveError::NotStopped {
                node: self.peer.node.clone(),
                answer: format!("{other:?}"),
            }),
            Err(e) => Err(MoveError::NotStopped {
                node: self.peer.node.clone(),
                answer: e.to_string(),
            }),
        }
    }
}

/// The viewer's side of the handle (`UdpPlay` holds it as a trait object, so the RTSP code
/// does not name this module).
impl RemoteLiveSender for RemoteLive {
    fn node(&self) -> &str {
        &self.peer.node
    }
    fn set_paused(&self, paused: bool) {
        RemoteLive::set_paused(self, paused)
    }
    fn stop(&self) -> BoxFuture<'_, Result<LiveHandoff, MoveError>> {
        Box::pin(RemoteLive::stop(self))
    }
    fn take_last(&self) -> Option<(LiveHandoff, Instant)> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
    fn release(self: Box<Self>) {
        RemoteLive::release(*self)
    }
}

/// A reader of `stream` continuing `handoff`: waits up to `patience` for the previous
/// sender's last packets to reach this hub (a relay's latency), then joins.
pub async fn continue_here(
    stream: Arc<Stream>,
    handoff: &LiveHandoff,
    patience: Duration,
) -> (Reader, Vec<Option<Joined>>) {
    let deadline = tokio::time::Instant::now() + patience;
    let found = |s: &Stream| {
        handoff.tracks.iter().enumerate().all(|(i, t)| {
            t.as_ref()
                .and_then(|t| t.mark.as_ref())
                .is_none_or(|m| s.find_mark(i, m).is_some())
        })
    };
    while !found(&stream) {
        if !stream.wait_change(deadline).await {
            break;
        }
    }
    Reader::continuing(stream, handoff, wall_us(), Origin::Handoff)
}

/// The margin of a take-back's "cannot have sent" cut past the sender's lease: its lease
/// check runs every 100 ms, and a packet can reach its hub a relay hop later than ours.
const RELAY_SLACK_MS: u64 = 200;

/// The node sending a live viewer fell silent past `takeback_ms`: this node sends it again,
/// from the state that node last reported ([`Origin::Heartbeat`]: numbering aligned on
/// the last packet it reported, resuming at the next keyframe, nothing it may have sent
/// since sent twice). With no report, or no hub for the camera here within the RPC
/// timeout, the viewer ends (its client reconnects).
pub async fn take_back(
    node: &Arc<Node>,
    cluster: Option<&Arc<Cluster>>,
    info: &Arc<SessionInfo>,
    viewer: LiveViewer<'_>,
    from: &str,
) {
    if viewer.sender.remote().is_none_or(|r| r.node() != from) {
        return;
    }
    let LiveSender::Remote(remote) = viewer.sender.take() else {
        return;
    };
    let last = remote.take_last();
    remote.release();
    *info.media_node.lock().unwrap_or_else(|p| p.into_inner()) = None;
    let Some((last, reported)) = last else {
        warn!(session = %info.id, node = %from, "sending node of a live viewer silent before its first report: ending the session");
        info.cancel.cancel();
        return;
    };
    // The viewer's own path while it is still fed (the camera held here, or this node's
    // relay still running), else the camera as this node can serve it now.
    let fed = Some(viewer.path.clone()).filter(|p| p.stream.is_live());
    let camera = info.path.strip_prefix("live/").unwrap_or(&info.path);
    let path = match fed.map_or_else(
        || crate::ingest::relay::here_or_relayed(node, cluster, camera),
        Ok,
    ) {
        Ok(p) => p,
        Err(e) => {
            warn!(session = %info.id, node = %from, "sending node of a live viewer silent and the camera is not here ({e}): ending the session");
            info.cancel.cancel();
            return;
        }
    };
    let wait = Duration::from_millis(node.config.cluster.migration.rpc_timeout_ms);
    if !path
        .stream
        .wait_keyframe(tokio::time::Instant::now() + wait)
        .await
    {
        warn!(session = %info.id, node = %from, "sending node of a live viewer silent and {} has no keyframe here: ending the session", path.name);
        info.cancel.cancel();
        return;
    }
    // The sender stops once its lease runs out: `lease_ms` after the heartbeat that
    // brought this report at the latest (plus a hop's worth of relay latency between the
    // two hubs).
    let mcfg = &node.config.cluster.migration;
    let unsent_after = reported + Duration::from_millis(mcfg.lease_ms + RELAY_SLACK_MS);
    let (reader, joined) = Reader::continuing(
        path.stream.clone(),
        &last,
        wall_us(),
        Origin::Heartbeat { unsent_after },
    );
    warn!(session = %info.id, node = %from, ?joined, "sending node of a live viewer silent: taken back");
    let pump = LivePump::spawn(
        node.clone(),
        info.clone(),
        reader,
        viewer.outs.to_vec(),
        None,
        None,
    );
    pump.set_paused(viewer.paused);
    *viewer.sender = LiveSender::Local(pump);
    node.notify_change();
}

/// Moves the media of a live UDP viewer to `to` (or back here): one handoff.
pub async fn move_live(
    node: &Arc<Node>,
    cluster: Option<&Arc<Cluster>>,
    info: &Arc<SessionInfo>,
    viewer: LiveViewer<'_>,
    to: &str,
    mode: Option<SourceMode>,
) -> Result<MoveReport, MoveError> {
    let patience = Duration::from_millis(node.config.cluster.migration.live_match_ms);
    let m = LiveMove {
        info: info.clone(),
        viewer,
        camera: String::new(),
        stream: None,
        patience,
        handoff: None,
        reader_here: None,
        watchdog: None,
    };
    super::mover::drive(node, cluster, m, to, mode).await
}

/// A live viewer's steps of a move: its sender is the viewer's (this node's [`LivePump`]
/// or a [`RemoteLive`]), its state the [`LiveHandoff`] naming the last packets sent.
struct LiveMove<'a> {
    info: Arc<SessionInfo>,
    viewer: LiveViewer<'a>,
    /// The camera and its hub here (set by `current`).
    camera: String,
    stream: Option<Arc<Stream>>,
    /// How long a sender here waits for the last packets sent elsewhere (`live_match_ms`).
    patience: Duration,
    /// The stopped sender's state, and its reader when it ran here.
    handoff: Option<LiveHandoff>,
    reader_here: Option<Reader>,
    /// The watch of the node the viewer went to, started once the move is committed.
    watchdog: Option<Watchdog>,
}

impl super::mover::Target for RemoteLive {
    fn peer(&self) -> &Peer {
        &self.peer
    }
}

impl super::mover::Move for LiveMove<'_> {
    type Target = RemoteLive;

    fn info(&self) -> Arc<SessionInfo> {
        self.info.clone()
    }

    fn current(&mut self, here: &str) -> Result<String, MoveError> {
        let path = self.viewer.path;
        let camera = path
            .name
            .strip_prefix("live/")
            .ok_or(MoveError::NotMovable("not a live viewer"))?;
        (self.camera, self.stream) = (camera.to_string(), Some(path.stream.clone()));
        Ok(self
            .viewer
            .sender
            .remote()
            .map_or(here.to_string(), |r| r.node().to_string()))
    }

    fn movable(&mut self, _: &Node) -> Result<(), MoveError> {
        Ok(())
    }

    fn target(
        &self,
        node: &Node,
        cluster: &Arc<Cluster>,
        to: &str,
    ) -> Result<RemoteLive, MoveError> {
        let mut peer = Peer::new(node, cluster, to, &self.info.id);
        // Its Start waits up to `live_match_ms` for the last packets.
        peer.timeout += self.patience;
        Ok(RemoteLive {
            peer,
            pause_gen: Default::default(),
            pause_lock: Default::default(),
            last: Default::default(),
        })
    }

    fn spec(&self, node: &Node, cluster: &Cluster, here: &str, mode: SourceMode) -> PrepareSpec {
        let info = &self.info;
        PrepareSpec {
            session: info.id.clone(),
            from: here.to_string(),
            camera: self.camera.clone(),
            start_ms: 0,
            end_ms: None,
            client: info.client,
            dests: wire_dests(node, cluster, self.viewer.outs),
            mode,
            cname: node.config.node.id.clone(),
            position_ms: 0,
            live: true,
        }
    }

    async fn stop(&mut self) -> Result<Option<i64>, MoveError> {
        let info = self.info.clone();
        let sender = &mut *self.viewer.sender;
        let (handoff, reader_here) = match sender.take() {
            LiveSender::Local(p) => match p.stop().await {
                Some(pumped) => (
                    pumped.reader.handoff(pumped.last_sent_us),
                    Some(pumped.reader),
                ),
                None => {
                    info.cancel.cancel();
                    return Err(MoveError::SenderFailed);
                }
            },
            LiveSender::Remote(r) => match r.stop().await {
                Ok(h) => {
                    r.release();
                    (h, None)
                }
                Err(e) => {
                    // The sender there goes on: nothing moved.
                    *sender = LiveSender::Remote(r);
                    return Err(e);
                }
            },
            LiveSender::None => return Err(MoveError::BetweenSenders),
        };
        let last = handoff.last_sent_us;
        (self.handoff, self.reader_here) = (Some(handoff), reader_here);
        Ok(last)
    }

    async fn start(
        &mut self,
        node: &Arc<Node>,
        target: Option<RemoteLive>,
        to: &str,
        here: &str,
    ) -> Result<Option<i64>, MoveError> {
        let info = self.info.clone();
        let (handoff, reader_here) = (self.handoff.take(), self.reader_here.take());
        let (stream, patience) = (self.stream.clone(), self.patience);
        let (Some(handoff), Some(stream)) = (handoff, stream) else {
            return Err(MoveError::BetweenSenders);
        };
        let viewer = &mut self.viewer;
        let mut first_sent = None;
        let mut failed = None;
        if let Some(t) = target {
            let call = MigrationCall::StartLive {
                session: info.id.clone(),
                handoff: handoff.clone(),
            };
            match t.peer.call(call).await {
                Ok(MigrationReply::Started { first_sent_us }) => {
                    first_sent = first_sent_us;
                    self.watchdog = Some(t.peer.watchdog(Last::Live(t.last.clone())));
                    *viewer.sender = LiveSender::Remote(Box::new(t));
                }
                other => {
                    t.release();
                    failed = Some(MoveError::LiveNotStarted {
                        node: to.to_string(),
                        here: here.to_string(),
                        answer: format!("{other:?}"),
                    });
                }
            }
        }
        if matches!(viewer.sender, LiveSender::None) {
            // Here: the reader that stopped here continues as it was; else from the handoff.
            let reader = match reader_here {
                Some(r) => r,
                None => {
                    let (r, joined) = continue_here(stream, &handoff, patience).await;
                    tracing::info!(session = %info.id, ?joined, "migration: live viewer continued here");
                    r
                }
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            *viewer.sender = LiveSender::Local(LivePump::spawn(
                node.clone(),
                info.clone(),
                reader,
                viewer.outs.to_vec(),
                Some(tx),
                None,
            ));
            first_sent = super::first_sent(rx).await;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(first_sent),
        }
    }

    fn watch(&mut self, node: &Arc<Node>) {
        if let Some(w) = self.watchdog.take() {
            w.start(node, &self.info);
        }
    }
}
