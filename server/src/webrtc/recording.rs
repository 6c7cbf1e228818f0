//! A WebRTC viewer's recording: RTSP playback's sender (`playback::task`) run, stopped and
//! run again as the viewer steers it through its WHEP resource. What a control means is
//! `vigil_session::steer`'s to decide; this is the part with tasks: the running sender, its
//! stop (which hands back the tracks and the position), the next start.
//!
//! The sender writes into a channel the peer reads; the tracks it hands back at a stop keep
//! the sequence numbers going, so a browser sees one RTP stream through every seek, pause
//! and Scale change (the peer redraws the timestamp line: `steer::Retime`).

use crate::library::Library;
use crate::node::SessionInfo;
use crate::playback::task::{self, Cursor, PlayParams, Stopped, TcpOut, TrackOut};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;
use vigil_session::{Act, Control, Steer, SteerError, SteerState};

/// A control on its way to the peer, with where a seek lands (read by the API before it is
/// sent, so a seek to nothing is refused without stopping what plays).
pub struct Command {
    pub control: Control,
    pub cursor: Option<Cursor>,
    pub reply: oneshot::Sender<Result<SteerState, super::WhepError>>,
}

/// What a run of the sender is given besides its window and cursor.
pub struct Template {
    pub camera: String,
    pub cname: String,
    pub payload_max: usize,
}

/// A recording's viewer before it connects: what its first run plays.
pub struct Plan {
    pub library: Library,
    pub tracks: Vec<TrackOut>,
    pub template: Template,
    pub steer: Steer,
    pub start: Cursor,
    /// Where the playback is, for the resource's GET (written at every change).
    pub shown: Shown,
}

/// A recording's steer state as the API reads it without asking the peer.
pub type Shown = Arc<std::sync::Mutex<SteerState>>;

struct Run {
    stop: CancellationToken,
    done: JoinHandle<Stopped>,
    rx: mpsc::Receiver<TcpOut>,
}

/// What the peer is told by [`Recording::next`].
pub enum Next {
    Out(TcpOut),
    /// The sender ran to the end (the peer stays: a seek plays again).
    Ended,
}

pub struct Recording {
    library: Library,
    template: Template,
    steer: Steer,
    shown: Shown,
    /// The tracks while no sender runs (a running sender holds them).
    tracks: Option<Vec<TrackOut>>,
    /// Where a resume starts: the stopped sender's next frame.
    resume: Option<Cursor>,
    run: Option<Run>,
    info: Arc<SessionInfo>,
    cancel: CancellationToken,
}

impl Recording {
    /// The connected viewer's recording, playing from the plan's start (`setup` gives the
    /// tracks their identities first).
    pub fn start(
        mut plan: Plan,
        setup: impl FnOnce(&mut [TrackOut]),
        info: Arc<SessionInfo>,
        cancel: CancellationToken,
    ) -> Recording {
        setup(&mut plan.tracks);
        let mut rec = Recording {
            library: plan.library,
            template: plan.template,
            steer: plan.steer,
            shown: plan.shown,
            tracks: Some(plan.tracks),
            resume: None,
            run: None,
            info,
            cancel,
        };
        rec.run_from(plan.start);
        rec
    }

    pub fn state(&self) -> SteerState {
        self.steer.state()
    }

    pub fn carries_audio(&self) -> bool {
        self.steer.carries_audio()
    }

    /// Starts a sender at `cursor` with the steer's window.
    fn run_from(&mut self, cursor: Cursor) {
        let Some(tracks) = self.tracks.take() else {
            return;
        };
        let window = self.steer.sender_window();
        let params = PlayParams {
            start: cursor,
            scale: window.scale,
            keyframes_only: window.keyframes_only,
            end_ms: window.end_ms,
            range_end_only: window.range_end_only,
            camera: self.template.camera.clone(),
            cname: self.template.cname.clone(),
            payload_max: self.template.payload_max,
            anchor: None,
            progress: None,
            first_sent: None,
        };
        let (tx, rx) = mpsc::channel(32);
        let stop = self.cancel.child_token();
        let done = tokio::spawn(task::run(
            self.library.clone(),
            tracks,
            params,
            task::Sink::Tcp(tx),
            self.info.clone(),
            stop.clone(),
        ));
        self.run = Some(Run { stop, done, rx });
    }

    /// Stops the running sender and takes its tracks and position back.
    async fn stop(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        run.stop.cancel();
        self.stopped(run.done.await);
    }

    fn stopped(&mut self, r: Result<Stopped, tokio::task::JoinError>) {
        match r {
            Ok(s) => {
                self.tracks = Some(s.tracks);
                self.resume = s.resume;
            }
            // The sender panicked: nothing to continue from; the session ends with it.
            Err(e) => {
                tracing::error!("playback sender failed: {e}");
                self.cancel.cancel();
            }
        }
    }

    /// The sender's next output; pending while none runs.
    pub async fn next(&mut self) -> Next {
        let Some(run) = self.run.as_mut() else {
            return std::future::pending().await;
        };
        match run.rx.recv().await {
            Some(out) => Next::Out(out),
            None => {
                if let Some(run) = self.run.take() {
                    self.stopped(run.done.await);
                }
                self.steer.ended();
                self.show();
                info!(camera = %self.template.camera, "the recording (or its range) ended");
                Next::Ended
            }
        }
    }

    /// Carries `control` out: the steer decides, the sender is stopped and started as it
    /// says. Whether a sender was started again (the peer redraws its timestamp lines).
    pub async fn control(
        &mut self,
        control: Control,
        cursor: Option<Cursor>,
    ) -> Result<bool, SteerError> {
        let act = self.steer.decide(control)?;
        if act != Act::Nothing {
            self.stop().await;
        }
        self.steer.commit(control);
        self.show();
        let from = match act {
            Act::Nothing | Act::Stop => return Ok(false),
            Act::Restart => self.resume.clone(),
            // The API resolves a seek's position before it sends it.
            Act::StartAt => cursor.or_else(|| self.resume.clone()),
        };
        match from {
            Some(c) => {
                self.run_from(c);
                Ok(true)
            }
            None => {
                self.steer.ended();
                self.show();
                Err(SteerError::Ended)
            }
        }
    }

    fn show(&self) {
        *self.shown.lock().unwrap_or_else(|p| p.into_inner()) = self.steer.state();
    }
}
