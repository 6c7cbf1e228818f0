//! The steering side of a migrated session (node A): the viewer's RTSP connection stays
//! here, the media is sent by another node. [`Remote`] is the session's handle on that node;
//! [`move_session`] carries out one handoff (Prepare → stop here after frame k → Start there
//! at frame k+1's due time), and the heartbeat (`heartbeat`) takes the session back if the
//! sending node dies.

use super::heartbeat::Last;
use super::host::{cursor_from_wire, cursor_to_wire, tracks_from_wire};
use super::mover::{Peer, Watchdog};
use crate::cluster::Cluster;
use crate::handoff::{MigrationCall, MigrationReply, PrepareSpec, WireDest, WireRun, WireStopped};
use crate::library::Library;
use crate::node::command::{MoveError, MoveReport, SessionCommand, SourceMode};
use crate::node::{Node, SessionInfo};
use crate::playback::sender::{Playback, RemoteSender, Resumed};
use crate::playback::task::{to_wire, PlayParams, Sink, TrackOut, UdpVia};
use crate::playback::SessionCore;
use crate::steering::{Steered, SteeredMedia};
use futures::future::BoxFuture;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};
use vigil_proto::sdp::SessionDescription;

/// The node sending a session's media, seen from the node that steers it.
pub struct Remote {
    peer: Peer,
    /// A sender runs there now (false while paused).
    running: bool,
    library: Library,
    /// The sending node's last heartbeat answer: where a take-back resumes.
    last: Arc<Mutex<Option<WireStopped>>>,
}

impl Remote {
    async fn resolve(
        &self,
        sdp: &SessionDescription,
        camera: &str,
        w: WireStopped,
    ) -> Result<Resumed, MoveError> {
        let resume = match w.resume {
            Some(c) => Some(
                cursor_from_wire(&self.library, camera, c)
                    .await
                    .map_err(MoveError::Resume)?,
            ),
            None => None,
        };
        Ok(Resumed {
            tracks: tracks_from_wire(sdp, &w.tracks),
            resume,
            anchor: w.anchor,
            last_sent_us: w.last_sent_us,
        })
    }

    /// Stop the sender there and get its exact state back.
    pub async fn stop(
        &mut self,
        sdp: &SessionDescription,
        camera: &str,
    ) -> Result<Option<Resumed>, MoveError> {
        if !self.running {
            return Ok(None);
        }
        let session = self.peer.session.clone();
        match self.peer.call(MigrationCall::Stop { session }).await? {
            MigrationReply::Stopped(Some(w)) => {
                self.running = false;
                self.resolve(sdp, camera, w).await.map(Some)
            }
            MigrationReply::Stopped(None) => {
                self.running = false;
                Ok(None)
            }
            other => Err(self.unexpected("Stop", other)),
        }
    }

    /// The state of the last heartbeat (the sending node is gone).
    pub async fn last_state(&self, sdp: &SessionDescription, camera: &str) -> Option<Resumed> {
        let w = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        self.resolve(sdp, camera, w).await.ok()
    }

    /// Start the sender there; returns when its first frame went out (wall µs).
    pub async fn start(
        &mut self,
        tracks: &[TrackOut],
        params: &PlayParams,
    ) -> Result<Option<i64>, MoveError> {
        let run = WireRun {
            tracks: to_wire(tracks),
            cursor: cursor_to_wire(&params.start),
            anchor: params.anchor,
            scale: params.scale,
            keyframes_only: params.keyframes_only,
            end_ms: params.end_ms,
            range_end_only: params.range_end_only,
        };
        let session = self.peer.session.clone();
        match self
            .peer
            .call(MigrationCall::Start { session, run })
            .await?
        {
            MigrationReply::Started { first_sent_us } => {
                self.running = true;
                Ok(first_sent_us)
            }
            other => Err(self.unexpected("Start", other)),
        }
    }

    fn unexpected(&self, call: &'static str, answer: MigrationReply) -> MoveError {
        MoveError::UnexpectedAnswer {
            node: self.peer.node.clone(),
            call,
            answer: format!("{answer:?}"),
        }
    }

    /// Forget the session there (in the background: the session goes on without it).
    pub fn release(self) {
        self.peer.release();
    }
}

/// One migration call to `node`; its `Failed` answer is an error.
pub(super) async fn call_node(
    cluster: &Cluster,
    node: &str,
    call: MigrationCall,
    timeout: Duration,
) -> Result<MigrationReply, MoveError> {
    match cluster.call_migration(node, call, timeout).await {
        Ok(MigrationReply::Failed(reason)) => Err(MoveError::Refused {
            node: node.to_string(),
            reason,
        }),
        Ok(r) => Ok(r),
        Err(e) => Err(MoveError::Rpc {
            node: node.to_string(),
            error: format!("{e:#}"),
        }),
    }
}

