//! A playback session's sender: this node's paced task or, after a migration, the node the
//! session moved to (a `playback::sender::RemoteSender`). The RTSP methods (`playback_methods`)
//! start and stop it without knowing which; what survives a stop (the tracks' RTP
//! identities and the resume cursor) goes back to the session core (`Core`), which also
//! holds the presentation window a new run is started with.

use crate::playback::request::PlaybackRequest;
use crate::playback::sender::RemoteSender;
use crate::playback::task::{self, Cursor, PlayParams, Sink, Stopped, TcpOut, TrackOut};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vigil_proto::sdp::SessionDescription;
use vigil_session::{Handback, SenderWindow};

/// A playback session's sender and its outputs; survives PAUSE.
pub struct Playback {
    pub req: PlaybackRequest,
    /// The recording's SDP: a migrated sender's state is read back against it.
    pub sdp: SessionDescription,
    pub running: Option<(CancellationToken, JoinHandle<Stopped>)>,
    /// TCP sessions: the task's output, drained by the connection task.
    pub tcp_rx: Option<mpsc::Receiver<TcpOut>>,
    pub udp: Vec<task::UdpOut>,
    /// Stops the tasks that watch the client's UDP RTCP (keepalive).
    pub rtcp_watch: CancellationToken,
    /// The node sending this session's media after a migration (None: this node).
    pub remote: Option<Box<dyn RemoteSender>>,
    /// The bitrate of the segment it starts in: the session's rate in the node's report
    /// until the sender has measured one.
    pub expected_bps: Option<f64>,
}

/// Where a stopped sender left the pacing line, for a handoff that continues it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handoff {
    pub anchor: Option<crate::handoff::Anchor>,
    pub last_sent_us: Option<i64>,
}

impl Playback {
    /// Stop everything at once (session end); the task sends nothing more.
    pub fn abort(self) {
        if let Some((cancel, _)) = &self.running {
            cancel.cancel();
        }
        if let Some(r) = self.remote {
            r.release();
        }
        self.rtcp_watch.cancel();
    }

    /// Whether media is being sent now (here or by the node the session migrated to).
    pub fn is_running(&self) -> bool {
        self.running.is_some() || self.remote.as_ref().is_some_and(|r| r.running())
    }

    /// Stop the running sender (PAUSE, seek, teardown, a move): its state for the next
    /// PLAY (None when no sender ran) and where its pacing line was. The sender may be
    /// this node's task or the node the session migrated to.
    pub async fn stop(&mut self) -> (Option<Handback<Cursor>>, Handoff) {
        if let Some((cancel, handle)) = self.running.take() {
            cancel.cancel();
            return match handle.await {
                Ok(stopped) => (
                    Some(Handback {
                        tracks: stopped.tracks,
                        resume: stopped.resume,
                    }),
                    Handoff {
                        anchor: stopped.anchor,
                        last_sent_us: stopped.last_sent_us,
                    },
                ),
                Err(_) => (None, Handoff::default()),
            };
        }
        let Some(remote) = self.remote.as_mut() else {
            return (None, Handoff::default());
        };
        match remote.stop(&self.sdp, &self.req.camera).await {
            Ok(Some(s)) => (
                Some(Handback {
                    tracks: s.tracks,
                    resume: s.resume,
                }),
                Handoff {
                    anchor: s.anchor,
                    last_sent_us: s.last_sent_us,
                },
            ),
            Ok(None) => (None, Handoff::default()),
            Err(e) => {
                // The sending node is gone: continue from its last heartbeat, here.
                tracing::warn!(node = %remote.node(), error = %e, "migrated sender lost: taking the session back");
                let last = remote.last_state(&self.sdp, &self.req.camera).await;
                if let Some(r) = self.remote.take() {
                    r.release();
                }
                let handback = last.map(|s| Handback {
                    tracks: s.tracks,
                    resume: s.resume,
                });
                (handback, Handoff::default())
            }
        }
    }

    /// The sender's parameters for a run from `start` in the presentation's `window`.
    pub fn params(
        &self,
        node: &crate::node::Node,
        window: SenderWindow,
        start: Cursor,
        anchor: Option<crate::handoff::Anchor>,
    ) -> PlayParams {
        PlayParams {
            start,
            scale: window.scale,
            keyframes_only: window.keyframes_only,
            end_ms: window.end_ms,
            range_end_only: window.range_end_only,
            camera: self.req.camera.clone(),
            cname: node.config.node.id.clone(),
            anchor,
            progress: None,
            first_sent: None,
        }
    }

    /// Start sending: on the node the session migrated to if any (falling back to this one
    /// if that node fails), else here.
    pub async fn start(
        &mut self,
        node: &crate::node::Node,
        library: crate::library::Library,
        tracks: Vec<TrackOut>,
        params: PlayParams,
        sink: Sink,
        info: Arc<crate::node::SessionInfo>,
    ) -> Option<i64> {
        if let Some(remote) = self.remote.as_mut() {
            match remote.start(&tracks, &params).await {
                Ok(first) => return first,
                Err(e) => {
                    tracing::warn!(node = %remote.node(), error = %e, "migrated sender failed to start: sending from this node");
                    if let Some(r) = self.remote.take() {
                        r.release();
                    }
                    *info.media_node.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
            }
        }
        let cancel = CancellationToken::new();
        let handle = node.tasks.spawn(task::run(
            library,
            tracks,
            params,
            sink,
            info,
            cancel.clone(),
        ));
        self.running = Some((cancel, handle));
        None
    }
}
