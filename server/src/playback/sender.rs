//! A playback session's sender and the outputs it writes to: this node's paced task or,
//! after a migration, the node the session moved to (a [`RemoteSender`], which migration
//! implements: the RTSP methods start and stop the sender without knowing which, and
//! `migrate` moves it without naming the RTSP code). What survives a stop (the tracks' RTP
//! identities and the resume cursor) goes back to the session core, which also holds the
//! presentation window a new run is started with.

use crate::node::command::MoveError;
use crate::playback::request::PlaybackRequest;
use crate::playback::task::{self, Cursor, PlayParams, Sink, Stopped, TcpOut, TrackOut};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vigil_proto::sdp::SessionDescription;
use vigil_session::{Handback, SenderWindow};

/// A stopped sender's state, resolved against this node's index.
pub struct Resumed {
    pub tracks: Vec<TrackOut>,
    pub resume: Option<Cursor>,
    pub anchor: Option<crate::handoff::Anchor>,
    pub last_sent_us: Option<i64>,
}

/// The node sending a playback session's media, seen from the node that steers it.
pub trait RemoteSender: Send + Sync {
    /// The sending node's id.
    fn node(&self) -> &str;
    /// A sender runs there now (false while paused).
    fn running(&self) -> bool;
    /// Stop the sender there and get its exact state back (None: nothing ran).
    fn stop<'a>(
        &'a mut self,
        sdp: &'a SessionDescription,
        camera: &'a str,
    ) -> BoxFuture<'a, Result<Option<Resumed>, MoveError>>;
    /// The state of the sending node's last heartbeat (the node is gone).
    fn last_state<'a>(
        &'a self,
        sdp: &'a SessionDescription,
        camera: &'a str,
    ) -> BoxFuture<'a, Option<Resumed>>;
    /// Start the sender there; its first frame's wall time (µs) once it went out.
    fn start<'a>(
        &'a mut self,
        tracks: &'a [TrackOut],
        params: &'a PlayParams,
    ) -> BoxFuture<'a, Result<Option<i64>, MoveError>>;
    /// Forget the session there (in the background: the session goes on without it).
    fn release(self: Box<Self>);
}

/// Who sends a playback's media: this node's paced task, the node the session moved to, or
/// nobody (paused here).
pub type PlaybackSender = crate::sender::Sender<LocalRun, Box<dyn RemoteSender>>;

/// This node's paced sender task.
pub struct LocalRun {
    cancel: CancellationToken,
    handle: JoinHandle<Stopped>,
}

/// A playback session's sender and its outputs; survives PAUSE.
pub struct Playback {
    pub req: PlaybackRequest,
    /// The recording's SDP: a migrated sender's state is read back against it.
    pub sdp: SessionDescription,
    /// Only through the methods below: a move hands the remote part over, the rest is
    /// started and stopped here.
    sender: PlaybackSender,
    /// TCP sessions: the task's output, drained by the connection task.
    pub tcp_rx: Option<mpsc::Receiver<TcpOut>>,
    pub udp: Vec<task::UdpOut>,
    /// Stops the tasks that watch the client's UDP RTCP (keepalive).
    pub rtcp_watch: CancellationToken,
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
    /// A playback of `req` that sends nothing yet; `expected_bps`: the bitrate of the
    /// segment it starts in.
    pub fn new(req: PlaybackRequest, sdp: SessionDescription, expected_bps: Option<f64>) -> Self {
        Playback {
            req,
            sdp,
            sender: PlaybackSender::None,
            tcp_rx: None,
            udp: Vec::new(),
            rtcp_watch: CancellationToken::new(),
            expected_bps,
        }
    }

    /// The node sending the media after a move (None: this node, or nobody while paused
    /// here).
    pub fn remote_node(&self) -> Option<&str> {
        self.sender.remote().map(|r| r.node())
    }

    /// The handle on the node the session moved to, taken out (a move releases it once the
    /// next sender runs; a take-back releases it at once).
    pub fn take_remote(&mut self) -> Option<Box<dyn RemoteSender>> {
        match self.sender.take() {
            PlaybackSender::Remote(r) => Some(r),
            other => {
                self.sender = other;
                None
            }
        }
    }

    /// Where the media goes from the next `start`: `Some`, the node a move chose (paused
    /// there until started); `None`, this node. A run going on here is never dropped: it
    /// keeps sending, and a handle given meanwhile is released.
    pub fn set_remote(&mut self, remote: Option<Box<dyn RemoteSender>>) {
        match (&self.sender, remote) {
            (PlaybackSender::Local(_), Some(r)) => r.release(),
            (PlaybackSender::Local(_), None) => {}
            (_, Some(r)) => {
                if let PlaybackSender::Remote(old) = self.sender.take() {
                    old.release();
                }
                self.sender = PlaybackSender::Remote(r);
            }
            (_, None) => {
                if let PlaybackSender::Remote(old) = self.sender.take() {
                    old.release();
                }
            }
        }
    }

