//! The steering side of a moved live viewer (issue 7 §1): like a playback, the viewer's
//! RTSP connection and server ports stay here while another node sends its
//! `live/<camera>`; the handoff carries the viewer's RTP identity and names the last packets
//! sent, so the next sender continues right after them (`crate::live::handoff`).

use super::steer::{call_node, committed, release_on, watch, wire_dests};
use crate::cluster::Cluster;
use crate::handoff::{MigrationCall, MigrationReply, PrepareSpec};
use crate::live::handoff::{Joined, LiveHandoff, Origin};
use crate::live::reader::Reader;
use crate::live::stream::Stream;
use crate::node::command::{MoveError, MoveReport, SourceMode};
use crate::node::Node;
use crate::playback::task::wall_us;
use crate::rtsp::session::{Media, Session};
use crate::rtsp::udp_session::{LivePump, LiveSender};
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

    async fn call(&self, call: MigrationCall) -> Result<MigrationReply, MoveError> {
        call_node(&self.cluster, &self.node, call, self.timeout).await
    }

    /// Forget the viewer there (in the background).
    pub fn release(self) {
        self.watchdog.cancel();
        release_on(&self.cluster, &self.node, &self.session, self.timeout);
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
    session: &mut Session,
    from: &str,
) {
    let info = session.info.clone();
    let Media::UdpPlay(play) = &mut session.media else {
        return;
    };
    if !matches!(&play.sender, LiveSender::Remote(r) if r.node == from) {
        return;
    }
    let LiveSender::Remote(remote) = std::mem::replace(&mut play.sender, LiveSender::None) else {
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
    let cluster = cluster.cloned().ok_or(MoveError::ClusterOff)?;
    if session.kind() != vigil_proto::rtsp::SessionKind::Play {
        return Err(MoveError::NotMovable(
            "a publisher cannot move: its RTP comes to this node",
        ));
    }
    let here = cluster.self_id.clone();
    let info = session.info.clone();
    let (camera, stream) = session
        .path
        .as_ref()
        .and_then(|p| Some((p.name.strip_prefix("live/")?.to_string(), p.stream.clone())))
        .ok_or(MoveError::NotMovable("not a live viewer"))?;
    let Media::UdpPlay(play) = &mut session.media else {
        return Err(MoveError::NotMovable("the viewer is not playing over UDP"));
    };
    let from = match &play.sender {
        LiveSender::Remote(r) => r.node.clone(),
        _ => here.clone(),
    };
    if to == from {
        return Err(MoveError::AlreadyThere {
            node: to.to_string(),
        });
    }
    if to != here && !cluster.is_alive(to) {
        return Err(MoveError::NodeNotAlive {
            node: to.to_string(),
        });
    }
    let mcfg = &node.config.cluster.migration;
    let mode = mode.unwrap_or(mcfg.mode.parse().unwrap_or_default());
    let timeout = Duration::from_millis(mcfg.rpc_timeout_ms);
    let patience = Duration::from_millis(mcfg.live_match_ms);
    let started = Instant::now();
    // 1. Prepare the target: the camera in its hub (held or relayed), its sockets.
    let mut target = None;
    if to != here {
        let remote = RemoteLive {
            node: to.to_string(),
            session: info.id.clone(),
            cluster: cluster.clone(),
            // Its Start waits up to `live_match_ms` for the last packets.
            timeout: timeout + patience,
            watchdog: CancellationToken::new(),
            pause_gen: Default::default(),
            pause_lock: Default::default(),
            last: Default::default(),
        };
        let spec = PrepareSpec {
            session: info.id.clone(),
            from: here.clone(),
            camera,
            start_ms: 0,
            end_ms: None,
            client: info.client,
            dests: wire_dests(node, &cluster, &play.outs),
            mode,
            cname: node.config.node.id.clone(),
            position_ms: 0,
            live: true,
        };
        match remote.call(MigrationCall::Prepare(spec)).await {
            Ok(MigrationReply::Ready) => target = Some(remote),
            Ok(other) => {
                remote.release();
                return Err(MoveError::UnexpectedAnswer {
                    node: to.to_string(),
                    call: "Prepare",
                    answer: format!("{other:?}"),
                });
            }
            Err(e) => {
                // Nothing was stopped: the viewer plays on as if nothing happened.
                remote.release();
                return Err(MoveError::NotPrepared {
                    node: to.to_string(),
                    source: Box::new(e),
                });
            }
        }
    }
    let prepare_ms = started.elapsed().as_secs_f64() * 1000.0;
    // 2. Stop the current sender after its last packet and take the viewer's state.
    let (handoff, reader_here) = match std::mem::replace(&mut play.sender, LiveSender::None) {
        LiveSender::Local(p) => match p.stop().await {
            Some(pumped) => (
                pumped.reader.handoff(pumped.last_sent_us),
                Some(pumped.reader),
            ),
            None => {
                if let Some(t) = target {
                    t.release();
                }
                info.cancel.cancel();
                return Err(MoveError::SenderFailed);
            }
        },
        LiveSender::Remote(r) => {
            let session_id = info.id.clone();
            match r
                .call(MigrationCall::StopLive {
                    session: session_id,
                })
                .await
            {
                Ok(MigrationReply::StoppedLive(h)) => {
                    r.release();
                    (h, None)
                }
                other => {
                    // The sender there goes on: nothing moved.
                    play.sender = LiveSender::Remote(r);
                    if let Some(t) = target {
                        t.release();
                    }
                    return Err(MoveError::NotStopped {
                        node: from,
                        answer: format!("{other:?}"),
                    });
                }
            }
        }
        LiveSender::None => return Err(MoveError::BetweenSenders),
    };
    let gap_from = handoff.last_sent_us;
    // 3. Start the new sender right after the last packet sent.
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
                watch(
                    node,
                    &cluster,
                    to,
                    &info,
                    super::heartbeat::Last::Live(t.last.clone()),
                    t.watchdog.clone(),
                );
                play.sender = LiveSender::Remote(t);
            }
            other => {
                t.release();
                failed = Some(MoveError::LiveNotStarted {
                    node: to.to_string(),
                    here: here.clone(),
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
    if let Some(e) = failed {
        return Err(e);
    }
    let sent = (gap_from, first_sent);
    Ok(committed(
        node,
        &info,
        (from, to, &here),
        mode,
        sent,
        prepare_ms,
        started,
    ))
}
