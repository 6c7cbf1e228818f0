//! The steering side of a moved live viewer (issue 7 §1): like a playback, the viewer's
//! RTSP connection and server ports stay here while another node sends its
//! `live/<camera>`; the handoff carries the viewer's RTP identity and names the last packets
//! sent, so the next sender continues right after them (`crate::live::handoff`).

use super::mover::Target as _;
use super::steer::{call_node, release_on, watch, wire_dests};
use crate::cluster::Cluster;
use crate::handoff::{MigrationCall, MigrationReply, PrepareSpec};
use crate::live::handoff::{Joined, LiveHandoff, Origin};
use crate::live::reader::Reader;
use crate::live::stream::Stream;
use crate::live_sender::{LivePump, LiveSender, RemoteLiveSender};
use crate::node::command::{MoveError, MoveReport, SourceMode};
use crate::node::{Node, SessionInfo};
use crate::playback::task::wall_us;
use crate::rtsp::session::{Media, Session};
use crate::rtsp::udp_session::UdpPlay;
use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// The node sending a live viewer's media, seen from the node that steers it.
pub struct RemoteLive {
    pub node: String,
    session: String,
    cluster: Arc<Cluster>,
    timeout: Duration,
    watchdog: CancellationToken,
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
        let (cluster, node, timeout) = (self.cluster.clone(), self.node.clone(), self.timeout);
        let call = MigrationCall::PauseLive {
            session: self.session.clone(),
            paused,
        };
        tokio::spawn(async move {
            let _order = lock.lock().await;
            if latest.load(Ordering::Acquire) != gen {
                return; // a newer PAUSE/PLAY goes instead
            }
            match call_node(&cluster, &node, call, timeout).await {
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
        self.watchdog.cancel();
        release_on(&self.cluster, &self.node, &self.session, self.timeout);
    }
}

/// The viewer's side of the handle (`UdpPlay` holds it as a trait object, so the RTSP code
/// does not name this module).
impl RemoteLiveSender for RemoteLive {
    fn node(&self) -> &str {
        &self.node
    }
    fn set_paused(&self, paused: bool) {
        RemoteLive::set_paused(self, paused)
    }
    fn release(self: Box<Self>) {
        RemoteLive::release(*self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// This module's own handle back from the viewer's trait object (the viewer holds no
/// other kind of remote live sender).
fn own(r: Box<dyn RemoteLiveSender>) -> Result<Box<RemoteLive>, MoveError> {
    r.into_any()
        .downcast::<RemoteLive>()
        .map_err(|_| MoveError::BetweenSenders)
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
    session: &mut Session,
    from: &str,
) {
    let info = session.info.clone();
    let Media::UdpPlay(play) = &mut session.media else {
        return;
    };
    if !matches!(&play.sender, LiveSender::Remote(r) if r.node() == from) {
        return;
    }
    let LiveSender::Remote(remote) = std::mem::replace(&mut play.sender, LiveSender::None) else {
        return;
    };
    let Ok(remote) = own(remote) else {
        return;
    };
    let last = remote.last.lock().unwrap_or_else(|p| p.into_inner()).take();
    remote.release();
    *info.media_node.lock().unwrap_or_else(|p| p.into_inner()) = None;
    let Some((last, reported)) = last else {
        warn!(session = %info.id, node = %from, "sending node of a live viewer silent before its first report: ending the session");
        info.cancel.cancel();
        return;
    };
    // The viewer's own path while it is still fed (the camera held here, or this node's
    // relay still running), else the camera as this node can serve it now.
    let fed = session.path.clone().filter(|p| p.stream.is_live());
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
        play.outs.clone(),
        None,
        None,
    );
    pump.set_paused(play.paused);
    play.sender = LiveSender::Local(pump);
    node.notify_change();
}

/// Moves the media of a live UDP viewer to `to` (or back here): one handoff.
pub async fn move_live(
    node: &Arc<Node>,
    cluster: Option<&Arc<Cluster>>,
    session: &mut Session,
    to: &str,
    mode: Option<SourceMode>,
) -> Result<MoveReport, MoveError> {
    let patience = Duration::from_millis(node.config.cluster.migration.live_match_ms);
    let m = LiveMove {
        session,
        camera: String::new(),
        stream: None,
        patience,
        handoff: None,
        reader_here: None,
    };
    super::mover::drive(node, cluster, m, to, mode).await
}

/// A live viewer's steps of a move: its sender is `UdpPlay::sender` (this node's
/// [`LivePump`] or a [`RemoteLive`]), its state the [`LiveHandoff`] naming the last packets
/// sent.
struct LiveMove<'a> {
    session: &'a mut Session,
    /// The camera and its hub here (set by `current`).
    camera: String,
    stream: Option<Arc<Stream>>,
    /// How long a sender here waits for the last packets sent elsewhere (`live_match_ms`).
    patience: Duration,
    /// The stopped sender's state, and its reader when it ran here.
    handoff: Option<LiveHandoff>,
    reader_here: Option<Reader>,
}

impl LiveMove<'_> {
    fn play(&mut self) -> Result<&mut UdpPlay, MoveError> {
        match &mut self.session.media {
            Media::UdpPlay(play) => Ok(play),
            _ => Err(MoveError::NotMovable("the viewer is not playing over UDP")),
        }
    }
}

impl super::mover::Target for RemoteLive {
    async fn call(&self, call: MigrationCall) -> Result<MigrationReply, MoveError> {
        call_node(&self.cluster, &self.node, call, self.timeout).await
    }
    fn release(self) {
        RemoteLive::release(self)
    }
}

impl super::mover::Move for LiveMove<'_> {
    type Target = RemoteLive;

    fn info(&self) -> Arc<SessionInfo> {
        self.session.info.clone()
    }

    fn current(&mut self, here: &str) -> Result<String, MoveError> {
        if self.session.kind() != vigil_proto::rtsp::SessionKind::Play {
            return Err(MoveError::NotMovable(
                "a publisher cannot move: its RTP comes to this node",
            ));
        }
        let (camera, stream) = self
            .session
            .path
            .as_ref()
            .and_then(|p| Some((p.name.strip_prefix("live/")?.to_string(), p.stream.clone())))
            .ok_or(MoveError::NotMovable("not a live viewer"))?;
        (self.camera, self.stream) = (camera, Some(stream));
        Ok(match &self.play()?.sender {
            LiveSender::Remote(r) => r.node().to_string(),
            _ => here.to_string(),
        })
    }

    fn movable(&mut self, _: &Node) -> Result<(), MoveError> {
        Ok(())
    }

    fn target(
        &self,
        node: &Node,
        cluster: &Arc<Cluster>,
        to: &str,
        _: SourceMode,
    ) -> Result<RemoteLive, MoveError> {
        Ok(RemoteLive {
            node: to.to_string(),
            session: self.session.info.id.clone(),
            cluster: cluster.clone(),
            // Its Start waits up to `live_match_ms` for the last packets.
            timeout: super::mover::rpc_timeout(node) + self.patience,
            watchdog: CancellationToken::new(),
            pause_gen: Default::default(),
            pause_lock: Default::default(),
            last: Default::default(),
        })
    }

    fn spec(&self, node: &Node, cluster: &Cluster, here: &str, mode: SourceMode) -> PrepareSpec {
        let info = &self.session.info;
        let dests = match &self.session.media {
            Media::UdpPlay(play) => wire_dests(node, cluster, &play.outs),
            _ => Vec::new(),
        };
        PrepareSpec {
            session: info.id.clone(),
            from: here.to_string(),
            camera: self.camera.clone(),
            start_ms: 0,
            end_ms: None,
            client: info.client,
            dests,
            mode,
            cname: node.config.node.id.clone(),
            position_ms: 0,
            live: true,
        }
    }

    async fn stop(&mut self) -> Result<Option<i64>, MoveError> {
        let info = self.session.info.clone();
        let play = self.play()?;
        let (handoff, reader_here) = match std::mem::replace(&mut play.sender, LiveSender::None) {
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
            LiveSender::Remote(r) => {
                let r = own(r)?;
                let call = MigrationCall::StopLive {
                    session: info.id.clone(),
                };
                match r.call(call).await {
                    Ok(MigrationReply::StoppedLive(h)) => {
                        r.release();
                        (h, None)
                    }
                    other => {
                        // The sender there goes on: nothing moved.
                        let node = r.node.clone();
                        play.sender = LiveSender::Remote(r);
                        return Err(MoveError::NotStopped {
                            node,
                            answer: format!("{other:?}"),
                        });
                    }
                }
            }
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
        let info = self.session.info.clone();
        let (handoff, reader_here) = (self.handoff.take(), self.reader_here.take());
        let (stream, patience) = (self.stream.clone(), self.patience);
        let play = self.play()?;
        let (Some(handoff), Some(stream)) = (handoff, stream) else {
            return Err(MoveError::BetweenSenders);
        };
        let mut first_sent = None;
        let mut failed = None;
        if let Some(t) = target {
            let call = MigrationCall::StartLive {
                session: info.id.clone(),
                handoff: handoff.clone(),
            };
            match t.call(call).await {
                Ok(MigrationReply::Started { first_sent_us }) => {
                    first_sent = first_sent_us;
                    play.sender = LiveSender::Remote(Box::new(t));
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
        if matches!(play.sender, LiveSender::None) {
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
            play.sender = LiveSender::Local(LivePump::spawn(
                node.clone(),
                info.clone(),
                reader,
                play.outs.clone(),
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

    fn watch(&self, node: &Arc<Node>) {
        if let Media::UdpPlay(UdpPlay {
            sender: LiveSender::Remote(t),
            ..
        }) = &self.session.media
        {
            let Some(t) = t.as_any().downcast_ref::<RemoteLive>() else {
                return;
            };
            watch(
                node,
                &t.cluster,
                &t.node,
                &self.session.info,
                super::heartbeat::Last::Live(t.last.clone()),
                t.watchdog.clone(),
            );
        }
    }
}