/// Forgets `session` on `node`, in the background (the session goes on without it).
pub(super) fn release_on(cluster: &Arc<Cluster>, node: &str, session: &str, timeout: Duration) {
    let cluster = cluster.clone();
    let (node, session) = (node.to_string(), session.to_string());
    tokio::spawn(async move {
        let _ = cluster
            .call_migration(&node, MigrationCall::Release { session }, timeout)
            .await;
    });
}

/// Where a session's tracks go at the client, and the source ports it saw at SETUP.
pub(super) fn wire_dests(
    node: &Node,
    cluster: &Cluster,
    outs: &[crate::playback::task::UdpOut],
) -> Vec<WireDest> {
    outs.iter()
        .map(|o| {
            let (src_rtp, src_rtcp) = match &o.via {
                UdpVia::Socket { rtp, rtcp } => (rtp.local_addr().ok(), rtcp.local_addr().ok()),
                UdpVia::Spoofed {
                    src_rtp, src_rtcp, ..
                } => (Some(*src_rtp), Some(*src_rtcp)),
            };
            let own = |a: Option<std::net::SocketAddr>| {
                let mut a = a.unwrap_or(node.config.rtsp.listen);
                if a.ip().is_unspecified() {
                    a.set_ip(session_local_ip(cluster));
                }
                a
            };
            WireDest {
                track: o.track,
                rtp: o.dest_rtp,
                rtcp: o.dest_rtcp,
                src_rtp: own(src_rtp),
                src_rtcp: own(src_rtcp),
            }
        })
        .collect()
}

/// The refusal of a session whose media rides its RTSP connection, in the order a move
/// checks (the cluster, "already there", then why it cannot move).
const INTERLEAVED: &str = "the session is TCP-interleaved: its media rides the viewer's RTSP \
     connection to this node, so moving it would relieve nothing (placement at DESCRIBE is its lever)";

/// Runs a command sent to the task owning a session. `cluster`: the node's cluster shell
/// (None when off: nothing can move).
pub async fn handle(
    node: &Arc<Node>,
    cluster: Option<&Arc<Cluster>>,
    session: Steered<'_>,
    cmd: SessionCommand,
) {
    let Steered { info, media } = session;
    match cmd {
        SessionCommand::Move { to, mode, reply } => {
            let r = match media {
                SteeredMedia::Playback { core, playback } => {
                    move_session(node, cluster, info, core, playback, &to, mode).await
                }
                SteeredMedia::Live(viewer) => {
                    super::steer_live::move_live(node, cluster, info, viewer, &to, mode).await
                }
                SteeredMedia::Interleaved => match cluster {
                    None => Err(MoveError::ClusterOff),
                    Some(c) if c.self_id == to => Err(MoveError::AlreadyThere { node: to.clone() }),
                    Some(_) => Err(MoveError::NotMovable(INTERLEAVED)),
                },
                SteeredMedia::Unmovable(why) => Err(match cluster {
                    None => MoveError::ClusterOff,
                    Some(_) => MoveError::NotMovable(why),
                }),
            };
            match &r {
                Ok(m) => {
                    info!(session = %m.session, from = %m.from, to = %m.to, gap_ms = ?m.gap_ms, "session moved")
                }
                Err(e) => {
                    warn!(session = %info.id, to = %to, error = %e, "session not moved")
                }
            }
            let _ = reply.send(r);
        }
        SessionCommand::TakeBack { node: from } => match media {
            SteeredMedia::Playback { core, playback } => {
                take_back(node, info, core, playback, &from).await
            }
            SteeredMedia::Live(viewer) => {
                super::steer_live::take_back(node, cluster, info, viewer, &from).await
            }
            SteeredMedia::Interleaved | SteeredMedia::Unmovable(_) => {}
        },
    }
}

/// Moves the media of a playback to `to` (or back here): one handoff.
async fn move_session(
    node: &Arc<Node>,
    cluster: Option<&Arc<Cluster>>,
    info: &Arc<SessionInfo>,
    core: &mut SessionCore,
    pb: &mut Playback,
    to: &str,
    mode: Option<SourceMode>,
) -> Result<MoveReport, MoveError> {
    let m = PlaybackMove {
        info: info.clone(),
        core,
        pb,
        library: None,
        old: None,
        was_running: false,
        anchor: None,
        watchdog: None,
    };
    super::mover::drive(node, cluster, m, to, mode).await
}