    /// Stop everything at once (session end); the task sends nothing more.
    pub fn abort(self) {
        match self.sender {
            PlaybackSender::Local(run) => run.cancel.cancel(),
            PlaybackSender::Remote(r) => r.release(),
            PlaybackSender::None => {}
        }
        self.rtcp_watch.cancel();
    }

    /// Whether media is being sent now (here or by the node the session migrated to).
    pub fn is_running(&self) -> bool {
        match &self.sender {
            PlaybackSender::Local(_) => true,
            PlaybackSender::Remote(r) => r.running(),
            PlaybackSender::None => false,
        }
    }

    /// Stop the running sender (PAUSE, seek, teardown, a move): its state for the next
    /// PLAY (None when no sender ran) and where its pacing line was. The sender may be
    /// this node's task or the node the session migrated to; a stopped remote sender stays
    /// the session's (paused there), a stopped local one leaves `None`.
    pub async fn stop(&mut self) -> (Option<Handback<Cursor>>, Handoff) {
        let run = match self.sender.take() {
            PlaybackSender::Local(run) => run,
            other => {
                self.sender = other;
                return self.stop_remote().await;
            }
        };
        run.cancel.cancel();
        match run.handle.await {
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
        }
    }

    /// Stop the node the session moved to (if it sends now).
    async fn stop_remote(&mut self) -> (Option<Handback<Cursor>>, Handoff) {
        let PlaybackSender::Remote(remote) = &mut self.sender else {
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
                if let PlaybackSender::Remote(r) = self.sender.take() {
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
            payload_max: node.config.rtsp.rtp_payload_max(),
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
        if let PlaybackSender::Remote(remote) = &mut self.sender {
            match remote.start(&tracks, &params).await {
                Ok(first) => return first,
                Err(e) => {
                    tracing::warn!(node = %remote.node(), error = %e, "migrated sender failed to start: sending from this node");
                    if let PlaybackSender::Remote(r) = self.sender.take() {
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
        self.sender = PlaybackSender::Local(LocalRun { cancel, handle });
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A remote sender that counts its releases.
    struct Fake(&'static str, Arc<AtomicUsize>);

    impl RemoteSender for Fake {
        fn node(&self) -> &str {
            self.0
        }
        fn running(&self) -> bool {
            false
        }
        fn stop<'a>(
            &'a mut self,
            _: &'a SessionDescription,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<Resumed>, MoveError>> {
            Box::pin(async { Ok(None) })
        }
        fn last_state<'a>(
            &'a self,
            _: &'a SessionDescription,
            _: &'a str,
        ) -> BoxFuture<'a, Option<Resumed>> {
            Box::pin(async { None })
        }
        fn start<'a>(
            &'a mut self,
            _: &'a [TrackOut],
            _: &'a PlayParams,
        ) -> BoxFuture<'a, Result<Option<i64>, MoveError>> {
            Box::pin(async { Ok(None) })
        }
        fn release(self: Box<Self>) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn playback() -> Playback {
        let req = PlaybackRequest {
            camera: "c".into(),
            start_ms: 0,
            end_ms: None,
        };
        Playback::new(req, SessionDescription::default(), None)
    }

    /// A move hands the remote part over and back without ever dropping a handle unreleased.
    #[test]
    fn the_remote_sender_is_handed_over_and_released_once() {
        let released = Arc::new(AtomicUsize::new(0));
        let mut pb = playback();
        assert_eq!(pb.remote_node(), None);
        assert!(pb.take_remote().is_none() && !pb.is_running());
        pb.set_remote(Some(Box::new(Fake("b", released.clone()))));
        assert_eq!(pb.remote_node(), Some("b"));
        // Replacing it releases the one before.
        pb.set_remote(Some(Box::new(Fake("c", released.clone()))));
        assert_eq!(
            (pb.remote_node(), released.load(Ordering::Relaxed)),
            (Some("c"), 1)
        );
        let taken = pb.take_remote().expect("the handle on c");
        assert_eq!((taken.node(), pb.remote_node()), ("c", None));
        pb.set_remote(Some(taken));
        // Coming home releases it; so does the session's end.
        pb.set_remote(None);
        assert_eq!(
            (pb.remote_node(), released.load(Ordering::Relaxed)),
            (None, 2)
        );
        pb.set_remote(Some(Box::new(Fake("d", released.clone()))));
        pb.abort();
        assert_eq!(released.load(Ordering::Relaxed), 3);
    }
}
