//! Live viewers hosted here (issue 7 §1, "live UDP viewers move the same way"): the steering
//! node keeps the viewer's RTSP connection, this node sends its `live/<camera>` from its own
//! hub — the camera is held here, or this node becomes an edge relaying it from its holder —
//! continuing the viewer's RTP identity right after the last packet the previous sender
//! sent (`crate::live::handoff`).

use super::{failed, Host, Reply};
use crate::handoff::{MigrationReply, PrepareSpec, SessionStatus};
use crate::live::handoff::LiveHandoff;
use crate::live_sender::{LivePump, Progress};
use crate::node::{PathEntry, SessionInfo, SessionKindView};
use crate::playback::task::UdpOut;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::info;

pub(super) struct HostedLive {
    info: Arc<SessionInfo>,
    path: Arc<PathEntry>,
    outs: Vec<UdpOut>,
    pump: Option<LivePump>,
    /// The viewer's state, refreshed by its pump: the heartbeat answer carries it home.
    progress: Arc<Mutex<Option<LiveHandoff>>>,
    pub(super) touched: Instant,
}

impl Host {
    /// Gets the camera into this node's hub (held here or relayed) and the sockets ready;
    /// answers once the hub holds a keyframe.
    pub async fn prepare_live(&self, spec: PrepareSpec) -> Reply {
        self.fault_stall(&spec.session).await;
        if self.lives().contains_key(&spec.session) {
            return failed(format!("session {} is already hosted here", spec.session));
        }
        let name = format!("live/{}", spec.camera);
        let cluster = self.cluster.upgrade();
        let path =
            match crate::ingest::relay::here_or_relayed(&self.node, cluster.as_ref(), &spec.camera)
            {
                Ok(p) => p,
                Err(e) => return failed(e),
            };
        let wait = Duration::from_millis(self.node.config.cluster.migration.rpc_timeout_ms);
        let deadline = tokio::time::Instant::now() + wait.mul_f64(0.8);
        if !path.stream.wait_keyframe(deadline).await {
            return failed(format!("{name} has no keyframe here yet"));
        }
        let outs = match self.bind_outs(&spec).await {
            Ok(o) => o,
            Err(e) => return failed(e),
        };
        let info = Arc::new(SessionInfo::new(
            spec.session.clone(),
            name,
            SessionKindView::Play,
            spec.client,
            CancellationToken::new(),
        ));
        *info.transport.lock().unwrap_or_else(|p| p.into_inner()) =
            format!("udp ({} source, steered by {})", spec.mode, spec.from);
        *info.steered_by.lock().unwrap_or_else(|p| p.into_inner()) = Some(spec.from.clone());
        self.node.register_session(info.clone());
        info!(session = %spec.session, from = %spec.from, camera = %spec.camera, mode = %spec.mode, "migration: live viewer prepared");
        self.lives().insert(
            spec.session.clone(),
            HostedLive {
                info,
                path,
                outs,
                pump: None,
                progress: Arc::default(),
                touched: Instant::now(),
            },
        );
        MigrationReply::Ready
    }

    /// Continues the viewer from `handoff`; answers once its first packet left.
    pub async fn start_live(&self, session: &str, handoff: LiveHandoff) -> Reply {
        let stream = {
            let mut g = self.lives();
            let Some(h) = g.get_mut(session) else {
                return failed(format!("session {session} is not prepared here"));
            };
            if h.pump.is_some() {
                return failed(format!("session {session} is already running here"));
            }
            h.touched = Instant::now();
            h.path.stream.clone()
        };
        // The previous sender's last packets reach this hub a moment after they left it (a
        // relay's latency): wait for them up to `live_match_ms`, then join at a keyframe.
        let patience = Duration::from_millis(self.node.config.cluster.migration.live_match_ms);
        let (reader, joined) =
            crate::migrate::steer_live::continue_here(stream, &handoff, patience).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut g = self.lives();
            let Some(h) = g.get_mut(session) else {
                return failed(format!("session {session} was released"));
            };
            // Reported once per lease (not per heartbeat): a take-back needs a packet
            // still in the steering node's ring, which holds seconds, and each report
            // digests the last packets of every track.
            let every = Duration::from_millis(self.node.config.cluster.migration.lease_ms);
            h.pump = Some(LivePump::spawn(
                self.node.clone(),
                h.info.clone(),
                reader,
                h.outs.clone(),
                Some(tx),
                Some(Progress {
                    state: h.progress.clone(),
                    every,
                }),
            ));
        }
        info!(session, ?joined, "migration: live viewer continued here");
        MigrationReply::Started {
            first_sent_us: crate::migrate::first_sent(rx).await,
        }
    }

    /// Stops sending the viewer and gives its state back.
    pub async fn stop_live(&self, session: &str) -> Reply {
        let pump = {
            let mut g = self.lives();
            let Some(h) = g.get_mut(session) else {
                return failed(format!("session {session} is not hosted here"));
            };
            h.touched = Instant::now();
            h.pump.take()
        };
        let Some(pump) = pump else {
            return failed(format!("session {session} is not running here"));
        };
        match pump.stop().await {
            Some(p) => MigrationReply::StoppedLive(p.reader.handoff(p.last_sent_us)),
            None => failed("the live sender task failed"),
        }
    }

    /// The steering node forwards its viewer's PAUSE, or the PLAY that resumes it.
    pub fn pause_live(&self, session: &str, paused: bool) -> Reply {
        let mut g = self.lives();
        let Some(h) = g.get_mut(session) else {
            return failed(format!("session {session} is not hosted here"));
        };
        h.touched = Instant::now();
        match &h.pump {
            Some(p) => {
                p.set_paused(paused);
                info!(
                    session,
                    paused, "migration: live viewer paused or resumed by its client"
                );
                MigrationReply::Done
            }
            None => failed(format!("session {session} is not running here")),
        }
    }

    /// The heartbeat's answer for a live viewer hosted here, if it is.
    pub(super) fn live_status(&self, session: &str) -> Option<SessionStatus> {
        let mut g = self.lives();
        let h = g.get_mut(session)?;
        h.touched = Instant::now();
        let ended = h.pump.as_ref().is_some_and(LivePump::is_finished);
        let live = h.progress.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Some(SessionStatus {
            session: session.to_string(),
            hosted: true,
            running: h.pump.is_some() && !ended,
            ended,
            progress: None,
            live,
        })
    }

    /// Forgets a live viewer (its sender stops without a BYE: it may go on elsewhere).
    pub(super) fn release_live(&self, session: &str) -> bool {
        let Some(h) = self.lives().remove(session) else {
            return false;
        };
        if let Some(p) = h.pump {
            tokio::spawn(p.stop());
        }
        self.node.unregister_session(&h.info.id);
        info!(session, "migration: live viewer released");
        true
    }
}