/// A playback's steps of a move: its sender is `Playback`'s (this node's task or a
/// [`Remote`]), its state the core's hand-back and the pacing anchor.
struct PlaybackMove<'a> {
    info: Arc<SessionInfo>,
    core: &'a mut SessionCore,
    pb: &'a mut Playback,
    /// The node's recordings (set by `movable`: a node without them cannot move playbacks).
    library: Option<Library>,
    /// The node that sent the media before the move, released once the move is done.
    old: Option<Box<dyn RemoteSender>>,
    /// A sender ran when the move began (a paused session moves paused).
    was_running: bool,
    /// The pacing line of the stopped sender, which the new one continues.
    anchor: Option<crate::handoff::Anchor>,
    /// The watch of the node the media went to, started once the move is committed.
    watchdog: Option<Watchdog>,
}

impl PlaybackMove<'_> {
    fn library(&self) -> Result<Library, MoveError> {
        self.library
            .clone()
            .ok_or(MoveError::NotMovable("recording is disabled"))
    }
}

/// The session's side of the handle (`Playback` holds it as a trait object, so the RTSP
/// code does not name this module).
impl RemoteSender for Remote {
    fn node(&self) -> &str {
        &self.peer.node
    }
    fn running(&self) -> bool {
        self.running
    }
    fn stop<'a>(
        &'a mut self,
        sdp: &'a SessionDescription,
        camera: &'a str,
    ) -> BoxFuture<'a, Result<Option<Resumed>, MoveError>> {
        Box::pin(Remote::stop(self, sdp, camera))
    }
    fn last_state<'a>(
        &'a self,
        sdp: &'a SessionDescription,
        camera: &'a str,
    ) -> BoxFuture<'a, Option<Resumed>> {
        Box::pin(Remote::last_state(self, sdp, camera))
    }
    fn start<'a>(
        &'a mut self,
        tracks: &'a [TrackOut],
        params: &'a PlayParams,
    ) -> BoxFuture<'a, Result<Option<i64>, MoveError>> {
        Box::pin(Remote::start(self, tracks, params))
    }
    fn release(self: Box<Self>) {
        Remote::release(*self)
    }
}

impl super::mover::Target for Remote {
    fn peer(&self) -> &Peer {
        &self.peer
    }
}

impl super::mover::Move for PlaybackMove<'_> {
    type Target = Remote;

    fn info(&self) -> Arc<SessionInfo> {
        self.info.clone()
    }

    fn current(&mut self, here: &str) -> Result<String, MoveError> {
        Ok(self.pb.remote_node().unwrap_or(here).to_string())
    }

    fn movable(&mut self, node: &Node) -> Result<(), MoveError> {
        if self.pb.udp.is_empty() {
            return Err(MoveError::NotMovable(
                "the session has not started playing yet",
            ));
        }
        self.library = Some(
            node.library
                .clone()
                .ok_or(MoveError::NotMovable("recording is disabled on this node"))?,
        );
        Ok(())
    }

    fn target(&self, node: &Node, cluster: &Arc<Cluster>, to: &str) -> Result<Remote, MoveError> {
        Ok(Remote {
            peer: Peer::new(node, cluster, to, &self.info.id),
            running: false,
            library: self.library()?,
            last: Arc::new(Mutex::new(None)),
        })
    }

    fn spec(&self, node: &Node, cluster: &Cluster, here: &str, mode: SourceMode) -> PrepareSpec {
        let info = &self.info;
        let position_ms = info.position_ms.load(Ordering::Relaxed);
        let req = &self.pb.req;
        PrepareSpec {
            session: info.id.clone(),
            from: here.to_string(),
            camera: req.camera.clone(),
            start_ms: req.start_ms,
            end_ms: req.end_ms,
            client: info.client,
            dests: wire_dests(node, cluster, &self.pb.udp),
            mode,
            cname: node.config.node.id.clone(),
            position_ms: if position_ms > 0 {
                position_ms
            } else {
                req.start_ms
            },
            live: false,
        }
    }

    async fn stop(&mut self) -> Result<Option<i64>, MoveError> {
        self.was_running = self.pb.is_running();
        let (handback, handoff) = self.pb.stop().await;
        if let Some(hb) = handback {
            self.core.sender_stopped(hb);
        }
        // A stopped local run leaves no sender; a remote one stays until it is replaced.
        self.old = self.pb.take_remote();
        self.anchor = handoff.anchor;
        Ok(handoff.last_sent_us)
    }

    async fn start(
        &mut self,
        node: &Arc<Node>,
        target: Option<Remote>,
        to: &str,
        here: &str,
    ) -> Result<Option<i64>, MoveError> {
        let info = self.info.clone();
        let old = self.old.take();
        let (was_running, anchor) = (self.was_running, self.anchor);
        let pb = &mut *self.pb;
        let watchdog = target
            .as_ref()
            .map(|t| t.peer.watchdog(Last::Playback(t.last.clone())));
        let boxed = |t: Option<Remote>| t.map(|t| Box::new(t) as Box<dyn RemoteSender>);
        let mut first_sent = None;
        if was_running {
            let Some((tracks, cursor, window)) = self.core.restart() else {
                // The run ended (end of range) while we moved: nothing left to move.
                if let Some(t) = target {
                    t.release();
                }
                pb.set_remote(old);
                return Err(MoveError::PlaybackEnded);
            };
            let Some(library) = self.library.clone() else {
                return Err(MoveError::NotMovable("recording is disabled"));
            };
            let mut params = pb.params(node, window, cursor, anchor);
            let (tx, rx) = tokio::sync::oneshot::channel();
            params.first_sent = Some(tx);
            pb.set_remote(boxed(target));
            let sink = Sink::Udp(pb.udp.clone());
            // `start` falls back to this node if the target fails: the session never stops.
            first_sent = pb
                .start(node, library, tracks, params, sink, info.clone())
                .await;
            if first_sent.is_none() && pb.remote_node().is_none() {
                // Sent from here: its first frame goes out at its due time.
                first_sent = super::first_sent(rx).await;
            }
            if to != here && pb.remote_node().is_none() {
                if let Some(o) = old {
                    o.release();
                }
                return Err(MoveError::NotStarted {
                    node: to.to_string(),
                    here: here.to_string(),
                });
            }
        } else {
            pb.set_remote(boxed(target));
        }
        if let Some(o) = old {
            o.release();
        }
        if to != here {
            info.rate_bps.store(0, Ordering::Relaxed);
        }
        self.watchdog = watchdog.filter(|_| self.pb.remote_node().is_some());
        Ok(first_sent)
    }

    fn watch(&mut self, node: &Arc<Node>) {
        if let Some(w) = self.watchdog.take() {
            w.start(node, &self.info);
        }
    }
}

/// Records a committed move on the session (where its media is, how often it moved), tells
/// the cluster, and reports it: `sent` is (old sender's last frame, new sender's first).
pub(super) fn committed(
    node: &Node,
    info: &SessionInfo,
    (from, to, here): (String, &str, &str),
    mode: SourceMode,
    sent: (Option<i64>, Option<i64>),
    prepare_ms: f64,
    started: Instant,
) -> MoveReport {
    *info.media_node.lock().unwrap_or_else(|p| p.into_inner()) =
        (to != here).then(|| to.to_string());
    info.moves.fetch_add(1, Ordering::Relaxed);
    node.notify_change();
    MoveReport {
        session: info.id.clone(),
        from,
        to: to.to_string(),
        mode,
        gap_ms: sent.0.zip(sent.1).map(|(a, b)| (b - a) as f64 / 1000.0),
        prepare_ms,
        total_ms: started.elapsed().as_secs_f64() * 1000.0,
    }
}

fn session_local_ip(cluster: &Cluster) -> std::net::IpAddr {
    url::Url::parse(&cluster.rtsp_base)
        .ok()
        .and_then(|u| u.host_str().and_then(|h| h.parse().ok()))
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]))
}

/// The sending node stopped answering: continue here from its last heartbeat.
async fn take_back(
    node: &Arc<Node>,
    info: &Arc<SessionInfo>,
    core: &mut SessionCore,
    pb: &mut Playback,
    from: &str,
) {
    if pb.remote_node() != Some(from) {
        return;
    }
    let Some(remote) = pb.take_remote() else {
        return;
    };
    let was_running = remote.running();
    let last = remote.last_state(&pb.sdp, &pb.req.camera).await;
    remote.release();
    *info.media_node.lock().unwrap_or_else(|p| p.into_inner()) = None;
    warn!(session = %info.id, node = %from, "sending node silent: session taken back");
    let Some(library) = node.library.clone() else {
        return;
    };
    let Some(last) = last else {
        info.cancel.cancel();
        return;
    };
    core.sender_stopped(vigil_session::Handback {
        tracks: last.tracks,
        resume: last.resume,
    });
    if was_running {
        if let Some((tracks, cursor, window)) = core.restart() {
            // A fresh pacing line: the viewer sees a pause, never a burst of frames.
            let params = pb.params(node, window, cursor, None);
            let sink = Sink::Udp(pb.udp.clone());
            pb.start(node, library, tracks, params, sink, info.clone())
                .await;
        }
    }
    node.notify_change();
}
